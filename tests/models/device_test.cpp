// The models' device kernels on the emulated device (models/{loss,rope,adamw}_kernels.h): the
// model's loss, RoPE and AdamW against the CPU loops, bit for bit (cases: tests/models/device_cases.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "models/adamw.h"
#include "models/device_cases.h"
#include "models/transformer.h"
#include "runtime/device/emulated_check.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using testing::expect_same;
using ::testing::HasSubstr;
using testing::kDeviceDTypes;
using testing::on_cpu_and_emulated;
using testing::rnd;

class DeviceModels : public ::testing::TestWithParam<DType> {};

// The models' loss, RoPE and tp's loss on one rank as device kernels give the CPU's bits.
TEST_P(DeviceModels, EveryCaseEqualsTheCpuBitForBit) {
  testing::model_device_cases(GetParam(),
                              [](const std::string& what, const testing::OpOutputs& f) { expect_same(what, f); });
}

// The model's loss (models::cross_entropy_sum): f64 rows on the device, added on the host in row
// order -- the same sum, token count and gradient as the CPU loop.
TEST_P(DeviceModels, TheModelLossSumEqualsTheCpuLoop) {
  const DType dt = GetParam();
  const Tensor logits = rnd({11, 37}, 72, dt, -9.0, 9.0);
  const Tensor labels = Tensor::from_vector<std::int64_t>({36, 0, -100, 5, 5, -100, 18, 2, 9, 30, 1}, {11});
  const models::LossSum cpu = models::cross_entropy_sum(logits, labels, 13.0);
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const models::LossSum dev = models::cross_entropy_sum(logits, labels, 13.0);
  EXPECT_GT(device->stats().ops, 0);
  EXPECT_EQ(cpu.tokens, 9);
  EXPECT_EQ(dev.tokens, cpu.tokens);
  EXPECT_EQ(dev.sum, cpu.sum);  // exactly: the same f64 terms in the same order
  EXPECT_TRUE(dev.dlogits.host_stale());
  EXPECT_TRUE(bitwise_equal(cpu.dlogits, dev.dlogits));
}

// A shape-only training step's loss: shape-only labels with shape-only logits give a NaN sum and a
// shape-only gradient of the logits' shape; labels without numbers for logits that have them are
// refused.
TEST(ModelLoss, ShapeOnlyLabelsTakeTheShapeOnlyPath) {
  const Tensor logits = Tensor::shape_only({11, 37}, DType::f32);
  const Tensor labels = Tensor::from_vector<std::int64_t>({36, 0, -100, 5, 5, -100, 18, 2, 9, 30, 1}, {11});
  const models::LossSum with_numbers = models::cross_entropy_sum(logits, labels, 13.0);
  const models::LossSum without = models::cross_entropy_sum(logits, Tensor::shape_only({11}, DType::i64), 13.0);
  EXPECT_TRUE(std::isnan(without.sum));
  EXPECT_FALSE(without.dlogits.has_data());
  EXPECT_EQ(without.dlogits.shape(), with_numbers.dlogits.shape());
  EXPECT_THAT(
      [] {
        (void)models::cross_entropy_sum(rnd({11, 37}, 1, DType::f32, -1.0, 1.0), Tensor::shape_only({11}, DType::i64),
                                        13.0);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("hold no numbers for logits")));
}

// AdamW (models/adamw.h) with clipping, weight decay, a bf16 parameter beside an f32 one, plain
// and ZeRO-1 over 1 and 3 ranks: the norm, the parameters and the optimizer state after three
// steps are the CPU run's bit for bit, and the state lives on the device.
TEST(DeviceOptimizer, AdamWStepsEqualTheCpuLoop) {
  for (int ranks : {1, 3}) {
    for (bool zero : {false, true}) {
      struct Run {
        std::vector<std::vector<Tensor>> out;  // per rank: w, b, exp_avg.w, exp_avg_sq.b
        std::vector<double> norms;
      };
      const auto run = [&] {
        Run r;
        r.out.resize(static_cast<std::size_t>(ranks));
        r.norms.resize(static_cast<std::size_t>(ranks));
        spawn(
            [&](int rank) {
              tp::Parameter w, b;
              w.value = rnd({5, 7}, 80, DType::f32);
              b.value = rnd({7}, 81, DType::bf16);
              models::AdamWOptions o;
              o.lr = 0.05;
              o.weight_decay = 0.1;
              models::AdamW opt({{"w", &w}, {"b", &b}},
                                models::AdamW::Groups{new_group({rank}), new_group({rank}), ProcessGroup{}}, o, zero);
              for (int step = 0; step < 3; ++step) {
                const auto seed = static_cast<std::uint64_t>(90 + 10 * step + (zero ? rank : 0));
                w.grad = rnd({5, 7}, seed, DType::f32, -3.0, 3.0);
                b.grad = rnd({7}, seed + 1, DType::bf16, -3.0, 3.0);
                r.norms[static_cast<std::size_t>(rank)] = opt.step(step == 1 ? 1e9 : 0.5);  // clipped, then not
              }
              const auto st = opt.shard_state();
              r.out[static_cast<std::size_t>(rank)] = {w.value, b.value, st.at("exp_avg.w"), st.at("exp_avg_sq.b")};
            },
            ranks);
        return r;
      };
      const auto [cpu, dev, device] = on_cpu_and_emulated(run);
      const std::string what = std::to_string(ranks) + " rank(s)" + (zero ? ", ZeRO-1" : "");
      EXPECT_GE(device->stats().kernels, 3 * 2 * ranks) << what;  // an update per parameter and step
      for (int rank = 0; rank < ranks; ++rank) {
        const auto i = static_cast<std::size_t>(rank);
        EXPECT_EQ(cpu.norms[i], dev.norms[i]) << what;
        EXPECT_GT(cpu.norms[i], 0.5) << what;  // the last step was clipped
        if (!zero) {                           // (ZeRO-1 all-gathers the new values, on the host with the sim backend)
          EXPECT_TRUE(dev.out[i][0].host_stale()) << what << ": the parameter was written on the device";
          EXPECT_TRUE(dev.out[i][2].host_stale()) << what << ": the state lives on the device";
        }
        for (std::size_t k = 0; k < 4; ++k) {
          EXPECT_TRUE(bitwise_equal(cpu.out[i][k], dev.out[i][k])) << what << " rank " << rank << " tensor " << k;
        }
      }
    }
  }
}

TEST(DeviceErrors, LossLabelsOutsideTheVocabularyAreRefusedOnBothPaths) {
  const Tensor logits = rnd({3, 6}, 73, DType::f32);
  const Tensor labels = Tensor::from_vector<std::int64_t>({1, 6, -100}, {3});
  for (bool on_device : {false, true}) {
    auto device = std::make_shared<EmulatedDevice>();
    std::optional<ScopedComputeDevice> on;
    if (on_device) on.emplace(device);
    try {
      (void)models::cross_entropy_sum(logits, labels, 2.0);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("label 6 of token row 1 is outside the vocabulary [0, 6)"));
    }
    EXPECT_EQ(device->stats().ops, 0);  // refused before anything ran
  }
}

// --- the kernels' conversions ---------------------------------------------------------------

INSTANTIATE_TEST_SUITE_P(DTypes, DeviceModels, ::testing::ValuesIn(kDeviceDTypes),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace ranksim::runtime

// The device path of runtime/tensor/ops.h on the emulated device (runtime/device/emulated_device.h): every op
// against the CPU op, bit for bit (the emulated device runs the GPU's kernels in the CPU ops' sum
// order), in f32, bf16 and f16, on contiguous and strided inputs; residency and coherence between
// host and device; what stays on the CPU; errors; memory.
#include "runtime/device/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/device/device_cases.h"
#include "runtime/device/kernel.h"
#include "runtime/device/emulated_device.h"
#include "models/adamw.h"
#include "models/transformer.h"
#include "runtime/tensor/ops.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "tp/cross_entropy.h"

namespace ranksim::runtime {
namespace {

using ::testing::HasSubstr;

constexpr DType kDeviceDTypes[] = {DType::f32, DType::bf16, DType::f16};

Tensor rnd(const Shape& shape, std::uint64_t seed, DType dtype, double lo = -2.0, double hi = 2.0) {
  return Tensor::uniform(shape, seed, lo, hi, dtype);
}

// Records every charge, to check that both paths charge the same.
class Recorder final : public CostSink {
 public:
  void charge(const OpCost& c) override { costs.push_back(c); }
  std::vector<OpCost> costs;
};

// Runs f on the CPU and on a fresh emulated device; its tensors must be equal bit for bit, and
// the charges the same. Returns the device for further checks.
template <class F>
std::shared_ptr<EmulatedDevice> expect_same(const std::string& what, F&& f) {
  Recorder cpu_costs, dev_costs;
  std::vector<Tensor> cpu, dev;
  {
    ScopedCostSink sink(&cpu_costs);
    cpu = f();
  }
  auto device = std::make_shared<EmulatedDevice>();
  {
    ScopedComputeDevice on(device);
    ScopedCostSink sink(&dev_costs);
    dev = f();
  }
  EXPECT_GT(device->stats().ops, 0) << what << ": nothing ran on the device";
  EXPECT_EQ(cpu.size(), dev.size());
  for (std::size_t i = 0; i < cpu.size() && i < dev.size(); ++i) {
    EXPECT_TRUE(dev[i].host_stale()) << what << " output " << i << " is not a device tensor";
    EXPECT_TRUE(bitwise_equal(cpu[i], dev[i]))
        << what << " output " << i << ": " << cpu[i].str() << " vs " << dev[i].str();
  }
  EXPECT_EQ(cpu_costs.costs.size(), dev_costs.costs.size()) << what;
  for (std::size_t i = 0; i < cpu_costs.costs.size() && i < dev_costs.costs.size(); ++i) {
    EXPECT_EQ(std::string(cpu_costs.costs[i].op), std::string(dev_costs.costs[i].op)) << what;
    EXPECT_EQ(cpu_costs.costs[i].flops, dev_costs.costs[i].flops) << what;
    EXPECT_EQ(cpu_costs.costs[i].bytes, dev_costs.costs[i].bytes) << what;
  }
  return device;
}

// run() on the CPU, then again with a fresh emulated device installed.
template <class R>
struct CpuAndDevice {
  R cpu, dev;
  std::shared_ptr<EmulatedDevice> device;
};
template <class F>
auto on_cpu_and_emulated(F&& run) {
  CpuAndDevice<decltype(run())> r;
  r.cpu = run();
  r.device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(r.device);
  r.dev = run();
  return r;
}

class DeviceOps : public ::testing::TestWithParam<DType> {};

TEST_P(DeviceOps, EveryOpEqualsTheCpuOpBitForBit) {
  testing::device_op_cases(GetParam(), [](const std::string& what, const testing::OpOutputs& f) { expect_same(what, f); });
}

INSTANTIATE_TEST_SUITE_P(DTypes, DeviceOps, ::testing::ValuesIn(kDeviceDTypes),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// --- residency and coherence ----------------------------------------------------------------

TEST(DeviceResidency, AChainOfOpsStaysOnTheDeviceUntilTheHostReads) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor x = rnd({16, 32}, 30, DType::f32), w = rnd({32, 32}, 31, DType::f32);
  const Tensor ln_w = Tensor::ones({32}), ln_b = Tensor::zeros({32});
  Tensor h = x;
  for (int layer = 0; layer < 3; ++layer) h = gelu(matmul(layer_norm(h, ln_w, ln_b).y, w));
  const DeviceStats& s = device->stats();
  EXPECT_EQ(s.ops, 9);
  EXPECT_EQ(s.gemms, 3);
  EXPECT_EQ(s.uploads, 4) << "x, w, ln_w and ln_b once each";
  EXPECT_EQ(s.downloads, 0);
  EXPECT_TRUE(h.host_stale());
  const std::vector<float> host = h.to_vector<float>();
  EXPECT_EQ(s.downloads, 1);
  EXPECT_EQ(s.download_bytes, 16 * 32 * 4);
  EXPECT_FALSE(h.host_stale());
  (void)h.to_vector<float>();
  EXPECT_EQ(s.downloads, 1) << "a second read finds the host current";
  // A read does not make the device copy stale: the next op uses it in place.
  (void)gelu(h);
  EXPECT_EQ(s.uploads, 4);
}

TEST(DeviceResidency, AHostWriteIsUploadedBeforeTheNextOp) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor x = Tensor::full({4}, 1.0);
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), std::vector<float>(4, 2.0f));
  x.fill_(3.0);  // the host writes: the device copy is stale
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), std::vector<float>(4, 6.0f));
  x.set({1}, -1.0);
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), (std::vector<float>{6, -2, 6, 6}));
  x.data<float>()[2] = 5.0f;
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), (std::vector<float>{6, -2, 10, 6}));
  // A device output written by the host through a view: the whole storage is current again.
  const Tensor y = scale(x, 1.0);
  y.narrow(0, 0, 2).copy_(Tensor::zeros({2}));
  EXPECT_EQ(scale(y, 1.0).to_vector<float>(), (std::vector<float>{0, 0, 5, 3}));
  EXPECT_EQ(device->stats().uploads, 5);
}

// A write that lands later (as a collective's): the device waits for it before uploading.
class LateFill final : public PendingWrite {
 public:
  LateFill(Tensor t, float v) : t_(std::move(t)), v_(v) {}
  void wait() override {
    auto* p = static_cast<float*>(t_.raw_data_unsynchronized());
    for (std::int64_t i = 0; i < t_.numel(); ++i) p[i] = v_;
  }

 private:
  Tensor t_;
  float v_;
};

TEST(DeviceResidency, PendingWritesLandBeforeUploadAndAfterADeviceWrite) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor x = Tensor::zeros({3});
  x.set_pending_write(std::make_shared<LateFill>(x, 4.0f));
  EXPECT_EQ(scale(x, 0.5).to_vector<float>(), std::vector<float>(3, 2.0f));
  // A device output that a collective then overwrites: download first, then the write.
  const Tensor y = scale(x, 1.0);
  y.set_pending_write(std::make_shared<LateFill>(y, 7.0f));
  EXPECT_EQ(scale(y, 1.0).to_vector<float>(), std::vector<float>(3, 7.0f));
}

TEST(DeviceResidency, WhatStaysOnTheCpu) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  // f64, shape-only inputs and integer embeddings run on the CPU as before.
  const Tensor d = rnd({4, 4}, 40, DType::f64);
  const Tensor r = matmul(d, d);
  EXPECT_FALSE(r.host_stale());
  const Tensor s = matmul(Tensor::shape_only({4, 4}), Tensor::shape_only({4, 4}));
  EXPECT_FALSE(s.has_data());
  const Tensor table = Tensor::from_vector<std::int64_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(embedding(Tensor::from_vector<std::int64_t>({1}, {1}), table).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(device->stats().ops, 0);
}

TEST(DeviceResidency, MemoryIsReleasedWithTheLastTensor) {
  auto device = std::make_shared<EmulatedDevice>();
  {
    ScopedComputeDevice on(device);
    const Tensor x = rnd({64, 64}, 41, DType::bf16);
    const Tensor y = gelu(matmul(x, x));
    EXPECT_EQ(device->bytes_in_use(), 2u * 64 * 64 * 2);  // x's copy and y (the product is gone)
  }
  EXPECT_EQ(device->bytes_in_use(), 0u);
}

TEST(DeviceErrors, IndexErrorsAreTheCpuOpsErrors) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor w = rnd({5, 4}, 42, DType::f32);
  try {
    (void)embedding(Tensor::from_vector<std::int64_t>({1, 5}, {2}), w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("embedding: id 5 at position 1 is outside the table of 5 rows"));
  }
  try {
    (void)cross_entropy(w, Tensor::from_vector<std::int64_t>({0, 1, 3, 9, 2}, {5}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cross_entropy: target 9 of row 3 is outside [0, 4)"));
  }
  EXPECT_THROW((void)matmul(w, w), Error);  // shapes are checked before dispatch
}

// --- the losses outside runtime/tensor/ops.h ---------------------------------------------------------

// tp's vocab-parallel cross-entropy over p ranks, each with its slice of the vocabulary: the
// device runs the steps between the three all-reduces; losses, softmax, gradients and the
// virtual time are the CPU run's, bit for bit.
class DeviceVocabCrossEntropy : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(DeviceVocabCrossEntropy, EveryRankMatchesTheCpuRun) {
  const auto [p, dt] = GetParam();
  const std::int64_t n = 9, V = 48, vp = V / p;
  const Tensor logits = rnd({n, V}, 70, dt, -7.0, 7.0);
  // Targets on partition edges (first and last column of a slice) and inside.
  const Tensor targets = Tensor::from_vector<std::int64_t>({0, V - 1, vp - 1, vp % V, 5, 23, 24, 47, 30}, {n});
  const Tensor dloss = rnd({n}, 71, dt);
  struct Run {
    std::vector<std::vector<Tensor>> out;
    RunReport report;
  };
  const auto run = [&]() {
    Run r;
    r.out.resize(static_cast<std::size_t>(p));
    r.report = spawn(
        [&](int rank) {
          tp::CrossEntropyContext c;
          const Tensor loss = tp::vocab_parallel_cross_entropy(logits.narrow(1, rank * vp, vp), targets,
                                                               ProcessGroup(), c);
          r.out[static_cast<std::size_t>(rank)] = {loss, c.softmax, tp::vocab_parallel_cross_entropy_backward(dloss, c)};
        },
        p);
    return r;
  };
  const auto [cpu, dev, device] = on_cpu_and_emulated(run);
  EXPECT_GE(device->stats().ops, 2 * p);      // forward and backward, per rank
  EXPECT_GE(device->stats().kernels, 5 * p);  // four forward steps and the backward, per rank
  for (int rank = 0; rank < p; ++rank) {
    const auto& c = cpu.out[static_cast<std::size_t>(rank)];
    const auto& d = dev.out[static_cast<std::size_t>(rank)];
    ASSERT_EQ(c.size(), 3u);
    ASSERT_EQ(d.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(d[i].host_stale()) << "rank " << rank << " output " << i << " is not a device tensor";
      EXPECT_TRUE(bitwise_equal(c[i], d[i])) << "rank " << rank << " output " << i << ": " << c[i].str();
    }
  }
  // Every rank's loss is the same full-vocabulary loss.
  for (int rank = 1; rank < p; ++rank) {
    EXPECT_TRUE(bitwise_equal(dev.out[0][0], dev.out[static_cast<std::size_t>(rank)][0]));
  }
  EXPECT_EQ(cpu.report.makespan, dev.report.makespan);
  EXPECT_EQ(cpu.report.collectives.size(), dev.report.collectives.size());
}

INSTANTIATE_TEST_SUITE_P(TpSizesAndDTypes, DeviceVocabCrossEntropy,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::ValuesIn(kDeviceDTypes)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& tp_dtype) {
                           return "tp" + std::to_string(std::get<0>(tp_dtype.param)) + "_" +
                                  dtype_name(std::get<1>(tp_dtype.param));
                         });

// The model's loss (models::cross_entropy_sum): f64 rows on the device, added on the host in row
// order -- the same sum, token count and gradient as the CPU loop.
TEST_P(DeviceOps, TheModelLossSumEqualsTheCpuLoop) {
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
        if (!zero) {  // (ZeRO-1 all-gathers the new values, on the host with the sim backend)
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

TEST(DeviceKernels, HalfPrecisionConversionsMatchTheHostsForEveryPattern) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const std::uint16_t bf = b;
    float host = bf16_bits_to_f32(bf);
    float dev = kernels::load(&bf, DType::bf16, 0);
    ASSERT_EQ(kernels::float_bits(host), kernels::float_bits(dev)) << "bf16 " << bits;
    host = f16_bits_to_f32(b);
    dev = kernels::load(&b, DType::f16, 0);
    ASSERT_EQ(kernels::float_bits(host), kernels::float_bits(dev)) << "f16 " << bits;
  }
  // Narrowing: every f32 whose top 20 bits vary (ties, carries, subnormals, inf, NaN).
  for (std::uint32_t hi = 0; hi < (1u << 20); ++hi) {
    const std::uint32_t x = (hi << 12) | (hi & 0xfffu);
    const float v = kernels::bits_float(x);
    std::uint16_t out = 0;
    kernels::store(&out, DType::bf16, 0, v);
    ASSERT_EQ(out, f32_to_bf16_bits(v)) << std::hex << x;
    kernels::store(&out, DType::f16, 0, v);
    ASSERT_EQ(out, f32_to_f16_bits(v)) << std::hex << x;
  }
}

}  // namespace
}  // namespace ranksim::runtime

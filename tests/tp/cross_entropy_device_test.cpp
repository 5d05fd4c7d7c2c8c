// tp's vocab-parallel cross-entropy on the emulated device (tp/cross_entropy_kernels.h): every
// rank's results and the run's virtual time equal the CPU run's, bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/device/emulated_check.h"
#include "runtime/distributed/spawn.h"
#include "tp/cross_entropy.h"

namespace ranksim::runtime {
namespace {

using testing::expect_same;
using ::testing::HasSubstr;
using testing::kDeviceDTypes;
using testing::on_cpu_and_emulated;
using testing::rnd;

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
          const Tensor loss =
              tp::vocab_parallel_cross_entropy(logits.narrow(1, rank * vp, vp), targets, ProcessGroup(), c);
          r.out[static_cast<std::size_t>(rank)] = {loss, c.softmax,
                                                   tp::vocab_parallel_cross_entropy_backward(dloss, c)};
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

}  // namespace
}  // namespace ranksim::runtime

#include "sim/compute.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "sim/error.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

std::string shipped(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + name; }

// ring4's toy device: f32 10 TFLOP/s, bf16 40 TFLOP/s, 500 GB/s, 5 us launch overhead.
class ToyCompute : public ::testing::Test {
 protected:
  Topology topo = Topology::load_file(shipped("ring4.yaml"));
  ComputeModel model{topo};
};

TEST_F(ToyCompute, ArithmeticBoundKernelsCostFlopsOverPeak) {
  // 1e12 f32 FLOP over 1 MB: 100 ms of math against 2 us of memory traffic.
  EXPECT_EQ(model.cost(0, 1e12, 1e6, "f32"), Time::ms(100) + Time::us(5));
  // The same work in bf16 runs at its own peak.
  EXPECT_EQ(model.cost(0, 1e12, 1e6, "bf16"), Time::ms(25) + Time::us(5));
}

TEST_F(ToyCompute, MemoryBoundKernelsCostBytesOverBandwidth) {
  // 1e9 bytes at 500 GB/s = 2 ms; the 1e6 FLOP take 0.1 us.
  EXPECT_EQ(model.cost(3, 1e6, 1e9, "f32"), Time::ms(2) + Time::us(5));
}

TEST_F(ToyCompute, TheSlowerSideWinsAtTheRidge) {
  // Ridge point: 10e12 / 500e9 = 20 FLOP per byte. Just below and above it.
  EXPECT_EQ(model.cost(1, 19e9, 1e9, "f32"), Time::ms(2) + Time::us(5));
  EXPECT_EQ(model.cost(1, 21e9, 1e9, "f32"), Time::us(2100) + Time::us(5));
}

TEST_F(ToyCompute, AnEmptyKernelStillPaysTheLaunch) { EXPECT_EQ(model.cost(2, 0, 0, "f32"), Time::us(5)); }

TEST_F(ToyCompute, AnUnknownDtypeNamesTheKindAndWhatItHas) {
  try {
    model.cost(2, 100, 8, "i64");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device kind 'toy' (of node0.dev2)"));
    EXPECT_THAT(e.what(), HasSubstr("no peak FLOP/s for dtype 'i64'"));
    EXPECT_THAT(e.what(), HasSubstr("it has: bf16, f16, f32, f64"));
    EXPECT_THAT(e.what(), HasSubstr("device_kinds.toy.peak_flops in"));
    EXPECT_THAT(e.what(), HasSubstr("ring4.yaml"));
  }
  EXPECT_THROW(model.peak_flops(0, "fp8"), Error);
}

TEST_F(ToyCompute, DataMovementDoesNotNeedAPeak) {
  // A gather of int64 indices: no arithmetic, 1e9 bytes moved.
  EXPECT_EQ(model.cost(0, 0, 1e9, "i64"), Time::ms(2) + Time::us(5));
}

TEST_F(ToyCompute, AKernelLongerThanTheClockIsAnError) {
  EXPECT_THROW(model.cost(0, 1e26, 0, "f32"), Error);  // 1e13 s at 10 TFLOP/s
}

static_assert(!std::is_constructible_v<ComputeModel, Topology&&>);

TEST(ComputeModel, AnH100GemmRunsAtItsDenseBf16Peak) {
  const Topology topo = Topology::load_file(shipped("dgx-h100.yaml"));
  const ComputeModel model(topo);
  // C = A B with 8192^3 bf16: 2 * 8192^3 FLOP over (3 * 8192^2 * 2) bytes is far past the ridge.
  const double n = 8192;
  const double flops = 2 * n * n * n;
  const Time t = model.cost(7, flops, 3 * n * n * 2, "bf16");
  EXPECT_EQ(t, Time::from_seconds(flops / 989.4e12) + Time::us(3));
  EXPECT_NEAR(t.seconds(), 1.1113e-3 + 3e-6, 1e-6);  // ~1.1 ms
  EXPECT_DOUBLE_EQ(model.peak_flops(7, "fp8"), 1979e12);
}

}  // namespace
}  // namespace ranksim::sim

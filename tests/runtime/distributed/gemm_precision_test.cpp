// GEMM precision (runtime/tensor/cost.h GemmPrecisionScope): inside an fp8 scope the sim backend
// times a rank's GEMMs at its device kind's fp8 rate, per rank, and nothing else changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/backends/sim/sim_backend.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/engine.h"
#include "sim/topology.h"

namespace ranksim::runtime {
namespace {

const std::string kRoot = RANKSIM_SOURCE_DIR;

// dgx-h100 on the roofline (no kernel profile): a GEMM takes max(flops / peak[dtype], bytes / 3.35
// TB/s) + its launch overhead, with peak bf16 989.4 and fp8 1979 TFLOP/s (topologies/dgx-h100.yaml).
sim::Topology roofline_h100() {
  return sim::Topology::load_file(kRoot + "/topologies/dgx-h100.yaml", {"device_kinds.h100-sxm.kernel_profile=none"});
}

constexpr double kN = 8192;  // an 8192^3 GEMM: 1.1 TFLOP, compute-bound at either precision
constexpr double kFlops = 2 * kN * kN * kN;

Tensor gemm() {
  const Tensor a = Tensor::shape_only({8192, 8192}, DType::bf16);
  return matmul(a, a);
}

TEST(GemmPrecision, AnFp8ScopeTimesThatRanksGemmsAtTheFp8Peak) {
  const sim::Topology topo = roofline_h100();
  SpawnOptions so;
  so.topology = &topo;
  const RunReport rep = spawn(
      [&](int rank) {
        if (rank == 0) {
          const GemmPrecisionScope fp8(GemmPrecision::fp8);
          barrier().wait();  // rank 1 runs its GEMM while rank 0 is inside the scope
          (void)gemm();
        } else {
          barrier().wait();
          (void)gemm();
        }
      },
      2, so);
  // The same GEMM, launch and memory terms: the difference is the two peaks' times.
  const double fp8 = rep.compute_detail[0].time[static_cast<size_t>(sim::KernelClass::gemm)].seconds();
  const double bf16 = rep.compute_detail[1].time[static_cast<size_t>(sim::KernelClass::gemm)].seconds();
  EXPECT_NEAR(bf16 - fp8, kFlops / 989.4e12 - kFlops / 1979e12, 1e-9);
  EXPECT_GT(fp8, kFlops / 1979e12);
  // MFU counts each GEMM against the peak it ran at.
  EXPECT_NEAR(rep.compute_detail[0].peak_seconds, kFlops / 1979e12, 1e-12);
  EXPECT_NEAR(rep.compute_detail[1].peak_seconds, kFlops / 989.4e12, 1e-12);
}

TEST(GemmPrecision, ScopesNestAndOnlyGemmsChange) {
  const sim::Topology topo = roofline_h100();
  SpawnOptions so;
  so.topology = &topo;
  std::vector<double> gemm_s;
  double add_native = 0, add_fp8 = 0;
  spawn(
      [&](int) {
        auto timed = [](const auto& op) {
          const sim::Time t0 = sim::this_rank::now();
          op();
          return (sim::this_rank::now() - t0).seconds();
        };
        const Tensor x = Tensor::shape_only({4096, 4096}, DType::bf16);
        add_native = timed([&] { (void)add(x, x); });
        gemm_s.push_back(timed([] { (void)gemm(); }));  // native
        {
          const GemmPrecisionScope fp8(GemmPrecision::fp8);
          gemm_s.push_back(timed([] { (void)gemm(); }));  // fp8
          add_fp8 = timed([&] { (void)add(x, x); });
          {
            const GemmPrecisionScope native(GemmPrecision::native);
            gemm_s.push_back(timed([] { (void)gemm(); }));  // native again
          }
          gemm_s.push_back(timed([] { (void)gemm(); }));  // fp8 restored
        }
        gemm_s.push_back(timed([] { (void)gemm(); }));  // native after the scope
      },
      1, so);
  ASSERT_EQ(gemm_s.size(), 5u);
  EXPECT_LT(gemm_s[1], gemm_s[0]);
  EXPECT_EQ(gemm_s[2], gemm_s[0]);
  EXPECT_EQ(gemm_s[3], gemm_s[1]);
  EXPECT_EQ(gemm_s[4], gemm_s[0]);
  EXPECT_EQ(add_fp8, add_native);  // a memory-bound kernel is not a GEMM
}

// Each FP8 GEMM is followed by the quantisation of its input (detail::SimBackend::fp8_quantisation): a
// memory-bound kernel moving 6 bytes per value of the forward's activation (M x K) or of the
// backward's incoming gradient (M x N), on the roofline bytes / 3.35 TB/s + the 3 us launch.
TEST(GemmPrecision, AnFp8GemmQuantisesItsInputAfterwards) {
  const sim::Topology topo = roofline_h100();
  SpawnOptions so;
  so.topology = &topo;
  constexpr double m = 4096, n = 1024, k = 2048;
  const RunReport rep = spawn(
      [&](int rank) {
        const Tensor a = Tensor::shape_only({4096, 2048}, DType::bf16);
        const Tensor b = Tensor::shape_only({2048, 1024}, DType::bf16);
        const Tensor dc = Tensor::shape_only({4096, 1024}, DType::bf16);
        std::optional<GemmPrecisionScope> fp8;
        if (rank == 0) fp8.emplace(GemmPrecision::fp8);
        (void)matmul(a, b);
        (void)matmul_backward(dc, a, b);
      },
      2, so);
  const auto mem = static_cast<size_t>(sim::KernelClass::memory);
  EXPECT_EQ(rep.compute_detail[1].time[mem].seconds(), 0);  // bf16: no cast
  const double cast = 6 * m * k / 3.35e12 + 3e-6, cast_back = 6 * m * n / 3.35e12 + 3e-6;
  EXPECT_NEAR(rep.compute_detail[0].time[mem].seconds(), cast + cast_back, 1e-12);
  const OpCost fwd = detail::SimBackend::fp8_quantisation(sim::KernelShape{sim::KernelClass::gemm, 3, 5, 7, 11});
  EXPECT_STREQ(fwd.op, "fp8_cast");
  EXPECT_EQ(fwd.bytes, 6.0 * 3 * 5 * 11);
  EXPECT_EQ(fwd.flops, 0);
  EXPECT_EQ(fwd.shape.cls, sim::KernelClass::memory);
  sim::KernelShape back{sim::KernelClass::gemm, 3, 5, 7, 11};
  back.backward = true;
  EXPECT_EQ(detail::SimBackend::fp8_quantisation(back).bytes, 6.0 * 3 * 5 * 7);
}

TEST(GemmPrecision, OutsideARunTheScopeDoesNothing) {
  const GemmPrecisionScope fp8(GemmPrecision::fp8);
  const Tensor a = Tensor::ones({2, 2});
  EXPECT_EQ(matmul(a, a).to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

}  // namespace
}  // namespace ranksim::runtime

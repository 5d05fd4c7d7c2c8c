// ParallelMLP and ParallelAttention against the single-rank module, in fp32 and bf16.
//
// fp32 bounds, as in layers_test.cpp: a result whose sums stay inside one rank (a column shard of
// a GEMM, anything per head, a weight gradient summed over tokens) has the same bits at every TP
// size and is compared bitwise; a result summed across ranks (the row-parallel output, the
// column-parallel input gradient) is a K-term dot product in another order, within
// 2 gamma_K (|A| |B|)_ij of the single-rank value (gamma_n = n u / (1 - n u), u = 2^-24), plus 2u
// of the result for the bias add that follows. The bounds are computed in f64 from the
// single-rank run's own intermediates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "tp/attention.h"
#include "tp/mlp.h"
#include "tp/parallel_state.h"

namespace ranksim::tp {
namespace {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
constexpr double kUb = 0x1p-8;  // bf16 unit roundoff (8 significant bits)
double gamma(double n) { return n * kU / (1.0 - n * kU); }

void run_tp(int tp, const std::function<void(int, const runtime::ProcessGroup&)>& fn) {
  runtime::spawn(
      [&](int rank) {
        ParallelState ps = initialize_model_parallel(tp);
        fn(rank, ps.tp().group);
      },
      tp);
}

// (|a| |b|^T) in f64: a [..., K] flattened to rows, b [N, K].
std::vector<double> abs_product_bt(const Tensor& a, const Tensor& b) {
  const std::int64_t K = a.size(-1), M = a.numel() / K, N = b.size(0);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> out(static_cast<std::size_t>(M * N), 0.0);
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < K; ++k) s += std::fabs(av[i * K + k]) * std::fabs(bv[j * K + k]);
      out[static_cast<std::size_t>(i * N + j)] = s;
    }
  return out;
}

Tensor transpose2d(const Tensor& t) { return t.transpose(0, 1).contiguous(); }

Tensor part(const Tensor& t, int d, int p, int r) {
  const std::int64_t n = t.size(d) / p;
  return t.narrow(d, r * n, n).contiguous();
}

std::vector<double> slice(const std::vector<double>& v, int p, int r) {
  const std::size_t n = v.size() / static_cast<std::size_t>(p);
  return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(n) * r,
                             v.begin() + static_cast<std::ptrdiff_t>(n) * (r + 1));
}

void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  if (runtime::bitwise_equal(got, want)) return;
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (g[i] != w[i] && bad++ == 0) first = i;
  }
  ADD_FAILURE() << what << ": " << bad << " of " << g.size() << " elements differ; first at " << first << ": "
                << g[first] << " vs " << w[first];
}

void expect_within(const Tensor& got, const Tensor& want, const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  ASSERT_EQ(tol.size(), g.size()) << what;
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - w[i]);
    if (err > tol[i]) ++bad;
    const double ratio = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0.0);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements outside the bound; worst at " << worst << ": " << g[worst]
                     << " vs " << w[worst] << " (bound " << tol[worst] << ")";
}

std::vector<double> fp32_dot_bound(const std::vector<double>& abs_sum, double k, const Tensor& result) {
  const std::vector<double> y = result.to_vector<double>();
  std::vector<double> tol(abs_sum.size());
  for (std::size_t i = 0; i < tol.size(); ++i) tol[i] = 2 * gamma(k) * abs_sum[i] + 2 * kU * std::fabs(y[i]);
  return tol;
}

// Normwise relative error ||got - want|| / ||want||.
double rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return std::sqrt(num / den);
}

constexpr std::int64_t kS = 8, kB = 2;

// --- ParallelMLP --------------------------------------------------------------------------------

constexpr std::int64_t kH = 16, kF = 64;

struct MlpMasters {
  Tensor w1 = Tensor::randn({kF, kH}, 101, 0.0, 0.25);
  Tensor b1 = Tensor::randn({kF}, 102, 0.0, 0.1);
  Tensor w2 = Tensor::randn({kH, kF}, 103, 0.0, 0.125);
  Tensor b2 = Tensor::randn({kH}, 104, 0.0, 0.1);
  Tensor x = Tensor::randn({kS, kB, kH}, 105);
  Tensor dy = Tensor::randn({kS, kB, kH}, 106);
};

struct MlpRun {
  std::vector<Tensor> y, dx, dw1, db1, dw2, db2;
  std::vector<Tensor> hidden_shards;  // every rank's fc2 input, [s, b, ffn/p] (GELU's output)
  Tensor pre_act, hidden;             // rank 0's context (the whole thing on a single rank)
};

MlpRun run_mlp(const MlpMasters& m, int p, bool sp, DType dtype) {
  MlpRun out;
  const auto n = static_cast<std::size_t>(p);
  out.y.resize(n);
  out.dx = out.dw1 = out.db1 = out.dw2 = out.db2 = out.hidden_shards = out.y;
  run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
    ParallelMLPOptions o;
    o.sequence_parallel = sp;
    o.dtype = dtype;
    ParallelMLP mlp(m.w1, m.w2, g, o, m.b1, m.b2);
    MLPContext ctx;
    const Tensor x = (sp ? part(m.x, 0, p, r) : m.x).to(dtype);
    const Tensor dy = (sp ? part(m.dy, 0, p, r) : m.dy).to(dtype);
    const auto ri = static_cast<std::size_t>(r);
    out.y[ri] = mlp.forward(x, ctx);
    out.dx[ri] = mlp.backward(dy, ctx);
    std::vector<Parameter*> params;
    for (auto& [name, param] : mlp.named_parameters()) params.push_back(param);
    allreduce_sequence_parallel_grads(params, g);
    out.dw1[ri] = mlp.fc1().weight().full_grad(g);
    out.db1[ri] = mlp.fc1().bias().full_grad(g);
    out.dw2[ri] = mlp.fc2().weight().full_grad(g);
    out.db2[ri] = mlp.fc2().bias().full_grad(g);
    out.hidden_shards[ri] = ctx.fc2.input;
    if (r == 0) {
      out.pre_act = ctx.pre_activation;
      out.hidden = ctx.fc2.input;
    }
  });
  return out;
}

struct Case {
  int tp;
  bool sp;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return "tp" + std::to_string(info.param.tp) + (info.param.sp ? "_sp" : "");
}
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int tp : {2, 4, 8})
    for (bool sp : {false, true}) cases.push_back({tp, sp});
  return cases;
}

class Mlp : public ::testing::TestWithParam<Case> {};

TEST_P(Mlp, MatchesSingleRankFp32) {
  const auto [p, sp] = GetParam();
  const MlpMasters m;
  const MlpRun ref = run_mlp(m, 1, false, DType::f32);
  const MlpRun tp = run_mlp(m, p, sp, DType::f32);
  // The output is fc2's sum over the ffn units; dX is fc1's input gradient, a sum over the ffn
  // units of dZ = gelu'(Z) * (dY W2), recomputed here with the same ops.
  const std::vector<double> y_tol = fp32_dot_bound(abs_product_bt(ref.hidden, m.w2), static_cast<double>(kF), ref.y[0]);
  const Tensor dz = runtime::gelu_backward(runtime::matmul(m.dy, m.w2), ref.pre_act);
  std::vector<double> dx_tol = abs_product_bt(dz, transpose2d(m.w1));
  for (double& t : dx_tol) t *= 2 * gamma(static_cast<double>(kF));
  std::vector<double> db2_tol(static_cast<std::size_t>(kH), 0.0);
  if (sp) {  // partial sums over each rank's tokens, then all-reduced
    const std::vector<double> d = m.dy.to_vector<double>();
    for (std::size_t i = 0; i < d.size(); ++i) db2_tol[i % kH] += std::fabs(d[i]);
    for (double& t : db2_tol) t *= 2 * gamma(static_cast<double>(kS * kB));
  }
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_within(tp.y[ri], sp ? part(ref.y[0], 0, p, r) : ref.y[0], sp ? slice(y_tol, p, r) : y_tol, "output");
    expect_within(tp.dx[ri], sp ? part(ref.dx[0], 0, p, r) : ref.dx[0], sp ? slice(dx_tol, p, r) : dx_tol,
                  "input grad");
    expect_bitwise(tp.dw1[ri], ref.dw1[0], "fc1 weight grad");
    expect_bitwise(tp.db1[ri], ref.db1[0], "fc1 bias grad");
    expect_bitwise(tp.dw2[ri], ref.dw2[0], "fc2 weight grad");
    if (sp) {
      expect_within(tp.db2[ri], ref.db2[0], db2_tol, "fc2 bias grad (SP, all-reduced)");
    } else {
      expect_bitwise(tp.db2[ri], ref.db2[0], "fc2 bias grad");
    }
  }
}

// bf16 parameters and activations (fp32 accumulation inside each op, collectives rounding to
// bf16 at every hop, as NCCL does) against the fp32 single-rank MLP.
//
// Output, elementwise, to first order in u = 2^-8 (bf16's unit roundoff), every term an upper
// bound on one rounding:
//   dZ <= 3u (|X| |W1|^T + |b1|)            x and W1 rounded, the GEMM output and the bias add
//   dH <= 1.13 dZ + 2u |H|                   GELU's slope is at most 1.13; its output rounded
//   dY <= (dH |W2|^T + (p + 2) u |H| |W2|^T + 2u |b2| + u |Y|) * 1.1
//        (W2 rounded, each rank's partial rounded, p - 1 rounding hops of the all-reduce, the
//        bias and the final add; 1.1 covers the second-order terms).
//
// fc2's weight gradient, dW2[j,k] = sum over the T tokens of dY[t,j] H[t,k], is a sum with
// cancellation: its terms are perturbed by the errors of H (dH above, which is not relative to
// |H|: a pre-activation near zero is a difference of larger numbers) and of dY's cast, so its
// error scales with sum_t |dY| (dH + u |H|), not with |dW2|. TransformerEngine's elementwise
// atol = rtol = 2.5e-2 does not hold for it (index 600: -0.0593 in bf16 against -0.0953 in fp32,
// with sum_t |dY||H| = 5.6). Two per-element checks replace it, both computed in f64:
//  - the kernel: dW2 is one bf16 rounding of the fp32-accumulated product of its own bf16 inputs
//    (every rank's H shard, dY cast), as Megatron / TE compute it: bf16 operands, fp32
//    accumulation, one rounding of the result. With E the exact sum of those products and Sb
//    the sum of their magnitudes, |dW2 - E| <= u |E| + 2 gamma_T Sb (the products of two bf16
//    numbers are exact in fp32; the T-term fp32 sum is within gamma_T Sb). This is what fails
//    if an operand or the accumulation is rounded to bf16 early (an extra u |terms|), and it is
//    tight (the observed ratio is ~1).
//  - the inputs: |dW2 - dW2_fp32| <= 1.1 (sum_t |dY| dH + u sum_t |dY||H| + u |dW2_fp32|) +
//    2 gamma_T sum_t |dY||H| (the fp32 reference's own error), the first-order propagation of
//    the bounds above, like the output's. Being a worst case it is ~10x the observed error.
// The other gradients pass through at most ~6 such roundings (casts of dY, X and the weights,
// the dH GEMM, GELU's backward, the last GEMM, up to p - 1 reduction hops for dX) and stay within
// TE's tolerance; every gradient's normwise relative error is asserted <= 4u = 1.6e-2 (errors of
// both signs keep it near 2u). Losing one rank's share of a reduction changes a result by ~1/p of
// its size, 10x these bounds.
class MlpBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(MlpBf16, MatchesFp32SingleRankWithinBf16Rounding) {
  const auto [p, sp] = GetParam();
  const MlpMasters m;
  const MlpRun ref = run_mlp(m, 1, false, DType::f32);
  const MlpRun tp = run_mlp(m, p, sp, DType::bf16);
  const std::vector<double> a1 = abs_product_bt(m.x, m.w1), b1 = m.b1.to_vector<double>();
  const std::vector<double> h = ref.hidden.to_vector<double>();
  const std::vector<double> a2 = abs_product_bt(ref.hidden, m.w2), b2 = m.b2.to_vector<double>();
  const std::vector<double> y = ref.y[0].to_vector<double>();
  std::vector<double> dh(h.size());
  for (std::size_t i = 0; i < dh.size(); ++i) {
    dh[i] = 1.13 * 3 * kUb * (a1[i] + std::fabs(b1[i % kF])) + 2 * kUb * std::fabs(h[i]);
  }
  const std::vector<double> w2 = m.w2.to_vector<double>();
  std::vector<double> y_tol(y.size());
  for (std::size_t t = 0; t < y.size() / kH; ++t)
    for (std::size_t j = 0; j < kH; ++j) {
      double prop = 0;
      for (std::size_t k = 0; k < kF; ++k) prop += dh[t * kF + k] * std::fabs(w2[j * kF + k]);
      const std::size_t i = t * kH + j;
      y_tol[i] = 1.1 * (prop + (p + 2) * kUb * a2[i] + 2 * kUb * std::fabs(b2[j]) + kUb * std::fabs(y[i]));
    }

  // fc2's weight gradient: the kernel bound (from the bf16 run's own operands, the same on
  // every rank: the H shards joined along ffn, dY cast to bf16 -- under SP the all-gathered dY,
  // which is the cast dY exactly) and the propagated bound (from the fp32 run's).
  constexpr std::size_t T = kS * kB;
  std::vector<Tensor> shards = tp.hidden_shards;
  for (Tensor& s : shards) s = s.to(DType::f32);
  const std::vector<double> hb = runtime::cat(shards, -1).to_vector<double>();
  const std::vector<double> dyb = m.dy.to(DType::bf16).to_vector<double>();
  const std::vector<double> dy = m.dy.to_vector<double>(), dw2 = ref.dw2[0].to_vector<double>();
  std::vector<double> dw2_exact(kH * kF), kernel_tol(kH * kF), input_tol(kH * kF);
  for (std::size_t j = 0; j < kH; ++j)
    for (std::size_t k = 0; k < kF; ++k) {
      double e = 0, sb = 0, prop = 0, s = 0;
      for (std::size_t t = 0; t < T; ++t) {
        e += dyb[t * kH + j] * hb[t * kF + k];
        sb += std::fabs(dyb[t * kH + j] * hb[t * kF + k]);
        prop += std::fabs(dy[t * kH + j]) * dh[t * kF + k];
        s += std::fabs(dy[t * kH + j] * h[t * kF + k]);
      }
      const std::size_t i = j * kF + k;
      dw2_exact[i] = e;
      kernel_tol[i] = kUb * std::fabs(e) + 2 * gamma(T) * sb;
      input_tol[i] = 1.1 * (prop + kUb * s + kUb * std::fabs(dw2[i])) + 2 * gamma(T) * s;
    }
  const Tensor dw2_exact_t = Tensor::from_vector(dw2_exact, {kH, kF});

  auto te_close = [](const Tensor& got, const Tensor& want, const std::string& what) {
    const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < g.size(); ++i) bad += std::fabs(g[i] - w[i]) > 2.5e-2 + 2.5e-2 * std::fabs(w[i]);
    EXPECT_EQ(bad, 0u) << what << " (atol = rtol = 2.5e-2)";
  };
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(tp.y[ri].dtype(), DType::bf16);
    const Tensor yref = sp ? part(ref.y[0], 0, p, r) : ref.y[0];
    expect_within(tp.y[ri].to(DType::f32), yref, sp ? slice(y_tol, p, r) : y_tol, "bf16 output");
    const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> grads = {
        {"input grad", {tp.dx[ri], sp ? part(ref.dx[0], 0, p, r) : ref.dx[0]}},
        {"fc1 weight grad", {tp.dw1[ri], ref.dw1[0]}},
        {"fc1 bias grad", {tp.db1[ri], ref.db1[0]}},
        {"fc2 weight grad", {tp.dw2[ri], ref.dw2[0]}},
        {"fc2 bias grad", {tp.db2[ri], ref.db2[0]}}};
    for (const auto& [name, pair] : grads) {
      const Tensor got = pair.first.to(DType::f32);
      EXPECT_LE(rel_error(got, pair.second), 4 * kUb) << name;
      if (name != "fc2 weight grad") te_close(got, pair.second, name);
    }
    const Tensor dw2_got = tp.dw2[ri].to(DType::f32);
    expect_within(dw2_got, dw2_exact_t, kernel_tol,
                  "fc2 weight grad vs one rounding of its bf16 operands' exact product");
    expect_within(dw2_got, ref.dw2[0], input_tol, "fc2 weight grad vs fp32 (propagated bound)");
  }
}

INSTANTIATE_TEST_SUITE_P(Tp, Mlp, ::testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Tp, MlpBf16, ::testing::ValuesIn(all_cases()), case_name);

// kernbench's two-layer MLP check: deterministic (not random) weights, every rank holds the
// one-rank result after the reduction. The f64 reference is computed here independently. fc1
// is exact (binary fractions with few bits); GELU in fp32 is within ~8u of |H| (tanh from libm
// within 1 ulp, six more roundings); fc2 adds gamma_F of sum |H||W2|. Asserted: |y - ref| <=
// (gamma_F + 10u) * sum_k |H_k| |W2_jk|.
TEST(KernbenchMlp, DeterministicWeightsMatchTheOneRankResultOnEveryRank) {
  const std::int64_t h = 16, f = 64, t = 4;
  std::vector<float> w1v, w2v, xv;
  for (std::int64_t i = 0; i < f; ++i)
    for (std::int64_t j = 0; j < h; ++j) w1v.push_back(0.0625f * static_cast<float>((i * 3 + j) % 7 - 3));
  for (std::int64_t i = 0; i < h; ++i)
    for (std::int64_t j = 0; j < f; ++j) w2v.push_back(0.03125f * static_cast<float>((i + 5 * j) % 9 - 4));
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = 0; j < h; ++j) xv.push_back(0.5f * static_cast<float>((i * 7 + j) % 5 - 2));
  const Tensor w1 = Tensor::from_vector(w1v, {f, h}), w2 = Tensor::from_vector(w2v, {h, f});
  const Tensor x = Tensor::from_vector(xv, {t, h});
  std::vector<double> ref(static_cast<std::size_t>(t * h)), tol(ref.size());
  for (std::int64_t i = 0; i < t; ++i) {
    std::vector<double> hid(static_cast<std::size_t>(f));
    for (std::int64_t k = 0; k < f; ++k) {
      double z = 0;
      for (std::int64_t j = 0; j < h; ++j)
        z += xv[static_cast<std::size_t>(i * h + j)] * w1v[static_cast<std::size_t>(k * h + j)];
      hid[static_cast<std::size_t>(k)] = 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    }
    for (std::int64_t j = 0; j < h; ++j) {
      double s = 0, a = 0;
      for (std::int64_t k = 0; k < f; ++k) {
        s += hid[static_cast<std::size_t>(k)] * w2v[static_cast<std::size_t>(j * f + k)];
        a += std::fabs(hid[static_cast<std::size_t>(k)] * w2v[static_cast<std::size_t>(j * f + k)]);
      }
      ref[static_cast<std::size_t>(i * h + j)] = s;
      tol[static_cast<std::size_t>(i * h + j)] = (gamma(static_cast<double>(f)) + 10 * kU) * a;
    }
  }
  const Tensor ref_t = Tensor::from_vector(ref, {t, h});
  for (int p : {1, 2, 4, 8}) {
    std::vector<Tensor> ys(static_cast<std::size_t>(p));
    run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
      ParallelMLPOptions o;
      o.bias = false;
      ParallelMLP mlp(w1, w2, g, o);
      MLPContext c;
      ys[static_cast<std::size_t>(r)] = mlp.forward(x, c);
    });
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE("tp " + std::to_string(p) + " rank " + std::to_string(r));
      expect_within(ys[static_cast<std::size_t>(r)], ref_t, tol, "MLP output vs f64");
      expect_bitwise(ys[static_cast<std::size_t>(r)], ys[0], "rank-consistent output");
    }
  }
}

TEST(MlpErrors, FfnNotDivisibleByTp) {
  EXPECT_THAT(
      [] {
        run_tp(8, [](int, const runtime::ProcessGroup& g) {
          ParallelMLP(Tensor::zeros({12, 4}), Tensor::zeros({4, 12}), g);
        });
      },
      ThrowsMessage<Error>(
          HasSubstr("ParallelMLP: ffn_hidden_size 12 is not divisible by the tensor-parallel size 8")));
}

// --- ParallelAttention --------------------------------------------------------------------------

struct AttnCase {
  int tp;
  bool sp;
  int heads, groups;
};
std::string attn_name(const ::testing::TestParamInfo<AttnCase>& info) {
  const AttnCase& c = info.param;
  return "tp" + std::to_string(c.tp) + (c.sp ? "_sp" : "") + "_np" + std::to_string(c.heads) + "_ng" +
         std::to_string(c.groups);
}
std::vector<AttnCase> attn_cases() {
  std::vector<AttnCase> cases;
  for (int tp : {2, 4, 8})
    for (bool sp : {false, true})
      for (auto [np, ng] : {std::pair{8, 8}, std::pair{16, 8}}) cases.push_back({tp, sp, np, ng});
  return cases;
}

constexpr std::int64_t kHn = 4, kHidden = 32;

struct AttnMasters {
  ParallelAttentionConfig cfg;
  Tensor wqkv, bqkv, wp, bp, x, dy;
  explicit AttnMasters(int np, int ng) {
    cfg.hidden_size = kHidden;
    cfg.num_attention_heads = np;
    cfg.num_query_groups = ng;
    cfg.kv_channels = kHn;
    const std::int64_t rows = ng * (np / ng + 2) * kHn;
    wqkv = Tensor::randn({rows, kHidden}, 201, 0.0, 0.3);
    bqkv = Tensor::randn({rows}, 202, 0.0, 0.1);
    wp = Tensor::randn({kHidden, np * kHn}, 203, 0.0, 0.2);
    bp = Tensor::randn({kHidden}, 204, 0.0, 0.1);
    x = Tensor::randn({kS, kB, kHidden}, 205);
    dy = Tensor::randn({kS, kB, kHidden}, 206);
  }
};

struct AttnRun {
  std::vector<Tensor> y, dx, dqkv, dwqkv, dbqkv, dwp, dbp;
  Tensor context;  // rank 0's projection input
};

AttnRun run_attention(const AttnMasters& m, int p, bool sp) {
  AttnRun out;
  const auto n = static_cast<std::size_t>(p);
  out.y.resize(n);
  out.dx = out.dqkv = out.dwqkv = out.dbqkv = out.dwp = out.dbp = out.y;
  run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
    ParallelAttentionConfig cfg = m.cfg;
    cfg.sequence_parallel = sp;
    ParallelAttention attn(cfg, m.wqkv, m.wp, g, m.bqkv, m.bp);
    AttentionContext ctx;
    const auto ri = static_cast<std::size_t>(r);
    out.y[ri] = attn.forward(sp ? part(m.x, 0, p, r) : m.x, ctx);
    out.dx[ri] = attn.backward(sp ? part(m.dy, 0, p, r) : m.dy, ctx, &out.dqkv[ri]);
    allreduce_sequence_parallel_grads({&attn.proj().bias()}, g);
    out.dwqkv[ri] = attn.qkv().weight().full_grad(g);
    out.dbqkv[ri] = attn.qkv().bias().full_grad(g);
    out.dwp[ri] = attn.proj().weight().full_grad(g);
    out.dbp[ri] = attn.proj().bias().full_grad(g);
    if (r == 0) out.context = ctx.proj.input;
  });
  return out;
}

class Attention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(Attention, MatchesSingleRank) {
  const AttnCase c = GetParam();
  const int p = c.tp;
  const AttnMasters m(c.heads, c.groups);
  const AttnRun ref = run_attention(m, 1, false);
  const AttnRun tp = run_attention(m, p, c.sp);
  const std::vector<double> y_tol =
      fp32_dot_bound(abs_product_bt(ref.context, m.wp), static_cast<double>(c.heads * kHn), ref.y[0]);
  std::vector<double> dx_tol = abs_product_bt(ref.dqkv[0], transpose2d(m.wqkv));
  for (double& t : dx_tol) t *= 2 * gamma(static_cast<double>(m.wqkv.size(0)));
  std::vector<double> dbp_tol(static_cast<std::size_t>(kHidden), 0.0);
  if (c.sp) {
    const std::vector<double> d = m.dy.to_vector<double>();
    for (std::size_t i = 0; i < d.size(); ++i) dbp_tol[i % kHidden] += std::fabs(d[i]);
    for (double& t : dbp_tol) t *= 2 * gamma(static_cast<double>(kS * kB));
  }
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_within(tp.y[ri], c.sp ? part(ref.y[0], 0, p, r) : ref.y[0], c.sp ? slice(y_tol, p, r) : y_tol, "output");
    expect_within(tp.dx[ri], c.sp ? part(ref.dx[0], 0, p, r) : ref.dx[0], c.sp ? slice(dx_tol, p, r) : dx_tol,
                  "input grad");
    // Per-head work is the same arithmetic on every rank: this rank's whole KV groups.
    expect_bitwise(tp.dqkv[ri], part(ref.dqkv[0], 2, p, r), "QKV output grad (whole groups)");
    expect_bitwise(tp.dwqkv[ri], ref.dwqkv[0], "QKV weight grad");
    expect_bitwise(tp.dbqkv[ri], ref.dbqkv[0], "QKV bias grad");
    expect_bitwise(tp.dwp[ri], ref.dwp[0], "projection weight grad");
    if (c.sp) {
      expect_within(tp.dbp[ri], ref.dbp[0], dbp_tol, "projection bias grad (SP, all-reduced)");
    } else {
      expect_bitwise(tp.dbp[ri], ref.dbp[0], "projection bias grad");
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Tp, Attention, ::testing::ValuesIn(attn_cases()), attn_name);

// The single-rank module against causal grouped-query attention written out in f64 from separate
// q/k/v weights: query head i reads KV group i / (np/ng). Values are O(1) and every sum has at
// most 64 terms, so fp32 stays within ~(64 + 64 + 32 + 10) u * (sum of magnitudes ~ 10) < 1e-4
// of f64; asserted |y - ref| <= 1e-4 (1 + |ref|). A wrong head-to-group assignment or layout
// moves outputs by ~0.1.
TEST(AttentionLayout, GroupedQueryAttentionMatchesFloat64Reference) {
  const int np = 8, ng = 2, qpg = np / ng;
  const std::int64_t s = 6, b = 2;
  const Tensor wq = Tensor::randn({np * kHn, kHidden}, 301, 0.0, 0.3);
  const Tensor wk = Tensor::randn({ng * kHn, kHidden}, 302, 0.0, 0.3);
  const Tensor wv = Tensor::randn({ng * kHn, kHidden}, 303, 0.0, 0.3);
  const Tensor wp = Tensor::randn({kHidden, np * kHn}, 304, 0.0, 0.2);
  const Tensor x = Tensor::randn({s, b, kHidden}, 305);
  ParallelAttentionConfig cfg;
  cfg.hidden_size = kHidden;
  cfg.num_attention_heads = np;
  cfg.num_query_groups = ng;
  cfg.bias = false;
  Tensor y1, y2;
  for (int p : {1, 2}) {
    std::vector<Tensor> ys(static_cast<std::size_t>(p));
    run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
      ParallelAttention attn(cfg, interleave_qkv(wq, wk, wv, np, ng), wp, g);
      AttentionContext c;
      ys[static_cast<std::size_t>(r)] = attn.forward(x, c);
    });
    (p == 1 ? y1 : y2) = ys[0];
  }
  const std::vector<double> X = x.to_vector<double>(), Q = wq.to_vector<double>(), K = wk.to_vector<double>(),
                            V = wv.to_vector<double>(), P = wp.to_vector<double>();
  auto proj = [&](const std::vector<double>& w, std::int64_t row, std::int64_t t, std::int64_t bb) {
    double acc = 0;
    for (std::int64_t j = 0; j < kHidden; ++j)
      acc += X[static_cast<std::size_t>((t * b + bb) * kHidden + j)] * w[static_cast<std::size_t>(row * kHidden + j)];
    return acc;
  };
  std::vector<double> ref(static_cast<std::size_t>(s * b * kHidden)), tol(ref.size());
  for (std::int64_t bb = 0; bb < b; ++bb)
    for (std::int64_t t = 0; t < s; ++t) {
      std::vector<double> ctx(static_cast<std::size_t>(np * kHn), 0.0);
      for (int hd = 0; hd < np; ++hd) {
        const int grp = hd / qpg;
        std::vector<double> score;
        double mx = -INFINITY;
        for (std::int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (std::int64_t e = 0; e < kHn; ++e) d += proj(Q, hd * kHn + e, t, bb) * proj(K, grp * kHn + e, u, bb);
          score.push_back(d / std::sqrt(static_cast<double>(kHn)));
          mx = std::max(mx, score.back());
        }
        double z = 0;
        for (double& sc : score) z += (sc = std::exp(sc - mx));
        for (std::int64_t u = 0; u <= t; ++u)
          for (std::int64_t e = 0; e < kHn; ++e)
            ctx[static_cast<std::size_t>(hd * kHn + e)] +=
                score[static_cast<std::size_t>(u)] / z * proj(V, grp * kHn + e, u, bb);
      }
      for (std::int64_t o = 0; o < kHidden; ++o) {
        double acc = 0;
        for (std::int64_t k = 0; k < np * kHn; ++k)
          acc += ctx[static_cast<std::size_t>(k)] * P[static_cast<std::size_t>(o * np * kHn + k)];
        const auto i = static_cast<std::size_t>((t * b + bb) * kHidden + o);
        ref[i] = acc;
        tol[i] = 1e-4 * (1 + std::fabs(acc));
      }
    }
  const Tensor ref_t = Tensor::from_vector(ref, {s, b, kHidden});
  expect_within(y1, ref_t, tol, "tp1 vs f64");
  expect_within(y2, ref_t, tol, "tp2 vs f64");
}

TEST(AttentionErrors, HeadsAndGroupsMustSplitIntoWholeGroups) {
  auto fails_with = [](int p, int np, int ng, const std::string& msg) {
    EXPECT_THAT(
        [&] {
          run_tp(p, [&](int, const runtime::ProcessGroup& g) {
            ParallelAttentionConfig cfg;
            cfg.hidden_size = 48;
            cfg.num_attention_heads = np;
            cfg.num_query_groups = ng;
            ParallelAttention::seeded(cfg, 1, g);
          });
        },
        ThrowsMessage<Error>(HasSubstr(msg)));
  };
  fails_with(4, 6, 6, "num_attention_heads 6 is not divisible by the tensor-parallel size 4");
  fails_with(4, 8, 2,
             "num_query_groups 2 is not divisible by the tensor-parallel size 4 (each "
             "rank needs whole KV groups)");
  fails_with(2, 12, 5, "num_attention_heads 12 is not divisible by num_query_groups 5");
  fails_with(1, 5, 0, "hidden_size 48 is not divisible by num_attention_heads 5");
}

}  // namespace
}  // namespace ranksim::tp

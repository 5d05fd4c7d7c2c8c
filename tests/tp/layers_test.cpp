// TP layers against the single-rank layer (the same class on a group of one).
//
// What is compared bitwise and what within a bound follows from the runtime's arithmetic: every
// GEMM output element is one left-to-right sum over k (runtime/tensor/ops.h), so a result whose sum
// does not cross ranks (a column shard of a product, a weight gradient summed over tokens) has
// the same bits at every TP size; a result summed across ranks (the row-parallel output, the
// column-parallel input gradient) is the same sum in another order. For such a length-K dot
// product each order is within gamma_K * sum|a_k b_k| of the exact value (Higham, Accuracy and
// Stability, 3.1; gamma_n = n u / (1 - n u), u = 2^-24 the fp32 unit roundoff, which covers the
// rounding of the products too), so two orders differ by at most 2 gamma_K * (|A| |B|)_ij. That
// is the bound asserted, per element, computed in f64 from the reference's inputs; a missing
// or misordered reduction misses it by orders of magnitude. With exact-sum inputs (small
// integers: every partial sum is an integer below 2^24) every order gives the same bits, and
// everything is asserted bitwise.
#include "tp/layers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "tp/cross_entropy.h"
#include "tp/mappings.h"
#include "tp/parallel_state.h"
#include "tp/sharding.h"

namespace ranksim::tp {
namespace {

using runtime::Shape;
using runtime::Tensor;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

constexpr double kU = 0x1p-24;
double gamma(double n) { return n * kU / (1.0 - n * kU); }

// Runs fn(rank, tp group) on `tp` ranks forming one TP group.
void run_tp(int tp, const std::function<void(int, const runtime::ProcessGroup&)>& fn) {
  runtime::spawn(
      [&](int rank) {
        ParallelState ps = initialize_model_parallel(tp);
        fn(rank, ps.tp().group);
      },
      tp);
}

// Integers in [-3, 3] as f32: products and sums of a few hundred stay exact.
Tensor small_ints(const Shape& shape, std::uint64_t seed) {
  std::vector<float> v = Tensor::uniform(shape, seed, -3.0, 4.0).to_vector<float>();
  for (float& x : v) x = std::floor(x);
  return Tensor::from_vector(v, shape);
}

Tensor inputs(const Shape& shape, std::uint64_t seed, bool exact) {
  return exact ? small_ints(shape, seed) : Tensor::randn(shape, seed);
}

// (|a| |b|^T)_ij over the last dim in f64, a [M, K], b [N, K] (leading dims of a flattened).
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

// |got - want| <= tol elementwise; tol has one entry per element.
void expect_within(const Tensor& got, const Tensor& want, const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  ASSERT_EQ(tol.size(), g.size()) << what;
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - w[i]);
    const double ratio = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0);
    if (err > tol[i]) ++bad;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements outside the bound; worst at " << worst << ": " << g[worst]
                     << " vs " << w[worst] << " (bound " << tol[worst] << ")";
}

std::vector<double> scaled(const std::vector<double>& v, double f, double add = 0) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i] * f + add;
  return out;
}

// Rows [r*n/p, (r+1)*n/p) of dim d of t, contiguous.
Tensor part(const Tensor& t, int d, int p, int r) {
  const std::int64_t n = t.size(d) / p;
  return t.narrow(d, r * n, n).contiguous();
}

// --- Mappings: closed forms with rank-dependent values ------------------------------------------

// x[i, j] = 100 * (rank + 1) + 10 * i + j: which rank and position a value came from.
Tensor tagged(int rank, std::int64_t rows, std::int64_t cols) {
  std::vector<float> v;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) v.push_back(static_cast<float>(100 * (rank + 1) + 10 * i + j));
  return Tensor::from_vector(v, {rows, cols});
}

TEST(Mappings, ForwardAndBackwardOfAllSeven) {
  const int p = 4;
  run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
    const Tensor x = tagged(r, 4, 8);
    // copy_to: identity forward, all-reduce backward.
    EXPECT_TRUE(copy_to_tp(x, g).shares_storage(x));
    const Tensor sum = copy_to_tp_backward(tagged(r, 4, 8), g);
    EXPECT_EQ(sum.at({1, 2}), 100.0 * (1 + 2 + 3 + 4) + 4 * 12.0);
    // reduce_from: all-reduce forward, identity backward.
    EXPECT_EQ(reduce_from_tp(tagged(r, 4, 8), g).at({3, 7}), 1000.0 + 4 * 37.0);
    EXPECT_TRUE(reduce_from_tp_backward(x, g).shares_storage(x));
    // scatter_to: rank r keeps columns [2r, 2r+2); backward gathers them in rank order.
    const Tensor s = scatter_to_tp(x, g);
    EXPECT_EQ(s.shape(), (Shape{4, 2}));
    EXPECT_EQ(s.at({1, 1}), 100.0 * (r + 1) + 10 + 2 * r + 1);
    const Tensor sb = scatter_to_tp_backward(tagged(r, 4, 2), g);
    EXPECT_EQ(sb.shape(), (Shape{4, 8}));
    for (int c = 0; c < 8; ++c) EXPECT_EQ(sb.at({2, c}), 100.0 * (c / 2 + 1) + 20 + c % 2);
    // gather_from: the same gather forward, split backward.
    EXPECT_TRUE(runtime::bitwise_equal(gather_from_tp(tagged(r, 4, 2), g), sb));
    EXPECT_TRUE(runtime::bitwise_equal(gather_from_tp_backward(x, g), s));
    // scatter_to_sp: rank r keeps row r; backward gathers rows in rank order.
    const Tensor ss = scatter_to_sp(x, g);
    EXPECT_EQ(ss.shape(), (Shape{1, 8}));
    EXPECT_EQ(ss.at({0, 5}), 100.0 * (r + 1) + 10 * r + 5);
    const Tensor ssb = scatter_to_sp_backward(tagged(r, 1, 8), g);
    EXPECT_EQ(ssb.shape(), (Shape{4, 8}));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(ssb.at({i, 3}), 100.0 * (i + 1) + 3);
    // gather_from_sp: gather rows forward; reduce-scatter (or split) backward.
    EXPECT_TRUE(runtime::bitwise_equal(gather_from_sp(tagged(r, 1, 8), g), ssb));
    const Tensor rs = gather_from_sp_backward(tagged(r, 4, 8), g);
    EXPECT_EQ(rs.shape(), (Shape{1, 8}));
    EXPECT_EQ(rs.at({0, 6}), 1000.0 + 4 * (10.0 * r + 6));
    EXPECT_TRUE(runtime::bitwise_equal(gather_from_sp_backward(x, g, false), ss));
    // reduce_scatter_to_sp: reduce-scatter forward, all-gather backward.
    EXPECT_TRUE(runtime::bitwise_equal(reduce_scatter_to_sp(tagged(r, 4, 8), g), rs));
    EXPECT_TRUE(runtime::bitwise_equal(reduce_scatter_to_sp_backward(tagged(r, 1, 8), g), ssb));
  });
}

TEST(Mappings, LastDimGatherKeepsLeadingDims) {
  run_tp(2, [](int r, const runtime::ProcessGroup& g) {
    const Tensor x = Tensor::full({2, 3, 2}, r + 1);
    const Tensor y = gather_from_tp(x, g);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(y.at({1, 2, 1}), 1.0);
    EXPECT_EQ(y.at({1, 2, 2}), 2.0);
  });
}

TEST(Mappings, SingleRankIsIdentityAndIndivisibleSplitsAreErrors) {
  run_tp(1, [](int, const runtime::ProcessGroup& g) {
    const Tensor x = Tensor::ones({3, 5});
    EXPECT_TRUE(reduce_from_tp(x, g).shares_storage(x));
    EXPECT_TRUE(gather_from_tp(x, g).shares_storage(x));
    EXPECT_TRUE(scatter_to_sp(x, g).shares_storage(x));
  });
  EXPECT_THAT([] { run_tp(2, [](int, const runtime::ProcessGroup& g) {
                     scatter_to_tp(Tensor::ones({4, 5}), g);
                   }); },
              ThrowsMessage<Error>(HasSubstr("scatter_to_tp: dimension 1 of f32[4, 5] (5) is not "
                                             "divisible by the tensor-parallel size 2")));
  EXPECT_THAT(
      [] { run_tp(2, [](int, const runtime::ProcessGroup& g) {
             reduce_scatter_to_sp(Tensor::ones({3, 4}), g);
           }); },
      ThrowsMessage<Error>(HasSubstr("(3) is not divisible by the tensor-parallel size 2")));
}

// --- Column / Row parallel linear against the single-rank layer --------------------------------

struct Case {
  int tp;
  bool sp;
  bool exact;
};
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return "tp" + std::to_string(info.param.tp) + (info.param.sp ? "_sp" : "") + (info.param.exact ? "_exact" : "_randn");
}
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int tp : {2, 4, 8})
    for (bool sp : {false, true})
      for (bool exact : {true, false}) cases.push_back({tp, sp, exact});
  return cases;
}

constexpr std::int64_t kS = 8, kB = 2;  // sequence (divisible by 8 for SP) and batch

struct LinearRun {
  std::vector<Tensor> y, dx, dw, db;  // per rank
};

class ColumnParallel : public ::testing::TestWithParam<Case> {};

LinearRun run_column(int p, bool sp, const Tensor& w, const Tensor& b, const Tensor& x, const Tensor& dy) {
  LinearRun out;
  out.y.resize(static_cast<std::size_t>(p));
  out.dx = out.dw = out.db = out.y;
  run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
    ColumnParallelLinearOptions o;
    o.sequence_parallel = sp;
    ColumnParallelLinear layer(w, g, o, b);
    LinearContext ctx;
    const Tensor xin = sp ? part(x, 0, p, r) : x;
    const auto ri = static_cast<std::size_t>(r);
    out.y[ri] = layer.forward(xin, ctx).output;
    out.dx[ri] = layer.backward(part(dy, 2, p, r), ctx);
    out.dw[ri] = layer.weight().full_grad(g);
    out.db[ri] = layer.bias().full_grad(g);
  });
  return out;
}

TEST_P(ColumnParallel, MatchesSingleRank) {
  const auto [p, sp, exact] = GetParam();
  const std::int64_t in = 24, out = 32;
  const Tensor w = inputs({out, in}, 11, exact), b = inputs({out}, 12, exact);
  const Tensor x = inputs({kS, kB, in}, 13, exact), dy = inputs({kS, kB, out}, 14, exact);
  const LinearRun ref = run_column(1, false, w, b, x, dy);
  const LinearRun tp = run_column(p, sp, w, b, x, dy);
  // dX sums over the output features, split across ranks.
  const std::vector<double> dx_tol =
      scaled(abs_product_bt(dy, transpose2d(w)), exact ? 0.0 : 2 * gamma(static_cast<double>(out)));
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_bitwise(tp.y[ri], part(ref.y[0], 2, p, r), "output");
    expect_bitwise(tp.dw[ri], ref.dw[0], "weight grad");
    expect_bitwise(tp.db[ri], ref.db[0], "bias grad");
    if (sp) {
      const std::int64_t rows = kS / p * kB * in;
      const std::vector<double> tol(dx_tol.begin() + r * rows, dx_tol.begin() + (r + 1) * rows);
      expect_within(tp.dx[ri], part(ref.dx[0], 0, p, r), tol, "input grad (SP)");
    } else {
      expect_within(tp.dx[ri], ref.dx[0], dx_tol, "input grad");
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Tp, ColumnParallel, ::testing::ValuesIn(all_cases()), case_name);

class RowParallel : public ::testing::TestWithParam<Case> {};

LinearRun run_row(int p, bool sp, const Tensor& w, const Tensor& b, const Tensor& x, const Tensor& dy) {
  LinearRun out;
  out.y.resize(static_cast<std::size_t>(p));
  out.dx = out.dw = out.db = out.y;
  run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
    RowParallelLinearOptions o;
    o.input_is_parallel = true;
    o.sequence_parallel = sp;
    RowParallelLinear layer(w, g, o, b);
    LinearContext ctx;
    const auto ri = static_cast<std::size_t>(r);
    out.y[ri] = layer.forward(part(x, 2, p, r), ctx).output;
    out.dx[ri] = layer.backward(sp ? part(dy, 0, p, r) : dy, ctx);
    allreduce_sequence_parallel_grads({&layer.weight(), &layer.bias()}, g);
    out.dw[ri] = layer.weight().full_grad(g);
    out.db[ri] = layer.bias().full_grad(g);
  });
  return out;
}

TEST_P(RowParallel, MatchesSingleRank) {
  const auto [p, sp, exact] = GetParam();
  const std::int64_t in = 32, out = 24;
  const Tensor w = inputs({out, in}, 21, exact), b = inputs({out}, 22, exact);
  const Tensor x = inputs({kS, kB, in}, 23, exact), dy = inputs({kS, kB, out}, 24, exact);
  const LinearRun ref = run_row(1, false, w, b, x, dy);
  const LinearRun tp = run_row(p, sp, w, b, x, dy);
  // Y = sum over the input features (split) + bias: two orders of the K-term sum, then one
  // rounding of the bias add each (2u of the result).
  std::vector<double> y_tol = abs_product_bt(x, w);
  const std::vector<double> yref = ref.y[0].to_vector<double>();
  for (std::size_t i = 0; i < y_tol.size(); ++i) {
    y_tol[i] = exact ? 0.0 : 2 * gamma(static_cast<double>(in)) * y_tol[i] + 2 * kU * std::fabs(yref[i]);
  }
  // Under SP the bias gradient is partial sums over each rank's tokens, then all-reduced.
  std::vector<double> db_tol(static_cast<std::size_t>(out), 0.0);
  if (sp && !exact) {
    const std::vector<double> d = dy.to_vector<double>();
    for (std::size_t i = 0; i < d.size(); ++i) db_tol[i % static_cast<std::size_t>(out)] += std::fabs(d[i]);
    db_tol = scaled(db_tol, 2 * gamma(static_cast<double>(kS * kB)));
  }
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    if (sp) {
      const std::int64_t rows = kS / p * kB * out;
      const std::vector<double> tol(y_tol.begin() + r * rows, y_tol.begin() + (r + 1) * rows);
      expect_within(tp.y[ri], part(ref.y[0], 0, p, r), tol, "output (SP)");
    } else {
      expect_within(tp.y[ri], ref.y[0], y_tol, "output");
    }
    expect_bitwise(tp.dx[ri], part(ref.dx[0], 2, p, r), "input grad");
    expect_bitwise(tp.dw[ri], ref.dw[0], "weight grad");
    if (sp) {
      expect_within(tp.db[ri], ref.db[0], db_tol, "bias grad (SP, all-reduced)");
    } else {
      expect_bitwise(tp.db[ri], ref.db[0], "bias grad");
    }
  }
  // The reduction gives every rank the same bits (kernbench's rank-consistency check).
  for (int r = 1; r < p; ++r) {
    if (!sp) expect_bitwise(tp.y[static_cast<std::size_t>(r)], tp.y[0], "rank-consistent output");
  }
}
INSTANTIATE_TEST_SUITE_P(Tp, RowParallel, ::testing::ValuesIn(all_cases()), case_name);

TEST(ColumnParallelOptions, GatherOutputAndSkipBiasAdd) {
  const std::int64_t in = 8, out = 12;
  const Tensor w = small_ints({out, in}, 31), b = small_ints({out}, 32);
  const Tensor x = small_ints({3, in}, 33), dy = small_ints({3, out}, 34);
  Tensor ref_y, ref_dx, ref_db;
  run_tp(1, [&](int, const runtime::ProcessGroup& g) {
    ColumnParallelLinear l(w, g, {}, b);
    LinearContext c;
    ref_y = l.forward(x, c).output;
    ref_dx = l.backward(dy, c);
    ref_db = l.bias().grad;
  });
  run_tp(4, [&](int r, const runtime::ProcessGroup& g) {
    ColumnParallelLinearOptions o;
    o.gather_output = true;
    o.skip_bias_add = true;
    ColumnParallelLinear l(w, g, o, b);
    LinearContext c;
    const LinearOutput y = l.forward(x, c);
    // The bias comes back unapplied (this rank's slice); the output is gathered.
    EXPECT_TRUE(runtime::bitwise_equal(y.bias, part(b, 0, 4, r)));
    const Tensor with_bias = runtime::add(part(y.output, 1, 4, r), y.bias);
    EXPECT_TRUE(runtime::bitwise_equal(with_bias, part(ref_y, 1, 4, r)));
    EXPECT_TRUE(runtime::bitwise_equal(l.backward(dy, c, part(ref_db, 0, 4, r)), ref_dx));
    EXPECT_TRUE(runtime::bitwise_equal(l.bias().full_grad(g), ref_db));
  });
}

TEST(RowParallelOptions, InputNotParallelIsScatteredAndGradientGathered) {
  const std::int64_t in = 8, out = 4;
  const Tensor w = Tensor::randn({out, in}, 41), x = Tensor::randn({5, in}, 42);
  const Tensor dy = Tensor::randn({5, out}, 43);
  Tensor ref_dx;
  run_tp(1, [&](int, const runtime::ProcessGroup& g) {
    RowParallelLinear l(w, g);
    LinearContext c;
    l.forward(x, c);
    ref_dx = l.backward(dy, c);
  });
  run_tp(2, [&](int, const runtime::ProcessGroup& g) {
    RowParallelLinear l(w, g);
    LinearContext c;
    EXPECT_EQ(l.forward(x, c).output.shape(), (Shape{5, out}));
    EXPECT_TRUE(runtime::bitwise_equal(l.backward(dy, c), ref_dx));
  });
}

// --- The kernbench TP checks (seed 001) --------------------------------------------------------

TEST(KernbenchChecks, ColumnOutputIsInputTimesThisRanksShard) {
  for (int p : {2, 4, 8}) {
    const std::int64_t m = 4, in = 32, out = 32 * p;
    // Rank r's shard is constant 0.125 * (r + 1) (binary fractions: the products are exact).
    std::vector<float> wv;
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) wv.push_back(0.125f * static_cast<float>(o / 32 + 1));
    const Tensor w = Tensor::from_vector(wv, {out, in});
    const Tensor x = Tensor::full({m, in}, 0.5);
    run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
      ColumnParallelLinearOptions o;
      o.bias = false;
      ColumnParallelLinear l(w, g, o);
      EXPECT_EQ(l.weight().value.shape(), (Shape{32, in}));
      LinearContext c;
      const Tensor y = l.forward(x, c).output;
      ASSERT_EQ(y.shape(), (Shape{m, 32}));
      // x @ W_r^T computed independently: in * 0.5 * 0.125 (r + 1).
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < 32; ++j) EXPECT_EQ(y.at({i, j}), in * 0.5 * 0.125 * (r + 1));
    });
  }
}

TEST(KernbenchChecks, RowOutputIsConcatInputTimesConcatWeightOnEveryRank) {
  for (int p : {2, 4, 8}) {
    const std::int64_t m = 4, n = 32, in = n * p, out = 32;
    // W_r = 0.125 (r + 1) and x_r = 0.5 (r + 1) for rank r's slice of the input features.
    std::vector<float> wv, xv;
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) wv.push_back(0.125f * static_cast<float>(i / n + 1));
    for (std::int64_t t = 0; t < m; ++t)
      for (std::int64_t i = 0; i < in; ++i) xv.push_back(0.5f * static_cast<float>(i / n + 1));
    const Tensor w = Tensor::from_vector(wv, {out, in});
    double expected = 0;  // sum_r n * x_r * W_r, in f64
    for (int r = 0; r < p; ++r) expected += static_cast<double>(n) * 0.5 * (r + 1) * 0.125 * (r + 1);
    std::vector<Tensor> ys(static_cast<std::size_t>(p));
    run_tp(p, [&](int r, const runtime::ProcessGroup& g) {
      RowParallelLinearOptions o;
      o.input_is_parallel = true;
      o.bias = false;
      RowParallelLinear l(w, g, o);
      EXPECT_EQ(l.weight().value.shape(), (Shape{out, n}));
      LinearContext c;
      const Tensor x_r = part(Tensor::from_vector(xv, {m, in}), 1, p, r);
      ys[static_cast<std::size_t>(r)] = l.forward(x_r, c).output;
    });
    for (int r = 0; r < p; ++r) {
      const Tensor& y = ys[static_cast<std::size_t>(r)];
      ASSERT_EQ(y.shape(), (Shape{m, out}));
      for (double v : y.to_vector<double>()) EXPECT_EQ(v, expected) << "rank " << r << " p " << p;
      // Elementwise identical on every rank after the reduction.
      EXPECT_TRUE(runtime::bitwise_equal(y, ys[0])) << "rank " << r;
    }
  }
}

// --- Vocab-parallel embedding ------------------------------------------------------------------

class VocabEmbedding : public ::testing::TestWithParam<Case> {};

TEST_P(VocabEmbedding, MatchesSingleRank) {
  const auto [p, sp, exact] = GetParam();
  const std::int64_t V = 48, H = 16;
  const Tensor w = inputs({V, H}, 51, exact);
  std::vector<std::int64_t> idv;
  for (std::int64_t i = 0; i < kS * kB; ++i) idv.push_back((i * 7 + 3) % V);
  idv[5] = idv[2];  // a repeated id accumulates two rows
  const Tensor ids = Tensor::from_vector(idv, {kS, kB});
  const Tensor dy = inputs({kS, kB, H}, 52, exact);
  auto run = [&](int np, bool use_sp, std::vector<Tensor>& y, std::vector<Tensor>& dw) {
    y.resize(static_cast<std::size_t>(np));
    dw.resize(static_cast<std::size_t>(np));
    run_tp(np, [&](int r, const runtime::ProcessGroup& g) {
      VocabParallelEmbeddingOptions o;
      o.sequence_parallel = use_sp;
      VocabParallelEmbedding e(w, g, o);
      EXPECT_EQ(e.vocab_start(), r * V / np);
      EmbeddingContext c;
      y[static_cast<std::size_t>(r)] = e.forward(ids, c);
      e.backward(use_sp ? part(dy, 0, np, r) : dy, c);
      dw[static_cast<std::size_t>(r)] = e.weight().full_grad(g);
    });
  };
  std::vector<Tensor> ry, rdw, ty, tdw;
  run(1, false, ry, rdw);
  run(p, sp, ty, tdw);
  // Each output element is one table value plus zeros from the other ranks: exact in any order.
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    expect_bitwise(ty[ri], sp ? part(ry[0], 0, p, r) : ry[0], "output rank " + std::to_string(r));
    expect_bitwise(tdw[ri], rdw[0], "weight grad rank " + std::to_string(r));
  }
  expect_bitwise(ry[0], runtime::embedding(ids, w), "single rank vs runtime::embedding");
}
INSTANTIATE_TEST_SUITE_P(Tp, VocabEmbedding, ::testing::ValuesIn(all_cases()), case_name);

// --- Vocab-parallel cross-entropy --------------------------------------------------------------

class VocabCrossEntropy : public ::testing::TestWithParam<int> {};

TEST_P(VocabCrossEntropy, MatchesFloat64ReferenceAndSingleRank) {
  const int p = GetParam();
  const std::int64_t n = 12, V = 64;
  const Tensor logits = Tensor::randn({n, V}, 61, 0.0, 3.0);
  std::vector<std::int64_t> tv;
  for (std::int64_t i = 0; i < n; ++i) tv.push_back((i * 13 + 5) % V);
  const Tensor targets = Tensor::from_vector(tv, {n});
  const Tensor dloss = Tensor::randn({n}, 62);
  auto run = [&](int np, std::vector<Tensor>& loss, std::vector<Tensor>& dl) {
    loss.resize(static_cast<std::size_t>(np));
    dl.resize(static_cast<std::size_t>(np));
    run_tp(np, [&](int r, const runtime::ProcessGroup& g) {
      CrossEntropyContext c;
      loss[static_cast<std::size_t>(r)] = vocab_parallel_cross_entropy(part(logits, 1, np, r), targets, g, c);
      dl[static_cast<std::size_t>(r)] = vocab_parallel_cross_entropy_backward(dloss, c);
    });
  };
  std::vector<Tensor> rl, rd, tl, td;
  run(1, rl, rd);
  run(p, tl, td);
  // f64 reference. fp32 error of the loss: z = x - m is rounded (u|z|), each exp adds ~2u, the
  // V-term sum gamma_V, the log u|log se|, the final subtraction u|loss| -- so
  // |loss - ref| <= (V + 4 + max|z|) u + u (|log se| + |z_t| + |loss|); two fp32 orders (p=1 and
  // p ranks) each satisfy it. The gradient softmax - onehot carries the same relative error of
  // se plus two roundings: tol = ((V + 4 + max|z|) u) (softmax + 1) |g|.
  const std::vector<double> x = logits.to_vector<double>(), g = dloss.to_vector<double>();
  std::vector<double> ref_loss(static_cast<std::size_t>(n)), loss_tol(ref_loss.size());
  std::vector<double> ref_grad(static_cast<std::size_t>(n * V)), grad_tol(ref_grad.size());
  for (std::int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, se = 0, zmax = 0;
    for (std::int64_t j = 0; j < V; ++j) m = std::max(m, x[i * V + j]);
    for (std::int64_t j = 0; j < V; ++j) {
      se += std::exp(x[i * V + j] - m);
      zmax = std::max(zmax, m - x[i * V + j]);
    }
    const double zt = x[i * V + tv[static_cast<std::size_t>(i)]] - m;
    const auto ii = static_cast<std::size_t>(i);
    ref_loss[ii] = std::log(se) - zt;
    const double rel = (static_cast<double>(V) + 4 + zmax) * kU;
    loss_tol[ii] = rel + kU * (std::fabs(std::log(se)) + std::fabs(zt) + ref_loss[ii]);
    for (std::int64_t j = 0; j < V; ++j) {
      const double s = std::exp(x[i * V + j] - m) / se;
      const auto k = static_cast<std::size_t>(i * V + j);
      ref_grad[k] = (s - (j == tv[ii] ? 1.0 : 0.0)) * g[ii];
      grad_tol[k] = (rel + 2 * kU) * (s + 1) * std::fabs(g[ii]);
    }
  }
  const Tensor ref_loss_t = Tensor::from_vector(ref_loss, {n});
  const Tensor ref_grad_t = Tensor::from_vector(ref_grad, {n, V});
  expect_within(rl[0], ref_loss_t, loss_tol, "single-rank loss vs f64");
  expect_within(rd[0], ref_grad_t, grad_tol, "single-rank grad vs f64");
  for (int r = 0; r < p; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_within(tl[ri], ref_loss_t, loss_tol, "loss vs f64");
    EXPECT_TRUE(runtime::bitwise_equal(tl[ri], tl[0])) << "every rank holds the same loss";
    const std::int64_t vp = V / p;
    std::vector<double> tol;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = r * vp; j < (r + 1) * vp; ++j) tol.push_back(grad_tol[static_cast<std::size_t>(i * V + j)]);
    expect_within(td[ri], part(ref_grad_t, 1, p, r), tol, "grad vs f64");
  }
  // The mean matches runtime::cross_entropy (an independent implementation) within the same bound.
  double mean = 0;
  for (double v : tl[0].to_vector<double>()) mean += v / static_cast<double>(n);
  const double bound = *std::max_element(loss_tol.begin(), loss_tol.end()) + 1e-6;
  EXPECT_NEAR(mean, runtime::cross_entropy(logits, targets).loss.item(), bound);
}
INSTANTIATE_TEST_SUITE_P(Tp, VocabCrossEntropy, ::testing::Values(2, 4, 8));

TEST(VocabCrossEntropy, TargetOutsideVocabularyIsAnError) {
  EXPECT_THAT(
      [] {
        run_tp(2, [](int, const runtime::ProcessGroup& g) {
          CrossEntropyContext c;
          vocab_parallel_cross_entropy(Tensor::zeros({2, 4}), Tensor::from_vector(std::vector<std::int64_t>{1, 8}, {2}),
                                       g, c);
        });
      },
      ThrowsMessage<Error>(HasSubstr("target 8 of row 1 is outside the vocabulary [0, 8)")));
}

// --- Layout errors -----------------------------------------------------------------------------

TEST(LayoutErrors, SizesNotDivisibleByTpAreNamed) {
  auto fails_with = [](int p, const std::function<void(const runtime::ProcessGroup&)>& build, const std::string& msg) {
    EXPECT_THAT([&] { run_tp(p, [&](int, const runtime::ProcessGroup& g) { build(g); }); },
                ThrowsMessage<Error>(HasSubstr(msg)));
  };
  fails_with(
      4,
      [](const auto& g) {
        ColumnParallelLinear(Tensor::zeros({6, 8}), g);
      },
      "ColumnParallelLinear: output size 6 is not divisible by the tensor-parallel size 4");
  fails_with(
      4,
      [](const auto& g) {
        RowParallelLinear(Tensor::zeros({8, 10}), g);
      },
      "RowParallelLinear: input size 10 is not divisible by the tensor-parallel size 4");
  fails_with(
      8,
      [](const auto& g) {
        VocabParallelEmbedding(Tensor::zeros({50, 4}), g);
      },
      "VocabParallelEmbedding: vocabulary size 50 is not divisible by the "
      "tensor-parallel size 8");
  fails_with(
      2,
      [](const auto& g) {
        ColumnParallelLinearOptions o;
        o.sequence_parallel = o.gather_output = true;
        ColumnParallelLinear(Tensor::zeros({4, 4}), g, o);
      },
      "gather_output cannot be combined with sequence_parallel");
  fails_with(
      2,
      [](const auto& g) {
        RowParallelLinearOptions o;
        o.sequence_parallel = true;
        RowParallelLinear(Tensor::zeros({4, 4}), g, o);
      },
      "sequence_parallel requires input_is_parallel");
  fails_with(
      2,
      [](const auto& g) {
        ColumnParallelLinear l(Tensor::zeros({4, 4}), g);
        LinearContext c;
        l.forward(Tensor::zeros({3, 5}), c);
      },
      "input f32[3, 5] must have 4 features in its last dim");
}

}  // namespace
}  // namespace ranksim::tp

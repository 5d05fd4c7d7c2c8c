// Ops against independent float64 references written here as plain loops.
//
// Tolerances come from first-order rounding-error analysis with u the unit roundoff of the
// arithmetic (2^-24 for f32 and for bf16/f16 inputs, which compute in f32) plus, for bf16 outputs,
// the final rounding (at most 2^-8 relative). The reference itself is computed in double from the
// exact input values, so its own error (about 2^-53 relative) is negligible next to these bounds.
// The backward references use formulations different from the ops' (full Jacobians, sums written
// per element), and each backward is also checked against central finite differences in f64.
#include "runtime/tensor/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/tensor/cost.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using ::testing::HasSubstr;

constexpr double kU32 = 0x1p-24;   // unit roundoff of f32 arithmetic
constexpr double kUBf16 = 0x1p-8;  // relative rounding error bound of a bf16 result
constexpr double kGeluC = 0.7978845608028654;
constexpr double kGeluA = 0.044715;

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

double gamma(double n) { return n * kU32 / (1 - n * kU32); }

// Compares element by element; reports the worst violation with its index.
void expect_within(const std::vector<double>& got, const std::vector<double>& ref,
                   const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(tol.size(), ref.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - ref[i]), tol[i])
        << what << " element " << i << ": got " << got[i] << ", want " << ref[i];
  }
}

struct RecordingSink : CostSink {
  std::vector<OpCost> charges;
  void charge(const OpCost& c) override { charges.push_back(c); }
};

// Central differences of a scalar function of x (f64), element by element.
std::vector<double> numeric_grad(const std::function<double(const Tensor&)>& f, const Tensor& x) {
  const double h = 1e-5;
  std::vector<double> g(static_cast<std::size_t>(x.numel()));
  const std::vector<double> base = vals(x);
  for (std::size_t i = 0; i < g.size(); ++i) {
    std::vector<double> p = base, m = base;
    p[i] += h;
    m[i] -= h;
    g[i] = (f(Tensor::from_vector(p, x.shape())) - f(Tensor::from_vector(m, x.shape()))) / (2 * h);
  }
  return g;
}

// Sum of w * y: a scalar loss whose gradient with respect to y is w.
double dot(const Tensor& w, const Tensor& y) {
  const std::vector<double> a = vals(w), b = vals(y);
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// FD gradients in f64 agree with the analytic ones to ~1e-10 (h^2 truncation and eps/h rounding
// on O(1) values); 1e-7 leaves room and still catches any wrong formula.
void expect_matches_fd(const std::vector<double>& analytic, const std::vector<double>& fd,
                       const std::string& what) {
  std::vector<double> tol(fd.size());
  for (std::size_t i = 0; i < fd.size(); ++i) tol[i] = 1e-7 * (1 + std::fabs(fd[i]));
  expect_within(analytic, fd, tol, what);
}

// --- matmul ---------------------------------------------------------------------------------

enum class BMode { kPlain, kShared, kBatched };  // 2-d a; batched a with 2-d b; both batched

struct MatmulCase {
  bool ta, tb;
  BMode mode;
};

class MatmulTest : public ::testing::TestWithParam<std::tuple<bool, bool, BMode>> {
 protected:
  static constexpr std::int64_t M = 7, N = 37, K = 300;
  static constexpr std::int64_t L0 = 2, L1 = 3;
  bool ta() const { return std::get<0>(GetParam()); }
  bool tb() const { return std::get<1>(GetParam()); }
  BMode mode() const { return std::get<2>(GetParam()); }
  std::int64_t batches() const { return mode() == BMode::kPlain ? 1 : L0 * L1; }
  Shape lead() const { return mode() == BMode::kPlain ? Shape{} : Shape{L0, L1}; }
  Shape with_lead(Shape s, bool batched) const {
    if (!batched) return s;
    Shape full = lead();
    full.insert(full.end(), s.begin(), s.end());
    return full;
  }
  Shape a_shape() const { return with_lead(ta() ? Shape{K, M} : Shape{M, K}, true); }
  Shape b_shape() const {
    return with_lead(tb() ? Shape{N, K} : Shape{K, N}, mode() == BMode::kBatched);
  }
  Shape c_shape() const { return with_lead({M, N}, true); }
  // Element (i, k) of op(A) in batch l, and (k, j) of op(B), from flat row-major values.
  double A(const std::vector<double>& a, std::int64_t l, std::int64_t i, std::int64_t k) const {
    const std::int64_t base = l * M * K;
    return a[static_cast<std::size_t>(base + (ta() ? k * M + i : i * K + k))];
  }
  double B(const std::vector<double>& b, std::int64_t l, std::int64_t k, std::int64_t j) const {
    const std::int64_t base = mode() == BMode::kBatched ? l * K * N : 0;
    return b[static_cast<std::size_t>(base + (tb() ? j * K + k : k * N + j))];
  }
};

TEST_P(MatmulTest, ForwardF32AndBf16AgainstFloat64) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor a = Tensor::randn(a_shape(), 1, 0, 1, dtype);
    const Tensor b = Tensor::randn(b_shape(), 2, 0, 1, dtype);
    const Tensor c = matmul(a, b, ta(), tb());
    ASSERT_EQ(c.shape(), c_shape());
    ASSERT_EQ(c.dtype(), dtype);
    const std::vector<double> av = vals(a), bv = vals(b);
    std::vector<double> ref, tol;
    for (std::int64_t l = 0; l < batches(); ++l) {
      for (std::int64_t i = 0; i < M; ++i) {
        for (std::int64_t j = 0; j < N; ++j) {
          double s = 0, mag = 0;
          for (std::int64_t k = 0; k < K; ++k) {
            s += A(av, l, i, k) * B(bv, l, k, j);
            mag += std::fabs(A(av, l, i, k) * B(bv, l, k, j));
          }
          ref.push_back(s);
          // An f32 dot product of K terms in any order errs by at most gamma_K * sum |a b|
          // (Higham, Accuracy and Stability, eq. 3.5); a bf16 result adds one final rounding.
          const double acc = gamma(K) * mag;
          tol.push_back(dtype == DType::f32 ? acc : kUBf16 * std::fabs(s) + (1 + kUBf16) * acc);
        }
      }
    }
    expect_within(vals(c), ref, tol, std::string("matmul ") + dtype_name(dtype));
  }
}

TEST_P(MatmulTest, BackwardAgainstFloat64) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor a = Tensor::randn(a_shape(), 3, 0, 1, dtype);
    const Tensor b = Tensor::randn(b_shape(), 4, 0, 1, dtype);
    const Tensor dc = Tensor::randn(c_shape(), 5, 0, 1, dtype);
    const MatmulGrads g = matmul_backward(dc, a, b, ta(), tb());
    ASSERT_EQ(g.da.shape(), a.shape());
    ASSERT_EQ(g.db.shape(), b.shape());
    const std::vector<double> av = vals(a), bv = vals(b), dcv = vals(dc);
    auto dC = [&](std::int64_t l, std::int64_t i, std::int64_t j) {
      return dcv[static_cast<std::size_t>((l * M + i) * N + j)];
    };
    // dA: element (i, k) of op(A)'s gradient is sum_j dC(i, j) op(B)(k, j), stored where op(A)
    // keeps (i, k).
    std::vector<double> da(av.size()), da_tol(av.size()), db(bv.size(), 0.0),
        db_mag(bv.size(), 0.0);
    std::vector<double> db_terms(bv.size(), 0.0);
    for (std::int64_t l = 0; l < batches(); ++l) {
      for (std::int64_t i = 0; i < M; ++i) {
        for (std::int64_t k = 0; k < K; ++k) {
          double s = 0, mag = 0;
          for (std::int64_t j = 0; j < N; ++j) {
            s += dC(l, i, j) * B(bv, l, k, j);
            mag += std::fabs(dC(l, i, j) * B(bv, l, k, j));
          }
          const auto at = static_cast<std::size_t>(l * M * K + (ta() ? k * M + i : i * K + k));
          da[at] = s;
          const double acc = gamma(N) * mag;
          da_tol[at] = dtype == DType::f32 ? acc : kUBf16 * std::fabs(s) + (1 + kUBf16) * acc;
        }
      }
      for (std::int64_t k = 0; k < K; ++k) {
        for (std::int64_t j = 0; j < N; ++j) {
          const std::int64_t base = mode() == BMode::kBatched ? l * K * N : 0;
          const auto at = static_cast<std::size_t>(base + (tb() ? j * K + k : k * N + j));
          for (std::int64_t i = 0; i < M; ++i) {
            db[at] += A(av, l, i, k) * dC(l, i, j);
            db_mag[at] += std::fabs(A(av, l, i, k) * dC(l, i, j));
            db_terms[at] += 1;
          }
        }
      }
    }
    std::vector<double> db_tol(db.size());
    for (std::size_t x = 0; x < db.size(); ++x) {
      const double acc = gamma(db_terms[x]) * db_mag[x];
      db_tol[x] = dtype == DType::f32 ? acc : kUBf16 * std::fabs(db[x]) + (1 + kUBf16) * acc;
    }
    expect_within(vals(g.da), da, da_tol, std::string("matmul da ") + dtype_name(dtype));
    expect_within(vals(g.db), db, db_tol, std::string("matmul db ") + dtype_name(dtype));
  }
}

TEST_P(MatmulTest, BackwardMatchesFiniteDifferences) {
  // Small sizes: the FD loop evaluates the forward twice per input element.
  const Shape a_small = [&] {
    Shape s = a_shape();
    s[s.size() - 2] = ta() ? 5 : 3;
    s[s.size() - 1] = ta() ? 3 : 5;
    return s;
  }();
  Shape b_small = b_shape();
  b_small[b_small.size() - 2] = tb() ? 4 : 5;
  b_small[b_small.size() - 1] = tb() ? 5 : 4;
  const Tensor a = Tensor::randn(a_small, 6, 0, 1, DType::f64);
  const Tensor b = Tensor::randn(b_small, 7, 0, 1, DType::f64);
  const Tensor c = matmul(a, b, ta(), tb());
  const Tensor w = Tensor::randn(c.shape(), 8, 0, 1, DType::f64);
  const MatmulGrads g = matmul_backward(w, a, b, ta(), tb());
  expect_matches_fd(
      vals(g.da),
      numeric_grad([&](const Tensor& x) { return dot(w, matmul(x, b, ta(), tb())); }, a), "da");
  expect_matches_fd(
      vals(g.db),
      numeric_grad([&](const Tensor& x) { return dot(w, matmul(a, x, ta(), tb())); }, b), "db");
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, MatmulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(BMode::kPlain, BMode::kShared,
                                                              BMode::kBatched)));

// The documented order: each element is a left-to-right f32 sum over k, whatever the shapes.
TEST(Matmul, SumsInFixedOrderSoShardsMatchBitwise) {
  const std::int64_t M = 9, N = 300, K = 517;
  const Tensor a = Tensor::randn({M, K}, 11);
  const Tensor b = Tensor::randn({K, N}, 12);
  const Tensor c = matmul(a, b);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> cv = c.to_vector<float>();
  for (std::int64_t i = 0; i < M; ++i) {
    for (std::int64_t j = 0; j < N; ++j) {
      float s = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        s += av[static_cast<std::size_t>(i * K + k)] * bv[static_cast<std::size_t>(k * N + j)];
      }
      ASSERT_EQ(cv[static_cast<std::size_t>(i * N + j)], s) << i << "," << j;
    }
  }
  // Column-parallel shards, row shards, transposed storage and batching give the same bits.
  EXPECT_TRUE(bitwise_equal(matmul(a, b.narrow(1, 100, 77)), c.narrow(1, 100, 77)));
  EXPECT_TRUE(bitwise_equal(matmul(a.narrow(0, 2, 3), b), c.narrow(0, 2, 3)));
  EXPECT_TRUE(bitwise_equal(matmul(a.transpose(0, 1).contiguous(), b, true), c));
  EXPECT_TRUE(bitwise_equal(matmul(a, b.transpose(0, 1).contiguous(), false, true), c));
  const Tensor a3 = Tensor::randn({4, M, K}, 13);
  const Tensor c3 = matmul(a3, b);
  EXPECT_TRUE(bitwise_equal(matmul(a3.select(0, 2), b), c3.select(0, 2)));
  EXPECT_TRUE(bitwise_equal(matmul(a, b), c));  // run to run
}

// out(r, c) = sum over t = 0 .. n-1, in that order, of x(r, t) * y(t, c), in T from +0: the
// scalar definition the kernel must reproduce bit for bit.
template <class T, class X, class Y>
std::vector<T> loop_product(std::int64_t rows, std::int64_t cols, std::int64_t n, X x, Y y) {
  std::vector<T> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      T s = 0;
      for (std::int64_t t = 0; t < n; ++t) s += x(r, t) * y(t, c);
      out[static_cast<std::size_t>(r * cols + c)] = s;
    }
  return out;
}

// The blocked, vectorised kernel against the scalar loops, forward and backward, in every
// storage layout, with sizes past every block of the kernel (101 rows: 16 tiles of 6 plus a
// tail; 1030 columns: more than one 1024-column block, plus a partial vector; 263 deep: two
// depth blocks) so that each partial sum crosses registers, c and the blocks' edges.
template <class T>
void expect_kernel_equals_loops(bool ta, bool tb) {
  const std::int64_t M = 101, N = 1030, K = 263;
  const DType dt = dtype_of<T>;
  const Tensor a = Tensor::randn(ta ? Shape{K, M} : Shape{M, K}, 41, 0, 1, dt);
  const Tensor b = Tensor::randn(tb ? Shape{N, K} : Shape{K, N}, 42, 0, 1, dt);
  const Tensor dc = Tensor::randn({M, N}, 43, 0, 1, dt);
  const std::vector<T> av = a.to_vector<T>(), bv = b.to_vector<T>(), dcv = dc.to_vector<T>();
  auto A = [&](std::int64_t i, std::int64_t k) {
    return av[static_cast<std::size_t>(ta ? k * M + i : i * K + k)];
  };
  auto B = [&](std::int64_t k, std::int64_t j) {
    return bv[static_cast<std::size_t>(tb ? j * K + k : k * N + j)];
  };
  auto DC = [&](std::int64_t i, std::int64_t j) {
    return dcv[static_cast<std::size_t>(i * N + j)];
  };
  const std::string layout =
      std::string(ta ? "a^T " : "a ") + (tb ? "b^T " : "b ") + dtype_name(dt);
  EXPECT_EQ(matmul(a, b, ta, tb).to_vector<T>(), loop_product<T>(M, N, K, A, B)) << layout;
  const MatmulGrads g = matmul_backward(dc, a, b, ta, tb);
  // dA(i, k) = sum_j dC(i, j) B(k, j); dB(k, j) = sum_i A(i, k) dC(i, j); stored like a and b.
  const std::vector<T> da =
      ta ? loop_product<T>(
               K, M, N, [&](auto k, auto j) { return B(k, j); },
               [&](auto j, auto i) { return DC(i, j); })
         : loop_product<T>(M, K, N, DC, [&](auto j, auto k) { return B(k, j); });
  const std::vector<T> db = tb ? loop_product<T>(
                                     N, K, M, [&](auto j, auto i) { return DC(i, j); }, A)
                               : loop_product<T>(
                                     K, N, M, [&](auto k, auto i) { return A(i, k); }, DC);
  EXPECT_EQ(g.da.to_vector<T>(), da) << "da, " << layout;
  EXPECT_EQ(g.db.to_vector<T>(), db) << "db, " << layout;
}

TEST(Matmul, KernelEqualsTheScalarLoopsBitwiseInEveryLayout) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) expect_kernel_equals_loops<float>(ta, tb);
  expect_kernel_equals_loops<double>(false, true);
  expect_kernel_equals_loops<double>(true, false);
}

TEST(Matmul, Bf16IsF32AccumulationRoundedOnce) {
  const Tensor a = Tensor::randn({6, 200}, 21, 0, 1, DType::bf16);
  const Tensor b = Tensor::randn({200, 10}, 22, 0, 1, DType::bf16);
  const Tensor want = matmul(a.to(DType::f32), b.to(DType::f32)).to(DType::bf16);
  EXPECT_TRUE(bitwise_equal(matmul(a, b), want));
  const Tensor h = matmul(a.to(DType::f16), b.to(DType::f16));
  EXPECT_TRUE(bitwise_equal(
      h, matmul(a.to(DType::f16).to(DType::f32), b.to(DType::f16).to(DType::f32)).to(DType::f16)));
}

TEST(Matmul, F64AgainstLoops) {
  const Tensor a = Tensor::randn({5, 64}, 31, 0, 1, DType::f64);
  const Tensor b = Tensor::randn({64, 3}, 32, 0, 1, DType::f64);
  const std::vector<double> av = vals(a), bv = vals(b), cv = vals(matmul(a, b));
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 64; ++k)
        s += av[static_cast<std::size_t>(i * 64 + k)] * bv[static_cast<std::size_t>(k * 3 + j)];
      EXPECT_EQ(cv[static_cast<std::size_t>(i * 3 + j)], s);  // same order, same bits
    }
  }
}

TEST(Matmul, ShapeAndDtypeErrors) {
  const Tensor a = Tensor::zeros({2, 3});
  try {
    matmul(a, Tensor::zeros({4, 5}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("matmul: inner dimensions differ"));
    EXPECT_THAT(e.what(), HasSubstr("f32[2, 3]"));
  }
  EXPECT_THROW(matmul(a, Tensor::zeros({3, 5}, DType::bf16)), Error);
  EXPECT_THROW(matmul(Tensor::zeros({3}), Tensor::zeros({3, 5})), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 5})), Error);
  EXPECT_THROW(matmul(Tensor::zeros({2, 3}, DType::i64), Tensor::zeros({3, 5}, DType::i64)), Error);
  EXPECT_THROW(matmul_backward(Tensor::zeros({2, 4}), a, Tensor::zeros({3, 5})), Error);
}

// --- add / scale ----------------------------------------------------------------------------

TEST(Add, SameShapeAndBiasBroadcast) {
  const Tensor a = Tensor::randn({2, 3, 4}, 41);
  for (const Shape& bs : {Shape{2, 3, 4}, Shape{3, 4}, Shape{4}}) {
    const Tensor b = Tensor::randn(bs, 42);
    const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    const std::vector<float> cv = add(a, b).to_vector<float>();
    for (std::size_t i = 0; i < av.size(); ++i) {
      ASSERT_EQ(cv[i], av[i] + bv[i % bv.size()]);  // one correctly rounded f32 addition
    }
  }
  // bf16: the f32 sum rounded once.
  const Tensor x = Tensor::randn({3, 8}, 43, 0, 1, DType::bf16);
  const Tensor bias = Tensor::randn({8}, 44, 0, 1, DType::bf16);
  EXPECT_TRUE(
      bitwise_equal(add(x, bias), add(x.to(DType::f32), bias.to(DType::f32)).to(DType::bf16)));
  EXPECT_THROW(add(a, Tensor::zeros({3})), Error);
  EXPECT_THROW(add(a, Tensor::zeros({2, 3})), Error);  // leading, not trailing
  EXPECT_THROW(add(a, Tensor::zeros({4}, DType::f64)), Error);
}

TEST(Add, BackwardSumsOverBroadcastDims) {
  const Tensor dc = Tensor::randn({5, 6, 7}, 45);
  const AddGrads same = add_backward(dc, {5, 6, 7});
  EXPECT_TRUE(same.da.shares_storage(dc));
  EXPECT_TRUE(same.db.shares_storage(dc));
  const AddGrads g = add_backward(dc, {7});
  EXPECT_TRUE(g.da.shares_storage(dc));
  ASSERT_EQ(g.db.shape(), (Shape{7}));
  const std::vector<double> d = vals(dc);
  std::vector<double> ref(7, 0), tol(7, 0);
  for (std::size_t i = 0; i < d.size(); ++i) {
    ref[i % 7] += d[i];
    tol[i % 7] += gamma(30) * std::fabs(d[i]);  // 30 terms per column
  }
  expect_within(vals(g.db), ref, tol, "add db");
  EXPECT_THROW(add_backward(dc, {6}), Error);
}

TEST(Scale, ForwardAndBackward) {
  const Tensor x = Tensor::randn({4, 5}, 51);
  const std::vector<float> xv = x.to_vector<float>();
  const std::vector<float> yv = scale(x, 0.125).to_vector<float>();
  const std::vector<float> dv = scale_backward(x, -3.0).to_vector<float>();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    EXPECT_EQ(yv[i], 0.125f * xv[i]);
    EXPECT_EQ(dv[i], -3.0f * xv[i]);
  }
  const Tensor b = Tensor::randn({9}, 52, 0, 1, DType::bf16);
  EXPECT_TRUE(bitwise_equal(scale(b, 0.3), scale(b.to(DType::f32), 0.3).to(DType::bf16)));
}

// --- layer_norm -----------------------------------------------------------------------------

struct LnRef {
  std::vector<double> y, mean, rstd, y_tol;
};

LnRef layer_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, double eps, double u) {
  const std::vector<double> xv = vals(x), wv = vals(w), bv = vals(b);
  const auto H = static_cast<std::size_t>(x.size(-1));
  LnRef r;
  for (std::size_t row = 0; row < xv.size() / H; ++row) {
    const double* xr = xv.data() + row * H;
    double mean = 0, abs_mean = 0;
    for (std::size_t j = 0; j < H; ++j) {
      mean += xr[j] / static_cast<double>(H);
      abs_mean += std::fabs(xr[j]) / static_cast<double>(H);
    }
    double var = 0;
    for (std::size_t j = 0; j < H; ++j)
      var += (xr[j] - mean) * (xr[j] - mean) / static_cast<double>(H);
    const double rstd = 1 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    for (std::size_t j = 0; j < H; ++j) {
      const double xhat = (xr[j] - mean) * rstd;
      const double y = xhat * wv[j] + bv[j];
      r.y.push_back(y);
      // First order: the mean errs by (H+1)u * mean|x|, the variance by (H+2)u relative (the
      // mean's error enters it only at second order), rstd by half that plus 2u, and the
      // normalise-scale-shift adds 4u: within (H+8)u of the magnitudes involved.
      const double hh = static_cast<double>(H);
      r.y_tol.push_back(
          (hh + 8) * u *
          (std::fabs(xhat * wv[j]) + std::fabs(wv[j]) * rstd * abs_mean + std::fabs(y)));
    }
  }
  return r;
}

TEST(LayerNorm, ForwardF32AndBf16AgainstFloat64) {
  const std::int64_t H = 96;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::randn({2, 3, H}, 61, 0.5, 2.0, dtype);
    const Tensor w = Tensor::randn({H}, 62, 1.0, 0.3, dtype);
    const Tensor b = Tensor::randn({H}, 63, 0.0, 0.3, dtype);
    const LayerNormResult r = layer_norm(x, w, b, 1e-5);
    ASSERT_EQ(r.y.dtype(), dtype);
    ASSERT_EQ(r.mean.shape(), (Shape{2, 3}));
    ASSERT_EQ(r.rstd.dtype(), DType::f32);
    const LnRef ref = layer_norm_ref(x, w, b, 1e-5, kU32);
    std::vector<double> tol = ref.y_tol;
    if (dtype == DType::bf16) {
      for (std::size_t i = 0; i < tol.size(); ++i)
        tol[i] = kUBf16 * std::fabs(ref.y[i]) + (1 + kUBf16) * tol[i];
    }
    expect_within(vals(r.y), ref.y, tol, std::string("layer_norm y ") + dtype_name(dtype));
    std::vector<double> rtol;
    for (double v : ref.rstd) rtol.push_back((H / 2.0 + 4) * kU32 * v);
    expect_within(vals(r.rstd), ref.rstd, rtol, "layer_norm rstd");
  }
}

TEST(LayerNorm, BackwardF32AgainstJacobian) {
  const std::int64_t R = 5, H = 64;
  const Tensor x = Tensor::randn({R, H}, 71, 0.3, 1.5);
  const Tensor w = Tensor::randn({H}, 72, 1.0, 0.3);
  const Tensor b = Tensor::randn({H}, 73, 0.0, 0.3);
  const Tensor dy = Tensor::randn({R, H}, 74);
  const LayerNormResult r = layer_norm(x, w, b);
  const LayerNormGrads g = layer_norm_backward(dy, x, w, r.mean, r.rstd);
  const std::vector<double> xv = vals(x), wv = vals(w), dyv = vals(dy);
  const double u = kU32, hh = static_cast<double>(H);
  std::vector<double> dx, dx_tol, dw(H, 0), dw_tol(H, 0), db(H, 0), db_tol(H, 0);
  for (std::int64_t row = 0; row < R; ++row) {
    const double* xr = xv.data() + row * H;
    const double* gr = dyv.data() + row * H;
    double mean = 0;
    for (std::int64_t j = 0; j < H; ++j) mean += xr[j] / hh;
    double var = 0;
    for (std::int64_t j = 0; j < H; ++j) var += (xr[j] - mean) * (xr[j] - mean) / hh;
    const double rstd = 1 / std::sqrt(var + 1e-5);
    // xhat as computed carries the mean's error, (H+1)u * mean|x| * rstd, even where xhat is 0:
    // xmag bounds the magnitude its errors scale with.
    double abs_x = 0;
    for (std::int64_t j = 0; j < H; ++j) abs_x += std::fabs(xr[j]) / hh;
    std::vector<double> xhat(H), xmag(H);
    double abs_g = 0, abs_gx = 0;
    for (std::int64_t j = 0; j < H; ++j) {
      xhat[j] = (xr[j] - mean) * rstd;
      xmag[j] = std::fabs(xhat[j]) + rstd * abs_x;
      abs_g += std::fabs(gr[j] * wv[j]) / hh;
      abs_gx += std::fabs(gr[j] * wv[j]) * xmag[j] / hh;
    }
    // dx_i = sum_j dy_j w_j d(xhat_j)/d(x_i), with d(xhat_j)/d(x_i) = rstd (delta_ij - 1/H -
    // xhat_i xhat_j / H) (eps counts as part of the variance, as in the forward).
    for (std::int64_t i = 0; i < H; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < H; ++j) {
        const double jac = rstd * ((i == j ? 1.0 : 0.0) - 1 / hh - xhat[i] * xhat[j] / hh);
        s += gr[j] * wv[j] * jac;
      }
      dx.push_back(s);
      // Two means of H products (H+2)u each, rstd and xhat carried from the forward (H)u; the
      // combination is bounded by rstd (|g_i| + mean|g| + |xhat_i| mean|g xhat|).
      dx_tol.push_back((2 * hh + 16) * u * rstd *
                       (std::fabs(gr[i] * wv[i]) + abs_g + xmag[i] * abs_gx));
      dw[static_cast<std::size_t>(i)] += gr[i] * xhat[i];
      dw_tol[static_cast<std::size_t>(i)] +=
          (static_cast<double>(R) + hh + 8) * u * std::fabs(gr[i]) * xmag[i];
      db[static_cast<std::size_t>(i)] += gr[i];
      db_tol[static_cast<std::size_t>(i)] += gamma(static_cast<double>(R)) * std::fabs(gr[i]);
    }
  }
  expect_within(vals(g.dx), dx, dx_tol, "layer_norm dx");
  expect_within(vals(g.dweight), dw, dw_tol, "layer_norm dweight");
  expect_within(vals(g.dbias), db, db_tol, "layer_norm dbias");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const Tensor x = Tensor::randn({3, 6}, 81, 0.0, 1.0, DType::f64);
  const Tensor w = Tensor::randn({6}, 82, 1.0, 0.5, DType::f64);
  const Tensor b = Tensor::randn({6}, 83, 0.0, 0.5, DType::f64);
  const Tensor dy = Tensor::randn({3, 6}, 84, 0.0, 1.0, DType::f64);
  const LayerNormResult r = layer_norm(x, w, b, 1e-3);
  const LayerNormGrads g = layer_norm_backward(dy, x, w, r.mean, r.rstd);
  expect_matches_fd(
      vals(g.dx),
      numeric_grad([&](const Tensor& v) { return dot(dy, layer_norm(v, w, b, 1e-3).y); }, x), "dx");
  expect_matches_fd(
      vals(g.dweight),
      numeric_grad([&](const Tensor& v) { return dot(dy, layer_norm(x, v, b, 1e-3).y); }, w),
      "dweight");
  expect_matches_fd(
      vals(g.dbias),
      numeric_grad([&](const Tensor& v) { return dot(dy, layer_norm(x, w, v, 1e-3).y); }, b),
      "dbias");
}

TEST(LayerNorm, ShapeErrors) {
  const Tensor x = Tensor::zeros({2, 4});
  EXPECT_THROW(layer_norm(x, Tensor::ones({3}), Tensor::zeros({4})), Error);
  EXPECT_THROW(layer_norm(x, Tensor::ones({4}, DType::bf16), Tensor::zeros({4})), Error);
  const LayerNormResult r = layer_norm(x, Tensor::ones({4}), Tensor::zeros({4}));
  EXPECT_THROW(layer_norm_backward(Tensor::zeros({2, 5}), x, Tensor::ones({4}), r.mean, r.rstd),
               Error);
}

// --- GELU -----------------------------------------------------------------------------------

TEST(Gelu, ForwardAndBackwardAgainstFloat64) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::randn({400}, 91, 0.0, 3.0, dtype);
    const Tensor dy = Tensor::randn({400}, 92, 0.0, 1.0, dtype);
    const std::vector<double> xv = vals(x), dyv = vals(dy);
    const std::vector<double> y = vals(gelu(x)), dx = vals(gelu_backward(dy, x));
    std::vector<double> yr, yt, dr, dt;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double v = xv[i];
      const double arg = kGeluC * (v + kGeluA * v * v * v);
      const double t = std::tanh(arg);
      const double du = kGeluC * (1 + 3 * kGeluA * v * v);
      const double yy = 0.5 * v * (1 + t);
      const double dd = dyv[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du);
      // tanh's argument takes 7 roundings (two of them the f32 constants), 8u |arg| at most, which
      // moves t by (1 - t^2) times that; tanhf adds at most 2 ulp, 4u |t|. Then y = 0.5 v (1 + t)
      // adds 2u |y|; the derivative's two terms add at most 12u of their magnitudes, and its
      // (1 - t^2) doubles t's error times |t|.
      const double dt_err = kU32 * (8 * std::fabs(arg) * (1 - t * t) + 4 * std::fabs(t));
      double ytol = 0.5 * std::fabs(v) * dt_err + 3 * kU32 * std::fabs(yy);
      double dtol =
          std::fabs(dyv[i]) * ((0.5 + std::fabs(v * t * du)) * dt_err +
                               12 * kU32 * (0.5 * std::fabs(1 + t) + std::fabs(0.5 * v * du)));
      if (dtype == DType::bf16) {
        ytol = kUBf16 * std::fabs(yy) + (1 + kUBf16) * ytol;
        dtol = kUBf16 * std::fabs(dd) + (1 + kUBf16) * dtol;
      }
      yr.push_back(yy);
      yt.push_back(ytol);
      dr.push_back(dd);
      dt.push_back(dtol);
    }
    expect_within(y, yr, yt, std::string("gelu ") + dtype_name(dtype));
    expect_within(dx, dr, dt, std::string("gelu_backward ") + dtype_name(dtype));
  }
  const Tensor x = Tensor::randn({10}, 93, 0.0, 2.0, DType::f64);
  const Tensor dy = Tensor::randn({10}, 94, 0.0, 1.0, DType::f64);
  expect_matches_fd(vals(gelu_backward(dy, x)),
                    numeric_grad([&](const Tensor& v) { return dot(dy, gelu(v)); }, x), "gelu dx");
}

// --- softmax --------------------------------------------------------------------------------

TEST(Softmax, ForwardAndBackwardAgainstFloat64) {
  const std::int64_t R = 4, V = 50;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::randn({R, V}, 101, 0.0, 4.0, dtype);
    const Tensor dy = Tensor::randn({R, V}, 102, 0.0, 1.0, dtype);
    const Tensor y = softmax(x);
    const Tensor dx = softmax_backward(dy, y);
    const std::vector<double> xv = vals(x), dyv = vals(dy), yv = vals(y);
    std::vector<double> yr, yt, dr, dt;
    for (std::int64_t r = 0; r < R; ++r) {
      const double* xr = xv.data() + r * V;
      double m = xr[0];
      for (std::int64_t j = 1; j < V; ++j) m = std::max(m, xr[j]);
      double s = 0;
      for (std::int64_t j = 0; j < V; ++j) s += std::exp(xr[j] - m);
      for (std::int64_t j = 0; j < V; ++j) {
        const double p = std::exp(xr[j] - m) / s;
        yr.push_back(p);
        // exp's argument is rounded (u |x - m|), expf adds 1u, the sum of V terms gamma_V, the
        // division 1u.
        double tol = p * ((static_cast<double>(V) + 4) * kU32 + 2 * kU32 * std::fabs(xr[j] - m));
        if (dtype == DType::bf16) tol = kUBf16 * p + (1 + kUBf16) * tol;
        yt.push_back(tol);
      }
      // Backward from the op's own y (the saved output): dx_i = sum_j dy_j y_j (delta_ij - y_i).
      const double* pr = yv.data() + r * V;
      const double* gr = dyv.data() + r * V;
      double mag = 0;
      for (std::int64_t j = 0; j < V; ++j) mag += std::fabs(gr[j] * pr[j]);
      for (std::int64_t i = 0; i < V; ++i) {
        double s2 = 0;
        for (std::int64_t j = 0; j < V; ++j) s2 += gr[j] * pr[j] * ((i == j ? 1.0 : 0.0) - pr[i]);
        dr.push_back(s2);
        double tol = (static_cast<double>(V) + 3) * kU32 * pr[i] * (std::fabs(gr[i]) + mag);
        if (dtype == DType::bf16) tol = kUBf16 * std::fabs(s2) + (1 + kUBf16) * tol;
        dt.push_back(tol);
      }
    }
    expect_within(yv, yr, yt, std::string("softmax ") + dtype_name(dtype));
    expect_within(vals(dx), dr, dt, std::string("softmax_backward ") + dtype_name(dtype));
  }
  const Tensor x = Tensor::randn({2, 5}, 103, 0.0, 1.0, DType::f64);
  const Tensor dy = Tensor::randn({2, 5}, 104, 0.0, 1.0, DType::f64);
  expect_matches_fd(vals(softmax_backward(dy, softmax(x))),
                    numeric_grad([&](const Tensor& v) { return dot(dy, softmax(v)); }, x),
                    "softmax dx");
}

// --- embedding ------------------------------------------------------------------------------

TEST(Embedding, LookupCopiesRowsExactly) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
    const Tensor w = Tensor::randn({10, 6}, 111, 0, 1, DType::f32).to(dtype);
    for (DType id_type : {DType::i64, DType::i32}) {
      const Tensor ids =
          Tensor::from_vector(std::vector<std::int64_t>{3, 0, 9, 3, 7, 1}, {2, 3}, id_type);
      const Tensor out = embedding(ids, w);
      ASSERT_EQ(out.shape(), (Shape{2, 3, 6}));
      ASSERT_EQ(out.dtype(), dtype);
      for (std::int64_t t = 0; t < 6; ++t) {
        const auto id = static_cast<std::int64_t>(ids.view({6}).at({t}));
        EXPECT_TRUE(bitwise_equal(out.view({6, 6}).select(0, t), w.select(0, id)));
      }
    }
  }
  const Tensor w = Tensor::zeros({10, 4});
  try {
    embedding(Tensor::from_vector(std::vector<std::int64_t>{2, 10}, {2}), w);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("id 10"));
    EXPECT_THAT(e.what(), HasSubstr("10 rows"));
  }
  EXPECT_THROW(embedding(Tensor::from_vector(std::vector<std::int64_t>{-1}, {1}), w), Error);
  EXPECT_THROW(embedding(Tensor::zeros({2}), w), Error);  // f32 ids
}

TEST(Embedding, BackwardScattersInTokenOrder) {
  const std::vector<std::int64_t> id_values = {4, 1, 4, 4, 0, 1, 4, 2};
  const Tensor ids = Tensor::from_vector(id_values, {2, 4});
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor dy = Tensor::randn({2, 4, 5}, 121, 0, 1, dtype);
    const Tensor dw = embedding_backward(dy, ids, 6);
    ASSERT_EQ(dw.shape(), (Shape{6, 5}));
    const std::vector<double> g = vals(dy);
    std::vector<double> ref(30, 0), mag(30, 0), terms(30, 0);
    for (std::size_t t = 0; t < id_values.size(); ++t) {
      for (std::size_t h = 0; h < 5; ++h) {
        const auto at = static_cast<std::size_t>(id_values[t]) * 5 + h;
        ref[at] += g[t * 5 + h];
        mag[at] += std::fabs(g[t * 5 + h]);
        terms[at] += 1;
      }
    }
    std::vector<double> tol(30);
    for (std::size_t i = 0; i < 30; ++i) {
      tol[i] = gamma(terms[i]) * mag[i];
      if (dtype == DType::bf16) tol[i] = kUBf16 * std::fabs(ref[i]) + (1 + kUBf16) * tol[i];
    }
    expect_within(vals(dw), ref, tol, std::string("embedding_backward ") + dtype_name(dtype));
    EXPECT_EQ(dw.at({3, 0}), 0.0);  // never looked up
    EXPECT_EQ(dw.at({5, 4}), 0.0);
  }
  EXPECT_THROW(embedding_backward(Tensor::zeros({2, 4, 5}), ids, 4), Error);  // id 4 out of 4
  EXPECT_THROW(embedding_backward(Tensor::zeros({2, 5, 5}), ids, 6), Error);
}

// --- cross-entropy --------------------------------------------------------------------------

TEST(CrossEntropy, LossAndGradientAgainstFloat64) {
  const std::int64_t N = 6, V = 40;
  const std::vector<std::int64_t> targets_v = {3, -100, 39, 0, 17, -100};
  const Tensor targets = Tensor::from_vector(targets_v, {2, 3});
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor logits = Tensor::randn({2, 3, V}, 131, 0.0, 3.0, dtype);
    const CrossEntropyResult r = cross_entropy(logits, targets);
    ASSERT_EQ(r.loss.dim(), 0);
    ASSERT_EQ(r.loss.dtype(), dtype);
    ASSERT_EQ(r.lse.shape(), (Shape{2, 3}));
    const Tensor dloss = Tensor::full({}, 1.5, dtype);
    const Tensor dx = cross_entropy_backward(dloss, logits, targets, r.lse);
    const std::vector<double> x = vals(logits);
    double total = 0, total_tol = 0, count = 0;
    std::vector<double> dref, dtol;
    for (std::int64_t i = 0; i < N; ++i) {
      const double* xr = x.data() + i * V;
      double m = xr[0];
      for (std::int64_t j = 1; j < V; ++j) m = std::max(m, xr[j]);
      double s = 0;
      for (std::int64_t j = 0; j < V; ++j) s += std::exp(xr[j] - m);
      const double lse = m + std::log(s);
      const std::int64_t t = targets_v[static_cast<std::size_t>(i)];
      if (t != -100) {
        total += lse - xr[t];
        count += 1;
        // The sum of exps errs by (V+3)u relative, which log turns into an absolute error; the
        // log, the add of m and the subtraction of the target logit add u of their magnitudes.
        total_tol +=
            (static_cast<double>(V) + 4) * kU32 + 3 * kU32 * (std::fabs(lse) + std::fabs(xr[t]));
      }
      for (std::int64_t j = 0; j < V; ++j) {
        const double p = std::exp(xr[j] - lse);
        const double g = t == -100 ? 0.0 : (p - (j == t ? 1.0 : 0.0)) * 1.5 / 4.0;
        dref.push_back(g);
        // p uses the saved f32 lse (error as above) and an expf: relative (V+6)u + 2u|x - lse|;
        // the scale by dloss/count and the subtraction add 3u.
        double tol = t == -100 ? 0.0
                               : 1.5 / 4.0 *
                                     (p * ((static_cast<double>(V) + 6) * kU32 +
                                           3 * kU32 * (std::fabs(xr[j] - lse) + std::fabs(lse))) +
                                      3 * kU32 * (p + 1));
        if (dtype == DType::bf16) tol = kUBf16 * std::fabs(g) + (1 + kUBf16) * tol;
        dtol.push_back(tol);
      }
    }
    const double loss = total / count;
    // Accumulating count terms and dividing adds (count+1)u relative to the mean magnitude.
    double loss_tol = total_tol / count + (count + 1) * kU32 * std::fabs(loss);
    if (dtype == DType::bf16) loss_tol = kUBf16 * std::fabs(loss) + (1 + kUBf16) * loss_tol;
    EXPECT_NEAR(r.loss.item(), loss, loss_tol) << dtype_name(dtype);
    expect_within(vals(dx), dref, dtol, std::string("cross_entropy_backward ") + dtype_name(dtype));
  }
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{2, -1, 0}, {3});
  const Tensor logits = Tensor::randn({3, 5}, 141, 0.0, 1.0, DType::f64);
  const CrossEntropyResult r = cross_entropy(logits, targets, -1);
  const Tensor dx =
      cross_entropy_backward(Tensor::full({}, 1.0, DType::f64), logits, targets, r.lse, -1);
  expect_matches_fd(
      vals(dx),
      numeric_grad([&](const Tensor& v) { return cross_entropy(v, targets, -1).loss.item(); },
                   logits),
      "cross_entropy dlogits");
}

TEST(CrossEntropy, AllIgnoredAndBadTargets) {
  const Tensor logits = Tensor::randn({2, 4}, 151);
  const Tensor ignored = Tensor::from_vector(std::vector<std::int64_t>{-100, -100}, {2});
  const CrossEntropyResult r = cross_entropy(logits, ignored);
  EXPECT_TRUE(std::isnan(r.loss.item()));
  const Tensor dx = cross_entropy_backward(Tensor::full({}, 1.0), logits, ignored, r.lse);
  for (double v : vals(dx)) EXPECT_EQ(v, 0.0);
  try {
    cross_entropy(logits, Tensor::from_vector(std::vector<std::int64_t>{1, 4}, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("target 4 of row 1"));
  }
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<std::int64_t>{1}, {1})),
               Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({2})), Error);  // f32 targets
}

// --- cat / split ----------------------------------------------------------------------------

TEST(CatSplit, ConcatenatesAlongAnyDimension) {
  const Tensor a = Tensor::arange(24, DType::i64).view({2, 3, 4});
  for (std::int64_t dim : {0, 1, 2, -1}) {
    const std::int64_t d = dim < 0 ? dim + 3 : dim;
    const std::int64_t n = a.size(d);
    const std::vector<std::int64_t> sizes = {1, n - 1};
    const std::vector<Tensor> pieces = split(a, sizes, dim);
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_TRUE(pieces[1].shares_storage(a));
    EXPECT_EQ(pieces[1].size(d), n - 1);
    const Tensor back = cat(pieces, dim);
    EXPECT_TRUE(bitwise_equal(back, a));
    EXPECT_TRUE(back.is_contiguous());
    EXPECT_TRUE(bitwise_equal(split_backward(pieces, dim), a));
    const std::vector<Tensor> grads = cat_backward(a, sizes, dim);
    EXPECT_TRUE(bitwise_equal(grads[0], pieces[0]));
  }
  // Three pieces of different sizes along the middle dim, checked element by element.
  const Tensor x = Tensor::randn({2, 1, 3}, 161, 0, 1, DType::bf16);
  const Tensor y = Tensor::randn({2, 4, 3}, 162, 0, 1, DType::bf16);
  const Tensor z = Tensor::randn({2, 2, 3}, 163, 0, 1, DType::bf16);
  const Tensor c = cat({x, y, z}, 1);
  ASSERT_EQ(c.shape(), (Shape{2, 7, 3}));
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 7; ++j) {
      for (std::int64_t k = 0; k < 3; ++k) {
        const double want = j < 1   ? x.at({i, j, k})
                            : j < 5 ? y.at({i, j - 1, k})
                                    : z.at({i, j - 5, k});
        EXPECT_EQ(c.at({i, j, k}), want);
      }
    }
  }
  EXPECT_THROW(cat({x, Tensor::zeros({2, 1, 4}, DType::bf16)}, 1), Error);
  EXPECT_THROW(cat({x, Tensor::zeros({2, 1, 3})}, 1), Error);
  EXPECT_THROW(cat({}, 0), Error);
  EXPECT_THROW(split(a, {1, 2}, 0), Error);
  EXPECT_THROW(split(a, {3, -1}, 0), Error);
  EXPECT_THROW(split(a, {2}, 3), Error);
}

// --- costs and shape-only mode --------------------------------------------------------------

// Runs every op once on the given tensors and returns what was charged.
std::vector<OpCost> run_all(bool with_data, DType dtype) {
  auto make = [&](const Shape& s, std::uint64_t seed) {
    return with_data ? Tensor::randn(s, seed, 0, 1, dtype) : Tensor::shape_only(s, dtype);
  };
  auto make_ids = [&](const Shape& s, std::int64_t v) {
    if (!with_data) return Tensor::shape_only(s, DType::i64);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(shape_numel(s)));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i) % v;
    return Tensor::from_vector(ids, s);
  };
  RecordingSink sink;
  ScopedCostSink guard(&sink);
  const Tensor a = make({2, 8, 16}, 1), b = make({16, 12}, 2);
  const Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 8, 12}));
  EXPECT_EQ(c.has_data(), with_data);
  const MatmulGrads mg = matmul_backward(c, a, b);
  EXPECT_EQ(mg.db.shape(), b.shape());
  EXPECT_EQ(mg.db.has_data(), with_data);
  const Tensor bias = make({12}, 3);
  EXPECT_EQ(add(c, bias).has_data(), with_data);
  EXPECT_EQ(add_backward(c, {12}).db.shape(), (Shape{12}));
  (void)scale(c, 2.0);
  const LayerNormResult ln = layer_norm(c, make({12}, 4), bias);
  EXPECT_EQ(ln.mean.shape(), (Shape{2, 8}));
  EXPECT_EQ(ln.rstd.has_data(), with_data);
  const LayerNormGrads lg = layer_norm_backward(c, c, bias, ln.mean, ln.rstd);
  EXPECT_EQ(lg.dweight.shape(), (Shape{12}));
  (void)gelu_backward(c, gelu(c));
  (void)softmax_backward(c, softmax(c));
  const Tensor ids = make_ids({2, 8}, 12);
  const Tensor w = make({12, 16}, 5);
  EXPECT_EQ(embedding(ids, w).shape(), (Shape{2, 8, 16}));
  EXPECT_EQ(embedding_backward(a, ids, 12).shape(), (Shape{12, 16}));
  const CrossEntropyResult ce = cross_entropy(c, ids);
  EXPECT_EQ(ce.loss.has_data(), with_data);
  EXPECT_EQ(cross_entropy_backward(
                with_data ? Tensor::ones({}, dtype) : Tensor::shape_only({}, dtype), c, ids, ce.lse)
                .shape(),
            c.shape());
  const Tensor joined = cat({a, a}, -1);
  EXPECT_EQ(joined.shape(), (Shape{2, 8, 32}));
  EXPECT_EQ(split_backward(split(joined, {5, 27}, 2), 2).has_data(), with_data);
  return sink.charges;
}

TEST(Cost, ShapeOnlyChargesExactlyWhatRealDataCharges) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::vector<OpCost> real = run_all(true, dtype);
    const std::vector<OpCost> shape_only = run_all(false, dtype);
    ASSERT_EQ(real.size(), shape_only.size());
    ASSERT_EQ(real.size(), 17u);
    for (std::size_t i = 0; i < real.size(); ++i) {
      EXPECT_STREQ(real[i].op, shape_only[i].op);
      EXPECT_EQ(real[i].flops, shape_only[i].flops) << real[i].op;
      EXPECT_EQ(real[i].bytes, shape_only[i].bytes) << real[i].op;
      EXPECT_EQ(real[i].dtype, dtype) << real[i].op;
    }
  }
}

TEST(Cost, DocumentedFlopsAndBytes) {
  const std::vector<OpCost> c = run_all(false, DType::bf16);
  auto find = [&](const char* op) {
    for (const OpCost& x : c) {
      if (std::string(x.op) == op) return x;
    }
    ADD_FAILURE() << "no charge for " << op;
    return OpCost{op, -1, -1, DType::f32};
  };
  const double m = 16, n = 12, k = 16, two = 2;  // a [2, 8, 16] x b [16, 12]: M = 2*8 rows
  EXPECT_EQ(find("matmul").flops, 2 * m * n * k);
  EXPECT_EQ(find("matmul").bytes, two * (m * k + k * n + m * n));
  EXPECT_EQ(find("matmul_backward").flops, 4 * m * n * k);
  EXPECT_EQ(find("matmul_backward").bytes, two * (2 * m * n + m * k + k * n + m * k + k * n));
  EXPECT_EQ(find("add").flops, m * n);
  EXPECT_EQ(find("add").bytes, two * (m * n + n + m * n));
  EXPECT_EQ(find("add_backward").bytes, two * (m * n + n));
  EXPECT_EQ(find("scale").flops, m * n);
  EXPECT_EQ(find("layer_norm").flops, 8 * m * n);
  // x, weight, bias, y in bf16; mean and rstd in f32.
  EXPECT_EQ(find("layer_norm").bytes, two * (m * n + n + n + m * n) + 4 * (m + m));
  EXPECT_EQ(find("layer_norm_backward").flops, 14 * m * n);
  EXPECT_EQ(find("gelu").flops, 9 * m * n);
  EXPECT_EQ(find("gelu_backward").flops, 19 * m * n);
  EXPECT_EQ(find("softmax").flops, 5 * m * n);
  EXPECT_EQ(find("softmax").bytes, two * 2 * m * n);
  EXPECT_EQ(find("softmax_backward").flops, 4 * m * n);
  EXPECT_EQ(find("embedding").flops, 0);
  EXPECT_EQ(find("embedding").bytes, 8 * m + two * 2 * m * 16);  // i64 ids, rows read and written
  EXPECT_EQ(find("embedding_backward").bytes, 8 * m + two * m * 16 + two * 12 * 16);
  EXPECT_EQ(find("cross_entropy").flops, 4 * m * n);
  EXPECT_EQ(find("cross_entropy").bytes, two * m * n + 8 * m + 4 * m + two);
  EXPECT_EQ(find("cat").bytes, two * 2 * (2 * 8 * 32));
  EXPECT_EQ(find("split_backward").bytes, two * 2 * (2 * 8 * 32));
}

TEST(Cost, NoSinkMeansNoCharges) {
  RecordingSink sink;
  {
    ScopedCostSink guard(&sink);
    EXPECT_EQ(cost_sink(), &sink);
    {
      ScopedCostSink off(nullptr);
      (void)matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}));
    }
    (void)matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}));
  }
  EXPECT_EQ(cost_sink(), nullptr);
  EXPECT_EQ(sink.charges.size(), 1u);
}

struct CountingPending : PendingWrite {
  int* waits;
  explicit CountingPending(int* w) : waits(w) {}
  void wait() override { ++*waits; }
};

TEST(Ops, WaitForPendingWritesOnInputs) {
  int waits = 0;
  const Tensor x = Tensor::shape_only({4, 4});
  x.set_pending_write(std::make_shared<CountingPending>(&waits));
  (void)gelu(x);  // even shape-only inputs: the op's start time depends on the write
  EXPECT_EQ(waits, 1);
  const Tensor y = Tensor::ones({4, 4});
  y.set_pending_write(std::make_shared<CountingPending>(&waits));
  (void)matmul(y, y);
  EXPECT_EQ(waits, 2);
}

}  // namespace
}  // namespace ranksim::runtime

// matmul and matmul_backward against float64 references and against the scalar loops of their
// documented sum order, bit for bit (tolerances: tests/runtime/tensor/ops_test_helpers.h).
#include "runtime/tensor/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/tensor/ops_test_helpers.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using namespace ops_testing;  // ops_test_helpers.h: tolerances, comparisons, finite differences
using ::testing::HasSubstr;

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
  Shape b_shape() const { return with_lead(tb() ? Shape{N, K} : Shape{K, N}, mode() == BMode::kBatched); }
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
    std::vector<double> da(av.size()), da_tol(av.size()), db(bv.size(), 0.0), db_mag(bv.size(), 0.0);
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
  expect_matches_fd(vals(g.da), numeric_grad([&](const Tensor& x) { return dot(w, matmul(x, b, ta(), tb())); }, a),
                    "da");
  expect_matches_fd(vals(g.db), numeric_grad([&](const Tensor& x) { return dot(w, matmul(a, x, ta(), tb())); }, b),
                    "db");
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, MatmulTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(BMode::kPlain, BMode::kShared, BMode::kBatched)));

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
  auto A = [&](std::int64_t i, std::int64_t k) { return av[static_cast<std::size_t>(ta ? k * M + i : i * K + k)]; };
  auto B = [&](std::int64_t k, std::int64_t j) { return bv[static_cast<std::size_t>(tb ? j * K + k : k * N + j)]; };
  auto DC = [&](std::int64_t i, std::int64_t j) { return dcv[static_cast<std::size_t>(i * N + j)]; };
  const std::string layout = std::string(ta ? "a^T " : "a ") + (tb ? "b^T " : "b ") + dtype_name(dt);
  EXPECT_EQ(matmul(a, b, ta, tb).to_vector<T>(), loop_product<T>(M, N, K, A, B)) << layout;
  const MatmulGrads g = matmul_backward(dc, a, b, ta, tb);
  // dA(i, k) = sum_j dC(i, j) B(k, j); dB(k, j) = sum_i A(i, k) dC(i, j); stored like a and b.
  const std::vector<T> da =
      ta ? loop_product<T>(
               K, M, N, [&](auto k, auto j) { return B(k, j); }, [&](auto j, auto i) { return DC(i, j); })
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
  EXPECT_TRUE(
      bitwise_equal(h, matmul(a.to(DType::f16).to(DType::f32), b.to(DType::f16).to(DType::f32)).to(DType::f16)));
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

}  // namespace
}  // namespace ranksim::runtime

// embedding and cross-entropy against float64 references and finite differences (tolerances:
// tests/runtime/tensor/ops_test_helpers.h).
#include "runtime/tensor/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor/ops_test_helpers.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using namespace ops_testing;  // ops_test_helpers.h: tolerances, comparisons, finite differences
using ::testing::HasSubstr;

// --- embedding ------------------------------------------------------------------------------

TEST(Embedding, LookupCopiesRowsExactly) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
    const Tensor w = Tensor::randn({10, 6}, 111, 0, 1, DType::f32).to(dtype);
    for (DType id_type : {DType::i64, DType::i32}) {
      const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{3, 0, 9, 3, 7, 1}, {2, 3}, id_type);
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
        total_tol += (static_cast<double>(V) + 4) * kU32 + 3 * kU32 * (std::fabs(lse) + std::fabs(xr[t]));
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
  const Tensor dx = cross_entropy_backward(Tensor::full({}, 1.0, DType::f64), logits, targets, r.lse, -1);
  expect_matches_fd(vals(dx),
                    numeric_grad([&](const Tensor& v) { return cross_entropy(v, targets, -1).loss.item(); }, logits),
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
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<std::int64_t>{1}, {1})), Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({2})), Error);  // f32 targets
}

}  // namespace
}  // namespace ranksim::runtime

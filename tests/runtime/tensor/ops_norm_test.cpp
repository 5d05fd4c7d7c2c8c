// layer_norm, rms_norm and softmax against float64 references and finite differences (tolerances:
// tests/runtime/tensor/ops_test_helpers.h).
#include "runtime/tensor/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/tensor/ops_test_helpers.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using namespace ops_testing;  // ops_test_helpers.h: tolerances, comparisons, finite differences
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

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
    for (std::size_t j = 0; j < H; ++j) var += (xr[j] - mean) * (xr[j] - mean) / static_cast<double>(H);
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
      r.y_tol.push_back((hh + 8) * u * (std::fabs(xhat * wv[j]) + std::fabs(wv[j]) * rstd * abs_mean + std::fabs(y)));
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
      for (std::size_t i = 0; i < tol.size(); ++i) tol[i] = kUBf16 * std::fabs(ref.y[i]) + (1 + kUBf16) * tol[i];
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
      dx_tol.push_back((2 * hh + 16) * u * rstd * (std::fabs(gr[i] * wv[i]) + abs_g + xmag[i] * abs_gx));
      dw[static_cast<std::size_t>(i)] += gr[i] * xhat[i];
      dw_tol[static_cast<std::size_t>(i)] += (static_cast<double>(R) + hh + 8) * u * std::fabs(gr[i]) * xmag[i];
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
  expect_matches_fd(vals(g.dx), numeric_grad([&](const Tensor& v) { return dot(dy, layer_norm(v, w, b, 1e-3).y); }, x),
                    "dx");
  expect_matches_fd(vals(g.dweight),
                    numeric_grad([&](const Tensor& v) { return dot(dy, layer_norm(x, v, b, 1e-3).y); }, w), "dweight");
  expect_matches_fd(vals(g.dbias),
                    numeric_grad([&](const Tensor& v) { return dot(dy, layer_norm(x, w, v, 1e-3).y); }, b), "dbias");
}

TEST(LayerNorm, ShapeErrors) {
  const Tensor x = Tensor::zeros({2, 4});
  EXPECT_THROW(layer_norm(x, Tensor::ones({3}), Tensor::zeros({4})), Error);
  EXPECT_THROW(layer_norm(x, Tensor::ones({4}, DType::bf16), Tensor::zeros({4})), Error);
  const LayerNormResult r = layer_norm(x, Tensor::ones({4}), Tensor::zeros({4}));
  EXPECT_THROW(layer_norm_backward(Tensor::zeros({2, 5}), x, Tensor::ones({4}), r.mean, r.rstd), Error);
}

// --- rms_norm -------------------------------------------------------------------------------

// Rounds a tolerance for a result stored in dtype: bf16 adds its own rounding of the result.
double stored_tol(DType dtype, double ref, double tol) {
  return dtype == DType::bf16 ? kUBf16 * std::fabs(ref) + (1 + kUBf16) * tol : tol;
}

struct RmsRef {
  std::vector<double> y, rstd, y_tol, rstd_tol;
};

// u: the op's unit roundoff; the reference's own error (the same bound in 2^-53) is added.
RmsRef rms_norm_ref(const Tensor& x, const Tensor& w, double eps, double u) {
  const std::vector<double> xv = vals(x), wv = vals(w);
  const auto H = static_cast<std::size_t>(x.size(-1));
  const double hh = static_cast<double>(H);
  RmsRef r;
  for (std::size_t row = 0; row < xv.size() / H; ++row) {
    const double* xr = xv.data() + row * H;
    double ms = 0;
    for (std::size_t j = 0; j < H; ++j) ms += xr[j] * xr[j] / hh;
    const double rstd = 1 / std::sqrt(ms + eps);
    // First order: the sum of H squares (none negative, so no cancellation) errs by (H+1)u
    // relative, the mean, eps and sqrt add 3u (the sqrt halves what it is given), the reciprocal
    // 1u: rstd within (H/2 + 4)u; y = x * rstd * w adds 2u.
    r.rstd.push_back(rstd);
    r.rstd_tol.push_back((hh / 2 + 4) * (u + kU64) * rstd);
    for (std::size_t j = 0; j < H; ++j) {
      const double y = xr[j] * rstd * wv[j];
      r.y.push_back(y);
      r.y_tol.push_back((hh / 2 + 6) * (u + kU64) * std::fabs(y));
    }
  }
  return r;
}

TEST(RmsNorm, ForwardAgainstFloat64) {
  const std::int64_t H = 96;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x = Tensor::randn({2, 3, H}, 161, 0.5, 2.0, dtype);
    const Tensor w = Tensor::randn({H}, 162, 1.0, 0.3, dtype);
    const RmsNormResult r = rms_norm(x, w, 1e-5);
    ASSERT_EQ(r.y.dtype(), dtype);
    ASSERT_EQ(r.y.shape(), x.shape());
    ASSERT_EQ(r.rstd.shape(), (Shape{2, 3}));
    ASSERT_EQ(r.rstd.dtype(), dtype == DType::f64 ? DType::f64 : DType::f32);
    const RmsRef ref = rms_norm_ref(x, w, 1e-5, unit_roundoff(dtype));
    std::vector<double> tol = ref.y_tol;
    for (std::size_t i = 0; i < tol.size(); ++i) tol[i] = stored_tol(dtype, ref.y[i], tol[i]);
    expect_within(vals(r.y), ref.y, tol, std::string("rms_norm y ") + dtype_name(dtype));
    expect_within(vals(r.rstd), ref.rstd, ref.rstd_tol, std::string("rms_norm rstd ") + dtype_name(dtype));
  }
}

TEST(RmsNorm, BackwardAgainstJacobian) {
  const std::int64_t R = 5, H = 64;
  const double hh = static_cast<double>(H);
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x = Tensor::randn({R, H}, 171, 0.3, 1.5, dtype);
    const Tensor w = Tensor::randn({H}, 172, 1.0, 0.3, dtype);
    const Tensor dy = Tensor::randn({R, H}, 174, 0.0, 1.0, dtype);
    const RmsNormResult r = rms_norm(x, w);
    const RmsNormGrads g = rms_norm_backward(dy, x, w, r.rstd);
    ASSERT_EQ(g.dx.dtype(), dtype);
    ASSERT_EQ(g.dweight.dtype(), dtype);
    ASSERT_EQ(g.dweight.shape(), (Shape{H}));
    const std::vector<double> xv = vals(x), wv = vals(w), dyv = vals(dy);
    const double u = unit_roundoff(dtype) + kU64;  // the op's and the reference's
    std::vector<double> dx, dx_tol, dw(H, 0), dw_tol(H, 0);
    for (std::int64_t row = 0; row < R; ++row) {
      const double* xr = xv.data() + row * H;
      const double* gr = dyv.data() + row * H;
      double ms = 0;
      for (std::int64_t j = 0; j < H; ++j) ms += xr[j] * xr[j] / hh;
      const double rstd = 1 / std::sqrt(ms + 1e-5);
      std::vector<double> xhat(H);
      double abs_gx = 0;
      for (std::int64_t j = 0; j < H; ++j) {
        xhat[j] = xr[j] * rstd;
        abs_gx += std::fabs(gr[j] * wv[j] * xhat[j]) / hh;
      }
      // dx_i = sum_j dy_j w_j d(xhat_j)/d(x_i), with d(xhat_j)/d(x_i) = rstd (delta_ij - xhat_i
      // xhat_j / H) (eps counts as part of the mean square, as in the forward).
      for (std::int64_t i = 0; i < H; ++i) {
        double s = 0;
        for (std::int64_t j = 0; j < H; ++j) {
          s += gr[j] * wv[j] * rstd * ((i == j ? 1.0 : 0.0) - xhat[i] * xhat[j] / hh);
        }
        dx.push_back(s);
        // rstd carries (H/2 + 4)u from the forward and xhat one more; the mean of H products
        // (H + 3)u plus xhat's; the rest 3u: within (3H + 24)u of rstd (|g_i| + |xhat_i| mean|g xhat|).
        const double tol = (3 * hh + 24) * u * rstd * (std::fabs(gr[i] * wv[i]) + std::fabs(xhat[i]) * abs_gx);
        dx_tol.push_back(stored_tol(dtype, s, tol));
        const auto c = static_cast<std::size_t>(i);
        dw[c] += gr[i] * xhat[i];
        // A sum of R terms, each carrying xhat's (H/2 + 5)u and its product's 1u.
        dw_tol[c] += (static_cast<double>(R) + hh / 2 + 8) * u * std::fabs(gr[i] * xhat[i]);
      }
    }
    for (std::size_t c = 0; c < dw.size(); ++c) dw_tol[c] = stored_tol(dtype, dw[c], dw_tol[c]);
    expect_within(vals(g.dx), dx, dx_tol, std::string("rms_norm dx ") + dtype_name(dtype));
    expect_within(vals(g.dweight), dw, dw_tol, std::string("rms_norm dweight ") + dtype_name(dtype));
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  const Tensor x = Tensor::randn({3, 6}, 181, 0.0, 1.0, DType::f64);
  const Tensor w = Tensor::randn({6}, 182, 1.0, 0.5, DType::f64);
  const Tensor dy = Tensor::randn({3, 6}, 184, 0.0, 1.0, DType::f64);
  const RmsNormResult r = rms_norm(x, w, 1e-3);
  const RmsNormGrads g = rms_norm_backward(dy, x, w, r.rstd);
  expect_matches_fd(vals(g.dx), numeric_grad([&](const Tensor& v) { return dot(dy, rms_norm(v, w, 1e-3).y); }, x),
                    "dx");
  expect_matches_fd(vals(g.dweight), numeric_grad([&](const Tensor& v) { return dot(dy, rms_norm(x, v, 1e-3).y); }, w),
                    "dweight");
}

TEST(RmsNorm, ShapeOnlyInputsGiveShapeOnlyOutputs) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const DType stat = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Tensor x = Tensor::shape_only({2, 3, 8}, dtype);
    const Tensor w = Tensor::ones({8}, dtype);  // one shape-only input is enough
    const RmsNormResult r = rms_norm(x, w);
    EXPECT_FALSE(r.y.has_data());
    EXPECT_EQ(r.y.shape(), x.shape());
    EXPECT_EQ(r.y.dtype(), dtype);
    EXPECT_FALSE(r.rstd.has_data());
    EXPECT_EQ(r.rstd.shape(), (Shape{2, 3}));
    EXPECT_EQ(r.rstd.dtype(), stat);
    const RmsNormGrads g = rms_norm_backward(Tensor::ones({2, 3, 8}, dtype), x, w, Tensor::ones({2, 3}, stat));
    EXPECT_FALSE(g.dx.has_data());
    EXPECT_EQ(g.dx.shape(), x.shape());
    EXPECT_EQ(g.dx.dtype(), dtype);
    EXPECT_FALSE(g.dweight.has_data());
    EXPECT_EQ(g.dweight.shape(), (Shape{8}));
    EXPECT_EQ(g.dweight.dtype(), dtype);
  }
}

TEST(RmsNorm, Errors) {
  const Tensor x = Tensor::zeros({2, 4}), w = Tensor::ones({4}), rstd = Tensor::ones({2});
  EXPECT_THAT([&] { rms_norm(x, Tensor::ones({4}, DType::bf16)); },
              ThrowsMessage<Error>(
                  HasSubstr("rms_norm: x f32[2, 4] and weight bf16[4] have different dtypes; convert one with to()")));
  EXPECT_THAT([&] { rms_norm(x, Tensor::ones({3})); },
              ThrowsMessage<Error>(HasSubstr("rms_norm: weight f32[3] must have shape [4]")));
  EXPECT_THAT([&] { rms_norm(Tensor::zeros({}), Tensor::ones({})); },
              ThrowsMessage<Error>(HasSubstr("rms_norm: x f32[] needs at least one dim")));
  EXPECT_THAT(
      [&] {
        rms_norm_backward(Tensor::zeros({2, 4}, DType::f64), x, w, rstd);
      },
      ThrowsMessage<Error>(
          HasSubstr("rms_norm_backward: dy f64[2, 4] and x f32[2, 4] have different dtypes; convert one with to()")));
  EXPECT_THAT(
      [&] {
        rms_norm_backward(Tensor::zeros({2, 5}), x, w, rstd);
      },
      ThrowsMessage<Error>(HasSubstr("rms_norm_backward: dy f32[2, 5] must have shape [2, 4]")));
  EXPECT_THAT(
      [&] {
        rms_norm_backward(x, x, Tensor::ones({2, 4}), rstd);
      },
      ThrowsMessage<Error>(HasSubstr("rms_norm_backward: weight f32[2, 4] must have shape [4]")));
  EXPECT_THAT(
      [&] {
        rms_norm_backward(x, x, w, Tensor::ones({2, 1}));
      },
      ThrowsMessage<Error>(HasSubstr("rms_norm_backward: rstd f32[2, 1] must have shape [2]")));
  EXPECT_THAT([&] { rms_norm_backward(x, x, w, Tensor::zeros({2}, DType::i64)); },
              ThrowsMessage<Error>(HasSubstr("rms_norm_backward: rstd i64[2] must be floating")));
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
                    numeric_grad([&](const Tensor& v) { return dot(dy, softmax(v)); }, x), "softmax dx");
}

}  // namespace
}  // namespace ranksim::runtime

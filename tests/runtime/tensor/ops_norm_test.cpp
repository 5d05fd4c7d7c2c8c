// layer_norm and softmax against float64 references and finite differences (tolerances:
// tests/runtime/tensor/ops_test_helpers.h).
#include "runtime/tensor/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/tensor/ops_test_helpers.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using namespace ops_testing;  // ops_test_helpers.h: tolerances, comparisons, finite differences

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

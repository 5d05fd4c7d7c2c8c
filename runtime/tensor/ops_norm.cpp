// The row-normalising ops of runtime/tensor/ops.h: layer_norm, rms_norm and softmax over the last dim.
#include "runtime/tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops_common.h"

namespace ranksim::runtime {

using namespace ops_common;  // ops_common.h: the argument checks and dtype plumbing of every op

// --- layer_norm -----------------------------------------------------------------------------

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  require_same_dtype(op, x, "x", weight, "weight");
  require_same_dtype(op, x, "x", bias, "bias");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  const i64 H = x.size(-1);
  require_shape(op, weight, "weight", {H});
  require_shape(op, bias, "bias", {H});
  const Shape stat_shape = leading(x.shape());
  const DType stat_dtype = compute_dtype(x.dtype());
  LayerNormResult r;
  if (Device* dev = device_for({&x, &weight, &bias})) {
    r = device_ops::layer_norm(*dev, x, weight, bias, eps);
  } else if (!inputs_ready({&x, &weight, &bias})) {
    r.y = Tensor::shape_only(x.shape(), x.dtype());
    r.mean = Tensor::shape_only(stat_shape, stat_dtype);
    r.rstd = Tensor::shape_only(stat_shape, stat_dtype);
  } else {
    with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x), W(weight), B(bias);
      Out<T> Y(x.shape(), x.dtype()), Mean(stat_shape, stat_dtype), Rstd(stat_shape, stat_dtype);
      const i64 rows = shape_numel(stat_shape);
      const ConstRowMap<T> w(W.get(), H), b(B.get(), H);
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const T* xr = X.get() + r0 * H;
        T sum = 0;
        for (i64 j = 0; j < H; ++j) sum += xr[j];
        const T mean = sum / static_cast<T>(H);
        T sq = 0;
        for (i64 j = 0; j < H; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
        const T rstd = T(1) / std::sqrt(sq / static_cast<T>(H) + static_cast<T>(eps));
        RowMap<T>(Y.get() + r0 * H, H) = (ConstRowMap<T>(xr, H) - mean) * rstd * w + b;
        Mean[r0] = mean;
        Rstd[r0] = rstd;
      }
      r.y = Y.finish();
      r.mean = Mean.finish();
      r.rstd = Rstd.finish();
    });
  }
  charge({op, 8.0 * count(x.numel()),
          bytes(x) + bytes(weight) + bytes(bias) + bytes(r.y) + bytes(r.mean) + bytes(r.rstd), x.dtype()});
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd) {
  const char* op = "layer_norm_backward";
  require_same_dtype(op, dy, "dy", x, "x");
  require_same_dtype(op, x, "x", weight, "weight");
  require_floating(op, mean, "mean");
  require_floating(op, rstd, "rstd");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  const i64 H = x.size(-1);
  require_shape(op, dy, "dy", x.shape());
  require_shape(op, weight, "weight", {H});
  const Shape stat_shape = leading(x.shape());
  require_shape(op, mean, "mean", stat_shape);
  require_shape(op, rstd, "rstd", stat_shape);
  LayerNormGrads g;
  if (Device* dev = device_for({&dy, &x, &weight, &mean, &rstd})) {
    g = device_ops::layer_norm_backward(*dev, dy, x, weight, mean, rstd);
  } else if (!inputs_ready({&dy, &x, &weight, &mean, &rstd})) {
    g.dx = Tensor::shape_only(x.shape(), x.dtype());
    g.dweight = Tensor::shape_only({H}, weight.dtype());
    g.dbias = Tensor::shape_only({H}, weight.dtype());
  } else {
    with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using Row = Eigen::Array<T, 1, Eigen::Dynamic>;
      In<T> DY(dy), X(x), W(weight), Mean(mean), Rstd(rstd);
      Out<T> DX(x.shape(), x.dtype()), DW({H}, weight.dtype()), DB({H}, weight.dtype());
      const i64 rows = shape_numel(stat_shape);
      const ConstRowMap<T> w(W.get(), H);
      RowMap<T> dw(DW.get(), H), db(DB.get(), H);
      Row xhat(H), gw(H);
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const ConstRowMap<T> dyr(DY.get() + r0 * H, H);
        const T rs = Rstd[r0];
        xhat = (ConstRowMap<T>(X.get() + r0 * H, H) - Mean[r0]) * rs;
        gw = dyr * w;
        T sum_g = 0, sum_gx = 0;
        for (i64 j = 0; j < H; ++j) {
          sum_g += gw[j];
          sum_gx += gw[j] * xhat[j];
        }
        const T mean_g = sum_g / static_cast<T>(H);
        const T mean_gx = sum_gx / static_cast<T>(H);
        RowMap<T>(DX.get() + r0 * H, H) = rs * ((gw - mean_g) - xhat * mean_gx);
        dw += dyr * xhat;
        db += dyr;
      }
      g.dx = DX.finish();
      g.dweight = DW.finish();
      g.dbias = DB.finish();
    });
  }
  charge({op, 14.0 * count(x.numel()),
          bytes(dy) + bytes(x) + bytes(weight) + bytes(mean) + bytes(rstd) + bytes(g.dx) + bytes(g.dweight) +
              bytes(g.dbias),
          x.dtype()});
  return g;
}

// --- rms_norm -------------------------------------------------------------------------------

RmsNormResult rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const char* op = "rms_norm";
  require_same_dtype(op, x, "x", weight, "weight");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  const i64 H = x.size(-1);
  require_shape(op, weight, "weight", {H});
  const Shape stat_shape = leading(x.shape());
  const DType stat_dtype = compute_dtype(x.dtype());
  RmsNormResult r;
  if (Device* dev = device_for({&x, &weight})) {
    r = device_ops::rms_norm(*dev, x, weight, eps);
  } else if (!inputs_ready({&x, &weight})) {
    r.y = Tensor::shape_only(x.shape(), x.dtype());
    r.rstd = Tensor::shape_only(stat_shape, stat_dtype);
  } else {
    with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x), W(weight);
      Out<T> Y(x.shape(), x.dtype()), Rstd(stat_shape, stat_dtype);
      const i64 rows = shape_numel(stat_shape);
      const ConstRowMap<T> w(W.get(), H);
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const T* xr = X.get() + r0 * H;
        T sq = 0;
        for (i64 j = 0; j < H; ++j) sq += xr[j] * xr[j];
        const T rstd = T(1) / std::sqrt(sq / static_cast<T>(H) + static_cast<T>(eps));
        RowMap<T>(Y.get() + r0 * H, H) = ConstRowMap<T>(xr, H) * rstd * w;
        Rstd[r0] = rstd;
      }
      r.y = Y.finish();
      r.rstd = Rstd.finish();
    });
  }
  charge({op, 4.0 * count(x.numel()), bytes(x) + bytes(weight) + bytes(r.y) + bytes(r.rstd), x.dtype()});
  return r;
}

RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd) {
  const char* op = "rms_norm_backward";
  require_same_dtype(op, dy, "dy", x, "x");
  require_same_dtype(op, x, "x", weight, "weight");
  require_floating(op, rstd, "rstd");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  const i64 H = x.size(-1);
  require_shape(op, dy, "dy", x.shape());
  require_shape(op, weight, "weight", {H});
  const Shape stat_shape = leading(x.shape());
  require_shape(op, rstd, "rstd", stat_shape);
  RmsNormGrads g;
  if (Device* dev = device_for({&dy, &x, &weight, &rstd})) {
    g = device_ops::rms_norm_backward(*dev, dy, x, weight, rstd);
  } else if (!inputs_ready({&dy, &x, &weight, &rstd})) {
    g.dx = Tensor::shape_only(x.shape(), x.dtype());
    g.dweight = Tensor::shape_only({H}, weight.dtype());
  } else {
    with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using Row = Eigen::Array<T, 1, Eigen::Dynamic>;
      In<T> DY(dy), X(x), W(weight), Rstd(rstd);
      Out<T> DX(x.shape(), x.dtype()), DW({H}, weight.dtype());
      const i64 rows = shape_numel(stat_shape);
      const ConstRowMap<T> w(W.get(), H);
      RowMap<T> dw(DW.get(), H);
      Row xhat(H), gw(H);
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const ConstRowMap<T> dyr(DY.get() + r0 * H, H);
        const T rs = Rstd[r0];
        xhat = ConstRowMap<T>(X.get() + r0 * H, H) * rs;
        gw = dyr * w;
        T sum_gx = 0;
        for (i64 j = 0; j < H; ++j) sum_gx += gw[j] * xhat[j];
        const T mean_gx = sum_gx / static_cast<T>(H);
        RowMap<T>(DX.get() + r0 * H, H) = rs * (gw - xhat * mean_gx);
        dw += dyr * xhat;
      }
      g.dx = DX.finish();
      g.dweight = DW.finish();
    });
  }
  charge({op, 8.0 * count(x.numel()),
          bytes(dy) + bytes(x) + bytes(weight) + bytes(rstd) + bytes(g.dx) + bytes(g.dweight), x.dtype()});
  return g;
}

// --- softmax --------------------------------------------------------------------------------

Tensor softmax(const Tensor& x) {
  const char* op = "softmax";
  require_floating(op, x, "x");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::softmax(*dev, x);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(x.shape(), x.dtype());
      const i64 V = x.size(-1);
      const i64 rows = V == 0 ? 0 : x.numel() / V;
      for (i64 r = 0; r < rows; ++r) {
        const T* xr = X.get() + r * V;
        T* yr = Y.get() + r * V;
        T m = xr[0];
        for (i64 j = 1; j < V; ++j) m = std::max(m, xr[j]);
        T sum = 0;
        for (i64 j = 0; j < V; ++j) {
          yr[j] = std::exp(xr[j] - m);
          sum += yr[j];
        }
        for (i64 j = 0; j < V; ++j) yr[j] = yr[j] / sum;
      }
      return Y.finish();
    });
  }
  charge({op, 5.0 * count(x.numel()), 2.0 * bytes(x), x.dtype()});
  return y;
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  const char* op = "softmax_backward";
  require_same_dtype(op, dy, "dy", y, "y");
  require_shape(op, dy, "dy", y.shape());
  if (y.dim() < 1) fail(op, "y " + y.str() + " needs at least one dim");
  Tensor dx;
  if (Device* dev = device_for({&dy, &y})) {
    dx = device_ops::softmax_backward(*dev, dy, y);
  } else if (!inputs_ready({&dy, &y})) {
    dx = Tensor::shape_only(y.shape(), y.dtype());
  } else {
    dx = with_compute_type(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> DY(dy), Y(y);
      Out<T> DX(y.shape(), y.dtype());
      const i64 V = y.size(-1);
      const i64 rows = V == 0 ? 0 : y.numel() / V;
      for (i64 r = 0; r < rows; ++r) {
        const T* g = DY.get() + r * V;
        const T* p = Y.get() + r * V;
        T dot = 0;
        for (i64 j = 0; j < V; ++j) dot += g[j] * p[j];
        RowMap<T>(DX.get() + r * V, V) = ConstRowMap<T>(p, V) * (ConstRowMap<T>(g, V) - dot);
      }
      return DX.finish();
    });
  }
  charge({op, 4.0 * count(y.numel()), bytes(dy) + bytes(y) + bytes(dx), y.dtype()});
  return dx;
}

}  // namespace ranksim::runtime

// The device kernels of runtime/tensor/ops.h (their device path: runtime/tensor/device_ops.cpp),
// written once for nvcc and the host compiler under runtime/device/kernel.h's contract. Each
// follows the CPU loop of its op (runtime/tensor/ops_*.cpp) in its sum order, so the emulated
// device gives the CPU's bits.
//
// Column reductions (bias, LayerNorm and RMSNorm weight gradients, embedding gradients) run one
// item per column, over rows in increasing order, on every device: deterministic, coalesced.
#pragma once

#include <cstdint>

#include "runtime/device/kernel.h"

namespace ranksim::runtime::kernels {

using namespace ranksim::runtime::kernels;  // element access, math, lanes

// --- elementwise ----------------------------------------------------------------------------

// c = a + b, b broadcast over a's leading dims (b has inner elements).
struct AddKernel {
  static constexpr bool kCooperative = false;
  const void* a;
  const void* b;
  void* c;
  DType dtype;
  i64 inner;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    store(c, dtype, i, load(a, dtype, i) + load(b, dtype, i % inner));
  }
};

struct ScaleKernel {
  static constexpr bool kCooperative = false;
  const void* x;
  void* y;
  DType dtype;
  float alpha;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    store(y, dtype, i, alpha * load(x, dtype, i));
  }
};

constexpr float kGeluC = 0.79788456080286535588f;  // sqrt(2 / pi), as runtime/tensor/ops_elementwise.cpp
constexpr float kGeluA = 0.044715f;

struct GeluKernel {
  static constexpr bool kCooperative = false;
  const void* x;
  void* y;
  DType dtype;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const float v = load(x, dtype, i);
    const float t = tanh_f(kGeluC * (v + kGeluA * v * v * v));
    store(y, dtype, i, 0.5f * v * (1.0f + t));
  }
};

struct GeluBackwardKernel {
  static constexpr bool kCooperative = false;
  const void* dy;
  const void* x;
  void* dx;
  DType dtype;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const float v = load(x, dtype, i);
    const float t = tanh_f(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    store(dx, dtype, i, load(dy, dtype, i) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
  }
};

// y [rows, F] = silu(gate) * up, x [rows, 2F] = [gate | up]; one item per element of y.
struct SwigluKernel {
  static constexpr bool kCooperative = false;
  const void* x;
  void* y;
  DType dtype;
  i64 f;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const i64 o = (i / f) * 2 * f + i % f;
    const float g = load(x, dtype, o), u = load(x, dtype, o + f);
    store(y, dtype, i, g / (1.0f + exp_f(-g)) * u);
  }
};

// dx [rows, 2F] = [dy * up * silu'(gate) | dy * silu(gate)]; one item per element of dy, writing
// its two elements of dx.
struct SwigluBackwardKernel {
  static constexpr bool kCooperative = false;
  const void* dy;
  const void* x;
  void* dx;
  DType dtype;
  i64 f;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const i64 o = (i / f) * 2 * f + i % f;
    const float g = load(x, dtype, o), u = load(x, dtype, o + f), d = load(dy, dtype, i);
    const float den = 1.0f + exp_f(-g);
    const float sig = 1.0f / den, s = g / den;
    store(dx, dtype, o, d * u * (sig + s * (1.0f - sig)));
    store(dx, dtype, o + f, d * s);
  }
};

// out [rows, H] (dtype) = weight [V, H] rows picked by ids [rows] (i64, checked by the caller).
struct EmbeddingKernel {
  static constexpr bool kCooperative = false;
  const i64* ids;
  const void* weight;
  void* out;
  DType dtype;
  i64 hidden;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const i64 r = i / hidden, c = i % hidden;
    store(out, dtype, i, load(weight, dtype, ids[r] * hidden + c));
  }
};

// dlogits [rows, V] = (softmax(row) - onehot(target)) * g, zero on ignored rows: g = dloss / n.
struct CrossEntropyBackwardKernel {
  static constexpr bool kCooperative = false;
  const void* logits;
  const float* lse;
  const i64* targets;
  void* dx;
  DType dtype;
  i64 vocab;
  i64 ignore_index;
  float g;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const i64 r = i / vocab, j = i % vocab;
    const i64 t = targets[r];
    if (t == ignore_index) {
      store(dx, dtype, i, 0.0f);
      return;
    }
    const float p = exp_f(load(logits, dtype, i) - lse[r]);
    store(dx, dtype, i, j == t ? (p - 1.0f) * g : p * g);
  }
};

// --- column reductions: one item per column, rows in increasing order -----------------------

// out [inner] = sum over rows of in [rows, inner] (add_backward's bias gradient).
struct ColumnSumKernel {
  static constexpr bool kCooperative = false;
  const void* in;
  void* out;
  DType dtype;
  i64 rows, inner;
  template <class L>
  RANKSIM_HD void operator()(i64 c, const L&) const {
    float acc = 0.0f;
    for (i64 r = 0; r < rows; ++r) acc += load(in, dtype, r * inner + c);
    store(out, dtype, c, acc);
  }
};

// dweight[c] = sum_r dy[r, c] * xhat[r, c], dbias[c] = sum_r dy[r, c].
struct LayerNormParamGradKernel {
  static constexpr bool kCooperative = false;
  const void* dy;
  const void* x;
  const float* mean;
  const float* rstd;
  void* dweight;
  void* dbias;
  DType dtype;
  i64 rows, hidden;
  template <class L>
  RANKSIM_HD void operator()(i64 c, const L&) const {
    float dw = 0.0f, db = 0.0f;
    for (i64 r = 0; r < rows; ++r) {
      const float g = load(dy, dtype, r * hidden + c);
      const float xhat = (load(x, dtype, r * hidden + c) - mean[r]) * rstd[r];
      dw += g * xhat;
      db += g;
    }
    store(dweight, dtype, c, dw);
    store(dbias, dtype, c, db);
  }
};

// dweight[c] = sum_r dy[r, c] * (x[r, c] * rstd[r]) (RMSNorm's weight gradient).
struct RmsNormParamGradKernel {
  static constexpr bool kCooperative = false;
  const void* dy;
  const void* x;
  const float* rstd;
  void* dweight;
  DType dtype;
  i64 rows, hidden;
  template <class L>
  RANKSIM_HD void operator()(i64 c, const L&) const {
    float dw = 0.0f;
    for (i64 r = 0; r < rows; ++r) {
      const float xhat = load(x, dtype, r * hidden + c) * rstd[r];
      dw += load(dy, dtype, r * hidden + c) * xhat;
    }
    store(dweight, dtype, c, dw);
  }
};

// acc [V, H] (f32, zeroed) += dy's rows at their ids, tokens in order (embedding_backward).
struct EmbeddingBackwardKernel {
  static constexpr bool kCooperative = false;
  const void* dy;
  const i64* ids;
  float* acc;
  DType dtype;
  i64 tokens, hidden;
  template <class L>
  RANKSIM_HD void operator()(i64 c, const L&) const {
    for (i64 t = 0; t < tokens; ++t) acc[ids[t] * hidden + c] += load(dy, dtype, t * hidden + c);
  }
};

// --- row kernels: one item per row, lanes share its columns ---------------------------------

struct LayerNormKernel {
  static constexpr bool kCooperative = true;
  const void* x;
  const void* weight;
  const void* bias;
  void* y;
  float* mean;
  float* rstd;
  DType dtype;
  i64 hidden;
  float eps;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * hidden;
    float s = 0.0f;
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) s += load(x, dtype, o + j);
    const float mu = lanes.sum(s) / static_cast<float>(hidden);
    float sq = 0.0f;
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float d = load(x, dtype, o + j) - mu;
      sq += d * d;
    }
    const float rs = 1.0f / sqrt_f(lanes.sum(sq) / static_cast<float>(hidden) + eps);
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float v = (load(x, dtype, o + j) - mu) * rs * load(weight, dtype, j) + load(bias, dtype, j);
      store(y, dtype, o + j, v);
    }
    if (lanes.lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
};

struct LayerNormBackwardKernel {
  static constexpr bool kCooperative = true;
  const void* dy;
  const void* x;
  const void* weight;
  const float* mean;
  const float* rstd;
  void* dx;
  DType dtype;
  i64 hidden;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * hidden;
    const float mu = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float gw = load(dy, dtype, o + j) * load(weight, dtype, j);
      sg += gw;
      sgx += gw * ((load(x, dtype, o + j) - mu) * rs);
    }
    const float mean_g = lanes.sum(sg) / static_cast<float>(hidden);
    const float mean_gx = lanes.sum(sgx) / static_cast<float>(hidden);
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float gw = load(dy, dtype, o + j) * load(weight, dtype, j);
      const float xhat = (load(x, dtype, o + j) - mu) * rs;
      store(dx, dtype, o + j, rs * ((gw - mean_g) - xhat * mean_gx));
    }
  }
};

struct RmsNormKernel {
  static constexpr bool kCooperative = true;
  const void* x;
  const void* weight;
  void* y;
  float* rstd;
  DType dtype;
  i64 hidden;
  float eps;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * hidden;
    float sq = 0.0f;
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float v = load(x, dtype, o + j);
      sq += v * v;
    }
    const float rs = 1.0f / sqrt_f(lanes.sum(sq) / static_cast<float>(hidden) + eps);
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      store(y, dtype, o + j, load(x, dtype, o + j) * rs * load(weight, dtype, j));
    }
    if (lanes.lane == 0) rstd[r] = rs;
  }
};

struct RmsNormBackwardKernel {
  static constexpr bool kCooperative = true;
  const void* dy;
  const void* x;
  const void* weight;
  const float* rstd;
  void* dx;
  DType dtype;
  i64 hidden;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * hidden;
    const float rs = rstd[r];
    float sgx = 0.0f;
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float gw = load(dy, dtype, o + j) * load(weight, dtype, j);
      sgx += gw * (load(x, dtype, o + j) * rs);
    }
    const float mean_gx = lanes.sum(sgx) / static_cast<float>(hidden);
    for (i64 j = lanes.lane; j < hidden; j += lanes.width) {
      const float gw = load(dy, dtype, o + j) * load(weight, dtype, j);
      const float xhat = load(x, dtype, o + j) * rs;
      store(dx, dtype, o + j, rs * (gw - xhat * mean_gx));
    }
  }
};

struct SoftmaxKernel {
  static constexpr bool kCooperative = true;
  const void* x;
  void* y;
  DType dtype;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * cols;
    float m = -INFINITY;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) m = max_f(m, load(x, dtype, o + j));
    m = lanes.max(m);
    float s = 0.0f;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) s += exp_f(load(x, dtype, o + j) - m);
    s = lanes.sum(s);
    for (i64 j = lanes.lane; j < cols; j += lanes.width) {
      store(y, dtype, o + j, exp_f(load(x, dtype, o + j) - m) / s);
    }
  }
};

struct SoftmaxBackwardKernel {
  static constexpr bool kCooperative = true;
  const void* dy;
  const void* y;
  void* dx;
  DType dtype;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * cols;
    float dot = 0.0f;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) {
      dot += load(dy, dtype, o + j) * load(y, dtype, o + j);
    }
    dot = lanes.sum(dot);
    for (i64 j = lanes.lane; j < cols; j += lanes.width) {
      store(dx, dtype, o + j, load(y, dtype, o + j) * (load(dy, dtype, o + j) - dot));
    }
  }
};

// lse[r] = logsumexp(row r); row_loss[r] = lse - row[target] (0 where ignored). Targets were
// checked by the caller.
struct CrossEntropyRowKernel {
  static constexpr bool kCooperative = true;
  const void* logits;
  const i64* targets;
  float* lse;
  float* row_loss;
  DType dtype;
  i64 vocab;
  i64 ignore_index;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * vocab;
    float m = -INFINITY;
    for (i64 j = lanes.lane; j < vocab; j += lanes.width) m = max_f(m, load(logits, dtype, o + j));
    m = lanes.max(m);
    float s = 0.0f;
    for (i64 j = lanes.lane; j < vocab; j += lanes.width) s += exp_f(load(logits, dtype, o + j) - m);
    s = lanes.sum(s);
    if (lanes.lane != 0) return;
    const float l = vocab > 0 ? m + log_f(s) : -INFINITY;
    lse[r] = l;
    const i64 t = targets[r];
    row_loss[r] = t == ignore_index ? 0.0f : l - load(logits, dtype, o + t);
  }
};

// loss (0-d, dtype) = the mean of row_loss over the n rows not ignored, rows in order; NaN for
// n = 0. One item.
struct CrossEntropyMeanKernel {
  static constexpr bool kCooperative = false;
  const float* row_loss;
  const i64* targets;
  void* loss;
  DType dtype;
  i64 rows;
  i64 ignore_index;
  template <class L>
  RANKSIM_HD void operator()(i64, const L&) const {
    float total = 0.0f;
    i64 n = 0;
    for (i64 r = 0; r < rows; ++r) {
      if (targets[r] == ignore_index) continue;
      total += row_loss[r];
      ++n;
    }
    store(loss, dtype, 0, n == 0 ? NAN : total / static_cast<float>(n));
  }
};

}  // namespace ranksim::runtime::kernels

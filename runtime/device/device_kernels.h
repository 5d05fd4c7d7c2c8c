// The kernels of a compute device (runtime/device/device.h), written once for two compilers.
//
// Each kernel is a struct of device pointers and sizes with one call operator,
//     template <class Lanes> RANKSIM_HD void operator()(std::int64_t item, const Lanes& lanes);
// run once for every item in [0, n). The CUDA device (runtime/distributed/backends/nccl/cuda_device.cu, nvcc)
// runs items on GPU threads; the emulated device (runtime/device/emulated_device.cpp, the host compiler)
// runs them one after the other on the CPU. So the arithmetic tested by `ctest` on a laptop is the
// arithmetic the GPU runs; only the launch, the lanes' reductions and cuBLAS differ.
//
// Elementwise kernels (kCooperative = false) do one element per item. Row kernels
// (kCooperative = true) give each item -- a row -- a group of lanes: a warp of 32 threads on the
// GPU, each taking columns lane, lane + width, ... and combining partial sums with lanes.sum();
// on the CPU one lane (width 1, sum(x) = x), so every sum runs in increasing index order as in
// runtime/tensor/ops.cpp. Column reductions (bias and LayerNorm weight gradients, embedding gradients) run
// one item per column, over rows in increasing order, on every device: deterministic, coalesced.
//
// Storage dtypes: f32, bf16 and f16, computed in f32 (runtime/tensor/ops.h's contract); bf16 and f16 are
// rounded once, to nearest even, when stored. Index tensors arrive as i64.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/device/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define RANKSIM_HD __host__ __device__
#else
#define RANKSIM_HD
#endif

namespace ranksim::runtime::kernels {

using i64 = std::int64_t;

constexpr int kMaxDims = 8;  // of a strided copy

// --- element access -------------------------------------------------------------------------

RANKSIM_HD inline std::uint32_t float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

RANKSIM_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// runtime/device/dtype.h's f32_to_bf16_bits, for both compilers.
RANKSIM_HD inline std::uint16_t to_bf16(float value) {
  const std::uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16);
}

RANKSIM_HD inline std::uint16_t to_f16(float value) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(value));
#else
  return f32_to_f16_bits(value);
#endif
}

RANKSIM_HD inline float from_f16(std::uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return f16_bits_to_f32(bits);
#endif
}

// Element i of a buffer of dtype dt (f32, bf16 or f16) as f32.
RANKSIM_HD inline float load(const void* p, DType dt, i64 i) {
  if (dt == DType::f32) return static_cast<const float*>(p)[i];
  const std::uint16_t b = static_cast<const std::uint16_t*>(p)[i];
  if (dt == DType::bf16) return bits_float(static_cast<std::uint32_t>(b) << 16);
  return from_f16(b);
}

// Stores v as element i of a buffer of dtype dt, rounded to nearest even.
RANKSIM_HD inline void store(void* p, DType dt, i64 i, float v) {
  if (dt == DType::f32) {
    static_cast<float*>(p)[i] = v;
  } else if (dt == DType::bf16) {
    static_cast<std::uint16_t*>(p)[i] = to_bf16(v);
  } else {
    static_cast<std::uint16_t*>(p)[i] = to_f16(v);
  }
}

RANKSIM_HD inline float exp_f(float x) { return expf(x); }
RANKSIM_HD inline float log_f(float x) { return logf(x); }
RANKSIM_HD inline float tanh_f(float x) { return tanhf(x); }
RANKSIM_HD inline float sqrt_f(float x) { return sqrtf(x); }
RANKSIM_HD inline float max_f(float a, float b) { return a < b ? b : a; }  // std::max's order
RANKSIM_HD inline float min_f(float a, float b) { return b < a ? b : a; }  // std::min's order
RANKSIM_HD inline float log1p_f(float x) { return log1pf(x); }
RANKSIM_HD inline float fmax_f(float a, float b) { return fmaxf(a, b); }  // std::fmax: NaN ignored
RANKSIM_HD inline double exp_d(double x) { return exp(x); }
RANKSIM_HD inline double log_d(double x) { return log(x); }
RANKSIM_HD inline double max_d(double a, double b) { return a < b ? b : a; }  // std::max's order

// One lane: the CPU's view of a row kernel.
struct SerialLanes {
  static constexpr int lane = 0;
  static constexpr int width = 1;
  RANKSIM_HD float sum(float x) const { return x; }
  RANKSIM_HD double sum(double x) const { return x; }
  RANKSIM_HD float max(float x) const { return x; }
  RANKSIM_HD double max(double x) const { return x; }
  // Lane src's x, for every lane (src < width).
  RANKSIM_HD float broadcast(float x, int) const { return x; }
};

// --- elementwise ----------------------------------------------------------------------------

// dst (strided, dst_dtype) = src (strided, src_dtype): contiguous(), cat, permuted gathers.
// item: the row-major index into sizes. Any of f32/bf16/f16 on either side; raw copies of 8-byte
// (i64) elements when both dtypes are i64.
struct CopyKernel {
  static constexpr bool kCooperative = false;
  const void* src;
  DType src_dtype;
  void* dst;
  DType dst_dtype;
  int ndim;
  i64 sizes[kMaxDims];
  i64 src_strides[kMaxDims];
  i64 dst_strides[kMaxDims];
  i64 src_offset;
  i64 dst_offset;

  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    i64 s = src_offset, d = dst_offset, rest = item;
    for (int k = ndim - 1; k >= 0; --k) {
      const i64 idx = rest % sizes[k];
      rest /= sizes[k];
      s += idx * src_strides[k];
      d += idx * dst_strides[k];
    }
    if (src_dtype == DType::i64) {
      static_cast<i64*>(dst)[d] = static_cast<const i64*>(src)[s];
    } else {
      store(dst, dst_dtype, d, load(src, src_dtype, s));
    }
  }
};

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

constexpr float kGeluC = 0.79788456080286535588f;  // sqrt(2 / pi), as runtime/tensor/ops.cpp
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
    store(dx, dtype, i,
          load(dy, dtype, i) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
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

// C[b] [m, n] = op(A[b]) op(B[b]), row-major, for the emulated device (the GPU uses cuBLAS).
// A stored [m, k] ([k, m] when ta), B [k, n] ([n, k] when tb); each element's sum runs over
// kk = 0 .. k-1 in order, as runtime::matmul's.
struct GemmKernel {
  static constexpr bool kCooperative = false;
  const void* a;
  const void* b;
  void* c;
  DType dtype;
  i64 m, n, k;
  bool ta, tb;
  i64 stride_a, stride_b, stride_c;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    const i64 batch = item / (m * n), rest = item % (m * n);
    const i64 i = rest / n, j = rest % n;
    const i64 ao = batch * stride_a, bo = batch * stride_b;
    float acc = 0.0f;
    for (i64 kk = 0; kk < k; ++kk) {
      const float x = load(a, dtype, ao + (ta ? kk * m + i : i * k + kk));
      const float y = load(b, dtype, bo + (tb ? j * k + kk : kk * n + j));
      acc = acc + x * y;
    }
    store(c, dtype, batch * stride_c + i * n + j, acc);
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

// --- block attention (cp/attention.h) -------------------------------------------------------
//
// The tensors are contiguous: q [tq, hq, d], k [tk, hkv, d], v [tk, hkv, dv], out and dout
// [tq, hq, dv], lse [hq, tq] (f32). Query and key tokens carry a position and a segment (i64);
// visibility is cp/attention.h's rule. Sums follow cp/attention.cpp's order: each dot product over
// the head dim, sums over keys (forward, dq) or queries (dk, dv) in increasing index, the heads of
// a GQA group added in increasing order. On the GPU a row's keys (or queries) are taken 32 at a
// time, one per lane, and each lane then adds their terms to its own output columns in key order.

struct AttentionTokens {
  const i64* q_pos;
  const i64* q_seg;
  const i64* k_pos;
  const i64* k_seg;
  i64 window_left;   // -1: unbounded
  i64 window_right;  // -1: unbounded (causal: 0)
  RANKSIM_HD bool visible(i64 i, i64 k) const {
    const i64 qs = q_seg[i];
    if (qs < 0 || k_seg[k] != qs) return false;
    const i64 delta = k_pos[k] - q_pos[i];
    if (window_left >= 0 && delta < -window_left) return false;
    if (window_right >= 0 && delta > window_right) return false;
    return true;
  }
};

struct AttentionDims {
  i64 tq, tk, hq, hkv, d, dv;
  float scale;
  RANKSIM_HD i64 group() const { return hq / hkv; }
};

// dot(a[ao ..], b[bo ..]) over n elements in order, as the CPU's score products.
RANKSIM_HD inline float dot(const void* a, DType at, i64 ao, const void* b, DType bt, i64 bo, i64 n) {
  float acc = 0.0f;
  for (i64 e = 0; e < n; ++e) acc = acc + load(a, at, ao + e) * load(b, bt, bo + e);
  return acc;
}

// Row item = i * hq + j: out_acc[i, j, :] (f32) and lse[j, i]; a row that sees no key gets out 0
// and lse -inf.
struct AttentionForwardKernel {
  static constexpr bool kCooperative = true;
  const void* q;
  const void* k;
  const void* v;
  DType dtype;
  AttentionTokens tok;
  AttentionDims g;
  float* out;  // [tq, hq, dv]
  float* lse;  // [hq, tq]
  RANKSIM_HD float score(i64 i, i64 j, i64 kk) const {
    return dot(q, dtype, (i * g.hq + j) * g.d, k, dtype, (kk * g.hkv + j / g.group()) * g.d, g.d) * g.scale;
  }
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L& lanes) const {
    const i64 i = item / g.hq, j = item % g.hq, h = j / g.group();
    float* o = out + item * g.dv;
    for (i64 c = lanes.lane; c < g.dv; c += lanes.width) o[c] = 0.0f;
    float seen = 0.0f, mx = -INFINITY;
    for (i64 kk = lanes.lane; kk < g.tk; kk += lanes.width) {
      if (!tok.visible(i, kk)) continue;
      seen += 1.0f;
      mx = max_f(mx, score(i, j, kk));
    }
    if (lanes.sum(seen) == 0.0f) {
      if (lanes.lane == 0) lse[j * g.tq + i] = -INFINITY;
      return;
    }
    mx = lanes.max(mx);
    float total = 0.0f;
    for (i64 kk = lanes.lane; kk < g.tk; kk += lanes.width) {
      if (tok.visible(i, kk)) total += exp_f(score(i, j, kk) - mx);
    }
    total = lanes.sum(total);
    for (i64 k0 = 0; k0 < g.tk; k0 += lanes.width) {
      const i64 mine = k0 + lanes.lane;
      const float p = mine < g.tk && tok.visible(i, mine) ? exp_f(score(i, j, mine) - mx) : 0.0f;
      const i64 n = g.tk - k0 < lanes.width ? g.tk - k0 : lanes.width;
      for (i64 t = 0; t < n; ++t) {
        const float pt = lanes.broadcast(p, static_cast<int>(t));
        if (!tok.visible(i, k0 + t)) continue;
        const i64 vo = ((k0 + t) * g.hkv + h) * g.dv;
        for (i64 c = lanes.lane; c < g.dv; c += lanes.width) o[c] = o[c] + pt * load(v, dtype, vo + c);
      }
    }
    for (i64 c = lanes.lane; c < g.dv; c += lanes.width) o[c] = o[c] / total;
    if (lanes.lane == 0) lse[j * g.tq + i] = mx + log_f(total);
  }
};

// The inputs of the backward, with each tensor's dtype (out and dout may differ from q's).
struct AttentionBackwardInputs {
  const void* q;
  const void* k;
  const void* v;
  DType dtype;
  const void* out;
  DType out_dtype;
  const void* dout;
  DType dout_dtype;
  const float* lse;  // [hq, tq]
  AttentionTokens tok;
  AttentionDims g;

  RANKSIM_HD bool active(i64 i, i64 j) const { return lse[j * g.tq + i] != -INFINITY; }
  // P = exp(s - lse) and dS = P (dP - delta) for query (i, j) and key kk.
  RANKSIM_HD void p_ds(i64 i, i64 j, i64 kk, float delta, float& p, float& ds) const {
    const i64 h = j / g.group();
    const float s = dot(q, dtype, (i * g.hq + j) * g.d, k, dtype, (kk * g.hkv + h) * g.d, g.d);
    p = exp_f(s * g.scale - lse[j * g.tq + i]);
    const float dp = dot(dout, dout_dtype, (i * g.hq + j) * g.dv, v, dtype, (kk * g.hkv + h) * g.dv, g.dv);
    ds = p * (dp - delta);
  }
};

// Row item = i * hq + j: delta[j, i] = rowsum(dout * out) and dq[i, j, :] (dq_dtype), with
// dq_acc (f32, [tq, hq, d]) as the running sum over keys.
struct AttentionBackwardQueryKernel {
  static constexpr bool kCooperative = true;
  AttentionBackwardInputs in;
  float* delta;   // [hq, tq]
  float* dq_acc;  // [tq, hq, d]
  void* dq;
  DType dq_dtype;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L& lanes) const {
    const AttentionDims& g = in.g;
    const i64 i = item / g.hq, j = item % g.hq, h = j / g.group();
    float* acc = dq_acc + item * g.d;
    for (i64 e = lanes.lane; e < g.d; e += lanes.width) acc[e] = 0.0f;
    float seen = 0.0f;
    for (i64 kk = lanes.lane; kk < g.tk; kk += lanes.width) seen += in.tok.visible(i, kk) ? 1.0f : 0.0f;
    const bool active = lanes.sum(seen) > 0.0f && in.active(i, j);
    float dl = 0.0f;
    if (active) {
      const i64 oo = item * g.dv;
      for (i64 c = lanes.lane; c < g.dv; c += lanes.width) {
        dl += load(in.dout, in.dout_dtype, oo + c) * load(in.out, in.out_dtype, oo + c);
      }
    }
    dl = lanes.sum(dl);
    if (lanes.lane == 0) delta[j * g.tq + i] = dl;
    if (!active) {
      for (i64 e = lanes.lane; e < g.d; e += lanes.width) store(dq, dq_dtype, item * g.d + e, 0.0f);
      return;
    }
    for (i64 k0 = 0; k0 < g.tk; k0 += lanes.width) {
      const i64 mine = k0 + lanes.lane;
      float p = 0.0f, ds = 0.0f;
      if (mine < g.tk && in.tok.visible(i, mine)) in.p_ds(i, j, mine, dl, p, ds);
      const i64 n = g.tk - k0 < lanes.width ? g.tk - k0 : lanes.width;
      for (i64 t = 0; t < n; ++t) {
        const float dst = lanes.broadcast(ds, static_cast<int>(t));
        if (!in.tok.visible(i, k0 + t)) continue;
        const i64 ko = ((k0 + t) * g.hkv + h) * g.d;
        for (i64 e = lanes.lane; e < g.d; e += lanes.width) acc[e] = acc[e] + dst * load(in.k, in.dtype, ko + e);
      }
    }
    for (i64 e = lanes.lane; e < g.d; e += lanes.width) store(dq, dq_dtype, item * g.d + e, g.scale * acc[e]);
  }
};

// Row item = kk * hkv + h: dk[kk, h, :] and dv[kk, h, :], summing over queries per query head of
// the group, then over the group's heads. Needs delta from AttentionBackwardQueryKernel. Scratch
// (f32): head_dk, head_dv (one head's sums) and dk_acc, dv_acc (the group's), shaped like k, v.
struct AttentionBackwardKeyKernel {
  static constexpr bool kCooperative = true;
  AttentionBackwardInputs in;
  const float* delta;
  float* head_dk;
  float* head_dv;
  float* dk_acc;
  float* dv_acc;
  void* dk;
  DType dk_dtype;
  void* dv;
  DType dv_dtype;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L& lanes) const {
    const AttentionDims& g = in.g;
    const i64 kk = item / g.hkv, h = item % g.hkv;
    float* hk = head_dk + item * g.d;
    float* hv = head_dv + item * g.dv;
    float* ak = dk_acc + item * g.d;
    float* av = dv_acc + item * g.dv;
    for (i64 e = lanes.lane; e < g.d; e += lanes.width) ak[e] = 0.0f;
    for (i64 e = lanes.lane; e < g.dv; e += lanes.width) av[e] = 0.0f;
    for (i64 j = h * g.group(); j < (h + 1) * g.group(); ++j) {
      for (i64 e = lanes.lane; e < g.d; e += lanes.width) hk[e] = 0.0f;
      for (i64 e = lanes.lane; e < g.dv; e += lanes.width) hv[e] = 0.0f;
      for (i64 i0 = 0; i0 < g.tq; i0 += lanes.width) {
        const i64 mine = i0 + lanes.lane;
        float p = 0.0f, ds = 0.0f;
        if (mine < g.tq && in.tok.visible(mine, kk) && in.active(mine, j)) {
          in.p_ds(mine, j, kk, delta[j * g.tq + mine], p, ds);
        }
        const i64 n = g.tq - i0 < lanes.width ? g.tq - i0 : lanes.width;
        for (i64 t = 0; t < n; ++t) {
          const float pt = lanes.broadcast(p, static_cast<int>(t));
          const float dst = lanes.broadcast(ds, static_cast<int>(t));
          const i64 i = i0 + t;
          if (!in.tok.visible(i, kk) || !in.active(i, j)) continue;
          const i64 qo = (i * g.hq + j) * g.d, oo = (i * g.hq + j) * g.dv;
          for (i64 e = lanes.lane; e < g.d; e += lanes.width) hk[e] = hk[e] + dst * load(in.q, in.dtype, qo + e);
          for (i64 e = lanes.lane; e < g.dv; e += lanes.width) {
            hv[e] = hv[e] + pt * load(in.dout, in.dout_dtype, oo + e);
          }
        }
      }
      for (i64 e = lanes.lane; e < g.d; e += lanes.width) ak[e] = ak[e] + hk[e];
      for (i64 e = lanes.lane; e < g.dv; e += lanes.width) av[e] = av[e] + hv[e];
    }
    for (i64 e = lanes.lane; e < g.d; e += lanes.width) store(dk, dk_dtype, item * g.d + e, ak[e] * g.scale);
    for (i64 e = lanes.lane; e < g.dv; e += lanes.width) store(dv, dv_dtype, item * g.dv + e, av[e]);
  }
};

// --- merging partial attention results in place (cp/attention.h) ---------------------------
//
// The accumulators are views: element addresses come from their strides (in elements, from the
// view's first element). sel lists the accumulator rows a part covers, distinct, in the part's
// row order.

// cp/attention.cpp's merge of two log-sum-exps; -inf is "saw nothing".
RANKSIM_HD inline float merge_lse_pair(float a, float b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  const float mx = max_f(a, b), mn = min_f(a, b);
  return mx + log1p_f(exp_f(mn - mx));
}

// lse[hh, sel[i]] = merge(lse[hh, sel[i]], part[hh, i]); item = hh * m + i.
struct MergeLseKernel {
  static constexpr bool kCooperative = false;
  void* lse;
  DType lse_dtype;
  i64 stride0, stride1;
  const void* part;  // [h, m], contiguous
  DType part_dtype;
  const i64* sel;
  i64 m;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    const i64 hh = item / m, i = item % m;
    const i64 o = hh * stride0 + sel[i] * stride1;
    store(lse, lse_dtype, o, merge_lse_pair(load(lse, lse_dtype, o), load(part, part_dtype, item)));
  }
};

// out[sel[i], hh, :] += part_out[i, hh, :] * exp(part_lse[hh, i] - lse[hh, sel[i]]), nothing
// where part_lse is -inf; item = (i * h + hh) * dv + c.
struct CorrectOutKernel {
  static constexpr bool kCooperative = false;
  void* out;
  DType out_dtype;
  i64 os0, os1, os2;
  const void* lse;
  DType lse_dtype;
  i64 ls0, ls1;
  const void* part_out;  // [m, h, dv], contiguous
  DType part_out_dtype;
  const void* part_lse;  // [h, m], contiguous
  DType part_lse_dtype;
  const i64* sel;
  i64 m, h, dv;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    const i64 c = item % dv, ih = item / dv, hh = ih % h, i = ih / h;
    const float part = load(part_lse, part_lse_dtype, hh * m + i);
    if (part == -INFINITY) return;
    const i64 row = sel[i];
    const float factor = exp_f(part - load(lse, lse_dtype, hh * ls0 + row * ls1));
    const i64 o = row * os0 + hh * os1 + c * os2;
    store(out, out_dtype, o, load(out, out_dtype, o) + load(part_out, part_out_dtype, item) * factor);
  }
};

// acc[sel[i], ...] += part[i, ...]; item = i * inner + u, u the row-major index of the trailing
// dims (sizes[1..ndim)).
struct AddRowsKernel {
  static constexpr bool kCooperative = false;
  void* acc;
  DType acc_dtype;
  int ndim;
  i64 sizes[kMaxDims];
  i64 strides[kMaxDims];
  const void* part;  // contiguous
  DType part_dtype;
  const i64* sel;
  i64 inner;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    i64 u = item % inner;
    i64 o = sel[item / inner] * strides[0];
    for (int k = ndim - 1; k >= 1; --k) {
      o += (u % sizes[k]) * strides[k];
      u /= sizes[k];
    }
    store(acc, acc_dtype, o, load(acc, acc_dtype, o) + load(part, part_dtype, item));
  }
};

// --- the losses of tp/cross_entropy.cpp and models/transformer.cpp --------------------------
//
// Logits x [rows, cols] in dtype (f32, bf16 or f16), read as f32 as the CPU loops' x.to(f32)
// does; per-row results are f32 (vocab-parallel) or f64 (the model's loss), as on the CPU.

// Vocab-parallel, step 1: m[r] = the max of row r's local logits, NaNs skipped as std::fmax does
// (so a lane's partial max is never NaN, and combining partials with max is exact).
struct VocabMaxKernel {
  static constexpr bool kCooperative = true;
  const void* x;
  float* m;
  DType dtype;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    float v = -INFINITY;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) v = fmax_f(v, load(x, dtype, r * cols + j));
    v = lanes.max(v);
    if (lanes.lane == 0) m[r] = v;
  }
};

// Step 2, one item a row: pred[r] = x[r, t] - m[r] for the local target column t = local[r] when
// this rank owns it (t >= 0), else 0.
struct VocabPredKernel {
  static constexpr bool kCooperative = false;
  const void* x;
  const float* m;
  const i64* local;
  float* pred;
  DType dtype;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L&) const {
    const i64 t = local[r];
    pred[r] = t >= 0 ? load(x, dtype, r * cols + t) - m[r] : 0.0f;
  }
};

// Step 3: e[r, j] = exp(x[r, j] - m[r]) (f32) and se[r] = the row's sum, columns in order.
struct VocabExpKernel {
  static constexpr bool kCooperative = true;
  const void* x;
  const float* m;
  float* e;
  float* se;
  DType dtype;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    float s = 0.0f;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) {
      const float v = exp_f(load(x, dtype, r * cols + j) - m[r]);
      e[r * cols + j] = v;
      s += v;
    }
    s = lanes.sum(s);
    if (lanes.lane == 0) se[r] = s;
  }
};

// Step 4, after se is summed over the group: loss[r] = log(se[r]) - pred[r], and
// softmax[r, j] = e[r, j] / se[r]; item = r * cols + j (the loss written by column 0's item,
// also for rows of no columns: item r of a launch over max(cols, 1) items a row).
struct VocabSoftmaxKernel {
  static constexpr bool kCooperative = false;
  const float* e;
  const float* se;
  const float* pred;
  float* softmax;
  float* loss;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    const i64 width = cols > 0 ? cols : 1;
    const i64 r = item / width, j = item % width;
    if (j == 0) loss[r] = log_f(se[r]) - pred[r];
    if (cols > 0) softmax[item] = e[item] / se[r];
  }
};

// Backward: dx[r, j] = (softmax[r, j] - (j == local[r])) * dloss[r], stored in dx's dtype.
struct VocabBackwardKernel {
  static constexpr bool kCooperative = false;
  const float* softmax;
  const i64* local;
  const void* dloss;
  DType dloss_dtype;
  void* dx;
  DType dtype;
  i64 cols;
  template <class L>
  RANKSIM_HD void operator()(i64 i, const L&) const {
    const i64 r = i / cols, j = i % cols;
    const float s = softmax[i];
    const float v = j == local[r] ? s - 1.0f : s;
    store(dx, dtype, i, v * load(dloss, dloss_dtype, r));
  }
};

// The model's loss, in f64 as the CPU loop: for a labelled row, lse = m + log(sum exp(x - m)),
// row_loss[r] = lse - x[r, label], dx[r, j] = (exp(x[r, j] - lse) - (j == label)) * inv rounded to
// f32 and then to dx's dtype; an ignored row has loss 0 and dx 0. Labels were range-checked.
struct LossSumRowKernel {
  static constexpr bool kCooperative = true;
  const void* x;
  DType dtype;
  const i64* labels;
  double* row_loss;
  void* dx;
  DType dx_dtype;
  i64 cols;
  i64 ignore_index;
  double inv;
  template <class L>
  RANKSIM_HD void operator()(i64 r, const L& lanes) const {
    const i64 o = r * cols, label = labels[r];
    if (label == ignore_index) {
      for (i64 j = lanes.lane; j < cols; j += lanes.width) store(dx, dx_dtype, o + j, 0.0f);
      if (lanes.lane == 0) row_loss[r] = 0.0;
      return;
    }
    double m = -INFINITY;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) m = max_d(m, static_cast<double>(load(x, dtype, o + j)));
    m = lanes.max(m);
    double z = 0.0;
    for (i64 j = lanes.lane; j < cols; j += lanes.width) z += exp_d(static_cast<double>(load(x, dtype, o + j)) - m);
    z = lanes.sum(z);
    const double lse = m + log_d(z);
    if (lanes.lane == 0) row_loss[r] = lse - static_cast<double>(load(x, dtype, o + label));
    for (i64 j = lanes.lane; j < cols; j += lanes.width) {
      const double p = exp_d(static_cast<double>(load(x, dtype, o + j)) - lse);
      store(dx, dx_dtype, o + j, static_cast<float>((p - (j == label ? 1.0 : 0.0)) * inv));
    }
  }
};

// Rotate-half RoPE (models/rope.h) of x [tokens, heads, 2 * half] (f32, contiguous) with the
// host's tables c, s [tokens, half] (cos and signed sin of each token's angles, rounded to f32):
// y[i] = x[i] c - x[i + half] s, y[i + half] = x[i + half] c + x[i] s; item = (t * heads + j) *
// half + i.
struct RopeKernel {
  static constexpr bool kCooperative = false;
  const float* x;
  const float* c;
  const float* s;
  float* y;
  i64 heads, half;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    const i64 i = item % half, tj = item / half, t = tj / heads;
    const i64 o = tj * 2 * half;
    const float a = x[o + i], b = x[o + i + half];
    const float ci = c[t * half + i], si = s[t * half + i];
    y[o + i] = a * ci - b * si;
    y[o + i + half] = b * ci + a * si;
  }
};

// --- the optimizer (models/adamw.h) ---------------------------------------------------------

// *out = the sum of x[j]^2 over j in [0, n), in f64, in index order (one row: one item).
struct SumSquaresKernel {
  static constexpr bool kCooperative = true;
  const float* x;
  i64 n;
  double* out;
  template <class L>
  RANKSIM_HD void operator()(i64, const L& lanes) const {
    double s = 0.0;
    for (i64 j = lanes.lane; j < n; j += lanes.width) {
      const double v = x[j];
      s += v * v;
    }
    s = lanes.sum(s);
    if (lanes.lane == 0) *out = s;
  }
};

// AdamW on element k of a slice, in place: p (the f32 master), m, v from the gradient g scaled by
// coef; each line computed in f64 and rounded once to f32, as models/adamw.cpp's loop.
struct AdamWKernel {
  static constexpr bool kCooperative = false;
  float* p;
  float* m;
  float* v;
  const float* g;
  double coef, decay, b1, b2, bc2_sqrt, step_size, eps;
  template <class L>
  RANKSIM_HD void operator()(i64 k, const L&) const {
    const float gc = static_cast<float>(static_cast<double>(g[k]) * coef);
    const float pk = static_cast<float>(static_cast<double>(p[k]) * decay);
    const float mk = static_cast<float>(b1 * m[k] + (1 - b1) * gc);
    const float vk = static_cast<float>(b2 * v[k] + (1 - b2) * static_cast<double>(gc) * gc);
    m[k] = mk;
    v[k] = vk;
    const double denom = sqrt(static_cast<double>(vk)) / bc2_sqrt + eps;
    p[k] = static_cast<float>(static_cast<double>(pk) - step_size * mk / denom);
  }
};

// Every kernel, for the Device interface's launch overloads.
#define RANKSIM_DEVICE_KERNELS(X) \
  X(CopyKernel)                   \
  X(AddKernel)                    \
  X(ScaleKernel)                  \
  X(GeluKernel)                   \
  X(GeluBackwardKernel)           \
  X(EmbeddingKernel)              \
  X(CrossEntropyBackwardKernel)   \
  X(GemmKernel)                   \
  X(ColumnSumKernel)              \
  X(LayerNormParamGradKernel)     \
  X(EmbeddingBackwardKernel)      \
  X(LayerNormKernel)              \
  X(LayerNormBackwardKernel)      \
  X(SoftmaxKernel)                \
  X(SoftmaxBackwardKernel)        \
  X(CrossEntropyRowKernel)        \
  X(CrossEntropyMeanKernel)       \
  X(AttentionForwardKernel)       \
  X(AttentionBackwardQueryKernel) \
  X(AttentionBackwardKeyKernel)   \
  X(MergeLseKernel)               \
  X(CorrectOutKernel)             \
  X(AddRowsKernel)                \
  X(VocabMaxKernel)               \
  X(VocabPredKernel)              \
  X(VocabExpKernel)               \
  X(VocabSoftmaxKernel)           \
  X(VocabBackwardKernel)          \
  X(LossSumRowKernel)             \
  X(RopeKernel)                   \
  X(SumSquaresKernel)             \
  X(AdamWKernel)

}  // namespace ranksim::runtime::kernels

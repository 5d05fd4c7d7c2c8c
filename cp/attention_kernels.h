// The device kernels of cp/attention.h: block attention forward and backward with the LSE, and
// the in-place merges of partial results, in cp/attention.cpp's CPU order (runtime/device/
// kernel.h's contract). cp/attention_device.cpp launches them.
#pragma once

#include <cstdint>

#include "runtime/device/kernel.h"

namespace ranksim::cp::kernels {

using namespace ranksim::runtime::kernels;  // element access, math, lanes
using runtime::DType;

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

}  // namespace ranksim::cp::kernels

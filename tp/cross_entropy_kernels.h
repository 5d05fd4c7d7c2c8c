// The device kernels of tp/cross_entropy.h's vocab-parallel cross-entropy: the steps between its
// all-reduces and its backward, in tp/cross_entropy.cpp's CPU order (runtime/device/kernel.h's
// contract).
#pragma once

#include <cstdint>

#include "runtime/device/kernel.h"

namespace ranksim::tp::kernels {

using namespace ranksim::runtime::kernels;  // element access, math, lanes
using runtime::DType;

// Logits x [rows, cols] in dtype (f32, bf16 or f16), read as f32 as the CPU loops' x.to(f32)
// does; per-row results are f32, as on the CPU.

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

}  // namespace ranksim::tp::kernels

// The device kernels of models/adamw.h: the gradient norm's sums of squares and the in-place
// update, in the CPU loop's order (runtime/device/kernel.h's contract).
#pragma once

#include <cstdint>

#include "runtime/device/kernel.h"

namespace ranksim::models::kernels {

using namespace ranksim::runtime::kernels;  // element access, math, lanes
using runtime::DType;

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

}  // namespace ranksim::models::kernels

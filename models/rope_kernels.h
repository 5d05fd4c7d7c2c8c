// The device kernel of models/rope.h's rotation (runtime/device/kernel.h's contract).
#pragma once

#include <cstdint>

#include "runtime/device/kernel.h"

namespace ranksim::models::kernels {

using namespace ranksim::runtime::kernels;  // element access, math, lanes
using runtime::DType;

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

}  // namespace ranksim::models::kernels

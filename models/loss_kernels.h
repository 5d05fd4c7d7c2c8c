// The device kernel of the model's loss (models/loss.h's cross_entropy_sum), in the CPU loop's
// f64 order (runtime/device/kernel.h's contract).
#pragma once

#include <cstdint>

#include "runtime/device/kernel.h"

namespace ranksim::models::kernels {

using namespace ranksim::runtime::kernels;  // element access, math, lanes
using runtime::DType;

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

}  // namespace ranksim::models::kernels

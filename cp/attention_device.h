// The device path of cp/attention.h (internal to cp): block attention forward and backward and
// the in-place merges, run as cp/attention_kernels.h on a compute device after cp/attention.cpp
// has checked every argument. Outputs live on the device (runtime/tensor/device_tensors.h).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::cp::device {

using runtime::Device;
using runtime::DType;
using runtime::Tensor;

// One block's token positions and segments per query and key, the window (-1: unbounded; causal
// already folded into window_right), the scale and the sizes.
struct AttentionCall {
  const std::vector<std::int64_t>* q_pos;
  const std::vector<std::int64_t>* q_seg;
  const std::vector<std::int64_t>* k_pos;
  const std::vector<std::int64_t>* k_seg;
  std::int64_t window_left, window_right;
  double scale;
  std::int64_t tq, tk, hq, hkv, d, dv;
};
// out [tq, hq, dv] in out_dtype and lse [hq, tq] f32.
std::pair<Tensor, Tensor> attention_forward(Device& dev, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const AttentionCall& call, DType out_dtype);
struct AttentionGradTensors {
  Tensor dq, dk, dv;
};
AttentionGradTensors attention_backward(Device& dev, const Tensor& dout, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse,
                                        const AttentionCall& call, DType dq_dtype, DType dk_dtype, DType dv_dtype);

// The in-place merges; rows: the accumulator rows covered, distinct. lse, out and acc may be any
// views of at most kernels::kMaxDims dims.
void merge_lse_(Device& dev, const Tensor& lse, const Tensor& part_lse, const std::vector<std::int64_t>& rows);
void add_corrected_out_(Device& dev, const Tensor& out, const Tensor& lse, const Tensor& part_out,
                        const Tensor& part_lse, const std::vector<std::int64_t>& rows);
void add_rows_(Device& dev, const Tensor& acc, const Tensor& part, const std::vector<std::int64_t>& rows);

}  // namespace ranksim::cp::device

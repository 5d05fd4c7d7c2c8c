// The device path of runtime/tensor/ops.h and of Tensor's copies (internal to runtime/tensor):
// each function runs one op on a Device after the op (runtime/tensor/ops_*.cpp, or
// tensor_copy.cpp for a copy) has checked its arguments, and returns tensors that live on the
// device (runtime/tensor/device_tensors.h).
// Index tensors (ids, targets) must already have been range-checked. Other layers run their own
// kernels through runtime/tensor/device_tensors.h, not through this header.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops.h"

namespace ranksim::runtime::device_ops {

// matmul over L leading batches of [M, K] x [K, N]; batched_b: b has a's leading dims.
struct MatmulShape {
  std::int64_t L = 1, M = 0, N = 0, K = 0;
  bool batched_b = false;
  Shape out;
};
Tensor matmul(Device& dev, const Tensor& a, const Tensor& b, bool ta, bool tb, const MatmulShape& s);
MatmulGrads matmul_backward(Device& dev, const Tensor& dc, const Tensor& a, const Tensor& b, bool ta, bool tb,
                            const MatmulShape& s);
Tensor add(Device& dev, const Tensor& a, const Tensor& b);
Tensor column_sum(Device& dev, const Tensor& dc, const Shape& b_shape);
Tensor scale(Device& dev, const Tensor& x, double alpha);
LayerNormResult layer_norm(Device& dev, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
LayerNormGrads layer_norm_backward(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd);
RmsNormResult rms_norm(Device& dev, const Tensor& x, const Tensor& weight, double eps);
RmsNormGrads rms_norm_backward(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd);
Tensor gelu(Device& dev, const Tensor& x);
Tensor gelu_backward(Device& dev, const Tensor& dy, const Tensor& x);
Tensor swiglu(Device& dev, const Tensor& x);
Tensor swiglu_backward(Device& dev, const Tensor& dy, const Tensor& x);
Tensor softmax(Device& dev, const Tensor& x);
Tensor softmax_backward(Device& dev, const Tensor& dy, const Tensor& y);
Tensor embedding(Device& dev, const Tensor& ids, const Tensor& weight);
Tensor embedding_backward(Device& dev, const Tensor& dy, const Tensor& ids, std::int64_t num_embeddings);
CrossEntropyResult cross_entropy(Device& dev, const Tensor& logits, const Tensor& targets, std::int64_t ignore_index);
// count: the targets that are not ignore_index (counted on the host by the caller).
Tensor cross_entropy_backward(Device& dev, const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, std::int64_t ignore_index, std::int64_t count);
// Tensor copies (runtime/tensor/tensor_copy.cpp) on the device: the device when it is installed, every tensor
// has data in a device dtype and at most kernels::kMaxDims dims, and one of them (need_resident)
// already lives there; else nullptr (the copy runs on the host).
Device* device_for_copy(std::initializer_list<const Tensor*> tensors,
                        std::initializer_list<const Tensor*> need_resident);
// A new contiguous device tensor of src's shape in dtype (clone, contiguous, to).
Tensor copy_to_new(Device& dev, const Tensor& src, DType dtype);
// dst = src, elementwise with conversion, dst any view (REQUIRES: equal shapes, no shared storage).
void copy_into(Device& dev, const Tensor& dst, const Tensor& src);

// xs have equal shapes outside dim (already checked); dim is non-negative.
Tensor cat(Device& dev, const std::vector<Tensor>& xs, std::int64_t dim, const Shape& out_shape);

}  // namespace ranksim::runtime::device_ops

// The device path of runtime/tensor/ops.h (internal to the runtime library): each function runs one op on
// a Device after runtime/tensor/ops.cpp has checked its arguments, and returns tensors that live on the
// device (runtime/device/device.h). Index tensors (ids, targets) must already have been range-checked.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/tensor/ops.h"

namespace ranksim::runtime::device_ops {

// The installed device when every tensor has data and every floating one is f32, bf16 or f16;
// else nullptr (the op runs on the CPU).
Device* device_for(std::initializer_list<const Tensor*> inputs);
Device* device_for(const std::vector<const Tensor*>& inputs);

// matmul over L leading batches of [M, K] x [K, N]; batched_b: b has a's leading dims.
struct MatmulShape {
  std::int64_t L = 1, M = 0, N = 0, K = 0;
  bool batched_b = false;
  Shape out;
};
Tensor matmul(Device& dev, const Tensor& a, const Tensor& b, bool ta, bool tb, const MatmulShape& s);
MatmulGrads matmul_backward(Device& dev, const Tensor& dc, const Tensor& a, const Tensor& b, bool ta,
                            bool tb, const MatmulShape& s);
Tensor add(Device& dev, const Tensor& a, const Tensor& b);
Tensor column_sum(Device& dev, const Tensor& dc, const Shape& b_shape);
Tensor scale(Device& dev, const Tensor& x, double alpha);
LayerNormResult layer_norm(Device& dev, const Tensor& x, const Tensor& weight, const Tensor& bias,
                           double eps);
LayerNormGrads layer_norm_backward(Device& dev, const Tensor& dy, const Tensor& x,
                                   const Tensor& weight, const Tensor& mean, const Tensor& rstd);
Tensor gelu(Device& dev, const Tensor& x);
Tensor gelu_backward(Device& dev, const Tensor& dy, const Tensor& x);
Tensor softmax(Device& dev, const Tensor& x);
Tensor softmax_backward(Device& dev, const Tensor& dy, const Tensor& y);
Tensor embedding(Device& dev, const Tensor& ids, const Tensor& weight);
Tensor embedding_backward(Device& dev, const Tensor& dy, const Tensor& ids,
                          std::int64_t num_embeddings);
CrossEntropyResult cross_entropy(Device& dev, const Tensor& logits, const Tensor& targets,
                                 std::int64_t ignore_index);
// count: the targets that are not ignore_index (counted on the host by the caller).
Tensor cross_entropy_backward(Device& dev, const Tensor& dloss, const Tensor& logits,
                              const Tensor& targets, const Tensor& lse, std::int64_t ignore_index,
                              std::int64_t count);
// Block attention (cp/attention.h) after cp's checks: token positions and segments per query and
// key, the window (-1: unbounded; causal already folded into window_right), the scale.
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
                                        const AttentionCall& call, DType dq_dtype, DType dk_dtype,
                                        DType dv_dtype);

// tp/cross_entropy.cpp's vocab-parallel cross-entropy, in the steps between its all-reduces, after
// its checks. x: the local logits [..., cols] in a device dtype; row tensors have x's leading
// shape, f32; local: the target's local column per row (i64, -1 when not owned).
Tensor vocab_max(Device& dev, const Tensor& x);                                        // m
Tensor vocab_pred(Device& dev, const Tensor& x, const Tensor& m, const Tensor& local);  // pred
std::pair<Tensor, Tensor> vocab_exp(Device& dev, const Tensor& x, const Tensor& m);   // e, se
std::pair<Tensor, Tensor> vocab_softmax(Device& dev, const Tensor& e, const Tensor& se,
                                        const Tensor& pred);                           // softmax, loss
Tensor vocab_backward(Device& dev, const Tensor& softmax, const Tensor& local, const Tensor& dloss,
                      DType dx_dtype);
// models/transformer.cpp's cross_entropy_sum after its checks: x [rows, cols], labels [rows] in
// range or ignore_index. Returns each row's loss (f64, 0 where ignored) and dx in dx_dtype.
struct LossRows {
  Tensor row_loss, dx;
};
LossRows loss_sum_rows(Device& dev, const Tensor& x, const Tensor& labels, std::int64_t ignore_index,
                       double inv, DType dx_dtype);

// models/rope.cpp's rotation of x [tokens, heads, 2 * half] (f32) with its tables c, s
// [tokens, half] (f32); returns f32.
Tensor rope(Device& dev, const Tensor& x, const Tensor& c, const Tensor& s);

// models/adamw.cpp: the f64 sum of squares of each g (f32), each in index order, with one
// download for all; and the in-place AdamW update of p, m, v (f32, contiguous, one slice's
// length) from g.
std::vector<double> sum_squares(Device& dev, const std::vector<Tensor>& gs);
struct AdamWStep {
  double coef, decay, b1, b2, bc2_sqrt, step_size, eps;
};
void adamw_(Device& dev, const Tensor& p, const Tensor& m, const Tensor& v, const Tensor& g, const AdamWStep& step);

// The in-place merges of cp/attention.h after cp's checks; rows: the accumulator rows covered,
// distinct. lse, out and acc may be any views of at most kernels::kMaxDims dims.
void merge_lse_(Device& dev, const Tensor& lse, const Tensor& part_lse, const std::vector<std::int64_t>& rows);
void add_corrected_out_(Device& dev, const Tensor& out, const Tensor& lse, const Tensor& part_out,
                        const Tensor& part_lse, const std::vector<std::int64_t>& rows);
void add_rows_(Device& dev, const Tensor& acc, const Tensor& part, const std::vector<std::int64_t>& rows);

// Tensor copies (runtime/tensor/tensor.cpp) on the device: the device when it is installed, every tensor
// has data in a device dtype and at most kernels::kMaxDims dims, and one of them (need_resident)
// already lives there; else nullptr (the copy runs on the host).
Device* device_for_copy(std::initializer_list<const Tensor*> tensors, std::initializer_list<const Tensor*> need_resident);
// A new contiguous device tensor of src's shape in dtype (clone, contiguous, to).
Tensor copy_to_new(Device& dev, const Tensor& src, DType dtype);
// dst = src, elementwise with conversion, dst any view (REQUIRES: equal shapes, no shared storage).
void copy_into(Device& dev, const Tensor& dst, const Tensor& src);

// xs have equal shapes outside dim (already checked); dim is non-negative.
Tensor cat(Device& dev, const std::vector<Tensor>& xs, std::int64_t dim, const Shape& out_shape);

}  // namespace ranksim::runtime::device_ops

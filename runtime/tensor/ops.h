// Tensor ops with explicit backward functions: the arithmetic parallel layers are built from.
//
// Each op is a pure function from tensors to new tensors. Its backward is a separate function that
// takes the output gradient plus whatever the forward saved (inputs, outputs, or small statistics
// returned in a result struct) and returns the input gradients. There is no tape: the caller (a
// layer's forward/backward pair, as in Megatron's autograd functions) keeps the saved tensors.
//
// Dtypes. Floating inputs of one op must share one dtype (the op names both in its error
// otherwise). f64 computes in double; f32, bf16 and f16 compute in float (fp32 accumulation, as
// tensor cores do) and each result is rounded once to the output dtype, which is the input dtype.
// Integer inputs (ids, targets) may be i64 or i32.
//
// Determinism. Every sum runs in one fixed order: element by element, in increasing index order
// (a GEMM output element is sum over k = 0, 1, ..., K-1 of a[i,k]*b[k,j], accumulated left to
// right). So results depend only on the input values -- not on shapes, batch splits, blocking or
// the machine -- and a column shard of a matmul has the same bits as the same columns of the full
// product. The GEMM kernel computes many output columns at once at the build's vector width
// (RANKSIM_NATIVE: the host's) but each element's sum is still that scalar loop, with the multiply
// and the add rounded separately (-ffp-contract=off), so the bits do not depend on the build's
// instruction set either. No threads are used. Transcendentals (exp, log, tanh) come from the C
// library.
//
// Shape-only. If any input is shape-only, the outputs are shape-only tensors of the right shapes
// and dtypes, no data moves, and the op is still charged. Shape and dtype errors are raised in
// both modes; index errors (an id or target out of range) only where the indices have data.
// Inputs with a pending write (tensor.h) are waited for first.
//
// Cost. Each forward or backward call charges one OpCost (runtime/tensor/cost.h) named after the function
// ("matmul", "matmul_backward", ...), with bytes = bytes of every tensor read and written and the
// flop count given at each op. Views (split, cat_backward) are free and charge nothing.
//
// All shape/dtype/index violations throw ranksim::Error naming the op and the tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ranksim::runtime {

// --- matmul: C = op(A) op(B), op(X) = X or X^T over the last two dims.
// a: [..., M, K] ([..., K, M] when transpose_a). b: [K, N] ([N, K] when transpose_b), shared by
// every leading index of a, or [..., K, N] with exactly a's leading dims. Result: [..., M, N].
// Flops 2*L*M*N*K (L = product of a's leading dims).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
struct MatmulGrads {
  Tensor da;  // shape and dtype of a
  Tensor db;  // shape and dtype of b (summed over leading dims when b is shared)
};
// Flops 4*L*M*N*K; bytes count dc twice (it feeds both products).
MatmulGrads matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, bool transpose_a = false,
                            bool transpose_b = false);

// --- add: a + b. b has a's shape, or a's trailing dims (a bias broadcast over leading dims).
// Flops numel(a).
Tensor add(const Tensor& a, const Tensor& b);
struct AddGrads {
  Tensor da;  // dc itself (shared storage)
  Tensor db;  // dc itself when shapes match, else dc summed over the broadcast dims
};
// Flops numel(dc) when b was broadcast (the reduction), else 0 with 0 bytes (no kernel runs).
AddGrads add_backward(const Tensor& dc, const Shape& b_shape);

// --- scale: alpha * x, with alpha rounded to the compute type (f32 unless x is f64).
// Flops numel(x).
Tensor scale(const Tensor& x, double alpha);
Tensor scale_backward(const Tensor& dy, double alpha);  // alpha * dy

// --- layer_norm over the last dim: y = (x - mean) * rstd * weight + bias, with the biased
// variance and rstd = 1 / sqrt(var + eps). x: [..., H]; weight, bias: [H].
struct LayerNormResult {
  Tensor y;     // x's shape and dtype
  Tensor mean;  // [...] (x's leading dims), f32 (f64 for f64 x): saved for backward
  Tensor rstd;  // same shape and dtype as mean
};
// Flops 8*numel(x).
LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
struct LayerNormGrads {
  Tensor dx, dweight, dbias;  // shapes and dtypes of x, weight, bias
};
// Flops 14*numel(x).
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd);

// --- rms_norm over the last dim: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps)
// (Llama's RMSNorm, Megatron/TE's RMSNorm). x: [..., H]; weight: [H].
struct RmsNormResult {
  Tensor y;     // x's shape and dtype
  Tensor rstd;  // [...] (x's leading dims), f32 (f64 for f64 x): saved for backward
};
// Flops 4*numel(x).
RmsNormResult rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);
struct RmsNormGrads {
  Tensor dx, dweight;  // shapes and dtypes of x and weight
};
// With xhat = x * rstd and g = dy * weight: dx = rstd * (g - xhat * mean(g * xhat)) per row,
// dweight = the sum over rows (in order) of dy * xhat. Flops 8*numel(x).
RmsNormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd);

// --- GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Flops 9*numel (tanh counted as one).
Tensor gelu(const Tensor& x);
Tensor gelu_backward(const Tensor& dy, const Tensor& x);  // flops 19*numel

// --- swiglu: x [..., 2F] holds [gate | up] along the last dim (Megatron's fused fc1 output);
// y [..., F] = silu(gate) * up with silu(g) = g / (1 + exp(-g)). Flops 6*numel(y).
Tensor swiglu(const Tensor& x);
// dx [..., 2F] (x's shape and dtype): [dy * up * silu'(gate) | dy * silu(gate)]. Flops 10*numel(dy).
Tensor swiglu_backward(const Tensor& dy, const Tensor& x);

// --- softmax along the last dim, max-subtracted. Flops 5*numel.
Tensor softmax(const Tensor& x);
// y is softmax's output. dx = y * (dy - sum(dy * y)). Flops 4*numel.
Tensor softmax_backward(const Tensor& dy, const Tensor& y);

// --- embedding: rows of weight [V, H] picked by ids [...] (i64 or i32) -> [..., H], any dtype.
// REQUIRES: 0 <= id < V for every id. Flops 0; bytes count the rows read and written.
Tensor embedding(const Tensor& ids, const Tensor& weight);
// dweight [V, H] in dy's dtype: row id accumulates dy's rows for that id, in token order.
// Flops numel(dy).
Tensor embedding_backward(const Tensor& dy, const Tensor& ids, std::int64_t num_embeddings);

// --- cross-entropy of logits [..., V] against targets [...] (i64 or i32), torch's
// reduction="mean": the mean over targets != ignore_index of logsumexp(row) - row[target].
// With every target ignored the loss is NaN (0/0, as torch) and the gradient is zero.
// REQUIRES: 0 <= target < V unless target == ignore_index.
struct CrossEntropyResult {
  Tensor loss;  // 0-d, logits' dtype
  Tensor lse;   // [...] logsumexp of each row, f32 (f64 for f64 logits): saved for backward
};
// Flops 4*numel(logits).
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);
// dloss: 0-d, the gradient of the loss (any floating dtype). Returns dlogits, logits' shape and
// dtype: (softmax(row) - onehot(target)) * dloss / count, zero on ignored rows. Flops 3*numel.
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              std::int64_t ignore_index = -100);

// --- concatenation and splitting along dimension dim (negative counts from the end); any dtype.
// cat: REQUIRES: a non-empty list; same dtype and rank, equal sizes except along dim.
// Result is a new contiguous tensor. Flops 0, bytes 2*bytes(result).
Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim);
// The pieces of dy of the given sizes along dim: views, free. REQUIRES: sizes sum to dy.size(dim).
std::vector<Tensor> cat_backward(const Tensor& dy, const std::vector<std::int64_t>& sizes, std::int64_t dim);
// Views of x, pieces of the given sizes along dim (torch.split with a size list): free.
// REQUIRES: sizes are >= 0 and sum to x.size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim);
// The gradient of x: the pieces' gradients concatenated. Charged as cat.
Tensor split_backward(const std::vector<Tensor>& dys, std::int64_t dim);

}  // namespace ranksim::runtime

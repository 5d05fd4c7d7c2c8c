// Megatron's tensor-parallel layers with explicit backward: ColumnParallelLinear,
// RowParallelLinear and VocabParallelEmbedding.
//
// Each layer lives on one rank and holds that rank's shards (tp/sharding.h) of the full master
// tensors it was built from, so every TP size starts from the same numbers. forward(x, ctx)
// computes the output and fills ctx with what backward needs (Megatron's saved tensors);
// backward(dy, ctx) returns the input gradient and accumulates the parameter gradients into
// Parameter::grad (as Megatron's main_grad accumulation does). There is no tape.
//
// Activations have any leading dims and the feature dim last, [..., h]; with sequence
// parallelism dim 0 is the sequence (Megatron's [s, b, h]) and each rank holds s/p of it.
// A layer's forward and backward are collective over its TP group: every member calls them in
// the same order with matching shapes. With a group of size 1 they run no collective, which is
// the single-rank reference the tests compare against.
//
// Linear: Y = X W^T + b with W [out, in] (torch / Megatron layout).
//   ColumnParallelLinear: W rows split (shard [out/p, in]), bias [out/p] split. Input copied to
//     the region (its gradient all-reduced in backward, overlapped with the weight-gradient GEMM);
//     with sequence parallelism the input [s/p, ..., in] is all-gathered along dim 0 in forward
//     and again in backward (Megatron keeps only the local input), and dX is reduce-scattered.
//     gather_output all-gathers the output along the last dim (not with sequence parallelism).
//   RowParallelLinear: W columns split (shard [out, in/p]), full bias [out] on every rank, added
//     once after the reduction. The partial products are all-reduced, or reduce-scattered along
//     dim 0 with sequence parallelism (which requires input_is_parallel). Under sequence
//     parallelism the bias gradient only covers the rank's tokens (Parameter::sequence_parallel):
//     call allreduce_sequence_parallel_grads before using it.
//   skip_bias_add (both): the bias is not added but returned; the caller adds it and passes the
//     bias gradient to backward.
//
// Errors (ranksim::Error naming the sizes): out (column) / in (row) not divisible by p; a master
// of the wrong shape; sequence_parallel with gather_output, or without input_is_parallel.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device/dtype.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/sharding.h"

namespace ranksim::tp {

struct LinearOutput {
  runtime::Tensor output;
  runtime::Tensor bias;  // defined only with skip_bias_add (and a bias)
};

struct LinearContext {
  runtime::Tensor input;  // the local input as given to forward (before any gather)
};

struct ColumnParallelLinearOptions {
  bool bias = true;                // Default: true (zero-initialised unless a master bias is given)
  bool gather_output = false;      // Default: false (output stays split along the last dim)
  bool skip_bias_add = false;      // Default: false
  bool sequence_parallel = false;  // Default: false
  // Megatron's --tp-comm-overlap: the forward's all-gather pipelined with the GEMM in chunks
  // (tp/comm_overlap.h); the same bits. REQUIRES: sequence_parallel. Default: false
  bool comm_overlap = false;
  int stride = 1;                              // partition stride of the CPU-init rule. Default: 1
  runtime::DType dtype = runtime::DType::f32;  // parameter and activation dtype. Default: f32
};

class ColumnParallelLinear {
 public:
  // master_weight [out, in] (any floating dtype; the shard is converted to opts.dtype);
  // master_bias [out] or undefined (zeros).
  ColumnParallelLinear(const runtime::Tensor& master_weight, runtime::ProcessGroup tp,
                       const ColumnParallelLinearOptions& opts = {}, const runtime::Tensor& master_bias = {});

  // x: [..., in] ([s/p, ..., in] with sequence parallelism). Output [..., out/p], or [..., out]
  // with gather_output.
  LinearOutput forward(const runtime::Tensor& x, LinearContext& ctx) const;
  // dy: the output's gradient; dbias: the returned bias's gradient (skip_bias_add only; may be
  // undefined). Returns dx, shaped like x.
  runtime::Tensor backward(const runtime::Tensor& dy, const LinearContext& ctx, const runtime::Tensor& dbias = {});

  std::int64_t input_size() const { return in_; }
  std::int64_t output_size() const { return out_; }  // full, not per partition
  std::int64_t output_size_per_partition() const { return out_ / p_; }
  const ColumnParallelLinearOptions& options() const { return opts_; }
  Parameter& weight() { return weight_; }
  const Parameter& weight() const { return weight_; }
  bool has_bias() const { return opts_.bias; }
  Parameter& bias() { return bias_; }  // REQUIRES: has_bias()
  const Parameter& bias() const { return bias_; }
  const runtime::ProcessGroup& group() const { return tp_; }

 private:
  runtime::ProcessGroup tp_;
  int p_ = 1;
  std::int64_t in_ = 0, out_ = 0;
  ColumnParallelLinearOptions opts_;
  Parameter weight_, bias_;
};

struct RowParallelLinearOptions {
  bool bias = true;                // Default: true (zero-initialised unless a master bias is given)
  bool input_is_parallel = false;  // Default: false (the input is split along its last dim first)
  bool skip_bias_add = false;      // Default: false
  bool sequence_parallel = false;  // Default: false. REQUIRES input_is_parallel.
  // Megatron's --tp-comm-overlap: the forward's reduce-scatter and the backward's all-gather of
  // dY pipelined with the GEMMs in chunks (tp/comm_overlap.h); the same bits. REQUIRES:
  // sequence_parallel. Default: false
  bool comm_overlap = false;
  int stride = 1;                              // Default: 1
  runtime::DType dtype = runtime::DType::f32;  // Default: f32
};

class RowParallelLinear {
 public:
  // master_weight [out, in]; master_bias [out] or undefined (zeros).
  RowParallelLinear(const runtime::Tensor& master_weight, runtime::ProcessGroup tp,
                    const RowParallelLinearOptions& opts = {}, const runtime::Tensor& master_bias = {});

  // x: [..., in/p] when input_is_parallel, else [..., in]. Output [..., out] on every rank, or
  // [s/p, ..., out] with sequence parallelism.
  LinearOutput forward(const runtime::Tensor& x, LinearContext& ctx) const;
  runtime::Tensor backward(const runtime::Tensor& dy, const LinearContext& ctx, const runtime::Tensor& dbias = {});

  std::int64_t input_size() const { return in_; }  // full
  std::int64_t input_size_per_partition() const { return in_ / p_; }
  std::int64_t output_size() const { return out_; }
  const RowParallelLinearOptions& options() const { return opts_; }
  Parameter& weight() { return weight_; }
  const Parameter& weight() const { return weight_; }
  bool has_bias() const { return opts_.bias; }
  Parameter& bias() { return bias_; }
  const Parameter& bias() const { return bias_; }
  const runtime::ProcessGroup& group() const { return tp_; }

 private:
  runtime::ProcessGroup tp_;
  int p_ = 1;
  std::int64_t in_ = 0, out_ = 0;
  RowParallelLinearOptions opts_;
  Parameter weight_, bias_;
};

struct VocabParallelEmbeddingOptions {
  // Reduce-scatter the output along dim 0 (the sequence) instead of all-reducing it. Default:
  // false. Megatron's embedding transposes [b, s] to [s, b] first; here pass ids sequence-first.
  bool sequence_parallel = false;
  runtime::DType dtype = runtime::DType::f32;  // Default: f32
};

struct EmbeddingContext {
  runtime::Tensor local_ids;         // i64, ids - vocab_start, 0 where not owned
  std::vector<std::uint8_t> masked;  // 1 where the id is outside this rank's range
};

// Rank r owns rows [r*V/p, (r+1)*V/p) of the table. Ids outside are looked up as row 0, their
// rows zeroed, and the partial outputs summed over TP (all-reduce, or reduce-scatter along dim 0
// with sequence parallelism). Backward reaches only the owned rows.
class VocabParallelEmbedding {
 public:
  // master_weight [V, H]. REQUIRES: p divides V (Error: Megatron pads the vocabulary first).
  VocabParallelEmbedding(const runtime::Tensor& master_weight, runtime::ProcessGroup tp,
                         const VocabParallelEmbeddingOptions& opts = {});

  // ids: i64 or i32, any shape ([s, b] with sequence parallelism), every id in [0, V) (Error
  // otherwise). Output ids.shape + [H] ([s/p, b, H] with sequence parallelism).
  runtime::Tensor forward(const runtime::Tensor& ids, EmbeddingContext& ctx) const;
  // Accumulates the weight gradient of the owned rows.
  void backward(const runtime::Tensor& dy, const EmbeddingContext& ctx);

  std::int64_t num_embeddings() const { return vocab_; }
  std::int64_t vocab_start() const { return start_; }
  std::int64_t vocab_end() const { return start_ + vocab_ / p_; }
  Parameter& weight() { return weight_; }
  const Parameter& weight() const { return weight_; }
  const runtime::ProcessGroup& group() const { return tp_; }

 private:
  runtime::ProcessGroup tp_;
  int p_ = 1;
  std::int64_t vocab_ = 0, hidden_ = 0, start_ = 0;
  VocabParallelEmbeddingOptions opts_;
  Parameter weight_;
};

// The embedding's local steps, for models that hold the table shard themselves (the decoder's
// vocab-parallel embedding, models/transformer.h): VocabParallelEmbedding::forward is
// vocab_parallel_lookup followed by the sum over TP, and backward the gradient's gather followed
// by vocab_parallel_lookup_backward.
// vocab_parallel_lookup: rank tp.rank()'s partial output ids.shape + [H] from its shard [V/p, H]
// of a table of `vocab` rows: the owned ids' rows, zeros elsewhere. Errors: ids not i64/i32, an
// id outside [0, vocab).
runtime::Tensor vocab_parallel_lookup(const runtime::Tensor& ids, const runtime::Tensor& shard, std::int64_t vocab,
                                      const runtime::ProcessGroup& tp, EmbeddingContext& ctx);
// The shard's gradient [V/p, H] from the gradient of the whole (summed) output, dy
// (ids.shape + [H]), whose rows of ids this rank does not own are zeroed in place: pass a tensor
// that is yours to modify.
runtime::Tensor vocab_parallel_lookup_backward(const runtime::Tensor& dy, const EmbeddingContext& ctx,
                                               std::int64_t shard_rows, int tp_size);

// All-reduces (sum over tp) the gradient of every parameter flagged sequence_parallel, as
// Megatron's finalize_model_grads does for sequence-parallel biases and LayerNorm parameters.
// Collective over tp; parameters without a gradient are skipped identically on every rank.
void allreduce_sequence_parallel_grads(const std::vector<Parameter*>& params, const runtime::ProcessGroup& tp);

}  // namespace ranksim::tp

// ParallelAttention: Megatron's tensor-parallel self-attention with a fused QKV projection and
// grouped-query attention, with explicit backward.
//
// Heads: np query heads in ng KV groups (np/ng query heads share one K and one V head), head
// size hn. The fused QKV weight [ng * (np/ng + 2) * hn, h] is Megatron's interleaved layout: for
// each KV group g in turn, the rows of its np/ng query heads, then its K head, then its V head.
// A column split therefore gives each rank ng/p whole groups (and np/p query heads), so the
// attention itself needs no communication:
//
//   qkv  = ColumnParallelLinear(x)            [s, b, ng/p * (np/ng + 2) * hn]
//   per (batch, local group, query head): causal softmax(q k^T / sqrt(hn)) v
//   out  = RowParallelLinear(context)         [s, b, h] (all-reduce; SP: reduce-scatter)
//
// The context's features are ordered by head (group-major, as Megatron's [ng, np/ng, hn]), which
// is the order of the projection weight's input columns. Inside a rank the attention is plain
// softmax attention built from runtime ops (no flash/online softmax), with the mask applied to
// the scaled scores; dropout is not modelled.
//
// Activations are sequence-first [s, b, h] ([s/p, b, h] with sequence parallelism).
// Errors (naming the sizes): np not divisible by ng; ng or np not divisible by p; masters of the
// wrong shape.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/layers.h"

namespace ranksim::tp {

struct ParallelAttentionConfig {
  std::int64_t hidden_size = 0;                // h. REQUIRES: > 0
  int num_attention_heads = 0;                 // np. REQUIRES: > 0
  int num_query_groups = 0;                    // ng; 0 means np (multi-head attention). Default: 0
  std::int64_t kv_channels = 0;                // hn; 0 means h / np. Default: 0
  bool bias = true;                            // QKV and projection biases. Default: true
  bool causal = true;                          // Default: true
  bool sequence_parallel = false;              // Default: false
  runtime::DType dtype = runtime::DType::f32;  // Default: f32
};

struct AttentionContext {
  LinearContext qkv, proj;
  runtime::Tensor q;          // [b, ng/p, (np/ng) * s, hn]: a group's query heads stacked as rows
  runtime::Tensor k, v;       // [b, ng/p, s, hn]
  runtime::Tensor probs;      // [b, ng/p, (np/ng) * s, s]
  std::int64_t s = 0, b = 0;  // full sequence length and batch
};

// The fused QKV master [ng * (np/ng + 2) * hn, h] in Megatron's interleaved layout, from separate
// query [np * hn, h], key [ng * hn, h] and value [ng * hn, h] weights (e.g. a Hugging Face
// checkpoint's q_proj/k_proj/v_proj). Works for biases too ([np * hn] etc., as 1-d tensors).
runtime::Tensor interleave_qkv(const runtime::Tensor& wq, const runtime::Tensor& wk, const runtime::Tensor& wv,
                               int num_attention_heads, int num_query_groups);

class ParallelAttention {
 public:
  // qkv_weight: the fused master above; proj_weight [h, np * hn]; biases or undefined (zeros).
  ParallelAttention(const ParallelAttentionConfig& config, const runtime::Tensor& qkv_weight,
                    const runtime::Tensor& proj_weight, runtime::ProcessGroup tp, const runtime::Tensor& qkv_bias = {},
                    const runtime::Tensor& proj_bias = {});
  // Seeded masters (normal(0, init_std); QKV with seed, projection with seed + 1).
  static ParallelAttention seeded(const ParallelAttentionConfig& config, std::uint64_t seed, runtime::ProcessGroup tp,
                                  double init_std = 0.02);

  // x: [s, b, h] ([s/p, b, h] with sequence parallelism); output likewise.
  runtime::Tensor forward(const runtime::Tensor& x, AttentionContext& ctx) const;
  // Returns dx and accumulates the parameter gradients. If dqkv is given it receives the
  // gradient of the QKV projection's output, [s, b, ng/p * (np/ng + 2) * hn].
  runtime::Tensor backward(const runtime::Tensor& dy, const AttentionContext& ctx, runtime::Tensor* dqkv = nullptr);

  const ParallelAttentionConfig& config() const { return cfg_; }
  ColumnParallelLinear& qkv() { return qkv_; }
  RowParallelLinear& proj() { return proj_; }
  // "qkv.weight", "qkv.bias", "proj.weight", "proj.bias" (biases only when enabled).
  std::vector<std::pair<std::string, Parameter*>> named_parameters();

 private:
  ParallelAttentionConfig cfg_;
  int groups_local_ = 0;  // ng / p
  int q_per_group_ = 0;   // np / ng
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
};

}  // namespace ranksim::tp

// The reference transformer: the model of ranksim's CP=1 vs CP=N validation framework (spec
// section D, bionemo's SimpleThDModel / SimpleBSHDModel), with tensor and context parallelism
// combinable on a tp x cp grid, and an explicit backward.
//
// Contract (outside tools rely on it; docs/models.md):
//   x = embedding(ids)
//   x += proj(attention(rope(q), rope(k), v))      q, k, v = qkv(LayerNorm(x; ln1))
//   x += fc2(gelu_tanh(fc1(LayerNorm(x; ln2))))
//   logits = output(LayerNorm(x; final_ln))
//   loss = mean cross-entropy over the labels != -100 of the whole batch (every CP rank's tokens)
// LayerNorm eps 1e-5; softmax scale 1/sqrt(head_dim); RoPE rotate-half, base 10000, positions
// from 0 within each sequence (models/rope.h). Parameters, PyTorch Linear layout [out, in]:
//   embedding.weight [vocab, hidden]; layer.ln1.{weight,bias} [hidden];
//   layer.qkv.weight [3*hidden, hidden], layer.qkv.bias [3*hidden] -- output rows q, then k, then
//     v, each viewed as [heads, head_dim] with heads contiguous;
//   layer.proj.{weight [hidden, hidden], bias}; layer.ln2.{weight,bias};
//   layer.fc1.{weight [ffn, hidden], bias [ffn]}; layer.fc2.{weight [hidden, ffn], bias [hidden]};
//   final_ln.{weight,bias}; output.{weight [vocab, hidden], bias [vocab]}.
//
// The decoder family (TransformerConfig: norm, activation, bias, kv_heads, positions) generalises
// this contract: RMSNorm has no bias; with kv_heads < heads q, k and v are separate parameters
// (q.weight [heads*head_dim, hidden], k.weight and v.weight [kv_heads*head_dim, hidden]); SwiGLU's
// fc1.weight is [2*ffn, hidden] (gate rows, then up); learned positions add
// position_embedding.weight [max_positions, hidden]. docs/models.md has the full table.
//
// Parallelism. The transformer layer is tensor-parallel as Megatron's: qkv is column-parallel with
// partition stride 3 (rank r holds the q, k and v rows of heads [r*heads/tp, (r+1)*heads/tp)), proj
// row-parallel, fc1 column-, fc2 row-parallel; the embedding and output layer are vocab-parallel as
// Megatron's (rank r holds rows [r V/tp, (r+1) V/tp) of both tables; the lookup's partial rows are
// summed over TP, the logits stay split by vocabulary and the loss is tp/cross_entropy.h's) when
// tp divides the vocabulary, and replicated on every TP rank otherwise (as the bionemo model's
// plain torch modules are; Megatron pads the vocabulary instead, which the scenarios do, see
// docs/models.md); the norms are replicated. The sequence is split over CP in the DualChunkSwap layout
// (cp/partition.h); attention runs through cp/context_parallel.h with the chosen comm type (at
// cp = 1 the block kernel of cp/attention.h runs on the whole sequence). Every parameter is
// replicated across CP, so its gradient is summed over the CP group (Megatron's DP x CP rule;
// reduce_gradients). The loss and its gradient are token-weighted over the whole CP group: any
// layout gives the gradient of the same batch.
//
// Batches (models/batch.h): BSHD rows or THD packed sequences, labels already shifted; the loss
// (models/loss.h). Masks: BSHD causal or no_mask; THD padding (attention inside each sequence) or causal (causal inside
// each sequence); optional sliding window [left, right] (-1 unbounded; a causal mask takes right = 0 or -1).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cp/context_parallel.h"
#include "models/batch.h"
#include "models/loss.h"
#include "runtime/device/dtype.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/safetensors.h"
#include "runtime/tensor/tensor.h"
#include "tp/layers.h"
#include "tp/mlp.h"

namespace ranksim::models {

// The block's normalisation: LayerNorm (weight and bias) or RMSNorm (weight only,
// y = x / sqrt(mean(x^2) + eps) * weight), for ln1, ln2 and final_ln alike.
enum class Norm { layernorm, rmsnorm };
// The MLP's activation: GELU (tanh approximation) on fc1's output, or SwiGLU, where fc1 is
// Megatron's fused gate/up layer [2*ffn, hidden] (rows: gate, then up) and fc2 reads
// silu(gate) * up.
enum class Activation { gelu, swiglu };
// Position information: RoPE on q and k, or a learned table added to the token embeddings
// (position_embedding.weight [max_positions, hidden], GPT-2/3 style).
enum class Positions { rope, learned };

// Activation recomputation (Megatron-LM's --recompute-granularity): none; selective, the attention
// core (kept: its q, k and v; recomputed in backward with its CP communication); or full, whole
// blocks (kept: their input; the blocks' forward with its TP and CP communication runs again in
// backward).
enum class Recompute { none, selective, full };
// Which blocks full recomputation covers (--recompute-method): uniform, every block, in groups of
// recompute_num_layers consecutive blocks of a stage with only each group's input kept; block,
// the first recompute_num_layers blocks of each stage, one by one, the rest stored.
enum class RecomputeMethod { uniform, block };

// The decoder family. The defaults are the bionemo model (GPT style with RoPE); gpt_config and
// llama_config give the two families' choices.
struct TransformerConfig {
  std::int64_t vocab = 33;     // Default: 33 (the bionemo model's)
  std::int64_t hidden = 320;   // Default: 320
  std::int64_t heads = 20;     // query heads. Default: 20
  std::int64_t head_dim = 16;  // Default: 16. REQUIRES: even with RoPE
  // Key/value heads (Megatron's num_query_groups): 0 means heads (multi-head attention); fewer
  // is grouped-query attention. REQUIRES: divides heads. Default: 0.
  std::int64_t kv_heads = 0;
  std::int64_t ffn = 1280;  // Default: 1280
  // Transformer blocks. With one, block parameters are named `layer.<name>`; with more,
  // `layers.<i>.<name>` (i from 0). Default: 1.
  std::int64_t layers = 1;
  Norm norm = Norm::layernorm;               // Default: layernorm
  Activation activation = Activation::gelu;  // Default: gelu
  bool bias = true;                          // biases on every linear layer. Default: true
  Positions positions = Positions::rope;     // Default: rope
  // Rows of the learned position table (positions >= it are an error). REQUIRES >= 1 with
  // Positions::learned, 0 otherwise. Default: 0.
  std::int64_t max_positions = 0;
  runtime::DType dtype = runtime::DType::f32;  // parameters and activations. Default: f32
  // The blocks' linear layers (qkv, proj, fc1, fc2) run their GEMMs in FP8, as Megatron-LM's
  // --fp8-format does with TransformerEngine layers: timed at the device's FP8 rate
  // (runtime::GemmPrecision::fp8); the embedding, attention core and output layer stay in dtype.
  // Timing only: the numbers stay dtype's. Default: false.
  bool fp8 = false;
  Recompute recompute = Recompute::none;                        // Default: none
  RecomputeMethod recompute_method = RecomputeMethod::uniform;  // full only. Default: uniform
  std::int64_t recompute_num_layers = 1;                        // full only; >= 1. Default: 1
  // Megatron's sequence parallelism (needs tp > 1 to change anything): between the TP regions
  // each TP rank keeps 1/tp of the local tokens (the norms, residual adds and dropout-free
  // elementwise work run on that share); the column-parallel layers all-gather their input and
  // the row-parallel ones reduce-scatter their output in place of the all-reduces; the norms'
  // weight gradients (and the row-parallel biases') are summed over TP at the end of the step.
  // The local tokens are padded with zero rows to a multiple of tp where needed (rows that reach
  // no output and no gradient). Changes timing and memory, not the numbers beyond rounding.
  // Default: false.
  bool sequence_parallel = false;
  // Megatron's --tp-comm-overlap (TransformerEngine's userbuffers; needs sequence_parallel): the
  // all-gather before each column-parallel GEMM (qkv or q/k/v, fc1) and the reduce-scatter after
  // each row-parallel one (proj, fc2), in forward, and the all-gather of the row-parallel layers'
  // output gradient in backward, are cut into tp chunks pipelined with the GEMM (tp/comm_overlap.h).
  // The backward's bulk overlaps (the input all-gather during the dgrad GEMM, dX's reduce-scatter
  // during the wgrad GEMM) run with or without it. Timing only: the same bits. Default: false.
  bool tp_comm_overlap = false;
  double layer_norm_eps = 1e-5;  // LayerNorm and RMSNorm eps. Default: 1e-5
  double rope_base = 10000.0;

  std::int64_t query_groups() const { return kv_heads == 0 ? heads : kv_heads; }
  // Fused q|k|v projection (`qkv`) for multi-head attention, separate `q`, `k`, `v` for GQA.
  bool fused_qkv() const { return query_groups() == heads; }
};

// GPT style: LayerNorm, GELU MLP, biases, multi-head attention, learned positions.
TransformerConfig gpt_config(std::int64_t vocab, std::int64_t hidden, std::int64_t heads, std::int64_t ffn,
                             std::int64_t layers, std::int64_t max_positions);
// Llama style: RMSNorm, SwiGLU, no biases, grouped-query attention, RoPE (base 10000 unless
// changed), untied input and output embeddings; head_dim = hidden / heads.
TransformerConfig llama_config(std::int64_t vocab, std::int64_t hidden, std::int64_t heads, std::int64_t kv_heads,
                               std::int64_t ffn, std::int64_t layers);

// Errors (ranksim::Error) for sizes that cannot work, naming them.
void check_config(const TransformerConfig& config);

// The parameter names and full shapes, in the contract's order.
std::vector<std::pair<std::string, runtime::Shape>> parameter_shapes(const TransformerConfig& config);

// Full (unsharded) fp32 weights by parameter name.
using Weights = std::map<std::string, runtime::Tensor>;

// The seeded initialisation: embedding normal(0, 1); Linear weights and biases uniform(-1/sqrt(in),
// 1/sqrt(in)) (torch's default); LayerNorm weights 1 + uniform(-0.1, 0.1), biases uniform(-0.1,
// 0.1) (perturbed from torch's ones/zeros so the tests see them). Depends only on (config, seed).
Weights seeded_weights(const TransformerConfig& config, std::uint64_t seed);
// The same shapes, shape-only (timing runs at sizes too large for real data).
Weights shape_only_weights(const TransformerConfig& config);
// The contract's parameters from a safetensors file, converted to f32. Errors naming the file
// for a missing tensor, a wrong shape, a non-floating dtype, or a name the model does not have
// (with the closest name suggested). Tensors named optimizer.* (a training checkpoint's optimizer
// state) are skipped.
Weights checked_weights(const runtime::SafetensorsFile& file, const TransformerConfig& config);

enum class Mask { causal, padding, no_mask };
const char* mask_name(Mask mask);
Mask parse_mask(const std::string& name);  // Error listing the names otherwise

struct AttentionSetup {
  cp::Format format = cp::Format::bshd;   // Default: bshd
  Mask mask = Mask::causal;               // Default: causal
  std::int64_t window_left = -1;          // Default: -1 (unbounded)
  std::int64_t window_right = -1;         // Default: -1
  cp::CommType comm = cp::CommType::p2p;  // Default: p2p
  int a2a_size = 0, p2p_size = 0;         // a2a+p2p: [a2a, p2p]; 0 = the default [2, cp/2]
};
// Errors for a mask or window the format cannot take (BSHD padding, THD no_mask, causal with a
// right window > 0, windows below -1).
void check_attention(const AttentionSetup& setup);

// Errors naming `source` (a file) for: ids/labels not integers of the right rank, shapes that
// differ, ids outside [0, vocab), labels outside [0, vocab) other than -100, cu_seqlens missing
// (THD) or not starting at 0, decreasing, or not ending at T; a BSHD S not a multiple of 2 cp
// (cp > 1).
void check_batch(const Batch& batch, const TransformerConfig& config, std::int64_t cp, const std::string& source);

// The CP groups attention needs: the CP group itself, plus for a2a+p2p its [a2a, p2p] subgroups
// (setup's sizes, or the default [2, cp/2]). Collective over cp (creates groups); at cp = 1 no
// subgroups are made. Errors: sizes whose product is not cp, an odd cp for the default split.
cp::CpGroups transformer_cp_groups(const runtime::ProcessGroup& cp, const AttentionSetup& setup);

struct TransformerGroups {
  runtime::ProcessGroup tp;  // tensor-parallel group (size divides heads and ffn)
  cp::CpGroups cp;           // context-parallel group (+ a2a / p2p subgroups for a2a+p2p)
  // FSDP (ZeRO-3): the group parameters are sharded over (DP x CP). A parameter whose value
  // models::AdamW released (Parameter::dp_slice) is all-gathered over it just before its unit uses
  // it and released right after: each block is a unit, the embeddings one, the final norm and
  // output layer one; the next block's gather is started before the current block runs
  // (FSDP's forward and backward prefetch). Unset: values are never released.
  std::optional<runtime::ProcessGroup> fsdp;
  // The ranks that share one loss: the token count and loss sum are added over it (CP, or DP x CP
  // with data parallelism -- Megatron's rule). Default (unset): the CP group.
  std::optional<runtime::ProcessGroup> loss;
};

// A normalisation's saved statistics (mean is undefined for RMSNorm).
struct NormResult {
  runtime::Tensor y, mean, rstd;
};

// What a stage's backward needs, filled by its forward.
struct BlockContext {
  runtime::Tensor x_in;  // the block's input (residual stream)
  NormResult ln1, ln2;
  runtime::Tensor x_mid;  // after attention
  tp::LinearContext qkv, proj;
  tp::MLPContext mlp;
  runtime::Tensor q, k, v;        // cp = 1: rotated q and k, and v, [N, heads/tp, d] ([N, kv heads here, d])
  cp::AttentionResult attention;  // cp = 1
  cp::CpContext cp_ctx;           // cp > 1
};

struct TransformerContext {
  std::vector<BlockContext> blocks;
  runtime::Tensor x_last;  // the last block's output (last stage)
  NormResult lnf;
  tp::EmbeddingContext embedding;  // the vocab-parallel lookup (first stage)
};

// A pipeline stage: the blocks [first_layer, first_layer + layers) of the model, with the
// embedding on the first stage and the final LayerNorm and output layer on the last.
struct Stage {
  int rank = 0;  // pipeline rank
  int size = 1;  // pipeline stages. REQUIRES: size divides config.layers (unless uneven, below)
  // Uneven stages (Megatron's --decoder-first-pipeline-num-layers and
  // --decoder-last-pipeline-num-layers): the first and/or the last stage hold this many blocks
  // (>= 0; -1: the even share), and the other stages split the rest evenly -- so that the stages
  // with the embedding and the output layer can take fewer blocks. REQUIRES: size >= 2, the rest
  // divisible by the stages left (Error otherwise; stage_layers says which).
  std::int64_t first_stage_layers = -1;
  std::int64_t last_stage_layers = -1;
  // The first stage takes its input embeddings from outside (another model's output, e.g. an
  // encoder through models/bridge.h) instead of the embedding table: there is no
  // embedding.weight (weights need not hold one), stage_forward reads `input` [N, hidden] (the
  // local rows, in the batch's local token order) and stage_backward returns its gradient.
  // Default: false.
  bool external_embeddings = false;
  bool first() const { return rank == 0; }
  bool last() const { return rank == size - 1; }
};

// The blocks of a stage: [first, first + count) of config.layers. Errors (prefixed with who):
// the even split when size does not divide layers; uneven counts below -1, above the layer
// count, on a single stage, or leaving a rest the middle stages cannot split evenly.
struct StageLayers {
  std::int64_t first = 0, count = 0;
};
StageLayers stage_layers(std::int64_t layers, const Stage& stage, const std::string& who);

struct StepResult {
  double loss = 0;          // the global mean cross-entropy (NaN in shape-only runs)
  std::int64_t tokens = 0;  // labelled tokens over the loss group
  runtime::Tensor logits;   // this rank's logits, f32 [N, vocab] (local rows; [N, vocab / tp] when vocab-parallel)
};

class Transformer {
 public:
  // Every member of groups.tp and groups.cp constructs it with the same config and weights; a
  // pipeline stage reads only its own parameters from weights.
  // Errors: heads or ffn not divisible by tp; layers not divisible by the stages; weights missing
  // or of the wrong shapes.
  Transformer(const TransformerConfig& config, const Weights& weights, TransformerGroups groups,
              const AttentionSetup& attention, Stage stage = {});
  ~Transformer();
  Transformer(Transformer&&) noexcept;
  Transformer& operator=(Transformer&&) noexcept;

  // One pipeline stage's forward: from the batch's ids on the first stage (from `input` with
  // Stage::external_embeddings), else from `input` (the previous stage's hidden states,
  // [N, hidden]); returns hidden states, or the logits
  // [N, vocab] on the last stage. ctx keeps what stage_backward needs.
  runtime::Tensor stage_forward(const LocalBatch& batch, const runtime::Tensor& input, TransformerContext& ctx) const;
  // The stage's backward from the gradient of its output (dlogits on the last stage; pass it by
  // std::move so it is freed once used); frees what forward kept in ctx as soon as each part is
  // used (ctx is left empty); returns the
  // gradient of its input (undefined on the first stage unless its embeddings are external) and accumulates its
  // parameters' gradients. after_block, when set, is called with each block's index as soon as that block's gradients
  // are complete (last block first): the hook for overlapping gradient reduction.
  runtime::Tensor stage_backward(runtime::Tensor dout, const LocalBatch& batch, TransformerContext& ctx,
                                 const std::function<void(std::int64_t)>& after_block = {});

  // The shape of a stage's input and output hidden states for a batch, [rows, hidden]: the local
  // tokens, or this TP rank's share of them (padded to a multiple of tp) with sequence
  // parallelism -- what pipeline stages send one another.
  runtime::Shape hidden_shape(const LocalBatch& batch) const;

  // Forward, loss and backward of one (local share of a) batch on a single-stage model: returns the loss and the local
  // logits, and accumulates every parameter's gradient (not yet summed over CP or DP). Collective
  // over tp, cp and the loss group.
  StepResult forward_backward(const LocalBatch& batch);
  // Sums every gradient over g (the CP group, or DP x CP), in parameter order. Collective.
  void reduce_gradients(const runtime::ProcessGroup& g);
  // Completes the gradients of the given parameters that each TP rank holds only a part of: the
  // key and value weights every TP rank keeps whole when kv_heads < tp (each rank's gradient
  // covers only its group's rows), summed over TP. Call once per step, after the last
  // micro-batch's backward and before any reduction over DP or CP. Collective over TP; a no-op
  // when none of them is partial.
  void reduce_tp_partial_gradients(const std::vector<std::pair<std::string, tp::Parameter*>>& params);
  void zero_grad();
  // FSDP: installs every released parameter value of this stage (all-gathered over groups.fsdp),
  // e.g. before reading the weights after training. Collective over the FSDP group.
  void gather_parameters();

  // The contract's names of this stage's parameters, in the contract's order, with this rank's
  // Parameter (shard, gradient, partition).
  std::vector<std::pair<std::string, tp::Parameter*>> named_parameters();
  // The parameters of block i (a global layer index owned by this stage).
  std::vector<std::pair<std::string, tp::Parameter*>> block_parameters(std::int64_t i);
  const TransformerConfig& config() const { return config_; }
  const TransformerGroups& groups() const { return groups_; }
  const Stage& stage() const { return stage_; }
  std::int64_t first_layer() const { return first_layer_; }
  // The embedding and output tables split by vocabulary rows over TP (tp > 1 and tp divides
  // vocab); the last stage's logits are then this rank's columns [N, vocab / tp].
  bool vocab_parallel() const { return vocab_parallel_; }
  // The group a loss over this model's logits must reduce over (cross_entropy_sum's vocab_tp):
  // the TP group when vocab-parallel, else none.
  const runtime::ProcessGroup* vocab_group() const { return vocab_parallel_ ? &groups_.tp : nullptr; }
  // The last stage's logits with every vocabulary column: gathered over TP when vocab-parallel.
  runtime::Tensor full_logits(const runtime::Tensor& logits) const;
  std::int64_t num_layers() const { return static_cast<std::int64_t>(blocks_.size()); }

  struct Block;  // one transformer block's layers (transformer.cpp)

 private:
  // Consecutive local blocks [first, last) run together; a recomputed group keeps only its input.
  struct RecomputeGroup {
    std::size_t first = 0, last = 0;
    bool recompute = false;
  };
  std::vector<RecomputeGroup> recompute_groups() const;
  // FSDP units' parameters: block i (local index), the embeddings, the final norm and output layer.
  std::vector<tp::Parameter*> block_unit(std::size_t i) const;
  std::vector<tp::Parameter*> embedding_unit() const;
  std::vector<tp::Parameter*> head_unit() const;
  bool has_embedding() const { return stage_.first() && !stage_.external_embeddings; }
  // Sequence parallelism with a vocab-parallel embedding and nothing added after it: the lookup's
  // partial rows are reduce-scattered straight into the sequence-parallel region.
  bool sp_embedding_scatter() const {
    return vocab_parallel_ && config_.sequence_parallel && config_.positions != Positions::learned;
  }

  TransformerConfig config_;
  TransformerGroups groups_;
  AttentionSetup attention_;
  Stage stage_;
  std::int64_t first_layer_ = 0;
  bool vocab_parallel_ = false;
  tp::Parameter embedding_, position_embedding_, lnf_w_, lnf_b_, out_w_, out_b_;  // first / last stage only
  std::vector<std::unique_ptr<Block>> blocks_;
};

// The contract's name of a block parameter: "layer.<name>" with one layer, else
// "layers.<i>.<name>".
std::string block_parameter_name(const TransformerConfig& config, std::int64_t layer, const std::string& name);

// The local logits of every CP rank put back in global order, real tokens only: [T, vocab] (THD)
// or [B, S, vocab] (BSHD), f32. Collective over cp (an all-gather).
runtime::Tensor gather_logits(const runtime::Tensor& local_logits, const LocalBatch& batch,
                              const runtime::ProcessGroup& cp);

}  // namespace ranksim::models

// Training the reference transformer under a tp x cp x dp x pp layout: micro-batches with
// gradient accumulation, a 1F1B pipeline over send/recv, gradients reduced over DP x CP in
// buckets that start while backward is still running (models/grad_buckets.h), global-norm clipping, AdamW or
// ZeRO-1 (models/adamw.h), and consolidated checkpoints. Every layout trains the same model on
// the same global batch: the loss is the mean cross-entropy over every labelled token of every
// micro-batch on every DP rank, so the gradients are those of one big batch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/adamw.h"
#include "models/transformer.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models {

// Optimizer state at full shape, as a checkpoint holds it: "step" (a 0-d f32) and, for every
// parameter, "exp_avg.<name>" and "exp_avg_sq.<name>" (f32, the parameter's shape).
using CheckpointState = std::map<std::string, runtime::Tensor>;

struct TrainSpec {
  TransformerConfig config;
  AttentionSetup attention;
  // World = tp * cp * dp * pp ranks, Megatron's order tp-cp-dp-pp (tp fastest).
  int tp = 1, cp = 1, dp = 1, pp = 1;
  Weights weights;  // full fp32 weights (seeded_weights or a checkpoint)
  // Optimizer state to resume from (a checkpoint's), keyed like checkpoint_tensors writes it;
  // empty = fresh state.
  CheckpointState optimizer_state;
  Batch batch;  // the global batch, the same at every step
  // Set by a caller that has passed `batch` through check_batch (models/transformer.h) for this
  // spec's config and cp already, once for every rank: train() then does not check it again on
  // each rank (a shape-only step of thousands of ranks would scan the global batch that often).
  bool batch_checked = false;
  // The batch's labelled tokens (labels other than -100), when the caller has counted them once
  // for every rank (labelled_tokens()); -1: each rank counts them (every step divides by them).
  std::int64_t labelled_tokens = -1;
  int steps = 1;          // optimizer steps
  int micro_batches = 1;  // per DP rank; each takes an equal share of its rows / whole sequences
  // Model chunks per pipeline stage: 1 runs Megatron's 1F1B; v > 1 its interleaved schedule
  // (--num-layers-per-virtual-pipeline-stage = layers / (pp * v)): stage r holds chunks r,
  // r + pp, ..., each of layers / (pp * v) blocks. REQUIRES: pp >= 2, layers % (pp * v) == 0
  // (unless the first and last chunks are uneven, below), micro_batches % pp == 0. Default: 1.
  int virtual_stages = 1;
  // Uneven pipeline stages (Megatron's --decoder-first-pipeline-num-layers /
  // --decoder-last-pipeline-num-layers, models/transformer.h Stage): the blocks of the first and
  // of the last stage (-1: the even share); the other stages split the rest evenly. With
  // virtual_stages > 1 they are the first and the last of the pp x v model chunks (pipeline rank
  // 0's first chunk, rank pp - 1's last), as Megatron's --account-for-embedding-in-pipeline-split
  // and --account-for-loss-in-pipeline-split give the embedding and the loss a layer's place
  // there. REQUIRES: pp >= 2. Default: -1 (even).
  std::int64_t first_stage_layers = -1;
  std::int64_t last_stage_layers = -1;
  AdamWOptions optimizer;
  std::optional<double> clip_grad_norm;  // max_norm, PyTorch's rule
  // 0: AdamW on all-reduced gradients; 1: ZeRO-1 over DP x CP (Megatron's distributed optimizer);
  // 3: FSDP over DP x CP (parameters, gradients and optimizer state sharded; each block's
  // parameters all-gathered before its forward and its backward and freed after; its gradients
  // reduce-scattered as the last micro-batch's backward completes them, as Llama 3 was trained).
  // All three give the same numbers.
  int zero = 0;
  // Data-parallel gradient buckets (models/grad_buckets.h: Megatron's --ddp-bucket-size, in
  // elements): the reduction over DP x CP (an all-reduce, or with zero 1 or 3 a reduce-scatter)
  // runs one collective per bucket, started during the last micro-batch's backward as each bucket
  // fills. 0: one bucket per block (and one for the embedding and head parameters); a value above
  // the parameter count: one bucket after backward (--overlap-grad-reduce off). The same numbers
  // whatever the buckets. Default: 0.
  std::int64_t bucket_size = 0;
  // When set, after the last step the ranks with dp = cp = 0 write their shards here, one file
  // per (tp, pp) rank: shard-tp<t>-pp<p>.safetensors (see consolidate_shards).
  std::string shard_dir;
};

struct TrainResult {
  std::vector<double> losses;      // each step's loss, before its update (NaN in shape-only runs)
  std::vector<double> grad_norms;  // each step's total gradient norm (before clipping; 0 if not computed)
  std::vector<std::pair<std::string, runtime::Tensor>> params;  // final weights, full f32, contract order
  // The last step's gradients, summed over the replicas, full f32, in params' order (filled by
  // train_multimodal, models/multimodal.h; empty otherwise).
  std::vector<std::pair<std::string, runtime::Tensor>> grads;
  CheckpointState optimizer_state;  // consolidated (full-shape) state after the last step
  // This rank's virtual time blocked in the pipeline's receives, over all steps: the 1F1B bubble
  // plus the activation transfers (0 with pp = 1).
  double pipeline_wait_seconds = 0;
};

// Inside a rank of a run of tp * cp * dp * pp ranks (every rank calls it). Every rank returns the
// whole result (parameters gathered over TP and broadcast from their pipeline stage).
// Errors (before any step): the world size, layers not divisible by pp, micro-batches or dp not
// dividing the batch, and those of the model.
TrainResult train(const TrainSpec& spec);

// The labels of `batch` other than -100 (TrainSpec::labelled_tokens).
std::int64_t labelled_tokens(const Batch& batch);

// Runs train() on fibers and returns rank 0's result.
TrainResult run_training(const TrainSpec& spec, const runtime::SpawnOptions& options = {},
                         runtime::RunReport* report = nullptr);

// A checkpoint: the consolidated weights under the model's own parameter names, plus the optimizer
// state as "optimizer.step", "optimizer.exp_avg.<name>" and "optimizer.exp_avg_sq.<name>" (which
// model.weights loading skips). Written atomically.
void save_checkpoint(const std::string& path, const TrainResult& result);
// The weights and optimizer state of such a file, checked against the config.
std::pair<Weights, CheckpointState> load_checkpoint(const std::string& path, const TransformerConfig& config);

// The per-rank shard files of a shard_dir, joined offline (no run) into the full weights and
// optimizer state -- Megatron's checkpoint conversion. Each file holds its rank's TP shard of the
// stage's parameters and optimizer state with their partition (dim, stride) in its metadata.
// Errors naming the folder and file: files missing for some (tp, pp) rank, files that disagree on
// the layout, shards of the wrong shape, parameters missing for the config.
std::pair<Weights, CheckpointState> consolidate_shards(const std::string& dir, const TransformerConfig& config);

// The training dump: "losses" (f32 [steps]), "param/<name>" (f32, full shape) and, when the
// result has them, "grad/<name>" (the last step's gradients).
void write_train_dump(const std::string& path, const TrainResult& result);

}  // namespace ranksim::models

// The `model:` workload of a scenario: the reference transformer (models/transformer.h) run for
// one forward and backward step under the scenario's tp x cp x dp layout, with its dump and the
// CP=1 vs CP=N validation framework (models/validation.h). Keys: docs/scenarios.md.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "models/multimodal.h"
#include "models/run.h"
#include "models/train.h"
#include "models/transformer.h"
#include "models/validation.h"

namespace ranksim::app {

// train: several optimizer steps instead of one forward and backward.
struct TrainSettings {
  int steps = 1;
  int micro_batches = 1;
  int virtual_stages = 1;
  // parallel.decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers (Megatron's):
  // the blocks of the first / last pipeline stage; -1 = the even share
  std::int64_t first_stage_layers = -1, last_stage_layers = -1;
  // train.micro_batch_size / train.global_batch_size (Megatron's meanings, in sequences):
  // micro_batches = global / (dp * micro_batch_size); 0 = not given
  int micro_batch_size = 0,
      global_batch_size = 0;  // parallel.virtual_stages: the interleaved pipeline schedule's chunks per stage
  models::AdamWOptions optimizer;
  std::optional<double> clip_grad_norm;
  int zero = 0;
  // train.ddp_bucket_size / overlap_grad_reduce: the DP gradient buckets' elements
  // (models::TrainSpec::bucket_size); set from Megatron's default when the scenario is read
  std::int64_t bucket_size = 0;
  std::string checkpoint;  // train.checkpoint: consolidated weights + optimizer state; empty = none
  std::string shards;      // train.shards: a folder for per-rank shard files; empty = none
};

// encoder: a second model on its own (tp, dp) grid whose outputs replace the transformer's
// embeddings through the colocated bridge (models/multimodal.h).
struct EncoderSettings {
  int tp = 1, dp = 1;            // encoder.{tp, dp}: its grid, tp * dp = the run's ranks
  models::EncoderConfig config;  // encoder.{features, ffn}
};

struct ModelWorkload {
  models::TransformerConfig config;  // model.{vocab, hidden, heads, head_dim, ffn, dtype}
  // model.vocab as given (the tokenizer's: token ids are drawn below it); config.vocab is it
  // padded to a multiple of model.make_vocab_size_divisible_by x tp when that key is given, as
  // Megatron pads it (not given: no padding, and a vocabulary tp does not divide keeps the
  // embedding and output layer replicated over TP)
  std::int64_t tokenizer_vocab = 0;
  std::int64_t vocab_divisible_by = 1;  // model.make_vocab_size_divisible_by
  models::AttentionSetup attention;     // model.{format, mask, window}; parallel.{cp_comm, hierarchical_cp}
  std::string weights;                  // model.weights: a safetensors file; empty = seeded init
  std::uint64_t seed = 42;              // model.seed: the seeded init's seed
  std::string batch;                    // batch: a safetensors file; empty = synthetic
  std::vector<std::int64_t> lengths;    // batch: {lengths: [...]} / {rows, seq_len}; empty = built-in
  std::string dump;                     // dump: output safetensors; empty = none
  bool shape_only = false;              // data: shape_only (timing only: no dump, no validation)
  // validate: a baseline run of the same model and batch, compared with the framework's metrics.
  bool validate = false;
  int baseline_tp = 1, baseline_cp = 1;
  models::ValidationThresholds thresholds;  // for_dtype(dtype), then any keys given
  std::optional<TrainSettings> train;
  std::optional<EncoderSettings> encoder;
  // parallel.order: the transformer grid's dimension order with an encoder. Default tp, cp, dp.
  std::vector<std::string> order = {"tp", "cp", "dp"};
};

// The weights and the global batch, loaded or generated. Errors name the files.
struct ModelInputs {
  models::Weights weights;
  models::CheckpointState optimizer_state;  // from a training checkpoint given as model.weights
  models::Batch batch;
  runtime::Tensor features;  // with an encoder: f32 [rows, seq_len, features] (shape-only if no data)
};
ModelInputs load_model_inputs(const ModelWorkload& m);

// The run spec for a layout.
models::TransformerRunSpec model_spec(const ModelWorkload& m, const ModelInputs& in, int tp, int cp, int dp);

// The training spec for a layout.
models::TrainSpec train_spec(const ModelWorkload& m, const ModelInputs& in, int tp, int cp, int dp, int pp);

// The two-model spec (encoder + transformer) for the transformer's layout.
models::MultimodalSpec multimodal_spec(const ModelWorkload& m, const ModelInputs& in, int tp, int cp, int dp);

// The baseline run (on an ideal topology) and its comparison with the scenario's own dump.
models::ValidationReport validate_against_baseline(const ModelWorkload& m, const ModelInputs& in,
                                                   const models::TransformerDump& run, int dp);

// "tp=1 cp=1" style names of the two layouts, for the printed table.
std::string baseline_name(const ModelWorkload& m);

}  // namespace ranksim::app

// Two models on one world with different layouts: an encoder on its own (tp, dp) grid feeding the
// reference transformer on a (tp, cp, dp) grid through the colocated bridge (models/bridge.h) --
// the multimodal layout (a vision or audio encoder beside a language model on the same GPUs),
// trained end to end.
//
// The encoder is a tensor-parallel two-layer MLP over per-token features, in the language
// model's dtype (parameters, features and activations; AdamW keeps f32 masters):
//   h = fc2(gelu_tanh(fc1(features)))     fc1 [ffn, features] column-parallel over the encoder's
//                                         TP group, fc2 [hidden, ffn] row-parallel (one all-reduce)
// Its output, [batch, seq, hidden] per encoder DP replica, replaces the language model's token
// embeddings (Stage::external_embeddings: the language model has no embedding.weight). Parameters:
//   encoder.fc1.{weight [ffn, features], bias [ffn]}, encoder.fc2.{weight [hidden, ffn],
//   bias [hidden]}, then the transformer's (models/transformer.h) without embedding.weight.
//
// One step, on every rank of a world of src_tp * src_dp = tp * cp * dp ranks:
//   1. the encoder runs on its DP replica's rows of the global batch (rows split evenly over
//      src_dp, in order);
//   2. bridge forward: fan-in gathers, fan-out narrows (or identity) to the language model's DP
//      replica's rows (rows split evenly over dp, in order -- the same global order);
//   3. the language model shards the sequence over CP (DualChunkSwap), runs forward, the loss
//      (mean cross-entropy over every labelled token of the global batch: token counts and sums
//      over the destination's DP x CP group) and backward, which returns the gradient of its
//      local input rows; scattered into a zero [rows, seq, hidden] tensor (zero outside this CP
//      rank's chunks), it goes through the bridge's backward: CP sum, then narrow (fan-in) or
//      all-gather (fan-out);
//   4. encoder backward; encoder gradients summed over the encoder's DP group, the language
//      model's over DP x CP; one AdamW step on each (models/adamw.h).
// Every layout trains the same two models on the same global batch, so the weights after a step
// equal those of any other layout to fp32 rounding (tests/models/multimodal_test.cpp).
//
// Groups created, in this order on every rank: the encoder's tp and dp groups, the language
// model's tp, cp, and cp x dp groups, the bridge's fan-in or fan-out groups (named
// "bridge.fan_in" / "bridge.fan_out" in traces), the attention subgroups of a2a+p2p.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/adamw.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models {

struct EncoderConfig {
  std::int64_t features = 32;  // per-token input features. Default: 32
  std::int64_t ffn = 128;      // hidden units. Default: 128. REQUIRES: divisible by the encoder's tp
};

// The encoder's parameter names and full shapes (hidden from the language model's config), then
// the language model's without embedding.weight: every parameter of the pair, in order.
std::vector<std::pair<std::string, runtime::Shape>> multimodal_parameter_shapes(const TransformerConfig& config,
                                                                                const EncoderConfig& encoder);
// Seeded init: the encoder's Linear layers uniform(-1/sqrt(in), 1/sqrt(in)) (torch's default),
// the language model's as seeded_weights(config, seed). Depends only on the arguments.
Weights seeded_multimodal_weights(const TransformerConfig& config, const EncoderConfig& encoder, std::uint64_t seed);

struct MultimodalBatch {
  Batch tokens;              // BSHD: input_ids (unused by the model) and labels, i64 [B, S]
  runtime::Tensor features;  // f32 [B, S, features]
};
// A learnable synthetic batch: B rows of S tokens from synthetic_batch(bshd), and for each token
// the features of its id (a fixed normal codebook [vocab, features] drawn from seed) plus
// normal(0, 0.1) noise. Labels are the next token of the row.
MultimodalBatch synthetic_multimodal_batch(const TransformerConfig& config, const EncoderConfig& encoder,
                                           std::int64_t rows, std::int64_t seq_len, std::uint64_t seed);

struct MultimodalSpec {
  TransformerConfig config;  // the language model
  EncoderConfig encoder;
  AttentionSetup attention;    // format must be bshd (the bridge is batch-major)
  int src_tp = 1, src_dp = 1;  // the encoder's grid: dims tp, dp (tp fastest)
  int tp = 1, cp = 1, dp = 1;  // the language model's grid
  // The language model grid's dimension order, fastest first: a permutation of tp, cp, dp.
  // Default: {"tp", "cp", "dp"} (Megatron's). One with dp before cp is rejected by the bridge.
  std::vector<std::string> order = {"tp", "cp", "dp"};
  Weights weights;  // every parameter of multimodal_parameter_shapes, full f32
  MultimodalBatch batch;
  int steps = 1;
  AdamWOptions optimizer;
};

// Errors (before any step) naming the values: world sizes that disagree with each other or with
// the run, a non-BSHD format, rows not divisible by src_dp or dp, a sequence length not a
// multiple of 2 cp, features of the wrong shape, the encoder ffn not divisible by src_tp, and those
// of the bridge (a source cp, dp before cp, dp sizes that are not multiples) and of the models.
void check_multimodal(const MultimodalSpec& spec, int world_size);

// Inside a rank of a run of src_tp * src_dp ranks (every rank calls it). Returns the losses (each
// step's, before its update) and the final weights, full f32 in multimodal_parameter_shapes'
// order, on every rank.
TrainResult train_multimodal(const MultimodalSpec& spec);

// Runs train_multimodal on fibers and returns rank 0's result.
TrainResult run_multimodal(const MultimodalSpec& spec, const runtime::SpawnOptions& options = {},
                           runtime::RunReport* report = nullptr);

}  // namespace ranksim::models

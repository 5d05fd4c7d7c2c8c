// Running the reference transformer under a tp x cp layout: one training step's forward and
// backward, and what the CP validation framework compares -- the logits of the real tokens in
// global order, the loss, and the full gradient of every parameter.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/transformer.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models {

struct TransformerRunSpec {
  TransformerConfig config;
  AttentionSetup attention;
  // The world is tp * cp * dp ranks in Megatron's order tp-cp-dp (tp fastest). DP ranks take
  // equal shares of the batch (dp_slice); the loss and gradients are over DP x CP.
  int tp = 1, cp = 1, dp = 1;
  Weights weights;  // full fp32 weights (seeded_weights, or a checkpoint)
  Batch batch;      // the global batch (checked with check_batch before the run)
};

// What a step produced, gathered to full shape. Every tensor is f32.
struct TransformerDump {
  runtime::Tensor logits;   // real tokens, global order: [T, vocab] (THD) or [B, S, vocab] (BSHD)
  double loss = 0;          // mean cross-entropy over the labelled tokens
  std::int64_t tokens = 0;  // labelled tokens
  std::vector<std::pair<std::string, runtime::Tensor>> grads;  // contract order, full shapes
};

// Inside a rank of a run of tp * cp * dp ranks (every rank calls it): builds the groups
// (tp::initialize_model_parallel(tp, 1, cp); a2a+p2p subgroups of [a2a, p2p] or the default
// [2, cp/2]), the model, runs forward and backward on this rank's share of the batch, sums the
// gradients over DP x CP and gathers logits (over CP, then DP) and gradients (over TP). Every rank
// returns the whole dump. Shape-only weights give a timing run (the dump's numbers are NaN or
// shape-only). Errors: the world size is not tp * cp * dp; as Transformer, check_batch, dp_slice.
TransformerDump transformer_step(const TransformerRunSpec& spec);

// Runs transformer_step on tp * cp * dp fibers and returns rank 0's dump. report, when
// given, receives the run's timing report.
TransformerDump run_transformer(const TransformerRunSpec& spec, const runtime::SpawnOptions& options = {},
                                runtime::RunReport* report = nullptr);

// The dump as safetensors: "logits", "loss" (a 0-d f32), "grad/<name>" for every parameter;
// written atomically (complete or absent).
void write_dump(const std::string& path, const TransformerDump& dump);

}  // namespace ranksim::models

// `--megatron-args`: a scenario built from Megatron-LM's own command line (pretrain_gpt.py's
// arguments), so that a launch script's model, layout and batch can be timed without rewriting
// them as a scenario file (docs/scenarios.md, "Megatron-LM arguments").
//
// Each argument is one of:
// - mapped: it becomes a scenario key (--num-layers -> model.layers, --tensor-model-parallel-size
//   -> parallel.tp, ...), with Megatron's defaults where it is absent (learned positions,
//   LayerNorm, GeLU, biases, ffn = 4h or the SwiGLU rule, tied embeddings, vocabulary padded to
//   a multiple of 128 x tp, one gradient bucket without --overlap-grad-reduce);
// - ignored: it changes neither timing nor memory (logging, data paths, checkpoints, the learning
//   rate schedule, ...); such arguments are accepted and listed;
// - approximated: Megatron does something ranksim times differently; accepted, and listed with
//   what ranksim does instead;
// - refused: a feature ranksim does not model (Mixture-of-Experts, MLA, ...), or an argument it
//   does not know; an Error naming the argument.
// The scenario is a YAML document whose keys carry the arguments they came from as comments; it
// is loaded by the ordinary scenario loader, and an error the loader finds in it is reported
// against those arguments.
#pragma once

#include <string>
#include <vector>

#include "app/scenario.h"

namespace ranksim::app {

// The scenario document built from a Megatron-LM command line.
struct MegatronScenario {
  std::string yaml;                       // the scenario, each key commented with its argument(s)
  std::vector<std::string> line_args;     // per line of yaml (0-based): the arguments it came from
  std::vector<std::string> ignored;       // accepted, no effect on timing or memory: "--lr 3e-4"
  std::vector<std::string> approximated;  // accepted; what ranksim does instead
};

// Splits a Megatron-LM command line into its tokens: whitespace separates them, '...' and "..."
// quote, a backslash at the end of a line continues it, `#` to the end of a line is a comment.
std::vector<std::string> split_megatron_args(const std::string& text);

// The text of --megatron-args: the value itself, or with a leading '@' the contents of that file.
// Throws Error when the file cannot be read.
std::string megatron_args_text(const std::string& value);

// Builds the scenario: `args` as split_megatron_args reads it, the topology file (as given) and
// the run's world size (every device of the topology, unless a --set ranks=N changes it).
// Throws Error naming the argument for an unknown, refused, duplicated-in-conflict or malformed
// argument, and for a required one missing (--num-layers, --hidden-size,
// --num-attention-heads, --seq-length, --vocab-size).
MegatronScenario megatron_scenario(const std::string& args, const std::string& topology, int world_size);

// megatron_scenario, then load_scenario_text on it with `sets` (scenario keys, or topology keys
// with or without `topology.` in front: --set nodes=8). A ConfigError inside the built document
// is rethrown as an Error naming the Megatron arguments of the key it concerns.
Scenario load_megatron_scenario(const std::string& args, const std::string& topology,
                                const std::vector<std::string>& sets, MegatronScenario* built = nullptr);

}  // namespace ranksim::app

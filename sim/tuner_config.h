// TunerConfig: a tuner plugin's choices, as the CSV file that NCCL's example tuner plugin reads
// (plugins/tuner/example in NVIDIA/nccl, named by NCCL_TUNER_CONFIG_FILE). A tuner plugin sets a
// collective's algorithm and protocol in place of NCCL's cost model; the topology's
// `collectives.tuner` names such a file, and the nccl collective model then chooses as NCCL with
// that plugin loaded would (docs/collective-timing.md, "Tuner plugins").
//
// One rule per line, `#` comments and blank lines ignored:
//
//   collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]
//
//   collective_type  allreduce, allgather, reducescatter, broadcast, reduce
//   min_bytes..      the call's size as NCCL gives its tuner, inclusive: the nccl-tests size (the
//   max_bytes        whole gathered buffer for allgather, the whole input for reducescatter)
//   algorithm        ring, tree, nvls, nvls_tree, pat, collnet_direct, collnet_chain (ranksim's
//                    collnet stands for both)
//   protocol         ll, ll128, simple
//   channels         the call's channels, or -1 for the model's own count
//   nNodes, nRanks   the group's node and rank counts the rule applies to, or -1 for any
//   numPipeOps       collectives grouped into one launch (-1: any). ranksim issues each alone: 1
//   regBuff          registered user buffers, 1, or not, 0 (-1: either). ranksim's are not: 0
//
// As the plugin does, the first rule that applies to a call and whose algorithm and protocol can
// serve it (and are allowed by a forced NCCL_ALGO / NCCL_PROTO) decides; a rule whose pair cannot
// serve the call is passed over; with none, NCCL's cost model chooses. Unlike the plugin, which
// skips a line it cannot read, ranksim refuses the file, naming the line and the field.
#pragma once

#include <string>
#include <vector>

#include "sim/collective_shape.h"

namespace ranksim::sim {

struct TunerRule {
  CollOp op = CollOp::all_reduce;
  double min_bytes = 0;  // inclusive
  double max_bytes = 0;  // inclusive
  CollAlgo algorithm = CollAlgo::ring;
  Protocol protocol = Protocol::simple;
  int channels = -1;              // -1: the model's count
  int nodes = -1;                 // -1: any
  int ranks = -1;                 // -1: any
  bool ranksim_can_match = true;  // false when numPipeOps or regBuff asks for what ranksim never issues
  int line = 0;                   // in the file, for messages
  bool applies_to(const CollectiveShape& s) const;
};

struct TunerConfig {
  std::string source;  // the file, as named
  std::vector<TunerRule> rules;
};

// Parses the CSV text; `source` names it in errors (ConfigError at line and column).
TunerConfig parse_tuner_config(const std::string& text, const std::string& source);
TunerConfig load_tuner_config(const std::string& path);

}  // namespace ranksim::sim

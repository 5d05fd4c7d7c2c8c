// The shape of one collective call as NCCL's cost model sees it, and the names of NCCL's
// algorithms and protocols: the vocabulary sim/collective_model.h times and sim/tuner_config.h
// chooses with (apart from the topology, so that a topology can carry a tuner config).
#pragma once

#include <cstdint>

namespace ranksim::sim {

enum class CollOp : uint8_t { all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter };
enum class CollAlgo : uint8_t { ring, tree, nvls, nvls_tree, collnet, pat, direct };
enum class Protocol : uint8_t { ll, ll128, simple };

const char* to_string(CollAlgo a);  // "ring", "tree", "nvls", "nvls_tree", "collnet", "pat", "direct"
const char* to_string(Protocol p);  // "LL", "LL128", "Simple"

// A call's shape: what the model needs to know.
struct CollectiveShape {
  CollOp op = CollOp::all_reduce;
  double bytes = 0;        // nccl-tests size (sim/collective_model.h)
  int nranks = 1;          // group size
  int nodes = 1;           // nodes the group spans
  int ranks_per_node = 1;  // most ranks of the group on one node
  // The NICs' bandwidth as a share of the topology's: below 1 where an injected fault degrades
  // a link the call crosses (the slowest channel paces NCCL's call). Default: 1.
  double network_factor = 1;
};

}  // namespace ranksim::sim

// The vocabulary of collective schedules (runtime/distributed/schedule.h): which collective and
// algorithm, the point-to-point moves and steps a schedule is made of, and the request that
// asks for one. The schedule builder (schedule.h) and its building blocks (schedule_blocks.h)
// both speak it; having it here lets the blocks stay below the builder that composes them.
//
// A move copies `count` elements from rank src's working buffer at src_off into rank dst's at
// dst_off, or reduces them into it; a step is a set of moves that happen concurrently (the
// semantics and each collective's buffer layout are in schedule.h). Plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ranksim::runtime {

enum class CollectiveKind : uint8_t {
  all_reduce,
  broadcast,
  reduce,
  all_gather,
  reduce_scatter,
  gather,
  scatter,
  all_to_all,
  barrier
};
// The collective's torch.distributed-style name ("all_reduce", "all_gather", ...), and back: the
// one mapping between names and kinds that the CLI, scenarios and reports share. The parser
// takes exactly the names to_string gives; nullopt for any other.
const char* to_string(CollectiveKind k);
std::optional<CollectiveKind> parse_collective_kind(std::string_view name);

enum class Algorithm : uint8_t {
  automatic,     // chosen by choose_algorithm()
  ring,          // bandwidth-optimal rings; 2(n-1) steps for all-reduce
  tree,          // recursive halving-doubling / binomial trees; O(log n) steps
  direct,        // every pair at once (all-to-all, gather, scatter) or root fan-out/fan-in
  hierarchical,  // intra-node first, then across nodes with one rank per node and local index
  // NCCL's algorithms that only the nccl timing model knows (sim/collective_model.h). They time
  // the call as NCCL would; its data moves by the schedule choose_algorithm() picks.
  nvls,       // NVLink SHARP: reduction inside the NVSwitch
  nvls_tree,  // NVLS within nodes, trees between them
  collnet,    // in-network reduction (SHARP)
  pat,        // NCCL's PAT all_gather / reduce_scatter, one rank per node
};
// True for the algorithms above that have no schedule of their own.
bool timing_only(Algorithm a);
const char* to_string(Algorithm a);
// Parses "auto", "ring", "tree", "direct", "hierarchical", "nvls", "nvls_tree", "collnet", "pat";
// throws ranksim::Error otherwise.
Algorithm parse_algorithm(std::string_view name);

struct Move {
  int src = 0;  // group-local rank indices
  int dst = 0;
  int64_t src_off = 0;
  int64_t dst_off = 0;
  int64_t count = 0;
  bool reduce = false;
};

struct Step {
  std::vector<Move> moves;
};

struct ScheduleRequest {
  CollectiveKind kind = CollectiveKind::all_reduce;
  Algorithm algorithm = Algorithm::ring;
  int nranks = 1;
  int64_t count = 0;  // per-rank element count (see schedule.h's table); unused for all_to_all
  int root = 0;       // group-local root for broadcast, reduce, gather, scatter
  // hierarchical: node of each group rank (same number of ranks on each node, in the same
  // local order). Empty = one node.
  std::vector<int> node_of;
  // all_to_all: split_sizes[i][j] = elements rank i sends to rank j (so rank j receives it).
  std::vector<std::vector<int64_t>> splits;
};

// Element offset where chunk i of `count` elements split into n near-equal chunks begins:
// floor(i * count / n). Chunk i is [chunk_begin(i), chunk_begin(i+1)).
inline int64_t chunk_begin(int64_t count, int n, int i) {
  // i * count / n without overflow: i * (count % n) < n * n.
  return count / n * i + (count % n) * i / n;
}

}  // namespace ranksim::runtime

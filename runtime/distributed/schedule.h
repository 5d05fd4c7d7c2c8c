// Collective algorithms as schedules: the fixed sequence of point-to-point moves that an
// algorithm makes, independent of dtype, data and backend.
//
// Every rank of a group owns one working buffer of elements (its layout per collective is given
// below). A Schedule is a list of steps; a step is a set of moves that happen concurrently. A
// move copies `count` elements from the source rank's buffer at src_off into the destination
// rank's buffer at dst_off, or reduces them into it (dst = op(dst, src)). Within a step every
// move reads the buffers as they were before the step (the interpreter stages reads first), and
// moves into the same destination range apply in list order. The schedule therefore fixes the
// order of every reduction: executing it twice gives the same bits, on any backend — the sim
// backend interprets it in memory and times its steps on the network model, the MPI backend
// sends the same moves as messages.
//
// Working buffer per rank (n = group size, c = `count`, the per-rank element count the
// torch.distributed call names):
//   all_reduce      c           (in place)
//   broadcast       c           (in place; root's content ends everywhere)
//   reduce          c           (in place; result on root, other ranks' buffers are scratch)
//   all_gather      n*c         (rank i's input at [i*c, (i+1)*c); output is the whole buffer)
//   reduce_scatter  n*c         (input; rank i's result ends at [i*c, (i+1)*c))
//   gather          n*c         (rank i's input at i*c; output on root)
//   scatter         n*c         (root's input; rank i's piece ends at i*c)
//   all_to_all      in + out    (input then output regions; uneven splits allowed)
//   barrier         0           (moves of zero elements: latency only)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ranksim::runtime {

enum class CollectiveKind : uint8_t {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, gather, scatter, all_to_all, barrier
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
};
const char* to_string(Algorithm a);
// Parses "auto", "ring", "tree", "direct", "hierarchical"; throws ranksim::Error otherwise.
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

struct Schedule {
  CollectiveKind kind = CollectiveKind::barrier;
  Algorithm algorithm = Algorithm::ring;
  int nranks = 1;
  int64_t buffer_elems = 0;       // working buffer size per rank (all_to_all: largest in+out)
  std::vector<Step> steps;
  int64_t moved_elems() const;  // sum of move counts (a rough size of the traffic)
};

struct ScheduleRequest {
  CollectiveKind kind = CollectiveKind::all_reduce;
  Algorithm algorithm = Algorithm::ring;
  int nranks = 1;
  int64_t count = 0;  // per-rank element count (see the table above); unused for all_to_all
  int root = 0;       // group-local root for broadcast, reduce, gather, scatter
  // hierarchical: node of each group rank (same number of ranks on each node, in the same
  // local order). Empty = one node.
  std::vector<int> node_of;
  // all_to_all: split_sizes[i][j] = elements rank i sends to rank j (so rank j receives it).
  std::vector<std::vector<int64_t>> splits;
};

// Builds the schedule; throws ranksim::Error when the algorithm cannot serve the request (for
// example hierarchical with unequal ranks per node), naming what to change.
Schedule make_schedule(const ScheduleRequest& req);

// The default algorithm for a collective of `bytes` per rank on n ranks spread over `nodes`
// nodes: tree for small messages (latency-bound) and for very large groups, ring for large
// messages within a node, hierarchical for large messages across several nodes with equal ranks
// per node, direct for all-to-all, gather and scatter.
Algorithm choose_algorithm(CollectiveKind kind, int nranks, int64_t bytes, int nodes,
                           bool equal_ranks_per_node);

// Element offset where chunk i of `count` elements split into n near-equal chunks begins:
// floor(i * count / n). Chunk i is [chunk_begin(i), chunk_begin(i+1)).
inline int64_t chunk_begin(int64_t count, int n, int i) {
  // i * count / n without overflow: i * (count % n) < n * n.
  return count / n * i + (count % n) * i / n;
}

}  // namespace ranksim::runtime

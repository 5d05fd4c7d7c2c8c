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
//
// The vocabulary shared with the building blocks (runtime/distributed/schedule_blocks.h) --
// CollectiveKind, Algorithm, Move, Step, ScheduleRequest, chunk_begin -- is declared in
// runtime/distributed/schedule_types.h, included here.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/distributed/schedule_types.h"

namespace ranksim::runtime {

struct Schedule {
  CollectiveKind kind = CollectiveKind::barrier;
  Algorithm algorithm = Algorithm::ring;
  int nranks = 1;
  int64_t buffer_elems = 0;  // working buffer size per rank (all_to_all: largest in+out)
  std::vector<Step> steps;
  int64_t moved_elems() const;  // sum of move counts (a rough size of the traffic)
};

// Builds the schedule; throws ranksim::Error when the algorithm cannot serve the request (for
// example hierarchical with unequal ranks per node), naming what to change.
Schedule make_schedule(const ScheduleRequest& req);

// The steps of a ring or hierarchical all_reduce, all_gather or reduce_scatter, one at a time,
// without building the schedule's moves: what timing a call without data needs, in memory linear
// in n (a 16,384-rank ring's schedule holds 5e8 moves; a hierarchical all_gather's moves grow as
// n x nodes). For the rings and the hierarchical all_reduce (exact()), step s equals
// make_schedule(req).steps[s] move for move. For the hierarchical all_gather and reduce_scatter,
// step s moves what the schedule's step s moves between each (src, dst) pair, as one move per
// pair (the elements summed; offsets not the schedule's): all that the network model reads.
class LazySteps {
 public:
  // Whether the request is one of those.
  static bool serves(const ScheduleRequest& req);
  // Whether its steps are the schedule's move for move (else pair for pair).
  static bool exact(const ScheduleRequest& req);
  // REQUIRES: serves(req). Throws Error as make_schedule does (unequal ranks per node).
  explicit LazySteps(const ScheduleRequest& req);
  int size() const { return steps_; }
  // Step s into out (its storage reused). REQUIRES: 0 <= s < size().
  void step(int s, Step& out) const;

 private:
  // One ring: its members in ring order, the range it splits among them, the building blocks'
  // shift, and whether it reduce-scatters, all-gathers, or does both in turn. An exchange is one
  // step in which every member sends every other `count` elements (reducing when scatter).
  struct Ring {
    std::vector<int> members;
    int64_t off, count;
    int shift;
    bool scatter, gather;
    bool exchange = false;
    int steps() const;
  };
  // Rings that run side by side, step for step.
  struct Phase {
    std::vector<Ring> rings;
    int steps = 0;
  };
  std::vector<Phase> phases_;
  int steps_ = 0;
};

// The default algorithm for a collective of `bytes` per rank on n ranks spread over `nodes`
// nodes: tree for small messages (latency-bound) and for very large groups, ring for large
// messages within a node, hierarchical for large messages across several nodes with equal ranks
// per node, direct for all-to-all, gather and scatter.
Algorithm choose_algorithm(CollectiveKind kind, int nranks, int64_t bytes, int nodes, bool equal_ranks_per_node);

}  // namespace ranksim::runtime

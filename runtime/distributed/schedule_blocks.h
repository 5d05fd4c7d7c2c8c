// Building blocks of collective schedules (runtime/distributed/schedule.h): the step sequences
// that the algorithms compose — rings, recursive halving and doubling (Rabenseifner's folding for
// non-powers of two), binomial trees — and the member lists and node layouts they run over.
// schedule.cpp builds each collective's Schedule from these; nothing else uses them.
//
// Members are group-local rank indices in the order an algorithm visits them; a step sequence
// moves ranges of the working buffer between them (offsets and counts in elements). Every
// sequence is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/distributed/schedule_types.h"

namespace ranksim::runtime::blocks {

using Steps = std::vector<Step>;
using Members = std::vector<int>;  // group-local ranks taking part, in algorithm order
// (offset, count) of each member's piece of a buffer range, in member order.
using Pieces = std::vector<std::pair<int64_t, int64_t>>;

// A range of the buffer split among k members: piece j = [off + chunk_begin(j), ...).
struct Split {
  int64_t off;
  int64_t count;
  int k;
  int64_t begin(int j) const { return off + chunk_begin(count, k, j); }
  int64_t size(int j) const { return chunk_begin(count, k, j + 1) - chunk_begin(count, k, j); }
};

// a mod n in [0, n).
int mod(int a, int n);

// Appends a move to st (the second form: same offset on both sides).
void add(Step& st, int src, int dst, int64_t src_off, int64_t dst_off, int64_t count, bool reduce);
void add(Step& st, int src, int dst, int64_t off, int64_t count, bool reduce);

// Runs several independent step sequences side by side: step t of the result holds step t of
// each input (in input order).
Steps zip(const std::vector<Steps>& parts);
// b's steps after a's.
void append(Steps& a, Steps b);

// Ring reduce-scatter of `sp` over m: afterwards member i holds piece (i + shift) mod k reduced
// over all members. shift = 1 is the classic ring; shift = 0 leaves piece i on member i.
Steps ring_reduce_scatter(const Members& m, Split sp, int shift);
// Ring all-gather of `sp` over m, where member i starts with piece (i + shift) mod k.
Steps ring_all_gather(const Members& m, Split sp, int shift);

// Recursive halving reduce-scatter (Rabenseifner) over m with `pieces` (pieces[j] = the buffer
// range that member j must own at the end, contiguous and in member order). Non-powers of two
// fold the first 2r members pairwise first (odd into even); the even member then owns both
// pieces, and hands the odd member its piece at the end.
// unfold = false leaves the odd members' pieces on their even partners (all-reduce continues
// with doubling_all_gather(fold = false), which starts from exactly that state).
Steps halving_reduce_scatter(const Members& m, const Pieces& pieces, bool unfold = true);
// Recursive doubling all-gather over m, where member j starts with pieces[j]; the mirror image
// of halving_reduce_scatter (folded odd members hand their piece to the even one first and
// receive everything at the end).
Steps doubling_all_gather(const Members& m, const Pieces& pieces, bool fold = true);
// The pieces of a Split.
Pieces pieces_of(Split sp);

// Binomial broadcast of [off, off+count) from m[0] to all of m.
Steps binomial_broadcast(const Members& m, int64_t off, int64_t count);
// Binomial reduce of [off, off+count) over m into m[0].
Steps binomial_reduce(const Members& m, int64_t off, int64_t count);

// Members rotated so that the root comes first (relative ranks).
Members rotated(int n, int root);
// 0, 1, ..., n-1.
Members iota_members(int n);

// Node layout for hierarchical algorithms: nodes[j] = group ranks on the j-th node (in order of
// first appearance), all of the same size L. Throws Error when the nodes hold different numbers
// of the group's ranks.
std::vector<Members> node_layout(const ScheduleRequest& req);

}  // namespace ranksim::runtime::blocks

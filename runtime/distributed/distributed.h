// torch.distributed for ranks on fibers: process groups, collectives, point-to-point, Work.
//
// Names, arguments and semantics follow torch.distributed (c10d): every collective takes an
// options struct whose fields all have defaults, and returns a Work. With async_op = false
// (the default) the call returns when this rank's part is complete (its virtual clock has moved
// to the completion time) and the returned Work is already completed; with async_op = true it
// returns at once, and the output tensors carry a pending write, so reading them (or passing
// them to an op) first waits for the collective, as CUDA stream semantics would make it. Once
// the Work has been waited (or is_completed() has answered true) that pending write is satisfied:
// the outputs are plain tensors, readable on any rank and after spawn() returns. Read after
// spawn() returns, the output of a collective that matched but was never waited holds its
// result too; that of one that never matched is an Error.
//
// Ranks and groups: ranks are numbered 0..world_size-1 in the run started by spawn()
// (runtime/distributed/spawn.h). `ProcessGroup{}` is the default group (torch's group.WORLD). Arguments that
// name a rank (src, dst, peer) are global ranks, as in torch. Every member of a group must call
// the group's collectives in the same order with matching arguments; the n-th call of a group
// on each member is one collective. A mismatch (another collective, dtype, size, reduce op,
// root or algorithm at the same call number) is an Error naming both ranks and the difference;
// a member that never calls shows up in the deadlock report with the call it is missing.
//
// Buffer contracts (n = group size; sizes in elements, c = tensor.numel()):
//   all_reduce(t)                         in place on t; every rank's t has the same shape.
//   all_gather_into_tensor(out, in)       out.numel() == n * in.numel(); rank i's `in` lands at
//                                         [i*c, (i+1)*c) of out (dim 0 concatenation for
//                                         [n*k, ...] outputs). `in` may be a view of out.
//   reduce_scatter_tensor(out, in)        in.numel() == n * out.numel(); rank i gets chunk i.
//   all_to_all_single(out, in)            split along dim 0: rows input_split_sizes[j] go to
//                                         rank j; rank j's output holds the rows from rank 0,
//                                         1, ... in order; empty split sizes mean equal splits.
//   broadcast(t, src)                     src's t is copied to every rank's t.
//   reduce(t, dst)                        dst's t gets the reduction; other ranks' t unchanged.
//   gather(t, list, dst)                  dst's list[i] gets rank i's t; list ignored elsewhere.
//   scatter(t, list, src)                 rank i's t gets src's list[i].
// Reductions run in the algorithm's fixed order (runtime/distributed/schedule.h), so results are identical
// from run to run and equal on every rank that receives them.
//
// Misuse throws ranksim::Error: a rank outside the group, shapes or split sizes that do not
// fit, mixing shape-only and data tensors in one collective, a send/recv size or dtype mismatch.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/reduce.h"
#include "runtime/distributed/schedule.h"
#include "runtime/tensor/tensor.h"
#include "sim/time.h"

namespace ranksim::runtime {

namespace detail {
struct WorkState;
struct GroupState;
}  // namespace detail

class Work {
 public:
  Work() = default;  // an already-completed no-op
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  // True once the operation has completed at this rank's virtual time. A false answer lets
  // virtual time pass (up to 1 us), as a polling loop would, so that loops terminate.
  bool is_completed() const;
  // Yields until the operation completes; moves the clock to max(own, completion); rethrows the
  // operation's error.
  void wait() const;
  // This rank's completion time. REQUIRES: is_completed() or wait() has returned.
  sim::Time completion_time() const;

 private:
  std::shared_ptr<detail::WorkState> state_;
};

class ProcessGroup {
 public:
  ProcessGroup() = default;  // the default (world) group
  explicit ProcessGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}

  // This rank's index in the group, or -1 when it is not a member.
  int rank() const;
  int size() const;
  const std::vector<int>& ranks() const;  // global ranks, ascending
  const std::string& name() const;        // "world", "group[0,2]"
  bool is_member() const { return rank() >= 0; }
  int group_rank(int global_rank) const;  // -1 when not a member
  int global_rank(int group_rank) const;

  // The algorithm this group's collectives use when a call asks for Algorithm::automatic
  // (a call's explicit choice wins; automatic here falls back to the run's default). The setting
  // is shared by every member's handle. Default: automatic.
  void set_algorithm(Algorithm algorithm) const;
  Algorithm algorithm() const;

  const std::shared_ptr<detail::GroupState>& state() const;

 private:
  std::shared_ptr<detail::GroupState> state_;  // null = world, resolved at use
};

// Common fields. Default for each: world group, synchronous, the run's default algorithm.
struct CollectiveOptions {
  ProcessGroup group;
  bool async_op = false;
  Algorithm algorithm = Algorithm::automatic;
};
struct AllreduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::SUM;
};
struct AllgatherOptions : CollectiveOptions {};
struct ReduceScatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::SUM;
};
struct AllToAllOptions : CollectiveOptions {
  std::vector<int64_t> output_split_sizes;  // rows from each rank; empty = equal
  std::vector<int64_t> input_split_sizes;   // rows to each rank; empty = equal
};
struct BroadcastOptions : CollectiveOptions {
  int src = 0;  // global rank
};
struct ReduceOptions : CollectiveOptions {
  int dst = 0;  // global rank
  ReduceOp op = ReduceOp::SUM;
};
struct GatherOptions : CollectiveOptions {
  int dst = 0;
};
struct ScatterOptions : CollectiveOptions {
  int src = 0;
};
struct BarrierOptions : CollectiveOptions {};
struct P2POptions {
  ProcessGroup group;
  int tag = 0;
};

Work all_reduce(const Tensor& tensor, const AllreduceOptions& opts = {});
Work all_gather_into_tensor(const Tensor& output, const Tensor& input, const AllgatherOptions& opts = {});
Work reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceScatterOptions& opts = {});
Work all_to_all_single(const Tensor& output, const Tensor& input, const AllToAllOptions& opts = {});
Work broadcast(const Tensor& tensor, const BroadcastOptions& opts = {});
Work reduce(const Tensor& tensor, const ReduceOptions& opts = {});
Work gather(const Tensor& tensor, const std::vector<Tensor>& gather_list, const GatherOptions& opts = {});
Work scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list, const ScatterOptions& opts = {});
Work barrier(const BarrierOptions& opts = {});

// Point-to-point. A send matches the next recv posted by dst for the same (group, src, tag), in
// order; both sides must agree on dtype and element count. The transfer starts when both sides
// have posted.
void send(const Tensor& tensor, int dst, const P2POptions& opts = {});
void recv(const Tensor& tensor, int src, const P2POptions& opts = {});
Work isend(const Tensor& tensor, int dst, const P2POptions& opts = {});
Work irecv(const Tensor& tensor, int src, const P2POptions& opts = {});

struct P2POp {
  enum class Kind { isend, irecv };
  P2POp() = default;
  P2POp(Kind kind, Tensor t, int peer_rank, ProcessGroup pg = {}, int message_tag = 0)
      : op(kind), tensor(std::move(t)), peer(peer_rank), group(std::move(pg)), tag(message_tag) {}
  Kind op = Kind::isend;
  Tensor tensor;
  int peer = 0;
  ProcessGroup group;
  int tag = 0;
};
std::vector<Work> batch_isend_irecv(const std::vector<P2POp>& ops);

// Process groups. init_process_group is optional inside spawn (the world exists already);
// backend must name the run's backend there ("sim", "mpi" or "nccl"). A run's backend is chosen
// by the run (SpawnOptions::backend, runtime/distributed/spawn_options.h): outside any run,
// "sim" does nothing and "mpi" or "nccl" is an Error saying so.
void init_process_group(const std::string& backend = "sim");
bool is_initialized();
int get_rank(const ProcessGroup& group = {});
int get_world_size(const ProcessGroup& group = {});
// A group of the given global ranks (sorted, no duplicates). As in torch, every rank may call
// it; ranks outside get a handle with rank() == -1. The k-th creation of the same rank set on
// each rank refers to the same group. group_desc (torch's argument of that name), when given,
// names the group in traces and reports: "<group_desc>[ranks]" instead of "group[ranks]"
// ("<group_desc>#<id>" instead of "world#<id>" for a new group of every rank).
ProcessGroup new_group(const std::vector<int>& ranks, const std::string& group_desc = "");
// The group_desc part of a group's name: "bridge.fan_in" of "bridge.fan_in[0,2]" or of
// "bridge.fan_in#3"; empty for a group made without one ("group[...]", "world", "world#k").
std::string group_desc_of(const std::string& group_name);
// One group per list; every world rank must appear in exactly one list. Returns this rank's
// group and all of them (each named by group_desc as new_group does).
std::pair<ProcessGroup, std::vector<ProcessGroup>> new_subgroups_by_enumeration(
    const std::vector<std::vector<int>>& ranks_per_subgroup, const std::string& group_desc = "");

}  // namespace ranksim::runtime

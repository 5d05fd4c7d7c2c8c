// Heterogeneous grids in one world, and the colocated bridge that carries activations from one to
// another (an encoder on its own TP/DP grid feeding a TP/CP/DP language model on the same ranks).
//
// GridSet: several named tp::RankGrid over one world, each with its own dimension names and order
// and its own cached groups; a rank asks its coordinates in any of them. Owned by a run (or by a
// rank's function), never global.
//
// ColocatedBridge: between a source grid (dims tp, dp; a cp dimension, if any, must have size 1)
// and a destination grid (dims tp, cp, dp, with cp before dp in the dimension order) covering the
// same ranks of the same world. Other dimensions are allowed only with size 1. Every rank holds
// one activation of its source DP replica (identical on the replica's TP ranks) and must produce
// the input of its destination DP replica (the full sequence: the destination shards it for CP
// itself). With S = source dp, D = destination dp:
//   S == D  identity: forward and backward pass batches through (backward still sums over CP).
//   S > D   fan-in, ratio R = S / D: destination replica d is fed by source replicas
//           d*R .. d*R + R-1, and its batch is theirs concatenated in that order.
//   S < D   fan-out, ratio R = D / S: destination replica d takes slice d % R (of R equal
//           slices) of source replica d / R's batch.
// The larger dp must be a multiple of the smaller. Colocation requires every rank's source DP
// replica to be one that feeds (fan-in) or is fed by (fan-out) its destination replica; with dp
// the outermost dimension of both grids (tp-dp and tp-cp-dp) this always holds.
//
// Why cp must come before dp in the destination: then each destination DP replica is one block
// of consecutive ranks holding all of its CP (and TP) ranks, which is exactly the union of the
// source replicas feeding it. With dp before cp a destination replica is spread over strided
// ranks, and the source replicas colocated with it are not the consecutive ones that feed it.
//
// Activations and gradients are batch-major: dim 0 is the batch ([batch, seq, hidden]; any
// trailing dims). Forward:
//   fan-in   all_gather over the fan-in group: one group per (destination dp index, source tp
//            index), holding the R source replicas feeding that destination replica, one rank
//            each. Output [R*batch, ...], slices in source-DP order.
//   fan-out  narrow to this rank's slice: [batch / R, ...]. REQUIRES: batch divisible by R.
// Backward(grad of the destination's input, shaped like forward's output):
//   1. all_reduce(SUM) over the destination CP group. The destination shards the sequence for CP
//      and its backward leaves each CP rank's gradient zero outside its own chunks; the sum
//      restores the full-sequence gradient on every CP rank.
//   2. fan-in: narrow to this rank's source replica's slice. fan-out: all_gather over the fan-out
//      group: one group per (source dp index, destination tp index, cp index), holding the R
//      destination replicas fed by that source replica, so every world rank is in exactly one
//      group; the slices are concatenated in slice order.
// Inputs are never modified; outputs are new tensors. Shape-only tensors run the same
// communication.
//
// Groups: create_groups() creates the fan-in or fan-out groups with
// runtime::new_subgroups_by_enumeration, named "bridge.fan_in" / "bridge.fan_out" in traces, and
// its own copy of the destination's CP groups, "bridge.cp_sum" (so a timeline tells the bridge's
// CP sum from the destination's attention traffic). It must
// run on every rank of the world in the same order relative to other group creations; forward and
// backward call it on first use.
//
// Errors (ranksim::Error, naming both grids): world sizes or rank ranges that differ, a source
// cp > 1, a destination with dp before cp, missing tp/dp, another dimension of size > 1, dp sizes
// not multiples of each other, non-colocated replicas, a batch that does not split.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/rank_grid.h"

namespace ranksim::models {

// Named rank grids over one world of world_size ranks. Grid addresses are stable: references
// returned by add() and grid() stay valid for the GridSet's lifetime.
class GridSet {
 public:
  explicit GridSet(int world_size);

  int world_size() const { return world_size_; }
  // Adds a grid under name. Errors: a repeated name, a grid of another world size.
  tp::RankGrid& add(const std::string& name, tp::RankGrid grid);
  tp::RankGrid& grid(const std::string& name);  // Error for an unknown name
  const tp::RankGrid& grid(const std::string& name) const;
  std::vector<std::string> names() const;  // in insertion order
  // global_rank's coordinates in grid name, by dimension name (empty when the grid does not
  // contain the rank).
  std::map<std::string, int> coords(const std::string& name, int global_rank) const;

 private:
  int world_size_ = 0;
  std::vector<std::pair<std::string, std::unique_ptr<tp::RankGrid>>> grids_;
};

enum class BridgeMode { identity, fan_in, fan_out };
const char* bridge_mode_name(BridgeMode mode);  // "identity", "fan_in", "fan_out"

struct DestCoords {
  int dp = 0;
  int tp = 0;
  int cp = 0;
  bool operator==(const DestCoords&) const = default;
};

class ColocatedBridge {
 public:
  // Validates the pair (see Errors above); no run needed. The grids are referenced, not copied.
  // REQUIRES: both outlive the bridge.
  ColocatedBridge(tp::RankGrid& src, tp::RankGrid& dst);

  BridgeMode mode() const { return mode_; }
  int src_dp() const { return src_dp_; }
  int dst_dp() const { return dst_dp_; }
  int dst_cp() const { return dst_cp_; }
  int ratio() const { return ratio_; }  // R: max(S, D) / min(S, D); 1 for identity

  // Full destination coordinates of every rank of the grids, by global rank.
  const std::map<int, DestCoords>& rank_to_dest_coords() const { return dest_coords_; }
  DestCoords dest_coords(int global_rank) const;  // Error for a rank outside the grids
  int src_dp_index(int global_rank) const;
  int src_tp_index(int global_rank) const;
  // The source DP indices feeding destination replica dst_dp_index, in batch order (R of them for
  // fan-in, one otherwise).
  std::vector<int> feeding_src_dp(int dst_dp_index) const;
  // Where this rank's piece sits: fan-in, the position of its source replica's batch inside its
  // destination replica's; fan-out, the slice of its source replica's batch it takes; identity 0.
  int slice_index(int global_rank) const;

  // Group tables (ascending ranks per group; pure). fan_in_groups() is empty unless fan-in,
  // fan_out_groups() unless fan-out. Ordered by (dst dp, src tp) and (src dp, dst tp, cp).
  std::vector<std::vector<int>> fan_in_groups() const;
  std::vector<std::vector<int>> fan_out_groups() const;
  std::vector<std::vector<int>> cp_groups() const;  // the destination's CP groups

  // Creates the groups (see the header comment). Inside a rank; idempotent.
  void create_groups();
  // This rank's fan-in or fan-out group (the world handle for identity) and destination CP group
  // (the world handle when cp == 1, unused). REQUIRES: create_groups() has run.
  const runtime::ProcessGroup& fan_group() const { return fan_group_; }
  const runtime::ProcessGroup& cp_group() const { return cp_group_; }

  // Inside a rank of the run: see the header comment.
  runtime::Tensor forward(const runtime::Tensor& activation);
  runtime::Tensor backward(const runtime::Tensor& grad);

 private:
  // all_gather over group of this rank's x along dim 0, pieces ordered by slice_index.
  runtime::Tensor gather_by_slice(const runtime::Tensor& x, const runtime::ProcessGroup& group);

  tp::RankGrid* src_;
  tp::RankGrid* dst_;
  BridgeMode mode_ = BridgeMode::identity;
  int src_dp_ = 1, dst_dp_ = 1, dst_cp_ = 1, src_tp_ = 1, dst_tp_ = 1, ratio_ = 1;
  std::map<int, DestCoords> dest_coords_;
  bool groups_created_ = false;
  runtime::ProcessGroup fan_group_;  // fan-in or fan-out group of this rank
  runtime::ProcessGroup cp_group_;   // destination CP group of this rank (when cp > 1)
};

}  // namespace ranksim::models

// RankGrid: ranks laid out on a grid of named dimensions, and the process groups along them.
//
// Megatron's HyperCommGrid / RankGenerator rule: the grid has dimensions (name, size) in a given
// order, and the first dimension varies fastest, so for dims (tp, cp, dp, pp) a rank is
//   rank = offset + tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r)).
// A group over a set of dimensions fixes the coordinates of every other dimension and enumerates
// the chosen ones; its members, in ascending global rank, are also in grid order (first chosen
// dimension fastest), so group rank i is the i-th member of that enumeration.
//
// The grid covers the ranks [rank_offset, rank_offset + size()) of a world. Grids of different
// shapes may share one world (an encoder on its own TP/DP grid beside a language model) by
// covering disjoint ranges.
//
// Creating groups: create_group(dims) calls runtime::new_group for the calling rank's group of
// that kind only. Megatron creates every group of a kind on every rank (torch's new_group is
// collective over the world); ranksim's backends need only the members (the sim backend shares
// one group per rank set; MPI_Comm_create_group and the NCCL communicator are collective over
// the members), and R ranks each creating all G groups is R x G creations: at 16,384 ranks the
// larger part of a shape-only step. It must still run on every rank of the world, in the same
// order for every kind, so that members create a group together. Groups are cached per set of
// dimensions: asking again returns the same group without creating anything. Ranks outside the
// grid get a handle whose is_member() is false.
//
// A RankGrid is a plain value owned by whoever built it (a run, a rank's parallel state); there
// is no global registry. Errors (a layout that does not fit the world, an unknown or repeated
// dimension name) are ranksim::Error naming the numbers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"

namespace ranksim::tp {

struct GridDim {
  std::string name;  // e.g. "tp"; unique within a grid
  int size = 1;      // REQUIRES: >= 1
};

class RankGrid {
 public:
  // A grid that is the whole world: the sizes must multiply to world_size.
  RankGrid(std::vector<GridDim> dims, int world_size);
  // A grid on ranks [rank_offset, rank_offset + product of sizes) of a world of world_size ranks.
  // REQUIRES: that range lies inside the world.
  RankGrid(std::vector<GridDim> dims, int world_size, int rank_offset);

  int size() const { return size_; }  // ranks in the grid
  int world_size() const { return world_size_; }
  int rank_offset() const { return rank_offset_; }
  const std::vector<GridDim>& dims() const { return dims_; }
  bool has_dim(const std::string& name) const;
  int dim_size(const std::string& name) const;  // Error for an unknown name
  // "tp=2 x cp=2 x dp=2 x pp=1": for messages.
  std::string str() const;

  bool contains(int global_rank) const;
  // Coordinates of global_rank, one per dimension in grid order. REQUIRES: contains(global_rank).
  std::vector<int> coords(int global_rank) const;
  int coord(int global_rank, const std::string& name) const;
  // The global rank at the given coordinates (one per dimension, in grid order).
  int rank_at(const std::vector<int>& coords) const;

  // Every group over the named dimensions (any order; duplicates and unknown names are Errors):
  // one list of ascending global ranks per combination of the other dimensions, the lists ordered
  // by those other coordinates (first dimension fastest). Pure: needs no run.
  std::vector<std::vector<int>> group_ranks(const std::vector<std::string>& names) const;
  // The members of global_rank's group over names. REQUIRES: contains(global_rank).
  std::vector<int> group_of(const std::vector<std::string>& names, int global_rank) const;

  // Creates (on first call for this set of names) the calling rank's group over names with
  // runtime::new_group and returns it. Must be called inside a rank of a run, by every rank of the
  // world in the same order (see the header comment).
  runtime::ProcessGroup create_group(const std::vector<std::string>& names);

 private:
  // Indices of names in grid order; Error for unknown or repeated names.
  std::vector<std::size_t> resolve(const std::vector<std::string>& names) const;

  std::vector<GridDim> dims_;
  int world_size_ = 0;
  int rank_offset_ = 0;
  int size_ = 0;
  std::map<std::vector<std::size_t>, runtime::ProcessGroup> groups_;
};

}  // namespace ranksim::tp

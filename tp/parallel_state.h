// Parallel state: Megatron's initialize_model_parallel on a RankGrid, as an object owned by a run.
//
// The dense model's grid has the dimensions tp, cp, ep, dp, pp in the given order (Megatron's
// default "tp-cp-ep-dp-pp"; the first name varies fastest), with ep = 1 and
// dp = world / (tp * pp * cp). For the default order a rank is
//   rank = tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r)).
// Groups (dimensions fixed / enumerated as RankGrid describes):
//   tp      tensor-parallel                     {tp}
//   cp      context-parallel                    {cp}
//   dp      data-parallel                       {dp}
//   dp_cp   gradient reduction (DP x CP)        {cp, dp}
//   tp_cp   TP x CP                             {tp, cp}
//   pp      pipeline                            {pp}
//   mp      model-parallel (Megatron's tp-pp)   {tp, pp}
// World 8, tp2 cp2 dp2: TP [0,1] [2,3] [4,5] [6,7]; CP [0,2] [1,3] [4,6] [5,7]; DP [0,4] [1,5]
// [2,6] [3,7]; DP x CP [0,2,4,6] [1,3,5,7]; TP x CP [0,1,2,3] [4,5,6,7]; PP singletons.
//
// Unlike Megatron's module-level globals, each rank builds its own ParallelState inside its
// function (runtime::spawn), and the state owns its groups: two runs in one process never see
// each other. initialize_model_parallel creates every group above with runtime::new_group, so
// every rank of the world must call it, with the same arguments, at the same point of its program.
//
// Not reproduced: the expert grid (ep > 1, a second generator), hierarchical CP sizes, virtual
// pipeline stages and the embedding groups.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "tp/rank_grid.h"

namespace ranksim::tp {

struct ModelParallelOptions {
  // Dimension order, first fastest: a '-'-separated permutation of some of tp, cp, ep, dp, pp.
  // A missing name of size 1 is appended at the end; a missing name of size > 1 is an Error.
  // Default: "tp-cp-ep-dp-pp" (Megatron's).
  std::string order = "tp-cp-ep-dp-pp";
};

// One of this rank's groups, with its rank and size looked up once.
struct ParallelGroup {
  runtime::ProcessGroup group;
  int rank = 0;            // this rank's index in the group
  int size = 1;            // members
  std::vector<int> ranks;  // global ranks of the members, ascending (= group rank order)
};

// The grid initialize_model_parallel uses, without creating any group (no run needed).
// Errors: sizes < 1, world_size not divisible by tp * pp * cp, a bad order string.
RankGrid model_parallel_grid(int world_size, int tensor_model_parallel_size, int pipeline_model_parallel_size = 1,
                             int context_parallel_size = 1, const ModelParallelOptions& opts = {});

class ParallelState {
 public:
  const RankGrid& grid() const { return grid_; }
  int world_size() const { return grid_.world_size(); }
  int global_rank() const { return global_rank_; }

  const ParallelGroup& tp() const { return tp_; }
  const ParallelGroup& cp() const { return cp_; }
  const ParallelGroup& dp() const { return dp_; }
  const ParallelGroup& dp_cp() const { return dp_cp_; }
  const ParallelGroup& tp_cp() const { return tp_cp_; }
  const ParallelGroup& pp() const { return pp_; }
  const ParallelGroup& mp() const { return mp_; }

  // TransformerEngine's cp_global_ranks: the CP group's members, e.g. [0, 2] (ring peers).
  const std::vector<int>& cp_global_ranks() const { return cp_.ranks; }
  bool is_pipeline_first_stage() const { return pp_.rank == 0; }
  bool is_pipeline_last_stage() const { return pp_.rank == pp_.size - 1; }

 private:
  friend ParallelState initialize_model_parallel(int, int, int, const ModelParallelOptions&);
  explicit ParallelState(RankGrid grid) : grid_(std::move(grid)) {}

  RankGrid grid_;
  int global_rank_ = 0;
  ParallelGroup tp_, cp_, dp_, dp_cp_, tp_cp_, pp_, mp_;
};

// Megatron's initialize_model_parallel(tensor_model_parallel_size, pipeline_model_parallel_size,
// ..., context_parallel_size, order). Call inside a rank of a run, on every rank of the world
// with the same arguments; returns this rank's state. Errors as model_parallel_grid.
ParallelState initialize_model_parallel(int tensor_model_parallel_size, int pipeline_model_parallel_size = 1,
                                        int context_parallel_size = 1, const ModelParallelOptions& opts = {});

}  // namespace ranksim::tp

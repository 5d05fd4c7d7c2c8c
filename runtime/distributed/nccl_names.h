// The runtime's names for what the nccl collective model (sim/collective_model.h) knows: which
// model operation a collective is, and which NCCL algorithm an Algorithm forces. Shared by the sim
// backend, `bench collectives` and `calibrate`, so that the three agree.
#pragma once

#include <optional>

#include "runtime/distributed/schedule_types.h"
#include "sim/collective_model.h"

namespace ranksim::runtime {

// The model's operation for a collective kind; barrier is an all_reduce (of one element, as
// torch.distributed's NCCL barrier).
sim::CollOp nccl_op(CollectiveKind kind);
// True for the collectives NCCL runs as point-to-point (all_to_all, gather, scatter).
bool nccl_point_to_point(CollectiveKind kind);
// The NCCL algorithm an Algorithm forces (NCCL_ALGO): ring, tree, nvls, nvls_tree, collnet and pat
// force theirs; automatic, and ranksim's own direct and hierarchical schedules, force nothing.
std::optional<sim::CollAlgo> nccl_algorithm(Algorithm a);
// The Algorithm that names an NCCL algorithm (direct for point-to-point).
Algorithm from_nccl_algorithm(sim::CollAlgo a);

}  // namespace ranksim::runtime

// The nccl backend's collectives (runtime/distributed/spawn.h, BackendKind::nccl): a DeviceCollectives
// (runtime/distributed/backends/backend.h) that runs every collective with data through NCCL on this
// process's GPU, inside the mpi backend's processes. Built with RANKSIM_WITH_CUDA and
// RANKSIM_WITH_MPI.
//
// - Device: this process's local rank on its node (MPI_COMM_TYPE_SHARED) modulo the node's GPUs.
//   No GPU is an Error carrying the CUDA runtime's reason.
// - Groups: each group's NCCL communicator is made from an id its first member creates and
//   broadcasts over the group's MPI communicator (MPI_Bcast), then ncclCommInitRank.
// - A collective: the rank's tensors (typed per kind, runtime/distributed/backends/request.h) are
//   uploaded, the NCCL call runs on the group's stream, the
//   outputs are downloaded into the tensors. all_reduce, broadcast, reduce, all_gather,
//   reduce_scatter, all_to_all (uneven splits), gather and scatter; AVG is NCCL's ncclAvg
//   (floating dtypes only). The times the mpi backend records include the copies.
// - Not checked (the mpi backend checks them by its headers): that members agree on the
//   collective; NCCL hangs or fails on a mismatch.
#pragma once

#include <memory>

#include "runtime/distributed/backends/device_collectives.h"

namespace ranksim::runtime::gpu {

// This process's NCCL collectives, for SpawnOptions::device_collectives
// (runtime/distributed/spawn_options.h) of a run with BackendKind::nccl: spawn() calls it after
// MPI is initialised. Throws Error when the process has no CUDA device.
std::unique_ptr<detail::DeviceCollectives> nccl_collectives();

}  // namespace ranksim::runtime::gpu

// spawn: run fn(rank) on nprocs ranks of a simulated machine, torch.multiprocessing.spawn style.
//
// Each rank is a fiber of a fresh sim::Engine; the ranks share one SimBackend (runtime/distributed/backends/sim)
// that matches their collectives, moves and reduces the data, and times every operation on the
// topology's network and compute models. Rank r runs on device r of the topology.
//
// When one or more ranks throw, the others are unwound and spawn throws sim::RankFailure, one
// error listing every failing rank with its message (torch.multiprocessing.spawn semantics); a
// deadlock throws sim::DeadlockError listing what each blocked rank waits on.
//
// Under the mpi backend (SpawnOptions::backend, `ranksim run --backend mpi`) the
// program runs as one MPI process per rank, started by `mpirun -np <nprocs>`: spawn runs
// fn(rank) for this process's rank only, on a one-fiber engine, and the collectives execute the
// same schedules over MPI point-to-point, so tensors come out bit-identical to a sim run
// (docs/backends.md). There, an exception in fn prints "rank R: message" on stderr and aborts
// every process of the job (MPI_Abort, exit code 1): no rank is left waiting.
//
// The nccl backend is the mpi backend with the collectives that move data executed by NCCL on
// each process's GPU (runtime/distributed/backends/nccl): processes, groups, point-to-point and reports stay
// MPI's; each group's NCCL communicator is made from an id broadcast over the group's MPI
// communicator. Results match the sim backend to the rounding of NCCL's own reduction order.
// It needs a build with RANKSIM_WITH_CUDA and RANKSIM_WITH_MPI, a GPU per process, and the
// NCCL collectives passed in SpawnOptions::device_collectives.
#pragma once

#include <functional>

#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn_options.h"
#include "sim/topology.h"

namespace ranksim::runtime {

RunReport spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts = {});

// The ideal single-node topology that spawn uses when none is given.
sim::Topology ideal_topology(int devices);

}  // namespace ranksim::runtime

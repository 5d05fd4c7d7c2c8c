// The MPI backend: one process per rank under mpirun; collectives execute ranksim's own
// schedules (runtime/distributed/schedule.h) over MPI point-to-point, so results are bit-identical to the
// sim backend's for the same algorithm.
//
// Entry points: spawn() with SpawnOptions::backend = mpi (runtime/distributed/spawn.h) calls spawn_mpi
// (through runtime/distributed/backends/registry.h); the
// functions in runtime::mpi let a program (the ranksim CLI, a test) ask about the MPI job before
// or after a run. Built only when CMake finds MPI (RANKSIM_WITH_MPI); otherwise every entry
// point throws Error("built without MPI; install with scripts/setup.sh --with-mpi ...").
//
// How a collective runs on rank i (group index) of a group of n:
//   - the group has two communicators made with MPI_Comm_create_group over the members: one for
//     collectives, one for point-to-point (so user tags never meet collective traffic);
//   - the schedule is the sim backend's for the same request (algorithm resolved the same way,
//     from the topology's node layout); all_to_all first exchanges every rank's split sizes;
//   - for each step: for every peer, the moves whose source is i and destination is that peer
//     are packed, in move order, behind a 40-byte header into one message (Isend); one message
//     is received from every peer that is the source of a move into i (Irecv into staging);
//     Waitall; then the moves into i are applied in the schedule's move order, copies with
//     memcpy and reductions with the same reduce kernels (runtime/distributed/reduce.h) as the sim backend.
//   - the header carries the call number and the signature (kind, dtype, count, op, root,
//     algorithm); a receiver that finds a different one, or a message of another size, throws
//     an Error naming both ranks and the difference.
// Collectives complete eagerly, in the call, even with async_op = true (the Work is completed
// when returned). Point-to-point operations are nonblocking MPI requests completed by wait(),
// is_completed(), a read of the received tensor or the end of the run.
//
// Not checked under MPI (the sim backend checks them): a member that never calls a collective or
// a recv with no send hangs the job, as MPI would (mpirun --timeout bounds it); a send and recv of
// the same byte count but different dtypes; messages over 2 GiB are refused with an Error.
#pragma once

#include <functional>

#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn_options.h"
#include "sim/topology.h"

namespace ranksim::runtime {

namespace mpi {
// True when ranksim was built with MPI.
bool available();
// Initialises MPI once per process (MPI_Finalize runs at exit). Throws Error when built without
// MPI.
void init();
// This process's rank and the job's size in MPI_COMM_WORLD (init() first).
int world_rank();
int world_size();
}  // namespace mpi

namespace detail {
// spawn() under the mpi backend, or the nccl backend when opts.backend is nccl (the collectives
// with data run on opts.device_collectives, runtime/distributed/backends/device_collectives.h;
// without one, an Error). REQUIRES: topology has at least nprocs devices.
RunReport spawn_mpi(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts,
                    const sim::Topology& topology);
}  // namespace detail

}  // namespace ranksim::runtime

// spawn: run fn(rank) on nprocs ranks of a simulated machine, torch.multiprocessing.spawn style.
//
// Each rank is a fiber of a fresh sim::Engine; the ranks share one World (runtime/distributed/backends/sim)
// that matches their collectives, moves and reduces the data, and times every operation on the
// topology's network and compute models. Rank r runs on device r of the topology.
//
// When one or more ranks throw, the others are unwound and spawn throws sim::RankFailure, one
// error listing every failing rank with its message (torch.multiprocessing.spawn semantics); a
// deadlock throws sim::DeadlockError listing what each blocked rank waits on.
//
// Under the mpi backend (SpawnOptions::backend, set_backend(), `ranksim run --backend mpi`) the
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
// It needs a build with RANKSIM_WITH_CUDA and RANKSIM_WITH_MPI, and a GPU per process.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/distributed/schedule.h"
#include "sim/engine.h"
#include "sim/time.h"
#include "sim/topology.h"
#include "sim/trace.h"

namespace ranksim::runtime {

enum class BackendKind : uint8_t { sim, mpi, nccl };
const char* to_string(BackendKind backend);
// Parses "sim", "mpi" or "nccl"; throws ranksim::Error otherwise.
BackendKind parse_backend(std::string_view name);

// The backend of the runs spawn() starts in this process when SpawnOptions::backend is not set.
// Choosing "mpi" or "nccl" initialises MPI (throws Error when ranksim was built without it).
// Default: sim.
void set_backend(const std::string& name);
BackendKind default_backend();

struct SpawnOptions {
  // The machine. Default: nullptr, an ideal single node of nprocs devices on a switch (100 GB/s
  // per device each way, 1 us latency, 100 TFLOP/s f32, 1 TB/s memory).
  const sim::Topology* topology = nullptr;
  // Stacks and tracing. Default: 256 KiB stacks, trace on.
  sim::EngineOptions engine;
  // Algorithm for collectives that ask for Algorithm::automatic. Default: automatic, i.e.
  // choose_algorithm() by size, group size and node layout.
  Algorithm algorithm = Algorithm::automatic;
  // Called about once a second of wall time during long runs (see sim::Engine::set_progress).
  std::function<void(const sim::Engine::Progress&)> progress;
  // Where the ranks run. Default: default_backend() (sim unless set_backend() chose mpi).
  std::optional<BackendKind> backend;
};

// One completed collective, as nccl-tests would time it.
struct CollectiveRecord {
  CollectiveKind kind;
  Algorithm algorithm;
  std::string group;
  int group_size = 0;
  uint64_t call = 0;       // call number within the group
  int64_t bytes = 0;       // nccl-tests "size": the per-rank buffer in bytes (see docs)
  int64_t count = 0;       // elements in that buffer
  std::string dtype;
  sim::Time start;         // latest post among the members
  sim::Time end;           // latest completion among the members
};

// For a sim run, every field covers every rank in virtual time. For an mpi run, times are wall
// clock since the run's start: makespan, clocks, compute and comm cover every rank (gathered at
// the end), collectives lists every group's collectives on rank 0 (each recorded by the group's
// first member, with that member's start and end; ordered by start) and, elsewhere, those of
// the groups this process is the first member of, and trace holds every rank's spans on rank 0 and this rank's own elsewhere.
struct RunReport {
  sim::Time makespan;
  std::vector<sim::Time> clocks;  // each rank's final clock
  std::vector<sim::Time> compute; // each rank's time charged to compute ops
  std::vector<sim::Time> comm;    // each rank's time inside blocking communication
  std::vector<CollectiveRecord> collectives;
  sim::Trace trace;
  uint64_t events = 0;
};

RunReport spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts = {});

// The ideal single-node topology that spawn uses when none is given.
sim::Topology ideal_topology(int devices);

}  // namespace ranksim::runtime

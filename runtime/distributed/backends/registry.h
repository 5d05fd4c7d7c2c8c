// The backends a run can choose: one launcher per BackendKind, looked up by spawn()
// (runtime/distributed/spawn.h), so the API layer names no backend implementation.
//
// A launcher runs fn(rank) on nprocs ranks with the run's options and topology and returns the
// run's report; it owns the engine and the backend for the run's duration (nothing outlives it).
// sim: spawn_sim (backends/sim); mpi and nccl: spawn_mpi (backends/mpi), which for nccl runs the
// collectives with data on SpawnOptions::device_collectives.
#pragma once

#include <functional>

#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn_options.h"
#include "sim/topology.h"

namespace ranksim::runtime::detail {

// REQUIRES (of a call): topology has at least nprocs devices.
using Launcher = RunReport (*)(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts,
                               const sim::Topology& topology);

Launcher launcher(BackendKind kind);

}  // namespace ranksim::runtime::detail

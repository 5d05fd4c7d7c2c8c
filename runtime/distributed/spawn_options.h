// How spawn() (runtime/distributed/spawn.h) runs a program: the backend, the machine, the
// engine's settings, the default algorithm, and, for the nccl backend, the device collectives.
//
// Everything a run needs is in its SpawnOptions: nothing is chosen process-wide, so two runs in
// one process (a test comparing sim with mpi) each get exactly what they ask for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/distributed/schedule.h"
#include "sim/collective_model.h"
#include "sim/engine.h"
#include "sim/topology.h"

namespace ranksim::runtime {

enum class BackendKind : uint8_t { sim, mpi, nccl };
const char* to_string(BackendKind backend);
// Parses "sim", "mpi" or "nccl"; throws ranksim::Error otherwise.
BackendKind parse_backend(std::string_view name);

namespace detail {
class DeviceCollectives;  // runtime/distributed/backends/device_collectives.h
}  // namespace detail
// Makes the DeviceCollectives of this process, after MPI is initialised (the nccl backend's:
// runtime::gpu::nccl_collectives, runtime/distributed/backends/nccl/nccl_collectives.h).
using DeviceCollectivesFactory = std::function<std::unique_ptr<detail::DeviceCollectives>()>;

// Faults injected into a run on the sim backend, deterministically, at virtual times (scenario
// key `faults:`, docs/scenarios.md). Other backends refuse a plan that is not empty.
struct FaultPlan {
  // The rank fails (throws sim::InjectedFault) or, with stop, stops for good at `at`
  // (sim::Engine::inject_fault). `what` names the fault in reports.
  struct RankFault {
    int rank = 0;
    sim::Time at;
    bool stop = false;
    std::string what;
  };
  // The rank's kernels take `slowdown` times as long from `from` on (a straggler).
  struct Straggler {
    int rank = 0;
    double slowdown = 1;
    sim::Time from;
  };
  // From `at` on, the network links of a node (node >= 0), or of one rank's NIC (rank >= 0),
  // run at `factor` of their bandwidth; factor 0: they have failed, and every collective or
  // transfer that needs them then fails on each of its ranks with an error naming the fault.
  struct NetworkFault {
    int node = -1;
    int rank = -1;
    double factor = 0;
    sim::Time at;
    std::string what;
  };
  std::vector<RankFault> ranks;
  std::vector<Straggler> stragglers;
  std::vector<NetworkFault> network;
  bool empty() const { return ranks.empty() && stragglers.empty() && network.empty(); }
};

// Throws ranksim::Error when the plan is not empty and the backend is not sim (spawn calls it; a
// command line can call it before starting MPI).
void check_fault_backend(const FaultPlan& plan, BackendKind backend);

struct SpawnOptions {
  // The machine. Default: nullptr, an ideal single node of nprocs devices on a switch (100 GB/s
  // per device each way, 1 us latency, 100 TFLOP/s f32, 1 TB/s memory).
  const sim::Topology* topology = nullptr;
  // Stacks and tracing. Default: 256 KiB stacks, trace on.
  sim::EngineOptions engine;
  // Algorithm for collectives that ask for Algorithm::automatic. Default: automatic, i.e.
  // choose_algorithm() by size, group size and node layout.
  Algorithm algorithm = Algorithm::automatic;
  // The protocol collectives use where the topology times them with the nccl model, as NCCL_PROTO
  // forces it. Default: none, the model picks the fastest per call.
  std::optional<sim::Protocol> protocol;
  // What NCCL_ALGO / NCCL_PROTO lists allow the nccl model's choice (sim/nccl_env.h), where the
  // topology times collectives with it: each call then takes the fastest pair they allow, and
  // one they leave nothing that can serve is an Error. An algorithm a call (or `algorithm`
  // above) asks for, and `protocol`, narrow it further. Default: none, everything allowed.
  std::optional<sim::NcclAllowed> nccl_allowed;
  // Count each rank's device memory (sim backend: RunReport::memory). Off, nothing is counted and
  // RunReport::memory is empty: only for measuring what the counting costs. Default: true.
  bool count_memory = true;
  // Called about once a second of wall time during long runs (see sim::Engine::set_progress).
  std::function<void(const sim::Engine::Progress&)> progress;
  // Where the ranks run. mpi and nccl initialise MPI (an Error when ranksim was built without
  // it). Default: sim.
  BackendKind backend = BackendKind::sim;
  // The nccl backend's collectives on devices; read only when backend is nccl, where it is
  // required (without it spawn() throws an Error saying the nccl backend is not available).
  // Default: none.
  DeviceCollectivesFactory device_collectives;
  // Faults to inject (sim backend only). Default: none.
  FaultPlan faults;
  // Called every 64 Ki events on the sim backend (sim::Engine::set_guard); when it throws, the run
  // stops and spawn() rethrows. Default: none.
  std::function<void()> guard;
};

}  // namespace ranksim::runtime

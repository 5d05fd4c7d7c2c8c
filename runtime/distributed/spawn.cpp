#include "runtime/distributed/spawn.h"

#include <memory>
#include <string>

#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/backends/sim/world.h"
#include "runtime/tensor/cost.h"
#include "sim/error.h"

namespace ranksim::runtime {

sim::Topology ideal_topology(int devices) {
  const std::string yaml =
      "name: ideal\n"
      "nodes: 1\n"
      "device_kinds:\n"
      "  ideal:\n"
      "    peak_flops: {f64: 50 TFLOP/s, f32: 100 TFLOP/s, bf16: 400 TFLOP/s, f16: 400 TFLOP/s}\n"
      "    memory_bandwidth: 1 TB/s\n"
      "    memory: 64 GiB\n"
      "    launch_overhead: 0 us\n"
      "node:\n"
      "  devices: " + std::to_string(devices) + "\n"
      "  kind: ideal\n"
      "  fabric:\n"
      "    type: switch\n"
      "    bandwidth: 100 GB/s\n"
      "    latency: 1 us\n";
  return sim::Topology::parse(yaml, "<ideal topology>");
}

namespace {
BackendKind process_backend = BackendKind::sim;
}  // namespace

const char* to_string(BackendKind backend) {
  return backend == BackendKind::mpi ? "mpi" : backend == BackendKind::nccl ? "nccl" : "sim";
}

BackendKind parse_backend(std::string_view name) {
  if (name == "sim") return BackendKind::sim;
  if (name == "mpi") return BackendKind::mpi;
  if (name == "nccl") return BackendKind::nccl;
  throw Error("unknown backend '" + std::string(name) + "'; use sim, mpi or nccl");
}

void set_backend(const std::string& name) {
  const BackendKind kind = parse_backend(name);
  if (kind != BackendKind::sim) mpi::init();
  process_backend = kind;
}

BackendKind default_backend() { return process_backend; }

RunReport spawn(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts) {
  if (nprocs < 1) throw Error("spawn: nprocs must be at least 1, got " + std::to_string(nprocs));
  std::unique_ptr<sim::Topology> owned;
  const sim::Topology* topo = opts.topology;
  if (topo == nullptr) {
    owned = std::make_unique<sim::Topology>(ideal_topology(nprocs));
    topo = owned.get();
  }
  if (nprocs > topo->num_devices()) {
    throw Error("spawn: " + std::to_string(nprocs) + " ranks need " + std::to_string(nprocs) +
                " devices but topology '" + topo->name() + "' has " +
                std::to_string(topo->num_devices()) +
                "; use fewer ranks or a bigger topology (e.g. --set nodes=N)");
  }
  const BackendKind kind = opts.backend.value_or(process_backend);
  if (kind != BackendKind::sim) return detail::spawn_mpi(fn, nprocs, opts, *topo, kind == BackendKind::nccl);
  sim::Engine engine(opts.engine);
  if (opts.progress) engine.set_progress(opts.progress);
  detail::World world(engine, *topo, opts.algorithm, nprocs);
  {
    ScopedCostSink sink(&world);
    engine.run(nprocs, fn);
  }
  RunReport report = world.take_report();
  report.makespan = engine.makespan();
  report.clocks.resize(static_cast<size_t>(nprocs));
  for (int r = 0; r < nprocs; ++r) report.clocks[static_cast<size_t>(r)] = engine.clock(r);
  report.events = engine.stats().events;
  report.trace = std::move(engine.trace());
  return report;
}

}  // namespace ranksim::runtime

#include "runtime/distributed/spawn.h"

#include <memory>
#include <string>

#include "runtime/distributed/backends/registry.h"
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
      "  devices: " +
      std::to_string(devices) +
      "\n"
      "  kind: ideal\n"
      "  fabric:\n"
      "    type: switch\n"
      "    bandwidth: 100 GB/s\n"
      "    latency: 1 us\n";
  return sim::Topology::parse(yaml, "<ideal topology>");
}

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
                " devices but topology '" + topo->name() + "' has " + std::to_string(topo->num_devices()) +
                "; use fewer ranks or a bigger topology (e.g. --set nodes=N)");
  }
  check_fault_backend(opts.faults, opts.backend);
  for (const FaultPlan::RankFault& f : opts.faults.ranks)
    if (f.rank < 0 || f.rank >= nprocs)
      throw Error("spawn: an injected fault names rank " + std::to_string(f.rank) + " of a run of " +
                  std::to_string(nprocs) + " ranks");
  return detail::launcher(opts.backend)(fn, nprocs, opts, *topo);
}

}  // namespace ranksim::runtime

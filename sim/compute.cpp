#include "sim/compute.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "sim/check.h"
#include "sim/error.h"

namespace ranksim::sim {

ComputeModel::ComputeModel(const Topology& topology) : topology_(&topology) {}

double ComputeModel::peak_flops(int device, std::string_view dtype) const {
  const DeviceKind& kind = topology_->kind_of(device);
  const auto it = kind.peak_flops.find(dtype);
  if (it != kind.peak_flops.end()) return it->second;
  std::string have;
  for (const auto& [name, peak] : kind.peak_flops) have += (have.empty() ? "" : ", ") + name;
  throw Error("device kind '" + kind.name + "' (of " + topology_->device(device).name +
              ") has no peak FLOP/s for dtype '" + std::string(dtype) + "'; it has: " + have +
              ". Add it under device_kinds." + kind.name + ".peak_flops in " + topology_->source());
}

namespace {
std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}
}  // namespace

Time ComputeModel::cost(int device, double flops, double bytes, std::string_view dtype) const {
  RANKSIM_CHECK(std::isfinite(flops) && flops >= 0 && std::isfinite(bytes) && bytes >= 0,
                "kernel flops and bytes are finite and non-negative");
  const DeviceKind& kind = topology_->kind_of(device);
  const double memory = bytes / kind.memory_bandwidth;
  const double math = flops > 0 ? flops / peak_flops(device, dtype) : 0.0;
  const double seconds = std::max(math, memory);
  if (!(seconds < 8e6))  // the clock's range, with room to spare
    throw Error("a kernel of " + sci(flops) + " FLOP and " + sci(bytes) + " bytes on " +
                topology_->device(device).name + " would take " + sci(seconds) +
                " s, more than the simulated clock holds (8e6 s); check the sizes and the device's speeds");
  return Time::from_seconds(seconds) + kind.launch_overhead;
}

}  // namespace ranksim::sim

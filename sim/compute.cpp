#include "sim/compute.h"

#include <algorithm>
#include <string>

#include "sim/check.h"
#include "sim/error.h"

namespace ranksim::sim {

Time ComputeModel::cost(int device, double flops, double bytes, std::string_view dtype) const {
  RANKSIM_CHECK(flops >= 0 && bytes >= 0, "negative compute cost");
  const DeviceKind& kind = topology_->kind_of(device);
  double seconds = 0;
  if (flops > 0) {
    const auto it = kind.peak_flops.find(dtype);
    if (it == kind.peak_flops.end()) {
      std::string have;
      for (const auto& [name, rate] : kind.peak_flops) have += (have.empty() ? "" : ", ") + name;
      throw Error("device kind '" + kind.name + "' of topology '" + topology_->name() +
                  "' has no peak_flops for dtype '" + std::string(dtype) + "' (it has: " + have +
                  "); add it under device_kinds." + kind.name + ".peak_flops");
    }
    seconds = flops / it->second;
  }
  if (bytes > 0) seconds = std::max(seconds, bytes / kind.memory_bandwidth);
  return Time::from_seconds(seconds) + kind.launch_overhead;
}

}  // namespace ranksim::sim

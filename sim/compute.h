// ComputeModel: how long a kernel takes on a device, by the roofline.
//
// cost = max(flops / peak[dtype], bytes / memory_bandwidth) + launch_overhead, with the peak
// FLOP/s of the device kind for the dtype the kernel computes in, and bytes the kernel reads plus
// writes. A kernel with no FLOPs (a copy) is bounded by memory bandwidth alone. The result is
// rounded to the nearest picosecond.
//
// A ComputeModel keeps a pointer to its Topology, which must outlive it. Thread-safe (const).
#pragma once

#include <string_view>

#include "sim/time.h"
#include "sim/topology.h"

namespace ranksim::sim {

class ComputeModel {
 public:
  explicit ComputeModel(const Topology& topology) : topology_(&topology) {}

  // REQUIRES: 0 <= device < num_devices(), flops >= 0, bytes >= 0. Throws ranksim::Error when the
  // device kind has no peak for dtype (and flops > 0), naming the kind and the dtypes it has.
  Time cost(int device, double flops, double bytes, std::string_view dtype) const;

 private:
  const Topology* topology_;
};

}  // namespace ranksim::sim

// ComputeModel: how long a kernel takes on a device: by its device kind's measured kernel profile
// (sim/kernel_profile.h, docs/compute.md) where the kind has one, else by the roofline.
//
// The roofline (cost()):
//   cost = max(flops / peak_flops[dtype], bytes / memory_bandwidth) + launch_overhead
//
// With a profile (time()):
//   gemm, attention: max(flops / achieved(shape, dtype), bytes / (memory_bandwidth x efficiency),
//                        launch_overhead)   -- measured kernel times include their launch cost
//   memory-bound:    max(bytes / (memory_bandwidth x efficiency(op)), flops / peak) + launch_overhead
//   other:           the roofline
// A GEMM or attention whose dtype the profile has no entry for is timed by the roofline, and the
// result says so (roofline = true); one outside the measured shapes says so too (outside = true),
// so that a run can name both in its summary.
//
// flops counts floating-point (or integer) operations, a multiply-add being 2; bytes counts what
// the kernel reads plus what it writes. The kernel is limited either by arithmetic or by memory
// traffic, never both at once (the roofline), and every launch pays the kind's fixed overhead.
//
// Errors: a dtype the device kind has no peak for is an Error naming the kind, the device, the
// dtypes it does have and where to add one. When flops is 0 the dtype is not consulted: a copy,
// gather or fill costs bytes / memory_bandwidth whatever its element type, so integer data
// movement works on kinds that list no integer peak.
//
// A ComputeModel keeps a pointer to its Topology, which must outlive it. All methods are const
// and safe to call from several threads.
#pragma once

#include <string_view>

#include "sim/kernel_profile.h"
#include "sim/time.h"
#include "sim/topology.h"

namespace ranksim::sim {

struct KernelTime {
  Time time;
  KernelClass cls = KernelClass::other;
  bool roofline = false;  // timed by the roofline although the kind has a profile
  bool outside = false;   // the profile's edge value stood in for an unmeasured shape
};

class ComputeModel {
 public:
  explicit ComputeModel(const Topology& topology);
  explicit ComputeModel(Topology&&) = delete;  // the topology must outlive the model

  // REQUIRES: 0 <= device < num_devices(); flops and bytes finite and >= 0.
  Time cost(int device, double flops, double bytes, std::string_view dtype) const;

  // The time of one kernel named op (a memory-bound op's efficiency is looked up by this name).
  // REQUIRES: as cost().
  KernelTime time(int device, std::string_view op, const KernelShape& shape, double flops, double bytes,
                  std::string_view dtype) const;

  // Peak FLOP/s of the device for dtype; throws Error as cost() does for an unknown dtype.
  double peak_flops(int device, std::string_view dtype) const;

  const Topology& topology() const { return *topology_; }

 private:
  const Topology* topology_;
};

}  // namespace ranksim::sim

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

namespace {
Time checked_seconds(double seconds, double flops, double bytes, const std::string& device) {
  if (!(seconds < 8e6))  // the clock's range, with room to spare
    throw Error("a kernel of " + sci(flops) + " FLOP and " + sci(bytes) + " bytes on " + device + " would take " +
                sci(seconds) +
                " s, more than the simulated clock holds (8e6 s); check the sizes and the device's speeds");
  return Time::from_seconds(seconds);
}
}  // namespace

Time ComputeModel::cost(int device, double flops, double bytes, std::string_view dtype) const {
  RANKSIM_CHECK(std::isfinite(flops) && flops >= 0 && std::isfinite(bytes) && bytes >= 0,
                "kernel flops and bytes are finite and non-negative");
  const DeviceKind& kind = topology_->kind_of(device);
  const double memory = bytes / kind.memory_bandwidth;
  const double math = flops > 0 ? flops / peak_flops(device, dtype) : 0.0;
  return checked_seconds(std::max(math, memory), flops, bytes, topology_->device(device).name) + kind.launch_overhead;
}

KernelTime ComputeModel::time(int device, std::string_view op, const KernelShape& shape, double flops, double bytes,
                              std::string_view dtype) const {
  RANKSIM_CHECK(std::isfinite(flops) && flops >= 0 && std::isfinite(bytes) && bytes >= 0,
                "kernel flops and bytes are finite and non-negative");
  const DeviceKind& kind = topology_->kind_of(device);
  KernelTime out;
  out.cls = shape.cls;
  const KernelProfile* p = kind.profile.get();
  if (p == nullptr || shape.cls == KernelClass::other) {
    out.time = cost(device, flops, bytes, dtype);
    return out;
  }
  const Time launch = p->launch_overhead.value_or(kind.launch_overhead);
  const std::string& name = topology_->device(device).name;
  if (shape.cls == KernelClass::memory) {
    const double memory = bytes / (kind.memory_bandwidth * p->memory_fraction(op));
    const double math = flops > 0 ? flops / peak_flops(device, dtype) : 0.0;
    out.time = checked_seconds(std::max(math, memory), flops, bytes, name) + launch;
    return out;
  }
  std::optional<KernelProfile::Rate> rate;
  if (shape.cls == KernelClass::attention) {
    rate = p->attention_rate(dtype, shape);
  } else if (!shape.backward) {
    rate = p->gemm_rate(dtype, shape);
  } else {
    // Half the FLOPs in each of the two GEMMs: the combined rate is their harmonic mean.
    KernelShape da = shape, db = shape;
    da.n = shape.k;
    da.k = shape.n;
    db.m = shape.k;
    db.k = shape.m;
    const auto ra = p->gemm_rate(dtype, da), rb = p->gemm_rate(dtype, db);
    if (ra && rb)
      rate = KernelProfile::Rate{2 / (1 / ra->flops_per_second + 1 / rb->flops_per_second), ra->outside || rb->outside};
  }
  if (!rate) {
    out.time = cost(device, flops, bytes, dtype);
    out.roofline = true;
    return out;
  }
  out.outside = rate->outside;
  const double math = flops / rate->flops_per_second;
  const double memory = bytes / (kind.memory_bandwidth * p->memory_efficiency);
  out.time = std::max(checked_seconds(std::max(math, memory), flops, bytes, name), launch);
  return out;
}

}  // namespace ranksim::sim

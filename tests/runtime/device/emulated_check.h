// Checking a device path against the CPU on the emulated device (runtime/device/emulated_device.h):
// run the same code on the CPU and with a fresh emulated device installed, and compare outputs
// bit for bit and cost charges one by one. Shared by the device tests of every layer.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/emulated_device.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::testing {

inline constexpr DType kDeviceDTypes[] = {DType::f32, DType::bf16, DType::f16};

inline Tensor rnd(const Shape& shape, std::uint64_t seed, DType dtype, double lo = -2.0, double hi = 2.0) {
  return Tensor::uniform(shape, seed, lo, hi, dtype);
}

// Records every charge, to check that both paths charge the same.
class Recorder final : public CostSink {
 public:
  void charge(const OpCost& c) override { costs.push_back(c); }
  std::vector<OpCost> costs;
};

// Runs f on the CPU and on a fresh emulated device; its tensors must be equal bit for bit, and
// the charges the same. Returns the device for further checks.
template <class F>
std::shared_ptr<EmulatedDevice> expect_same(const std::string& what, F&& f) {
  Recorder cpu_costs, dev_costs;
  std::vector<Tensor> cpu, dev;
  {
    ScopedCostSink sink(&cpu_costs);
    cpu = f();
  }
  auto device = std::make_shared<EmulatedDevice>();
  {
    ScopedComputeDevice on(device);
    ScopedCostSink sink(&dev_costs);
    dev = f();
  }
  EXPECT_GT(device->stats().ops, 0) << what << ": nothing ran on the device";
  EXPECT_EQ(cpu.size(), dev.size());
  for (std::size_t i = 0; i < cpu.size() && i < dev.size(); ++i) {
    EXPECT_TRUE(dev[i].host_stale()) << what << " output " << i << " is not a device tensor";
    EXPECT_TRUE(bitwise_equal(cpu[i], dev[i]))
        << what << " output " << i << ": " << cpu[i].str() << " vs " << dev[i].str();
  }
  EXPECT_EQ(cpu_costs.costs.size(), dev_costs.costs.size()) << what;
  for (std::size_t i = 0; i < cpu_costs.costs.size() && i < dev_costs.costs.size(); ++i) {
    EXPECT_EQ(std::string(cpu_costs.costs[i].op), std::string(dev_costs.costs[i].op)) << what;
    EXPECT_EQ(cpu_costs.costs[i].flops, dev_costs.costs[i].flops) << what;
    EXPECT_EQ(cpu_costs.costs[i].bytes, dev_costs.costs[i].bytes) << what;
  }
  return device;
}

// run() on the CPU, then again with a fresh emulated device installed.
template <class R>
struct CpuAndDevice {
  R cpu, dev;
  std::shared_ptr<EmulatedDevice> device;
};
template <class F>
auto on_cpu_and_emulated(F&& run) {
  CpuAndDevice<decltype(run())> r;
  r.cpu = run();
  r.device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(r.device);
  r.dev = run();
  return r;
}

}  // namespace ranksim::runtime::testing

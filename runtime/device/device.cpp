#include "runtime/device/device.h"

#include <utility>

namespace ranksim::runtime {

Device::~Device() = default;

namespace {
// Per thread: a run drives all its ranks from one thread and installs its device there.
std::shared_ptr<Device>& installed() {
  thread_local std::shared_ptr<Device> device;
  return device;
}
}  // namespace

Device* compute_device() { return installed().get(); }

ScopedComputeDevice::ScopedComputeDevice(std::shared_ptr<Device> device) : previous_(installed()) {
  installed() = std::move(device);
}
ScopedComputeDevice::~ScopedComputeDevice() { installed() = std::move(previous_); }

}  // namespace ranksim::runtime

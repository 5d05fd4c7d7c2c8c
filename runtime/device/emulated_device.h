// The emulated device: a runtime::Device (runtime/device/device.h) that runs on the CPU.
//
// Its memory is a separate host allocation per storage, reached only through upload and download,
// so a tensor that skips a synchronisation shows stale bytes exactly as it would on a GPU. It runs
// any kernel written under runtime/device/kernel.h's contract -- the ones the CUDA device runs --
// compiled for the host, one item after another with one lane per row; its GEMM is kernel.h's
// GemmKernel. Every sum therefore runs in the CPU loops' order and the results equal the CPU ops'
// bit for bit.
//
// It exists to test the device path -- dispatch, residency, coherence and every kernel -- on
// machines without a GPU, and to count what a run moves between host and device (stats()).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "runtime/device/device.h"

namespace ranksim::runtime {

class EmulatedDevice final : public Device {
 public:
  std::string name() const override { return "emulated"; }
  void* allocate(std::size_t nbytes) override;
  void release(void* p) noexcept override;
  void upload(void* device_dst, const void* host_src, std::size_t nbytes) override;
  void download(void* host_dst, const void* device_src, std::size_t nbytes) override;
  void zero(void* device_p, std::size_t nbytes) override;
  void synchronize() override {}
  void gemm(const GemmArgs& args) override;
  // Any kernel: its run_serial, on the calling thread.
  void launch(const KernelLaunch& l) override { l.run_serial(l.kernel, l.items); }

  // Device memory held by live storages (device copies and device outputs).
  std::size_t bytes_in_use() const { return in_use_; }

 private:
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t in_use_ = 0;
};

}  // namespace ranksim::runtime

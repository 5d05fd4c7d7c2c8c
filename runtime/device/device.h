// Compute devices: where runtime/tensor/ops.h runs when a device is installed.
//
// A Device owns memory and runs the kernels of runtime/device/device_kernels.h and row-major GEMMs.
// Two exist:
//   - the CUDA device (runtime/distributed/backends/nccl/cuda_device.h): GPU memory, the kernels on GPU
//     threads, GEMMs through cuBLAS. The nccl backend installs it in every process.
//   - the emulated device (runtime/device/emulated_device.h): memory of its own on the host and the
//     same kernels run one item after another, GEMMs included. It is how the device path --
//     dispatch, device residency, coherence, every kernel's arithmetic -- is tested on machines
//     without a GPU; its results equal the CPU ops' bit for bit.
//
// Installing: set_compute_device(device) for the process (ScopedComputeDevice for a scope). While
// one is installed, every op of runtime/tensor/ops.h whose inputs hold data of dtype f32, bf16 or f16
// runs on it; f64 ops, integer ops and shape-only ops run as before on the CPU. Shape, dtype and
// index checks, error messages and cost charges are the same on both paths.
//
// Residency. An op's outputs live in device memory: their host bytes are neither allocated nor
// filled until something reads them on the host (Tensor::data(), to_vector(), a collective...),
// which downloads them (runtime/tensor/tensor.h, "Device copies"). An input that lives on the device is
// used in place; one that the host wrote since is uploaded first, and its device copy is kept for
// the next op. Non-contiguous views are gathered on the device.
//
// Errors: ranksim::Error naming the device and the call (out of memory, a failed launch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/device/device_kernels.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime {

// What crossed between host and device, and what ran: for tests, benchmarks and reports.
struct DeviceStats {
  std::int64_t uploads = 0;
  std::int64_t upload_bytes = 0;
  std::int64_t downloads = 0;
  std::int64_t download_bytes = 0;
  std::int64_t kernels = 0;  // launches, GEMMs included
  std::int64_t gemms = 0;
  std::int64_t ops = 0;      // runtime/tensor/ops.h calls run on the device
};

// C[b] [m, n] = op(A[b]) op(B[b]) for b in [0, batch), row-major; A stored [m, k] ([k, m] when
// ta), B [k, n] ([n, k] when tb); batch strides in elements (0: shared by every batch).
struct GemmArgs {
  const void* a;
  const void* b;
  void* c;
  DType dtype;
  std::int64_t batch, m, n, k;
  bool ta, tb;
  std::int64_t stride_a, stride_b, stride_c;
};

// Made with std::make_shared (make_device, make_cuda_device): a tensor's device copy holds a
// reference to its device, so tensors may outlive the last other handle on it.
class Device : public std::enable_shared_from_this<Device> {
 public:
  virtual ~Device();
  virtual std::string name() const = 0;  // "emulated", "cuda:0"

  // Memory. allocate: nbytes of device memory (uninitialised; nullptr for 0 bytes).
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void upload(void* device_dst, const void* host_src, std::size_t nbytes) = 0;
  // Returns when the bytes are on the host, after all work queued before it.
  virtual void download(void* host_dst, const void* device_src, std::size_t nbytes) = 0;
  virtual void zero(void* device_p, std::size_t nbytes) = 0;
  // Waits for the device's queued work.
  virtual void synchronize() = 0;

  virtual void gemm(const GemmArgs& args) = 0;
  // Runs k for every item in [0, n). n == 0 launches nothing.
#define RANKSIM_DEVICE_LAUNCH(K) virtual void launch(const kernels::K& k, std::int64_t n) = 0;
  RANKSIM_DEVICE_KERNELS(RANKSIM_DEVICE_LAUNCH)
#undef RANKSIM_DEVICE_LAUNCH

  DeviceStats& stats() { return stats_; }

 private:
  DeviceStats stats_;
};

// The process's compute device (nullptr: the CPU). Not owned by the caller of compute_device().
void set_compute_device(std::shared_ptr<Device> device);
Device* compute_device();

// A device by the name users give it (`ranksim run --device`): "cpu" (nullptr: no device),
// "emulated" (runtime/device/emulated_device.h) or "gpu" (the CUDA device registered by a build with
// RANKSIM_WITH_CUDA; an Error naming what is missing otherwise). Error for other names.
std::shared_ptr<Device> make_device(const std::string& kind);
// Registers what make_device("gpu") returns (runtime/distributed/backends/nccl/cuda_device.h does).
void set_gpu_device_factory(std::function<std::shared_ptr<Device>()> factory);

class ScopedComputeDevice {
 public:
  explicit ScopedComputeDevice(std::shared_ptr<Device> device);
  ~ScopedComputeDevice();
  ScopedComputeDevice(const ScopedComputeDevice&) = delete;
  ScopedComputeDevice& operator=(const ScopedComputeDevice&) = delete;

 private:
  std::shared_ptr<Device> previous_;
};

// --- Residency helpers (for ops and collectives that run on a device) -------------------------

// True when t's storage has an up-to-date copy on device (nothing the host wrote since).
bool resident_on(const Device& device, const Tensor& t);
// The device address of t's first element, uploading the storage first if the device copy is
// missing or stale. REQUIRES: t has data.
const void* device_pointer(Device& device, const Tensor& t);
// A new tensor of shape and dtype whose bytes live on device; *ptr receives their address. The
// caller's kernels fill them; the host reads them by downloading.
Tensor device_tensor(Device& device, const Shape& shape, DType dtype, void** ptr);
// After writing t's device copy in place (a device collective): the host's bytes are stale.
// REQUIRES: resident_on(device, t) before the write.
void mark_device_written(Device& device, const Tensor& t);

}  // namespace ranksim::runtime

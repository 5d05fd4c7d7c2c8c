// Compute devices: memory, copies, GEMM, and one generic way to launch a kernel.
//
// A Device owns memory and runs kernels written under runtime/device/kernel.h's contract, plus
// row-major GEMMs. It knows nothing of tensors or of the layers whose kernels it runs: each layer
// keeps its kernels beside its math (the ops' in runtime/tensor/ops_kernels.h, each layer above
// the runtime in its own folder) and launches them with runtime::launch(device, kernel, n). Two devices exist:
//   - the CUDA device (runtime/device/cuda/cuda_device.h): GPU memory, kernels on GPU threads,
//     GEMMs through cuBLAS. It runs the kernels registered in the table it is made with (each
//     layer's cuda_kernels.h adds its own), and names a kernel missing from it.
//   - the emulated device (runtime/device/emulated_device.h): memory of its own on the host, and
//     every kernel run one item after another on the CPU, GEMMs included. It is how the device
//     path -- dispatch, residency, coherence, every kernel's arithmetic -- is tested on machines
//     without a GPU; its results equal the CPU ops' bit for bit.
//
// Tensors on a device (device copies, outputs that live in device memory, when the host reads
// them) are runtime/tensor/device_tensors.h's business.
//
// Installing: ScopedComputeDevice makes a device the calling thread's compute device for a
// scope; a run installs its device on the thread that drives its ranks and restores the previous
// one when it ends, so two runs on two threads never see each other's device. While one is
// installed, the ops of runtime/tensor/ops.h whose inputs hold f32, bf16 or f16 data run on it.
//
// Errors: ranksim::Error naming the device and the call (out of memory, a failed launch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <typeindex>

#include "runtime/device/dtype.h"
#include "runtime/device/kernel.h"

namespace ranksim::runtime {

// What crossed between host and device, and what ran: for tests, benchmarks and reports.
struct DeviceStats {
  std::int64_t uploads = 0;
  std::int64_t upload_bytes = 0;
  std::int64_t downloads = 0;
  std::int64_t download_bytes = 0;
  std::int64_t kernels = 0;  // launches, GEMMs included
  std::int64_t gemms = 0;
  std::int64_t ops = 0;  // runtime/tensor/ops.h calls run on the device
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

// One kernel launch with its type erased: what runtime::launch hands a Device.
struct KernelLaunch {
  std::type_index type;  // the kernel's type: how a device finds its own launcher for it
  const void* kernel;    // the kernel object (a K)
  std::int64_t items;    // > 0
  // Runs every item on the calling CPU thread, one lane per row (what the emulated device does).
  void (*run_serial)(const void* kernel, std::int64_t items);
};

// Made with std::make_shared (EmulatedDevice, make_cuda_device): a tensor's device copy holds a
// reference to its device, so tensors may outlive the last other handle on it.
class Device : public std::enable_shared_from_this<Device> {
 public:
  virtual ~Device();
  virtual std::string name() const = 0;  // "emulated", "cuda:0"
  // Streaming multiprocessors that run its kernels (a GPU's SM count); 0 when it has none.
  virtual int multiprocessors() const { return 0; }

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
  // Runs launch.kernel for every item in [0, launch.items). Use runtime::launch, which builds it.
  virtual void launch(const KernelLaunch& launch) = 0;

  DeviceStats& stats() { return stats_; }

 private:
  DeviceStats stats_;
};

namespace detail {
template <class K>
void run_serial(const void* kernel, std::int64_t items) {
  const K& k = *static_cast<const K*>(kernel);
  const kernels::SerialLanes lanes;
  for (std::int64_t i = 0; i < items; ++i) k(i, lanes);
}
}  // namespace detail

// Runs k for every item in [0, items) on device, counted in its stats. items <= 0 launches nothing.
template <class K>
void launch(Device& device, const K& k, std::int64_t items) {
  if (items <= 0) return;
  device.launch(KernelLaunch{std::type_index(typeid(K)), &k, items, &detail::run_serial<K>});
  ++device.stats().kernels;
}

// The calling thread's compute device (nullptr: the CPU).
Device* compute_device();

// Installs a device (nullptr: the CPU) as the calling thread's compute device for its lifetime.
class ScopedComputeDevice {
 public:
  explicit ScopedComputeDevice(std::shared_ptr<Device> device);
  ~ScopedComputeDevice();
  ScopedComputeDevice(const ScopedComputeDevice&) = delete;
  ScopedComputeDevice& operator=(const ScopedComputeDevice&) = delete;

 private:
  std::shared_ptr<Device> previous_;
};

}  // namespace ranksim::runtime

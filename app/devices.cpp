#include "app/devices.h"

#include "runtime/device/emulated_device.h"
#include "sim/error.h"
#if RANKSIM_HAVE_CUDA_DEVICE
#include "models/cuda_kernels.h"
#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/cuda_device.h"
#endif

namespace ranksim::app {

namespace {

std::shared_ptr<runtime::Device> make_gpu() {
#if RANKSIM_HAVE_CUDA_DEVICE
  const runtime::gpu::DeviceInfo info = runtime::gpu::device_info();
  if (info.count == 0) {
    throw Error("--device gpu needs a CUDA device, and this machine has none (" + info.reason +
                "); run with --device cpu (or emulated)");
  }
  runtime::gpu::CudaKernels kernels;
  models::add_cuda_kernels(kernels);
  // The one rule for this process's GPU (runtime/device/cuda/cuda.h): the nccl backend's
  // communicators use the compute device's GPU, so both always agree.
  return runtime::gpu::make_cuda_device(runtime::gpu::process_device(runtime::gpu::launcher_local_rank()),
                                        std::move(kernels));
#else
  throw Error(
      "--device gpu: this ranksim was built without the GPU backend (RANKSIM_WITH_CUDA is OFF: "
      "nvcc, the CUDA toolkit or NCCL was not found, or a sanitizer build); use --device cpu or "
      "emulated, or rebuild where CUDA is installed (docs/gpu.md)");
#endif
}

}  // namespace

std::shared_ptr<runtime::Device> make_device(const std::string& kind) {
  if (kind == "cpu") return nullptr;
  if (kind == "emulated") return std::make_shared<runtime::EmulatedDevice>();
  if (kind == "gpu") return make_gpu();
  throw Error("unknown device '" + kind + "': use cpu, emulated or gpu");
}

}  // namespace ranksim::app

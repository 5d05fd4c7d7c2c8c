// Compute devices by the names users give them (`ranksim run --device`), with the kernels of
// every layer the app runs registered on the GPU.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/device/device.h"

namespace ranksim::app {

// "cpu" (nullptr: no device), "emulated" (runtime/device/emulated_device.h) or "gpu" (the CUDA
// device of a build with RANKSIM_WITH_CUDA, with models::add_cuda_kernels' kernels, on the GPU
// that runtime/device/cuda/cuda.h's process_device picks: RANKSIM_GPU, else the process's local
// rank on its node under a launcher modulo the node's GPUs, else 0).
// Errors: an unknown name; "gpu" in a build without CUDA or on a machine without a GPU, saying
// what to use instead.
std::shared_ptr<runtime::Device> make_device(const std::string& kind);

// Fiber stack of a rank in a GPU run (`--device gpu` or `--backend nccl`), with a guard page
// below it: CUDA, cuBLAS and NCCL are called from the ranks' fibers. The GPU tests measure what
// their first calls use (tests/gpu/gpu_gputest.cpp, GpuStacks) and check it fits with room.
inline constexpr std::size_t kGpuFiberStackBytes = std::size_t{8} << 20;

}  // namespace ranksim::app

// The GPU launchers of the models'  device kernels (built with RANKSIM_WITH_CUDA, whose nvcc compiles
// models/cuda_kernels.cu): what a CUDA device (runtime/device/cuda/cuda_device.h) needs to run
// models/*_kernels.h, and those of tp, cp and runtime/tensor it builds on: every kernel the reference models run.
#pragma once

namespace ranksim::runtime::gpu {
class CudaKernels;
}  // namespace ranksim::runtime::gpu

namespace ranksim::models {

// Adds every kernel above to table (idempotent).
void add_cuda_kernels(runtime::gpu::CudaKernels& table);

}  // namespace ranksim::models

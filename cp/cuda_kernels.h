// The GPU launchers of cp's device kernels (built with RANKSIM_WITH_CUDA, whose nvcc compiles
// cp/cuda_kernels.cu): what a CUDA device (runtime/device/cuda/cuda_device.h) needs to run
// cp/attention_kernels.h, and those of runtime/tensor it builds on.
#pragma once

namespace ranksim::runtime::gpu {
class CudaKernels;
}  // namespace ranksim::runtime::gpu

namespace ranksim::cp {

// Adds every kernel above to table (idempotent).
void add_cuda_kernels(runtime::gpu::CudaKernels& table);

}  // namespace ranksim::cp

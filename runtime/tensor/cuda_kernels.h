// The GPU launchers of runtime/tensor's device kernels (built with RANKSIM_WITH_CUDA, whose nvcc compiles
// runtime/tensor/cuda_kernels.cu): what a CUDA device (runtime/device/cuda/cuda_device.h) needs to run
// the ops of runtime/tensor/ops.h (runtime/tensor/ops_kernels.h).
#pragma once

namespace ranksim::runtime::gpu {
class CudaKernels;
}  // namespace ranksim::runtime::gpu

namespace ranksim::runtime {

// Adds every kernel above to table (idempotent).
void add_cuda_kernels(runtime::gpu::CudaKernels& table);

}  // namespace ranksim::runtime

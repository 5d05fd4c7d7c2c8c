// The CUDA compute device (runtime/device/device.h), built with RANKSIM_WITH_CUDA.
//
// - Memory: stream-ordered (cudaMallocAsync / cudaFreeAsync) on the device's own stream, so the
//   buffers of one op's outputs are recycled by the driver's pool, not by cudaMalloc per op.
// - Kernels: the device runs the kernels registered in the CudaKernels table it is made with.
//   Each layer compiles its own kernels with nvcc and adds them to a table in its cuda_kernels.cu
//   (add_cuda_kernels in the layer's namespace; a layer adds those of the layers it builds on
//   too); the strided copy of runtime/device/kernel.h is the device's own. Elementwise kernels run grid-stride, one
//   element per thread; row kernels give each row a warp (32 lanes) that reduces with
//   __shfl_xor_sync; column reductions one thread per column. Results match the CPU ops to f32
//   rounding: the lanes sum in another order than the CPU's one-by-one loop. A kernel missing
//   from the table is an Error naming it.
// - GEMMs: cublasGemmStridedBatchedEx with f32 accumulation (CUBLAS_COMPUTE_32F): bf16 and f16 on
//   tensor cores, f32 in f32 (no TF32). CUBLAS_COMPUTE_32F_PEDANTIC, used before, kept bf16 off the
//   tensor cores: 33 TFLOP/s instead of ~700 on an H100 (benches/device_bench BM_Gemm).
// - Everything runs on one stream in issue order; download() waits for it. Every entry point
//   makes the device's GPU current for its call (ScopedDevice) and restores the caller's.
// - The stream-ordered pool keeps freed memory (release threshold: all), so allocations after a
//   synchronisation are served from the pool, not the driver.
// - RANKSIM_CUDA_LAUNCH_BLOCKING=1 waits after every kernel and GEMM, so a fault names the launch
//   that caused it (kernel name and item count, GEMM shape).
// Errors: ranksim::Error with the CUDA or cuBLAS message (no device, out of memory, a launch).
#pragma once

#include <memory>

#include "runtime/device/cuda/kernel_table.h"
#include "runtime/device/device.h"

namespace ranksim::runtime::gpu {

// The device with CUDA ordinal `ordinal`, running the kernels of `kernels` (Error when the
// device does not exist).
std::shared_ptr<Device> make_cuda_device(int ordinal, CudaKernels kernels);
// The cudaStream_t that d runs on, when d is a CUDA device; nullptr otherwise.
void* cuda_stream_of(const Device& d);
// d's CUDA ordinal when d is a CUDA device; -1 otherwise.
int cuda_ordinal_of(const Device& d);

}  // namespace ranksim::runtime::gpu

// The CUDA compute device (runtime/device/device.h) of the GPU backend, built with RANKSIM_WITH_CUDA.
//
// - Memory: stream-ordered (cudaMallocAsync / cudaFreeAsync) on the device's own stream, so the
//   buffers of one op's outputs are recycled by the driver's pool, not by cudaMalloc per op.
// - Kernels: runtime/device/device_kernels.h compiled by nvcc. Elementwise kernels run grid-stride, one
//   element per thread; row kernels give each row a warp (32 lanes) that reduces with
//   __shfl_xor_sync; column reductions one thread per column. Results match the CPU ops to f32
//   rounding: the lanes sum in another order than the CPU's one-by-one loop.
// - GEMMs: cublasGemmStridedBatchedEx with f32 accumulation and no TF32
//   (CUBLAS_COMPUTE_32F_PEDANTIC).
// - Everything runs on one stream in issue order; download() waits for it.
// Errors: ranksim::Error with the CUDA or cuBLAS message (no device, out of memory, a launch).
#pragma once

#include <memory>

#include "runtime/device/device.h"

namespace ranksim::runtime::gpu {

// The device with CUDA ordinal `ordinal` (Error when it does not exist).
std::shared_ptr<Device> make_cuda_device(int ordinal);
// The cudaStream_t that d runs on, when d is a CUDA device; nullptr otherwise.
void* cuda_stream_of(const Device& d);
// d's CUDA ordinal when d is a CUDA device; -1 otherwise.
int cuda_ordinal_of(const Device& d);
// Registers make_cuda_device for runtime::make_device("gpu") (idempotent). The ordinal is the
// process's local rank on its node (under MPI) modulo the node's GPUs, else 0.
void install_cuda_device();

}  // namespace ranksim::runtime::gpu

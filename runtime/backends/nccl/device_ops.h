// Device compute for the GPU backend (built with RANKSIM_WITH_CUDA): cuBLAS GEMMs and CUDA
// kernels with the semantics of runtime/ops.h, on device buffers.
//
//   Blas::matmul   C [m, n] = op(A) op(B), row-major like runtime::matmul on 2-d tensors:
//                  op(A) is A [m, k] or, with transpose_a, A stored [k, m]; likewise B. f32, bf16
//                  or f16 inputs and output, f32 accumulation without TF32
//                  (CUBLAS_COMPUTE_32F_PEDANTIC), so f32 results differ from the CPU's only by
//                  summation order.
//   gelu           runtime::gelu's tanh approximation, computed in f32 (f32 buffers).
//   gelu_backward  runtime::gelu_backward's formula (f32 buffers).
// Errors (ranksim::Error): buffers of the wrong size or dtype, failed CUDA / cuBLAS calls.
#pragma once

#include <cstdint>

#include "runtime/backends/nccl/cuda.h"

namespace ranksim::runtime::gpu {

class Blas {
 public:
  explicit Blas(const Stream& stream);  // a cuBLAS handle bound to stream, on the current device
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  void matmul(const DeviceBuffer& a, const DeviceBuffer& b, DeviceBuffer& c, std::int64_t m, std::int64_t n,
              std::int64_t k, bool transpose_a = false, bool transpose_b = false);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
};

void gelu(const DeviceBuffer& x, DeviceBuffer& y, const Stream& stream);
void gelu_backward(const DeviceBuffer& dy, const DeviceBuffer& x, DeviceBuffer& dx, const Stream& stream);

}  // namespace ranksim::runtime::gpu

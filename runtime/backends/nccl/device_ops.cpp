#include "runtime/backends/nccl/device_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "sim/error.h"

namespace ranksim::runtime::gpu {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: break;
  }
  throw Error(std::string("GPU matmul: dtype ") + dtype_name(t) + " is not supported (f32, bf16, f16)");
}

}  // namespace

Blas::Blas(const Stream& stream) {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
  check_cublas(cublasSetStream(h, static_cast<cudaStream_t>(stream.handle())), "cublasSetStream");
}

Blas::~Blas() {
  if (handle_ != nullptr) (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void Blas::matmul(const DeviceBuffer& a, const DeviceBuffer& b, DeviceBuffer& c, std::int64_t m, std::int64_t n,
                  std::int64_t k, bool transpose_a, bool transpose_b) {
  if (a.dtype() != b.dtype() || a.dtype() != c.dtype()) {
    throw Error(std::string("GPU matmul: dtypes ") + dtype_name(a.dtype()) + ", " + dtype_name(b.dtype()) + " -> " +
                dtype_name(c.dtype()) + " must be equal");
  }
  if (a.numel() != m * k || b.numel() != k * n || c.numel() != m * n) {
    throw Error("GPU matmul: buffers of " + std::to_string(a.numel()) + ", " + std::to_string(b.numel()) + " and " +
                std::to_string(c.numel()) + " elements do not fit m=" + std::to_string(m) + " n=" + std::to_string(n) +
                " k=" + std::to_string(k));
  }
  const cudaDataType_t t = cuda_type(a.dtype());
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major [r, c]
  // buffer read column-major is its transpose: so pass B first, then A.
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto ldb = static_cast<int>(transpose_b ? k : n);
  const auto lda = static_cast<int>(transpose_a ? m : k);
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(cublasGemmEx(static_cast<cublasHandle_t>(handle_), op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                            static_cast<int>(k), &alpha, b.data(), t, ldb, a.data(), t, lda, &beta, c.data(), t,
                            static_cast<int>(n), CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace ranksim::runtime::gpu

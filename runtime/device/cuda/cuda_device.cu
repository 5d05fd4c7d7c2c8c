// The CUDA device: registered kernels on GPU threads, cuBLAS GEMMs, stream-ordered memory.
#include "runtime/device/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/launch.cuh"
#include "sim/error.h"

namespace ranksim::runtime::gpu {
namespace {

using i64 = std::int64_t;

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      break;
  }
  throw Error(std::string("CUDA device GEMM: dtype ") + dtype_name(t) + " is not supported (f32, bf16, f16)");
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, CudaKernels table) : ordinal_(ordinal), kernels_(std::move(table)) {
    kernels_.add<kernels::CopyKernel>("CopyKernel");  // the device's own
    set_device(ordinal);                              // first: the stream and the cuBLAS handle belong to the device
    stream_ = std::make_unique<Stream>();
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    blas_ = h;
    check_cublas(cublasSetStream(h, stream()), "cublasSetStream");
  }
  ~CudaDevice() override {
    (void)cudaStreamSynchronize(stream());
    (void)cublasDestroy(blas_);
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_->handle()); }

  void* allocate(std::size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    void* p = nullptr;
    check_cuda(cudaMallocAsync(&p, nbytes, stream()),
               ("cudaMallocAsync of " + std::to_string(nbytes) + " bytes on " + name()).c_str());
    return p;
  }
  void release(void* p) noexcept override {
    if (p) (void)cudaFreeAsync(p, stream());
  }
  void upload(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes)
      check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (upload)");
  }
  void download(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync (download)");
    synchronize();
  }
  void zero(void* p, std::size_t nbytes) override {
    if (nbytes) check_cuda(cudaMemsetAsync(p, 0, nbytes, stream()), "cudaMemsetAsync");
  }
  void synchronize() override { check_cuda(cudaStreamSynchronize(stream()), ("kernels on " + name()).c_str()); }

  void gemm(const GemmArgs& g) override {
    const cudaDataType_t t = cuda_type(g.dtype);
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major [r, c]
    // buffer read column-major is its transpose: so B goes first, then A.
    const cublasOperation_t op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto ldb = static_cast<int>(g.tb ? g.k : g.n);
    const auto lda = static_cast<int>(g.ta ? g.m : g.k);
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cublasGemmStridedBatchedEx(
                     blas_, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha,
                     g.b, t, ldb, g.stride_b, g.a, t, lda, g.stride_a, &beta, g.c, t, static_cast<int>(g.n), g.stride_c,
                     static_cast<int>(g.batch), CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }

  void launch(const KernelLaunch& l) override {
    const CudaKernels::Entry* e = kernels_.find(l.type);
    if (!e) {
      throw Error(
          name() + ": kernel " + l.type.name() +
          " has no CUDA launcher; its layer's add_cuda_kernels must register it (runtime/device/cuda/cuda_device.h)");
    }
    e->launch(l.kernel, l.items, stream());
    check_cuda(cudaGetLastError(), (e->name + " launch on " + name()).c_str());
  }

 private:
  int ordinal_;
  CudaKernels kernels_;
  std::unique_ptr<Stream> stream_;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::shared_ptr<Device> make_cuda_device(int ordinal, CudaKernels kernels) {
  return std::make_shared<CudaDevice>(ordinal, std::move(kernels));
}

void* cuda_stream_of(const Device& d) {
  const auto* c = dynamic_cast<const CudaDevice*>(&d);
  return c ? static_cast<void*>(c->stream()) : nullptr;
}

int cuda_ordinal_of(const Device& d) {
  const auto* c = dynamic_cast<const CudaDevice*>(&d);
  return c ? c->ordinal() : -1;
}

}  // namespace ranksim::runtime::gpu

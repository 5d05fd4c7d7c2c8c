// The CUDA device: registered kernels on GPU threads, cuBLAS GEMMs, stream-ordered memory.
#include "runtime/device/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
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
  CudaDevice(int ordinal, CudaKernels table)
      : ordinal_(ordinal), kernels_(std::move(table)), launch_blocking_(launch_blocking()) {
    kernels_.add<kernels::CopyKernel>("CopyKernel");  // the device's own
    set_device(ordinal);             // checks the ordinal; the guard below restores the caller's device
    const ScopedDevice on(ordinal);  // the stream, the pool and the cuBLAS handle belong to the device
    stream_ = std::make_unique<Stream>();
    // The default pool gives its free memory back to the driver at every synchronisation unless
    // told to keep it (release threshold 0): every allocation after a download or a collective
    // would then be a driver allocation. Keep what was freed for reuse.
    cudaMemPool_t pool = nullptr;
    check_cuda(cudaDeviceGetDefaultMemPool(&pool, ordinal), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    blas_ = h;
    check_cublas(cublasSetStream(h, stream()), "cublasSetStream");
  }
  ~CudaDevice() override {
    const ScopedDevice on(ordinal_, std::nothrow);
    (void)cudaStreamSynchronize(stream());
    (void)cublasDestroy(blas_);
  }

  std::string name() const override { return "cuda:" + std::to_string(ordinal_); }
  int multiprocessors() const override {
    int count = 0;
    check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, ordinal_),
               ("cudaDeviceGetAttribute(MultiProcessorCount) on " + name()).c_str());
    return count;
  }
  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return static_cast<cudaStream_t>(stream_->handle()); }

  void* allocate(std::size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const ScopedDevice on(ordinal_);
    void* p = nullptr;
    check_cuda(cudaMallocAsync(&p, nbytes, stream()),
               ("cudaMallocAsync of " + std::to_string(nbytes) + " bytes on " + name()).c_str());
    return p;
  }
  void release(void* p) noexcept override {
    if (p == nullptr) return;
    const ScopedDevice on(ordinal_, std::nothrow);
    (void)cudaFreeAsync(p, stream());
  }
  void upload(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes == 0) return;
    const ScopedDevice on(ordinal_);
    check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (upload)");
  }
  void download(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes == 0) return;
    const ScopedDevice on(ordinal_);
    check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync (download)");
    synchronize();
  }
  void zero(void* p, std::size_t nbytes) override {
    if (nbytes == 0) return;
    const ScopedDevice on(ordinal_);
    check_cuda(cudaMemsetAsync(p, 0, nbytes, stream()), "cudaMemsetAsync");
  }
  void synchronize() override {
    const ScopedDevice on(ordinal_);
    check_cuda(cudaStreamSynchronize(stream()), ("kernels on " + name()).c_str());
  }

  void gemm(const GemmArgs& g) override {
    const cudaDataType_t t = cuda_type(g.dtype);
    // cuBLAS takes sizes and leading dimensions as int (strides are 64-bit): refuse what would
    // wrap rather than multiply the wrong rows.
    for (const i64 v : {g.batch, g.m, g.n, g.k}) {
      if (v > INT32_MAX) {
        throw Error(name() + ": GEMM " + std::to_string(g.batch) + " x [" + std::to_string(g.m) + ", " +
                    std::to_string(g.k) + "] x [" + std::to_string(g.k) + ", " + std::to_string(g.n) +
                    "] has a size past cuBLAS's int limit (2^31 - 1); split it");
      }
    }
    const ScopedDevice on(ordinal_);
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major [r, c]
    // buffer read column-major is its transpose: so B goes first, then A.
    const cublasOperation_t op_b = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto ldb = static_cast<int>(g.tb ? g.k : g.n);
    const auto lda = static_cast<int>(g.ta ? g.m : g.k);
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(cublasGemmStridedBatchedEx(blas_, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m),
                                            static_cast<int>(g.k), &alpha, g.b, t, ldb, g.stride_b, g.a, t, lda,
                                            g.stride_a, &beta, g.c, t, static_cast<int>(g.n), g.stride_c,
                                            static_cast<int>(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
    if (launch_blocking_) {
      after_launch("GEMM " + std::to_string(g.batch) + " x [" + std::to_string(g.m) + ", " + std::to_string(g.k) +
                   "] x [" + std::to_string(g.k) + ", " + std::to_string(g.n) + "] " + dtype_name(g.dtype));
    }
  }

  void launch(const KernelLaunch& l) override {
    const CudaKernels::Entry* e = kernels_.find(l.type);
    if (!e) {
      throw Error(
          name() + ": kernel " + l.type.name() +
          " has no CUDA launcher; its layer's add_cuda_kernels must register it (runtime/device/cuda/cuda_device.h)");
    }
    const ScopedDevice on(ordinal_);
    e->launch(l.kernel, l.items, stream());
    check_cuda(cudaGetLastError(), (e->name + " launch on " + name()).c_str());
    if (launch_blocking_) after_launch(e->name + " over " + std::to_string(l.items) + " items");
  }

 private:
  // RANKSIM_CUDA_LAUNCH_BLOCKING=1: wait for every kernel and GEMM as it is launched, so a fault is
  // reported by the launch that caused it, with the kernel's name and size, instead of by a
  // later download or collective. For debugging: it serialises host and device.
  static bool launch_blocking() {
    const char* v = std::getenv("RANKSIM_CUDA_LAUNCH_BLOCKING");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }
  void after_launch(const std::string& what) {
    const cudaError_t e = cudaStreamSynchronize(stream());
    if (e != cudaSuccess) {
      throw Error(name() + ": " + what + " failed: " + cudaGetErrorString(e) + " (RANKSIM_CUDA_LAUNCH_BLOCKING)");
    }
  }

  int ordinal_;
  CudaKernels kernels_;
  bool launch_blocking_ = false;
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

// The CUDA device: runtime/device/device_kernels.h on GPU threads, cuBLAS GEMMs, stream-ordered memory.
#include "runtime/distributed/backends/nccl/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/distributed/backends/nccl/cuda.h"
#include "sim/error.h"

namespace ranksim::runtime::gpu {
namespace {

using i64 = std::int64_t;
constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr i64 kMaxBlocks = 65535;

// A warp's lanes sharing one row (device_kernels.h's row kernels).
struct WarpLanes {
  int lane;
  static constexpr int width = kWarp;
  __device__ float sum(float x) const {
    for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
  }
  __device__ float broadcast(float x, int src) const { return __shfl_sync(0xffffffffu, x, src); }
  __device__ float max(float x) const {
    for (int o = kWarp / 2; o > 0; o >>= 1) x = kernels::max_f(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
  }
  __device__ double sum(double x) const {
    for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
  }
  __device__ double max(double x) const {
    for (int o = kWarp / 2; o > 0; o >>= 1) x = kernels::max_d(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
  }
};

template <class K>
__global__ void elementwise(K k, i64 n) {
  const kernels::SerialLanes lanes;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    k(i, lanes);
  }
}

// Every lane of a warp takes the same rows, so the warp's shuffles see all 32 lanes.
template <class K>
__global__ void rows(K k, i64 n) {
  const WarpLanes lanes{static_cast<int>(threadIdx.x % kWarp)};
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x / kWarp);
  for (i64 r = (blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x) / kWarp; r < n; r += warps) k(r, lanes);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: break;
  }
  throw Error(std::string("CUDA device GEMM: dtype ") + dtype_name(t) + " is not supported (f32, bf16, f16)");
}

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 0;
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    set_device(ordinal);  // first: the stream and the cuBLAS handle belong to the device
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
    check_cuda(cudaMallocAsync(&p, nbytes, stream()), ("cudaMallocAsync of " + std::to_string(nbytes) + " bytes on " + name()).c_str());
    return p;
  }
  void release(void* p) noexcept override {
    if (p) (void)cudaFreeAsync(p, stream());
  }
  void upload(void* dst, const void* src, std::size_t nbytes) override {
    if (nbytes) check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (upload)");
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
    check_cublas(cublasGemmStridedBatchedEx(blas_, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m),
                                            static_cast<int>(g.k), &alpha, g.b, t, ldb, g.stride_b, g.a, t, lda,
                                            g.stride_a, &beta, g.c, t, static_cast<int>(g.n), g.stride_c,
                                            static_cast<int>(g.batch), CUBLAS_COMPUTE_32F_PEDANTIC,
                                            CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
  }

#define RANKSIM_CUDA_LAUNCH(K) \
  void launch(const kernels::K& k, i64 n) override { start(k, n, #K); }
  RANKSIM_DEVICE_KERNELS(RANKSIM_CUDA_LAUNCH)
#undef RANKSIM_CUDA_LAUNCH

 private:
  template <class K>
  void start(const K& k, i64 n, const char* what) {
    if (n <= 0) return;
    const i64 threads = K::kCooperative ? n * kWarp : n;
    const i64 blocks = std::min<i64>((threads + kThreads - 1) / kThreads, kMaxBlocks);
    if constexpr (K::kCooperative) {
      rows<<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(k, n);
    } else {
      elementwise<<<static_cast<unsigned>(blocks), kThreads, 0, stream()>>>(k, n);
    }
    check_cuda(cudaGetLastError(), (std::string(what) + " launch on " + name()).c_str());
  }

  int ordinal_;
  std::unique_ptr<Stream> stream_;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::shared_ptr<Device> make_cuda_device(int ordinal) { return std::make_shared<CudaDevice>(ordinal); }

void* cuda_stream_of(const Device& d) {
  const auto* c = dynamic_cast<const CudaDevice*>(&d);
  return c ? static_cast<void*>(c->stream()) : nullptr;
}

int cuda_ordinal_of(const Device& d) {
  const auto* c = dynamic_cast<const CudaDevice*>(&d);
  return c ? c->ordinal() : -1;
}

void install_cuda_device() {
  set_gpu_device_factory([] {
    const DeviceInfo info = device_info();
    if (info.count == 0) {
      throw Error("--device gpu needs a CUDA device, and this machine has none (" + info.reason +
                  "); run with --device cpu (or emulated)");
    }
    return make_cuda_device(local_rank() % info.count);
  });
}

}  // namespace ranksim::runtime::gpu

// CUDA kernels of the GPU backend's elementwise ops (device_ops.h). Launch errors are checked
// at once; execution errors surface at the stream's next synchronisation.
#include <cuda_runtime.h>

#include <string>

#include "runtime/backends/nccl/device_ops.h"
#include "sim/error.h"

namespace ranksim::runtime::gpu {
namespace {

constexpr float kGeluC = 0.79788456080286535588f;  // sqrt(2 / pi), as runtime/ops.cpp
constexpr float kGeluA = 0.044715f;
constexpr int kThreads = 256;

__global__ void gelu_kernel(const float* x, float* y, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

__global__ void gelu_backward_kernel(const float* dy, const float* x, float* dx, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

void require_f32(const DeviceBuffer& b, std::int64_t n, const char* op, const char* what) {
  if (b.dtype() != DType::f32 || b.numel() != n) {
    throw Error(std::string(op) + ": " + what + " must be f32 of " + std::to_string(n) + " elements, got " +
                std::to_string(b.numel()) + " " + dtype_name(b.dtype()));
  }
}

int blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

void gelu(const DeviceBuffer& x, DeviceBuffer& y, const Stream& stream) {
  require_f32(x, x.numel(), "GPU gelu", "x");
  require_f32(y, x.numel(), "GPU gelu", "y");
  if (x.numel() == 0) return;
  gelu_kernel<<<blocks(x.numel()), kThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      static_cast<const float*>(x.data()), static_cast<float*>(y.data()), x.numel());
  check_cuda(cudaGetLastError(), "gelu kernel launch");
}

void gelu_backward(const DeviceBuffer& dy, const DeviceBuffer& x, DeviceBuffer& dx, const Stream& stream) {
  require_f32(x, x.numel(), "GPU gelu_backward", "x");
  require_f32(dy, x.numel(), "GPU gelu_backward", "dy");
  require_f32(dx, x.numel(), "GPU gelu_backward", "dx");
  if (x.numel() == 0) return;
  gelu_backward_kernel<<<blocks(x.numel()), kThreads, 0, static_cast<cudaStream_t>(stream.handle())>>>(
      static_cast<const float*>(dy.data()), static_cast<const float*>(x.data()), static_cast<float*>(dx.data()),
      x.numel());
  check_cuda(cudaGetLastError(), "gelu_backward kernel launch");
}

}  // namespace ranksim::runtime::gpu

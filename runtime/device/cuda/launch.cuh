// How a kernel written under runtime/device/kernel.h's contract starts on a GPU (nvcc only):
// the __global__ wrappers, the warp's lanes, and CudaKernels::add<K>, which a layer's
// cuda_kernels.cu calls for each of its kernels.
//
// Elementwise kernels (kCooperative = false) run grid-stride, one item per thread. Row kernels
// give every item a warp: its 32 lanes share the row's columns and reduce with shuffles.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/kernel_table.h"
#include "runtime/device/kernel.h"

namespace ranksim::runtime::gpu {
namespace launch_detail {

using i64 = std::int64_t;
constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr i64 kMaxBlocks = 65535;

// A warp's lanes sharing one row (kernel.h's row kernels).
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

template <class K>
void start(const void* kernel, i64 n, void* stream) {
  const K& k = *static_cast<const K*>(kernel);
  const i64 threads = K::kCooperative ? n * kWarp : n;
  const i64 blocks = std::min<i64>((threads + kThreads - 1) / kThreads, kMaxBlocks);
  auto s = static_cast<cudaStream_t>(stream);
  if constexpr (K::kCooperative) {
    rows<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(k, n);
  } else {
    elementwise<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(k, n);
  }
}

}  // namespace launch_detail

template <class K>
void CudaKernels::add(const char* name) {
  put(std::type_index(typeid(K)), name, &launch_detail::start<K>);
}

}  // namespace ranksim::runtime::gpu

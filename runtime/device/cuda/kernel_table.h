// The table of GPU launchers a CUDA device (runtime/device/cuda/cuda_device.h) runs kernels
// from: one entry per kernel type, filled by each layer's nvcc-compiled cuda_kernels.cu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <typeindex>

namespace ranksim::runtime::gpu {

// The GPU launchers of kernel types, by type. Filled by nvcc-compiled code only: add<K>() is
// defined in runtime/device/cuda/launch.cuh, which a layer's cuda_kernels.cu includes.
class CudaKernels {
 public:
  // Starts k (a K) over items on stream (a cudaStream_t).
  using Launcher = void (*)(const void* k, std::int64_t items, void* stream);
  struct Entry {
    std::string name;
    Launcher launch;
  };

  // Registers K under name; registering the same K again is a no-op.
  template <class K>
  void add(const char* name);
  // nullptr when type was never registered.
  const Entry* find(std::type_index type) const;
  std::size_t size() const { return entries_.size(); }

 private:
  std::map<std::type_index, Entry> entries_;
  void put(std::type_index type, const char* name, Launcher launch);
};

}  // namespace ranksim::runtime::gpu

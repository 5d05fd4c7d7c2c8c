#include "runtime/device/cuda/kernel_table.h"

namespace ranksim::runtime::gpu {

void CudaKernels::put(std::type_index type, const char* name, Launcher launch) {
  entries_.try_emplace(type, Entry{name, launch});
}

const CudaKernels::Entry* CudaKernels::find(std::type_index type) const {
  const auto it = entries_.find(type);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace ranksim::runtime::gpu

#include "runtime/device/emulated_device.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "sim/error.h"

namespace ranksim::runtime {
void* EmulatedDevice::allocate(std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  void* p = std::malloc(nbytes);
  if (!p) throw Error("emulated device: out of memory allocating " + std::to_string(nbytes) + " bytes");
  sizes_[p] = nbytes;
  in_use_ += nbytes;
  return p;
}

void EmulatedDevice::release(void* p) noexcept {
  if (!p) return;
  const auto it = sizes_.find(p);
  if (it != sizes_.end()) {
    in_use_ -= it->second;
    sizes_.erase(it);
  }
  std::free(p);
}

void EmulatedDevice::upload(void* device_dst, const void* host_src, std::size_t nbytes) {
  if (nbytes) std::memcpy(device_dst, host_src, nbytes);
}

void EmulatedDevice::download(void* host_dst, const void* device_src, std::size_t nbytes) {
  if (nbytes) std::memcpy(host_dst, device_src, nbytes);
}

void EmulatedDevice::zero(void* device_p, std::size_t nbytes) {
  if (nbytes) std::memset(device_p, 0, nbytes);
}

void EmulatedDevice::gemm(const GemmArgs& g) {
  const kernels::GemmKernel k{g.a, g.b, g.c, g.dtype, g.m, g.n, g.k, g.ta, g.tb, g.stride_a, g.stride_b, g.stride_c};
  detail::run_serial<kernels::GemmKernel>(&k, g.batch * g.m * g.n);
}

}  // namespace ranksim::runtime

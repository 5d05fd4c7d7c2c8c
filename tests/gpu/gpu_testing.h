// Helpers of the GPU tests (tests/gpu/*_gputest.cpp): skip without enough devices, and the
// kernels every layer registers.
#pragma once

#include <gtest/gtest.h>

#include "models/cuda_kernels.h"
#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/kernel_table.h"

// Skips the test, saying why, unless this machine has n CUDA devices.
#define REQUIRE_DEVICES(n)                                                                    \
  do {                                                                                        \
    const ::ranksim::runtime::gpu::DeviceInfo info_ = ::ranksim::runtime::gpu::device_info(); \
    if (info_.count < (n)) {                                                                  \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this machine has " << info_.count  \
                   << (info_.reason.empty() ? "" : " (" + info_.reason + ")");                \
    }                                                                                         \
  } while (0)

namespace ranksim::runtime::gpu {

// Every kernel the reference models run, as the app registers them (app/devices.cpp).
inline CudaKernels every_kernel() {
  CudaKernels t;
  models::add_cuda_kernels(t);
  return t;
}

}  // namespace ranksim::runtime::gpu

// Compiled by nvcc: the models' kernels on GPU threads (runtime/device/cuda/launch.cuh).
#include "models/cuda_kernels.h"

#include "cp/cuda_kernels.h"
#include "models/adamw_kernels.h"
#include "models/loss_kernels.h"
#include "models/rope_kernels.h"
#include "runtime/device/cuda/launch.cuh"
#include "tp/cuda_kernels.h"

namespace ranksim::models {

void add_cuda_kernels(runtime::gpu::CudaKernels& table) {
  tp::add_cuda_kernels(table);
  cp::add_cuda_kernels(table);
  table.add<kernels::SumSquaresKernel>("SumSquaresKernel");
  table.add<kernels::AdamWKernel>("AdamWKernel");
  table.add<kernels::LossSumRowKernel>("LossSumRowKernel");
  table.add<kernels::RopeKernel>("RopeKernel");
}

}  // namespace ranksim::models

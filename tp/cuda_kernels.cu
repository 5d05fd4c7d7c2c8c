// Compiled by nvcc: tp's kernels on GPU threads (runtime/device/cuda/launch.cuh).
#include "tp/cuda_kernels.h"

#include "runtime/device/cuda/launch.cuh"
#include "runtime/tensor/cuda_kernels.h"
#include "tp/cross_entropy_kernels.h"

namespace ranksim::tp {

void add_cuda_kernels(runtime::gpu::CudaKernels& table) {
  runtime::add_cuda_kernels(table);
  table.add<kernels::VocabMaxKernel>("VocabMaxKernel");
  table.add<kernels::VocabPredKernel>("VocabPredKernel");
  table.add<kernels::VocabExpKernel>("VocabExpKernel");
  table.add<kernels::VocabSoftmaxKernel>("VocabSoftmaxKernel");
  table.add<kernels::VocabBackwardKernel>("VocabBackwardKernel");
}

}  // namespace ranksim::tp

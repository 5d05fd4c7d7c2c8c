// Compiled by nvcc: cp's kernels on GPU threads (runtime/device/cuda/launch.cuh).
#include "cp/cuda_kernels.h"

#include "cp/attention_kernels.h"
#include "runtime/device/cuda/launch.cuh"
#include "runtime/tensor/cuda_kernels.h"

namespace ranksim::cp {

void add_cuda_kernels(runtime::gpu::CudaKernels& table) {
  runtime::add_cuda_kernels(table);
  table.add<kernels::AttentionForwardKernel>("AttentionForwardKernel");
  table.add<kernels::AttentionBackwardQueryKernel>("AttentionBackwardQueryKernel");
  table.add<kernels::AttentionBackwardKeyKernel>("AttentionBackwardKeyKernel");
  table.add<kernels::MergeLseKernel>("MergeLseKernel");
  table.add<kernels::CorrectOutKernel>("CorrectOutKernel");
  table.add<kernels::AddRowsKernel>("AddRowsKernel");
}

}  // namespace ranksim::cp

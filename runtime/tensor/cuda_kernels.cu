// Compiled by nvcc: runtime/tensor's kernels on GPU threads (runtime/device/cuda/launch.cuh).
#include "runtime/tensor/cuda_kernels.h"

#include "runtime/device/cuda/launch.cuh"
#include "runtime/tensor/ops_kernels.h"

namespace ranksim::runtime {

void add_cuda_kernels(runtime::gpu::CudaKernels& table) {
  table.add<kernels::AddKernel>("AddKernel");
  table.add<kernels::ScaleKernel>("ScaleKernel");
  table.add<kernels::GeluKernel>("GeluKernel");
  table.add<kernels::GeluBackwardKernel>("GeluBackwardKernel");
  table.add<kernels::SwigluKernel>("SwigluKernel");
  table.add<kernels::SwigluBackwardKernel>("SwigluBackwardKernel");
  table.add<kernels::EmbeddingKernel>("EmbeddingKernel");
  table.add<kernels::CrossEntropyBackwardKernel>("CrossEntropyBackwardKernel");
  table.add<kernels::ColumnSumKernel>("ColumnSumKernel");
  table.add<kernels::LayerNormParamGradKernel>("LayerNormParamGradKernel");
  table.add<kernels::RmsNormParamGradKernel>("RmsNormParamGradKernel");
  table.add<kernels::EmbeddingBackwardKernel>("EmbeddingBackwardKernel");
  table.add<kernels::LayerNormKernel>("LayerNormKernel");
  table.add<kernels::LayerNormBackwardKernel>("LayerNormBackwardKernel");
  table.add<kernels::RmsNormKernel>("RmsNormKernel");
  table.add<kernels::RmsNormBackwardKernel>("RmsNormBackwardKernel");
  table.add<kernels::SoftmaxKernel>("SoftmaxKernel");
  table.add<kernels::SoftmaxBackwardKernel>("SoftmaxBackwardKernel");
  table.add<kernels::CrossEntropyRowKernel>("CrossEntropyRowKernel");
  table.add<kernels::CrossEntropyMeanKernel>("CrossEntropyMeanKernel");
}

}  // namespace ranksim::runtime

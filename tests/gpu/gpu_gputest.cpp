// The GPU backend's pieces (runtime/distributed/backends/nccl): the CUDA compute device against the CPU ops,
// NCCL against closed-form sums.
// Label `gpu`. Tests that need a device skip themselves, saying why, when there is none; the
// device query and its errors are checked on every machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cp/attention_device_cases.h"
#include "cp/attention_kernels.h"
#include "gpu/gpu_testing.h"
#include "models/adamw_kernels.h"
#include "models/device_cases.h"
#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/device.h"
#include "runtime/device/device_cases.h"
#include "runtime/distributed/backends/nccl/device_buffer.h"
#include "runtime/distributed/backends/nccl/nccl_comm.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/ops_kernels.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "tp/cross_entropy_kernels.h"

namespace ranksim::runtime::gpu {
namespace {

using ::testing::HasSubstr;

// Needs no GPU: the table is filled by nvcc-compiled code in each layer. 20 kernels of
// runtime/tensor/ops_kernels.h, 5 of tp/cross_entropy_kernels.h, 6 of cp/attention_kernels.h and
// 4 of models/*_kernels.h; registering a layer twice (models adds tp's and cp's, which both add
// runtime/tensor's) adds nothing.
TEST(GpuKernels, EveryLayersKernelsAreRegisteredOnce) {
  CudaKernels t = every_kernel();
  EXPECT_EQ(t.size(), 35u);
  models::add_cuda_kernels(t);
  EXPECT_EQ(t.size(), 35u);
  ASSERT_NE(t.find(std::type_index(typeid(tp::kernels::VocabMaxKernel))), nullptr);
  EXPECT_EQ(t.find(std::type_index(typeid(tp::kernels::VocabMaxKernel)))->name, "VocabMaxKernel");
  EXPECT_NE(t.find(std::type_index(typeid(cp::kernels::AttentionForwardKernel))), nullptr);
  EXPECT_NE(t.find(std::type_index(typeid(models::kernels::AdamWKernel))), nullptr);
  EXPECT_NE(t.find(std::type_index(typeid(kernels::LayerNormKernel))), nullptr);
  EXPECT_NE(t.find(std::type_index(typeid(kernels::RmsNormKernel))), nullptr);
  EXPECT_NE(t.find(std::type_index(typeid(kernels::SwigluBackwardKernel))), nullptr);
  EXPECT_EQ(t.find(std::type_index(typeid(int))), nullptr);
}

TEST(GpuDevices, QueryNeverThrowsAndSaysWhyThereIsNone) {
  const DeviceInfo info = device_info();
  EXPECT_GE(info.count, 0);
  if (info.count == 0) {
    EXPECT_FALSE(info.reason.empty());
  }
}

TEST(GpuDevices, AMissingDeviceIsAClearError) {
  const int n = device_info().count;
  EXPECT_THAT([&] { set_device(n); }, ::testing::ThrowsMessage<Error>(HasSubstr("does not exist")));
  EXPECT_THAT([&] { NcclComm::init_all({n}); }, ::testing::ThrowsMessage<Error>(HasSubstr("does not exist")));
  EXPECT_THAT([&] { (void)make_cuda_device(n, every_kernel()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("does not exist")));
}

TEST(GpuBuffers, UploadDownloadRoundTripsEveryDtype) {
  REQUIRE_DEVICES(1);
  set_device(0);
  Stream s;
  for (DType t : kAllDTypes) {
    const Tensor x = Tensor::arange(1000, t);
    const DeviceBuffer b = DeviceBuffer::upload(x, s);
    EXPECT_TRUE(bitwise_equal(b.download({10, 100}, s).reshape({1000}), x)) << dtype_name(t);
  }
  EXPECT_THAT([&] { DeviceBuffer::upload(Tensor::shape_only({4}), s); },
              ::testing::ThrowsMessage<Error>(HasSubstr("shape-only")));
}

// Every op on the CUDA device against the CPU op. The GPU sums in other orders (warp lanes,
// cuBLAS's blocking), so f32 results agree to a few units of f32 rounding and bf16/f16 results to
// one unit of their own rounding, on values of order 1.
TEST(GpuOps, EveryOpMatchesTheCpuOp) {
  REQUIRE_DEVICES(1);
  const std::shared_ptr<Device> gpu = make_cuda_device(0, every_kernel());
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const double tol = dt == DType::f32 ? 2e-5 : dt == DType::bf16 ? 1.6e-2 : 2e-3;
    const testing::DeviceCheck check = [&](const std::string& what, const testing::OpOutputs& f) {
      const std::vector<Tensor> cpu = f();
      std::vector<Tensor> dev;
      {
        ScopedComputeDevice on(gpu);
        dev = f();
      }
      ASSERT_EQ(cpu.size(), dev.size()) << what;
      for (std::size_t i = 0; i < cpu.size(); ++i) {
        EXPECT_TRUE(dev[i].host_stale()) << what << " output " << i << " did not run on the GPU";
        const std::vector<double> c = cpu[i].to_vector<double>(), d = dev[i].to_vector<double>();
        ASSERT_EQ(c.size(), d.size()) << what;
        for (std::size_t j = 0; j < c.size(); ++j) {
          if (std::isnan(c[j])) {
            ASSERT_TRUE(std::isnan(d[j])) << what << " output " << i << " at " << j;
            continue;
          }
          if (std::isinf(c[j])) {
            ASSERT_EQ(d[j], c[j]) << what << " output " << i << " at " << j;
            continue;
          }
          ASSERT_NEAR(d[j], c[j], tol * (1 + std::abs(c[j]))) << what << " output " << i << " at " << j;
        }
      }
    };
    testing::device_op_cases(dt, check);
    testing::attention_device_cases(dt, check);
    testing::model_device_cases(dt, check);
  }
}

TEST(GpuOps, TensorsStayOnTheGpuUntilTheHostReads) {
  REQUIRE_DEVICES(1);
  const std::shared_ptr<Device> gpu = make_cuda_device(0, every_kernel());
  ScopedComputeDevice on(gpu);
  const Tensor x = Tensor::uniform({256, 512}, 5, -1, 1), w = Tensor::uniform({512, 512}, 6, -0.1, 0.1);
  const Tensor ln_w = Tensor::ones({512}), ln_b = Tensor::zeros({512});
  Tensor h = x;
  for (int layer = 0; layer < 4; ++layer) h = gelu(matmul(layer_norm(h, ln_w, ln_b).y, w));
  EXPECT_EQ(gpu->stats().uploads, 4);
  EXPECT_EQ(gpu->stats().downloads, 0);
  EXPECT_EQ(gpu->stats().gemms, 4);
  const std::vector<float> got = h.to_vector<float>();
  EXPECT_EQ(gpu->stats().downloads, 1);
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
}

TEST(GpuOps, TheCudaDeviceNamesItself) {
  REQUIRE_DEVICES(1);
  EXPECT_EQ(make_cuda_device(0, every_kernel())->name(), "cuda:0");
}

// Collectives over every device of this machine, driven by one process (ncclCommInitAll).
TEST(GpuNccl, CollectivesMatchClosedFormSums) {
  REQUIRE_DEVICES(1);
  const int n = device_info().count;
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  std::vector<NcclComm> comms = NcclComm::init_all(devices);
  const std::int64_t c = 1024;
  std::vector<DeviceBuffer> ar, ag_in, ag_out, rs_out;
  for (int r = 0; r < n; ++r) {
    set_device(r);
    ar.push_back(DeviceBuffer::upload(Tensor::full({c}, r + 1), comms[static_cast<std::size_t>(r)].stream()));
    ag_in.push_back(DeviceBuffer::upload(Tensor::full({c}, 10 * r), comms[static_cast<std::size_t>(r)].stream()));
    ag_out.emplace_back(c * n, DType::f32);
    rs_out.emplace_back(c / n, DType::f32);
  }
  NcclComm::group_start();
  for (int r = 0; r < n; ++r) {
    set_device(r);
    comms[static_cast<std::size_t>(r)].all_reduce(ar[static_cast<std::size_t>(r)], ReduceOp::SUM);
  }
  NcclComm::group_end();
  NcclComm::group_start();
  for (int r = 0; r < n; ++r) {
    set_device(r);
    comms[static_cast<std::size_t>(r)].all_gather(ag_out[static_cast<std::size_t>(r)],
                                                  ag_in[static_cast<std::size_t>(r)]);
  }
  NcclComm::group_end();
  for (int r = 0; r < n; ++r) {
    set_device(r);
    auto& comm = comms[static_cast<std::size_t>(r)];
    comm.synchronize();
    const std::vector<float> sum = ar[static_cast<std::size_t>(r)].download({c}, comm.stream()).to_vector<float>();
    for (float v : sum) ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2));
    const std::vector<float> g =
        ag_out[static_cast<std::size_t>(r)].download({c * n}, comm.stream()).to_vector<float>();
    for (std::int64_t i = 0; i < c * n; ++i)
      ASSERT_EQ(g[static_cast<std::size_t>(i)], static_cast<float>(10 * (i / c)));
  }
}

}  // namespace
}  // namespace ranksim::runtime::gpu

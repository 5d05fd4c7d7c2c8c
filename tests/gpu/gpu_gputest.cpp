// The GPU backend's pieces (runtime/backends/nccl), against the CPU ops and closed-form sums.
// Label `gpu`. Tests that need a device skip themselves, saying why, when there is none; the
// device query and its errors are checked on every machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/backends/nccl/cuda.h"
#include "runtime/backends/nccl/device_ops.h"
#include "runtime/backends/nccl/nccl_comm.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"
#include "sim/error.h"

namespace ranksim::runtime::gpu {
namespace {

using ::testing::HasSubstr;

#define REQUIRE_DEVICES(n)                                                                     \
  do {                                                                                         \
    const DeviceInfo info_ = device_info();                                                    \
    if (info_.count < (n)) {                                                                   \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), this machine has " << info_.count    \
                   << (info_.reason.empty() ? "" : " (" + info_.reason + ")");                 \
    }                                                                                          \
  } while (0)

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

TEST(GpuOps, MatmulEqualsTheCpuMatmulInEveryTransposition) {
  REQUIRE_DEVICES(1);
  set_device(0);
  Stream s;
  Blas blas(s);
  const std::int64_t m = 37, n = 19, k = 53;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = Tensor::uniform(ta ? Shape{k, m} : Shape{m, k}, 1, -1, 1);
      const Tensor b = Tensor::uniform(tb ? Shape{n, k} : Shape{k, n}, 2, -1, 1);
      const Tensor want = matmul(a, b, ta, tb);
      const DeviceBuffer da = DeviceBuffer::upload(a, s), db = DeviceBuffer::upload(b, s);
      DeviceBuffer dc(m * n, DType::f32);
      blas.matmul(da, db, dc, m, n, k, ta, tb);
      const std::vector<float> got = dc.download({m, n}, s).to_vector<float>(), ref = want.to_vector<float>();
      for (std::size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << "ta=" << ta << " tb=" << tb << " at " << i;
      }
    }
  }
  DeviceBuffer wrong(5, DType::f32);
  const DeviceBuffer a = DeviceBuffer::upload(Tensor::zeros({m, k}), s), b = DeviceBuffer::upload(Tensor::zeros({k, n}), s);
  EXPECT_THAT([&] { blas.matmul(a, b, wrong, m, n, k); }, ::testing::ThrowsMessage<Error>(HasSubstr("do not fit")));
}

TEST(GpuOps, GeluAndItsBackwardEqualTheCpuOps) {
  REQUIRE_DEVICES(1);
  set_device(0);
  Stream s;
  const Tensor x = Tensor::uniform({4099}, 3, -6, 6), dy = Tensor::uniform({4099}, 4, -1, 1);
  const DeviceBuffer dx_in = DeviceBuffer::upload(x, s), ddy = DeviceBuffer::upload(dy, s);
  DeviceBuffer y(x.numel(), DType::f32), dx(x.numel(), DType::f32);
  gelu(dx_in, y, s);
  gelu_backward(ddy, dx_in, dx, s);
  const std::vector<float> gy = y.download(x.shape(), s).to_vector<float>(), ry = runtime::gelu(x).to_vector<float>();
  const std::vector<float> gdx = dx.download(x.shape(), s).to_vector<float>(),
                           rdx = runtime::gelu_backward(dy, x).to_vector<float>();
  for (std::size_t i = 0; i < ry.size(); ++i) {
    ASSERT_NEAR(gy[i], ry[i], 2e-6 * (1 + std::abs(ry[i]))) << i;
    ASSERT_NEAR(gdx[i], rdx[i], 2e-6 * (1 + std::abs(rdx[i]))) << i;
  }
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
    comms[static_cast<std::size_t>(r)].all_gather(ag_out[static_cast<std::size_t>(r)], ag_in[static_cast<std::size_t>(r)]);
  }
  NcclComm::group_end();
  for (int r = 0; r < n; ++r) {
    set_device(r);
    const auto& comm = comms[static_cast<std::size_t>(r)];
    comm.synchronize();
    const std::vector<float> sum = ar[static_cast<std::size_t>(r)].download({c}, comm.stream()).to_vector<float>();
    for (float v : sum) ASSERT_EQ(v, static_cast<float>(n * (n + 1) / 2));
    const std::vector<float> g = ag_out[static_cast<std::size_t>(r)].download({c * n}, comm.stream()).to_vector<float>();
    for (std::int64_t i = 0; i < c * n; ++i) ASSERT_EQ(g[static_cast<std::size_t>(i)], static_cast<float>(10 * (i / c)));
  }
}

}  // namespace
}  // namespace ranksim::runtime::gpu

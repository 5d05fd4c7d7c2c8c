// The device path of runtime/tensor/ops.h on the emulated device (runtime/device/emulated_device.h): every op
// against the CPU op, bit for bit (the emulated device runs the GPU's kernels in the CPU ops' sum
// order), in f32, bf16 and f16, on contiguous and strided inputs; residency and coherence between
// host and device; what stays on the CPU; errors; memory. The layers' kernels are tested beside
// their layers (tests/tp/cross_entropy_device_test.cpp, tests/cp/attention_device_test.cpp,
// tests/models/device_test.cpp).
#include "runtime/device/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/device/device_cases.h"
#include "runtime/device/emulated_check.h"
#include "runtime/device/emulated_device.h"
#include "runtime/device/kernel.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using testing::expect_same;
using ::testing::HasSubstr;
using testing::kDeviceDTypes;
using testing::rnd;

class DeviceOps : public ::testing::TestWithParam<DType> {};

TEST_P(DeviceOps, EveryOpEqualsTheCpuOpBitForBit) {
  testing::device_op_cases(GetParam(),
                           [](const std::string& what, const testing::OpOutputs& f) { expect_same(what, f); });
}

INSTANTIATE_TEST_SUITE_P(DTypes, DeviceOps, ::testing::ValuesIn(kDeviceDTypes),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// --- residency and coherence ----------------------------------------------------------------

TEST(DeviceResidency, AChainOfOpsStaysOnTheDeviceUntilTheHostReads) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor x = rnd({16, 32}, 30, DType::f32), w = rnd({32, 32}, 31, DType::f32);
  const Tensor ln_w = Tensor::ones({32}), ln_b = Tensor::zeros({32});
  Tensor h = x;
  for (int layer = 0; layer < 3; ++layer) h = gelu(matmul(layer_norm(h, ln_w, ln_b).y, w));
  const DeviceStats& s = device->stats();
  EXPECT_EQ(s.ops, 9);
  EXPECT_EQ(s.gemms, 3);
  EXPECT_EQ(s.uploads, 4) << "x, w, ln_w and ln_b once each";
  EXPECT_EQ(s.downloads, 0);
  EXPECT_TRUE(h.host_stale());
  const std::vector<float> host = h.to_vector<float>();
  EXPECT_EQ(s.downloads, 1);
  EXPECT_EQ(s.download_bytes, 16 * 32 * 4);
  EXPECT_FALSE(h.host_stale());
  (void)h.to_vector<float>();
  EXPECT_EQ(s.downloads, 1) << "a second read finds the host current";
  // A read does not make the device copy stale: the next op uses it in place.
  (void)gelu(h);
  EXPECT_EQ(s.uploads, 4);
}

TEST(DeviceResidency, AHostWriteIsUploadedBeforeTheNextOp) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor x = Tensor::full({4}, 1.0);
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), std::vector<float>(4, 2.0f));
  x.fill_(3.0);  // the host writes: the device copy is stale
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), std::vector<float>(4, 6.0f));
  x.set({1}, -1.0);
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), (std::vector<float>{6, -2, 6, 6}));
  x.data<float>()[2] = 5.0f;
  EXPECT_EQ(scale(x, 2.0).to_vector<float>(), (std::vector<float>{6, -2, 10, 6}));
  // A device output written by the host through a view: the whole storage is current again.
  const Tensor y = scale(x, 1.0);
  y.narrow(0, 0, 2).copy_(Tensor::zeros({2}));
  EXPECT_EQ(scale(y, 1.0).to_vector<float>(), (std::vector<float>{0, 0, 5, 3}));
  EXPECT_EQ(device->stats().uploads, 5);
}

// A write that lands later (as a collective's): the device waits for it before uploading.
class LateFill final : public PendingWrite {
 public:
  LateFill(Tensor t, float v) : t_(std::move(t)), v_(v) {}
  void wait() override {
    auto* p = static_cast<float*>(t_.raw_data_unsynchronized());
    for (std::int64_t i = 0; i < t_.numel(); ++i) p[i] = v_;
  }

 private:
  Tensor t_;
  float v_;
};

TEST(DeviceResidency, PendingWritesLandBeforeUploadAndAfterADeviceWrite) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor x = Tensor::zeros({3});
  x.set_pending_write(std::make_shared<LateFill>(x, 4.0f));
  EXPECT_EQ(scale(x, 0.5).to_vector<float>(), std::vector<float>(3, 2.0f));
  // A device output that a collective then overwrites: download first, then the write.
  const Tensor y = scale(x, 1.0);
  y.set_pending_write(std::make_shared<LateFill>(y, 7.0f));
  EXPECT_EQ(scale(y, 1.0).to_vector<float>(), std::vector<float>(3, 7.0f));
}

TEST(DeviceResidency, WhatStaysOnTheCpu) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  // f64, shape-only inputs and integer embeddings run on the CPU as before.
  const Tensor d = rnd({4, 4}, 40, DType::f64);
  const Tensor r = matmul(d, d);
  EXPECT_FALSE(r.host_stale());
  const Tensor s = matmul(Tensor::shape_only({4, 4}), Tensor::shape_only({4, 4}));
  EXPECT_FALSE(s.has_data());
  const Tensor table = Tensor::from_vector<std::int64_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(embedding(Tensor::from_vector<std::int64_t>({1}, {1}), table).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(device->stats().ops, 0);
}

// An emulated device whose next download throws when armed: a kernel fault that surfaces at the
// synchronisation a download waits for.
class FaultyDownloadDevice final : public Device {
 public:
  bool fail_next_download = false;
  std::string name() const override { return "faulty"; }
  void* allocate(std::size_t n) override { return inner_.allocate(n); }
  void release(void* p) noexcept override { inner_.release(p); }
  void upload(void* d, const void* h, std::size_t n) override { inner_.upload(d, h, n); }
  void download(void* h, const void* d, std::size_t n) override {
    if (fail_next_download) {
      fail_next_download = false;
      throw Error("faulty: an earlier kernel faulted");
    }
    inner_.download(h, d, n);
  }
  void zero(void* p, std::size_t n) override { inner_.zero(p, n); }
  void synchronize() override {}
  void gemm(const GemmArgs& a) override { inner_.gemm(a); }
  void launch(const KernelLaunch& l) override { inner_.launch(l); }

 private:
  EmulatedDevice inner_;
};

TEST(DeviceResidency, AFailedDownloadLeavesTheHostBytesStale) {
  const Tensor x = rnd({8, 16}, 40, DType::f32);
  const std::vector<float> want = gelu(x).to_vector<float>();  // on the CPU
  auto device = std::make_shared<FaultyDownloadDevice>();
  ScopedComputeDevice on(device);
  const Tensor y = gelu(x);
  ASSERT_TRUE(y.host_stale());
  device->fail_next_download = true;
  EXPECT_THAT([&] { (void)y.to_vector<float>(); }, ::testing::ThrowsMessage<Error>(HasSubstr("kernel faulted")));
  EXPECT_TRUE(y.host_stale()) << "the host bytes were never written";
  EXPECT_EQ(y.to_vector<float>(), want) << "the next read downloads again";
}

TEST(DeviceResidency, MemoryIsReleasedWithTheLastTensor) {
  auto device = std::make_shared<EmulatedDevice>();
  {
    ScopedComputeDevice on(device);
    const Tensor x = rnd({64, 64}, 41, DType::bf16);
    const Tensor y = gelu(matmul(x, x));
    EXPECT_EQ(device->bytes_in_use(), 2u * 64 * 64 * 2);  // x's copy and y (the product is gone)
  }
  EXPECT_EQ(device->bytes_in_use(), 0u);
}

TEST(DeviceErrors, IndexErrorsAreTheCpuOpsErrors) {
  auto device = std::make_shared<EmulatedDevice>();
  ScopedComputeDevice on(device);
  const Tensor w = rnd({5, 4}, 42, DType::f32);
  try {
    (void)embedding(Tensor::from_vector<std::int64_t>({1, 5}, {2}), w);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("embedding: id 5 at position 1 is outside the table of 5 rows"));
  }
  try {
    (void)cross_entropy(w, Tensor::from_vector<std::int64_t>({0, 1, 3, 9, 2}, {5}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cross_entropy: target 9 of row 3 is outside [0, 4)"));
  }
  EXPECT_THROW((void)matmul(w, w), Error);  // shapes are checked before dispatch
}

TEST(DeviceKernels, HalfPrecisionConversionsMatchTheHostsForEveryPattern) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const std::uint16_t bf = b;
    float host = bf16_bits_to_f32(bf);
    float dev = kernels::load(&bf, DType::bf16, 0);
    ASSERT_EQ(kernels::float_bits(host), kernels::float_bits(dev)) << "bf16 " << bits;
    host = f16_bits_to_f32(b);
    dev = kernels::load(&b, DType::f16, 0);
    ASSERT_EQ(kernels::float_bits(host), kernels::float_bits(dev)) << "f16 " << bits;
  }
  // Narrowing: every f32 whose top 20 bits vary (ties, carries, subnormals, inf, NaN).
  for (std::uint32_t hi = 0; hi < (1u << 20); ++hi) {
    const std::uint32_t x = (hi << 12) | (hi & 0xfffu);
    const float v = kernels::bits_float(x);
    std::uint16_t out = 0;
    kernels::store(&out, DType::bf16, 0, v);
    ASSERT_EQ(out, f32_to_bf16_bits(v)) << std::hex << x;
    kernels::store(&out, DType::f16, 0, v);
    ASSERT_EQ(out, f32_to_f16_bits(v)) << std::hex << x;
  }
}

}  // namespace
}  // namespace ranksim::runtime

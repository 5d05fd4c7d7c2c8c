// cp's block attention and merges on the emulated device (cp/attention_kernels.h), against the
// CPU, bit for bit, in f32, bf16 and f16 (the cases: tests/cp/attention_device_cases.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cp/attention_device_cases.h"
#include "runtime/device/emulated_check.h"

namespace ranksim::runtime {
namespace {

using testing::expect_same;
using testing::kDeviceDTypes;

class DeviceAttention : public ::testing::TestWithParam<DType> {};

// Block attention and the in-place merges run as cp/attention_kernels.h on the emulated device
// and give the CPU's bits and charges.
TEST_P(DeviceAttention, EveryCaseEqualsTheCpuBitForBit) {
  testing::attention_device_cases(GetParam(),
                                  [](const std::string& what, const testing::OpOutputs& f) { expect_same(what, f); });
}

INSTANTIATE_TEST_SUITE_P(DTypes, DeviceAttention, ::testing::ValuesIn(kDeviceDTypes),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace ranksim::runtime

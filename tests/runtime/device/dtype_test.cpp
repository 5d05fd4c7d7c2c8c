#include "runtime/device/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ranksim::runtime {
namespace {

float f32_from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(safetensors_name(DType::bf16), "BF16");
  EXPECT_STREQ(safetensors_name(DType::i64), "I64");
  for (DType d : kAllDTypes) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    EXPECT_EQ(dtype_from_safetensors_name(safetensors_name(d)), d);
  }
  EXPECT_FALSE(dtype_from_name("F32").has_value());  // the two namings are not mixed
  EXPECT_FALSE(dtype_from_safetensors_name("f32").has_value());
  EXPECT_FALSE(dtype_from_safetensors_name("U8").has_value());
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_FALSE(is_floating(DType::i32));
}

TEST(BFloat16, KnownBitPatterns) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16_bits(0.1f), 0x3DCD);  // 0x3DCCCCCD: dropped half 0xCCCD > 0x8000, round up
  EXPECT_EQ(f32_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(-0.0f), 0x8000);
  // Ties go to the even pattern.
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x3F808000)), 0x3F80);
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x3F818000)), 0x3F82);
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x3F807FFF)), 0x3F80);
  // Largest finite bf16 (0x7F7F); past its half-ulp the value overflows to infinity.
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(f32_to_bf16_bits(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  // Subnormals keep their bits.
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x00010000)), 0x0001);
  EXPECT_EQ(f32_to_bf16_bits(f32_from_bits(0x00018000)), 0x0002);  // tie, to even
  // NaN stays NaN, even when its payload sits only in the dropped bits.
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f32_from_bits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f32_from_bits(0xFF800001)))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::nanf("")))));
  EXPECT_EQ(bf16_bits_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_bits_to_f32(0x7F7F), 3.38953139e38f);
}

TEST(Half, KnownBitPatterns) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16_bits(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);  // max finite
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7BFF);  // below the midpoint 65520
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);  // the tie rounds to the even side: infinity
  EXPECT_EQ(f32_to_f16_bits(1e6f), 0x7C00);
  EXPECT_EQ(f32_to_f16_bits(-1e30f), 0xFC00);
  EXPECT_EQ(f32_to_f16_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  // Ties to even in the normal range: 1 + 2^-11 lies halfway between 0x3C00 and 0x3C01.
  EXPECT_EQ(f32_to_f16_bits(1.0f + 0x1p-11f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(f32_to_f16_bits(2049.0f), 0x6800);  // 2048; 2049 is a tie
  // Subnormals: the step is 2^-24.
  EXPECT_EQ(f32_to_f16_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(3 * 0x1p-25f), 0x0002);        // tie between 1 and 2 steps
  EXPECT_EQ(f32_to_f16_bits(1023 * 0x1p-24f), 0x03FF);     // largest subnormal
  EXPECT_EQ(f32_to_f16_bits(1023.5f * 0x1p-24f), 0x0400);  // tie, to the smallest normal
  EXPECT_EQ(f32_to_f16_bits(0x1p-14f), 0x0400);
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16_bits(-0x1p-30f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(f32_from_bits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::nanf("")))));
  EXPECT_EQ(f16_bits_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_bits_to_f32(0x8001), -0x1p-24f);
  EXPECT_EQ(f16_bits_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_bits_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_bits_to_f32(0x7C00), std::numeric_limits<float>::infinity());
}

// Every 16-bit pattern widens exactly and narrows back to itself (NaNs: to some NaN).
TEST(Half, EveryPatternRoundTrips) {
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float h = f16_bits_to_f32(bits);
    const float bf = bf16_bits_to_f32(bits);
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(h)))) << b;
    } else {
      EXPECT_EQ(f32_to_f16_bits(h), bits) << b;
    }
    if (std::isnan(bf)) {
      EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(bf)))) << b;
    } else {
      EXPECT_EQ(f32_to_bf16_bits(bf), bits) << b;
    }
  }
}

// An independent reference for rounding: the nearest entry of the sorted table of every finite
// non-negative value of the 16-bit format (computed in double), ties to the even pattern, and
// infinity at or beyond max + half an ulp of max.
struct Table {
  std::vector<double> values;       // ascending
  std::vector<std::uint16_t> bits;  // the pattern of each value
  double overflow;                  // the smallest magnitude that rounds to infinity
  std::uint16_t inf_bits;
};

Table make_table(float (*widen)(std::uint16_t)) {
  Table t;
  for (std::uint32_t b = 0; b < 0x8000; ++b) {
    const float v = widen(static_cast<std::uint16_t>(b));
    if (std::isfinite(v)) {
      t.values.push_back(v);
      t.bits.push_back(static_cast<std::uint16_t>(b));
    } else if (std::isinf(v)) {
      t.inf_bits = static_cast<std::uint16_t>(b);
    }
  }
  const double max = t.values.back();
  const double below = t.values[t.values.size() - 2];
  t.overflow = max + (max - below) / 2;
  return t;
}

std::uint16_t reference_round(const Table& t, float x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= t.overflow) return sign | t.inf_bits;
  const auto it = std::lower_bound(t.values.begin(), t.values.end(), a);
  const std::size_t hi = static_cast<std::size_t>(it - t.values.begin());
  if (hi == t.values.size()) return sign | t.bits.back();  // between max and the overflow point
  if (t.values[hi] == a || hi == 0) return sign | t.bits[hi];
  const std::size_t lo = hi - 1;
  const double dlo = a - t.values[lo];
  const double dhi = t.values[hi] - a;
  if (dlo < dhi) return sign | t.bits[lo];
  if (dhi < dlo) return sign | t.bits[hi];
  return sign | ((t.bits[lo] & 1) ? t.bits[hi] : t.bits[lo]);
}

TEST(DType, RoundingMatchesNearestTableEntry) {
  const Table half = make_table(f16_bits_to_f32);
  const Table bf = make_table(bf16_bits_to_f32);
  // Random finite f32 patterns, concentrated on f16's exponent range so subnormals and overflow
  // are both hit, plus every pattern near the ties of a few binades.
  std::uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::uint32_t>(state >> 32);
  };
  for (int i = 0; i < 400000; ++i) {
    std::uint32_t bits = next();
    if (i % 2 == 0) {  // exponent in [2^-30, 2^17)
      const std::uint32_t exp = 97 + next() % 47;
      bits = (bits & 0x807fffffu) | (exp << 23);
    }
    const float x = f32_from_bits(bits);
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(f32_to_f16_bits(x), reference_round(half, x)) << std::hex << bits;
    ASSERT_EQ(f32_to_bf16_bits(x), reference_round(bf, x)) << std::hex << bits;
  }
  for (std::uint32_t base : {0x3F800000u, 0x33000000u, 0x477FE000u, 0x00800000u}) {
    for (std::uint32_t d = 0; d < 0x4000; ++d) {
      const float x = f32_from_bits(base + d);
      ASSERT_EQ(f32_to_f16_bits(x), reference_round(half, x)) << std::hex << base + d;
      ASSERT_EQ(f32_to_bf16_bits(x), reference_round(bf, x)) << std::hex << base + d;
    }
  }
}

TEST(DType, ConvertElementsRules) {
  const std::vector<double> src = {2.7, -2.7, 1e30, -1e30, std::nan(""), 3e9, -0.5};
  std::vector<std::int64_t> i64(src.size());
  convert_elements(src.data(), DType::f64, i64.data(), DType::i64, src.size());
  EXPECT_EQ(i64, (std::vector<std::int64_t>{2, -2, std::numeric_limits<std::int64_t>::max(),
                                            std::numeric_limits<std::int64_t>::min(), 0, 3000000000, 0}));
  std::vector<std::int32_t> i32(src.size());
  convert_elements(src.data(), DType::f64, i32.data(), DType::i32, src.size());
  EXPECT_EQ(i32[5], std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(i32[3], std::numeric_limits<std::int32_t>::min());

  const std::vector<std::int64_t> big = {(std::int64_t{1} << 32) + 5, -1};
  std::vector<std::int32_t> wrapped(2);
  convert_elements(big.data(), DType::i64, wrapped.data(), DType::i32, 2);
  EXPECT_EQ(wrapped, (std::vector<std::int32_t>{5, -1}));

  // Integers and doubles narrow to 16-bit floats through f32, rounding to nearest even.
  const std::vector<std::int64_t> ints = {2049, 2051, 65519, 70000};
  std::vector<Half> h(ints.size());
  convert_elements(ints.data(), DType::i64, h.data(), DType::f16, ints.size());
  EXPECT_EQ(h[0].bits, 0x6800);  // 2048
  EXPECT_EQ(h[1].bits, 0x6802);  // 2052
  EXPECT_EQ(h[2].bits, 0x7BFF);
  EXPECT_EQ(h[3].bits, 0x7C00);
  const std::vector<double> d = {1.0, 0.1};
  std::vector<BFloat16> b(2);
  convert_elements(d.data(), DType::f64, b.data(), DType::bf16, 2);
  EXPECT_EQ(b[0].bits, 0x3F80);
  EXPECT_EQ(b[1].bits, 0x3DCD);
  // And widen exactly.
  std::vector<double> back(2);
  convert_elements(b.data(), DType::bf16, back.data(), DType::f64, 2);
  EXPECT_EQ(back[1], static_cast<double>(bf16_bits_to_f32(0x3DCD)));
}

}  // namespace
}  // namespace ranksim::runtime

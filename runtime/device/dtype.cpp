#include "runtime/device/dtype.h"

#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ranksim::runtime {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i64:
      return 8;
    case DType::i32:
      return 4;
  }
  assert(false && "invalid DType");
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16 || dtype == DType::f16;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i64:
      return "i64";
    case DType::i32:
      return "i32";
  }
  return "invalid";
}

const char* safetensors_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i64:
      return "I64";
    case DType::i32:
      return "I32";
  }
  return "invalid";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType d : kAllDTypes) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (DType d : kAllDTypes) {
    if (name == safetensors_name(d)) return d;
  }
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

namespace {

// Rounds the kept bits q up or not, given the dropped bits rem and the dropped value of a tie.
std::uint32_t round_nearest_even(std::uint32_t q, std::uint32_t rem, std::uint32_t half) {
  if (rem > half || (rem == half && (q & 1u))) return q + 1;
  return q;
}

}  // namespace

std::uint16_t f32_to_f16_bits(float value) {
  const auto x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet so it stays a NaN
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x03ffu));
  }
  if (abs == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  const int exp = static_cast<int>(abs >> 23) - 127;
  const std::uint32_t mant = abs & 0x007fffffu;
  if (exp > 15) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 2^16: past the midpoint
  if (exp >= -14) {
    // Normal range. A rounding carry propagates into the exponent, and from 0x7bff to 0x7c00 (inf).
    const std::uint32_t q = (static_cast<std::uint32_t>(exp + 15) << 10) | (mant >> 13);
    return static_cast<std::uint16_t>(sign | round_nearest_even(q, mant & 0x1fffu, 0x1000u));
  }
  if ((abs >> 23) == 0) return sign;  // f32 subnormal: far below half the smallest f16 subnormal
  // f16 subnormal: the value is m * 2^(exp-23) with m the 24-bit significand; in units of the f16
  // subnormal step 2^-24 that is m >> (-exp - 1).
  const int shift = -exp - 1;   // >= 14
  if (shift > 25) return sign;  // below 2^-25, half the smallest subnormal: rounds to zero
  const std::uint32_t m = mant | 0x00800000u;
  const std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  // A carry from 0x3ff to 0x400 lands exactly on the smallest normal, which is the right answer.
  return static_cast<std::uint16_t>(sign | round_nearest_even(q, rem, 1u << (shift - 1)));
}

float f16_bits_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t mant = bits & 0x03ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in f32 (2^-24 is a power of two).
    const float magnitude = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

namespace {

// Element values travel through one of three "wide" types: double for floating sources (exact for
// f32/bf16/f16/f64), float when the source is narrow floating and the target is bf16/f16 (so the
// narrowing is a single rounding), and int64 for integer sources (exact).
template <class T>
struct Reader;
template <>
struct Reader<float> {
  static float get(float v) { return v; }
};
template <>
struct Reader<double> {
  static double get(double v) { return v; }
};
template <>
struct Reader<BFloat16> {
  static float get(BFloat16 v) { return v.to_float(); }
};
template <>
struct Reader<Half> {
  static float get(Half v) { return v.to_float(); }
};
template <>
struct Reader<std::int64_t> {
  static std::int64_t get(std::int64_t v) { return v; }
};
template <>
struct Reader<std::int32_t> {
  static std::int64_t get(std::int32_t v) { return v; }
};

template <class I, class F>
I saturating_cast(F v) {
  if (std::isnan(v)) return 0;
  // -min() is 2^63 or 2^31, exact in float and double; anything at or beyond it saturates.
  constexpr F hi = -static_cast<F>(std::numeric_limits<I>::min());
  if (v >= hi) return std::numeric_limits<I>::max();
  if (v <= -hi) return std::numeric_limits<I>::min();
  return static_cast<I>(v);  // truncates toward zero
}

template <class To, class W>
To write(W w) {
  if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16::from_float(static_cast<float>(w));
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half::from_float(static_cast<float>(w));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<W>) {
    return saturating_cast<To>(w);
  } else {
    // Integer narrowing wraps modulo 2^32 (defined since C++20), as torch does.
    return static_cast<To>(w);
  }
}

template <class From, class To>
void convert_typed(const void* src, void* dst, std::size_t n) {
  if constexpr (std::is_same_v<From, To>) {
    if (src != dst) std::memmove(dst, src, n * sizeof(From));
  } else {
    const auto* s = static_cast<const From*>(src);
    auto* d = static_cast<To*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = write<To>(Reader<From>::get(s[i]));
  }
}

template <class From>
void convert_from(const void* src, void* dst, DType to, std::size_t n) {
  switch (to) {
    case DType::f32:
      return convert_typed<From, float>(src, dst, n);
    case DType::f64:
      return convert_typed<From, double>(src, dst, n);
    case DType::bf16:
      return convert_typed<From, BFloat16>(src, dst, n);
    case DType::f16:
      return convert_typed<From, Half>(src, dst, n);
    case DType::i64:
      return convert_typed<From, std::int64_t>(src, dst, n);
    case DType::i32:
      return convert_typed<From, std::int32_t>(src, dst, n);
  }
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, std::size_t n) {
  if (n == 0) return;
  switch (from) {
    case DType::f32:
      return convert_from<float>(src, dst, to, n);
    case DType::f64:
      return convert_from<double>(src, dst, to, n);
    case DType::bf16:
      return convert_from<BFloat16>(src, dst, to, n);
    case DType::f16:
      return convert_from<Half>(src, dst, to, n);
    case DType::i64:
      return convert_from<std::int64_t>(src, dst, to, n);
    case DType::i32:
      return convert_from<std::int32_t>(src, dst, to, n);
  }
}

}  // namespace ranksim::runtime

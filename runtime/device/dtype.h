// DType: the element types a ranksim tensor can hold, and the exact conversions between them.
//
// Six types, as torch names them: f32, f64, bf16, f16, i64, i32. bf16 and f16 are stored as their
// 16-bit IEEE-style patterns (BFloat16, Half); arithmetic on them happens in f32, as tensor cores
// do, and a result is rounded back once. Every rounding to bf16 or f16 is round-to-nearest-even:
// ties go to the even pattern, values past the largest finite number become infinity of the same
// sign (exactly as IEEE 754 rounding defines overflow), f16 subnormals are produced and read
// exactly, and a NaN stays a NaN (quiet, sign kept). Widening (bf16/f16 -> f32) is exact.
//
// Names: dtype_name() gives torch's short name ("f32", "bf16"), safetensors_name() the name the
// safetensors header uses ("F32", "BF16"). All functions are pure and thread-safe.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

namespace ranksim::runtime {

enum class DType : std::uint8_t { f32, f64, bf16, f16, i64, i32 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32};

std::size_t dtype_size(DType dtype);                          // bytes per element
bool is_floating(DType dtype);                                // f32, f64, bf16, f16
const char* dtype_name(DType dtype);                          // "f32", "f64", "bf16", "f16", "i64", "i32"
const char* safetensors_name(DType dtype);                    // "F32", "F64", "BF16", "F16", "I64", "I32"
std::optional<DType> dtype_from_name(std::string_view name);  // inverse of dtype_name
std::optional<DType> dtype_from_safetensors_name(std::string_view name);
std::ostream& operator<<(std::ostream& os, DType dtype);

// Bit-level conversions (round-to-nearest-even on the narrowing side). The bf16 pair is inline:
// reductions of bf16 buffers call it per element.
inline std::uint16_t f32_to_bf16_bits(float value) {
  const auto x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every mantissa bit and make it an infinity; force the quiet bit.
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  }
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry out of the
  // mantissa correctly bumps the exponent, up to infinity.
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16);
}
inline float bf16_bits_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}
std::uint16_t f32_to_f16_bits(float value);
float f16_bits_to_f32(std::uint16_t bits);

// The storage types of bf16 and f16 elements. They are distinct types (not bare uint16_t) so that
// Tensor::data<T>() can check T against the tensor's dtype.
struct BFloat16 {
  std::uint16_t bits = 0;
  static BFloat16 from_float(float value) { return BFloat16{f32_to_bf16_bits(value)}; }
  float to_float() const { return bf16_bits_to_f32(bits); }
};
struct Half {
  std::uint16_t bits = 0;
  static Half from_float(float value) { return Half{f32_to_f16_bits(value)}; }
  float to_float() const { return f16_bits_to_f32(bits); }
};

// dtype_of<T>: the DType whose elements are stored as T.
template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Converts n contiguous elements from src (of type from) into dst (of type to).
// Floating -> bf16/f16 goes through f32 (as torch does), rounding to nearest even.
// Floating -> integer truncates toward zero and saturates at the integer type's range; NaN gives 0
// (C++ leaves these cases undefined; a simulator must not).
// REQUIRES: src and dst do not overlap unless src == dst and from == to.
void convert_elements(const void* src, DType from, void* dst, DType to, std::size_t n);

}  // namespace ranksim::runtime

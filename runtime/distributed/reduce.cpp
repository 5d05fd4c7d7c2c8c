#include "runtime/distributed/reduce.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace ranksim::runtime {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::AVG:
      return "AVG";
    case ReduceOp::MAX:
      return "MAX";
    case ReduceOp::MIN:
      return "MIN";
    case ReduceOp::PROD:
      return "PROD";
  }
  return "?";
}

namespace {

struct Sum {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
// NaN propagates, as in torch.maximum / NCCL's max on IEEE values.
struct Max {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return a < b ? b : a;
  }
};
struct Min {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
    }
    return b < a ? b : a;
  }
};

template <class T, class Op>
void combine(std::byte* dst, const std::byte* src, int64_t count) {
  auto* d = reinterpret_cast<T*>(dst);
  const auto* s = reinterpret_cast<const T*>(src);
  const Op op;
  if constexpr (std::is_same_v<T, BFloat16>) {
    for (int64_t k = 0; k < count; ++k)
      d[k].bits = f32_to_bf16_bits(op(bf16_bits_to_f32(d[k].bits), bf16_bits_to_f32(s[k].bits)));
  } else if constexpr (std::is_same_v<T, Half>) {
    for (int64_t k = 0; k < count; ++k) d[k] = T::from_float(op(d[k].to_float(), s[k].to_float()));
  } else {
    for (int64_t k = 0; k < count; ++k) d[k] = op(d[k], s[k]);
  }
}

template <class Op>
ReduceKernel kernel_for(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return combine<float, Op>;
    case DType::f64:
      return combine<double, Op>;
    case DType::bf16:
      return combine<BFloat16, Op>;
    case DType::f16:
      return combine<Half, Op>;
    case DType::i64:
      return combine<int64_t, Op>;
    case DType::i32:
      return combine<int32_t, Op>;
  }
  return nullptr;
}

template <class T>
void divide(std::byte* data, int64_t count, int64_t divisor) {
  auto* d = reinterpret_cast<T*>(data);
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
    const float div = static_cast<float>(divisor);
    for (int64_t k = 0; k < count; ++k) d[k] = T::from_float(d[k].to_float() / div);
  } else if constexpr (std::is_floating_point_v<T>) {
    const T div = static_cast<T>(divisor);
    for (int64_t k = 0; k < count; ++k) d[k] = d[k] / div;
  } else {
    for (int64_t k = 0; k < count; ++k) d[k] = static_cast<T>(d[k] / divisor);
  }
}

}  // namespace

ReduceKernel reduce_kernel(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:
      return kernel_for<Sum>(dtype);
    case ReduceOp::MAX:
      return kernel_for<Max>(dtype);
    case ReduceOp::MIN:
      return kernel_for<Min>(dtype);
    case ReduceOp::PROD:
      return kernel_for<Prod>(dtype);
  }
  return nullptr;
}

void divide_elements(std::byte* data, DType dtype, int64_t count, int64_t divisor) {
  switch (dtype) {
    case DType::f32:
      return divide<float>(data, count, divisor);
    case DType::f64:
      return divide<double>(data, count, divisor);
    case DType::bf16:
      return divide<BFloat16>(data, count, divisor);
    case DType::f16:
      return divide<Half>(data, count, divisor);
    case DType::i64:
      return divide<int64_t>(data, count, divisor);
    case DType::i32:
      return divide<int32_t>(data, count, divisor);
  }
}

}  // namespace ranksim::runtime

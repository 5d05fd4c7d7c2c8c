// Device kernels written once for two compilers: the contract every kernel follows, and the
// helpers they share (element access in f32/bf16/f16, math, lanes). runtime/device/device.h
// launches them.
//
// A kernel is a struct of device pointers and sizes with
//     static constexpr bool kCooperative;   // false: one element per item; true: one row per item
//     template <class Lanes> RANKSIM_HD void operator()(std::int64_t item, const Lanes& lanes) const;
// run once for every item in [0, n). It is trivially copyable (the launch copies it to the GPU).
// The CUDA device (runtime/device/cuda/, nvcc) runs items on GPU threads; the emulated device
// (runtime/device/emulated_device.h, the host compiler) runs them one after the other on the CPU.
// So the arithmetic tested by `ctest` on a laptop is the arithmetic the GPU runs; only the
// launch, the lanes' reductions and cuBLAS differ.
//
// Elementwise kernels (kCooperative = false) do one element per item. Row kernels
// (kCooperative = true) give each item -- a row -- a group of lanes: a warp of 32 threads on the
// GPU, each taking columns lane, lane + width, ... and combining partial sums with lanes.sum();
// on the CPU one lane (width 1, sum(x) = x), so every sum runs in increasing index order as the
// CPU loops do.
//
// Kernels live beside their math, not here: runtime/tensor/ops_kernels.h holds the ops' (of
// runtime/tensor/ops.h), and each layer above the runtime keeps its own in its folder. This
// header holds only the device's own: the strided copy and the emulated device's GEMM.
//
// Storage dtypes: f32, bf16 and f16, computed in f32 (runtime/tensor/ops.h's contract); bf16 and
// f16 are rounded once, to nearest even, when stored. Index tensors arrive as i64.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/device/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define RANKSIM_HD __host__ __device__
#else
#define RANKSIM_HD
#endif

namespace ranksim::runtime::kernels {

using i64 = std::int64_t;

constexpr int kMaxDims = 8;  // of a strided copy

// --- element access -------------------------------------------------------------------------

RANKSIM_HD inline std::uint32_t float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

RANKSIM_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// runtime/device/dtype.h's f32_to_bf16_bits, for both compilers.
RANKSIM_HD inline std::uint16_t to_bf16(float value) {
  const std::uint32_t x = float_bits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16);
}

RANKSIM_HD inline std::uint16_t to_f16(float value) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(value));
#else
  return f32_to_f16_bits(value);
#endif
}

RANKSIM_HD inline float from_f16(std::uint16_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return f16_bits_to_f32(bits);
#endif
}

// Element i of a buffer of dtype dt (f32, bf16 or f16) as f32.
RANKSIM_HD inline float load(const void* p, DType dt, i64 i) {
  if (dt == DType::f32) return static_cast<const float*>(p)[i];
  const std::uint16_t b = static_cast<const std::uint16_t*>(p)[i];
  if (dt == DType::bf16) return bits_float(static_cast<std::uint32_t>(b) << 16);
  return from_f16(b);
}

// Stores v as element i of a buffer of dtype dt, rounded to nearest even.
RANKSIM_HD inline void store(void* p, DType dt, i64 i, float v) {
  if (dt == DType::f32) {
    static_cast<float*>(p)[i] = v;
  } else if (dt == DType::bf16) {
    static_cast<std::uint16_t*>(p)[i] = to_bf16(v);
  } else {
    static_cast<std::uint16_t*>(p)[i] = to_f16(v);
  }
}

RANKSIM_HD inline float exp_f(float x) { return expf(x); }
RANKSIM_HD inline float log_f(float x) { return logf(x); }
RANKSIM_HD inline float tanh_f(float x) { return tanhf(x); }
RANKSIM_HD inline float sqrt_f(float x) { return sqrtf(x); }
RANKSIM_HD inline float max_f(float a, float b) { return a < b ? b : a; }  // std::max's order
RANKSIM_HD inline float min_f(float a, float b) { return b < a ? b : a; }  // std::min's order
RANKSIM_HD inline float log1p_f(float x) { return log1pf(x); }
RANKSIM_HD inline float fmax_f(float a, float b) { return fmaxf(a, b); }  // std::fmax: NaN ignored
RANKSIM_HD inline double exp_d(double x) { return exp(x); }
RANKSIM_HD inline double log_d(double x) { return log(x); }
RANKSIM_HD inline double max_d(double a, double b) { return a < b ? b : a; }  // std::max's order

// One lane: the CPU's view of a row kernel.
struct SerialLanes {
  static constexpr int lane = 0;
  static constexpr int width = 1;
  RANKSIM_HD float sum(float x) const { return x; }
  RANKSIM_HD double sum(double x) const { return x; }
  RANKSIM_HD float max(float x) const { return x; }
  RANKSIM_HD double max(double x) const { return x; }
  // Lane src's x, for every lane (src < width).
  RANKSIM_HD float broadcast(float x, int) const { return x; }
};

// --- the device's own kernels --------------------------------------------------------------

// dst (strided, dst_dtype) = src (strided, src_dtype): contiguous(), cat, permuted gathers.
// item: the row-major index into sizes. Any of f32/bf16/f16 on either side; raw copies of 8-byte
// (i64) elements when both dtypes are i64.
struct CopyKernel {
  static constexpr bool kCooperative = false;
  const void* src;
  DType src_dtype;
  void* dst;
  DType dst_dtype;
  int ndim;
  i64 sizes[kMaxDims];
  i64 src_strides[kMaxDims];
  i64 dst_strides[kMaxDims];
  i64 src_offset;
  i64 dst_offset;

  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    i64 s = src_offset, d = dst_offset, rest = item;
    for (int k = ndim - 1; k >= 0; --k) {
      const i64 idx = rest % sizes[k];
      rest /= sizes[k];
      s += idx * src_strides[k];
      d += idx * dst_strides[k];
    }
    if (src_dtype == DType::i64) {
      static_cast<i64*>(dst)[d] = static_cast<const i64*>(src)[s];
    } else {
      store(dst, dst_dtype, d, load(src, src_dtype, s));
    }
  }
};

// C[b] [m, n] = op(A[b]) op(B[b]), row-major, for the emulated device (the GPU uses cuBLAS).
// A stored [m, k] ([k, m] when ta), B [k, n] ([n, k] when tb); each element's sum runs over
// kk = 0 .. k-1 in order, as runtime::matmul's.
struct GemmKernel {
  static constexpr bool kCooperative = false;
  const void* a;
  const void* b;
  void* c;
  DType dtype;
  i64 m, n, k;
  bool ta, tb;
  i64 stride_a, stride_b, stride_c;
  template <class L>
  RANKSIM_HD void operator()(i64 item, const L&) const {
    const i64 batch = item / (m * n), rest = item % (m * n);
    const i64 i = rest / n, j = rest % n;
    const i64 ao = batch * stride_a, bo = batch * stride_b;
    float acc = 0.0f;
    for (i64 kk = 0; kk < k; ++kk) {
      const float x = load(a, dtype, ao + (ta ? kk * m + i : i * k + kk));
      const float y = load(b, dtype, bo + (tb ? j * k + kk : kk * n + j));
      acc = acc + x * y;
    }
    store(c, dtype, batch * stride_c + i * n + j, acc);
  }
};

}  // namespace ranksim::runtime::kernels

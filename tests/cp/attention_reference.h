// The float64 reference the block-attention tests (tests/cp/attention_*_test.cpp) check
// cp/attention.h against: full softmax attention over an explicit mask built from positions,
// segments and windows, with gradients from the full softmax Jacobian (not the kernel's
// D = rowsum(dO * O) shortcut); the tolerances those comparisons use; and the inputs they share.
//
// Tolerances. Inputs are clamp(randn, -1, 1) (TransformerEngine's procedure), so |q|, |k|, |v|,
// |dout| <= 1 and |s| <= scale * d = sqrt(d). With u = 2^-24 (f32 arithmetic, also used for bf16
// and f16 inputs), a score's dot product errs by at most d*u*|s| <= d^1.5 u, which exp turns into
// the same relative error of each weight; the softmax and output sums over tk keys add tk*u. So
// out and lse (|out| <= 1) are within (d^1.5 + tk + 8) u; we allow 4x that. Gradients sum over tq
// query rows as well and scale with their own magnitude, so their bound uses tk + tq and the
// largest reference value. bf16/f16 inputs are exact in f32 and the reference reads the rounded
// values, so the only extra error is the one final rounding of each output (2^-8 relative for
// bf16, 2^-11 for f16); gradients also see out's rounding inside D = rowsum(dO * O), an error of
// at most that relative size of |D| <= 1 per row, which we cover with twice the rounding bound
// times the largest gradient. f64 runs use 1e-12 (about 2^-40: many orders above f64 rounding for
// these sizes, many below any real error).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cp/attention.h"
#include "cp/partition.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"

namespace ranksim::cp::testing {

using runtime::DType;
using runtime::Shape;
using i64 = std::int64_t;

inline constexpr double kU32 = 0x1p-24;
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// clamp(randn, -1, 1) rounded to dtype.
inline Tensor rnd(const Shape& shape, std::uint64_t seed, DType dtype) {
  std::vector<double> v = vals(Tensor::randn(shape, seed, 0.0, 1.0, DType::f64));
  for (double& x : v) x = std::clamp(x, -1.0, 1.0);
  return Tensor::from_vector(v, shape, dtype);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// --- The float64 reference --------------------------------------------------------------------

struct Problem {
  i64 tq, tk, hq, hkv, d, dv;
  TokenInfo qt, kt;
  AttentionOptions opts;
  double scale() const { return opts.softmax_scale.value_or(1.0 / std::sqrt(double(d))); }
};

// The mask, spelled out from the contract: same real sequence, then causal, then the window.
inline bool ref_sees(const Problem& p, i64 i, i64 k) {
  const i64 qs = p.qt.segment[size_t(i)], ks = p.kt.segment[size_t(k)];
  if (qs < 0 || ks < 0 || qs != ks) return false;
  const i64 ahead = p.kt.position[size_t(k)] - p.qt.position[size_t(i)];
  if (p.opts.causal && ahead > 0) return false;
  if (!p.opts.causal && p.opts.window_right != -1 && ahead > p.opts.window_right) return false;
  if (p.opts.window_left != -1 && -ahead > p.opts.window_left) return false;
  return true;
}

struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};

// q [tq, hq, d], k [tk, hkv, d], v [tk, hkv, dv], dout [tq, hq, dv] as flat row-major vectors.
inline Ref reference(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                     const std::vector<double>& v, const std::vector<double>& dout) {
  Ref r;
  r.out.assign(size_t(p.tq * p.hq * p.dv), 0.0);
  r.lse.assign(size_t(p.hq * p.tq), -kInf);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  const i64 group = p.hq / p.hkv;
  auto Q = [&](i64 i, i64 j, i64 c) { return q[size_t((i * p.hq + j) * p.d + c)]; };
  auto K = [&](i64 t, i64 h, i64 c) { return k[size_t((t * p.hkv + h) * p.d + c)]; };
  auto V = [&](i64 t, i64 h, i64 c) { return v[size_t((t * p.hkv + h) * p.dv + c)]; };
  auto DO = [&](i64 i, i64 j, i64 c) { return dout[size_t((i * p.hq + j) * p.dv + c)]; };
  for (i64 j = 0; j < p.hq; ++j) {
    const i64 h = j / group;
    for (i64 i = 0; i < p.tq; ++i) {
      std::vector<double> s(size_t(p.tk), -kInf);
      double mx = -kInf;
      for (i64 t = 0; t < p.tk; ++t) {
        if (!ref_sees(p, i, t)) continue;
        double dot = 0;
        for (i64 c = 0; c < p.d; ++c) dot += Q(i, j, c) * K(t, h, c);
        s[size_t(t)] = p.scale() * dot;
        mx = std::max(mx, s[size_t(t)]);
      }
      if (mx == -kInf) continue;
      double z = 0;
      for (i64 t = 0; t < p.tk; ++t) z += std::exp(s[size_t(t)] - mx);
      std::vector<double> prob(size_t(p.tk));
      for (i64 t = 0; t < p.tk; ++t) prob[size_t(t)] = std::exp(s[size_t(t)] - mx) / z;
      r.lse[size_t(j * p.tq + i)] = mx + std::log(z);
      for (i64 c = 0; c < p.dv; ++c) {
        double o = 0;
        for (i64 t = 0; t < p.tk; ++t) o += prob[size_t(t)] * V(t, h, c);
        r.out[size_t((i * p.hq + j) * p.dv + c)] = o;
      }
      // Gradients through the softmax Jacobian dP_t/ds_u = P_t (delta_tu - P_u).
      std::vector<double> dprob(size_t(p.tk), 0.0);
      for (i64 t = 0; t < p.tk; ++t) {
        for (i64 c = 0; c < p.dv; ++c) dprob[size_t(t)] += DO(i, j, c) * V(t, h, c);
      }
      for (i64 t = 0; t < p.tk; ++t) {
        double ds = 0;
        for (i64 u = 0; u < p.tk; ++u) {
          ds += dprob[size_t(u)] * prob[size_t(u)] * ((u == t ? 1.0 : 0.0) - prob[size_t(t)]);
        }
        for (i64 c = 0; c < p.d; ++c) {
          r.dq[size_t((i * p.hq + j) * p.d + c)] += p.scale() * ds * K(t, h, c);
          r.dk[size_t((t * p.hkv + h) * p.d + c)] += p.scale() * ds * Q(i, j, c);
        }
        for (i64 c = 0; c < p.dv; ++c) {
          r.dv[size_t((t * p.hkv + h) * p.dv + c)] += prob[size_t(t)] * DO(i, j, c);
        }
      }
    }
  }
  return r;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// got vs want element by element: |got - want| <= abs + rel * |want|; -inf must match exactly.
inline void expect_close(const Tensor& got_t, const std::vector<double>& want, double abs, double rel,
                         const std::string& what) {
  const std::vector<double> got = vals(got_t);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " element " << i << " is NaN";
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " element " << i;
      continue;
    }
    ASSERT_LE(std::fabs(got[i] - want[i]), abs + rel * std::fabs(want[i]))
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

inline double f32_bound(double d, double n) { return 4.0 * (d * std::sqrt(d) + n + 8.0) * kU32; }

inline double rounding_of(DType t) {
  switch (t) {
    case DType::bf16:
      return 0x1p-8;
    case DType::f16:
      return 0x1p-11;
    default:
      return 0.0;
  }
}

// THD tokens: sequences of 5, 0, 7 and 7 real tokens padded to multiples of 4; padding is -1.
inline TokenInfo thd_tokens(i64 n) {
  const std::vector<i64> cu = {0, 5, 5, 12, 19};
  const std::vector<i64> pad = thd_padded_cu_seqlens(cu, 2);  // [0, 8, 8, 16, 24]
  TokenInfo t{thd_position_ids(pad), thd_segment_ids(cu, pad)};
  EXPECT_EQ(t.size(), n);
  return t;
}

}  // namespace ranksim::cp::testing

// Block attention against an independent float64 reference written here: full softmax attention
// over an explicit mask built from positions, segments and windows, with gradients from the full
// softmax Jacobian (not the kernel's D = rowsum(dO * O) shortcut), plus central finite differences
// of the kernel itself in f64. Then the CP properties the comm types rely on: forward per key block
// + merge == full attention, backward per block with the final out/lse summed == full backward,
// and TransformerEngine's p2p causal decomposition (diagonal / lower / upper steps on the
// DualChunkSwap layout, spec B1) for cp = 2 and 4, BSHD and THD, to f64 precision.
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
#include "cp/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cp/partition.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using runtime::DType;
using runtime::Shape;
using ::testing::HasSubstr;
using i64 = std::int64_t;

constexpr double kU32 = 0x1p-24;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// clamp(randn, -1, 1) rounded to dtype.
Tensor rnd(const Shape& shape, std::uint64_t seed, DType dtype) {
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

struct RecordingSink : runtime::CostSink {
  std::vector<runtime::OpCost> charges;
  void charge(const runtime::OpCost& c) override { charges.push_back(c); }
};

// --- The float64 reference --------------------------------------------------------------------

struct Problem {
  i64 tq, tk, hq, hkv, d, dv;
  TokenInfo qt, kt;
  AttentionOptions opts;
  double scale() const { return opts.softmax_scale.value_or(1.0 / std::sqrt(double(d))); }
};

// The mask, spelled out from the contract: same real sequence, then causal, then the window.
bool ref_sees(const Problem& p, i64 i, i64 k) {
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
Ref reference(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
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

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// got vs want element by element: |got - want| <= abs + rel * |want|; -inf must match exactly.
void expect_close(const Tensor& got_t, const std::vector<double>& want, double abs, double rel,
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

double f32_bound(double d, double n) { return 4.0 * (d * std::sqrt(d) + n + 8.0) * kU32; }

double rounding_of(DType t) {
  switch (t) {
    case DType::bf16:
      return 0x1p-8;
    case DType::f16:
      return 0x1p-11;
    default:
      return 0.0;
  }
}

// --- One block against the reference ----------------------------------------------------------

struct Case {
  std::string name;
  i64 tq, tk, hq, hkv, d, dv;
  bool causal;
  i64 wl, wr;
  bool thd;  // several packed sequences with padding instead of one sequence
  DType dtype;
};

// THD tokens: sequences of 5, 0, 7 and 7 real tokens padded to multiples of 4; padding is -1.
TokenInfo thd_tokens(i64 n) {
  const std::vector<i64> cu = {0, 5, 5, 12, 19};
  const std::vector<i64> pad = thd_padded_cu_seqlens(cu, 2);  // [0, 8, 8, 16, 24]
  TokenInfo t{thd_position_ids(pad), thd_segment_ids(cu, pad)};
  EXPECT_EQ(t.size(), n);
  return t;
}

Problem make_problem(const Case& c) {
  Problem p{c.tq, c.tk, c.hq, c.hkv, c.d, c.dv, {}, {}, {}};
  if (c.thd) {
    p.qt = thd_tokens(c.tq);
    p.kt = thd_tokens(c.tk);
  } else {
    p.qt = TokenInfo::sequence(c.tq, c.tk - c.tq);  // queries are the last tq of tk positions
    p.kt = TokenInfo::sequence(c.tk);
  }
  p.opts.causal = c.causal;
  p.opts.window_left = c.wl;
  p.opts.window_right = c.wr;
  return p;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AttentionVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionVsReference, ForwardAndBackward) {
  const Case& c = GetParam();
  const Problem p = make_problem(c);
  const Tensor q = rnd({c.tq, c.hq, c.d}, 1, c.dtype), k = rnd({c.tk, c.hkv, c.d}, 2, c.dtype),
               v = rnd({c.tk, c.hkv, c.dv}, 3, c.dtype), dout = rnd({c.tq, c.hq, c.dv}, 4, c.dtype);
  const Ref ref = reference(p, vals(q), vals(k), vals(v), vals(dout));

  const AttentionResult fwd = attention_forward(q, k, v, p.qt, p.kt, p.opts);
  EXPECT_EQ(fwd.out.dtype(), c.dtype);
  EXPECT_EQ(fwd.out.shape(), (Shape{c.tq, c.hq, c.dv}));
  EXPECT_EQ(fwd.lse.dtype(), c.dtype == DType::f64 ? DType::f64 : DType::f32);
  EXPECT_EQ(fwd.lse.shape(), (Shape{c.hq, c.tq}));
  const bool f64 = c.dtype == DType::f64;
  const double abs = f64 ? 1e-12 : f32_bound(double(c.d), double(c.tk));
  const double rel = rounding_of(c.dtype);
  expect_close(fwd.out, ref.out, abs, rel, c.name + " out");
  expect_close(fwd.lse, ref.lse, abs, 0.0, c.name + " lse");

  const AttentionGrads g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, p.qt, p.kt, p.opts);
  EXPECT_EQ(g.dq.dtype(), c.dtype);
  EXPECT_EQ(g.dk.shape(), k.shape());
  EXPECT_EQ(g.dv.shape(), v.shape());
  const std::vector<std::pair<const Tensor*, const std::vector<double>*>> grads = {
      {&g.dq, &ref.dq}, {&g.dk, &ref.dk}, {&g.dv, &ref.dv}};
  const char* names[] = {" dq", " dk", " dv"};
  for (size_t n = 0; n < grads.size(); ++n) {
    const double scale = std::max(1.0, max_abs(*grads[n].second));
    const double gabs =
        f64 ? 1e-12 * scale
            : f32_bound(double(c.d), double(c.tk + c.tq)) * scale + 2.0 * rel * scale;
    expect_close(*grads[n].first, *grads[n].second, gabs, rel, c.name + names[n]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, AttentionVsReference,
    ::testing::Values(
        Case{"no_mask", 24, 24, 2, 2, 8, 8, false, -1, -1, false, DType::f32},
        Case{"causal", 24, 24, 2, 2, 8, 8, true, -1, -1, false, DType::f32},
        Case{"causal_f64", 40, 40, 2, 2, 8, 8, true, -1, -1, false, DType::f64},
        Case{"causal_cross_tq_lt_tk", 9, 24, 2, 2, 8, 8, true, -1, -1, false, DType::f32},
        Case{"thd_padding", 24, 24, 2, 2, 8, 8, false, -1, -1, true, DType::f32},
        Case{"thd_padding_causal", 24, 24, 3, 3, 8, 8, true, -1, -1, true, DType::f32},
        Case{"swa_left_causal", 40, 40, 2, 2, 8, 8, true, 5, 0, false, DType::f32},
        Case{"swa_left_right", 40, 40, 2, 2, 8, 8, false, 5, 3, false, DType::f32},
        Case{"swa_right_only", 24, 24, 2, 2, 8, 8, false, -1, 2, false, DType::f32},
        Case{"swa_thd", 24, 24, 2, 2, 8, 8, false, 2, 1, true, DType::f32},
        Case{"gqa4_causal", 24, 24, 8, 2, 8, 8, true, -1, -1, false, DType::f32},
        Case{"gqa2_swa", 24, 24, 4, 2, 8, 8, false, 4, 4, false, DType::f32},
        Case{"mla_12_8_causal", 24, 24, 2, 2, 12, 8, true, -1, -1, false, DType::f32},
        Case{"mla_12_8_swa_f64", 24, 24, 2, 2, 12, 8, true, 6, 0, false, DType::f64},
        Case{"bf16_causal", 40, 40, 2, 2, 16, 16, true, -1, -1, false, DType::bf16},
        Case{"bf16_gqa_thd", 24, 24, 4, 2, 16, 16, true, -1, -1, true, DType::bf16},
        Case{"bf16_mla_no_mask", 24, 24, 2, 2, 12, 8, false, -1, -1, false, DType::bf16},
        Case{"f16_swa", 40, 40, 2, 2, 16, 16, false, 7, 7, false, DType::f16},
        Case{"more_than_a_tile", 70, 70, 2, 1, 8, 8, true, 20, 0, false, DType::f32}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.name; });

// --- Finite differences of the kernel in f64 --------------------------------------------------

TEST(AttentionBackward, MatchesFiniteDifferencesOfTheForward) {
  // THD with padding, a window and GQA, so every masking path is differentiated.
  Problem p{24, 24, 4, 2, 4, 3, thd_tokens(24), thd_tokens(24), {}};
  p.opts.causal = true;
  p.opts.window_left = 4;
  p.opts.softmax_scale = 0.7;
  const Tensor q = rnd({24, 4, 4}, 11, DType::f64), k = rnd({24, 2, 4}, 12, DType::f64),
               v = rnd({24, 2, 3}, 13, DType::f64), dout = rnd({24, 4, 3}, 14, DType::f64);
  const std::vector<double> w = vals(dout);
  auto loss = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
    const std::vector<double> o = vals(attention_forward(qq, kk, vv, p.qt, p.kt, p.opts).out);
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += w[i] * o[i];
    return l;
  };
  const AttentionResult fwd = attention_forward(q, k, v, p.qt, p.kt, p.opts);
  const AttentionGrads g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, p.qt, p.kt, p.opts);
  const double h = 1e-6;
  auto check = [&](const Tensor& x, const Tensor& grad, int which) {
    const std::vector<double> base = vals(x), an = vals(grad);
    for (size_t i = 0; i < base.size(); ++i) {
      std::vector<double> plus = base, minus = base;
      plus[i] += h;
      minus[i] -= h;
      const Tensor xp = Tensor::from_vector(plus, x.shape()),
                   xm = Tensor::from_vector(minus, x.shape());
      const double lp = which == 0 ? loss(xp, k, v) : which == 1 ? loss(q, xp, v) : loss(q, k, xp);
      const double lm = which == 0 ? loss(xm, k, v) : which == 1 ? loss(q, xm, v) : loss(q, k, xm);
      ASSERT_NEAR(an[i], (lp - lm) / (2 * h), 1e-7) << "input " << which << " element " << i;
    }
  };
  check(q, g.dq, 0);
  check(k, g.dk, 1);
  check(v, g.dv, 2);
}

// --- Rows that see nothing --------------------------------------------------------------------

TEST(AttentionEmptyRows, ZeroOutputMinusInfLseNoNaN) {
  // Queries 0-1: a segment absent from the keys; 2: padding; 3-4: causal, positions before every
  // key; 5: sees keys. Keys: one padding key, and segment 0 at positions 10..12.
  TokenInfo qt{{0, 1, 0, 3, 4, 11}, {7, 7, -1, 0, 0, 0}};
  TokenInfo kt{{10, 10, 11, 12}, {-1, 0, 0, 0}};
  AttentionOptions opts;
  opts.causal = true;
  const Tensor q = rnd({6, 2, 4}, 21, DType::f32), k = rnd({4, 2, 4}, 22, DType::f32),
               v = rnd({4, 2, 4}, 23, DType::f32), dout = rnd({6, 2, 4}, 24, DType::f32);
  const AttentionResult r = attention_forward(q, k, v, qt, kt, opts);
  for (i64 i = 0; i < 6; ++i) {
    for (i64 j = 0; j < 2; ++j) {
      if (i < 5) {
        EXPECT_EQ(r.lse.at({j, i}), -kInf) << i;
        for (i64 c = 0; c < 4; ++c) EXPECT_EQ(r.out.at({i, j, c}), 0.0);
      } else {
        EXPECT_TRUE(std::isfinite(r.lse.at({j, i})));
      }
    }
  }
  const AttentionGrads g = attention_backward(dout, q, k, v, r.out, r.lse, qt, kt, opts);
  for (double x : vals(g.dq)) EXPECT_FALSE(std::isnan(x));
  for (i64 c = 0; c < 4; ++c) {
    EXPECT_EQ(g.dq.at({0, 0, c}), 0.0);
    EXPECT_EQ(g.dq.at({2, 1, c}), 0.0);
    EXPECT_EQ(g.dk.at({0, 0, c}), 0.0);  // the padding key
    EXPECT_EQ(g.dv.at({0, 1, c}), 0.0);
    EXPECT_EQ(g.dk.at({3, 0, c}), 0.0);  // position 12 is after the only query that sees keys
  }
  // Merging a block that sees nothing anywhere changes nothing and makes no NaN; two such blocks
  // merge to lse -inf and out 0.
  const AttentionResult none =
      attention_forward(q, k, v, qt, TokenInfo{{0, 0, 0, 0}, {9, 9, 9, 9}}, opts);
  const AttentionResult m = merge_attention({r, none});
  EXPECT_TRUE(runtime::bitwise_equal(m.lse, r.lse));
  EXPECT_TRUE(runtime::bitwise_equal(m.out, r.out));
  const AttentionResult m2 = merge_attention({none, none});
  for (double x : vals(m2.lse)) EXPECT_EQ(x, -kInf);
  for (double x : vals(m2.out)) EXPECT_EQ(x, 0.0);
}

TEST(AttentionEmptyRows, EmptyBlocks) {
  // A rank can hold a key block or a query block with no tokens (THD with empty sequences).
  const Tensor q = rnd({3, 2, 4}, 25, DType::f32), k = Tensor::zeros({0, 1, 4}),
               v = Tensor::zeros({0, 1, 2});
  const TokenInfo qt = TokenInfo::sequence(3), none = TokenInfo::sequence(0);
  const AttentionResult r = attention_forward(q, k, v, qt, none);
  EXPECT_EQ(r.out.shape(), (Shape{3, 2, 2}));
  for (double x : vals(r.out)) EXPECT_EQ(x, 0.0);
  for (double x : vals(r.lse)) EXPECT_EQ(x, -kInf);
  const AttentionGrads g = attention_backward(r.out, q, k, v, r.out, r.lse, qt, none);
  EXPECT_EQ(g.dk.shape(), (Shape{0, 1, 4}));
  for (double x : vals(g.dq)) EXPECT_EQ(x, 0.0);
  const AttentionResult e =
      attention_forward(Tensor::zeros({0, 2, 4}), rnd({3, 1, 4}, 26, DType::f32),
                        rnd({3, 1, 2}, 27, DType::f32), none, qt);
  EXPECT_EQ(e.out.shape(), (Shape{0, 2, 2}));
  EXPECT_EQ(e.lse.shape(), (Shape{2, 0}));
}

// --- The CP decomposition over key blocks -----------------------------------------------------

struct BlockCase {
  std::string name;
  bool causal;
  i64 wl, wr;
  bool thd;
};

void PrintTo(const BlockCase& c, std::ostream* os) { *os << c.name; }

class KeyBlocks : public ::testing::TestWithParam<BlockCase> {};

TEST_P(KeyBlocks, MergedForwardAndSummedBackwardEqualFull) {
  const BlockCase& c = GetParam();
  const i64 t = 24, hq = 4, hkv = 2, d = 6, dv = 5;
  const TokenInfo tokens = c.thd ? thd_tokens(t) : TokenInfo::sequence(t);
  AttentionOptions opts;
  opts.causal = c.causal;
  opts.window_left = c.wl;
  opts.window_right = c.wr;
  const Tensor q = rnd({t, hq, d}, 31, DType::f64), k = rnd({t, hkv, d}, 32, DType::f64),
               v = rnd({t, hkv, dv}, 33, DType::f64), dout = rnd({t, hq, dv}, 34, DType::f64);
  const AttentionResult full = attention_forward(q, k, v, tokens, tokens, opts);
  const AttentionGrads gfull =
      attention_backward(dout, q, k, v, full.out, full.lse, tokens, tokens, opts);

  // Uneven blocks, the last of which many rows see nothing of under a causal mask.
  const std::vector<std::pair<i64, i64>> blocks = {{0, 5}, {5, 12}, {17, 7}};
  std::vector<AttentionResult> parts;
  for (auto [start, len] : blocks) {
    parts.push_back(attention_forward(q, k.narrow(0, start, len), v.narrow(0, start, len), tokens,
                                      tokens.slice(start, len), opts));
  }
  const AttentionResult merged = merge_attention(parts);
  expect_close(merged.out, vals(full.out), 1e-13, 0, c.name + " out");
  expect_close(merged.lse, vals(full.lse), 1e-13, 0, c.name + " lse");

  Tensor dq = Tensor::zeros({t, hq, d}, DType::f64);
  std::vector<Tensor> dks, dvs;
  for (auto [start, len] : blocks) {
    const AttentionGrads g =
        attention_backward(dout, q, k.narrow(0, start, len), v.narrow(0, start, len), merged.out,
                           merged.lse, tokens, tokens.slice(start, len), opts);
    add_rows_(dq, g.dq);
    dks.push_back(g.dk);
    dvs.push_back(g.dv);
  }
  expect_close(dq, vals(gfull.dq), 1e-13, 0, c.name + " dq");
  expect_close(runtime::cat(dks, 0), vals(gfull.dk), 1e-13, 0, c.name + " dk");
  expect_close(runtime::cat(dvs, 0), vals(gfull.dv), 1e-13, 0, c.name + " dv");
}

INSTANTIATE_TEST_SUITE_P(Masks, KeyBlocks,
                         ::testing::Values(BlockCase{"no_mask", false, -1, -1, false},
                                           BlockCase{"causal", true, -1, -1, false},
                                           BlockCase{"swa", false, 3, 2, false},
                                           BlockCase{"thd_causal", true, -1, -1, true},
                                           BlockCase{"thd_swa", true, 2, 0, true}),
                         [](const ::testing::TestParamInfo<BlockCase>& param_info) {
                           return param_info.param.name;
                         });

// --- TransformerEngine's p2p causal decomposition (spec B1) -----------------------------------

// Per rank: the local q/k/v/dout slices and token info, and what each rank produced.
struct Ring {
  i64 cp;
  std::vector<Tensor> q, k, v, dout;
  std::vector<TokenInfo> tokens;
  // Rows of the local layout that form the first / second chunk (all sequences for THD).
  std::vector<i64> first, second;
};

Tensor rows_of(const Tensor& x, const std::vector<i64>& rows) { return index_select(x, 0, rows); }

// Forward on rank r: step i holds the KV of s = (r - i) mod cp. Step 0 is the diagonal (causal on
// the local layout), steps 1..r the lower triangle (all q x first half of KV_s, no mask), later
// steps the upper triangle (second half of q x all of KV_s, no mask). LSE: step 0 initialises,
// lower steps merge every row, upper steps the second-half rows; outputs are corrected afterwards
// in step order.
AttentionResult ring_forward(const Ring& ring, i64 r, const AttentionOptions& causal,
                             const AttentionOptions& none) {
  std::vector<AttentionResult> parts;
  std::vector<Rows> where;
  const TokenInfo& me = ring.tokens[size_t(r)];
  for (i64 i = 0; i < ring.cp; ++i) {
    const size_t s = size_t((r - i + ring.cp) % ring.cp);
    const TokenInfo& kv = ring.tokens[s];
    if (i == 0) {
      parts.push_back(attention_forward(ring.q[size_t(r)], ring.k[s], ring.v[s], me, kv, causal));
      where.push_back(Rows::all());
    } else if (i <= r) {
      parts.push_back(attention_forward(ring.q[size_t(r)], rows_of(ring.k[s], ring.first),
                                        rows_of(ring.v[s], ring.first), me, kv.select(ring.first),
                                        none));
      where.push_back(Rows::all());
    } else {
      parts.push_back(attention_forward(rows_of(ring.q[size_t(r)], ring.second), ring.k[s],
                                        ring.v[s], me.select(ring.second), kv, none));
      where.push_back(Rows::list(ring.second));
    }
  }
  AttentionResult acc;
  acc.lse = parts[0].lse.clone();
  for (size_t i = 1; i < parts.size(); ++i) merge_lse_(acc.lse, parts[i].lse, where[i]);
  acc.out = Tensor::zeros(parts[0].out.shape(), parts[0].out.dtype());
  for (size_t i = 0; i < parts.size(); ++i) {
    add_corrected_out_(acc.out, acc.lse, parts[i].out, parts[i].lse, where[i]);
  }
  return acc;
}

// Backward on every rank: step i holds KV_s with s = (r + 1 + i) mod cp; i = cp-1 is the
// diagonal, cp-r-1 <= i < cp-1 the lower triangle (dK/dV only for KV_s's first half), the rest
// the upper triangle (dQ only for the second half). Each step uses the final out and lse.
// dKV accumulators start at zero and end on their owner, as TE's ring leaves them.
void ring_backward(const Ring& ring, const std::vector<AttentionResult>& fwd,
                   const AttentionOptions& causal, const AttentionOptions& none,
                   std::vector<Tensor>& dq, std::vector<Tensor>& dk, std::vector<Tensor>& dv) {
  for (i64 r = 0; r < ring.cp; ++r) {
    dq.push_back(Tensor::zeros(ring.q[size_t(r)].shape(), DType::f64));
    dk.push_back(Tensor::zeros(ring.k[size_t(r)].shape(), DType::f64));
    dv.push_back(Tensor::zeros(ring.v[size_t(r)].shape(), DType::f64));
  }
  for (i64 r = 0; r < ring.cp; ++r) {
    const size_t me = size_t(r);
    const TokenInfo& mine = ring.tokens[me];
    const Tensor &out = fwd[me].out, &lse = fwd[me].lse;
    for (i64 i = 0; i < ring.cp; ++i) {
      const size_t s = size_t((r + 1 + i) % ring.cp);
      const TokenInfo& kv = ring.tokens[s];
      if (i == ring.cp - 1) {
        const AttentionGrads g = attention_backward(ring.dout[me], ring.q[me], ring.k[s], ring.v[s],
                                                    out, lse, mine, kv, causal);
        add_rows_(dq[me], g.dq);
        add_rows_(dk[s], g.dk);
        add_rows_(dv[s], g.dv);
      } else if (i >= ring.cp - r - 1) {
        const AttentionGrads g = attention_backward(
            ring.dout[me], ring.q[me], rows_of(ring.k[s], ring.first),
            rows_of(ring.v[s], ring.first), out, lse, mine, kv.select(ring.first), none);
        add_rows_(dq[me], g.dq);
        add_rows_(dk[s], g.dk, Rows::list(ring.first));
        add_rows_(dv[s], g.dv, Rows::list(ring.first));
      } else {
        const AttentionGrads g = attention_backward(
            rows_of(ring.dout[me], ring.second), rows_of(ring.q[me], ring.second), ring.k[s],
            ring.v[s], rows_of(out, ring.second), index_select(lse, 1, ring.second),
            mine.select(ring.second), kv, none);
        add_rows_(dq[me], g.dq, Rows::list(ring.second));
        add_rows_(dk[s], g.dk);
        add_rows_(dv[s], g.dv);
      }
    }
  }
}

struct RingCase {
  i64 cp;
  bool thd;
};

void PrintTo(const RingCase& c, std::ostream* os) {
  *os << (c.thd ? "thd" : "bshd") << " cp " << c.cp;
}

class P2pCausal : public ::testing::TestWithParam<RingCase> {};

TEST_P(P2pCausal, MatchesFullCausalAttention) {
  const i64 cp = GetParam().cp;
  const bool thd = GetParam().thd;
  const i64 hq = 4, hkv = 2, d = 4, dv = 3;
  // BSHD: one sequence of 2*cp*3 tokens. THD: lengths 5, 0, 13, 2 padded for cp, with the
  // diagonal's causal mask taken per sequence from the global positions (the local layout keeps
  // each sequence's order, so this is the top-left causal mask TE applies to the local block).
  std::vector<i64> cu = {0, 5, 5, 18, 20}, pad;
  TokenInfo global;
  i64 total;
  if (thd) {
    pad = thd_padded_cu_seqlens(cu, cp);
    global = TokenInfo{thd_position_ids(pad), thd_segment_ids(cu, pad)};
    total = pad.back();
  } else {
    total = 2 * cp * 3;
    global = TokenInfo::sequence(total);
  }
  const Tensor q = rnd({total, hq, d}, 41, DType::f64), k = rnd({total, hkv, d}, 42, DType::f64),
               v = rnd({total, hkv, dv}, 43, DType::f64),
               dout = rnd({total, hq, dv}, 44, DType::f64);
  AttentionOptions causal, none;
  causal.causal = true;
  const AttentionResult full = attention_forward(q, k, v, global, global, causal);
  const AttentionGrads gfull =
      attention_backward(dout, q, k, v, full.out, full.lse, global, global, causal);

  auto part = [&](const Tensor& x, i64 r) {
    return thd ? thd_partition(x, 0, pad, cp, r) : bshd_partition(x, 0, cp, r);
  };
  Ring ring{cp, {}, {}, {}, {}, {}, {}, {}};
  for (i64 r = 0; r < cp; ++r) {
    ring.q.push_back(part(q, r));
    ring.k.push_back(part(k, r));
    ring.v.push_back(part(v, r));
    ring.dout.push_back(part(dout, r));
    if (thd) {
      ring.tokens.push_back(
          TokenInfo{thd_local_positions(pad, cp, r), thd_local_segments(cu, pad, cp, r)});
    } else {
      ring.tokens.push_back(TokenInfo::sequence(6));  // local positions: TE's top-left mask
    }
  }
  if (thd) {
    ring.first = thd_half_rows(pad, cp, ThdHalves::first);
    ring.second = thd_half_rows(pad, cp, ThdHalves::second);
  } else {
    ring.first = {0, 1, 2};
    ring.second = {3, 4, 5};
  }

  std::vector<AttentionResult> fwd;
  std::vector<Tensor> outs, lses;
  for (i64 r = 0; r < cp; ++r) {
    fwd.push_back(ring_forward(ring, r, causal, none));
    expect_close(fwd.back().out, vals(part(full.out, r)), 1e-14, 0,
                 "out rank " + std::to_string(r));
    const Tensor want_lse =
        thd ? thd_partition(full.lse, 1, pad, cp, r) : bshd_partition(full.lse, 1, cp, r);
    expect_close(fwd.back().lse, vals(want_lse), 1e-14, 0, "lse rank " + std::to_string(r));
    outs.push_back(fwd.back().out);
  }
  const Tensor global_out = thd ? thd_unpartition(outs, 0, pad) : bshd_unpartition(outs, 0);
  expect_close(global_out, vals(full.out), 1e-14, 0, "reassembled out");

  std::vector<Tensor> dqs, dks, dvs;
  ring_backward(ring, fwd, causal, none, dqs, dks, dvs);
  for (i64 r = 0; r < cp; ++r) {
    const std::string tag = " rank " + std::to_string(r);
    expect_close(dqs[size_t(r)], vals(part(gfull.dq, r)), 1e-14, 0, "dq" + tag);
    expect_close(dks[size_t(r)], vals(part(gfull.dk, r)), 1e-14, 0, "dk" + tag);
    expect_close(dvs[size_t(r)], vals(part(gfull.dv, r)), 1e-14, 0, "dv" + tag);
  }
}

INSTANTIATE_TEST_SUITE_P(CpSizes, P2pCausal,
                         ::testing::Values(RingCase{2, false}, RingCase{4, false},
                                           RingCase{2, true}, RingCase{4, true}),
                         [](const ::testing::TestParamInfo<RingCase>& param_info) {
                           return std::string(param_info.param.thd ? "thd" : "bshd") + "_cp" +
                                  std::to_string(param_info.param.cp);
                         });

// --- Merge helpers ----------------------------------------------------------------------------

TEST(Merge, LseRuleAndRowSubsets) {
  Tensor lse = Tensor::from_vector(std::vector<float>{0.f, 1.f, -INFINITY, 2.f}, {1, 4});
  merge_lse_(lse, Tensor::from_vector(std::vector<float>{0.f, -INFINITY}, {1, 2}),
             Rows::range(0, 2));
  EXPECT_FLOAT_EQ(float(lse.at({0, 0})), std::log(2.f));
  EXPECT_EQ(lse.at({0, 1}), 1.0);
  merge_lse_(lse, Tensor::from_vector(std::vector<float>{-INFINITY, 5.f}, {1, 2}),
             Rows::list({2, 3}));
  EXPECT_EQ(lse.at({0, 2}), -kInf);  // both -inf: stays -inf, not NaN
  EXPECT_NEAR(lse.at({0, 3}), 5.0 + std::log1p(std::exp(-3.0)), 1e-6);
}

TEST(Merge, CorrectedOutIntoBf16AccumulatorRoundsOnce) {
  // out_i * exp(lse_i - lse) computed in f32 and added into bf16: one rounding per addition.
  const Tensor out = Tensor::zeros({1, 1, 2}, DType::bf16);
  const Tensor lse = Tensor::from_vector(std::vector<float>{std::log(4.f)}, {1, 1});
  const Tensor part_out = Tensor::from_vector(std::vector<float>{1.f, 3.f}, {1, 1, 2});
  add_corrected_out_(out, lse, part_out, Tensor::from_vector(std::vector<float>{0.f}, {1, 1}));
  EXPECT_EQ(out.at({0, 0, 0}), 0.25);
  EXPECT_EQ(out.at({0, 0, 1}), 0.75);
}

TEST(Merge, Errors) {
  const Tensor lse = Tensor::zeros({2, 4});
  EXPECT_THAT(error_of([&] { merge_lse_(lse, Tensor::zeros({2, 3})); }), HasSubstr("part_lse"));
  EXPECT_THAT(error_of([&] {
                merge_lse_(lse, Tensor::zeros({2, 2}), Rows::range(3, 2));
              }),
              HasSubstr("rows [3, 5)"));
  EXPECT_THAT(error_of([&] {
                add_rows_(Tensor::zeros({4, 2}), Tensor::zeros({1, 2}), Rows::list({4}));
              }),
              HasSubstr("row 4"));
  EXPECT_THAT(error_of([] { merge_attention({}); }), HasSubstr("at least one"));
}

// --- Cost, shape-only mode, determinism, errors -----------------------------------------------

TEST(AttentionCost, VisiblePairsCountedExactly) {
  // Random metadata (positions out of order, padding, several segments) against brute force.
  std::uint64_t state = 99;
  auto next = [&](i64 n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return i64((state >> 33) % std::uint64_t(n));
  };
  for (int trial = 0; trial < 30; ++trial) {
    TokenInfo qt, kt;
    for (int i = 0; i < 17; ++i) {
      qt.position.push_back(next(20));
      qt.segment.push_back(next(4) - 1);
    }
    for (int i = 0; i < 23; ++i) {
      kt.position.push_back(next(20));
      kt.segment.push_back(next(4) - 1);
    }
    AttentionOptions opts;
    opts.causal = trial % 2 == 0;
    opts.window_left = trial % 3 == 0 ? -1 : next(6);
    opts.window_right = trial % 5 == 0 ? -1 : next(6);
    Problem p{17, 23, 1, 1, 1, 1, qt, kt, opts};
    i64 brute = 0;
    for (i64 i = 0; i < 17; ++i) {
      for (i64 k = 0; k < 23; ++k) brute += ref_sees(p, i, k) ? 1 : 0;
    }
    EXPECT_EQ(attention_visible_pairs(qt, kt, opts), brute) << "trial " << trial;
  }
}

TEST(AttentionCost, ChargesAndShapeOnlyMatch) {
  const i64 tq = 16, tk = 16, hq = 4, hkv = 2, d = 8;
  const TokenInfo tokens = TokenInfo::sequence(tq);
  AttentionOptions dense, causal;
  causal.causal = true;
  RecordingSink sink;
  runtime::ScopedCostSink guard(&sink);
  const Tensor q = rnd({tq, hq, d}, 51, DType::bf16), k = rnd({tk, hkv, d}, 52, DType::bf16),
               v = rnd({tk, hkv, d}, 53, DType::bf16);
  sink.charges.clear();
  const AttentionResult r = attention_forward(q, k, v, tokens, tokens, dense);
  ASSERT_EQ(sink.charges.size(), 1u);
  EXPECT_STREQ(sink.charges[0].op, "attention");
  EXPECT_EQ(sink.charges[0].flops, 4.0 * tq * tk * hq * d);  // the dense block
  EXPECT_EQ(sink.charges[0].bytes,
            2.0 * (tq * hq * d + 2 * tk * hkv * d + tq * hq * d) + 4.0 * hq * tq);
  EXPECT_EQ(sink.charges[0].dtype, DType::bf16);

  // Shape-only: same charges, shape-only results of the right shapes and dtypes.
  const Tensor qs = Tensor::shape_only(q.shape(), DType::bf16),
               ks = Tensor::shape_only(k.shape(), DType::bf16),
               vs = Tensor::shape_only(v.shape(), DType::bf16);
  for (const AttentionOptions& opts : {dense, causal}) {
    sink.charges.clear();
    const AttentionResult a = attention_forward(q, k, v, tokens, tokens, opts);
    const AttentionGrads ga =
        attention_backward(a.out, q, k, v, a.out, a.lse, tokens, tokens, opts);
    const AttentionResult b = attention_forward(qs, ks, vs, tokens, tokens, opts);
    const AttentionGrads gb =
        attention_backward(b.out, qs, ks, vs, b.out, b.lse, tokens, tokens, opts);
    ASSERT_EQ(sink.charges.size(), 4u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_STREQ(sink.charges[size_t(i)].op, sink.charges[size_t(i + 2)].op);
      EXPECT_EQ(sink.charges[size_t(i)].flops, sink.charges[size_t(i + 2)].flops);
      EXPECT_EQ(sink.charges[size_t(i)].bytes, sink.charges[size_t(i + 2)].bytes);
    }
    EXPECT_STREQ(sink.charges[1].op, "attention_backward");
    const double pairs = opts.causal ? tq * (tq + 1) / 2.0 : double(tq * tk);
    EXPECT_EQ(sink.charges[0].flops, 2.0 * pairs * hq * (d + d));
    EXPECT_EQ(sink.charges[1].flops, 2.0 * pairs * hq * (3 * d + 2 * d));
    EXPECT_FALSE(b.out.has_data());
    EXPECT_EQ(b.out.shape(), a.out.shape());
    EXPECT_EQ(b.out.dtype(), DType::bf16);
    EXPECT_EQ(b.lse.shape(), a.lse.shape());
    EXPECT_EQ(b.lse.dtype(), DType::f32);
    EXPECT_EQ(gb.dq.shape(), q.shape());
    EXPECT_EQ(gb.dk.shape(), k.shape());
    EXPECT_EQ(gb.dv.shape(), v.shape());
    EXPECT_FALSE(gb.dk.has_data());
    EXPECT_EQ(ga.dk.dtype(), gb.dk.dtype());
    // The merge helpers accept shape-only operands, write nothing and still charge.
    sink.charges.clear();
    const AttentionResult m = merge_attention({b, b});
    EXPECT_FALSE(m.out.has_data());
    EXPECT_EQ(sink.charges.size(), 3u);  // one lse merge, two out corrections
  }
  (void)r;
}

TEST(AttentionDeterminism, RowsDoNotDependOnBlocking) {
  // Out and dq of a query subset (crossing the kernel's row tiles differently) are bitwise the
  // same rows of the full call; repeated calls are bitwise equal.
  const i64 t = 50;
  const TokenInfo tokens = TokenInfo::sequence(t);
  AttentionOptions opts;
  opts.causal = true;
  const Tensor q = rnd({t, 2, 8}, 61, DType::f32), k = rnd({t, 2, 8}, 62, DType::f32),
               v = rnd({t, 2, 8}, 63, DType::f32), dout = rnd({t, 2, 8}, 64, DType::f32);
  const AttentionResult full = attention_forward(q, k, v, tokens, tokens, opts);
  const AttentionResult again = attention_forward(q, k, v, tokens, tokens, opts);
  EXPECT_TRUE(runtime::bitwise_equal(full.out, again.out));
  const AttentionResult sub =
      attention_forward(q.narrow(0, 5, 40), k, v, tokens.slice(5, 40), tokens, opts);
  EXPECT_TRUE(runtime::bitwise_equal(sub.out, full.out.narrow(0, 5, 40).contiguous()));
  EXPECT_TRUE(runtime::bitwise_equal(sub.lse, full.lse.narrow(1, 5, 40).contiguous()));
  const AttentionGrads g =
      attention_backward(dout, q, k, v, full.out, full.lse, tokens, tokens, opts);
  const AttentionGrads gs =
      attention_backward(dout.narrow(0, 5, 40), q.narrow(0, 5, 40), k, v, full.out.narrow(0, 5, 40),
                         full.lse.narrow(1, 5, 40), tokens.slice(5, 40), tokens, opts);
  EXPECT_TRUE(runtime::bitwise_equal(gs.dq, g.dq.narrow(0, 5, 40).contiguous()));
  const AttentionGrads g2 =
      attention_backward(dout, q, k, v, full.out, full.lse, tokens, tokens, opts);
  EXPECT_TRUE(runtime::bitwise_equal(g.dk, g2.dk));
}

TEST(AttentionOutputDtype, F32PartialsFromBf16Inputs) {
  const TokenInfo tokens = TokenInfo::sequence(8);
  AttentionOptions opts;
  opts.output_dtype = DType::f32;
  const Tensor q = rnd({8, 2, 4}, 71, DType::bf16), k = rnd({8, 2, 4}, 72, DType::bf16),
               v = rnd({8, 2, 4}, 73, DType::bf16);
  const AttentionResult wide = attention_forward(q, k, v, tokens, tokens, opts);
  EXPECT_EQ(wide.out.dtype(), DType::f32);
  const AttentionResult narrow = attention_forward(q, k, v, tokens, tokens);
  // The bf16 output is the f32 one rounded once.
  EXPECT_TRUE(runtime::bitwise_equal(narrow.out, wide.out.to(DType::bf16)));
  const AttentionGrads g =
      attention_backward(wide.out, q, k, v, wide.out, wide.lse, tokens, tokens, opts);
  EXPECT_EQ(g.dq.dtype(), DType::f32);
  EXPECT_EQ(g.dk.dtype(), DType::f32);
}

TEST(AttentionErrors, NameTheProblem) {
  const TokenInfo t4 = TokenInfo::sequence(4);
  const Tensor q = Tensor::zeros({4, 6, 8}), k = Tensor::zeros({4, 4, 8}),
               v = Tensor::zeros({4, 4, 8});
  EXPECT_THAT(error_of([&] { attention_forward(q, k, v, t4, t4); }),
              HasSubstr("hq = 6 query heads are not a multiple of hkv = 4"));
  const Tensor k2 = Tensor::zeros({4, 2, 8}), v2 = Tensor::zeros({4, 2, 8});
  EXPECT_THAT(error_of([&] { attention_forward(q, k2, v2, TokenInfo::sequence(3), t4); }),
              HasSubstr("q_tokens describes 3 tokens, expected 4"));
  EXPECT_THAT(error_of([&] { attention_forward(q, k2.to(DType::bf16), v2, t4, t4); }),
              HasSubstr("share one dtype"));
  EXPECT_THAT(error_of([&] {
                attention_forward(q, Tensor::zeros({4, 2, 7}), v2, t4, t4);
              }),
              HasSubstr("same head dim"));
  AttentionOptions bad;
  bad.window_left = -2;
  EXPECT_THAT(error_of([&] { attention_forward(q, k2, v2, t4, t4, bad); }), HasSubstr(">= -1"));
  EXPECT_THAT(error_of([&] {
                attention_forward(q, k2, v2, TokenInfo{{0, 1, 2, 3}, {0, 0}}, t4);
              }),
              HasSubstr("4 positions but 2 segment ids"));
  const AttentionResult r = attention_forward(q, k2, v2, t4, t4);
  EXPECT_THAT(error_of([&] {
                attention_backward(r.out, q, k2, v2, r.out, Tensor::zeros({4, 6}), t4, t4);
              }),
              HasSubstr("lse f32[4, 6] must have shape [6, 4]"));
}

}  // namespace
}  // namespace ranksim::cp

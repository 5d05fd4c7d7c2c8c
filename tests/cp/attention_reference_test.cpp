// Block attention (cp/attention.h) against the independent float64 reference of
// tests/cp/attention_reference.h, one block at a time: every mask (causal, sliding windows, THD
// padding), GQA, d != dv and every dtype, forward and backward, within the tolerances derived
// there; then central finite differences of the kernel itself in f64.
#include "cp/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cp/attention_reference.h"

namespace ranksim::cp {
namespace {

using namespace ranksim::cp::testing;  // tests/cp/attention_reference.h

// --- One block against the reference ----------------------------------------------------------

struct Case {
  std::string name;
  i64 tq, tk, hq, hkv, d, dv;
  bool causal;
  i64 wl, wr;
  bool thd;  // several packed sequences with padding instead of one sequence
  DType dtype;
};

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
    const double gabs = f64 ? 1e-12 * scale : f32_bound(double(c.d), double(c.tk + c.tq)) * scale + 2.0 * rel * scale;
    expect_close(*grads[n].first, *grads[n].second, gabs, rel, c.name + names[n]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, AttentionVsReference,
    ::testing::Values(Case{"no_mask", 24, 24, 2, 2, 8, 8, false, -1, -1, false, DType::f32},
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
      const Tensor xp = Tensor::from_vector(plus, x.shape()), xm = Tensor::from_vector(minus, x.shape());
      const double lp = which == 0 ? loss(xp, k, v) : which == 1 ? loss(q, xp, v) : loss(q, k, xp);
      const double lm = which == 0 ? loss(xm, k, v) : which == 1 ? loss(q, xm, v) : loss(q, k, xm);
      ASSERT_NEAR(an[i], (lp - lm) / (2 * h), 1e-7) << "input " << which << " element " << i;
    }
  };
  check(q, g.dq, 0);
  check(k, g.dk, 1);
  check(v, g.dv, 2);
}

}  // namespace
}  // namespace ranksim::cp

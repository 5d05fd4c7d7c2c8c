// Context-parallel attention against full attention without CP, TransformerEngine's procedure
// (spec D): seeded clamp(randn, -1, 1) inputs; the block kernel on the whole (padded) sequence is
// the CP = 1 reference; then each comm type at cp = 2, 4 and 8 on the rank slices, comparing out,
// dq, dk and dv of every rank with the same slices of the reference.
//
// Matrix: format {bshd, thd} x comm type {p2p, all_gather, a2a, a2a+p2p} x mask {causal, no_mask
// (bshd) / padding, padding_causal (thd)} x window {none, (5, 0), (5, 5)} x cp {2, 4, 8} x
// {fp32, bf16, bf16 with GQA}. BSHD: b = 2, S = 64. THD: real lengths 7, 0, 23, 13, 5, padded per
// cp (the pad rows hold non-zero garbage, so a leak shows). 8 heads of 8 (GQA: 16 query heads
// over 8 KV heads, so a2a divides them at cp = 8).
//
// fp32 bound. The reference and the CP run compute every (query, key) term with the same f32
// kernel; they differ in how the per-row sums are split and recombined. From the kernel's own
// analysis (tests/cp/attention_reference.h) a result summed over at most L keys (and, for dK/dV, at
// most L queries) is within 4 (d^1.5 + 2L + 8) u of the exact value, relative to the largest
// magnitude of that tensor (at least 1: |out| <= 1, the lse is O(log L)), u = 2^-24. The CP run
// adds at most cp merge / correction / accumulation steps (p2p LSE merge and out correction,
// dQ and the travelling dKV, the all_gather reduce-scatter), each one f32 rounding, i.e. another
// 8 cp u. Both runs are within these bounds of the exact result, so we allow twice their sum:
//   |cp - ref| <= 8 (d^1.5 + 2L + 8 cp + 8) u max(1, max |ref|),
// at most 1.1e-4 here (d = 8, L <= 64, cp <= 8) -- far below any indexing error (a wrong row,
// chunk or mask changes values by O(0.1)); the observed differences stay under 1/40 of it.
// bf16: TransformerEngine's get_tols, |cp - ref| <= atol + rtol |cp| with atol = rtol = 2.5e-2,
// 3.5e-2 with GQA; the reference is the CP = 1 kernel run in bf16, as TE compares bf16 to bf16.
#include "cp/context_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cp/attention.h"
#include "cp/partition.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using runtime::DType;
using runtime::ProcessGroup;
using runtime::Shape;
using ::testing::HasSubstr;
using i64 = std::int64_t;

constexpr double kU32 = 0x1p-24;

Tensor rnd(const Shape& shape, std::uint64_t seed, DType dtype) {
  std::vector<double> v = Tensor::randn(shape, seed, 0.0, 1.0, DType::f64).to_vector<double>();
  for (double& x : v) x = std::clamp(x, -1.0, 1.0);
  return Tensor::from_vector(v, shape, dtype);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// --- The problem and its CP = 1 reference ---------------------------------------------------

struct Spec {
  Format format = Format::bshd;
  CommType comm = CommType::p2p;
  bool causal = false;
  i64 wl = -1, wr = -1;
  i64 cp = 2;
  DType dtype = DType::f32;
  bool gqa = false;
  i64 dv = 8;  // 8 = d; other values: MLA
};

constexpr i64 kDv = 8;

std::string name_of(const Spec& s) {
  std::string n = s.format == Format::bshd ? "bshd" : "thd";
  n += std::string("_") + (s.comm == CommType::a2a_p2p ? "a2a_p2p" : comm_type_name(s.comm));
  if (s.format == Format::bshd) {
    n += s.causal ? "_causal" : "_no_mask";
  } else {
    n += s.causal ? "_padding_causal" : "_padding";
  }
  if (s.wl >= 0) n += "_w" + std::to_string(s.wl) + "_" + std::to_string(s.wr);
  n += "_cp" + std::to_string(s.cp);
  n += s.dtype == DType::bf16 ? "_bf16" : "_fp32";
  if (s.gqa) n += "_gqa";
  if (s.dv != kDv) n += "_mla_dv" + std::to_string(s.dv);
  return n;
}

void PrintTo(const Spec& s, std::ostream* os) { *os << name_of(s); }

constexpr i64 kBatch = 2, kSeq = 64, kD = 8;
const std::vector<i64> kCu = {0, 7, 7, 30, 43, 48};  // lengths 7, 0, 23, 13, 5

// Global tensors in the flat row order the layout uses ([b*S, h, d] or padded [T, h, d]) and the
// reference results.
struct Problem {
  SequenceLayout layout;
  i64 hq = 8, hkv = 8, rows = 0, longest = 0;
  TokenInfo tokens;
  Tensor q, k, v, dout;
  AttentionResult ref;
  AttentionGrads gref;
  AttentionOptions opts;
};

Problem make_problem(const Spec& s) {
  Problem p;
  if (s.gqa) p.hq = 16;
  p.opts.causal = s.causal;
  p.opts.window_left = s.wl;
  p.opts.window_right = s.wr;
  const DType t = s.dtype;
  if (s.format == Format::bshd) {
    p.layout = SequenceLayout::bshd(kBatch, kSeq);
    p.rows = kBatch * kSeq;
    p.longest = kSeq;
    for (i64 g = 0; g < p.rows; ++g) {
      p.tokens.position.push_back(g % kSeq);
      p.tokens.segment.push_back(g / kSeq);
    }
    p.q = rnd({p.rows, p.hq, kD}, 1, t);
    p.k = rnd({p.rows, p.hkv, kD}, 2, t);
    p.v = rnd({p.rows, p.hkv, s.dv}, 3, t);
    p.dout = rnd({p.rows, p.hq, s.dv}, 4, t);
  } else {
    const std::vector<i64> pad = thd_padded_cu_seqlens(kCu, s.cp);
    p.layout = SequenceLayout::thd(kCu, pad);
    p.rows = pad.back();
    for (std::size_t i = 0; i + 1 < pad.size(); ++i) p.longest = std::max(p.longest, pad[i + 1] - pad[i]);
    p.tokens = TokenInfo{thd_position_ids(pad), thd_segment_ids(kCu, pad)};
    const i64 real = kCu.back();
    p.q = thd_pad(rnd({real, p.hq, kD}, 1, t), kCu, pad, 0.7);
    p.k = thd_pad(rnd({real, p.hkv, kD}, 2, t), kCu, pad, -0.6);
    p.v = thd_pad(rnd({real, p.hkv, s.dv}, 3, t), kCu, pad, 0.9);
    p.dout = thd_pad(rnd({real, p.hq, s.dv}, 4, t), kCu, pad, 0.5);
  }
  p.ref = attention_forward(p.q, p.k, p.v, p.tokens, p.tokens, p.opts);
  p.gref = attention_backward(p.dout, p.q, p.k, p.v, p.ref.out, p.ref.lse, p.tokens, p.tokens, p.opts);
  return p;
}

// Rank r's slice of a global flat tensor, in the local shape the entry point takes.
Tensor slice(const Problem& p, const Tensor& global, i64 cp, i64 r) {
  if (p.layout.format == Format::bshd) {
    const Tensor g = global.reshape({kBatch, kSeq, global.size(1), global.size(2)});
    return bshd_partition(g, 1, cp, r);
  }
  return thd_partition(global, 0, p.layout.cu_seqlens_padded, cp, r);
}

struct RankResult {
  Tensor out, dq, dk, dv;
};

CpGroups groups_for(CommType comm) {
  const ProcessGroup world = runtime::new_group([] {
    std::vector<int> all(static_cast<std::size_t>(runtime::get_world_size()));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    return all;
  }());
  return comm == CommType::a2a_p2p ? hierarchical_cp_groups(world) : CpGroups(world);
}

std::vector<RankResult> run_cp(const Problem& p, const Spec& s, const runtime::SpawnOptions& so = {}) {
  std::vector<RankResult> results(static_cast<std::size_t>(s.cp));
  CpOptions opts;
  opts.comm_type = s.comm;
  opts.attention = p.opts;
  runtime::spawn(
      [&](int rank) {
        const CpGroups groups = groups_for(s.comm);
        const CpForwardResult f = attention_with_cp_forward(slice(p, p.q, s.cp, rank), slice(p, p.k, s.cp, rank),
                                                            slice(p, p.v, s.cp, rank), p.layout, groups, opts);
        const CpGrads g = attention_with_cp_backward(slice(p, p.dout, s.cp, rank), f.ctx);
        results[static_cast<std::size_t>(rank)] = RankResult{f.out, g.dq, g.dk, g.dv};
      },
      static_cast<int>(s.cp), so);
  return results;
}

void expect_close(const Tensor& got_t, const Tensor& want_t, const Spec& s, const Problem& p, const std::string& what) {
  ASSERT_EQ(got_t.shape(), want_t.shape()) << what;
  ASSERT_EQ(got_t.dtype(), want_t.dtype()) << what;
  const std::vector<double> got = got_t.to_vector<double>(), want = want_t.to_vector<double>();
  double atol = 0, rtol = 0;
  if (s.dtype == DType::bf16) {
    atol = rtol = s.gqa ? 3.5e-2 : 2.5e-2;
  } else {
    double scale = 1;
    for (double x : want) scale = std::max(scale, std::fabs(x));
    atol = 8.0 * (kD * std::sqrt(double(kD)) + 2.0 * double(p.longest) + 8.0 * double(s.cp) + 8) * kU32 * scale;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i << " is " << got[i];
    ASSERT_LE(std::fabs(got[i] - want[i]), atol + rtol * std::fabs(got[i]))
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

class CpMatrix : public ::testing::TestWithParam<Spec> {};

TEST_P(CpMatrix, MatchesFullAttentionPerRank) {
  const Spec& s = GetParam();
  const Problem p = make_problem(s);
  const std::vector<RankResult> res = run_cp(p, s);
  for (i64 r = 0; r < s.cp; ++r) {
    const RankResult& got = res[static_cast<std::size_t>(r)];
    const std::string tag = " rank " + std::to_string(r);
    expect_close(got.out, slice(p, p.ref.out, s.cp, r), s, p, "out" + tag);
    expect_close(got.dq, slice(p, p.gref.dq, s.cp, r), s, p, "dq" + tag);
    expect_close(got.dk, slice(p, p.gref.dk, s.cp, r), s, p, "dk" + tag);
    expect_close(got.dv, slice(p, p.gref.dv, s.cp, r), s, p, "dv" + tag);
  }
}

std::vector<Spec> matrix() {
  std::vector<Spec> specs;
  const std::pair<i64, i64> windows[] = {{-1, -1}, {5, 0}, {5, 5}};
  for (Format f : {Format::bshd, Format::thd})
    for (CommType c : {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p})
      for (bool causal : {true, false})
        for (auto [wl, wr] : windows)
          for (i64 cp : {2, 4, 8})
            for (int variant = 0; variant < 3; ++variant) {
              Spec s;
              s.format = f;
              s.comm = c;
              s.causal = causal;
              s.wl = wl;
              s.wr = wr;
              s.cp = cp;
              s.dtype = variant == 0 ? DType::f32 : DType::bf16;
              s.gqa = variant == 2;
              specs.push_back(s);
            }
  return specs;
}

INSTANTIATE_TEST_SUITE_P(All, CpMatrix, ::testing::ValuesIn(matrix()),
                         [](const ::testing::TestParamInfo<Spec>& param_info) { return name_of(param_info.param); });

// MLA (value head dim 12 != key head dim 8): every buffer and exchange sizes K and V apart.
std::vector<Spec> mla() {
  std::vector<Spec> specs;
  for (Format f : {Format::bshd, Format::thd})
    for (CommType c : {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p})
      for (DType t : {DType::f32, DType::bf16}) {
        Spec s;
        s.format = f;
        s.comm = c;
        s.causal = true;
        s.cp = 4;
        s.dtype = t;
        s.dv = 12;
        specs.push_back(s);
      }
  return specs;
}

INSTANTIATE_TEST_SUITE_P(Mla, CpMatrix, ::testing::ValuesIn(mla()),
                         [](const ::testing::TestParamInfo<Spec>& param_info) { return name_of(param_info.param); });

// --- Spec E1: a length-7 sequence at cp = 2 keeps all 7 tokens --------------------------------

TEST(CpThd, LengthSevenAtCp2KeepsEveryRealToken) {
  // Against attention on the 7 real tokens alone (no padding anywhere), so the check does not
  // rely on the padding machinery it tests. Rank 0 holds global rows {0, 1, 6, 7}: row 6, the
  // token a cu//cp approximation drops, is its local row 2.
  const std::vector<i64> cu = {0, 7}, pad = thd_padded_cu_seqlens(cu, 2);
  ASSERT_EQ(pad, (std::vector<i64>{0, 8}));
  const Tensor q7 = rnd({7, 2, 8}, 11, DType::f64), k7 = rnd({7, 2, 8}, 12, DType::f64),
               v7 = rnd({7, 2, 8}, 13, DType::f64);
  AttentionOptions causal;
  causal.causal = true;
  const AttentionResult want = attention_forward(q7, k7, v7, TokenInfo::sequence(7), TokenInfo::sequence(7), causal);
  for (CommType c : {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p}) {
    std::vector<Tensor> outs(2);
    runtime::spawn(
        [&](int rank) {
          auto part = [&](const Tensor& x) { return thd_partition(thd_pad(x, cu, pad, 3.0), 0, pad, 2, rank); };
          CpOptions o;
          o.comm_type = c;
          o.attention = causal;
          outs[static_cast<std::size_t>(rank)] =
              attention_with_cp_forward(part(q7), part(k7), part(v7), SequenceLayout::thd(cu, pad), groups_for(c), o)
                  .out;
        },
        2);
    const Tensor got = thd_unpad(thd_unpartition(outs, 0, pad), cu, pad);
    const std::vector<double> g = got.to_vector<double>(), w = want.out.to_vector<double>();
    ASSERT_EQ(g.size(), w.size()) << comm_type_name(c);
    for (std::size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR(g[i], w[i], 1e-12) << comm_type_name(c) << " element " << i;
    }
    EXPECT_NE(outs[0].at({2, 0, 0}), 0.0) << comm_type_name(c) << ": token 6 was dropped";
  }
}

// CpLayout::shared hands out one layout per (layout, cp) while it is among the last 16 asked
// for, equal to a new one; another cp or another layout is another object.
TEST(CpLayoutShared, EqualsANewLayoutAndIsReusedForTheSameKey) {
  const SequenceLayout thd = SequenceLayout::thd({0, 5, 12}, {0, 8, 16});
  const std::shared_ptr<const CpLayout> a = CpLayout::shared(thd, 2);
  const CpLayout fresh(thd, 2);
  EXPECT_EQ(a->local_rows(), fresh.local_rows());
  for (i64 r = 0; r < 2; ++r) {
    EXPECT_EQ(a->rows_of(r), fresh.rows_of(r));
    EXPECT_EQ(a->tokens_of(r).position, fresh.tokens_of(r).position);
    EXPECT_EQ(a->tokens_of(r).segment, fresh.tokens_of(r).segment);
  }
  EXPECT_EQ(a->half_rows(Half::second), fresh.half_rows(Half::second));
  EXPECT_EQ(CpLayout::shared(SequenceLayout::thd({0, 5, 12}, {0, 8, 16}), 2).get(), a.get());
  EXPECT_NE(CpLayout::shared(thd, 4).get(), a.get());
  EXPECT_NE(CpLayout::shared(SequenceLayout::thd({0, 6, 12}, {0, 8, 16}), 2).get(), a.get());
  // Sixteen other layouts push it out: a new object, still equal.
  for (i64 s = 1; s <= 16; ++s) (void)CpLayout::shared(SequenceLayout::bshd(1, 8 * s), 2);
  const std::shared_ptr<const CpLayout> again = CpLayout::shared(thd, 2);
  EXPECT_NE(again.get(), a.get());
  EXPECT_EQ(again->rows_of(1), fresh.rows_of(1));
  // A bad layout is the constructor's error, and nothing is kept.
  EXPECT_THAT(error_of([] { (void)CpLayout::shared(SequenceLayout::bshd(1, 6), 2); }), HasSubstr("6"));
}

// --- The p2p sections --------------------------------------------------------------------------

TEST(CpP2pStep, CausalIsTransformerEnginesHalvingAndWindowsSkipSteps) {
  const CpLayout lay(SequenceLayout::bshd(1, 64), 4);
  AttentionOptions causal;
  causal.causal = true;
  for (i64 r = 0; r < 4; ++r) {
    for (i64 i = 0; i < 4; ++i) {
      const i64 s = (r - i + 4) % 4;
      const P2pStep st = p2p_step(lay, r, s, causal);
      const std::string at = "r " + std::to_string(r) + " step " + std::to_string(i);
      if (i == 0) {
        EXPECT_TRUE(st.q == Half::all && st.kv == Half::all) << at << ": diagonal";
      } else if (i <= r) {
        EXPECT_TRUE(st.q == Half::all && st.kv == Half::first) << at << ": lower triangle";
      } else {
        EXPECT_TRUE(st.q == Half::second && st.kv == Half::all) << at << ": upper triangle";
      }
    }
  }
  // No mask: every step is the full block.
  const P2pStep full = p2p_step(lay, 1, 3, AttentionOptions{});
  EXPECT_TRUE(full.q == Half::all && full.kv == Half::all);
  // Chunk 8 tokens; a causal window of 3: rank 3 (chunks 3, 4) sees nothing of rank 0's chunks
  // 0 and 7, so the step is skipped; rank 1 (chunks 1, 6) against rank 0 (chunks 0, 7) needs
  // only chunk 1 x chunk 0.
  AttentionOptions swa = causal;
  swa.window_left = 3;
  EXPECT_EQ(p2p_step(lay, 3, 0, swa).q, Half::none);
  const P2pStep near = p2p_step(lay, 1, 0, swa);
  EXPECT_TRUE(near.q == Half::first && near.kv == Half::first);
  // A right window reaches forward: rank 0's chunk 0 sees the start of rank 1's chunk 1.
  AttentionOptions right;
  right.window_left = 0;
  right.window_right = 2;
  const P2pStep fwd = p2p_step(lay, 0, 1, right);
  EXPECT_TRUE(fwd.q == Half::first && fwd.kv == Half::first);
}

// --- Shape-only runs time the same work ---------------------------------------------------------

TEST(CpShapeOnly, SameVirtualTimeAsRealDataAndNoData) {
  for (CommType c : {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p}) {
    Spec s;
    s.comm = c;
    s.causal = true;
    s.cp = 4;
    s.dtype = DType::bf16;
    const Problem p = make_problem(s);
    auto run = [&](bool data) {
      CpOptions opts;
      opts.comm_type = c;
      opts.attention = p.opts;
      bool shapes_ok = true, has_data = false;
      const runtime::RunReport rep = runtime::spawn(
          [&](int rank) {
            auto in = [&](const Tensor& x) {
              const Tensor t = slice(p, x, s.cp, rank);
              return data ? t : Tensor::shape_only(t.shape(), t.dtype());
            };
            const CpForwardResult f =
                attention_with_cp_forward(in(p.q), in(p.k), in(p.v), p.layout, groups_for(c), opts);
            const CpGrads g = attention_with_cp_backward(in(p.dout), f.ctx);
            shapes_ok = shapes_ok && f.out.shape() == in(p.dout).shape() && g.dq.shape() == in(p.q).shape() &&
                        g.dk.shape() == in(p.k).shape() && g.dv.shape() == in(p.v).shape() &&
                        g.dk.dtype() == DType::bf16;
            has_data = has_data || f.out.has_data() || g.dq.has_data() || g.dk.has_data();
          },
          4);
      EXPECT_TRUE(shapes_ok) << comm_type_name(c);
      EXPECT_EQ(has_data, data) << comm_type_name(c);
      return rep.makespan;
    };
    const sim::Time with_data = run(true), shape_only = run(false);
    EXPECT_EQ(with_data, shape_only) << comm_type_name(c);
    EXPECT_GT(shape_only.seconds(), 0.0) << comm_type_name(c);
  }
}

// --- The saved context is not consumed -----------------------------------------------------------

TEST(CpContext, BackwardTwiceGivesTheSameBits) {
  for (CommType c : {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p}) {
    Spec s;
    s.comm = c;
    s.causal = true;
    s.cp = 4;
    const Problem p = make_problem(s);
    runtime::spawn(
        [&](int rank) {
          CpOptions o;
          o.comm_type = c;
          o.attention = p.opts;
          const CpForwardResult f = attention_with_cp_forward(slice(p, p.q, 4, rank), slice(p, p.k, 4, rank),
                                                              slice(p, p.v, 4, rank), p.layout, groups_for(c), o);
          const Tensor dout = slice(p, p.dout, 4, rank);
          const CpGrads a = attention_with_cp_backward(dout, f.ctx);
          const CpGrads b = attention_with_cp_backward(dout, f.ctx);
          EXPECT_TRUE(runtime::bitwise_equal(a.dq, b.dq)) << comm_type_name(c);
          EXPECT_TRUE(runtime::bitwise_equal(a.dk, b.dk)) << comm_type_name(c);
          EXPECT_TRUE(runtime::bitwise_equal(a.dv, b.dv)) << comm_type_name(c);
        },
        4);
  }
}

// --- Bad input ----------------------------------------------------------------------------------

std::string run_error(int cp, const std::function<void(int)>& fn) {
  return error_of([&] { runtime::spawn(fn, cp); });
}

TEST(CpErrors, HeadsNotDivisibleForA2a) {
  const std::string e = run_error(4, [](int) {
    CpOptions o;
    o.comm_type = CommType::a2a;
    const Tensor q = Tensor::zeros({1, 4, 6, 8}), kv = Tensor::zeros({1, 4, 2, 8});
    attention_with_cp_forward(q, kv, kv, SequenceLayout::bshd(1, 16), groups_for(o.comm_type), o);
  });
  EXPECT_THAT(e, HasSubstr("a2a splits heads over cp = 4 ranks: hq = 6 and hkv = 2 must both be "
                           "multiples of 4"));
}

TEST(CpErrors, HeadsNotDivisibleForHierarchical) {
  const std::string e = run_error(4, [](int) {
    CpOptions o;
    o.comm_type = CommType::a2a_p2p;
    const Tensor q = Tensor::zeros({1, 4, 3, 8}), kv = Tensor::zeros({1, 4, 1, 8});
    attention_with_cp_forward(q, kv, kv, SequenceLayout::bshd(1, 16), groups_for(o.comm_type), o);
  });
  EXPECT_THAT(e, HasSubstr("hq = 3 and hkv = 1 must both be multiples of 2"));
}

TEST(CpErrors, HierarchicalSizesMustMultiplyToCp) {
  const std::string e = run_error(4, [](int) { hierarchical_cp_groups(runtime::new_group({0, 1, 2, 3}), 2, 3); });
  EXPECT_THAT(e, HasSubstr("a2a size 2 x p2p size 3 = 6 does not equal the CP size 4"));
  const std::string odd = run_error(3, [](int) { hierarchical_cp_groups(runtime::new_group({0, 1, 2})); });
  EXPECT_THAT(odd, HasSubstr("needs an even CP size, got cp = 3"));
  // Groups that do not tile the CP group as p2p_rank * a + a2a_rank.
  const std::string tiling = run_error(4, [](int rank) {
    CpGroups g(runtime::new_group({0, 1, 2, 3}));
    g.a2a = runtime::new_group(rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
    g.p2p = runtime::new_group(rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    CpOptions o;
    o.comm_type = CommType::a2a_p2p;
    const Tensor x = Tensor::zeros({1, 4, 2, 8});
    attention_with_cp_forward(x, x, x, SequenceLayout::bshd(1, 16), g, o);
  });
  EXPECT_THAT(tiling, HasSubstr("do not tile the CP group"));
}

TEST(CpErrors, BshdSequenceNotAMultipleOf2Cp) {
  const std::string e = run_error(4, [](int) {
    const Tensor x = Tensor::zeros({1, 7, 2, 8});
    attention_with_cp_forward(x, x, x, SequenceLayout::bshd(1, 30), groups_for(CommType::p2p));
  });
  EXPECT_THAT(e, HasSubstr("BSHD sequence length S = 30 is not a multiple of 2*cp = 8"));
}

TEST(CpErrors, CuSeqlensMustNotDecrease) {
  const std::string e = run_error(2, [](int) {
    const Tensor x = Tensor::zeros({8, 2, 8});
    attention_with_cp_forward(x, x, x, SequenceLayout::thd({0, 7, 5}, {0, 8, 16}), groups_for(CommType::p2p));
  });
  EXPECT_THAT(e, HasSubstr("cu_seqlens [0, 7, 5] must not decrease: entry 2 = 5 < entry 1 = 7"));
  const std::string pad = run_error(2, [](int) {
    const Tensor x = Tensor::zeros({5, 2, 8});
    attention_with_cp_forward(x, x, x, SequenceLayout::thd({0, 7}, {0, 10}), groups_for(CommType::p2p));
  });
  EXPECT_THAT(pad, HasSubstr("sequence 0 has 7 real tokens padded to 10"));
  EXPECT_THAT(pad, HasSubstr("multiple of 2*cp = 4"));
}

TEST(CpErrors, ShapesMustMatchTheLayout) {
  const std::string e = run_error(2, [](int) {
    const Tensor x = Tensor::zeros({1, 16, 2, 8});
    attention_with_cp_forward(x, x, x, SequenceLayout::bshd(1, 16), groups_for(CommType::p2p));
  });
  EXPECT_THAT(e, HasSubstr("must be [b, S/cp, heads, dim] = [1, 8, heads, dim]"));
  EXPECT_THAT(error_of([] { parse_comm_type("ring"); }),
              HasSubstr("unknown CP comm type 'ring'; expected p2p, all_gather, a2a or a2a+p2p"));
  EXPECT_EQ(parse_comm_type("a2a+p2p"), CommType::a2a_p2p);
}

}  // namespace
}  // namespace ranksim::cp

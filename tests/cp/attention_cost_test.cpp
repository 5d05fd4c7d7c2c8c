// What block attention (cp/attention.h) charges: visible (query, key) pairs counted exactly
// against brute force over the reference mask, the FLOPs and bytes of forward, backward and merge,
// and shape-only tensors charged the same as real ones while moving no data.
#include "cp/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cp/attention_reference.h"
#include "runtime/tensor/cost.h"

namespace ranksim::cp {
namespace {

using namespace ranksim::cp::testing;  // tests/cp/attention_reference.h

struct RecordingSink : runtime::CostSink {
  std::vector<runtime::OpCost> charges;
  void charge(const runtime::OpCost& c) override { charges.push_back(c); }
};

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

// The closed form per pair of runs, against brute force on layouts made of runs: sequences cut
// into chunks in any order (as CP's DualChunkSwap deals them), THD segments with padding, windows
// on one or both sides, runs that overlap, and single tokens.
TEST(AttentionCost, VisiblePairsOfRunsCountedExactly) {
  std::uint64_t state = 7;
  auto next = [&](i64 n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return i64((state >> 33) % std::uint64_t(n));
  };
  auto runs = [&]() {
    TokenInfo t;
    const int count = 1 + static_cast<int>(next(5));
    for (int r = 0; r < count; ++r) {
      const i64 seg = next(4) - 1, first = next(40), len = 1 + next(30);
      for (i64 i = 0; i < len; ++i) {
        t.position.push_back(first + i);
        t.segment.push_back(seg);
      }
    }
    return t;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const TokenInfo qt = runs(), kt = runs();
    AttentionOptions opts;
    opts.causal = trial % 2 == 0;
    opts.window_left = trial % 3 == 0 ? -1 : next(50);
    opts.window_right = trial % 5 == 0 ? -1 : next(50);
    Problem p{qt.size(), kt.size(), 1, 1, 1, 1, qt, kt, opts};
    i64 brute = 0;
    for (i64 i = 0; i < qt.size(); ++i) {
      for (i64 k = 0; k < kt.size(); ++k) brute += ref_sees(p, i, k) ? 1 : 0;
    }
    EXPECT_EQ(attention_visible_pairs(qt, kt, opts), brute) << "trial " << trial;
  }
  // closed forms: a causal sequence of n sees n (n + 1) / 2 pairs; a window of w on the left w + 1
  // keys per query once past the first w
  AttentionOptions causal;
  causal.causal = true;
  EXPECT_EQ(attention_visible_pairs(TokenInfo::sequence(131072), TokenInfo::sequence(131072), causal),
            i64{131072} * 131073 / 2);
  causal.window_left = 100;
  EXPECT_EQ(attention_visible_pairs(TokenInfo::sequence(1000), TokenInfo::sequence(1000), causal),
            100 * 101 / 2 + 900 * 101);
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
  EXPECT_EQ(sink.charges[0].bytes, 2.0 * (tq * hq * d + 2 * tk * hkv * d + tq * hq * d) + 4.0 * hq * tq);
  EXPECT_EQ(sink.charges[0].dtype, DType::bf16);

  // Shape-only: same charges, shape-only results of the right shapes and dtypes.
  const Tensor qs = Tensor::shape_only(q.shape(), DType::bf16), ks = Tensor::shape_only(k.shape(), DType::bf16),
               vs = Tensor::shape_only(v.shape(), DType::bf16);
  for (const AttentionOptions& opts : {dense, causal}) {
    sink.charges.clear();
    const AttentionResult a = attention_forward(q, k, v, tokens, tokens, opts);
    const AttentionGrads ga = attention_backward(a.out, q, k, v, a.out, a.lse, tokens, tokens, opts);
    const AttentionResult b = attention_forward(qs, ks, vs, tokens, tokens, opts);
    const AttentionGrads gb = attention_backward(b.out, qs, ks, vs, b.out, b.lse, tokens, tokens, opts);
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

}  // namespace
}  // namespace ranksim::cp

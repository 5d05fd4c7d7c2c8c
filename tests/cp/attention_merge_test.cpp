// Rows and blocks that see nothing, and the merge helpers a ring builds its result with
// (merge_lse_, add_corrected_out_, add_rows_, merge_attention in cp/attention.h): an empty row
// gives zero output, lse -inf, zero gradients and never a NaN, and merging it changes nothing;
// the LSE rule on row subsets, one rounding into a bf16 accumulator, and the helpers' errors.
#include "cp/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cp/attention_reference.h"

namespace ranksim::cp {
namespace {

using namespace ranksim::cp::testing;  // tests/cp/attention_reference.h
using ::testing::HasSubstr;

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
  const AttentionResult none = attention_forward(q, k, v, qt, TokenInfo{{0, 0, 0, 0}, {9, 9, 9, 9}}, opts);
  const AttentionResult m = merge_attention({r, none});
  EXPECT_TRUE(runtime::bitwise_equal(m.lse, r.lse));
  EXPECT_TRUE(runtime::bitwise_equal(m.out, r.out));
  const AttentionResult m2 = merge_attention({none, none});
  for (double x : vals(m2.lse)) EXPECT_EQ(x, -kInf);
  for (double x : vals(m2.out)) EXPECT_EQ(x, 0.0);
}

TEST(AttentionEmptyRows, EmptyBlocks) {
  // A rank can hold a key block or a query block with no tokens (THD with empty sequences).
  const Tensor q = rnd({3, 2, 4}, 25, DType::f32), k = Tensor::zeros({0, 1, 4}), v = Tensor::zeros({0, 1, 2});
  const TokenInfo qt = TokenInfo::sequence(3), none = TokenInfo::sequence(0);
  const AttentionResult r = attention_forward(q, k, v, qt, none);
  EXPECT_EQ(r.out.shape(), (Shape{3, 2, 2}));
  for (double x : vals(r.out)) EXPECT_EQ(x, 0.0);
  for (double x : vals(r.lse)) EXPECT_EQ(x, -kInf);
  const AttentionGrads g = attention_backward(r.out, q, k, v, r.out, r.lse, qt, none);
  EXPECT_EQ(g.dk.shape(), (Shape{0, 1, 4}));
  for (double x : vals(g.dq)) EXPECT_EQ(x, 0.0);
  const AttentionResult e = attention_forward(Tensor::zeros({0, 2, 4}), rnd({3, 1, 4}, 26, DType::f32),
                                              rnd({3, 1, 2}, 27, DType::f32), none, qt);
  EXPECT_EQ(e.out.shape(), (Shape{0, 2, 2}));
  EXPECT_EQ(e.lse.shape(), (Shape{2, 0}));
}

// --- Merge helpers ----------------------------------------------------------------------------

TEST(Merge, LseRuleAndRowSubsets) {
  Tensor lse = Tensor::from_vector(std::vector<float>{0.f, 1.f, -INFINITY, 2.f}, {1, 4});
  merge_lse_(lse, Tensor::from_vector(std::vector<float>{0.f, -INFINITY}, {1, 2}), Rows::range(0, 2));
  EXPECT_FLOAT_EQ(float(lse.at({0, 0})), std::log(2.f));
  EXPECT_EQ(lse.at({0, 1}), 1.0);
  merge_lse_(lse, Tensor::from_vector(std::vector<float>{-INFINITY, 5.f}, {1, 2}), Rows::list({2, 3}));
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

// Rows::count is the size of Rows::resolve, with its checks, without the list.
TEST(Merge, RowsCountIsTheResolvedSize) {
  EXPECT_EQ(Rows::all().count(5, "t"), 5);
  EXPECT_EQ(Rows::all().resolve(3, "t"), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(Rows::range(2, 3).count(5, "t"), 3);
  EXPECT_EQ(Rows::range(2, 3).resolve(5, "t"), (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(Rows::list({4, 0}).count(5, "t"), 2);
  EXPECT_EQ(Rows::list({4, 0}).resolve(5, "t"), (std::vector<std::int64_t>{4, 0}));
  EXPECT_THAT(error_of([] { (void)Rows::range(3, 3).count(5, "t"); }), HasSubstr("rows [3, 6)"));
  EXPECT_THAT(error_of([] { (void)Rows::list({5}).count(5, "t"); }), HasSubstr("row 5"));
}

TEST(Merge, Errors) {
  const Tensor lse = Tensor::zeros({2, 4});
  EXPECT_THAT(error_of([&] { merge_lse_(lse, Tensor::zeros({2, 3})); }), HasSubstr("part_lse"));
  EXPECT_THAT(error_of([&] { merge_lse_(lse, Tensor::zeros({2, 2}), Rows::range(3, 2)); }), HasSubstr("rows [3, 5)"));
  EXPECT_THAT(error_of([&] {
                add_rows_(Tensor::zeros({4, 2}), Tensor::zeros({1, 2}), Rows::list({4}));
              }),
              HasSubstr("row 4"));
  EXPECT_THAT(error_of([] { merge_attention({}); }), HasSubstr("at least one"));
}

}  // namespace
}  // namespace ranksim::cp

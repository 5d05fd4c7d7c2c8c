// Block attention's (cp/attention.h) promises beyond its values: rows do not depend on how the
// queries are blocked and repeated calls are bitwise equal; output_dtype gives f32 partials that
// round once to the narrow result; and errors name the mismatched heads, tokens, dtypes, head
// dims, windows and lse shapes.
#include "cp/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cp/attention_reference.h"

namespace ranksim::cp {
namespace {

using namespace ranksim::cp::testing;  // tests/cp/attention_reference.h
using ::testing::HasSubstr;

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
  const AttentionResult sub = attention_forward(q.narrow(0, 5, 40), k, v, tokens.slice(5, 40), tokens, opts);
  EXPECT_TRUE(runtime::bitwise_equal(sub.out, full.out.narrow(0, 5, 40).contiguous()));
  EXPECT_TRUE(runtime::bitwise_equal(sub.lse, full.lse.narrow(1, 5, 40).contiguous()));
  const AttentionGrads g = attention_backward(dout, q, k, v, full.out, full.lse, tokens, tokens, opts);
  const AttentionGrads gs =
      attention_backward(dout.narrow(0, 5, 40), q.narrow(0, 5, 40), k, v, full.out.narrow(0, 5, 40),
                         full.lse.narrow(1, 5, 40), tokens.slice(5, 40), tokens, opts);
  EXPECT_TRUE(runtime::bitwise_equal(gs.dq, g.dq.narrow(0, 5, 40).contiguous()));
  const AttentionGrads g2 = attention_backward(dout, q, k, v, full.out, full.lse, tokens, tokens, opts);
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
  const AttentionGrads g = attention_backward(wide.out, q, k, v, wide.out, wide.lse, tokens, tokens, opts);
  EXPECT_EQ(g.dq.dtype(), DType::f32);
  EXPECT_EQ(g.dk.dtype(), DType::f32);
}

TEST(AttentionErrors, NameTheProblem) {
  const TokenInfo t4 = TokenInfo::sequence(4);
  const Tensor q = Tensor::zeros({4, 6, 8}), k = Tensor::zeros({4, 4, 8}), v = Tensor::zeros({4, 4, 8});
  EXPECT_THAT(error_of([&] { attention_forward(q, k, v, t4, t4); }),
              HasSubstr("hq = 6 query heads are not a multiple of hkv = 4"));
  const Tensor k2 = Tensor::zeros({4, 2, 8}), v2 = Tensor::zeros({4, 2, 8});
  EXPECT_THAT(error_of([&] { attention_forward(q, k2, v2, TokenInfo::sequence(3), t4); }),
              HasSubstr("q_tokens describes 3 tokens, expected 4"));
  EXPECT_THAT(error_of([&] { attention_forward(q, k2.to(DType::bf16), v2, t4, t4); }), HasSubstr("share one dtype"));
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

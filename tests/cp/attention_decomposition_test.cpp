// The CP properties the comm types rely on, checked on block attention (cp/attention.h) in f64:
// forward per key block + merge == full attention, backward per block with the final out/lse
// summed == full backward, and TransformerEngine's p2p causal decomposition (diagonal / lower /
// upper steps on the DualChunkSwap layout, spec B1) for cp = 2 and 4, BSHD and THD, to f64
// precision.
#include "cp/attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cp/attention_reference.h"
#include "cp/partition.h"
#include "runtime/tensor/ops.h"

namespace ranksim::cp {
namespace {

using namespace ranksim::cp::testing;  // tests/cp/attention_reference.h

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
  const AttentionGrads gfull = attention_backward(dout, q, k, v, full.out, full.lse, tokens, tokens, opts);

  // Uneven blocks, the last of which many rows see nothing of under a causal mask.
  const std::vector<std::pair<i64, i64>> blocks = {{0, 5}, {5, 12}, {17, 7}};
  std::vector<AttentionResult> parts;
  for (auto [start, len] : blocks) {
    parts.push_back(
        attention_forward(q, k.narrow(0, start, len), v.narrow(0, start, len), tokens, tokens.slice(start, len), opts));
  }
  const AttentionResult merged = merge_attention(parts);
  expect_close(merged.out, vals(full.out), 1e-13, 0, c.name + " out");
  expect_close(merged.lse, vals(full.lse), 1e-13, 0, c.name + " lse");

  Tensor dq = Tensor::zeros({t, hq, d}, DType::f64);
  std::vector<Tensor> dks, dvs;
  for (auto [start, len] : blocks) {
    const AttentionGrads g = attention_backward(dout, q, k.narrow(0, start, len), v.narrow(0, start, len), merged.out,
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
                         [](const ::testing::TestParamInfo<BlockCase>& param_info) { return param_info.param.name; });

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
AttentionResult ring_forward(const Ring& ring, i64 r, const AttentionOptions& causal, const AttentionOptions& none) {
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
                                        rows_of(ring.v[s], ring.first), me, kv.select(ring.first), none));
      where.push_back(Rows::all());
    } else {
      parts.push_back(attention_forward(rows_of(ring.q[size_t(r)], ring.second), ring.k[s], ring.v[s],
                                        me.select(ring.second), kv, none));
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
void ring_backward(const Ring& ring, const std::vector<AttentionResult>& fwd, const AttentionOptions& causal,
                   const AttentionOptions& none, std::vector<Tensor>& dq, std::vector<Tensor>& dk,
                   std::vector<Tensor>& dv) {
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
        const AttentionGrads g =
            attention_backward(ring.dout[me], ring.q[me], ring.k[s], ring.v[s], out, lse, mine, kv, causal);
        add_rows_(dq[me], g.dq);
        add_rows_(dk[s], g.dk);
        add_rows_(dv[s], g.dv);
      } else if (i >= ring.cp - r - 1) {
        const AttentionGrads g =
            attention_backward(ring.dout[me], ring.q[me], rows_of(ring.k[s], ring.first),
                               rows_of(ring.v[s], ring.first), out, lse, mine, kv.select(ring.first), none);
        add_rows_(dq[me], g.dq);
        add_rows_(dk[s], g.dk, Rows::list(ring.first));
        add_rows_(dv[s], g.dv, Rows::list(ring.first));
      } else {
        const AttentionGrads g = attention_backward(
            rows_of(ring.dout[me], ring.second), rows_of(ring.q[me], ring.second), ring.k[s], ring.v[s],
            rows_of(out, ring.second), index_select(lse, 1, ring.second), mine.select(ring.second), kv, none);
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

void PrintTo(const RingCase& c, std::ostream* os) { *os << (c.thd ? "thd" : "bshd") << " cp " << c.cp; }

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
               v = rnd({total, hkv, dv}, 43, DType::f64), dout = rnd({total, hq, dv}, 44, DType::f64);
  AttentionOptions causal, none;
  causal.causal = true;
  const AttentionResult full = attention_forward(q, k, v, global, global, causal);
  const AttentionGrads gfull = attention_backward(dout, q, k, v, full.out, full.lse, global, global, causal);

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
      ring.tokens.push_back(TokenInfo{thd_local_positions(pad, cp, r), thd_local_segments(cu, pad, cp, r)});
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
    expect_close(fwd.back().out, vals(part(full.out, r)), 1e-14, 0, "out rank " + std::to_string(r));
    const Tensor want_lse = thd ? thd_partition(full.lse, 1, pad, cp, r) : bshd_partition(full.lse, 1, cp, r);
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

INSTANTIATE_TEST_SUITE_P(
    CpSizes, P2pCausal, ::testing::Values(RingCase{2, false}, RingCase{4, false}, RingCase{2, true}, RingCase{4, true}),
    [](const ::testing::TestParamInfo<RingCase>& param_info) {
      return std::string(param_info.param.thd ? "thd" : "bshd") + "_cp" + std::to_string(param_info.param.cp);
    });

}  // namespace
}  // namespace ranksim::cp

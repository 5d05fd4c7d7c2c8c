// Block attention: softmax attention of a block of queries against a block of keys and values,
// returning the output and its log-sum-exp (LSE); the backward from the final merged output and
// LSE; and the merge of partial results over several key blocks. Every CP comm type (p2p ring,
// all-gather, Ulysses a2a, a2a+p2p) is built from these calls.
//
// The kernel knows nothing about CP layouts. Each query and each key/value token carries a global
// position and a segment id (TokenInfo), and visibility is decided from those alone:
//   key k is visible to query q  iff  seg(q) >= 0, seg(k) == seg(q), and
//                                     -window_left <= pos(k) - pos(q) <= window_right
// where window_left = -1 drops the lower bound, window_right = -1 drops the upper bound, and
// causal sets window_right to 0 (a key at most as late as the query). Segment ids separate packed
// THD sequences and, for BSHD, batch rows: a [b, s, h, d] tensor is passed as [b*s, h, d] with
// segment = batch index. A negative segment marks padding: it never attends, is never attended,
// and gets zero output and zero gradients. So a block can be any subset of queries against any
// subset of keys, with positions taken from cp/partition.h, and the masks of every comm type
// follow from the global positions; a caller may also pass local positions to reproduce a
// specific kernel mask (TransformerEngine's top-left causal diagonal step does that).
//
// Shapes. q [tq, hq, d], k [tk, hkv, d], v [tk, hkv, dv]; out [tq, hq, dv]; lse [hq, tq] (the
// layout TransformerEngine uses per batch row, so lse.narrow(1, ...) selects query rows).
// Grouped-query attention: hq % hkv == 0 and query head j reads key/value head j / (hq / hkv).
// d and dv may differ (MLA). q, k, v share one floating dtype.
//
// Numbers. The scaled score is s = scale * (q . k) with scale = 1/sqrt(d) unless given;
// lse = log(sum over visible keys of exp(s)); out = sum over visible keys of exp(s - lse) v. A row
// with no visible key has out = 0 and lse = -inf, never NaN. Arithmetic is in f32 for f32, bf16
// and f16 inputs and in f64 for f64 inputs; lse is stored in that type (f32 or f64), out and the
// gradients are rounded once to their output dtype. Every sum runs in one fixed order, by
// increasing index (dot products over the head dim, sums over keys, and over queries for dK/dV;
// GQA then adds the heads of a group in increasing order), so results depend only on the inputs,
// never on blocking, and repeat bit for bit. No threads.
//
// Cost. Each call charges one runtime::OpCost. With P = attention_visible_pairs(...):
//  - attention_forward charges "attention", flops 2*P*hq*(d + dv) (QK^T and PV; that is
//    4*tq*tk*hq*d for a dense block with d == dv);
//  - attention_backward charges "attention_backward", flops 2*P*hq*(3*d + 2*dv) (QK^T again,
//    dP = dO V^T, dV, dQ and dK).
// bytes = every tensor read plus every tensor written. Counting only visible pairs models a
// kernel that skips masked tiles, so causal steps cost about half of dense ones, as on a GPU. The
// merge helpers charge a few flops per element. Shape-only inputs give shape-only outputs of the
// right shapes and dtypes and are charged the same (TokenInfo is still required: it sets P).
//
// Errors (ranksim::Error naming the function and tensors): wrong ranks or sizes, dtype mismatch,
// hq % hkv != 0, token info of the wrong size, windows below -1.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/device/dtype.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::cp {

using runtime::Tensor;

namespace detail {
struct TokenRuns;  // cp/attention.cpp
}

// Where each token of a block sits in the global problem. position and segment have one entry
// per token (same size).
struct TokenInfo {
  std::vector<std::int64_t> position;  // global position: RoPE index and causal/window order
  std::vector<std::int64_t> segment;   // sequence (or batch row) id; negative = padding

  std::int64_t size() const { return static_cast<std::int64_t>(position.size()); }
  // length tokens of one segment at positions first_position, first_position + 1, ...
  static TokenInfo sequence(std::int64_t length, std::int64_t first_position = 0, std::int64_t segment = 0);
  // Tokens [start, start + length). REQUIRES: 0 <= start <= start + length <= size().
  TokenInfo slice(std::int64_t start, std::int64_t length) const;
  // The tokens at the given indices, in order. REQUIRES: 0 <= index < size().
  TokenInfo select(const std::vector<std::int64_t>& indices) const;

  // attention_visible_pairs keeps the tokens' runs of consecutive positions here, for the
  // vectors it read (a copy, or vectors that reallocated, count them again). Change no element of
  // a TokenInfo in place once it has been used; build a new one.
  mutable std::shared_ptr<const detail::TokenRuns> runs_cache{};
};

struct AttentionOptions {
  // Keys later than the query are hidden (window_right is taken as 0). Default: false.
  bool causal = false;
  // Keys more than window_left positions before the query are hidden; -1 = unbounded.
  // Default: -1.
  std::int64_t window_left = -1;
  // Keys more than window_right positions after the query are hidden; -1 = unbounded.
  // Default: -1.
  std::int64_t window_right = -1;
  // Multiplies q . k before the softmax. Default: 1/sqrt(d).
  std::optional<double> softmax_scale;
  // The dtype of out (forward) and of dq, dk, dv (backward). Default: q's dtype for out, and each
  // gradient in its input's dtype. f32 keeps partial results of bf16 blocks unrounded while a
  // caller accumulates them over CP steps.
  std::optional<runtime::DType> output_dtype;
};

// True when the key (kv_position, kv_segment) is visible to the query (q_position, q_segment)
// under opts: the rule in the header comment.
bool attention_visible(std::int64_t q_position, std::int64_t q_segment, std::int64_t kv_position,
                       std::int64_t kv_segment, const AttentionOptions& opts);

// The number of visible (query, key) pairs: sum over queries of their visible keys. Computed from
// the token info alone, so shape-only runs are charged the same: the tokens are cut into runs of
// consecutive positions of one segment (a sequence, a CP chunk), and each pair of a query run and
// a key run of the same segment is counted in closed form -- O(tq + tk) to find the runs, plus
// O(1) per pair of runs.
std::int64_t attention_visible_pairs(const TokenInfo& q_tokens, const TokenInfo& kv_tokens,
                                     const AttentionOptions& opts = {});

struct AttentionResult {
  Tensor out;  // [tq, hq, dv], opts.output_dtype or q's dtype
  Tensor lse;  // [hq, tq], f32 (f64 for f64 inputs); -inf for rows with no visible key
};

// Attention of q against (k, v).
// REQUIRES: shapes as in the header comment; q_tokens.size() == tq; kv_tokens.size() == tk;
// window_left, window_right >= -1; hkv >= 1, d >= 1.
AttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const TokenInfo& q_tokens,
                                  const TokenInfo& kv_tokens, const AttentionOptions& opts = {});

struct AttentionGrads {
  Tensor dq;  // q's shape; opts.output_dtype or q's dtype
  Tensor dk;  // k's shape (summed over the query heads of each group)
  Tensor dv;  // v's shape
};

// Gradients of sum(dout * out) for this block, given the FINAL out and lse of the queries (after
// merging every key block): with P = exp(s - lse) on visible pairs (0 elsewhere),
//   dV = P^T dO,  dP = dO V^T,  D = rowsum(dO * O),  dS = P * (dP - D),
//   dQ = scale dS K,  dK = scale dS^T Q.
// Called once per key block with the same out/lse, the blocks' dq add up to the full dq and each
// block's dk/dv is the full gradient of its keys (TransformerEngine's ring backward). Rows with
// lse = -inf and padding tokens get zero gradients.
// REQUIRES: as attention_forward; dout and out [tq, hq, dv] and lse [hq, tq], any floating dtypes.
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const TokenInfo& q_tokens,
                                  const TokenInfo& kv_tokens, const AttentionOptions& opts = {});

// --- Merging partial results ------------------------------------------------------------------
//
// Attention over the union of key blocks equals the merge of per-block results (spec B, common
// rules): lse = max + log1p(exp(min - max)) folded over the blocks in order, then
// out = sum_i out_i * exp(lse_i - lse). A part whose lse is -inf for a row contributes nothing
// (its out is 0), which keeps fully masked rows and all-padding chunks free of NaN (spec E8).
// The in-place helpers work on any view and may touch only some rows of the accumulator (p2p
// upper-triangle steps touch the second half; THD halves are index lists). When any operand is
// shape-only they write nothing and are still charged (in a shape-only run every operand is).

// Which rows (query tokens) of an accumulator a partial result covers, in the part's row order.
class Rows {
 public:
  static Rows all();                                           // every row; the part has them all
  static Rows range(std::int64_t start, std::int64_t length);  // rows [start, start + length)
  static Rows list(std::vector<std::int64_t> indices);         // the listed rows, in order
  // The row indices selected out of n rows. REQUIRES: they lie in [0, n). fn names the caller
  // in the error.
  std::vector<std::int64_t> resolve(std::int64_t n, const char* fn) const;
  // How many rows, with resolve's checks, without listing them.
  std::int64_t count(std::int64_t n, const char* fn) const;

 private:
  enum class Kind { all, range, list };
  Kind kind_ = Kind::all;
  std::int64_t start_ = 0, length_ = 0;
  std::vector<std::int64_t> indices_;
};

// lse[:, rows] = merge(lse[:, rows], part_lse), in place, computed in f32 (f64 if either is f64).
// REQUIRES: lse [h, n], part_lse [h, m] (m the number of rows), floating dtypes.
void merge_lse_(const Tensor& lse, const Tensor& part_lse, const Rows& rows = Rows::all());

// out[rows] += part_out * exp(part_lse - lse[:, rows]), in place: one correction term, computed
// in f32 (f64 if any operand is f64) and rounded once into out's dtype. lse is the final merged
// LSE (merge_lse_ of every part first, then add each part's correction in step order).
// REQUIRES: out [n, h, dv]; lse [h, n]; part_out [m, h, dv]; part_lse [h, m]; floating dtypes.
void add_corrected_out_(const Tensor& out, const Tensor& lse, const Tensor& part_out, const Tensor& part_lse,
                        const Rows& rows = Rows::all());

// The merge of parts that all cover the same rows, in order: lse folded with merge_lse_, out
// built from zeros in parts[0].out's dtype with add_corrected_out_. Shape-only parts give a
// shape-only result. REQUIRES: non-empty; equal shapes.
AttentionResult merge_attention(const std::vector<AttentionResult>& parts);

// acc[rows] += part, in place, in f32 (f64 if either is f64), rounded once into acc's dtype:
// accumulating dq over CP steps, or dk/dv into a half of a KV block.
// REQUIRES: acc [n, ...]; part [m, ...] with acc's trailing dims; floating dtypes.
void add_rows_(const Tensor& acc, const Tensor& part, const Rows& rows = Rows::all());

}  // namespace ranksim::cp

// Context-parallel attention: TransformerEngine's four CP communication types behind one
// forward/backward pair (spec sections B1-B4), with an explicit backward from a saved context as
// TE's AttnFuncWithCP* autograd functions have.
//
// Every rank of a CP group of size cp calls attention_with_cp_forward with its local q, k, v in
// the DualChunkSwap layout of cp/partition.h (rank r holds chunks r and 2cp-1-r of every
// sequence), and gets its local output in the same layout; attention_with_cp_backward turns the
// local dout into the local dq, dk, dv. The result equals full attention on the global tensors
// (the block kernel of cp/attention.h on the whole sequence) sliced the same way, up to the
// rounding of a different summation order.
//
//  - p2p (B1): a ring over the CP group. KV travels r -> r+1 in forward (the receive for step
//    i+1 is posted before step i computes); the backward ring runs r -> r-1 with dKV travelling
//    beside KV and ending on its owner, dQ accumulated locally. Which halves of Q and KV_s a step
//    computes is decided from the global positions: any half whose (Q half, KV half) pairs are
//    all masked is left out, and a step with nothing visible is skipped (its KV still travels).
//    Under a causal mask this is exactly TE's causal halving -- step 0 the diagonal, steps 1..r
//    all of Q against the first half of KV_s, later steps the second half of Q against all of
//    KV_s -- and the same rule makes sliding windows work on the ring (TE rejects SWA with p2p;
//    here the kernel applies any window from explicit positions, so leaving blocks out is only
//    an optimisation and never changes the result). LSE is merged in f32 (f64 for f64 inputs)
//    on the rows each step covers; partial outputs are corrected in step order into an f32
//    accumulator that is rounded once to the output dtype.
//  - all_gather (B2): K and V are all-gathered and reordered to natural order; each local Q chunk
//    c attends the KV rows [max(0, cC - w_left), min(S, (c+1)C + w_right)) of its sequence, with
//    no LSE merge. Backward re-gathers K and V, accumulates dK/dV over full-length f32 buffers,
//    reorders them to rank-chunk order and reduce-scatters them (in the input dtype).
//  - a2a (B3, Ulysses): an all_to_all_single turns [local tokens, all heads] into [all tokens,
//    heads/cp] (contiguous head blocks, so GQA's q -> kv head map holds), attention runs on the
//    whole sequence in natural order, and a second all-to-all brings the output back. Requires
//    hq % cp == 0 and hkv % cp == 0.
//  - a2a+p2p (B4, hierarchical): cp = a * p, position in the CP group = p2p_rank * a + a2a_rank.
//    An a2a inside the group of a (heads/a) leaves a rank holding the p-level DualChunkSwap
//    chunks p2p_rank and 2p-1-p2p_rank; the p2p ring then runs with cp = p; the output goes back
//    by a2a. Requires hq % a == 0 and hkv % a == 0.
//
// Masks (AttentionOptions): causal or not, sliding windows (window_left, window_right; -1 =
// unbounded) and, for THD, padding -- every comm type takes every combination. Segments keep
// THD sequences and BSHD batch rows apart; pad tokens never attend and are never attended, and
// get zero output and zero gradients. GQA: hq % hkv == 0.
//
// Formats. BSHD: q [b, S/cp, hq, d], k [b, S/cp, hkv, d], v [b, S/cp, hkv, dv], S % 2cp == 0, the
// DualChunkSwap split per batch row (SBHD callers transpose to BSHD first). THD: q [T/cp, hq, d]
// with T = cu_seqlens_padded.back(); both cu lists are global, real lengths in cu_seqlens and the
// per-sequence padding to a multiple of 2cp in cu_seqlens_padded (spec E1: the two are always
// distinct inputs, so a length-7 sequence at cp = 2 keeps its 7 real tokens).
//
// Shape-only tensors (runtime/tensor/tensor.h) run the same communication and are charged the same
// compute, moving no data: that is how long sequences are timed.
//
// Errors (ranksim::Error, raised before any communication, naming the numbers): heads not
// divisible for a2a / a2a+p2p, hierarchical sizes whose product is not cp, S not a multiple of
// 2cp, cu_seqlens that decrease, padding that is not a multiple of 2cp, tensors whose shapes do
// not match the layout, a rank outside the CP group.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cp/attention.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::cp {

enum class CommType { p2p, all_gather, a2a, a2a_p2p };

// "p2p", "all_gather", "a2a", "a2a+p2p" (TransformerEngine's cp_comm_type strings).
const char* comm_type_name(CommType type);
// The inverse of comm_type_name; an Error listing the valid names otherwise.
CommType parse_comm_type(const std::string& name);

enum class Format { bshd, thd };

// The global sequence metadata, the same on every rank of the CP group.
struct SequenceLayout {
  Format format = Format::bshd;
  std::int64_t batch = 1;    // BSHD: batch rows. Default: 1.
  std::int64_t seq_len = 0;  // BSHD: the global sequence length S. Default: 0.
  std::vector<std::int64_t> cu_seqlens;         // THD: cumulative real lengths, from 0
  std::vector<std::int64_t> cu_seqlens_padded;  // THD: cumulative padded lengths, from 0

  static SequenceLayout bshd(std::int64_t batch, std::int64_t seq_len);
  // REQUIRES (checked when used): the lists as described in cp/partition.h.
  static SequenceLayout thd(std::vector<std::int64_t> cu_seqlens,
                            std::vector<std::int64_t> cu_seqlens_padded);
};

// Which local rows of a rank's block a step uses: both chunks, one, or none.
enum class Half { none, first, second, all };

// A SequenceLayout split over cp ranks: for every rank, the global row of each of its local rows,
// their TokenInfo (global position, segment; -1 for THD padding), and the local rows of the first
// and second chunk. Global rows are flat: BSHD row = batch * S + position, THD row = the padded
// packed index. Local rows are flat too: BSHD local row = batch * (S/cp) + t.
// Cheap to build (index lists only); immutable.
class CpLayout {
 public:
  // REQUIRES: the layout is valid for cp (S % 2cp == 0; THD cu lists valid, each padded length a
  // multiple of 2cp and at least the real one); cp >= 1. Otherwise an Error naming the values.
  CpLayout(const SequenceLayout& layout, std::int64_t cp);

  const SequenceLayout& layout() const { return layout_; }
  std::int64_t cp() const { return cp_; }
  std::int64_t global_rows() const { return global_.size(); }  // b*S or T
  std::int64_t local_rows() const { return local_rows_; }      // global_rows() / cp
  // The global row of each local row of rank r, in local order. REQUIRES: 0 <= r < cp.
  const std::vector<std::int64_t>& rows_of(std::int64_t r) const;
  const TokenInfo& global_tokens() const { return global_; }  // natural order
  // TokenInfo of rank r's local rows (all of them, or one chunk of each sequence / batch row).
  const TokenInfo& tokens_of(std::int64_t r, Half half = Half::all) const;
  // Local rows of the first / second chunk of every sequence (every rank has the same).
  const std::vector<std::int64_t>& half_rows(Half half) const;

 private:
  SequenceLayout layout_;
  std::int64_t cp_ = 1;
  std::int64_t local_rows_ = 0;
  TokenInfo global_;
  std::vector<std::vector<std::int64_t>> rows_;
  std::vector<TokenInfo> tokens_, tokens_first_, tokens_second_;
  std::vector<std::int64_t> first_, second_, all_;
};

// A p2p ring step: which half of the local Q and which half of the visiting KV_s are computed.
// q == Half::none means the step is skipped. Decided as in the header comment.
struct P2pStep {
  Half q = Half::all;
  Half kv = Half::all;
};
// The step of rank r holding the KV of rank kv_rank. REQUIRES: both in [0, layout.cp()).
P2pStep p2p_step(const CpLayout& layout, std::int64_t r, std::int64_t kv_rank,
                 const AttentionOptions& opts);

// The process groups a rank passes. For p2p, all_gather and a2a only `cp` is used; a2a+p2p also
// needs this rank's a2a and p2p subgroups (hierarchical_cp_groups builds them).
struct CpGroups {
  CpGroups() = default;
  CpGroups(runtime::ProcessGroup cp_group)  // NOLINT: a plain CP group converts implicitly
      : cp(std::move(cp_group)) {}
  runtime::ProcessGroup cp;   // the whole CP group; a rank's CP position is cp.rank()
  runtime::ProcessGroup a2a;  // a2a+p2p: the a ranks at positions [p2p_rank*a, (p2p_rank+1)*a)
  runtime::ProcessGroup p2p;  // a2a+p2p: the p ranks at positions a2a_rank + a*k
};

// Megatron's hierarchical_context_parallel_sizes = [a2a_size, p2p_size]: creates (new_group) every
// a2a and p2p subgroup of cp, in the same order on each member, and returns this rank's.
// Every member of cp must call it (the k-th creation of a rank set is one group).
// REQUIRES: this rank is in cp; a2a_size * p2p_size == cp.size(), both >= 1.
CpGroups hierarchical_cp_groups(const runtime::ProcessGroup& cp, int a2a_size, int p2p_size);
// The default split [2, cp/2] (cp/2 = 1 for cp = 2). REQUIRES: cp.size() even.
CpGroups hierarchical_cp_groups(const runtime::ProcessGroup& cp);

struct CpOptions {
  // Default: p2p.
  CommType comm_type = CommType::p2p;
  // The mask, window and softmax scale (cp/attention.h). output_dtype, when set, is the dtype of
  // out and of dq, dk, dv. Default: causal off, no window, 1/sqrt(d), the inputs' dtype.
  AttentionOptions attention;
};

// What the backward needs; filled by the forward. The tensors are in the comm type's working
// layout (rows flattened): p2p keeps q, k, v, out, lse and the KV buffer of rank r+1 it ended
// with; all_gather keeps q, k, v and each chunk's out and lse; a2a keeps the head-split q, k, v,
// out and lse in natural order; a2a+p2p keeps the head-split tensors in the p-level layout.
struct CpContext {
  CommType comm_type = CommType::p2p;
  SequenceLayout layout;
  CpGroups groups;
  AttentionOptions attention;
  runtime::Shape q_shape, k_shape, v_shape;  // the caller's local shapes
  runtime::DType dtype = runtime::DType::f32;
  Tensor q, k, v, out, lse, kv_next;
  std::vector<Tensor> chunk_out, chunk_lse;  // all_gather: per local chunk
};

struct CpForwardResult {
  Tensor out;  // q's local shape with dv for d: [b, S/cp, hq, dv] or [T/cp, hq, dv]
  CpContext ctx;
};

// REQUIRES: called by every member of groups.cp with the same layout and options; q, k, v as in
// the header comment, one floating dtype, contiguous or not.
CpForwardResult attention_with_cp_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const SequenceLayout& layout, const CpGroups& groups,
                                          const CpOptions& opts = {});

struct CpGrads {
  Tensor dq, dk, dv;  // the local shapes of q, k, v
};

// REQUIRES: dout has out's shape (any floating dtype); ctx from attention_with_cp_forward on
// this rank; called by every member of the group.
CpGrads attention_with_cp_backward(const Tensor& dout, const CpContext& ctx);

}  // namespace ranksim::cp

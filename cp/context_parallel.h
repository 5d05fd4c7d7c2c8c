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
// The types a call is described by -- CommType, SequenceLayout, CpLayout, CpGroups and the saved
// CpContext -- are declared in cp/layout.h, which this header includes; the comm types
// (cp/comm_types.h) share them without depending on these entry points.
//
// Errors (ranksim::Error, raised before any communication, naming the numbers): heads not
// divisible for a2a / a2a+p2p, hierarchical sizes whose product is not cp, S not a multiple of
// 2cp, cu_seqlens that decrease, padding that is not a multiple of 2cp, tensors whose shapes do
// not match the layout, a rank outside the CP group.
#pragma once

#include "cp/attention.h"
#include "cp/layout.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::cp {

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

// Sequence partitioning for context parallelism: which global tokens each CP rank holds, and
// how to cut a rank's slice out of a global tensor and put per-rank tensors back together.
//
// Every layout is TransformerEngine's load-balanced "DualChunkSwap" (spec section A). With cp
// ranks a sequence is cut into 2*cp equal chunks and rank r holds chunk r followed by chunk
// 2*cp-1-r, so under a causal mask every rank does the same amount of work.
//  - BSHD/SBHD (A1): one sequence length S for the whole batch, S % (2*cp) == 0, chunk C =
//    S/(2*cp). Local index t maps to global r*C + t if t < C, else (2*cp-1-r)*C + (t - C).
//  - THD (A2): packed sequences described by cu_seqlens (cumulative real lengths, starting at 0;
//    zero-length sequences are allowed). Each sequence i is padded on its own to a multiple of
//    2*cp (cu_seqlens_padded) and split like a BSHD sequence with chunk C_i = P_i/(2*cp); the
//    rank's local layout is, sequence after sequence, a contiguous block of 2*C_i tokens at local
//    offset cu_seqlens_padded[i]/cp. Real tokens always form a prefix of that block.
//
// Positions (A3) keep their global values: RoPE and attention masks use them, never the local
// index. In THD a sequence's positions count 0, 1, ... on through its padding.
//
// The index functions are pure and cheap (no tensors). The tensor functions take a rank's slice
// or reassemble along any dimension with narrow + cat (runtime/tensor/ops.h): results are new contiguous
// tensors, charged as "cat", and shape-only inputs give shape-only results.
//
// cu_seqlens arguments are std::vector<int64_t>; a cu_seqlens tensor (int32 in batch files)
// converts with to_vector<std::int64_t>(). Every violated precondition is a ranksim::Error naming
// the function and the offending values.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ranksim::cp {

using runtime::Tensor;

// --- BSHD / SBHD (A1, A4) ----------------------------------------------------------------------

// The global token indices rank cp_rank holds, in local order: chunk r then chunk 2*cp-1-r.
// REQUIRES: cp_size >= 1, 0 <= cp_rank < cp_size, seq_len >= 0 and seq_len % (2*cp_size) == 0.
std::vector<std::int64_t> bshd_partition_indices(std::int64_t seq_len, std::int64_t cp_size, std::int64_t cp_rank);

// Rank cp_rank's slice of x along seq_dim (1 for BSHD, 0 for SBHD; negative counts from the end):
// the two chunks concatenated, as Megatron's get_batch_on_this_cp_rank does for tokens, labels,
// loss masks and position ids. REQUIRES: as bshd_partition_indices with seq_len = x.size(seq_dim).
Tensor bshd_partition(const Tensor& x, std::int64_t seq_dim, std::int64_t cp_size, std::int64_t cp_rank);

// The inverse of bshd_partition over all ranks: locals[r] is rank r's slice, cp = locals.size().
// REQUIRES: a non-empty list; equal shapes and dtypes; an even size along seq_dim.
Tensor bshd_unpartition(const std::vector<Tensor>& locals, std::int64_t seq_dim);

// --- THD (A2, A4) ------------------------------------------------------------------------------

// Each sequence padded on its own to a multiple of 2*cp_size: cumsum(ceil(L_i/(2cp))*2cp).
// REQUIRES: cu_seqlens non-empty, cu_seqlens[0] == 0, non-decreasing; cp_size >= 1.
std::vector<std::int64_t> thd_padded_cu_seqlens(const std::vector<std::int64_t>& cu_seqlens, std::int64_t cp_size);

// The global (padded) token indices rank cp_rank holds, in local order: for each sequence i,
// [st_i + r*C_i, st_i + (r+1)*C_i) then [st_i + (2cp-1-r)*C_i, st_i + (2cp-r)*C_i), with
// st_i = cu_seqlens_padded[i] (TransformerEngine's thd_get_partitioned_indices).
// REQUIRES: cu_seqlens_padded valid as above, each length a multiple of 2*cp_size;
// 0 <= cp_rank < cp_size.
std::vector<std::int64_t> thd_partition_indices(const std::vector<std::int64_t>& cu_seqlens_padded,
                                                std::int64_t cp_size, std::int64_t cp_rank);

// The same map for one local token, by TransformerEngine's kernel formula (binary search for the
// sequence s at local offsets cu_seqlens_padded/cp, ix = t - cu_seqlens_padded[s]/cp,
// src = ix + cu_seqlens_padded[s] + C_s * (ix < C_s ? r : 2cp-2-r)). Kept beside the chunk form
// so the two can be checked against each other.
// REQUIRES: as thd_partition_indices; 0 <= local_index < cu_seqlens_padded.back()/cp_size.
std::int64_t thd_partition_source_index(const std::vector<std::int64_t>& cu_seqlens_padded, std::int64_t cp_size,
                                        std::int64_t cp_rank, std::int64_t local_index);

// Which halves of each local 2*C_i block get_cu_seqlens_on_cp_rank counts.
enum class ThdHalves { both, first, second };

// Real (unpadded) tokens rank cp_rank holds, as cumulative lengths over the sequences
// (get_cu_seqlens_on_cp_rank): sequence i contributes clamp(L_i - r*C_i, 0, C_i) for its first
// chunk and clamp(L_i - (2cp-1-r)*C_i, 0, C_i) for its second. Example: cu [0,7,18,23], cp 2 gives
// r0 [0,3,8,10] and r1 [0,4,10,13].
// REQUIRES: cu_seqlens and cu_seqlens_padded valid, same count, cu_seqlens_padded ==
// thd_padded_cu_seqlens(cu_seqlens, cp_size) or any padding with L_i <= P_i and P_i % 2cp == 0.
std::vector<std::int64_t> thd_cu_seqlens_on_rank(const std::vector<std::int64_t>& cu_seqlens,
                                                 const std::vector<std::int64_t>& cu_seqlens_padded,
                                                 std::int64_t cp_size, std::int64_t cp_rank,
                                                 ThdHalves halves = ThdHalves::both);

// Local row indices of one half (the first or second chunk) of every sequence's local block, in
// order: the rows that the p2p lower/upper-triangle steps read (thd_read_half_tensor).
// ThdHalves::both gives every local row. REQUIRES: as thd_partition_indices (no cp_rank: every
// rank has the same local layout).
std::vector<std::int64_t> thd_half_rows(const std::vector<std::int64_t>& cu_seqlens_padded, std::int64_t cp_size,
                                        ThdHalves half);

// Rank cp_rank's slice of x along seq_dim (x holds the padded packed tokens: size
// cu_seqlens_padded.back() along seq_dim). REQUIRES: as thd_partition_indices.
Tensor thd_partition(const Tensor& x, std::int64_t seq_dim, const std::vector<std::int64_t>& cu_seqlens_padded,
                     std::int64_t cp_size, std::int64_t cp_rank);

// The inverse over all ranks: global[thd_partition_indices(r)] = locals[r], cp = locals.size().
// REQUIRES: a non-empty list; each local's size along seq_dim is cu_seqlens_padded.back()/cp;
// otherwise equal shapes and dtypes.
Tensor thd_unpartition(const std::vector<Tensor>& locals, std::int64_t seq_dim,
                       const std::vector<std::int64_t>& cu_seqlens_padded);

// --- THD padding (A2) --------------------------------------------------------------------------

// x with every sequence padded at its end along dim 0 to its length in cu_seqlens_padded,
// the new elements set to pad_value (converted to x's dtype).
// REQUIRES: x.size(0) == cu_seqlens.back(); the cu lists valid, same count, P_i >= L_i.
Tensor thd_pad(const Tensor& x, const std::vector<std::int64_t>& cu_seqlens,
               const std::vector<std::int64_t>& cu_seqlens_padded, double pad_value);

// The inverse: only the real tokens of each sequence, packed (e.g. logits for a dump).
// REQUIRES: x.size(0) == cu_seqlens_padded.back(); the cu lists as for thd_pad.
Tensor thd_unpad(const Tensor& x, const std::vector<std::int64_t>& cu_seqlens,
                 const std::vector<std::int64_t>& cu_seqlens_padded);

struct ThdPadded {
  Tensor input_ids;  // [cu_seqlens_padded.back()], pad_id at padding
  Tensor labels;     // [cu_seqlens_padded.back()], pad_label at padding
  std::vector<std::int64_t> cu_seqlens_padded;
};
// TransformerEngine's pad_thd_sequences_for_cp: pads ids and labels (1-d, packed real tokens)
// for cp_size ranks. Labels are expected to be shifted already (spec E6).
// REQUIRES: input_ids and labels 1-d of size cu_seqlens.back(); cu_seqlens valid; cp_size >= 1.
ThdPadded pad_thd_for_cp(const Tensor& input_ids, const Tensor& labels, const std::vector<std::int64_t>& cu_seqlens,
                         std::int64_t cp_size, std::int64_t pad_id, std::int64_t pad_label = -100);

// --- Positions and sequence membership (A2, A3) -----------------------------------------------

// Position of every padded token within its sequence: 0 .. P_i-1, counting on through the padding
// (generate_positional_ids_for_cp). Size cu_seqlens_padded.back().
std::vector<std::int64_t> thd_position_ids(const std::vector<std::int64_t>& cu_seqlens_padded);

// The sequence each padded token belongs to: i for the real tokens of sequence i, -1 for padding
// (the segment ids cp/attention.h takes). Size cu_seqlens_padded.back().
// REQUIRES: the cu lists as for thd_pad.
std::vector<std::int64_t> thd_segment_ids(const std::vector<std::int64_t>& cu_seqlens,
                                          const std::vector<std::int64_t>& cu_seqlens_padded);

// RoPE frequency index of every local token of rank cp_rank (A3): for local token t of sequence
// i, r*C_i + t if t < C_i else (2cp-1-r)*C_i + (t - C_i), plus start_positions[i] when given
// (empty = all zero). These are also the positions the attention mask compares.
// REQUIRES: as thd_partition_indices; start_positions empty or one per sequence.
std::vector<std::int64_t> thd_local_positions(const std::vector<std::int64_t>& cu_seqlens_padded, std::int64_t cp_size,
                                              std::int64_t cp_rank,
                                              const std::vector<std::int64_t>& start_positions = {});

// Segment ids of rank cp_rank's local tokens (thd_segment_ids taken at the partition indices).
std::vector<std::int64_t> thd_local_segments(const std::vector<std::int64_t>& cu_seqlens,
                                             const std::vector<std::int64_t>& cu_seqlens_padded, std::int64_t cp_size,
                                             std::int64_t cp_rank);

// RoPE frequency index of rank cp_rank's local tokens in BSHD (Megatron keeps rotary-table chunks
// r and 2cp-1-r): the same values as bshd_partition_indices.
std::vector<std::int64_t> bshd_local_positions(std::int64_t seq_len, std::int64_t cp_size, std::int64_t cp_rank);

// --- Gathering ----------------------------------------------------------------------------------

// x's elements at the given indices along dim, in that order (torch.index_select), built from one
// narrow per run of consecutive indices. A new contiguous tensor, charged as "cat".
// REQUIRES: 0 <= index < x.size(dim) for every index.
Tensor index_select(const Tensor& x, std::int64_t dim, const std::vector<std::int64_t>& indices);

}  // namespace ranksim::cp

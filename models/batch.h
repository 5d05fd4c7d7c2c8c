// Batches of the reference transformer (models/transformer.h): the global batch every rank
// holds, synthetic and built-in batches, the data-parallel split, and one CP rank's share.
//
// BSHD: input_ids and labels i64 [B, S], every row one sequence; S % (2 cp) == 0 for cp > 1.
// THD: input_ids and labels i64 [T] (packed real tokens), cu_seqlens the cumulative real lengths;
// for cp > 1 each sequence is padded to a multiple of 2 cp with id kPadId and label kIgnoreIndex
// (cp/partition.h pad_thd_for_cp). Labels are already shifted (spec E6).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cp/attention.h"
#include "cp/context_parallel.h"
#include "models/loss.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models {

constexpr std::int64_t kPadId = 1;  // THD padding id (the bionemo framework's)

// A global batch, the same on every rank.
struct Batch {
  cp::Format format = cp::Format::bshd;
  runtime::Tensor input_ids;             // i64: [B, S] (BSHD) or [T] (THD)
  runtime::Tensor labels;                // i64, input_ids' shape; -100 = ignored
  std::vector<std::int64_t> cu_seqlens;  // THD: cumulative real lengths from 0, ending at T
};

// A batch of the given sequence lengths (THD: packed, any lengths; BSHD: one row per length, all
// equal), ids uniform in [2, vocab) from seed (0 and 1 are kept for special tokens; 1 pads),
// labels the next id of the same sequence and -100 for each sequence's last token.
// Errors: no lengths, a length < 1, BSHD lengths that differ, vocab < 3.
Batch synthetic_batch(cp::Format format, std::int64_t vocab, const std::vector<std::int64_t>& lengths,
                      std::uint64_t seed);
// The framework's built-in batches: THD three sequences of lengths 7, 11 and 5 (the bionemo
// example); BSHD 2 rows of 32 tokens.
Batch dummy_batch(cp::Format format, std::int64_t vocab, std::uint64_t seed);

// Data parallelism: DP rank d's part of a global batch -- BSHD rows [d B/dp, (d+1) B/dp), THD
// whole sequences [d n/dp, (d+1) n/dp) of the n sequences. Errors when dp does not divide B
// (or n), naming both.
Batch dp_slice(const Batch& batch, std::int64_t dp, std::int64_t d);
// The same split for any purpose (what names it in the error: "dp", "micro_batches").
Batch batch_slice(const Batch& batch, std::int64_t parts, std::int64_t index, const std::string& what);

// One CP rank's share of a batch.
struct LocalBatch {
  runtime::Tensor ids, labels;  // i64 [N]: the local tokens, N = padded rows / cp
  // The global position and segment of each local token. Shared: a training step's micro-batches
  // with the same tokens hold one copy (models/train.cpp).
  std::shared_ptr<const cp::TokenInfo> token_info;
  const cp::TokenInfo& tokens() const { return *token_info; }
  std::vector<std::int64_t> global_rows;  // the padded global row of each local token
  cp::SequenceLayout layout;              // for cp/context_parallel.h
  std::int64_t padded_rows = 0;           // global rows including THD padding
  std::vector<std::int64_t> real_rows;    // padded global rows of the real tokens, in global order
  std::int64_t cp = 1, rank = 0;
};
// REQUIRES: check_batch passed; 0 <= rank < cp.
LocalBatch shard_batch(const Batch& batch, std::int64_t cp, std::int64_t rank);

}  // namespace ranksim::models

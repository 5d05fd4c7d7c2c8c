#include "models/batch.h"

#include <string>
#include <utility>
#include <vector>

#include "cp/partition.h"
#include "sim/error.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using i64 = std::int64_t;

namespace {
std::string str(i64 v) { return std::to_string(v); }
}  // namespace

Batch synthetic_batch(cp::Format format, i64 vocab, const std::vector<i64>& lengths, std::uint64_t seed) {
  if (vocab < 3) throw Error("synthetic batch: vocab must be >= 3 (ids 0 and 1 are reserved), got " + str(vocab));
  if (lengths.empty()) throw Error("synthetic batch: no sequence lengths");
  for (i64 len : lengths) {
    if (len < 1) throw Error("synthetic batch: sequence length " + str(len) + " must be >= 1");
    if (format == cp::Format::bshd && len != lengths[0]) {
      throw Error("synthetic batch: bshd rows have one length, got " + runtime::shape_str(lengths));
    }
  }
  Batch b;
  b.format = format;
  std::vector<i64> ids, labels;
  std::uint64_t counter = 0;
  b.cu_seqlens = {0};
  for (i64 len : lengths) {
    const std::size_t first = ids.size();
    for (i64 t = 0; t < len; ++t) {
      ids.push_back(2 +
                    static_cast<i64>(runtime::random_bits(seed, counter++) % static_cast<std::uint64_t>(vocab - 2)));
    }
    for (i64 t = 0; t < len; ++t) {
      labels.push_back(t + 1 < len ? ids[first + static_cast<std::size_t>(t) + 1] : kIgnoreIndex);
    }
    b.cu_seqlens.push_back(b.cu_seqlens.back() + len);
  }
  const Shape shape = format == cp::Format::thd ? Shape{static_cast<i64>(ids.size())}
                                                : Shape{static_cast<i64>(lengths.size()), lengths[0]};
  b.input_ids = Tensor::from_vector(ids, shape);
  b.labels = Tensor::from_vector(labels, shape);
  if (format == cp::Format::bshd) b.cu_seqlens.clear();
  return b;
}

Batch dummy_batch(cp::Format format, i64 vocab, std::uint64_t seed) {
  return synthetic_batch(format, vocab,
                         format == cp::Format::thd ? std::vector<i64>{7, 11, 5} : std::vector<i64>{32, 32}, seed);
}

Batch dp_slice(const Batch& b, i64 dp, i64 d) { return batch_slice(b, dp, d, "dp"); }

Batch batch_slice(const Batch& b, i64 dp, i64 d, const std::string& what) {
  if (dp < 1 || d < 0 || d >= dp) throw Error("batch_slice: part " + str(d) + " outside " + what + "=" + str(dp));
  if (dp == 1) return b;
  Batch out;
  out.format = b.format;
  if (b.format == cp::Format::bshd) {
    const i64 rows = b.input_ids.size(0);
    if (rows % dp != 0) {
      throw Error("the batch has " + str(rows) + " rows, which " + what + "=" + str(dp) +
                  " does not divide (each part takes an equal share of rows)");
    }
    const i64 per = rows / dp;
    out.input_ids = b.input_ids.narrow(0, d * per, per).contiguous();
    out.labels = b.labels.narrow(0, d * per, per).contiguous();
    return out;
  }
  const i64 n = static_cast<i64>(b.cu_seqlens.size()) - 1;
  if (n % dp != 0) {
    throw Error("the batch has " + str(n) + " sequences, which " + what + "=" + str(dp) +
                " does not divide (each part takes an equal share of whole sequences)");
  }
  const i64 per = n / dp;
  const i64 start = b.cu_seqlens[static_cast<std::size_t>(d * per)];
  const i64 end = b.cu_seqlens[static_cast<std::size_t>((d + 1) * per)];
  out.input_ids = b.input_ids.narrow(0, start, end - start).contiguous();
  out.labels = b.labels.narrow(0, start, end - start).contiguous();
  for (i64 s = d * per; s <= (d + 1) * per; ++s)
    out.cu_seqlens.push_back(b.cu_seqlens[static_cast<std::size_t>(s)] - start);
  return out;
}

LocalBatch shard_batch(const Batch& b, i64 cp, i64 rank) {
  if (cp < 1 || rank < 0 || rank >= cp) {
    throw Error("shard_batch: rank " + str(rank) + " outside a CP group of " + str(cp));
  }
  LocalBatch lb;
  lb.cp = cp;
  lb.rank = rank;
  const Tensor ids = b.input_ids.to(DType::i64);
  const Tensor labels = b.labels.to(DType::i64);
  if (b.format == cp::Format::bshd) {
    const i64 B = ids.size(0), S = ids.size(1);
    lb.layout = cp::SequenceLayout::bshd(B, S);
    lb.padded_rows = B * S;
    for (i64 r = 0; r < B * S; ++r) lb.real_rows.push_back(r);
    const Tensor flat_ids = ids.reshape({B * S}), flat_labels = labels.reshape({B * S});
    if (cp == 1) {
      lb.global_rows = lb.real_rows;
      cp::TokenInfo t;
      t.position.reserve(static_cast<std::size_t>(B * S));
      t.segment.reserve(static_cast<std::size_t>(B * S));
      for (i64 r = 0; r < B * S; ++r) {
        t.position.push_back(r % S);
        t.segment.push_back(r / S);
      }
      lb.token_info = std::make_shared<const cp::TokenInfo>(std::move(t));
      lb.ids = flat_ids.clone();
      lb.labels = flat_labels.clone();
      return lb;
    }
    const std::shared_ptr<const cp::CpLayout> shared_layout = cp::CpLayout::shared(lb.layout, cp);
    const cp::CpLayout& layout = *shared_layout;
    lb.global_rows = layout.rows_of(rank);
    lb.token_info = std::make_shared<const cp::TokenInfo>(layout.tokens_of(rank));
    lb.ids = cp::index_select(flat_ids, 0, lb.global_rows);
    lb.labels = cp::index_select(flat_labels, 0, lb.global_rows);
    return lb;
  }
  const std::vector<i64>& cu = b.cu_seqlens;
  if (cp == 1) {
    lb.layout = cp::SequenceLayout::thd(cu, cu);
    lb.padded_rows = cu.back();
    for (i64 r = 0; r < cu.back(); ++r) lb.real_rows.push_back(r);
    lb.global_rows = lb.real_rows;
    lb.token_info =
        std::make_shared<const cp::TokenInfo>(cp::TokenInfo{cp::thd_position_ids(cu), cp::thd_segment_ids(cu, cu)});
    lb.ids = ids.clone();
    lb.labels = labels.clone();
    return lb;
  }
  const cp::ThdPadded padded = cp::pad_thd_for_cp(ids, labels, cu, cp, kPadId, kIgnoreIndex);
  lb.layout = cp::SequenceLayout::thd(cu, padded.cu_seqlens_padded);
  lb.padded_rows = padded.cu_seqlens_padded.back();
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    for (i64 t = 0; t < cu[s + 1] - cu[s]; ++t) lb.real_rows.push_back(padded.cu_seqlens_padded[s] + t);
  }
  const std::shared_ptr<const cp::CpLayout> shared_layout = cp::CpLayout::shared(lb.layout, cp);
  const cp::CpLayout& layout = *shared_layout;
  lb.global_rows = layout.rows_of(rank);
  lb.token_info = std::make_shared<const cp::TokenInfo>(layout.tokens_of(rank));
  lb.ids = cp::index_select(padded.input_ids.to(DType::i64), 0, lb.global_rows);
  lb.labels = cp::index_select(padded.labels.to(DType::i64), 0, lb.global_rows);
  return lb;
}

}  // namespace ranksim::models

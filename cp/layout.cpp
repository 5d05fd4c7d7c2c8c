#include "cp/layout.h"

#include <deque>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>

#include "cp/partition.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using i64 = std::int64_t;

// Every layout error is raised by CpLayout's constructor, whichever entry point built it: the
// prefix says which input was wrong.
[[noreturn]] void fail(const std::string& message) { throw Error("context parallel layout: " + message); }

std::string list_str(const std::vector<i64>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::size_t at(i64 i) { return static_cast<std::size_t>(i); }

// cu lists checked here rather than deep inside partition.h, so the message names the layout
// and the CP size the padding has to fit.
void check_cu(const std::vector<i64>& cu, const char* name) {
  if (cu.empty() || cu[0] != 0) fail(std::string(name) + " " + list_str(cu) + " must start with 0");
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      fail(std::string(name) + " " + list_str(cu) + " must not decrease: entry " + std::to_string(i) + " = " +
           std::to_string(cu[i]) + " < entry " + std::to_string(i - 1) + " = " + std::to_string(cu[i - 1]));
    }
  }
}

void check_layout(const SequenceLayout& l, i64 cp) {
  if (cp < 1) fail("cp = " + std::to_string(cp) + " must be at least 1");
  if (l.format == Format::bshd) {
    if (l.batch < 1) fail("BSHD batch = " + std::to_string(l.batch) + " must be at least 1");
    if (l.seq_len < 0 || l.seq_len % (2 * cp) != 0) {
      fail("BSHD sequence length S = " + std::to_string(l.seq_len) + " is not a multiple of 2*cp = " +
           std::to_string(2 * cp) + " (DualChunkSwap cuts every sequence into 2*cp equal chunks)");
    }
    return;
  }
  check_cu(l.cu_seqlens, "cu_seqlens");
  check_cu(l.cu_seqlens_padded, "cu_seqlens_padded");
  if (l.cu_seqlens.size() != l.cu_seqlens_padded.size()) {
    fail("cu_seqlens " + list_str(l.cu_seqlens) + " and cu_seqlens_padded " + list_str(l.cu_seqlens_padded) +
         " describe different numbers of sequences");
  }
  for (std::size_t i = 0; i + 1 < l.cu_seqlens.size(); ++i) {
    const i64 real = l.cu_seqlens[i + 1] - l.cu_seqlens[i];
    const i64 padded = l.cu_seqlens_padded[i + 1] - l.cu_seqlens_padded[i];
    if (padded < real || padded % (2 * cp) != 0) {
      fail("sequence " + std::to_string(i) + " has " + std::to_string(real) + " real tokens padded to " +
           std::to_string(padded) + "; the padded length must be at least the real one and a multiple of 2*cp = " +
           std::to_string(2 * cp) + " (thd_padded_cu_seqlens computes it)");
    }
  }
}

}  // namespace

const char* comm_type_name(CommType type) {
  switch (type) {
    case CommType::p2p:
      return "p2p";
    case CommType::all_gather:
      return "all_gather";
    case CommType::a2a:
      return "a2a";
    case CommType::a2a_p2p:
      return "a2a+p2p";
  }
  return "?";
}

CommType parse_comm_type(const std::string& name) {
  for (CommType t : {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p}) {
    if (name == comm_type_name(t)) return t;
  }
  throw Error("unknown CP comm type '" + name + "'; expected p2p, all_gather, a2a or a2a+p2p");
}

SequenceLayout SequenceLayout::bshd(std::int64_t batch, std::int64_t seq_len) {
  SequenceLayout l;
  l.format = Format::bshd;
  l.batch = batch;
  l.seq_len = seq_len;
  return l;
}

SequenceLayout SequenceLayout::thd(std::vector<std::int64_t> cu_seqlens, std::vector<std::int64_t> cu_seqlens_padded) {
  SequenceLayout l;
  l.format = Format::thd;
  l.cu_seqlens = std::move(cu_seqlens);
  l.cu_seqlens_padded = std::move(cu_seqlens_padded);
  return l;
}

CpLayout::CpLayout(const SequenceLayout& layout, std::int64_t cp) : layout_(layout), cp_(cp) {
  check_layout(layout, cp);
  if (layout.format == Format::bshd) {
    const i64 b = layout.batch, S = layout.seq_len, local = S / cp, C = S / (2 * cp);
    for (i64 g = 0; g < b * S; ++g) {
      global_.position.push_back(g % S);
      global_.segment.push_back(g / S);
    }
    for (i64 r = 0; r < cp; ++r) {
      const std::vector<i64> idx = bshd_partition_indices(S, cp, r);
      std::vector<i64> rows;
      for (i64 bi = 0; bi < b; ++bi) {
        for (i64 t : idx) rows.push_back(bi * S + t);
      }
      rows_.push_back(std::move(rows));
    }
    for (i64 bi = 0; bi < b; ++bi) {
      for (i64 t = 0; t < C; ++t) {
        first_.push_back(bi * local + t);
        second_.push_back(bi * local + C + t);
      }
    }
  } else {
    const std::vector<i64>& pad = layout.cu_seqlens_padded;
    global_ = TokenInfo{thd_position_ids(pad), thd_segment_ids(layout.cu_seqlens, pad)};
    for (i64 r = 0; r < cp; ++r) rows_.push_back(thd_partition_indices(pad, cp, r));
    first_ = thd_half_rows(pad, cp, ThdHalves::first);
    second_ = thd_half_rows(pad, cp, ThdHalves::second);
  }
  local_rows_ = global_.size() / cp;
  all_.resize(at(local_rows_));
  std::iota(all_.begin(), all_.end(), i64{0});
  for (i64 r = 0; r < cp; ++r) {
    tokens_.push_back(global_.select(rows_[at(r)]));
    tokens_first_.push_back(tokens_.back().select(first_));
    tokens_second_.push_back(tokens_.back().select(second_));
  }
}

std::shared_ptr<const CpLayout> CpLayout::shared(const SequenceLayout& layout, std::int64_t cp) {
  static std::mutex mu;
  static std::deque<std::shared_ptr<const CpLayout>> recent;  // most recently used first
  constexpr std::size_t kKept = 16;
  {
    const std::lock_guard<std::mutex> lock(mu);
    for (auto it = recent.begin(); it != recent.end(); ++it) {
      if ((*it)->cp() == cp && (*it)->layout() == layout) {
        std::shared_ptr<const CpLayout> hit = *it;
        recent.erase(it);
        recent.push_front(hit);
        return hit;
      }
    }
  }
  auto made = std::make_shared<const CpLayout>(layout, cp);  // outside the lock: it may throw
  const std::lock_guard<std::mutex> lock(mu);
  recent.push_front(made);
  if (recent.size() > kKept) recent.pop_back();
  return made;
}

const std::vector<std::int64_t>& CpLayout::rows_of(std::int64_t r) const {
  if (r < 0 || r >= cp_) {
    throw Error("CpLayout::rows_of: rank " + std::to_string(r) + " is outside [0, " + std::to_string(cp_) + ")");
  }
  return rows_[at(r)];
}

const TokenInfo& CpLayout::tokens_of(std::int64_t r, Half half) const {
  rows_of(r);  // range check
  switch (half) {
    case Half::first:
      return tokens_first_[at(r)];
    case Half::second:
      return tokens_second_[at(r)];
    default:
      return tokens_[at(r)];
  }
}

const std::vector<std::int64_t>& CpLayout::half_rows(Half half) const {
  switch (half) {
    case Half::first:
      return first_;
    case Half::second:
      return second_;
    default:
      return all_;
  }
}

P2pStep p2p_step(const CpLayout& layout, std::int64_t r, std::int64_t kv_rank, const AttentionOptions& opts) {
  auto sees = [&](Half qh, Half kh) {
    return attention_visible_pairs(layout.tokens_of(r, qh), layout.tokens_of(kv_rank, kh), opts) > 0;
  };
  const bool ff = sees(Half::first, Half::first), fs = sees(Half::first, Half::second),
             sf = sees(Half::second, Half::first), ss = sees(Half::second, Half::second);
  auto pick = [](bool a, bool b) { return a && b ? Half::all : a ? Half::first : b ? Half::second : Half::none; };
  const Half q = pick(ff || fs, sf || ss);
  if (q == Half::none) return P2pStep{Half::none, Half::none};
  return P2pStep{q, pick(ff || sf, fs || ss)};
}

}  // namespace ranksim::cp

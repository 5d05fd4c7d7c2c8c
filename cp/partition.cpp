#include "cp/partition.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/tensor/ops.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using i64 = std::int64_t;
using Cu = std::vector<i64>;
using runtime::Shape;

[[noreturn]] void fail(const char* fn, const std::string& message) { throw Error(std::string(fn) + ": " + message); }

std::string list_str(const Cu& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void check_cp(const char* fn, i64 cp_size, i64 cp_rank) {
  if (cp_size < 1) fail(fn, "cp size " + std::to_string(cp_size) + " must be at least 1");
  if (cp_rank < 0 || cp_rank >= cp_size) {
    fail(fn, "cp rank " + std::to_string(cp_rank) + " is outside [0, " + std::to_string(cp_size) + ")");
  }
}

void check_cu(const char* fn, const Cu& cu, const char* name) {
  if (cu.empty() || cu[0] != 0) {
    fail(fn, std::string(name) + " " + list_str(cu) + " must start with 0");
  }
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      fail(fn, std::string(name) + " " + list_str(cu) + " decreases at index " + std::to_string(i) +
                   "; cumulative lengths must be non-decreasing");
    }
  }
}

// The padded cu list must split into 2*cp chunks per sequence.
void check_padded(const char* fn, const Cu& cu_padded, i64 cp_size) {
  check_cu(fn, cu_padded, "cu_seqlens_padded");
  for (std::size_t i = 0; i + 1 < cu_padded.size(); ++i) {
    const i64 len = cu_padded[i + 1] - cu_padded[i];
    if (len % (2 * cp_size) != 0) {
      fail(fn, "sequence " + std::to_string(i) + " of cu_seqlens_padded " + list_str(cu_padded) + " has length " +
                   std::to_string(len) + ", not a multiple of 2*cp = " + std::to_string(2 * cp_size) +
                   "; pad it with thd_padded_cu_seqlens");
    }
  }
}

void check_real_vs_padded(const char* fn, const Cu& cu, const Cu& cu_padded) {
  check_cu(fn, cu, "cu_seqlens");
  check_cu(fn, cu_padded, "cu_seqlens_padded");
  if (cu.size() != cu_padded.size()) {
    fail(fn, "cu_seqlens " + list_str(cu) + " and cu_seqlens_padded " + list_str(cu_padded) +
                 " describe different numbers of sequences");
  }
  for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
    if (cu[i + 1] - cu[i] > cu_padded[i + 1] - cu_padded[i]) {
      fail(fn, "sequence " + std::to_string(i) + " is longer in cu_seqlens " + list_str(cu) +
                   " than in cu_seqlens_padded " + list_str(cu_padded));
    }
  }
}

// Chunk lengths of the local 2*C block of each sequence.
i64 chunk(const Cu& cu_padded, std::size_t seq, i64 cp_size) {
  return (cu_padded[seq + 1] - cu_padded[seq]) / (2 * cp_size);
}

void append_range(std::vector<i64>& out, i64 begin, i64 length) {
  for (i64 i = 0; i < length; ++i) out.push_back(begin + i);
}

// One output piece per maximal run of consecutive indices, so a chunk costs one narrow.
Tensor gather_runs(const Tensor& x, i64 dim, const std::vector<i64>& indices) {
  std::vector<Tensor> pieces;
  std::size_t i = 0;
  while (i < indices.size()) {
    std::size_t j = i + 1;
    while (j < indices.size() && indices[j] == indices[j - 1] + 1) ++j;
    pieces.push_back(x.narrow(dim, indices[i], static_cast<i64>(j - i)));
    i = j;
  }
  if (pieces.empty()) {
    Shape shape = x.shape();
    shape[static_cast<std::size_t>(dim)] = 0;
    return x.has_data() ? Tensor::zeros(shape, x.dtype()) : Tensor::shape_only(shape, x.dtype());
  }
  return runtime::cat(pieces, dim);
}

i64 wrap_dim(const char* fn, const Tensor& x, i64 dim) {
  if (!x.defined()) fail(fn, "the tensor is undefined");
  if (dim < -x.dim() || dim >= x.dim()) {
    fail(fn, "dimension " + std::to_string(dim) + " is out of range for " + x.str());
  }
  return dim < 0 ? dim + x.dim() : dim;
}

// Rebuilds a global tensor from per-rank locals: global index g comes from locals[owner[g].first]
// at local index owner[g].second.
Tensor assemble(const std::vector<Tensor>& locals, i64 dim, const std::vector<std::pair<i64, i64>>& owner) {
  const Tensor& first = locals[0];
  std::vector<Tensor> pieces;
  std::size_t i = 0;
  while (i < owner.size()) {
    std::size_t j = i + 1;
    while (j < owner.size() && owner[j].first == owner[i].first && owner[j].second == owner[j - 1].second + 1) {
      ++j;
    }
    const auto [rank, start] = owner[i];
    pieces.push_back(locals[static_cast<std::size_t>(rank)].narrow(dim, start, static_cast<i64>(j - i)));
    i = j;
  }
  if (pieces.empty()) return gather_runs(first, dim, {});
  return runtime::cat(pieces, dim);
}

// Locals must agree in everything but may not be ragged.
i64 check_locals(const char* fn, const std::vector<Tensor>& locals, i64 seq_dim) {
  if (locals.empty()) fail(fn, "needs at least one rank's tensor");
  const i64 d = wrap_dim(fn, locals[0], seq_dim);
  for (std::size_t r = 0; r < locals.size(); ++r) {
    if (!locals[r].defined() || locals[r].shape() != locals[0].shape() || locals[r].dtype() != locals[0].dtype()) {
      fail(fn, "rank " + std::to_string(r) + "'s tensor " +
                   (locals[r].defined() ? locals[r].str() : std::string("(undefined)")) + " differs from rank 0's " +
                   locals[0].str());
    }
  }
  return d;
}

}  // namespace

// --- BSHD -------------------------------------------------------------------------------------

std::vector<i64> bshd_partition_indices(i64 seq_len, i64 cp_size, i64 cp_rank) {
  const char* fn = "bshd_partition_indices";
  check_cp(fn, cp_size, cp_rank);
  if (seq_len < 0 || seq_len % (2 * cp_size) != 0) {
    fail(fn, "sequence length S = " + std::to_string(seq_len) + " is not divisible by 2*cp = " +
                 std::to_string(2 * cp_size) + "; pad the sequence to a multiple of " + std::to_string(2 * cp_size));
  }
  const i64 c = seq_len / (2 * cp_size);
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(2 * c));
  append_range(out, cp_rank * c, c);
  append_range(out, (2 * cp_size - 1 - cp_rank) * c, c);
  return out;
}

Tensor bshd_partition(const Tensor& x, i64 seq_dim, i64 cp_size, i64 cp_rank) {
  const i64 d = wrap_dim("bshd_partition", x, seq_dim);
  return gather_runs(x, d, bshd_partition_indices(x.size(d), cp_size, cp_rank));
}

Tensor bshd_unpartition(const std::vector<Tensor>& locals, i64 seq_dim) {
  const char* fn = "bshd_unpartition";
  const i64 d = check_locals(fn, locals, seq_dim);
  const i64 local_len = locals[0].size(d);
  if (local_len % 2 != 0) {
    fail(fn, "each rank's tensor " + locals[0].str() + " needs an even length along dimension " + std::to_string(d) +
                 " (two chunks)");
  }
  const i64 cp_size = static_cast<i64>(locals.size());
  const i64 c = local_len / 2;
  std::vector<std::pair<i64, i64>> owner;
  for (i64 j = 0; j < 2 * cp_size; ++j) {
    // Chunk j < cp is rank j's first chunk; chunk j >= cp is rank 2cp-1-j's second.
    const i64 rank = j < cp_size ? j : 2 * cp_size - 1 - j;
    const i64 base = j < cp_size ? 0 : c;
    for (i64 t = 0; t < c; ++t) owner.emplace_back(rank, base + t);
  }
  return assemble(locals, d, owner);
}

// --- THD --------------------------------------------------------------------------------------

std::vector<i64> thd_padded_cu_seqlens(const std::vector<i64>& cu_seqlens, i64 cp_size) {
  const char* fn = "thd_padded_cu_seqlens";
  check_cp(fn, cp_size, 0);
  check_cu(fn, cu_seqlens, "cu_seqlens");
  const i64 m = 2 * cp_size;
  std::vector<i64> out{0};
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const i64 len = cu_seqlens[i + 1] - cu_seqlens[i];
    out.push_back(out.back() + (len + m - 1) / m * m);
  }
  return out;
}

std::vector<i64> thd_partition_indices(const std::vector<i64>& cu_seqlens_padded, i64 cp_size, i64 cp_rank) {
  const char* fn = "thd_partition_indices";
  check_cp(fn, cp_size, cp_rank);
  check_padded(fn, cu_seqlens_padded, cp_size);
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(cu_seqlens_padded.back() / cp_size));
  for (std::size_t i = 0; i + 1 < cu_seqlens_padded.size(); ++i) {
    const i64 c = chunk(cu_seqlens_padded, i, cp_size);
    const i64 st = cu_seqlens_padded[i];
    append_range(out, st + cp_rank * c, c);
    append_range(out, st + (2 * cp_size - 1 - cp_rank) * c, c);
  }
  return out;
}

i64 thd_partition_source_index(const std::vector<i64>& cu_seqlens_padded, i64 cp_size, i64 cp_rank, i64 local_index) {
  const char* fn = "thd_partition_source_index";
  check_cp(fn, cp_size, cp_rank);
  check_padded(fn, cu_seqlens_padded, cp_size);
  const i64 local_total = cu_seqlens_padded.back() / cp_size;
  if (local_index < 0 || local_index >= local_total) {
    fail(fn, "local index " + std::to_string(local_index) + " is outside [0, " + std::to_string(local_total) + ")");
  }
  // The last sequence whose local offset is <= t: zero-length sequences share their offset with
  // the next one, and taking the last of equals skips them.
  std::size_t lo = 0, hi = cu_seqlens_padded.size() - 1;  // invariant: offset[lo] <= t < offset[hi]
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    if (cu_seqlens_padded[mid] / cp_size <= local_index) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const i64 c = chunk(cu_seqlens_padded, lo, cp_size);
  const i64 ix = local_index - cu_seqlens_padded[lo] / cp_size;
  return ix + cu_seqlens_padded[lo] + c * (ix < c ? cp_rank : 2 * cp_size - 2 - cp_rank);
}

std::vector<i64> thd_cu_seqlens_on_rank(const std::vector<i64>& cu_seqlens, const std::vector<i64>& cu_seqlens_padded,
                                        i64 cp_size, i64 cp_rank, ThdHalves halves) {
  const char* fn = "thd_cu_seqlens_on_rank";
  check_cp(fn, cp_size, cp_rank);
  check_real_vs_padded(fn, cu_seqlens, cu_seqlens_padded);
  check_padded(fn, cu_seqlens_padded, cp_size);
  std::vector<i64> out{0};
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const i64 len = cu_seqlens[i + 1] - cu_seqlens[i];
    const i64 c = chunk(cu_seqlens_padded, i, cp_size);
    const i64 first = std::clamp(len - cp_rank * c, i64{0}, c);
    const i64 second = std::clamp(len - (2 * cp_size - 1 - cp_rank) * c, i64{0}, c);
    i64 n = 0;
    if (halves != ThdHalves::second) n += first;
    if (halves != ThdHalves::first) n += second;
    out.push_back(out.back() + n);
  }
  return out;
}

std::vector<i64> thd_half_rows(const std::vector<i64>& cu_seqlens_padded, i64 cp_size, ThdHalves half) {
  const char* fn = "thd_half_rows";
  check_cp(fn, cp_size, 0);
  check_padded(fn, cu_seqlens_padded, cp_size);
  std::vector<i64> out;
  for (std::size_t i = 0; i + 1 < cu_seqlens_padded.size(); ++i) {
    const i64 c = chunk(cu_seqlens_padded, i, cp_size);
    const i64 st = cu_seqlens_padded[i] / cp_size;
    if (half != ThdHalves::second) append_range(out, st, c);
    if (half != ThdHalves::first) append_range(out, st + c, c);
  }
  return out;
}

Tensor thd_partition(const Tensor& x, i64 seq_dim, const std::vector<i64>& cu_seqlens_padded, i64 cp_size,
                     i64 cp_rank) {
  const char* fn = "thd_partition";
  const i64 d = wrap_dim(fn, x, seq_dim);
  std::vector<i64> idx = thd_partition_indices(cu_seqlens_padded, cp_size, cp_rank);
  if (x.size(d) != cu_seqlens_padded.back()) {
    fail(fn, "tensor " + x.str() + " has " + std::to_string(x.size(d)) + " tokens along dimension " +
                 std::to_string(d) + " but cu_seqlens_padded " + list_str(cu_seqlens_padded) + " describes " +
                 std::to_string(cu_seqlens_padded.back()));
  }
  return gather_runs(x, d, idx);
}

Tensor thd_unpartition(const std::vector<Tensor>& locals, i64 seq_dim, const std::vector<i64>& cu_seqlens_padded) {
  const char* fn = "thd_unpartition";
  const i64 d = check_locals(fn, locals, seq_dim);
  const i64 cp_size = static_cast<i64>(locals.size());
  check_padded(fn, cu_seqlens_padded, cp_size);
  const i64 total = cu_seqlens_padded.back();
  if (locals[0].size(d) * cp_size != total) {
    fail(fn, "each rank's tensor " + locals[0].str() + " should hold " + std::to_string(total / cp_size) +
                 " tokens along dimension " + std::to_string(d) + " for cu_seqlens_padded " +
                 list_str(cu_seqlens_padded) + " and cp " + std::to_string(cp_size));
  }
  std::vector<std::pair<i64, i64>> owner(static_cast<std::size_t>(total));
  for (i64 r = 0; r < cp_size; ++r) {
    const std::vector<i64> idx = thd_partition_indices(cu_seqlens_padded, cp_size, r);
    for (std::size_t t = 0; t < idx.size(); ++t) {
      owner[static_cast<std::size_t>(idx[t])] = {r, static_cast<i64>(t)};
    }
  }
  return assemble(locals, d, owner);
}

// --- THD padding ------------------------------------------------------------------------------

Tensor thd_pad(const Tensor& x, const std::vector<i64>& cu_seqlens, const std::vector<i64>& cu_seqlens_padded,
               double pad_value) {
  const char* fn = "thd_pad";
  wrap_dim(fn, x, 0);
  check_real_vs_padded(fn, cu_seqlens, cu_seqlens_padded);
  if (x.size(0) != cu_seqlens.back()) {
    fail(fn, "tensor " + x.str() + " has " + std::to_string(x.size(0)) + " tokens but cu_seqlens " +
                 list_str(cu_seqlens) + " describes " + std::to_string(cu_seqlens.back()));
  }
  std::vector<Tensor> pieces;
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const i64 len = cu_seqlens[i + 1] - cu_seqlens[i];
    const i64 pad = cu_seqlens_padded[i + 1] - cu_seqlens_padded[i] - len;
    if (len > 0) pieces.push_back(x.narrow(0, cu_seqlens[i], len));
    if (pad > 0) {
      Shape shape = x.shape();
      shape[0] = pad;
      pieces.push_back(x.has_data() ? Tensor::full(shape, pad_value, x.dtype()) : Tensor::shape_only(shape, x.dtype()));
    }
  }
  if (pieces.empty()) return gather_runs(x, 0, {});
  return runtime::cat(pieces, 0);
}

Tensor thd_unpad(const Tensor& x, const std::vector<i64>& cu_seqlens, const std::vector<i64>& cu_seqlens_padded) {
  const char* fn = "thd_unpad";
  wrap_dim(fn, x, 0);
  check_real_vs_padded(fn, cu_seqlens, cu_seqlens_padded);
  if (x.size(0) != cu_seqlens_padded.back()) {
    fail(fn, "tensor " + x.str() + " has " + std::to_string(x.size(0)) + " tokens but cu_seqlens_padded " +
                 list_str(cu_seqlens_padded) + " describes " + std::to_string(cu_seqlens_padded.back()));
  }
  std::vector<i64> idx;
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    append_range(idx, cu_seqlens_padded[i], cu_seqlens[i + 1] - cu_seqlens[i]);
  }
  return gather_runs(x, 0, idx);
}

ThdPadded pad_thd_for_cp(const Tensor& input_ids, const Tensor& labels, const std::vector<i64>& cu_seqlens, i64 cp_size,
                         i64 pad_id, i64 pad_label) {
  const char* fn = "pad_thd_for_cp";
  for (const Tensor* t : {&input_ids, &labels}) {
    if (!t->defined() || t->dim() != 1) {
      fail(fn, std::string(t == &input_ids ? "input_ids " : "labels ") +
                   (t->defined() ? t->str() : std::string("(undefined)")) + " must be 1-d");
    }
  }
  ThdPadded out;
  out.cu_seqlens_padded = thd_padded_cu_seqlens(cu_seqlens, cp_size);
  out.input_ids = thd_pad(input_ids, cu_seqlens, out.cu_seqlens_padded, static_cast<double>(pad_id));
  out.labels = thd_pad(labels, cu_seqlens, out.cu_seqlens_padded, static_cast<double>(pad_label));
  return out;
}

// --- Positions --------------------------------------------------------------------------------

std::vector<i64> thd_position_ids(const std::vector<i64>& cu_seqlens_padded) {
  check_cu("thd_position_ids", cu_seqlens_padded, "cu_seqlens_padded");
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(cu_seqlens_padded.back()));
  for (std::size_t i = 0; i + 1 < cu_seqlens_padded.size(); ++i) {
    append_range(out, 0, cu_seqlens_padded[i + 1] - cu_seqlens_padded[i]);
  }
  return out;
}

std::vector<i64> thd_segment_ids(const std::vector<i64>& cu_seqlens, const std::vector<i64>& cu_seqlens_padded) {
  check_real_vs_padded("thd_segment_ids", cu_seqlens, cu_seqlens_padded);
  std::vector<i64> out(static_cast<std::size_t>(cu_seqlens_padded.back()), -1);
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const i64 len = cu_seqlens[i + 1] - cu_seqlens[i];
    std::fill_n(out.begin() + cu_seqlens_padded[i], len, static_cast<i64>(i));
  }
  return out;
}

std::vector<i64> thd_local_positions(const std::vector<i64>& cu_seqlens_padded, i64 cp_size, i64 cp_rank,
                                     const std::vector<i64>& start_positions) {
  const char* fn = "thd_local_positions";
  check_cp(fn, cp_size, cp_rank);
  check_padded(fn, cu_seqlens_padded, cp_size);
  const std::size_t nseq = cu_seqlens_padded.size() - 1;
  if (!start_positions.empty() && start_positions.size() != nseq) {
    fail(fn, "start_positions has " + std::to_string(start_positions.size()) + " entries for " + std::to_string(nseq) +
                 " sequences");
  }
  std::vector<i64> out;
  for (std::size_t i = 0; i < nseq; ++i) {
    const i64 c = chunk(cu_seqlens_padded, i, cp_size);
    const i64 start = start_positions.empty() ? 0 : start_positions[i];
    append_range(out, start + cp_rank * c, c);
    append_range(out, start + (2 * cp_size - 1 - cp_rank) * c, c);
  }
  return out;
}

std::vector<i64> thd_local_segments(const std::vector<i64>& cu_seqlens, const std::vector<i64>& cu_seqlens_padded,
                                    i64 cp_size, i64 cp_rank) {
  const std::vector<i64> global = thd_segment_ids(cu_seqlens, cu_seqlens_padded);
  std::vector<i64> out;
  for (i64 g : thd_partition_indices(cu_seqlens_padded, cp_size, cp_rank)) {
    out.push_back(global[static_cast<std::size_t>(g)]);
  }
  return out;
}

std::vector<i64> bshd_local_positions(i64 seq_len, i64 cp_size, i64 cp_rank) {
  return bshd_partition_indices(seq_len, cp_size, cp_rank);
}

// --- Gathering --------------------------------------------------------------------------------

Tensor index_select(const Tensor& x, i64 dim, const std::vector<i64>& indices) {
  const char* fn = "index_select";
  const i64 d = wrap_dim(fn, x, dim);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= x.size(d)) {
      fail(fn, "index " + std::to_string(indices[i]) + " at position " + std::to_string(i) + " is outside [0, " +
                   std::to_string(x.size(d)) + ") for " + x.str());
    }
  }
  return gather_runs(x, d, indices);
}

}  // namespace ranksim::cp

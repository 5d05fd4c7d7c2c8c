// The types that describe one context-parallel attention call (cp/context_parallel.h): the comm
// type, the global sequence layout and its DualChunkSwap split over the CP ranks (CpLayout), the
// process groups the call runs on, and the context its forward saves for the backward. The entry
// points in context_parallel.h and the four comm types behind them (cp/comm_types.h) both work
// on these; keeping them here lets the comm types depend on the types without depending on the
// entry points that call them.
//
// Layout rules (BSHD S % 2cp == 0; THD cu lists, padding to multiples of 2cp) are those of the
// "Formats" paragraph of context_parallel.h; CpLayout checks them and raises ranksim::Error
// naming the values. Everything here is a value: cheap to copy or immutable once built.
#pragma once

#include <cstdint>
#include <memory>
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
  std::int64_t batch = 1;                       // BSHD: batch rows. Default: 1.
  std::int64_t seq_len = 0;                     // BSHD: the global sequence length S. Default: 0.
  std::vector<std::int64_t> cu_seqlens;         // THD: cumulative real lengths, from 0
  std::vector<std::int64_t> cu_seqlens_padded;  // THD: cumulative padded lengths, from 0

  bool operator==(const SequenceLayout&) const = default;

  static SequenceLayout bshd(std::int64_t batch, std::int64_t seq_len);
  // REQUIRES (checked when used): the lists as described in cp/partition.h.
  static SequenceLayout thd(std::vector<std::int64_t> cu_seqlens, std::vector<std::int64_t> cu_seqlens_padded);
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
  // The same, shared: every layer's attention, forward and backward, asks for the layout of its
  // micro-batch, so the last few built are kept (a process-wide cache of 16, safe across threads)
  // and their TokenInfo keep the runs attention_visible_pairs counted. Equal to a new CpLayout.
  static std::shared_ptr<const CpLayout> shared(const SequenceLayout& layout, std::int64_t cp);

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
// q == Half::none means the step is skipped. Decided as context_parallel.h's p2p paragraph says.
struct P2pStep {
  Half q = Half::all;
  Half kv = Half::all;
};
// The step of rank r holding the KV of rank kv_rank. REQUIRES: both in [0, layout.cp()).
P2pStep p2p_step(const CpLayout& layout, std::int64_t r, std::int64_t kv_rank, const AttentionOptions& opts);

// The process groups a rank passes. For p2p, all_gather and a2a only `cp` is used; a2a+p2p also
// needs this rank's a2a and p2p subgroups (context_parallel.h's hierarchical_cp_groups builds
// them).
struct CpGroups {
  CpGroups() = default;
  CpGroups(runtime::ProcessGroup cp_group)  // NOLINT: a plain CP group converts implicitly
      : cp(std::move(cp_group)) {}
  runtime::ProcessGroup cp;   // the whole CP group; a rank's CP position is cp.rank()
  runtime::ProcessGroup a2a;  // a2a+p2p: the a ranks at positions [p2p_rank*a, (p2p_rank+1)*a)
  runtime::ProcessGroup p2p;  // a2a+p2p: the p ranks at positions a2a_rank + a*k
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

}  // namespace ranksim::cp

// The four CP comm types behind attention_with_cp_forward / _backward (cp/context_parallel.h),
// and the small tensor helpers they share. Internal to cp/: callers use context_parallel.h.
//
// Every function works on flattened rows: q [n, hq, d], k [n, hkv, d], v [n, hkv, dv], with n the
// local rows of a CpLayout, and takes options whose output_dtype is unset (the caller converts
// the final results). Shape-only inputs give shape-only results and buffers throughout.
#pragma once

#include <cstdint>
#include <vector>

#include "cp/attention.h"
#include "cp/layout.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::cp::detail {

using runtime::DType;
using runtime::ProcessGroup;
using runtime::Shape;

// Zeros of shape (or a shape-only tensor when data is false): accumulators and receive buffers.
Tensor zeros(const Shape& shape, DType dtype, bool data);
// -inf everywhere: an LSE accumulator before any part is merged.
Tensor minus_inf(const Shape& shape, DType dtype, bool data);
// The compute / accumulation dtype for inputs of dtype t: f64 for f64, else f32.
DType accumulate_dtype(DType t);
// x's rows (dim 0) at the given indices: a view when they form one consecutive run, else a copy.
Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& rows);
// result[t] = the position in `from` of the global row to[t]: the gather that turns rows laid out
// as `from` into rows laid out as `to`. REQUIRES: every row of `to` appears in `from`.
std::vector<std::int64_t> reorder(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to,
                                  std::int64_t global_rows);
// The global rows of ranks first, first+1, ..., first+count-1 of lay, concatenated: the order in
// which an all-gather or all-to-all over those ranks delivers their rows.
std::vector<std::int64_t> delivered_rows(const CpLayout& lay, std::int64_t first, std::int64_t count);

// --- p2p ring (B1) on `ring`, whose size is lay.cp() and whose rank is this rank's position.
struct RingForward {
  Tensor out;      // [n, hq, dv] in q's dtype
  Tensor lse;      // [hq, n], f32 (f64 for f64)
  Tensor kv_next;  // the flat [K; V] buffer of rank r+1 the forward ended with
};
RingForward ring_forward(const Tensor& q, const Tensor& k, const Tensor& v, const CpLayout& lay,
                         const ProcessGroup& ring, const AttentionOptions& opts);
// dq in q's dtype, dk/dv in k's/v's dtype.
AttentionGrads ring_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Tensor& kv_next, const CpLayout& lay, const ProcessGroup& ring,
                             const AttentionOptions& opts);

// --- all_gather (B2) on ctx.groups.cp. Fills ctx.q/k/v and the per-chunk out/lse.
Tensor all_gather_forward(CpContext& ctx, const CpLayout& lay, const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& opts);
AttentionGrads all_gather_backward(const CpContext& ctx, const CpLayout& lay, const Tensor& dout,
                                   const AttentionOptions& opts);

// --- a2a (B3) on ctx.groups.cp, and a2a+p2p (B4) on ctx.groups.a2a and .p2p.
Tensor a2a_forward(CpContext& ctx, const CpLayout& lay, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttentionOptions& opts);
AttentionGrads a2a_backward(const CpContext& ctx, const CpLayout& lay, const Tensor& dout,
                            const AttentionOptions& opts);
Tensor hierarchical_forward(CpContext& ctx, const CpLayout& lay, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionOptions& opts);
AttentionGrads hierarchical_backward(const CpContext& ctx, const CpLayout& lay, const Tensor& dout,
                                     const AttentionOptions& opts);

}  // namespace ranksim::cp::detail

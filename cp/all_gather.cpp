// all_gather (spec B2): KV all-gathered and put in natural order; each local Q chunk attends its
// KV range; backward reduce-scatters dK/dV in rank-chunk order.
#include <algorithm>
#include <numeric>

#include "cp/comm_types.h"
#include "cp/partition.h"

namespace ranksim::cp::detail {
namespace {

using i64 = std::int64_t;
using runtime::Work;

// Natural-order rows of the keys chunk c (of 2cp, chunk length C of a sequence of length len
// starting at global row start) can see: [c*C - w_left, (c+1)*C + w_right) clipped to the
// sequence. Every visible key lies inside; the kernel masks the rest from the positions.
void add_range(std::vector<i64>& rows, i64 start, i64 len, i64 c, i64 C, const AttentionOptions& o) {
  const i64 wr = o.causal ? 0 : o.window_right;
  const i64 lo = o.window_left < 0 ? 0 : std::max<i64>(0, c * C - o.window_left);
  const i64 hi = wr < 0 ? len : std::min(len, (c + 1) * C + wr);
  for (i64 g = lo; g < hi; ++g) rows.push_back(start + g);
}

std::vector<i64> kv_rows(const CpLayout& lay, i64 r, Half half, const AttentionOptions& o) {
  const i64 cp = lay.cp();
  const i64 c = half == Half::first ? r : 2 * cp - 1 - r;
  const SequenceLayout& l = lay.layout();
  std::vector<i64> rows;
  if (l.format == Format::bshd) {
    for (i64 b = 0; b < l.batch; ++b) add_range(rows, b * l.seq_len, l.seq_len, c, l.seq_len / (2 * cp), o);
  } else {
    const std::vector<i64>& pad = l.cu_seqlens_padded;
    for (std::size_t i = 0; i + 1 < pad.size(); ++i) {
      const i64 len = pad[i + 1] - pad[i];
      add_range(rows, pad[i], len, c, len / (2 * cp), o);
    }
  }
  return rows;
}

Rows as_rows(const std::vector<i64>& rows) {
  bool run = !rows.empty();
  for (std::size_t i = 1; run && i < rows.size(); ++i) run = rows[i] == rows[i - 1] + 1;
  if (run) return Rows::range(rows[0], static_cast<i64>(rows.size()));
  return Rows::list(rows);
}

struct Gathered {
  Tensor k, v;  // [N, hkv, d|dv] in natural order
};

Gathered gather_kv(const CpLayout& lay, const ProcessGroup& group, const Tensor& k, const Tensor& v) {
  const i64 cp = lay.cp(), n = lay.local_rows();
  const bool data = k.has_data() && v.has_data();
  const Tensor kin = k.contiguous(), vin = v.contiguous();
  const Tensor k_all = zeros({cp * n, k.size(1), k.size(2)}, k.dtype(), data);
  const Tensor v_all = zeros({cp * n, v.size(1), v.size(2)}, v.dtype(), data);
  runtime::AllgatherOptions o;
  o.group = group;
  o.async_op = true;
  const Work wk = runtime::all_gather_into_tensor(k_all, kin, o);
  const Work wv = runtime::all_gather_into_tensor(v_all, vin, o);
  wk.wait();
  wv.wait();
  std::vector<i64> natural(static_cast<std::size_t>(lay.global_rows()));
  std::iota(natural.begin(), natural.end(), i64{0});
  const std::vector<i64> perm = reorder(delivered_rows(lay, 0, cp), natural, lay.global_rows());
  return Gathered{index_select(k_all, 0, perm), index_select(v_all, 0, perm)};
}

constexpr Half kHalves[2] = {Half::first, Half::second};

}  // namespace

Tensor all_gather_forward(CpContext& ctx, const CpLayout& lay, const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& opts) {
  const ProcessGroup& group = ctx.groups.cp;
  const i64 r = group.rank();
  const Gathered kv = gather_kv(lay, group, k, v);
  const bool data = q.has_data() && k.has_data();
  const Tensor out = zeros({lay.local_rows(), q.size(1), v.size(2)}, q.dtype(), data);
  for (Half h : kHalves) {
    const std::vector<i64> rows = kv_rows(lay, r, h, opts);
    AttentionResult res =
        attention_forward(take_rows(q, lay.half_rows(h)), take_rows(kv.k, rows), take_rows(kv.v, rows),
                          lay.tokens_of(r, h), lay.global_tokens().select(rows), opts);
    add_rows_(out, res.out, as_rows(lay.half_rows(h)));  // 0 + x: an exact copy
    ctx.chunk_out.push_back(res.out);
    ctx.chunk_lse.push_back(res.lse);
  }
  ctx.q = q;
  ctx.k = k;
  ctx.v = v;
  return out;
}

AttentionGrads all_gather_backward(const CpContext& ctx, const CpLayout& lay, const Tensor& dout,
                                   const AttentionOptions& opts) {
  const ProcessGroup& group = ctx.groups.cp;
  const i64 r = group.rank(), N = lay.global_rows();
  // Gathered again rather than saved: TE keeps only the local K and V between the passes.
  const Gathered kv = gather_kv(lay, group, ctx.k, ctx.v);
  const bool data = dout.has_data() && ctx.q.has_data();
  const DType acc = accumulate_dtype(ctx.q.dtype());
  AttentionOptions step_opts = opts;
  step_opts.output_dtype = acc;
  const Tensor dq = zeros(ctx.q.shape(), acc, data);
  const Tensor dk = zeros({N, ctx.k.size(1), ctx.k.size(2)}, acc, data);
  const Tensor dv = zeros({N, ctx.v.size(1), ctx.v.size(2)}, acc, data);
  for (std::size_t j = 0; j < 2; ++j) {
    const Half h = kHalves[j];
    const std::vector<i64> rows = kv_rows(lay, r, h, opts);
    const std::vector<i64>& q_rows = lay.half_rows(h);
    const AttentionGrads g = attention_backward(
        take_rows(dout, q_rows), take_rows(ctx.q, q_rows), take_rows(kv.k, rows), take_rows(kv.v, rows),
        ctx.chunk_out[j], ctx.chunk_lse[j], lay.tokens_of(r, h), lay.global_tokens().select(rows), step_opts);
    add_rows_(dq, g.dq, as_rows(q_rows));
    add_rows_(dk, g.dk, as_rows(rows));
    add_rows_(dv, g.dv, as_rows(rows));
  }
  // Rank-chunk order (slot j holds rank j's rows), then each rank keeps the sum of its slot.
  const std::vector<i64> slots = delivered_rows(lay, 0, lay.cp());
  const Tensor dk_send = index_select(dk.to(ctx.k.dtype()), 0, slots);
  const Tensor dv_send = index_select(dv.to(ctx.v.dtype()), 0, slots);
  const Tensor dk_local = zeros(ctx.k.shape(), ctx.k.dtype(), data);
  const Tensor dv_local = zeros(ctx.v.shape(), ctx.v.dtype(), data);
  runtime::ReduceScatterOptions o;
  o.group = group;
  o.async_op = true;
  const Work wk = runtime::reduce_scatter_tensor(dk_local, dk_send, o);
  const Work wv = runtime::reduce_scatter_tensor(dv_local, dv_send, o);
  wk.wait();
  wv.wait();
  return AttentionGrads{dq.to(ctx.q.dtype()), dk_local, dv_local};
}

}  // namespace ranksim::cp::detail

// a2a (spec B3, Ulysses) and a2a+p2p (B4, hierarchical): all_to_all_single between "local tokens,
// all heads" and "the group's tokens, heads/m", with the delivered rows put in the order the
// attention that follows works in (natural order for a2a, the p-level DualChunkSwap layout for
// a2a+p2p), and back.
#include <numeric>
#include <utility>

#include "cp/comm_types.h"
#include "cp/partition.h"

namespace ranksim::cp::detail {
namespace {

using i64 = std::int64_t;
using runtime::Work;

// A posted heads -> sequence exchange: the receive buffer and its Work.
struct Posted {
  Tensor recv;
  Work work;
};

// x [n, h, dd]: head block j (contiguous, h/m heads) goes to member j of group.
Posted post_heads_to_seq(const Tensor& x, const ProcessGroup& group) {
  const i64 m = group.size(), n = x.size(0), hb = x.size(1) / m, dd = x.size(2);
  const Tensor send = x.reshape({n, m, hb, dd}).permute({1, 0, 2, 3}).contiguous().view({m * n, hb, dd});
  Posted p{zeros({m * n, hb, dd}, x.dtype(), x.has_data()), Work()};
  runtime::AllToAllOptions o;
  o.group = group;
  o.async_op = true;
  p.work = runtime::all_to_all_single(p.recv, send, o);
  return p;
}

Tensor finish_heads_to_seq(const Posted& p, const std::vector<i64>& perm) {
  p.work.wait();
  return index_select(p.recv, 0, perm);
}

// y [N', hb, dd] in working order: back to delivered order (perm_back), then member j gets the
// rows of its own tokens; the result is [n, m*hb, dd] with head blocks in member order.
Posted post_seq_to_heads(const Tensor& y, const ProcessGroup& group, const std::vector<i64>& perm_back) {
  const Tensor send = index_select(y, 0, perm_back);
  Posted p{zeros(send.shape(), y.dtype(), y.has_data()), Work()};
  runtime::AllToAllOptions o;
  o.group = group;
  o.async_op = true;
  p.work = runtime::all_to_all_single(p.recv, send, o);
  return p;
}

Tensor finish_seq_to_heads(const Posted& p, const ProcessGroup& group) {
  p.work.wait();
  const i64 m = group.size(), rows = p.recv.size(0), n = rows / m, hb = p.recv.size(1), dd = p.recv.size(2);
  return p.recv.view({m, n, hb, dd}).permute({1, 0, 2, 3}).contiguous().view({n, m * hb, dd});
}

// The two row orders of an exchange over `count` members starting at CP position `first`.
struct Orders {
  std::vector<i64> to_work;  // delivered -> working order
  std::vector<i64> back;     // working -> delivered order
};
Orders orders(const CpLayout& lay, i64 first, i64 count, const std::vector<i64>& working) {
  const std::vector<i64> delivered = delivered_rows(lay, first, count);
  return Orders{reorder(delivered, working, lay.global_rows()), reorder(working, delivered, lay.global_rows())};
}

struct Three {
  Tensor a, b, c;
};
Three heads_to_seq(const Tensor& a, const Tensor& b, const Tensor& c, const ProcessGroup& g,
                   const std::vector<i64>& perm) {
  const Posted pa = post_heads_to_seq(a, g), pb = post_heads_to_seq(b, g), pc = post_heads_to_seq(c, g);
  return Three{finish_heads_to_seq(pa, perm), finish_heads_to_seq(pb, perm), finish_heads_to_seq(pc, perm)};
}
AttentionGrads seq_to_heads(const AttentionGrads& g, const ProcessGroup& group, const std::vector<i64>& back) {
  const Posted pq = post_seq_to_heads(g.dq, group, back), pk = post_seq_to_heads(g.dk, group, back),
               pv = post_seq_to_heads(g.dv, group, back);
  return AttentionGrads{finish_seq_to_heads(pq, group), finish_seq_to_heads(pk, group), finish_seq_to_heads(pv, group)};
}

std::vector<i64> natural(const CpLayout& lay) {
  std::vector<i64> rows(static_cast<std::size_t>(lay.global_rows()));
  std::iota(rows.begin(), rows.end(), i64{0});
  return rows;
}

}  // namespace

Tensor a2a_forward(CpContext& ctx, const CpLayout& lay, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttentionOptions& opts) {
  const ProcessGroup& g = ctx.groups.cp;
  const Orders ord = orders(lay, 0, lay.cp(), natural(lay));
  const Three x = heads_to_seq(q, k, v, g, ord.to_work);
  const AttentionResult res = attention_forward(x.a, x.b, x.c, lay.global_tokens(), lay.global_tokens(), opts);
  ctx.q = x.a;
  ctx.k = x.b;
  ctx.v = x.c;
  ctx.out = res.out;
  ctx.lse = res.lse;
  return finish_seq_to_heads(post_seq_to_heads(res.out, g, ord.back), g);
}

AttentionGrads a2a_backward(const CpContext& ctx, const CpLayout& lay, const Tensor& dout,
                            const AttentionOptions& opts) {
  const ProcessGroup& g = ctx.groups.cp;
  const Orders ord = orders(lay, 0, lay.cp(), natural(lay));
  const Tensor dn = finish_heads_to_seq(post_heads_to_seq(dout, g), ord.to_work);
  const AttentionGrads gn =
      attention_backward(dn, ctx.q, ctx.k, ctx.v, ctx.out, ctx.lse, lay.global_tokens(), lay.global_tokens(), opts);
  return seq_to_heads(gn, g, ord.back);
}

namespace {

// After the a2a inside the group of a, this rank holds the tokens of CP positions
// [p2p_rank*a, (p2p_rank+1)*a), which are exactly the p-level chunks p2p_rank and
// 2p-1-p2p_rank: put them in that layout.
Orders hierarchical_orders(const CpContext& ctx, const CpLayout& lay, const CpLayout& lay_p) {
  const i64 a = ctx.groups.a2a.size(), pr = ctx.groups.p2p.rank();
  return orders(lay, pr * a, a, lay_p.rows_of(pr));
}

}  // namespace

Tensor hierarchical_forward(CpContext& ctx, const CpLayout& lay, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionOptions& opts) {
  const std::shared_ptr<const CpLayout> shared_lay_p = CpLayout::shared(ctx.layout, ctx.groups.p2p.size());
  const CpLayout& lay_p = *shared_lay_p;
  const Orders ord = hierarchical_orders(ctx, lay, lay_p);
  const Three x = heads_to_seq(q, k, v, ctx.groups.a2a, ord.to_work);
  RingForward f = ring_forward(x.a, x.b, x.c, lay_p, ctx.groups.p2p, opts);
  ctx.q = x.a;
  ctx.k = x.b;
  ctx.v = x.c;
  ctx.out = f.out;
  ctx.lse = f.lse;
  ctx.kv_next = f.kv_next;
  return finish_seq_to_heads(post_seq_to_heads(f.out, ctx.groups.a2a, ord.back), ctx.groups.a2a);
}

AttentionGrads hierarchical_backward(const CpContext& ctx, const CpLayout& lay, const Tensor& dout,
                                     const AttentionOptions& opts) {
  const std::shared_ptr<const CpLayout> shared_lay_p = CpLayout::shared(ctx.layout, ctx.groups.p2p.size());
  const CpLayout& lay_p = *shared_lay_p;
  const Orders ord = hierarchical_orders(ctx, lay, lay_p);
  const Tensor dn = finish_heads_to_seq(post_heads_to_seq(dout, ctx.groups.a2a), ord.to_work);
  const AttentionGrads g =
      ring_backward(dn, ctx.q, ctx.k, ctx.v, ctx.out, ctx.lse, ctx.kv_next, lay_p, ctx.groups.p2p, opts);
  return seq_to_heads(g, ctx.groups.a2a, ord.back);
}

}  // namespace ranksim::cp::detail

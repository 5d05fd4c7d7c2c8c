#include "cp/context_parallel.h"

#include <string>
#include <vector>

#include "cp/comm_types.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using i64 = std::int64_t;
using runtime::ProcessGroup;
using runtime::Shape;

[[noreturn]] void fail(const char* fn, const std::string& message) { throw Error(std::string(fn) + ": " + message); }

}  // namespace

CpGroups hierarchical_cp_groups(const runtime::ProcessGroup& cp, int a2a_size, int p2p_size) {
  const char* fn = "hierarchical_cp_groups";
  if (!cp.is_member()) fail(fn, "this rank is not a member of the CP group " + cp.name());
  if (a2a_size < 1 || p2p_size < 1 || a2a_size * p2p_size != cp.size()) {
    fail(fn, "a2a size " + std::to_string(a2a_size) + " x p2p size " + std::to_string(p2p_size) + " = " +
                 std::to_string(a2a_size * p2p_size) + " does not equal the CP size " + std::to_string(cp.size()) +
                 " (hierarchical sizes [a, p] must multiply to cp)");
  }
  CpGroups g(cp);
  const int me = cp.rank(), a = a2a_size, p = p2p_size;
  for (int pr = 0; pr < p; ++pr) {
    std::vector<int> ranks;
    for (int j = 0; j < a; ++j) ranks.push_back(cp.global_rank(pr * a + j));
    ProcessGroup grp = runtime::new_group(ranks, "cp.a2a");
    if (me / a == pr) g.a2a = grp;
  }
  for (int j = 0; j < a; ++j) {
    std::vector<int> ranks;
    for (int pr = 0; pr < p; ++pr) ranks.push_back(cp.global_rank(pr * a + j));
    ProcessGroup grp = runtime::new_group(ranks, "cp.p2p");
    if (me % a == j) g.p2p = grp;
  }
  return g;
}

CpGroups hierarchical_cp_groups(const runtime::ProcessGroup& cp) {
  if (cp.size() % 2 != 0) {
    fail("hierarchical_cp_groups", "the default split [2, cp/2] needs an even CP size, got cp = " +
                                       std::to_string(cp.size()) + "; pass [a2a size, p2p size] explicitly");
  }
  return hierarchical_cp_groups(cp, 2, cp.size() / 2);
}

namespace {

std::string heads_rule(const char* what, i64 hq, i64 hkv, i64 n, const char* name) {
  return std::string(what) + " splits heads over " + name + " = " + std::to_string(n) +
         " ranks: hq = " + std::to_string(hq) + " and hkv = " + std::to_string(hkv) + " must both be multiples of " +
         std::to_string(n);
}

// The a2a and p2p subgroups must be the ones hierarchical_cp_groups builds: this rank's CP
// position is p2p_rank * a + a2a_rank, and the members sit at the matching CP positions.
void check_hierarchical(const char* fn, const CpGroups& g) {
  const ProcessGroup &cp = g.cp, &a2a = g.a2a, &p2p = g.p2p;
  if (!a2a.is_member() || !p2p.is_member()) {
    fail(fn,
         "a2a+p2p needs this rank's a2a and p2p subgroups; build them with "
         "hierarchical_cp_groups(cp_group, a2a_size, p2p_size)");
  }
  const int a = a2a.size(), p = p2p.size();
  if (a * p != cp.size()) {
    fail(fn, "a2a size " + std::to_string(a) + " x p2p size " + std::to_string(p) + " = " + std::to_string(a * p) +
                 " does not equal the CP size " + std::to_string(cp.size()));
  }
  bool ok = cp.rank() == p2p.rank() * a + a2a.rank();
  for (int j = 0; ok && j < a; ++j) ok = a2a.global_rank(j) == cp.global_rank(p2p.rank() * a + j);
  for (int k = 0; ok && k < p; ++k) ok = p2p.global_rank(k) == cp.global_rank(k * a + a2a.rank());
  if (!ok) {
    fail(fn, "the a2a group " + a2a.name() + " and p2p group " + p2p.name() + " do not tile the CP group " + cp.name() +
                 " as position = p2p_rank * a + a2a_rank; use hierarchical_cp_groups");
  }
}

Shape with_last(Shape s, i64 last) {
  s.back() = last;
  return s;
}

}  // namespace

CpForwardResult attention_with_cp_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const SequenceLayout& layout, const CpGroups& groups, const CpOptions& opts) {
  const char* fn = "attention_with_cp_forward";
  if (!groups.cp.is_member()) {
    fail(fn, "this rank is not a member of the CP group " + groups.cp.name());
  }
  const i64 n = groups.cp.size();
  const std::shared_ptr<const CpLayout> shared_lay = CpLayout::shared(layout, n);
  const CpLayout& lay = *shared_lay;
  for (const Tensor* t : {&q, &k, &v}) {
    if (!t->defined() || !runtime::is_floating(t->dtype())) {
      fail(fn, "q, k and v must be floating tensors");
    }
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    fail(fn, "q " + q.str() + ", k " + k.str() + " and v " + v.str() + " must share one dtype");
  }
  const bool bshd = layout.format == Format::bshd;
  const i64 rank_dims = bshd ? 4 : 3;
  const Shape lead = bshd ? Shape{layout.batch, layout.seq_len / n} : Shape{lay.local_rows()};
  for (const Tensor* t : {&q, &k, &v}) {
    bool ok = t->dim() == rank_dims;
    for (std::size_t i = 0; ok && i < lead.size(); ++i) ok = t->size(static_cast<i64>(i)) == lead[i];
    if (!ok) {
      fail(fn, "q " + q.str() + ", k " + k.str() + " and v " + v.str() + " must be " +
                   (bshd ? "[b, S/cp, heads, dim] = [" + std::to_string(lead[0]) + ", " + std::to_string(lead[1]) +
                               ", heads, dim]"
                         : "[T/cp, heads, dim] = [" + std::to_string(lead[0]) + ", heads, dim]") +
                   " for this layout at cp = " + std::to_string(n));
    }
  }
  if (k.size(-2) != v.size(-2) || k.size(-1) != q.size(-1)) {
    fail(fn, "k " + k.str() + " must have v's heads (" + v.str() + ") and q's head dim (" + q.str() + ")");
  }
  const i64 hq = q.size(-2), hkv = k.size(-2), d = q.size(-1), dv = v.size(-1);
  if (hkv < 1 || hq % hkv != 0) {
    fail(fn, "hq = " + std::to_string(hq) + " query heads are not a multiple of hkv = " + std::to_string(hkv));
  }
  const AttentionOptions& ao = opts.attention;
  if (ao.window_left < -1 || ao.window_right < -1) {
    fail(fn, "window (" + std::to_string(ao.window_left) + ", " + std::to_string(ao.window_right) +
                 ") must be >= -1 on both sides (-1 = unbounded)");
  }
  if (opts.comm_type == CommType::a2a && (hq % n != 0 || hkv % n != 0)) {
    fail(fn, heads_rule("a2a", hq, hkv, n, "cp"));
  }
  if (opts.comm_type == CommType::a2a_p2p) {
    check_hierarchical(fn, groups);
    const i64 a = groups.a2a.size();
    if (hq % a != 0 || hkv % a != 0) fail(fn, heads_rule("a2a+p2p", hq, hkv, a, "the a2a size"));
  }

  CpForwardResult res;
  CpContext& ctx = res.ctx;
  ctx.comm_type = opts.comm_type;
  ctx.layout = layout;
  ctx.groups = groups;
  ctx.attention = ao;
  ctx.q_shape = q.shape();
  ctx.k_shape = k.shape();
  ctx.v_shape = v.shape();
  ctx.dtype = q.dtype();
  AttentionOptions inner = ao;
  inner.output_dtype.reset();
  const i64 rows = lay.local_rows();
  const Tensor qf = q.reshape({rows, hq, d}), kf = k.reshape({rows, hkv, d}), vf = v.reshape({rows, hkv, dv});
  Tensor out;
  switch (opts.comm_type) {
    case CommType::p2p: {
      detail::RingForward f = detail::ring_forward(qf, kf, vf, lay, groups.cp, inner);
      ctx.q = qf;
      ctx.k = kf;
      ctx.v = vf;
      ctx.out = f.out;
      ctx.lse = f.lse;
      ctx.kv_next = f.kv_next;
      out = f.out;
      break;
    }
    case CommType::all_gather:
      out = detail::all_gather_forward(ctx, lay, qf, kf, vf, inner);
      break;
    case CommType::a2a:
      out = detail::a2a_forward(ctx, lay, qf, kf, vf, inner);
      break;
    case CommType::a2a_p2p:
      out = detail::hierarchical_forward(ctx, lay, qf, kf, vf, inner);
      break;
  }
  if (ao.output_dtype) out = out.to(*ao.output_dtype);
  res.out = out.reshape(with_last(q.shape(), dv));
  res.out.wait_pending();  // the caller may read it outside the rank (after spawn returns)
  return res;
}

CpGrads attention_with_cp_backward(const Tensor& dout, const CpContext& ctx) {
  const char* fn = "attention_with_cp_backward";
  const Shape out_shape = with_last(ctx.q_shape, ctx.v_shape.back());
  if (!dout.defined() || !runtime::is_floating(dout.dtype()) || dout.shape() != out_shape) {
    fail(fn, "dout " + (dout.defined() ? dout.str() : std::string("(undefined)")) +
                 " must be a floating tensor of out's shape " + runtime::shape_str(out_shape));
  }
  const std::shared_ptr<const CpLayout> shared_lay = CpLayout::shared(ctx.layout, ctx.groups.cp.size());
  const CpLayout& lay = *shared_lay;
  const i64 rows = lay.local_rows();
  const Tensor df = dout.reshape({rows, ctx.q_shape.end()[-2], ctx.v_shape.back()});
  AttentionOptions inner = ctx.attention;
  inner.output_dtype.reset();
  AttentionGrads g;
  switch (ctx.comm_type) {
    case CommType::p2p:
      g = detail::ring_backward(df, ctx.q, ctx.k, ctx.v, ctx.out, ctx.lse, ctx.kv_next, lay, ctx.groups.cp, inner);
      break;
    case CommType::all_gather:
      g = detail::all_gather_backward(ctx, lay, df, inner);
      break;
    case CommType::a2a:
      g = detail::a2a_backward(ctx, lay, df, inner);
      break;
    case CommType::a2a_p2p:
      g = detail::hierarchical_backward(ctx, lay, df, inner);
      break;
  }
  auto finish = [&](const Tensor& t, const Shape& shape) {
    const Tensor x = ctx.attention.output_dtype ? t.to(*ctx.attention.output_dtype) : t;
    x.wait_pending();  // a received buffer may be returned as is; see attention_with_cp_forward
    return x.reshape(shape);
  };
  return CpGrads{finish(g.dq, ctx.q_shape), finish(g.dk, ctx.k_shape), finish(g.dv, ctx.v_shape)};
}

}  // namespace ranksim::cp

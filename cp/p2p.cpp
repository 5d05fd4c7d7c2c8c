// The p2p ring (spec B1), used by the p2p comm type on the CP group and by a2a+p2p on its p2p
// subgroup. Which rows a step computes comes from p2p_step (context_parallel.h).
#include <utility>

#include "cp/comm_types.h"
#include "cp/partition.h"
#include "runtime/tensor/ops.h"

namespace ranksim::cp::detail {
namespace {

using i64 = std::int64_t;
using runtime::P2POp;
using runtime::Work;

Rows rows_for(const CpLayout& lay, Half half) {
  if (half == Half::all) return Rows::all();
  const std::vector<i64>& rows = lay.half_rows(half);
  bool run = !rows.empty();
  for (std::size_t i = 1; run && i < rows.size(); ++i) run = rows[i] == rows[i - 1] + 1;
  if (run) return Rows::range(rows[0], static_cast<i64>(rows.size()));
  return Rows::list(rows);
}

// The LSE's query rows are its columns.
Tensor lse_cols(const Tensor& lse, const CpLayout& lay, Half half) {
  return take_rows(lse.transpose(0, 1), lay.half_rows(half)).transpose(0, 1);
}

// k and v share one flat buffer, as TE's kv_inputs do, so one message carries both.
struct KvView {
  Tensor k, v;
};
KvView unpack(const Tensor& buf, const Tensor& k, const Tensor& v) {
  return {buf.narrow(0, 0, k.numel()).view(k.shape()), buf.narrow(0, k.numel(), v.numel()).view(v.shape())};
}

void wait_all(const std::vector<Work>& works) {
  for (const Work& w : works) w.wait();
}

int peer(const ProcessGroup& ring, i64 position) {
  const i64 n = ring.size();
  return ring.global_rank(static_cast<int>(((position % n) + n) % n));
}

}  // namespace

RingForward ring_forward(const Tensor& q, const Tensor& k, const Tensor& v, const CpLayout& lay,
                         const ProcessGroup& ring, const AttentionOptions& opts) {
  const i64 cp = ring.size(), r = ring.rank(), n = lay.local_rows();
  const i64 hq = q.size(1), dv = v.size(2);
  const bool data = q.has_data() && k.has_data() && v.has_data();
  const DType acc = accumulate_dtype(q.dtype());
  AttentionOptions step_opts = opts;
  step_opts.output_dtype = acc;  // partial outputs stay unrounded until the final correction

  const i64 flat = k.numel() + v.numel();
  Tensor bufs[2] = {runtime::cat({k.reshape({k.numel()}), v.reshape({v.numel()})}, 0), zeros({flat}, k.dtype(), data)};
  Tensor lse = minus_inf({hq, n}, acc, data);
  struct Part {
    AttentionResult res;
    Half rows;
  };
  std::vector<Part> parts;
  for (i64 i = 0; i < cp; ++i) {
    const i64 s = ((r - i) % cp + cp) % cp;
    const Tensor& cur = bufs[i % 2];
    std::vector<Work> works;
    if (i + 1 < cp) {
      // Posted before this step computes, so the transfer overlaps the step.
      works = runtime::batch_isend_irecv({P2POp(P2POp::Kind::isend, cur, peer(ring, r + 1), ring),
                                          P2POp(P2POp::Kind::irecv, bufs[(i + 1) % 2], peer(ring, r - 1), ring)});
    }
    const P2pStep st = p2p_step(lay, r, s, opts);
    if (st.q != Half::none) {
      const KvView kv = unpack(cur, k, v);
      const std::vector<i64>& kv_rows = lay.half_rows(st.kv);
      AttentionResult res =
          attention_forward(take_rows(q, lay.half_rows(st.q)), take_rows(kv.k, kv_rows), take_rows(kv.v, kv_rows),
                            lay.tokens_of(r, st.q), lay.tokens_of(s, st.kv), step_opts);
      merge_lse_(lse, res.lse, rows_for(lay, st.q));
      parts.push_back(Part{std::move(res), st.q});
    }
    wait_all(works);
  }
  // Corrections in step order, against the final LSE.
  Tensor out = zeros({n, hq, dv}, acc, data);
  for (const Part& p : parts) add_corrected_out_(out, lse, p.res.out, p.res.lse, rows_for(lay, p.rows));
  return RingForward{out.to(q.dtype()), lse, bufs[(cp - 1) % 2]};
}

AttentionGrads ring_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Tensor& kv_next, const CpLayout& lay, const ProcessGroup& ring,
                             const AttentionOptions& opts) {
  const i64 cp = ring.size(), r = ring.rank();
  const bool data = dout.has_data() && q.has_data() && kv_next.has_data();
  const DType acc = accumulate_dtype(q.dtype());
  AttentionOptions step_opts = opts;
  step_opts.output_dtype = acc;
  const i64 flat = k.numel() + v.numel();

  Tensor dq = zeros(q.shape(), acc, data);
  // The KV the forward ended with is rank r+1's: backward step 0 starts there without a message.
  // kv_next itself is only read, so a second backward from the same context sees it unchanged.
  Tensor kv_bufs[2] = {zeros({flat}, k.dtype(), data), zeros({flat}, k.dtype(), data)};
  Tensor cur = kv_next;
  Tensor dkv_bufs[2] = {zeros({flat}, k.dtype(), data), zeros({flat}, k.dtype(), data)};
  std::vector<Work> dkv_works;
  Tensor dkv;
  for (i64 i = 0; i < cp; ++i) {
    const i64 s = (r + 1 + i) % cp;
    std::vector<Work> kv_works;
    Tensor nxt;
    if (i + 1 < cp) {
      nxt = kv_bufs[i % 2];
      kv_works = runtime::batch_isend_irecv({P2POp(P2POp::Kind::isend, cur, peer(ring, r - 1), ring),
                                             P2POp(P2POp::Kind::irecv, nxt, peer(ring, r + 1), ring)});
    }
    const P2pStep st = p2p_step(lay, r, s, opts);
    AttentionGrads g;
    if (st.q != Half::none) {
      const KvView kv = unpack(cur, k, v);
      const std::vector<i64>& q_rows = lay.half_rows(st.q);
      const std::vector<i64>& kv_rows = lay.half_rows(st.kv);
      g = attention_backward(take_rows(dout, q_rows), take_rows(q, q_rows), take_rows(kv.k, kv_rows),
                             take_rows(kv.v, kv_rows), take_rows(out, q_rows), lse_cols(lse, lay, st.q),
                             lay.tokens_of(r, st.q), lay.tokens_of(s, st.kv), step_opts);
      add_rows_(dq, g.dq, rows_for(lay, st.q));
    }
    // Block s's dKV accumulator: zeros on its first touch (i == 0, rank s-1), else what rank
    // r+1 sent after touching it in its step i-1.
    if (i == 0) {
      dkv = dkv_bufs[0];
    } else {
      wait_all(dkv_works);
      dkv = dkv_bufs[i % 2];
    }
    if (st.q != Half::none) {
      const KvView d = unpack(dkv, k, v);
      add_rows_(d.k, g.dk, rows_for(lay, st.kv));
      add_rows_(d.v, g.dv, rows_for(lay, st.kv));
    }
    if (i + 1 < cp) {
      dkv_works =
          runtime::batch_isend_irecv({P2POp(P2POp::Kind::isend, dkv, peer(ring, r - 1), ring, 1),
                                      P2POp(P2POp::Kind::irecv, dkv_bufs[(i + 1) % 2], peer(ring, r + 1), ring, 1)});
    }
    wait_all(kv_works);
    if (i + 1 < cp) cur = nxt;
  }
  const KvView d = unpack(dkv, k, v);
  return AttentionGrads{dq.to(q.dtype()), d.k, d.v};
}

}  // namespace ranksim::cp::detail

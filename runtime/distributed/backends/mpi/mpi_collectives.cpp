#if RANKSIM_HAVE_MPI

#include "runtime/distributed/backends/mpi/mpi_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/distributed/reduce.h"
#include "sim/error.h"

namespace ranksim::runtime::detail {

void MpiBackend::mismatch(const MpiGroup& g, uint64_t call, const Signature& mine, int peer, const std::string& what) {
  throw Error("collective mismatch on " + g.name + " at call #" + std::to_string(call) + ": rank " +
              std::to_string(rank_) + " called " + mine.describe() + " but rank " +
              std::to_string(g.ranks[static_cast<size_t>(peer)]) + " " + what +
              "; every member must issue the same collectives in the same order");
}

void MpiBackend::exchange(MpiGroup& g, const Header& h, const Signature& sig, uint64_t call) {
  constexpr int tag = 0;
  const int n = static_cast<int>(g.ranks.size());
  std::vector<MPI_Request> reqs;
  std::vector<int> from;
  for (int p = 0; p < n; ++p) {
    if (!receiving_[static_cast<size_t>(p)]) continue;
    auto& buf = recv_[static_cast<size_t>(p)];
    buf.resize(sizeof(Header) + expect_[static_cast<size_t>(p)]);
    reqs.emplace_back();
    from.push_back(p);
    check_mpi(MPI_Irecv(buf.data(), message_size(buf.size(), "collective"), MPI_BYTE, p, tag, g.coll, &reqs.back()),
              "MPI_Irecv");
  }
  for (int p = 0; p < n; ++p) {
    if (!sending_[static_cast<size_t>(p)]) continue;
    auto& buf = send_[static_cast<size_t>(p)];
    std::memcpy(buf.data(), &h, sizeof h);
    reqs.emplace_back();
    check_mpi(MPI_Isend(buf.data(), message_size(buf.size(), "collective"), MPI_BYTE, p, tag, g.coll, &reqs.back()),
              "MPI_Isend");
  }
  std::vector<MPI_Status> st(reqs.size());
  const int rc = wait_all(reqs, st.data(), [&](const std::vector<size_t>& pending, double waited) {
    std::string missing;
    for (size_t k : pending) {
      const int p = k < from.size() ? from[k] : -1;
      if (p < 0) continue;  // a send: its receiver is named by the receives
      missing += (missing.empty() ? "" : ", ") + std::to_string(g.ranks[static_cast<size_t>(p)]);
    }
    if (missing.empty()) missing = "its peers (they have not taken this rank's messages)";
    throw Error("collective " + sig.describe() + " on " + g.name + " at call #" + std::to_string(call) +
                " has waited " + seconds_str(waited) + " s for rank " + missing +
                ", which never joined it: a deadlock (a rank skipped this collective or issued another one "
                "first) or a rank stuck elsewhere" +
                kTimeoutAdvice);
  });
  for (size_t k = 0; k < from.size(); ++k) {
    const int p = from[k];
    const size_t expected = sizeof(Header) + expect_[static_cast<size_t>(p)];
    // A larger message than expected is truncated: its header (the first bytes, which MPI
    // delivers) still says what the peer called, so the report names the difference whichever
    // rank reports first; without a readable header it says only that the message was larger.
    bool truncated = false;
    if (rc == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(st[k].MPI_ERROR, &cls);
      truncated = cls == MPI_ERR_TRUNCATE;
      if (!truncated) check_mpi(st[k].MPI_ERROR, "receiving a collective message");
    }
    const std::string larger =
        "sent a larger message than this collective expects (" + std::to_string(expected) + " bytes)";
    int got = 0;
    if (truncated) {
      got = static_cast<int>(expected);
    } else {
      MPI_Get_count(&st[k], MPI_BYTE, &got);
    }
    Header their{};
    if (static_cast<size_t>(got) >= sizeof(Header))
      std::memcpy(&their, recv_[static_cast<size_t>(p)].data(), sizeof their);
    if (static_cast<size_t>(got) < sizeof(Header) || their.magic != kMagic)
      mismatch(g, call, sig, p, truncated ? larger : "sent a message that is not a ranksim collective message");
    if (their.call != h.call) mismatch(g, call, sig, p, "is at call #" + std::to_string(their.call) + " of the group");
    Signature other;
    other.kind = static_cast<CollectiveKind>(their.kind);
    other.dtype = static_cast<DType>(their.dtype);
    other.op = static_cast<ReduceOp>(their.op);
    other.algorithm = static_cast<Algorithm>(their.algorithm);
    other.root = their.root;
    other.count = their.count;
    other.shape = "[" + std::to_string(their.count) + " elements]";
    std::string diff = sig.difference(other);
    if (diff.empty() && their.resolved != h.resolved)
      diff = "different algorithms resolved (" + std::string(to_string(static_cast<Algorithm>(their.resolved))) +
             " vs " + to_string(static_cast<Algorithm>(h.resolved)) +
             "); set the same ProcessGroup::set_algorithm on every member";
    if (diff.empty() && truncated) mismatch(g, call, sig, p, larger);
    if (diff.empty() && static_cast<size_t>(got) != expected)
      diff = "a message of " + std::to_string(got) + " bytes where " + std::to_string(expected) + " were expected";
    if (!diff.empty()) mismatch(g, call, sig, p, "called " + other.describe() + " (" + diff + ")");
  }
  check_mpi(rc, "MPI_Waitall");
}

void MpiBackend::run_schedule(MpiGroup& g, const Signature& sig, Algorithm algo, uint64_t call, const Schedule& s,
                              std::byte* buf) {
  const int n = static_cast<int>(g.ranks.size());
  const int me = g.index_of[static_cast<size_t>(rank_)];
  const size_t esize = buf != nullptr ? dtype_size(sig.dtype) : 0;
  const ReduceKernel kernel = reduce_kernel(sig.dtype, sig.op);
  Header h{};
  h.magic = kMagic;
  h.kind = static_cast<uint8_t>(sig.kind);
  h.dtype = static_cast<uint8_t>(sig.dtype);
  h.op = static_cast<uint8_t>(sig.op);
  h.algorithm = static_cast<uint8_t>(sig.algorithm);
  h.resolved = static_cast<uint8_t>(algo);
  h.root = sig.root;
  h.count = sig.count;
  h.call = call;
  std::vector<size_t> offset(static_cast<size_t>(n));
  for (size_t k = 0; k < s.steps.size(); ++k) {
    const Step& step = s.steps[k];
    std::fill(sending_.begin(), sending_.end(), 0);
    std::fill(receiving_.begin(), receiving_.end(), 0);
    std::fill(expect_.begin(), expect_.end(), 0);
    for (const Move& m : step.moves) {
      if (m.src == m.dst) continue;
      const size_t bytes = static_cast<size_t>(m.count) * esize;
      if (m.src == me) {
        auto& out = send_[static_cast<size_t>(m.dst)];
        if (!sending_[static_cast<size_t>(m.dst)]) out.resize(sizeof(Header));
        sending_[static_cast<size_t>(m.dst)] = 1;
        if (bytes > 0) {
          const std::byte* from = buf + static_cast<size_t>(m.src_off) * esize;
          out.insert(out.end(), from, from + bytes);
        }
      } else if (m.dst == me) {
        receiving_[static_cast<size_t>(m.src)] = 1;
        expect_[static_cast<size_t>(m.src)] += bytes;
      }
    }
    h.step = static_cast<int32_t>(k);
    exchange(g, h, sig, call);
    if (buf == nullptr) continue;
    // Apply the moves into this rank in the schedule's order, as execute_schedule does.
    std::fill(offset.begin(), offset.end(), sizeof(Header));
    for (const Move& m : step.moves) {
      if (m.dst != me || m.count == 0) continue;
      std::byte* dst = buf + static_cast<size_t>(m.dst_off) * esize;
      const size_t bytes = static_cast<size_t>(m.count) * esize;
      const std::byte* src;
      if (m.src == me) {
        src = buf + static_cast<size_t>(m.src_off) * esize;
      } else {
        src = recv_[static_cast<size_t>(m.src)].data() + offset[static_cast<size_t>(m.src)];
        offset[static_cast<size_t>(m.src)] += bytes;
      }
      if (m.reduce)
        kernel(dst, src, m.count);
      else if (dst != src)
        std::memcpy(dst, src, bytes);
    }
  }
}

std::shared_ptr<WorkState> MpiBackend::post(const std::shared_ptr<GroupState>& gp, Signature sig,
                                            CollectiveTensors tensors) {
  MpiGroup& g = static_cast<MpiGroup&>(*gp);
  const int me = g.index_of[static_cast<size_t>(rank_)];
  if (me < 0)
    throw Error("rank " + std::to_string(rank_) + " called " + sig.describe() + " on " + g.name +
                ", which it is not a member of");
  const sim::Time begin = sync_clock();
  const uint64_t call = g.next_call++;
  const int n = static_cast<int>(g.ranks.size());
  send_.resize(static_cast<size_t>(n));
  recv_.resize(static_cast<size_t>(n));
  sending_.assign(static_cast<size_t>(n), 0);
  receiving_.assign(static_cast<size_t>(n), 0);
  expect_.assign(static_cast<size_t>(n), 0);

  const Algorithm algo = resolve_algorithm(g, sig, default_algorithm_);
  ScheduleRequest req = schedule_request(g, sig, algo);
  const bool data = has_data(tensors);
  if (device_ && data && sig.kind != CollectiveKind::barrier) {
    // The nccl backend: the device library runs it (its own algorithm; `algo` is only recorded).
    device_->run(g.id, sig, tensors, me);
    if (sig.kind == CollectiveKind::all_to_all)
      req.splits = {std::get<AllToAllTensors>(tensors).input_splits.to_vector()};  // this rank's size
    return finish(g, sig, algo, call, req, begin);
  }
  Schedule local;
  if (sig.kind == CollectiveKind::all_to_all) {
    // Every rank needs every rank's split sizes to build the same schedule.
    const auto& a2a = std::get<AllToAllTensors>(tensors);
    Header h{};
    h.magic = kMagic;
    h.kind = static_cast<uint8_t>(sig.kind);
    h.dtype = static_cast<uint8_t>(sig.dtype);
    h.algorithm = static_cast<uint8_t>(sig.algorithm);
    h.resolved = static_cast<uint8_t>(algo);
    h.step = -1;
    h.call = call;
    const size_t row = static_cast<size_t>(n) * sizeof(int64_t);
    const std::vector<int64_t> mine = a2a.input_splits.to_vector();
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      auto& out = send_[static_cast<size_t>(p)];
      out.resize(sizeof(Header) + row);
      std::memcpy(out.data() + sizeof(Header), mine.data(), row);
      sending_[static_cast<size_t>(p)] = receiving_[static_cast<size_t>(p)] = 1;
      expect_[static_cast<size_t>(p)] = row;
    }
    exchange(g, h, sig, call);
    req.splits.assign(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n)));
    for (int p = 0; p < n; ++p) {
      if (p == me)
        req.splits[static_cast<size_t>(p)] = mine;
      else
        std::memcpy(req.splits[static_cast<size_t>(p)].data(), recv_[static_cast<size_t>(p)].data() + sizeof(Header),
                    row);
    }
    check_splits(g, call, req, me, a2a.output_splits);
  }
  const Schedule* sched = &schedules_.get(g.id, req, local);

  if (data) {
    WorkingBuffer wb(sig, tensors, me, n, sched->buffer_elems);
    run_schedule(g, sig, algo, call, *sched, wb.data());
    wb.finish();
  } else {
    // Shape-only: the same messages without data, so mismatches and ordering still show.
    run_schedule(g, sig, algo, call, *sched, nullptr);
  }
  return finish(g, sig, algo, call, req, begin);
}

// The collective's time, record, span and completed Work.
std::shared_ptr<WorkState> MpiBackend::finish(MpiGroup& g, const Signature& sig, Algorithm algo, uint64_t call,
                                              const ScheduleRequest& req, sim::Time begin) {
  const int me = g.index_of[static_cast<size_t>(rank_)];
  const sim::Time end = sync_clock();
  comm_[static_cast<size_t>(rank_)] += end - begin;
  mark_ = end;

  CollectiveRecord rec = collective_record(g, sig, algo, call, req);
  rec.start = begin;
  rec.end = end;
  // One record per collective, as the sim backend keeps: the group's first member's (report()
  // gathers them on rank 0).
  if (me == 0) records_.push_back(rec);
  if (trace_on_)
    trace_.add(sim::Span{rank_,
                         sim::SpanKind::comm,
                         begin,
                         end,
                         to_string(sig.kind),
                         {{"group", g.name},
                          {"call", std::to_string(call)},
                          {"bytes", std::to_string(rec.bytes)},
                          {"dtype", rec.dtype},
                          {"algorithm", to_string(algo)}}});
  auto w = std::make_shared<MpiWork>();
  w->owner = rank_;
  w->matched = true;
  w->done = end;
  return w;
}

}  // namespace ranksim::runtime::detail

#endif  // RANKSIM_HAVE_MPI

#if RANKSIM_HAVE_MPI

#include "runtime/distributed/backends/mpi/mpi_backend.h"

#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::runtime::detail {

std::shared_ptr<WorkState> MpiBackend::post_p2p(bool is_send, const Tensor& tensor, int peer,
                                                const std::shared_ptr<GroupState>& gp, int tag) {
  MpiGroup& g = static_cast<MpiGroup&>(*gp);
  const char* verb = is_send ? "send" : "recv";
  if (g.index_of[static_cast<size_t>(rank_)] < 0)
    throw Error(std::string(verb) + " on " + g.name + " from rank " + std::to_string(rank_) +
                ", which is not a member");
  if (peer < 0 || peer >= size_ || g.index_of[static_cast<size_t>(peer)] < 0)
    throw Error(std::string(verb) + (is_send ? " to" : " from") + " rank " + std::to_string(peer) +
                ", which is not in " + g.name);
  if (peer == rank_)
    throw Error(std::string(verb) + " by rank " + std::to_string(rank_) + " to itself: copy the tensor instead");
  if (tensor.has_data() && !tensor.is_contiguous())
    throw Error(std::string(verb) + " needs a contiguous tensor, got a strided view " + tensor.str() +
                "; call .contiguous() first");
  if (tag < 0 || tag > tag_ub_)
    throw Error(std::string(verb) + ": tag " + std::to_string(tag) + " is outside [0, " + std::to_string(tag_ub_) +
                "], the tags this MPI accepts");
  auto w = std::make_shared<MpiWork>();
  w->owner = rank_;
  w->tensor = tensor;
  w->is_send = is_send;
  w->peer = peer;
  w->tag = tag;
  w->group = g.name;
  w->bytes = message_size(tensor.has_data() ? tensor.nbytes() : 0, verb);
  w->done = sync_clock();
  const std::string desc = std::string(verb) + "(" + (is_send ? "dst=" : "src=") + std::to_string(peer) +
                           ", tag=" + std::to_string(tag) + ", " + g.name + ", " + tensor.str() + ")";
  w->describe = [desc] { return desc; };
  void* data = tensor.has_data() ? tensor.raw_data_unsynchronized() : nullptr;
  const int peer_index = g.index_of[static_cast<size_t>(peer)];
  if (is_send)
    check_mpi(MPI_Isend(data, w->bytes, MPI_BYTE, peer_index, tag, g.p2p, &w->request), "MPI_Isend");
  else
    check_mpi(MPI_Irecv(data, w->bytes, MPI_BYTE, peer_index, tag, g.p2p, &w->request), "MPI_Irecv");
  outstanding_.push_back(w);
  if (outstanding_.size() > 1024) {
    std::erase_if(outstanding_, [](const std::weak_ptr<MpiWork>& x) {
      auto p = x.lock();
      return !p || p->request == MPI_REQUEST_NULL;
    });
  }
  return w;
}

void MpiBackend::complete(MpiWork& w, bool block) {
  if (w.request == MPI_REQUEST_NULL) return;
  MPI_Status st;
  int flag = 1;
  const sim::Time begin = sync_clock();
  int rc = MPI_SUCCESS;
  if (block) {
    std::vector<MPI_Request> one{w.request};
    rc = wait_all(one, &st, [&](const std::vector<size_t>&, double waited) {
      throw Error(std::string(w.is_send ? "send to rank " : "recv from rank ") + std::to_string(w.peer) + " (tag " +
                  std::to_string(w.tag) + ", " + std::to_string(w.bytes) + " bytes) on rank " + std::to_string(rank_) +
                  " has waited " + seconds_str(waited) + " s: rank " + std::to_string(w.peer) + " never posted the " +
                  (w.is_send ? "matching recv" : "matching send") + " (a deadlock, or a rank stuck elsewhere)" +
                  kTimeoutAdvice);
    });
    w.request = one[0];
    if (rc == MPI_ERR_IN_STATUS) rc = st.MPI_ERROR;  // MPI_Wait's code for the one request
  } else {
    rc = MPI_Test(&w.request, &flag, &st);
  }
  if (!flag) return;
  w.request = MPI_REQUEST_NULL;
  w.matched = true;
  const std::string what =
      w.is_send ? "send to rank " + std::to_string(w.peer) : "recv from rank " + std::to_string(w.peer);
  try {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
      throw Error("send/recv mismatch: rank " + std::to_string(w.peer) + " sends more than the " +
                  std::to_string(w.bytes) + " bytes of " + w.tensor.str() + " that rank " + std::to_string(rank_) +
                  " receives (tag " + std::to_string(w.tag) + "); dtype and element count must match");
    check_mpi(rc, w.is_send ? "MPI_Isend" : "MPI_Irecv");
    if (!w.is_send) {
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      if (got != w.bytes)
        throw Error("send/recv mismatch: rank " + std::to_string(w.peer) + " sent " + std::to_string(got) +
                    " bytes to rank " + std::to_string(rank_) + " (tag " + std::to_string(w.tag) +
                    "), which receives " + std::to_string(w.bytes) + " bytes into " + w.tensor.str() +
                    "; dtype and element count must match");
    }
  } catch (...) {
    w.error = std::current_exception();
  }
  const sim::Time end = sync_clock();
  if (block) comm_[static_cast<size_t>(rank_)] += end - begin;
  if (trace_on_)
    trace_.add(sim::Span{rank_,
                         sim::SpanKind::comm,
                         w.done,
                         end,
                         what,
                         {{"bytes", std::to_string(w.bytes)}, {"tag", std::to_string(w.tag)}}});
  w.done = end;
  mark_ = end;
}

void MpiBackend::wait(WorkState& ws) {
  auto& w = static_cast<MpiWork&>(ws);
  complete(w, true);
  w.observed = true;
  if (w.error) std::rethrow_exception(w.error);
}

bool MpiBackend::poll(WorkState& ws) {
  auto& w = static_cast<MpiWork&>(ws);
  complete(w, false);
  w.observed = w.matched;
  return w.observed;
}

}  // namespace ranksim::runtime::detail

#endif  // RANKSIM_HAVE_MPI

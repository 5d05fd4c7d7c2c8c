#include "runtime/distributed/backends/mpi/mpi.h"

#include "sim/error.h"

#if RANKSIM_HAVE_MPI

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "runtime/distributed/backends/backend.h"
#include "runtime/tensor/cost.h"
#include "runtime/distributed/reduce.h"
#include "sim/engine.h"

// Open MPI's handles (MPI_COMM_WORLD, MPI_BYTE, ...) are macros with C casts.
#pragma GCC diagnostic ignored "-Wold-style-cast"

namespace ranksim::runtime {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<size_t>(len)));
}

// How long a blocked collective or receive waits for its peers before the run is declared hung:
// RANKSIM_COLLECTIVE_TIMEOUT seconds (default 600, as torch.distributed's NCCL default; 0 waits
// forever).
double collective_timeout() {
  static const double seconds = [] {
    const char* v = std::getenv("RANKSIM_COLLECTIVE_TIMEOUT");
    if (v == nullptr || *v == '\0') return 600.0;
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(t >= 0)) {
      throw Error(std::string("RANKSIM_COLLECTIVE_TIMEOUT='") + v +
                  "' is not a number of seconds (>= 0; 0 waits forever)");
    }
    return t;
  }();
  return seconds;
}

// MPI_Waitall that gives up: polls the requests, and after collective_timeout() seconds calls
// timed_out(indices of the requests still pending, seconds waited), which throws.
template <class F>
int wait_all(std::vector<MPI_Request>& reqs, MPI_Status* st, F&& timed_out) {
  if (reqs.empty()) return MPI_SUCCESS;
  const double limit = collective_timeout();
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, st);
    if (flag || rc != MPI_SUCCESS) return rc;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (limit > 0 && waited > limit) {
      std::vector<size_t> pending;
      for (size_t i = 0; i < reqs.size(); ++i) {
        int done = 0;
        MPI_Request_get_status(reqs[i], &done, MPI_STATUS_IGNORE);
        if (!done) pending.push_back(i);
      }
      timed_out(pending, waited);
    }
    // Spin while the peers are likely close (a collective step), then let them have the core.
    if (waited < 0.01) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", s);
  return buf;
}

const char* kTimeoutAdvice =
    "; set RANKSIM_COLLECTIVE_TIMEOUT=SECONDS to wait longer (0: forever)";

void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace

namespace mpi {

bool available() { return true; }

void init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  // Fibers switch stacks but stay on one thread: FUNNELED is enough.
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
}

int world_rank() {
  init();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  init();
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace mpi

namespace detail {

namespace {

int message_size(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw Error(std::string("the MPI backend sends messages of up to 2 GiB; this ") + what + " needs " +
                std::to_string(bytes) + " bytes in one message (split the tensor)");
  return static_cast<int>(bytes);
}

// What a collective's messages carry ahead of the data: enough to tell, on receipt, that the
// sender is in the same collective.
struct Header {
  uint32_t magic;
  uint8_t kind, dtype, op, algorithm, resolved, pad[3];
  int32_t root;
  int32_t step;
  int64_t count;
  uint64_t call;
};
static_assert(sizeof(Header) == 40);
constexpr uint32_t kMagic = 0x52534d31;  // "RSM1"

struct MpiGroup : GroupState {
  MPI_Comm coll = MPI_COMM_NULL;  // this backend's schedule messages
  MPI_Comm p2p = MPI_COMM_NULL;   // user send/recv
  uint64_t next_call = 0;
};

struct MpiWork : WorkState {
  MPI_Request request = MPI_REQUEST_NULL;
  Tensor tensor;  // keeps the buffer alive while MPI owns it
  bool is_send = false;
  int peer = -1;
  int tag = 0;
  int bytes = 0;
  std::string group;
};

class MpiBackend final : public Backend, public CostSink {
 public:
  // device: the nccl backend's collectives (nullptr: the mpi backend).
  MpiBackend(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm,
             bool trace, std::unique_ptr<DeviceCollectives> device)
      : engine_(engine),
        topology_(topology),
        default_algorithm_(default_algorithm),
        trace_on_(trace),
        device_(std::move(device)) {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &world_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(world_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(world_comm_, &rank_);
    MPI_Comm_size(world_comm_, &size_);
    void* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    tag_ub_ = found ? *static_cast<int*>(ub) : 32767;
    std::vector<int> all(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) all[static_cast<size_t>(r)] = r;
    world_ = make_group(all, 0);
    world_->name = "world";
    compute_.assign(static_cast<size_t>(size_), sim::Time::zero());
    comm_.assign(static_cast<size_t>(size_), sim::Time::zero());
    // Spans are recorded on every rank when any asks for them (rank 0 gathers them; the others
    // may not write a trace themselves). The reduction also lines the ranks' starts up, as far
    // as a barrier can, so wall-clock spans of different ranks are comparable.
    int want = trace ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &want, 1, MPI_INT, MPI_MAX, world_comm_), "MPI_Allreduce");
    trace_on_ = want != 0;
    start_ = std::chrono::steady_clock::now();
    engine_.set_context(static_cast<Backend*>(this));
  }

  ~MpiBackend() override {
    device_.reset();  // device communicators before the MPI communicators they were made over
    for (auto& g : groups_) {
      if (g->coll != MPI_COMM_NULL) MPI_Comm_free(&g->coll);
      if (g->p2p != MPI_COMM_NULL) MPI_Comm_free(&g->p2p);
    }
    MPI_Comm_free(&world_comm_);
  }

  const char* name() const override { return device_ ? device_->name() : "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  sim::Time now() const override {
    return sim::Time::from_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  bool initialized() const override { return initialized_; }
  void set_initialized() override { initialized_ = true; }
  std::shared_ptr<GroupState> world_group() override { return world_; }

  std::shared_ptr<GroupState> find_or_make_group(const std::vector<int>& ranks) override {
    const int occurrence = creations_[ranks]++;
    auto g = make_group(ranks, occurrence);
    if (ranks.size() == static_cast<size_t>(size_)) g->name = "world#" + std::to_string(occurrence + 1);
    return g;
  }

  std::shared_ptr<WorkState> post(const std::shared_ptr<GroupState>& gp, Signature sig,
                                  Part part) override;
  std::shared_ptr<WorkState> post_p2p(bool is_send, const Tensor& tensor, int peer,
                                      const P2POptions& opts) override;
  void wait(WorkState& work) override;
  bool poll(WorkState& work) override;

  // Compute ops run for real; their charge arrives when they finish. The time since the previous
  // event is the op's span, and the one-fiber engine's clock follows the wall clock, so
  // sim::this_rank::now() reads wall time since the start of the run.
  void charge(const OpCost& cost) override {
    const sim::Engine* e = sim::Engine::current();
    if (e != &engine_ || !e->in_rank()) return;
    const sim::Time t = sync_clock();
    if (t > mark_) {
      compute_[static_cast<size_t>(rank_)] += t - mark_;
      if (trace_on_) trace_.add(sim::Span{rank_, sim::SpanKind::compute, mark_, t, cost.op, {}});
    }
    mark_ = t;
  }

  // Completes every outstanding point-to-point request (a send nobody waited for).
  void drain() {
    for (auto& weak : outstanding_)
      if (auto w = weak.lock(); w && w->request != MPI_REQUEST_NULL) complete(*w, true);
    outstanding_.clear();
  }

  RunReport report(sim::Time end);
  std::string gather_to_root(const std::string& blob, const char* what);

 private:
  std::shared_ptr<MpiGroup> make_group(const std::vector<int>& ranks, int occurrence);
  sim::Time sync_clock() {
    const sim::Time t = now();
    if (t > engine_.now()) engine_.advance(t - engine_.now());
    return engine_.now();
  }
  // One step's messages: payload[p] (after the header) goes to group rank p when sending[p];
  // expect[p] bytes come from p when receiving[p]. Returns the received payloads in recv_.
  // Every message of a group's collectives uses one tag: MPI delivers a sender's messages in
  // order, both sides walk the same schedule, so the k-th message matches the k-th receive, and a
  // rank in another collective is caught by the header of the first message it exchanges.
  void exchange(MpiGroup& g, const Header& h, const Signature& sig, uint64_t call);
  // Runs the schedule on this rank's working buffer; buf == nullptr (shape-only) sends the same
  // messages with headers only.
  void run_schedule(MpiGroup& g, const Signature& sig, Algorithm algo, uint64_t call,
                    const Schedule& s, std::byte* buf);
  [[noreturn]] void mismatch(const MpiGroup& g, uint64_t call, const Signature& mine, int peer,
                             const std::string& what);
  void complete(MpiWork& w, bool wait);
  std::shared_ptr<WorkState> finish(MpiGroup& g, const Signature& sig, Algorithm algo, uint64_t call,
                                    const ScheduleRequest& req, sim::Time begin);

  sim::Engine& engine_;
  const sim::Topology& topology_;
  Algorithm default_algorithm_;
  bool trace_on_;
  std::unique_ptr<DeviceCollectives> device_;
  MPI_Comm world_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  bool initialized_ = false;
  std::chrono::steady_clock::time_point start_;
  sim::Time mark_;
  std::shared_ptr<MpiGroup> world_;
  std::vector<std::shared_ptr<MpiGroup>> groups_;
  std::map<std::vector<int>, int> creations_;
  ScheduleCache schedules_;
  std::vector<std::weak_ptr<MpiWork>> outstanding_;
  // Per-step staging, indexed by group rank; reused across steps.
  std::vector<std::vector<std::byte>> send_, recv_;
  std::vector<char> sending_, receiving_;
  std::vector<size_t> expect_;
  std::vector<CollectiveRecord> records_;
  std::vector<sim::Time> compute_, comm_;
  sim::Trace trace_;
};

std::shared_ptr<MpiGroup> MpiBackend::make_group(const std::vector<int>& ranks, int occurrence) {
  auto g = std::make_shared<MpiGroup>();
  g->owner = static_cast<const Backend*>(this);
  g->id = static_cast<int>(groups_.size());
  g->ranks = ranks;
  g->index_of.assign(static_cast<size_t>(size_), -1);
  for (size_t i = 0; i < ranks.size(); ++i) g->index_of[static_cast<size_t>(ranks[i])] = static_cast<int>(i);
  std::ostringstream name;
  name << "group[";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) name << (i ? ", " : "") << ranks[i];
  if (ranks.size() > 8) name << ", ... (" << ranks.size() << " in all)";
  name << ']';
  g->name = name.str();
  set_node_layout(*g, [&](int r) { return topology_.device(r).node; });
  if (g->index_of[static_cast<size_t>(rank_)] >= 0) {
    // Only members create the communicators (MPI_Comm_create_group is collective over them).
    // The tag keeps concurrent creations of different groups apart.
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(occurrence);
    for (int r : ranks) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
    const int tag = static_cast<int>(h % static_cast<uint64_t>(tag_ub_));
    MPI_Group world_group, sub;
    MPI_Comm_group(world_comm_, &world_group);
    MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &sub);
    check(MPI_Comm_create_group(world_comm_, sub, tag, &g->coll), "MPI_Comm_create_group");
    MPI_Group_free(&sub);
    MPI_Group_free(&world_group);
    check(MPI_Comm_dup(g->coll, &g->p2p), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(g->coll, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g->p2p, MPI_ERRORS_RETURN);
    if (device_) device_->add_group(g->id, ranks, g->index_of[static_cast<size_t>(rank_)], &g->coll);
  }
  groups_.push_back(g);
  return g;
}

void MpiBackend::mismatch(const MpiGroup& g, uint64_t call, const Signature& mine, int peer,
                          const std::string& what) {
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
    check(MPI_Irecv(buf.data(), message_size(buf.size(), "collective"), MPI_BYTE, p, tag, g.coll,
                    &reqs.back()),
          "MPI_Irecv");
  }
  for (int p = 0; p < n; ++p) {
    if (!sending_[static_cast<size_t>(p)]) continue;
    auto& buf = send_[static_cast<size_t>(p)];
    std::memcpy(buf.data(), &h, sizeof h);
    reqs.emplace_back();
    check(MPI_Isend(buf.data(), message_size(buf.size(), "collective"), MPI_BYTE, p, tag, g.coll,
                    &reqs.back()),
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
                "first) or a rank stuck elsewhere" + kTimeoutAdvice);
  });
  for (size_t k = 0; k < from.size(); ++k) {
    const int p = from[k];
    const size_t expected = sizeof(Header) + expect_[static_cast<size_t>(p)];
    if (rc == MPI_ERR_IN_STATUS && st[k].MPI_ERROR != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(st[k].MPI_ERROR, &cls);
      if (cls == MPI_ERR_TRUNCATE)
        mismatch(g, call, sig, p, "sent a larger message than this collective expects (" +
                                      std::to_string(expected) + " bytes)");
      check(st[k].MPI_ERROR, "receiving a collective message");
    }
    int got = 0;
    MPI_Get_count(&st[k], MPI_BYTE, &got);
    Header their{};
    if (static_cast<size_t>(got) >= sizeof(Header)) std::memcpy(&their, recv_[static_cast<size_t>(p)].data(), sizeof their);
    if (static_cast<size_t>(got) < sizeof(Header) || their.magic != kMagic)
      mismatch(g, call, sig, p, "sent a message that is not a ranksim collective message");
    if (their.call != h.call)
      mismatch(g, call, sig, p, "is at call #" + std::to_string(their.call) + " of the group");
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
    if (diff.empty() && static_cast<size_t>(got) != expected)
      diff = "a message of " + std::to_string(got) + " bytes where " + std::to_string(expected) + " were expected";
    if (!diff.empty()) mismatch(g, call, sig, p, "called " + other.describe() + " (" + diff + ")");
  }
  check(rc, "MPI_Waitall");
}

void MpiBackend::run_schedule(MpiGroup& g, const Signature& sig, Algorithm algo, uint64_t call,
                              const Schedule& s, std::byte* buf) {
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
      if (m.reduce) kernel(dst, src, m.count);
      else if (dst != src) std::memcpy(dst, src, bytes);
    }
  }
}

std::shared_ptr<WorkState> MpiBackend::post(const std::shared_ptr<GroupState>& gp, Signature sig,
                                            Part part) {
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
  if (device_ && part.has_data && sig.kind != CollectiveKind::barrier) {
    // The nccl backend: the device library runs it (its own algorithm; `algo` is only recorded).
    device_->run(g.id, sig, part, me);
    if (sig.kind == CollectiveKind::all_to_all) req.splits = {part.in_splits};  // this rank's size
    return finish(g, sig, algo, call, req, begin);
  }
  Schedule local;
  if (sig.kind == CollectiveKind::all_to_all) {
    // Every rank needs every rank's split sizes to build the same schedule.
    Header h{};
    h.magic = kMagic;
    h.kind = static_cast<uint8_t>(sig.kind);
    h.dtype = static_cast<uint8_t>(sig.dtype);
    h.algorithm = static_cast<uint8_t>(sig.algorithm);
    h.resolved = static_cast<uint8_t>(algo);
    h.step = -1;
    h.call = call;
    const size_t row = static_cast<size_t>(n) * sizeof(int64_t);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      auto& out = send_[static_cast<size_t>(p)];
      out.resize(sizeof(Header) + row);
      std::memcpy(out.data() + sizeof(Header), part.in_splits.data(), row);
      sending_[static_cast<size_t>(p)] = receiving_[static_cast<size_t>(p)] = 1;
      expect_[static_cast<size_t>(p)] = row;
    }
    exchange(g, h, sig, call);
    req.splits.assign(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n)));
    for (int p = 0; p < n; ++p) {
      if (p == me) req.splits[static_cast<size_t>(p)] = part.in_splits;
      else std::memcpy(req.splits[static_cast<size_t>(p)].data(), recv_[static_cast<size_t>(p)].data() + sizeof(Header), row);
    }
    check_splits(g, call, req, me, part.out_splits);
  }
  const Schedule* sched = &schedules_.get(g.id, req, local);

  if (part.has_data) {
    WorkingBuffer wb(sig, part, me, n, sched->buffer_elems);
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
    trace_.add(sim::Span{rank_, sim::SpanKind::comm, begin, end, to_string(sig.kind),
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

std::shared_ptr<WorkState> MpiBackend::post_p2p(bool is_send, const Tensor& tensor, int peer,
                                                const P2POptions& opts) {
  const auto gp = resolve(opts.group);
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
  if (opts.tag < 0 || opts.tag > tag_ub_)
    throw Error(std::string(verb) + ": tag " + std::to_string(opts.tag) + " is outside [0, " +
                std::to_string(tag_ub_) + "], the tags this MPI accepts");
  auto w = std::make_shared<MpiWork>();
  w->owner = rank_;
  w->tensor = tensor;
  w->is_send = is_send;
  w->peer = peer;
  w->tag = opts.tag;
  w->group = g.name;
  w->bytes = message_size(tensor.has_data() ? tensor.nbytes() : 0, verb);
  w->done = sync_clock();
  const std::string desc = std::string(verb) + "(" + (is_send ? "dst=" : "src=") + std::to_string(peer) +
                           ", tag=" + std::to_string(opts.tag) + ", " + g.name + ", " + tensor.str() + ")";
  w->describe = [desc] { return desc; };
  void* data = tensor.has_data() ? tensor.raw_data_unsynchronized() : nullptr;
  const int peer_index = g.index_of[static_cast<size_t>(peer)];
  if (is_send)
    check(MPI_Isend(data, w->bytes, MPI_BYTE, peer_index, opts.tag, g.p2p, &w->request), "MPI_Isend");
  else
    check(MPI_Irecv(data, w->bytes, MPI_BYTE, peer_index, opts.tag, g.p2p, &w->request), "MPI_Irecv");
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
  const std::string what = w.is_send ? "send to rank " + std::to_string(w.peer)
                                     : "recv from rank " + std::to_string(w.peer);
  try {
    int cls = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
      throw Error("send/recv mismatch: rank " + std::to_string(w.peer) + " sends more than the " +
                  std::to_string(w.bytes) + " bytes of " + w.tensor.str() + " that rank " +
                  std::to_string(rank_) + " receives (tag " + std::to_string(w.tag) +
                  "); dtype and element count must match");
    check(rc, w.is_send ? "MPI_Isend" : "MPI_Irecv");
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
    trace_.add(sim::Span{rank_, sim::SpanKind::comm, w.done, end, what,
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

// Spans cross processes as flat records: rank, kind, start, end (ps), name, args.
void put(std::string& out, const std::string& s) {
  const uint32_t len = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&len), sizeof len);
  out.append(s);
}
template <class T>
void put_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get_pod(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}
std::string get(const char*& p) {
  const uint32_t len = get_pod<uint32_t>(p);
  std::string s(p, len);
  p += len;
  return s;
}

// Every rank's bytes, concatenated in rank order, on rank 0 (empty elsewhere).
std::string MpiBackend::gather_to_root(const std::string& blob, const char* what) {
  const size_t n = static_cast<size_t>(size_);
  const int len = message_size(blob.size(), what);
  std::vector<int> lens(n), displs(n);
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, world_comm_), "MPI_Gather");
  std::string gathered;
  if (rank_ == 0) {
    size_t total = 0;
    for (size_t r = 0; r < n; ++r) {
      displs[r] = static_cast<int>(total);
      total += static_cast<size_t>(lens[r]);
    }
    gathered.resize(static_cast<size_t>(message_size(total, what)));
  }
  check(MPI_Gatherv(blob.data(), len, MPI_BYTE, gathered.data(), lens.data(), displs.data(), MPI_BYTE, 0,
                    world_comm_),
        "MPI_Gatherv");
  return gathered;
}

RunReport MpiBackend::report(sim::Time end) {
  RunReport rep;
  const size_t n = static_cast<size_t>(size_);
  std::vector<int64_t> mine{end.picoseconds(), compute_[static_cast<size_t>(rank_)].picoseconds(),
                            comm_[static_cast<size_t>(rank_)].picoseconds()};
  std::vector<int64_t> all(3 * n);
  check(MPI_Allgather(mine.data(), 3, MPI_INT64_T, all.data(), 3, MPI_INT64_T, world_comm_), "MPI_Allgather");
  for (size_t r = 0; r < n; ++r) {
    rep.clocks.push_back(sim::Time::ps(all[3 * r]));
    rep.compute.push_back(sim::Time::ps(all[3 * r + 1]));
    rep.comm.push_back(sim::Time::ps(all[3 * r + 2]));
    rep.makespan = std::max(rep.makespan, rep.clocks.back());
  }
  // Rank 0 collects every group's collective records (each kept by the group's first member),
  // ordered by start time as the sim backend's are by completion.
  {
    std::string blob;
    for (const CollectiveRecord& r : records_) {
      put_pod(blob, static_cast<uint8_t>(r.kind));
      put_pod(blob, static_cast<uint8_t>(r.algorithm));
      put(blob, r.group);
      put_pod(blob, static_cast<int32_t>(r.group_size));
      put_pod(blob, r.call);
      put_pod(blob, r.bytes);
      put_pod(blob, r.count);
      put(blob, r.dtype);
      put_pod(blob, r.start.picoseconds());
      put_pod(blob, r.end.picoseconds());
    }
    const std::string gathered = gather_to_root(blob, "collective records");
    if (rank_ == 0) {
      const char* p = gathered.data();
      const char* stop = p + gathered.size();
      while (p < stop) {
        CollectiveRecord r;
        r.kind = static_cast<CollectiveKind>(get_pod<uint8_t>(p));
        r.algorithm = static_cast<Algorithm>(get_pod<uint8_t>(p));
        r.group = get(p);
        r.group_size = get_pod<int32_t>(p);
        r.call = get_pod<uint64_t>(p);
        r.bytes = get_pod<int64_t>(p);
        r.count = get_pod<int64_t>(p);
        r.dtype = get(p);
        r.start = sim::Time::ps(get_pod<int64_t>(p));
        r.end = sim::Time::ps(get_pod<int64_t>(p));
        rep.collectives.push_back(std::move(r));
      }
      std::stable_sort(rep.collectives.begin(), rep.collectives.end(),
                       [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.start < b.start; });
    } else {
      rep.collectives = records_;
    }
  }
  // Rank 0 collects every rank's spans, in rank order.
  std::string blob;
  for (const sim::Span& s : trace_.spans()) {
    put_pod(blob, static_cast<int32_t>(s.rank));
    put_pod(blob, static_cast<uint8_t>(s.kind));
    put_pod(blob, s.start.picoseconds());
    put_pod(blob, s.end.picoseconds());
    put(blob, s.name);
    put_pod(blob, static_cast<uint32_t>(s.args.size()));
    for (const auto& [k, v] : s.args) {
      put(blob, k);
      put(blob, v);
    }
  }
  const std::string gathered = gather_to_root(blob, "trace");
  if (rank_ == 0) {
    const char* p = gathered.data();
    const char* stop = p + gathered.size();
    while (p < stop) {
      sim::Span s;
      s.rank = get_pod<int32_t>(p);
      s.kind = static_cast<sim::SpanKind>(get_pod<uint8_t>(p));
      s.start = sim::Time::ps(get_pod<int64_t>(p));
      s.end = sim::Time::ps(get_pod<int64_t>(p));
      s.name = get(p);
      const uint32_t nargs = get_pod<uint32_t>(p);
      for (uint32_t a = 0; a < nargs; ++a) {
        std::string k = get(p);
        s.args.emplace_back(std::move(k), get(p));
      }
      rep.trace.add(std::move(s));
    }
  } else {
    rep.trace = std::move(trace_);
  }
  rep.trace.set_num_ranks(size_);
  return rep;
}

}  // namespace

RunReport spawn_mpi(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts,
                    const sim::Topology& topology, bool device) {
  mpi::init();
  const int size = mpi::world_size();
  if (size != nprocs)
    throw Error("spawn: the program asks for " + std::to_string(nprocs) +
                " ranks but this MPI job has " + std::to_string(size) + " process" +
                (size == 1 ? "" : "es") + "; start it with mpirun -np " + std::to_string(nprocs) +
                " (one process per rank)");
  std::unique_ptr<DeviceCollectives> collectives;
  if (device) {
    if (!device_collectives_factory()) {
      throw Error("the nccl backend is not available: ranksim was built without CUDA and NCCL (CMake option "
                  "RANKSIM_WITH_CUDA; docs/gpu.md), or this program did not install it with "
                  "runtime::gpu::install_nccl_backend() (the ranksim command does)");
    }
    collectives = device_collectives_factory()();
  }
  sim::Engine engine(opts.engine);
  MpiBackend backend(engine, topology, opts.algorithm, opts.engine.trace, std::move(collectives));
  const int rank = backend.rank();
  sim::Time end;
  try {
    ScopedCostSink sink(&backend);
    engine.run(1, [&](int) {
      fn(rank);
      backend.drain();
      end = backend.now();
    });
  } catch (const sim::RankFailure& e) {
    const std::string msg = e.errors().empty() ? e.what() : e.errors().front().message;
    std::fprintf(stderr, "rank %d: %s\n", rank, msg.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return
  }
  return backend.report(end);
}

}  // namespace detail
}  // namespace ranksim::runtime

#else  // built without MPI

namespace ranksim::runtime {

namespace {
[[noreturn]] void unavailable() {
  throw Error("the mpi backend is not available: ranksim was built without MPI; install with "
              "scripts/setup.sh --with-mpi and rebuild (CMake option RANKSIM_WITH_MPI)");
}
}  // namespace

namespace mpi {
bool available() { return false; }
void init() { unavailable(); }
int world_rank() { unavailable(); }
int world_size() { unavailable(); }
}  // namespace mpi

namespace detail {
RunReport spawn_mpi(const std::function<void(int)>&, int, const SpawnOptions&, const sim::Topology&, bool) {
  unavailable();
}
}  // namespace detail

}  // namespace ranksim::runtime

#endif

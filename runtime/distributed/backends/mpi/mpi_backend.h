// The MpiBackend's internals, shared by the mpi backend's source files (and by no other unit):
// mpi_process.cpp (MPI set-up, groups and their communicators, spawn_mpi), mpi_collectives.cpp
// (schedules over MPI point-to-point), mpi_p2p.cpp (the user's send/recv), mpi_report.cpp (the run
// report gathered on rank 0). What the backend does, and its contract, is in mpi.h beside it.
//
// Only with RANKSIM_HAVE_MPI. Includers get Open MPI's handles, which are macros with C casts:
// -Wold-style-cast is off in them.
#pragma once

#if RANKSIM_HAVE_MPI

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/distributed/backends/backend.h"
#include "runtime/distributed/backends/device_collectives.h"
#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/backends/timeout.h"
#include "runtime/tensor/cost.h"
#include "sim/engine.h"

#pragma GCC diagnostic ignored "-Wold-style-cast"

namespace ranksim::runtime::detail {

// Throws Error("MPI: <what> failed: <MPI's text>") unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* what);

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

// Whole seconds, for messages.
std::string seconds_str(double s);

inline constexpr const char* kTimeoutAdvice = "; set RANKSIM_COLLECTIVE_TIMEOUT=SECONDS to wait longer (0: forever)";

// bytes as an MPI count; throws Error over 2 GiB, naming `what`.
int message_size(size_t bytes, const char* what);

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
  MpiBackend(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm, bool trace,
             std::unique_ptr<DeviceCollectives> device);
  ~MpiBackend() override;

  const char* name() const override { return device_ ? device_->name() : "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  sim::Time now() const override {
    return sim::Time::from_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
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
                                  CollectiveTensors tensors) override;
  std::shared_ptr<WorkState> post_p2p(bool is_send, const Tensor& tensor, int peer,
                                      const std::shared_ptr<GroupState>& group, int tag) override;
  void wait(WorkState& work) override;
  bool in_place_on_device(const Tensor& t) const override { return device_ && t.has_data() && device_->in_place(t); }
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
  void run_schedule(MpiGroup& g, const Signature& sig, Algorithm algo, uint64_t call, const Schedule& s,
                    std::byte* buf);
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

}  // namespace ranksim::runtime::detail

#endif  // RANKSIM_HAVE_MPI

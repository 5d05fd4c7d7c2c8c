// Backend: the seam between the torch.distributed-style API (runtime/distributed/distributed.h) and what
// executes it — the SimBackend (fibers, virtual time; runtime/distributed/backends/sim) or one MPI process per
// rank (MpiBackend, runtime/distributed/backends/mpi).
//
// distributed.cpp validates arguments, builds a Signature and the rank's typed tensors
// (runtime/distributed/backends/request.h) and hands them to Backend::current(), the backend of
// the run executing the calling rank: the context of the sim::Engine running the calling fiber.
// The backend's launcher (runtime/distributed/backends/registry.h) installs it: the SimBackend for
// a sim run, the MpiBackend (on a one-fiber engine) for a run under mpirun. The same user code
// therefore runs on either, unchanged.
//
// Both backends execute the same Schedule (runtime/distributed/schedule.h) with the same reduce kernels, and
// set up and read back each rank's working buffer with WorkingBuffer below, so a collective gives
// the same bits on both.
//
// Groups and works belong to the backend that made them: a ProcessGroup of one run used in
// another is an Error (distributed.cpp checks GroupState::owner). Not thread-safe: a backend runs
// on the thread of its engine.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/distributed/backends/request.h"
#include "runtime/distributed/run_report.h"
#include "runtime/distributed/schedule.h"
#include "runtime/tensor/tensor.h"
#include "sim/time.h"

namespace ranksim::runtime::detail {

// One rank's handle on an operation. Backends derive their own state from it.
struct WorkState {
  virtual ~WorkState() = default;
  int owner = -1;        // global rank whose Work this is
  bool matched = false;  // the operation has completed (sim: matched and timed; mpi: done)
  sim::Time done;        // completion time on the backend's clock
  std::exception_ptr error;
  // Set once the owner has seen the completion (wait() returned or threw the error,
  // is_completed() answered true): from then on the pending writes of this Work on its outputs
  // are satisfied without a backend, so the outputs read as plain tensors anywhere.
  bool observed = false;
  bool owner_waiting = false;             // sim: the owner is blocked in wait()
  int group = -1;                         // sim: the id of the group it runs on (comm by group)
  sim::Time posted;                       // sim: when its owner posted it (time in flight by group)
  std::function<std::string()> describe;  // for deadlock reports and errors
};

// A process group as every backend sees it; backends derive their own state from it.
struct GroupState {
  virtual ~GroupState() = default;
  const void* owner = nullptr;  // the backend that made it
  int id = 0;
  std::string name;
  std::vector<int> ranks;     // global, ascending
  std::vector<int> index_of;  // global rank -> group index, -1 outside
  std::vector<int> node_of;   // node of each member (from the run's topology)
  int nodes = 1;
  bool equal_per_node = true;
  int max_per_node = 1;                        // most members on one node
  Algorithm algorithm = Algorithm::automatic;  // ProcessGroup::set_algorithm
};

// Fills the node layout of g (node_of, nodes, equal_per_node, max_per_node) from each member's node.
void set_node_layout(GroupState& g, const std::function<int(int global_rank)>& node_of_rank);

// The algorithm a collective asks for: the call's choice, else the group's, else the run's
// default (possibly automatic or timing-only). The nccl timing model times this one.
Algorithm requested_algorithm(const GroupState& g, const Signature& sig, Algorithm run_default);
// The algorithm whose schedule moves a collective's data: the requested one, or
// choose_algorithm() by size and node layout when that is automatic or timing-only (nvls, ...).
// Both backends resolve it the same way.
Algorithm resolve_algorithm(const GroupState& g, const Signature& sig, Algorithm run_default);

// The ScheduleRequest of a collective on g (all_to_all splits left for the caller to fill).
ScheduleRequest schedule_request(const GroupState& g, const Signature& sig, Algorithm algorithm);

// The record of a collective (runtime/distributed/run_report.h) without its times: what nccl-tests would call
// its size. req is the collective's ScheduleRequest (its splits for all_to_all).
CollectiveRecord collective_record(const GroupState& g, const Signature& sig, Algorithm algorithm, uint64_t call,
                                   const ScheduleRequest& req);

// all_to_all: throws Error unless column j of req.splits (what each rank sends group rank j)
// equals rank j's output splits.
void check_splits(const GroupState& g, uint64_t call, const ScheduleRequest& req, int j, const SplitSizes& out_splits);

// Schedules by (group, kind, algorithm, count, root, size), so repeated calls skip
// make_schedule(). Bounded: cleared when it grows past 256 entries (sweeps).
class ScheduleCache {
 public:
  // The schedule of req. all_to_all and hierarchical requests carry more than the key: those are
  // built into `local`, which the result then refers to.
  const Schedule& get(int group_id, const ScheduleRequest& req, Schedule& local);

 private:
  std::map<std::tuple<int, int, int, int64_t, int, int>, Schedule> cache_;
};

class Backend {
 public:
  virtual ~Backend();

  // The backend of the run executing the calling rank. Throws Error outside one.
  static Backend& current();
  // nullptr outside a rank.
  static Backend* current_or_null();

  virtual const char* name() const = 0;  // "sim", "mpi"
  virtual int rank() const = 0;          // the calling rank's global rank
  virtual int size() const = 0;          // world size
  virtual sim::Time now() const = 0;     // the calling rank's clock
  virtual bool initialized() const = 0;  // init_process_group() called by this rank
  virtual void set_initialized() = 0;

  virtual std::shared_ptr<GroupState> world_group() = 0;
  // new_group(): the k-th creation of `ranks` (sorted, valid) by this rank is the same group on
  // every rank.
  virtual std::shared_ptr<GroupState> find_or_make_group(const std::vector<int>& ranks) = 0;

  // Posts this rank's part of a collective on g (REQUIRES: arguments validated, g made by this
  // backend, kind_of(tensors) == sig.kind).
  virtual std::shared_ptr<WorkState> post(const std::shared_ptr<GroupState>& g, Signature sig,
                                          CollectiveTensors tensors) = 0;
  // Posts a send of `tensor` to global rank peer (is_send) or a receive into it from peer, on g
  // with the user's tag (REQUIRES: g made by this backend).
  virtual std::shared_ptr<WorkState> post_p2p(bool is_send, const Tensor& tensor, int peer,
                                              const std::shared_ptr<GroupState>& g, int tag) = 0;
  // Blocks until the work completes; rethrows its error.
  virtual void wait(WorkState& work) = 0;
  // True when this backend's collectives work on t's device copy in place (the nccl backend with
  // the CUDA compute device; DeviceCollectives::in_place): the front end then neither downloads
  // t before the call nor marks the host's copy as the one an async call writes.
  virtual bool in_place_on_device(const Tensor& /*t*/) const { return false; }
  virtual bool poll(WorkState& work) = 0;
};

// One group rank's working buffer for a collective (layout: runtime/distributed/schedule.h): set up from
// the rank's tensors, run through the schedule, then written back to the outputs by finish()
// (including AVG's division). Uses the tensor's own storage where the layout allows (all_reduce,
// broadcast, the root of reduce, the output of all_gather), scratch elsewhere, so inputs that
// are not outputs stay untouched.
class WorkingBuffer {
 public:
  // REQUIRES: has_data(tensors), kind_of(tensors) == sig.kind; `index` is the rank's group index
  // in a group of n; buffer_elems is the schedule's buffer_elems (used by all_to_all). tensors
  // must outlive the buffer.
  WorkingBuffer(const Signature& sig, const CollectiveTensors& tensors, int index, int n, int64_t buffer_elems);
  std::byte* data() { return data_; }
  void finish();

 private:
  const Signature& sig_;
  const CollectiveTensors& tensors_;
  int index_, n_;
  std::vector<std::byte> scratch_;
  std::byte* data_ = nullptr;
  int64_t in_total_ = 0;  // all_to_all
};

}  // namespace ranksim::runtime::detail

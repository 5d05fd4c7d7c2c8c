// SimBackend: the sim backend's shared state for one spawn() run — groups, call matching, data
// movement and timing of every collective and point-to-point operation. spawn_sim() runs a
// program on it (runtime/distributed/backends/registry.h).
//
// Matching: each group keeps a call counter per member; the n-th collective a member posts on a
// group joins pending record n. The first poster fixes the signature (op, dtype, element count,
// reduce op, root, algorithm); a later poster that differs fails with an Error naming both ranks
// and both signatures. When the last member posts, the SimBackend, on that member's fiber:
//   1. builds the algorithm's Schedule (cached per shape) and, if the tensors hold data, executes
//      it on the members' buffers (runtime/distributed/execute.h) — one fixed reduction order;
//   2. times it: every rank starts at its post time plus the device's launch overhead. With the
//      topology's collectives.model nccl, the collective model (sim/collective_model.h) gives
//      the call's time from the latest start, for every member (NCCL's ranks finish together),
//      and the schedule is built only when the tensors hold data. With the schedule model, each
//      step's transfers (moves aggregated per source/destination pair) start when both ends are
//      ready and are timed together by the NetworkModel, so flows of one step share links; a
//      rank is ready for the next step when all its transfers of this step have finished;
//   3. completes each member's Work at its own finish time, waking members blocked in wait().
// Point-to-point: sends and recvs queue per (group, src, dst, tag) and match in order; a matched
// pair is one transfer starting when both have posted.
//
// Reductions of 16-bit types are not charged compute time: NCCL fuses them into its copy loops,
// where they overlap the transfers. Concurrent collectives on different groups are timed
// independently (links are shared only among the flows of one collective step).
//
// Not thread-safe: everything runs on the engine's thread.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "runtime/distributed/backends/backend.h"
#include "runtime/distributed/backends/sim/sim_memory.h"
#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn_options.h"
#include "runtime/tensor/cost.h"
#include "sim/collective_model.h"
#include "sim/compute.h"
#include "sim/engine.h"
#include "sim/network.h"
#include "sim/topology.h"

namespace ranksim::runtime::detail {

// One member's post of a pending collective.
struct Arrival {
  bool posted = false;
  sim::Time post;
  CollectiveTensors tensors;
  std::shared_ptr<WorkState> work;
};

// A collective some members have posted: matched against the first poster's signature.
struct Pending {
  Signature sig;
  int first_rank = -1;
  int arrived = 0;
  std::vector<Arrival> arrivals;  // by group index
  int stalled_by = -1;            // a member stopped by an injected fault before it finished: never completes
};

// The SimBackend's groups: call matching state besides what every backend keeps.
struct SimGroup : GroupState {
  std::vector<uint64_t> next_call;  // per member
  int account = -1;                 // its group_desc's index in the comm-by-group accounts; -1: not yet
  std::map<uint64_t, Pending> pending;
};

class SimBackend : public Backend, public CostSink {
 public:
  SimBackend(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm,
             std::optional<sim::Protocol> protocol, int nranks);

  sim::Engine& engine() { return engine_; }

  // Backend
  const char* name() const override { return "sim"; }
  int rank() const override { return engine_.rank(); }
  int size() const override { return nranks_; }
  sim::Time now() const override { return engine_.now(); }
  bool initialized() const override { return initialized_[static_cast<size_t>(rank())] != 0; }
  void set_initialized() override { initialized_[static_cast<size_t>(rank())] = 1; }
  std::shared_ptr<GroupState> world_group() override { return world_; }
  // The k-th creation of `ranks` by the calling rank returns the same group on every rank.
  std::shared_ptr<GroupState> find_or_make_group(const std::vector<int>& ranks) override;
  // Posts this rank's part of a collective; completes it if this rank is the last member.
  std::shared_ptr<WorkState> post(const std::shared_ptr<GroupState>& group, Signature sig,
                                  CollectiveTensors tensors) override;
  std::shared_ptr<WorkState> post_p2p(bool is_send, const Tensor& tensor, int peer,
                                      const std::shared_ptr<GroupState>& group, int tag) override;
  void wait(WorkState& work) override;
  bool poll(WorkState& work) override;

  // CostSink: advances the current rank's clock by the cost of an op (sim::ComputeModel). A GEMM
  // timed in FP8 is followed by its input's quantisation (fp8_quantisation).
  void charge(const OpCost& cost) override;
  GemmPrecision exchange_gemm_precision(GemmPrecision p) override;
  // The memory-bound kernel that quantises an FP8 GEMM's input under TransformerEngine's current
  // scaling ("fp8_cast", bf16): the amax pass reads each value (2 bytes), then the cast reads it
  // again and writes it in FP8 and FP8-transposed (2 + 1 + 1): 6 bytes per value of the forward's
  // activation or the backward's incoming gradient.
  static constexpr double kFp8CastBytesPerElement = 6.0;
  static OpCost fp8_quantisation(const sim::KernelShape& gemm);
  // The ledger that counts the ranks' tensor memory (installed by spawn_sim for the run).
  std::shared_ptr<MemoryLedger> memory() const { return memory_; }
  static std::vector<uint64_t> device_capacities(const sim::Topology& topology, int nranks);

  RunReport take_report();
  // The stragglers and network faults of the run (its rank faults go to the engine).
  void set_faults(const FaultPlan& plan);
  // NCCL_ALGO / NCCL_PROTO lists for the nccl model's choice (SpawnOptions::nccl_allowed), kept
  // narrowed to the run's forced protocol once, not per call.
  void set_nccl_allowed(std::optional<sim::NcclAllowed> allowed) {
    allowed_ = std::move(allowed);
    if (allowed_ && protocol_) allowed_->only(*protocol_);
  }

 private:
  struct P2PPost {
    Tensor tensor;
    sim::Time post;
    std::shared_ptr<WorkState> work;
  };
  using ChannelKey = std::tuple<int, int, int, int>;  // group id, src, dst, tag
  struct Channel {
    std::deque<P2PPost> sends, recvs;
  };

  std::shared_ptr<SimGroup> make_group(std::vector<int> ranks);
  // Times and completes the call; false (and nothing completed) when a member has been stopped
  // by an injected fault before the call would finish: it then stays pending for good.
  bool complete(SimGroup& g, uint64_t call, Pending& p);
  void execute_data(SimGroup& g, Pending& p, const Schedule& s);
  // The nccl model's time for the call (the topology's collectives.model is nccl).
  // network_factor < 1: the network links it crosses are degraded (an injected fault).
  sim::CollectiveEstimate time_nccl(const GroupState& g, const Signature& sig, Algorithm requested,
                                    const CollectiveRecord& rec, double network_factor = 1) const;
  // What the injected network faults do to a call among `ranks` starting at `at`: nothing unless
  // the ranks span nodes; a failed link among those they use (failed), else the slowest factor.
  struct NetworkEffect {
    const FaultPlan::NetworkFault* failed = nullptr;
    double factor = 1;
  };
  NetworkEffect network_effect(const std::vector<int>& ranks, sim::Time at) const;
  double slowdown(int rank, sim::Time at) const;  // a straggler's factor on its kernels
  // Times a schedule's `nsteps` steps, step_at(k) giving step k (a Schedule's, or one made on
  // demand: LazySteps).
  std::vector<sim::Time> time_schedule(const GroupState& g, std::size_t nsteps,
                                       const std::function<const Step&(std::size_t)>& step_at,
                                       const std::vector<sim::Time>& start, size_t elem_size);
  void finish(WorkState& work, sim::Time done);
  void match_p2p(const ChannelKey& key, Channel& ch);

  sim::Engine& engine_;
  const sim::Topology& topology_;
  sim::NetworkModel network_;
  sim::CollectiveModel collective_model_;
  sim::ComputeModel compute_;
  Algorithm default_algorithm_;
  std::optional<sim::Protocol> protocol_;
  std::optional<sim::NcclAllowed> allowed_;
  int nranks_;
  std::vector<char> initialized_;
  std::shared_ptr<SimGroup> world_;
  std::vector<std::shared_ptr<SimGroup>> groups_;
  // Groups by (rank set, occurrence), the occurrence counted per creating member: the k-th
  // creation of a set on every member is the same group. A layout's R ranks may each create
  // all its G groups (torch asks new_group of every rank; new_subgroups_by_enumeration does it),
  // so the sets are interned (one copy each), how often each member created a set is a bit per
  // (set, occurrence, rank), and ranks outside a set share one handle that counts nothing.
  struct RankSetHash {
    std::size_t operator()(const std::vector<int>& v) const noexcept;
  };
  struct RankSet {
    std::vector<std::vector<uint64_t>> created;            // [k] bit r: rank r created it more than k times
    std::vector<std::shared_ptr<SimGroup>> by_occurrence;  // [k]: the group of the k-th creation
    std::shared_ptr<SimGroup> outside;                     // the handle of ranks outside the set
  };
  std::unordered_map<std::vector<int>, RankSet, RankSetHash> sets_;
  std::map<ChannelKey, Channel> channels_;
  ScheduleCache schedules_;
  std::vector<CollectiveRecord> records_;
  std::vector<sim::Time> compute_time_, comm_time_;
  // Blocking communication by the group's description (group_desc_of its name): the
  // descriptions in first-seen order, and each rank's time per description.
  std::vector<std::string> accounts_;
  std::vector<std::vector<sim::Time>> comm_by_account_;
  // Each rank's time its calls were in flight (post to completion), by group id.
  std::vector<std::map<int, sim::Time>> busy_by_group_;
  std::vector<ComputeBreakdown> compute_detail_;
  std::vector<GemmPrecision> gemm_precision_;  // per rank (GemmPrecisionScope)
  // Kernels the profile could not time from measurements, by (class, dtype name, roofline): counted
  // per kernel, worded once in take_report.
  std::map<std::tuple<sim::KernelClass, std::string_view, bool>, int64_t> unmeasured_;
  std::shared_ptr<SimMemory> memory_;
  std::vector<FaultPlan::Straggler> stragglers_;
  std::vector<FaultPlan::NetworkFault> network_faults_;
};

// spawn() on the sim backend: nprocs fibers of a fresh engine sharing one SimBackend.
// REQUIRES: topology has at least nprocs devices.
RunReport spawn_sim(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts,
                    const sim::Topology& topology);

}  // namespace ranksim::runtime::detail

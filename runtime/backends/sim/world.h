// World: the sim backend's shared state for one spawn() run — groups, call matching, data
// movement and timing of every collective and point-to-point operation.
//
// Matching: each group keeps a call counter per member; the n-th collective a member posts on a
// group joins pending record n. The first poster fixes the signature (op, dtype, element count,
// reduce op, root, algorithm); a later poster that differs fails with an Error naming both ranks
// and both signatures. When the last member posts, the World, on that member's fiber:
//   1. builds the algorithm's Schedule (cached per shape) and, if the tensors hold data, executes
//      it on the members' buffers (runtime/execute.h) — one fixed reduction order;
//   2. times it: every rank starts at its post time plus the device's launch overhead; each step's
//      transfers (moves aggregated per source/destination pair) start when both ends are ready
//      and are timed together by the NetworkModel, so flows of one step share links; a rank is
//      ready for the next step when all its transfers of this step have finished;
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
#include <string>
#include <tuple>
#include <vector>

#include "runtime/cost.h"
#include "runtime/distributed.h"
#include "runtime/spawn.h"
#include "sim/compute.h"
#include "sim/engine.h"
#include "sim/network.h"
#include "sim/topology.h"

namespace ranksim::runtime::detail {

struct WorkState {
  int owner = -1;  // global rank whose Work this is
  bool matched = false;
  sim::Time done;
  std::exception_ptr error;
  bool owner_waiting = false;
  // Set once the owner has seen the completion (wait() returned or threw the error,
  // is_completed() answered true): from then on the pending writes of this Work on its outputs
  // are satisfied without a World, so the outputs read as plain tensors anywhere.
  bool observed = false;
  std::function<std::string()> describe;  // for deadlock reports
};

// What every member of a collective must agree on.
struct Signature {
  CollectiveKind kind = CollectiveKind::barrier;
  DType dtype = DType::f32;
  int64_t count = 0;  // elements per rank as make_schedule() counts them
  ReduceOp op = ReduceOp::SUM;
  int root = 0;       // group index
  Algorithm algorithm = Algorithm::automatic;
  std::string shape;  // for messages
  std::string describe() const;
  // Empty when equal; else what differs.
  std::string difference(const Signature& other) const;
};

struct Part {
  bool posted = false;
  sim::Time post;
  bool has_data = false;
  Tensor a, b;                 // per kind: all_reduce/broadcast/reduce (a); gathers: a=out b=in...
  std::vector<Tensor> list;    // gather/scatter lists (root only)
  std::vector<int64_t> in_splits, out_splits;  // all_to_all, in elements
  std::shared_ptr<WorkState> work;
};

struct Pending {
  Signature sig;
  int first_rank = -1;
  int arrived = 0;
  std::vector<Part> parts;
};

struct GroupState {
  int id = 0;
  std::string name;
  std::vector<int> ranks;          // global, ascending
  std::vector<int> index_of;       // global rank -> group index, -1 outside
  std::vector<uint64_t> next_call; // per member
  std::map<uint64_t, Pending> pending;
  std::vector<int> node_of;        // node of each member
  int nodes = 1;
  bool equal_per_node = true;
  Algorithm algorithm = Algorithm::automatic;  // ProcessGroup::set_algorithm
};

class World : public CostSink {
 public:
  World(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm,
        int nranks);

  // The World of the spawn() run executing the calling fiber. Throws Error outside one.
  static World& current();

  sim::Engine& engine() { return engine_; }
  int size() const { return nranks_; }
  int rank() const { return engine_.rank(); }
  char& initialized(int rank) { return initialized_[static_cast<size_t>(rank)]; }

  std::shared_ptr<GroupState> resolve(const ProcessGroup& group);
  std::shared_ptr<GroupState> world_group() { return world_; }
  std::shared_ptr<GroupState> make_group(std::vector<int> ranks);
  // new_group(): the k-th creation of `ranks` by `creator` returns the same group on every rank.
  std::shared_ptr<GroupState> find_or_make_group(int creator, const std::vector<int>& ranks);

  // Posts this rank's part of a collective; completes it if this rank is the last member.
  std::shared_ptr<WorkState> post(const std::shared_ptr<GroupState>& group, Signature sig,
                                  Part part);
  std::shared_ptr<WorkState> post_p2p(bool is_send, const Tensor& tensor, int peer,
                                      const P2POptions& opts);

  void wait(WorkState& work);
  bool poll(WorkState& work);

  // CostSink: advances the current rank's clock by the roofline cost of an op.
  void charge(const OpCost& cost) override;

  RunReport take_report();

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

  void complete(GroupState& g, uint64_t call, Pending& p);
  void execute_data(GroupState& g, Pending& p, const Schedule& s);
  std::vector<sim::Time> time_schedule(const GroupState& g, const Schedule& s,
                                       const std::vector<sim::Time>& start, size_t elem_size);
  void finish(WorkState& w, sim::Time done);
  void match_p2p(const ChannelKey& key, Channel& ch);
  const Schedule& schedule_for(const GroupState& g, const ScheduleRequest& req);

  sim::Engine& engine_;
  const sim::Topology& topology_;
  sim::NetworkModel network_;
  sim::ComputeModel compute_;
  Algorithm default_algorithm_;
  int nranks_;
  std::vector<char> initialized_;
  std::shared_ptr<GroupState> world_;
  std::vector<std::shared_ptr<GroupState>> groups_;
  // (rank set, occurrence) -> group; occurrence counted per creating rank.
  std::map<std::pair<std::vector<int>, int>, std::shared_ptr<GroupState>> registry_;
  std::map<std::pair<int, std::vector<int>>, int> creations_;  // (rank, set) -> times created
  std::map<ChannelKey, Channel> channels_;
  std::map<std::tuple<int, int, int, int64_t, int, int>, Schedule> schedule_cache_;
  std::vector<CollectiveRecord> records_;
  std::vector<sim::Time> compute_time_, comm_time_;
};

}  // namespace ranksim::runtime::detail

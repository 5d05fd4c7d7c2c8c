// NetworkModel: when does each of a set of concurrent point-to-point transfers complete?
//
// The timing contract (collective algorithms and their tests rely on it):
// - A transfer of B > 0 bytes from src to dst (src != dst) injects its bytes from `start` on,
//   along Topology::route(src, dst). While it is active its rate is its max-min fair share of
//   every directional link on the route, among all transfers active on that link at that moment
//   (progressive filling: the most contended link fixes the rate of its transfers, whose
//   bandwidth is then taken out of their other links, and so on). Rates are recomputed whenever
//   a transfer starts or finishes and are constant in between; transfers that finish at the same
//   instant are removed in one step.
// - Latency does not hold bandwidth: the transfer's last byte leaves at instant `drained`, and it
//   completes at drained + route latency. Alone on its links it therefore completes at
//   start + latency + B / bottleneck bandwidth, which is what uncontended() returns.
// - B == 0: completes at start + route latency (an empty message still crosses the network).
// - src == dst: a copy within the device's memory, which reads and writes B bytes:
//   2 * B / memory_bandwidth, no latency, not shared with anything (kernels' own memory traffic
//   is not modelled as a link, so neither is this).
// - Links are full duplex: each direction is its own link with the full bandwidth, so transfers
//   a -> b and b -> a do not slow each other. Links marked non_blocking (a fat tree without
//   oversubscription) never limit anything and are left out of the sharing.
// - Times are integer picoseconds: each finish instant is rounded to the nearest picosecond.
//
// Determinism: no hash maps. Transfers are processed in the order (start, src, dst, bytes,
// index in the input), so results do not depend on the input order (up to ties between identical
// transfers, which get identical times anyway) and are bit-identical from run to run.
//
// Cost: an allocation is max-min fair exactly when every transfer has a bottleneck, a full link
// on which nothing goes faster. At each event (a distinct instant at which transfers start or
// finish) the solver refills only a set of transfers, starting with the new ones and growing it
// until every transfer left out still has its bottleneck; the others keep their rates. The set
// is usually the transfers whose rates really change; at worst it is everything coupled to the
// change through shared links. Links that cannot fill (the bounds of their transfers add up to
// less than their capacity) couple nothing and are skipped. Each pass costs
// O(R * h * log(R * h)) for R refilled transfers over routes of h links, plus the transfers on
// the links they touch; memory is O(transfers * h). A step in which every transfer starts
// together costs one refill, and transfers finishing at the same instant are removed in one
// event, however many there are.
//
// A NetworkModel keeps a pointer to its Topology, which must outlive it. complete() is const and
// keeps its state on the stack: several threads may call it at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sim/time.h"
#include "sim/topology.h"

namespace ranksim::sim {

struct Transfer {
  int src = 0, dst = 0;  // device ids
  uint64_t bytes = 0;
  Time start;
};

// What one complete() call did; for tests and benchmarks of the model's cost.
struct NetworkStats {
  uint64_t events = 0;        // distinct instants at which transfers started or finished
  uint64_t refills = 0;       // progressive-filling passes
  uint64_t refilled = 0;      // transfers refilled, summed over passes
  uint64_t rate_changes = 0;  // transfers whose rate was (re)assigned
};

class NetworkModel {
 public:
  explicit NetworkModel(const Topology& topology);
  explicit NetworkModel(Topology&&) = delete;  // the topology must outlive the model

  // Completion time of each transfer, in input order.
  // REQUIRES: every src and dst is a device of the topology.
  std::vector<Time> complete(std::span<const Transfer> transfers, NetworkStats* stats = nullptr) const;

  // Duration of one transfer alone on the network (the same rules as complete()):
  // route latency + bytes / bottleneck bandwidth, or the local copy time when src == dst.
  Time uncontended(int src, int dst, uint64_t bytes) const;

  const Topology& topology() const { return *topology_; }

 private:
  Time local_copy(int device, uint64_t bytes) const;

  const Topology* topology_;
};

}  // namespace ranksim::sim

// CollectiveModel: how long one NCCL collective takes, following NCCL's own structure.
//
// NCCL runs a collective as several channels at once (rings or trees, each pinned to its own
// NVLink paths and NIC rail), with one of several algorithms and one of three protocols, chosen
// per call as the fastest by its own cost model (src/graph/tuning.cc in NVIDIA/nccl). This model
// has the same parts, written from that structure and its published constants:
//
//   time(algorithm, protocol, S) = latency(algorithm, protocol) + S / algbw(algorithm, protocol, S)
//
// where S is the size nccl-tests prints (bytes per rank for all_reduce and broadcast, the whole
// gathered buffer for all_gather and reduce_scatter, the per-rank send buffer for all_to_all).
//
// Bandwidth. A ring's bus bandwidth is the smaller of the node fabric's (fabric bandwidth x
// fabric_efficiency) and, across nodes, the NICs' (NICs used x NIC bandwidth x
// network_efficiency: each channel crosses between nodes on its own rail, so a ring through
// nodes of p ranks uses min(p, NICs per node) NICs; a group on more nodes than a fat-tree switch
// group holds divides that by the level's oversubscription, its nodes taken as contiguous). The
// algorithm bandwidth is the bus bandwidth
// divided by nccl-tests' bus factor (2(n-1)/n for all_reduce, (n-1)/n for all_gather and
// reduce_scatter, 1 for broadcast and reduce). Protocols: Simple at the full bus bandwidth;
// LL128 at 120/128 of it (NCCL: 0.92); LL at half of it, capped at ll_max_bandwidth (per node count: 1, 2, more). Trees
// (all_reduce: a chain inside each node, double binary trees between nodes) reach 0.92 of the
// link bandwidth and move the data twice (algbw = busbw / 2); on two nodes a node's NICs carry
// each byte once each way, so they count twice; across nodes each of a tree's channels (one per
// NIC used) moves at most tree_channel_bandwidth (LL128: tree_ll128_channel_bandwidth). NVLS reduces inside the
// NVSwitch: algbw = fabric bandwidth x nvls_efficiency / (1 + 1/p) within a node; NVLS+tree adds trees between nodes.
// CollNet (SHARP) reduces in the network switches: between nodes each rank's data crosses once.
// PAT (all_gather, reduce_scatter with one rank per node) runs at 0.75 of a ring's bandwidth with
// logarithmic latency. All-to-all (and gather/scatter) is point-to-point between every pair: the
// bytes that stay in a node go over the fabric at alltoall_efficiency, the rest over the node's
// NICs at network_efficiency; each peer adds NCCL's LL hop latency (peers are served in parallel).
//
// Channels. A large collective uses every channel (`channels`, NCCL_MAX_NCHANNELS); each channel
// carries a sixteenth of the links' bandwidth, so c channels reach min(1, c/16) of it: 16 fill
// the links (NCCL's ring channel count on NVSwitch systems), fewer leave bandwidth unused. NCCL lowers the channel
// count for small calls so that each of its threads has enough bytes: a channel per 32 KiB (Simple), 4 KiB (LL) or 5
// KiB (LL128) of S, at least one.
//
// Latency. A base per algorithm and protocol plus hops: ring all_reduce 2(n-1) steps, all_gather
// and reduce_scatter n-1, 2(N-1) (resp. N-1) of them between nodes (N nodes); tree all_reduce
// 2((p-1) intra hops + log2(N) inter hops). The Simple protocol's hop latencies are the
// topology's intra_latency and inter_latency; LL and LL128 scale them by NCCL's published
// per-protocol ratios (NVLink ring 0.6 / 1.9 / 3.4 us, network ring 2.7 / 4 / 14 us, network tree
// 5 / 8.5 / 14 us for LL / LL128 / Simple). Every call adds call_overhead. Base latencies are
// NCCL's published ones (ring 6.6 / 14 / 8.4 us, tree 6.8 / 14 / 8.4 us, PAT 8 us), except that
// rings, trees and point-to-point on Simple start from the topology's simple_latency (by default
// NCCL's 8.4 us).
//
// Pipelining across nodes. NCCL's latency is the first chunk's path; what it leaves out is the
// host proxy that moves every chunk through the network. A ring runs in loops of one chunk per
// rank and channel (NCCL's chunk: a Simple step of 512 KiB x 4, an LL128 step of 576,000 bytes,
// an LL step of 32 KiB) and each rank runs its steps in order, so across nodes each step of the
// first loop waits net_overhead on the ranks that receive from the network: nsteps x
// net_overhead more (the later loops' waits overlap the transfers: each connection's NCCL_STEPS
// buffers hold their chunks while the proxy posts). A broadcast or reduce chain waits nsteps +
// loops - 1 times (its loops of one step a channel follow each other down it). A tree's chunks
// (one step each; LL128 halves them for small calls as NCCL does) wait net_overhead each until
// its pipeline holds NCCL_STEPS (8) chunks per level of its depth, after which the waits overlap
// the transfers.
//
// Selection: the (algorithm, protocol) with the least predicted time among those that apply
// (ties to the earlier in enum order); a forced algorithm or protocol, or NCCL_ALGO / NCCL_PROTO
// lists (sim/nccl_env.h), restrict the choice, and nothing allowed that can serve the call is an
// Error naming why. A topology with a tuner config (`collectives.tuner`) chooses first as that
// tuner plugin would.
//
// Pure functions of the topology's constants and the call's shape: deterministic, thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/collective_shape.h"
#include "sim/nccl_env.h"
#include "sim/time.h"
#include "sim/topology.h"

namespace ranksim::sim {

// Parses NCCL_PROTO's names, case-insensitive; nullopt for anything else.
std::optional<Protocol> parse_protocol(std::string_view name);

// nccl-tests' bus bandwidth factor (busbw = algbw x factor): 2(n-1)/n for all_reduce, (n-1)/n
// for all_gather, reduce_scatter, all_to_all, gather and scatter, 1 for broadcast and reduce.
double bus_factor(CollOp op, int nranks);

// Seconds each peer on another node adds to a point-to-point call: the constants' peer_latency,
// or where unset NCCL's network ring LL hop (2.7 us) scaled as inter_latency is (by
// inter_latency / 14 us, NCCL's network ring Simple hop).
double peer_cost(const CollectiveTiming& c);

// Seconds an LL step or chunk across nodes waits on the proxy: the constants' ll_net_overhead, or
// where unset their net_overhead.
double ll_net_wait(const CollectiveTiming& c);

struct CollectiveEstimate {
  CollAlgo algorithm = CollAlgo::ring;
  Protocol protocol = Protocol::simple;
  int channels = 1;  // channels used at this size
  // Set by the topology's tuner config (sim/tuner_config.h): its line whose rule chose the
  // algorithm and protocol, and the channels it gives the call (0: the model's count); 0 and 0
  // when NCCL's cost model chose.
  int tuner_line = 0;
  int tuner_channels = 0;
  double latency = 0;  // seconds
  double algbw = 0;    // bytes/s (S / algbw is the bandwidth term)
  double seconds = 0;  // latency + S / algbw
};

// The shape of a call on the first `nranks` devices of the topology (as nccl-tests and `ranksim
// bench collectives` place their ranks), bytes left 0.
CollectiveShape first_devices_shape(const Topology& topology, CollOp op, int nranks);

// What one GPU's NICs move each way (bytes/s): its share of the node's NICs, at least one; 0
// without a network.
double gpu_network_bandwidth(const Topology& topology);

// NCCL's channels for a point-to-point peer on another node: at least one a NIC of the GPU's,
// and as many as its NICs' bandwidth needs at 14 GB/s each (NCCL_P2P_PER_CHANNEL_NET_BW), to the
// next power of two (src/graph/paths.cc). 0 without a network.
int p2p_network_channels(const Topology& topology);

class CollectiveModel {
 public:
  // The constants are the topology's (Topology::collectives()); the model keeps a copy of what
  // it needs, so the topology need not outlive it.
  explicit CollectiveModel(const Topology& topology);
  CollectiveModel(const Topology& topology, const CollectiveTiming& constants);

  // The estimate for one algorithm and protocol, or nullopt when they cannot serve the call
  // (with the reason in *why, when given).
  // max_channels > 0 replaces the topology's channel count (a tuner rule's channels).
  std::optional<CollectiveEstimate> estimate(const CollectiveShape& shape, CollAlgo algo, Protocol proto,
                                             std::string* why = nullptr, int max_channels = 0) const;
  // Every (algorithm, protocol) that can serve the call, in enum order.
  std::vector<CollectiveEstimate> candidates(const CollectiveShape& shape) const;
  // The topology's tuner config's choice where one of its rules applies (the first whose
  // algorithm and protocol can serve the call and are allowed), else the fastest; restricted to
  // the forced algorithm and/or protocol. Throws Error when nothing can serve the call, naming
  // the forced choice and why.
  CollectiveEstimate choose(const CollectiveShape& shape, std::optional<CollAlgo> algo = std::nullopt,
                            std::optional<Protocol> proto = std::nullopt) const;
  // The same among what NCCL_ALGO / NCCL_PROTO allow (sim/nccl_env.h): a tuner rule whose pair
  // they exclude is passed over, and nothing they allow that can serve the call is an Error
  // naming them and why, as NCCL 2.24 and later refuse it (no fall back to the ring).
  CollectiveEstimate choose(const CollectiveShape& shape, const NcclAllowed& allowed) const;

  const CollectiveTiming& constants() const { return c_; }

 private:
  // The fastest pair `allowed` lets through (after the tuner's rules); `forced` names the
  // restriction in the Error when none can serve the call.
  CollectiveEstimate choose_among(const CollectiveShape& shape, const std::function<bool(CollAlgo, Protocol)>& allowed,
                                  const std::string& forced) const;

  CollectiveTiming c_;
  double fabric_bw_ = 0;  // per device, each direction (0: no fabric)
  // [p]: what each of a group's p devices of one node (local devices 0..p-1) can send to the
  // group's others at once, each direction, the least among them. A switch gives every device its
  // whole port whatever p; links (ring, mesh, a list) give only those joining the group's
  // devices: two GPUs of a four-GPU NVLink mesh share one pair's links, a third of each GPU's.
  std::vector<double> group_fabric_bw_;
  double nic_bw_ = 0;  // per NIC
  int nics_per_node_ = 0;
  int p2p_net_channels_ = 0;  // p2p_network_channels()
  bool sharp_ = false;        // in-network reduction (CollNet)
  // Per fat-tree level below the top: nodes under one of its switch groups, and its
  // oversubscription (a group spanning more nodes crosses the level's uplinks).
  std::vector<std::pair<long long, double>> levels_;
  bool switched_ = false;  // NVSwitch-like fabric (NVLS needs one)
};

}  // namespace ranksim::sim

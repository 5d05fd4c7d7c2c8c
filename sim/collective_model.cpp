#include "sim/collective_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "sim/check.h"
#include "sim/error.h"
#include "sim/text.h"
#include "sim/tuner_config.h"

namespace ranksim::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kUs = 1e-6;

// NCCL's published constants (src/graph/tuning.cc), indexed by protocol LL, LL128, Simple.
// Base latencies (us); Simple's 8.4 is simple_latency's default, the topology may change it.
constexpr std::array<double, 3> kBaseRing{6.6, 14.0, 8.4};
constexpr std::array<double, 3> kBaseTree{6.8, 14.0, 8.4};
constexpr double kBasePat = 8.0;
// Per-hop hardware latencies (us): NVLink ring and tree, NVLS, CollNet direct; network ring and
// tree, NVLS tree. The model scales the NVLink ones by intra_latency / 3.4 us (NVLink ring
// Simple) and the network ones by inter_latency / 14 us (network ring Simple).
constexpr std::array<double, 3> kNvlRing{0.6, 1.9, 3.4};
constexpr std::array<double, 3> kNvlTree{0.6, 1.25, 4.0};
constexpr double kNvlCollnet = 3.7;
constexpr std::array<double, 3> kNetRing{2.7, 4.0, 14.0};
constexpr std::array<double, 3> kNetTree{5.0, 8.5, 14.0};
constexpr double kNetNvlsTree = 20.9;
constexpr double kNvlRef = 3.4, kNetRef = 14.0;
// Bytes of S per channel below which NCCL drops a channel: threads per channel x bytes per thread.
constexpr std::array<double, 3> kChannelBytes{512.0 * 8, 640.0 * 8, 512.0 * 64};
// Data bytes of one pipeline step per channel (NCCL's default buffers split in NCCL_STEPS = 8):
// LL 512 KiB of 16-byte lines, half of them flags; LL128 4.6875 MiB, 120 of every 128 bytes
// data. Simple's is the topology's buffer_size (NCCL_BUFFSIZE, 4 MiB by default) / 8.
constexpr std::array<double, 2> kLowLatencyStepBytes{32768.0, 576000.0};

size_t pi(Protocol p) { return static_cast<size_t>(p); }

double step_bytes(Protocol proto, const CollectiveTiming& c) {
  return proto == Protocol::simple ? static_cast<double>(c.buffer_size) / 8 : kLowLatencyStepBytes[pi(proto)];
}

// What a step or chunk across nodes waits on the proxy: LL's own wait when the topology sets one.
double net_wait(const CollectiveTiming& c, Protocol proto) {
  return proto == Protocol::ll ? ll_net_wait(c) : c.net_overhead.seconds();
}

int log2_floor(int v) {
  int r = 0;
  while (v > 1) {
    v >>= 1;
    ++r;
  }
  return r;
}

bool is_reduce_gather(CollOp op) { return op == CollOp::all_gather || op == CollOp::reduce_scatter; }

int log2_ceil(int v) {
  int r = 0;
  while ((1 << r) < v) ++r;
  return r;
}

// The chunks of a tree's pipeline that wait on the network. NCCL cuts a channel's share of S into
// chunks of one step (LL128: halved, down to 128 and then 32 KiB, while a channel would hold
// fewer than 64 and 16 chunks per (1 + log2 N + ppn / 10) / ppn, ppn the ranks per node). Each
// level of the tree holds NCCL_STEPS (8) chunks in flight: until the pipeline is that full, each
// chunk waits on the proxy; after that the waits overlap the transfers.
double tree_waits(double bytes, int channels, int depth, Protocol proto, int nodes, int ppn, double step) {
  double chunk = step;
  const double per_channel = bytes / channels;
  if (proto == Protocol::ll128) {
    const double steps = (1 + log2_floor(nodes) + 0.1 * ppn) / ppn;
    while (per_channel / chunk < steps * 64 && chunk > 131072) chunk /= 2;
    while (per_channel / chunk < steps * 16 && chunk > 32768) chunk /= 2;
  }
  return std::clamp(std::ceil(per_channel / chunk), 1.0, 8.0 * depth);
}

// The chunks of an NVLS tree's pipeline that wait on the network. Each of its channels splits its
// share among the node's NVLS heads (one per local rank), each head sending its own chunks
// through the network. NCCL's chunk is the smaller of NCCL_NVLS_CHUNKSIZE and
// NCCL_NVLSTREE_MAX_CHUNKSIZE (unset: 64 KiB from four nodes, else the former), cut to 256, 128,
// 64 and 32 KiB while the call holds fewer than 32, 16, 4 and 1 chunks per channel and head
// (src/enqueue.cc, calcCollChunking). As in a tree, each level holds NCCL_STEPS (8) in flight.
double nvls_tree_waits(double bytes, int channels, int heads, int nodes, const CollectiveTiming& c) {
  double chunk = static_cast<double>(c.nvls_chunk_size);
  const double max_chunk = c.nvls_tree_max_chunk_size > 0 ? static_cast<double>(c.nvls_tree_max_chunk_size)
                           : nodes >= 4                   ? 65536.0
                                                          : chunk;
  chunk = std::min(chunk, max_chunk);
  const double ops = static_cast<double>(channels) * heads;
  for (const auto& [calls, size] : {std::pair{32.0, 262144.0}, {16.0, 131072.0}, {4.0, 65536.0}, {1.0, 32768.0}})
    if (bytes < calls * ops * chunk && chunk > size) chunk = size;
  return std::clamp(std::ceil(bytes / (ops * chunk)), 1.0, 8.0 * log2_ceil(nodes));
}

// The network messages NCCL cuts one peer's bytes of a point-to-point call into: chunks of
// NCCL_P2P_NET_CHUNKSIZE (at most an eighth of the Simple buffer), halved below 8 chunks' worth
// and quartered below one (src/enqueue.cc, addP2pToPlan).
double p2p_messages(double bytes, const CollectiveTiming& c) {
  double chunk = static_cast<double>(std::min(c.p2p_chunk_size, c.buffer_size / 8));
  if (bytes < chunk)
    chunk /= 4;
  else if (bytes < 8 * chunk)
    chunk /= 2;
  return std::max(1.0, std::ceil(bytes / chunk));
}

}  // namespace

double bus_factor(CollOp op, int n) {
  switch (op) {
    case CollOp::all_reduce:
      return 2.0 * (n - 1) / n;
    case CollOp::all_gather:
    case CollOp::reduce_scatter:
    case CollOp::all_to_all:
    case CollOp::gather:
    case CollOp::scatter:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

double peer_cost(const CollectiveTiming& c) {
  return c.peer_latency > Time::zero() ? c.peer_latency.seconds() : c.inter_latency.seconds() * kNetRing[0] / kNetRef;
}

double ll_net_wait(const CollectiveTiming& c) {
  return c.ll_net_overhead > Time::zero() ? c.ll_net_overhead.seconds() : c.net_overhead.seconds();
}

CollectiveShape first_devices_shape(const Topology& topology, CollOp op, int nranks) {
  const int dpn = topology.devices_per_node();
  CollectiveShape s;
  s.op = op;
  s.nranks = nranks;
  s.nodes = (nranks + dpn - 1) / dpn;
  s.ranks_per_node = std::min(nranks, dpn);
  return s;
}

std::optional<Protocol> parse_protocol(std::string_view name) {
  const std::string s = ascii_lower(name);
  if (s == "ll") return Protocol::ll;
  if (s == "ll128") return Protocol::ll128;
  if (s == "simple") return Protocol::simple;
  return std::nullopt;
}

namespace {
int nics_per_gpu(const Topology& topology) {
  return std::max(1, topology.nics_per_node() / std::max(1, topology.devices_per_node()));
}
}  // namespace

double gpu_network_bandwidth(const Topology& topology) {
  return topology.has_network() ? nics_per_gpu(topology) * topology.network().nic_bandwidth : 0.0;
}

int p2p_network_channels(const Topology& topology) {
  if (!topology.has_network()) return 0;
  const double gpu_net_gbps = gpu_network_bandwidth(topology) / 1e9;
  const int need = std::max(nics_per_gpu(topology), static_cast<int>(std::ceil(gpu_net_gbps / 14.0 - 1e-9)));
  int channels = 1;
  while (channels < need) channels *= 2;
  return channels;
}

CollectiveModel::CollectiveModel(const Topology& topology) : CollectiveModel(topology, topology.collectives()) {}

CollectiveModel::CollectiveModel(const Topology& topology, const CollectiveTiming& constants) : c_(constants) {
  const Fabric& f = topology.fabric();
  switched_ = f.type == FabricType::switched;
  if (f.type == FabricType::switched) {
    fabric_bw_ = f.bandwidth;
  } else if (f.type != FabricType::none) {
    // Explicit links: what local device 0 can send on all its links at once.
    for (const Fabric::LocalLink& l : f.links)
      if (l.a == 0 || l.b == 0) fabric_bw_ += l.bandwidth;
  }
  const int devices = topology.devices_per_node();
  group_fabric_bw_.assign(static_cast<size_t>(devices) + 1, fabric_bw_);
  if (!switched_ && f.type != FabricType::none) {
    for (int p = 2; p <= devices; ++p) {
      std::vector<double> out(static_cast<size_t>(p), 0.0);
      for (const Fabric::LocalLink& l : f.links) {
        if (l.a >= p || l.b >= p || l.a == l.b) continue;
        out[static_cast<size_t>(l.a)] += l.bandwidth;
        out[static_cast<size_t>(l.b)] += l.bandwidth;
      }
      const double least = *std::min_element(out.begin(), out.end());
      // A group whose devices are not all linked to each other moves what device 0's links
      // carry, as before this distinction (the model has no PCIe path).
      group_fabric_bw_[static_cast<size_t>(p)] = least > 0 ? least : fabric_bw_;
    }
  }
  if (topology.has_network()) {
    nic_bw_ = topology.network().nic_bandwidth;
    nics_per_node_ = topology.nics_per_node();
    p2p_net_channels_ = p2p_network_channels(topology);
    sharp_ = topology.network().sharp;
    long long nodes_below = 1;
    const std::vector<FatTreeLevel>& lv = topology.network().levels;
    for (size_t i = 0; i + 1 < lv.size(); ++i) {
      nodes_below *= std::max(1, lv[i].children);
      levels_.emplace_back(nodes_below, lv[i].oversubscription);
    }
  }
}

std::optional<CollectiveEstimate> CollectiveModel::estimate(const CollectiveShape& s, CollAlgo algo, Protocol proto,
                                                            std::string* why, int max_channels) const {
  auto no = [&](const std::string& reason) -> std::optional<CollectiveEstimate> {
    if (why) *why = reason;
    return std::nullopt;
  };
  const int n = s.nranks, N = s.nodes, p = s.ranks_per_node;
  RANKSIM_CHECK(n >= 1 && N >= 1 && p >= 1 && s.bytes >= 0, "collective shape out of range");
  const bool all_reduce = s.op == CollOp::all_reduce;
  const bool p2p = s.op == CollOp::all_to_all || s.op == CollOp::gather || s.op == CollOp::scatter;

  CollectiveEstimate e;
  e.algorithm = algo;
  e.protocol = proto;
  // NCCL's base latency of an algorithm on a protocol; on Simple, the topology's simple_latency
  // (NCCL's 8.4 us for rings and trees alike).
  auto base_latency = [&](const std::array<double, 3>& bases, Protocol q) {
    return q == Protocol::simple ? c_.simple_latency.seconds() : bases[pi(q)] * kUs;
  };
  if (n == 1) {  // nothing to move; NCCL returns after its launch
    if (algo != (p2p ? CollAlgo::direct : CollAlgo::ring)) return no("a one-rank group only runs its trivial case");
    e.channels = 0;
    e.algbw = kInf;
    return e;
  }

  // What the channels can move, and how many a call of this size uses.
  const double intra_scale = c_.intra_latency.seconds() / (kNvlRef * kUs);
  const double inter_scale = c_.inter_latency.seconds() / (kNetRef * kUs);
  const int nics_used = std::min(p, std::max(1, nics_per_node_));
  // A group on more nodes than a switch group holds crosses that level's uplinks, which carry
  // 1 / oversubscription of what the NICs below can send (the group's nodes taken as contiguous).
  double oversubscription = 1;
  for (const auto& [nodes_below, over] : levels_)
    if (N > nodes_below) oversubscription = std::max(oversubscription, over);
  // A node's NICs as the group uses them; a ring's or tree's channels move at most
  // channel_network_bandwidth each through them.
  const int C = std::max(1, max_channels > 0 ? max_channels : c_.channels);
  const double nic_line = N > 1 ? nics_used * nic_bw_ * s.network_factor / oversubscription : kInf;
  double nic_node = nic_line;
  if (N > 1 && c_.channel_network_bandwidth > 0) nic_node = std::min(nic_node, C * c_.channel_network_bandwidth);
  // Inside a node: the fabric joining the group's devices, or the NICs when the node has none.
  const double group_fabric =
      group_fabric_bw_[static_cast<size_t>(std::clamp(p, 1, static_cast<int>(group_fabric_bw_.size()) - 1))];
  const double fabric = group_fabric > 0 ? group_fabric : nic_bw_;
  // A ring on LL needs n times the bytes per thread before NCCL adds a channel (its LL ring
  // threshold is multiplied by the ranks: src/graph/tuning.cc).
  const double channel_bytes = kChannelBytes[pi(proto)] * (algo == CollAlgo::ring && proto == Protocol::ll ? n : 1);
  const int used = std::clamp(static_cast<int>(s.bytes / channel_bytes), 1, C);
  e.channels = used;
  // Each channel moves a sixteenth of what 16 channels (NCCL's ring channel count on NVSwitch
  // systems) move: fewer leave bandwidth unused. Over NVLink more channels (NCCL_MIN_CTAS) move
  // more, as in NCCL's own model, up to the links' rate; through the NICs they add only what the
  // channel cap above allows.
  const double share = std::min(1.0, used / 16.0);
  // NCCL's per-node-count constants: groups on 1, 2 and more nodes.
  const size_t nodes_index = static_cast<size_t>(std::min(N, 3) - 1);
  const double ll_max = c_.ll_max_bandwidth[nodes_index];
  const double fabric_bus = p > 1 ? std::min(fabric * c_.fabric_efficiency * used / 16.0, fabric) : kInf;
  const double network_bus = N > 1 ? nic_node * c_.network_efficiency * share : kInf;
  const double ring_bus = std::min(fabric_bus, network_bus);
  const double intra_hop = (algo == CollAlgo::tree ? kNvlTree : kNvlRing)[pi(proto)] * intra_scale * kUs;
  const double inter_hop = kNetTree[pi(proto)] * inter_scale * kUs;  // a tree's network hop

  double algbw = 0;
  switch (algo) {
    case CollAlgo::ring: {
      if (p2p) return no("all_to_all, gather and scatter are point-to-point in NCCL (use direct)");
      double bus = ring_bus;
      // An all_gather or reduce_scatter ring moves a loop's n - 1 steps over NVLink in the time of
      // n - 1 + ring_loop_gap, where an all_reduce, which joins its reduce-scatter half to its
      // all-gather half inside each loop, loses nothing: so the fewer the ranks, the larger the
      // share lost.
      if (c_.ring_loop_gap > 0 && is_reduce_gather(s.op))
        bus = std::min(fabric_bus * (n - 1) / (n - 1 + c_.ring_loop_gap), network_bus);
      if (proto == Protocol::ll) bus = std::min(bus * 0.5, ll_max);
      if (proto == Protocol::ll128) bus *= 0.92;
      algbw = bus / bus_factor(s.op, n);
      const int nsteps = all_reduce ? 2 * (n - 1) : n - 1;
      const int inter = N == 1 ? 0 : all_reduce ? 2 * (N - 1) : N - 1;
      // NCCL's latency: the first chunk's path round the ring, its NVLink hops. The steps that
      // cross the network are paced by the waits below, as every step across nodes is.
      e.latency = base_latency(kBaseRing, proto) + (nsteps - inter) * intra_hop;
      // Across nodes, each step waits for its chunk to come through the network's host proxy;
      // each rank runs its steps in order, so the ring's first loop is paced by them. With two
      // or more ranks on a node a rank's step passes one proxy (the rank that receives from the
      // network, or the one that sends to it); with one rank a node it passes two, its own
      // receive and its own send. A loop moves one chunk per rank and channel (all_reduce,
      // all_gather, reduce_scatter); once the first has gone round, the NCCL_STEPS buffers of
      // each connection hold the next loops' chunks while the proxy posts the earlier ones, so
      // their waits overlap the transfers and only the first loop's are exposed. A broadcast or
      // reduce is a chain: a loop moves one step per channel, which each rank forwards once, so
      // the loops follow each other down the chain, the first reaching its end in nsteps steps
      // and each further one a step after it.
      if (N > 1) {
        const bool per_rank = all_reduce || is_reduce_gather(s.op);
        double waits = nsteps;
        if (!per_rank) {
          const double loop = used * step_bytes(proto, c_);
          waits += std::max(1.0, std::ceil(s.bytes / loop)) - 1;
        }
        e.latency += waits * (p == 1 ? 2 : 1) * net_wait(c_, proto);
      }
      break;
    }
    case CollAlgo::tree: {
      if (!all_reduce) return no("NCCL's trees serve all_reduce only");
      // Through the NICs a tree of more than two nodes moves 2S a node each way, as a ring does.
      // On two nodes each node roots one of the two trees and is a leaf of the other: its NICs
      // carry S each way, and the tree's bus bandwidth reaches up to twice theirs (NCCL's search
      // raises a two-node tree's intra-node bandwidth to below twice its network's).
      double bus = std::min(fabric_bus, N == 2 ? 2 * network_bus : network_bus) * 0.92;
      // Across nodes each channel is capped (NCCL's measured per-channel maximum); a node's tree
      // has a channel per NIC it uses, as NCCL's search makes them.
      const double tree_channels = N > 1 ? nics_used * share : kInf;
      bus = std::min(bus, tree_channels * c_.tree_channel_bandwidth[nodes_index]);
      if (proto == Protocol::ll) bus = std::min(bus / 3.8, ll_max);
      if (proto == Protocol::ll128)
        bus = std::min(bus * (N == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                       tree_channels * c_.tree_ll128_channel_bandwidth[nodes_index]);
      algbw = bus * 0.5;
      e.latency = base_latency(kBaseTree, proto) + 2 * ((p - 1) * intra_hop + log2_floor(N) * inter_hop);
      // Across nodes, each chunk waits for the network's host proxy, as a ring's steps do.
      if (N > 1)
        e.latency +=
            tree_waits(s.bytes, used, p - 1 + log2_ceil(N), proto, N, p, step_bytes(proto, c_)) * net_wait(c_, proto);
      break;
    }
    case CollAlgo::nvls:
    case CollAlgo::nvls_tree: {
      if (!all_reduce) return no("NVLS is modelled for all_reduce only");
      if (!c_.nvls || !switched_) return no("the topology has no NVLS (collectives.nvls: true on a switched fabric)");
      if (proto != Protocol::simple) return no("NVLS runs the Simple protocol only");
      if (p < 2) return no("NVLS needs at least two ranks on a node");
      const bool tree = algo == CollAlgo::nvls_tree;
      if (!tree && N > 1) return no("NVLS spans one node; across nodes NCCL uses nvls_tree");
      if (tree && N == 1) return no("nvls_tree joins several nodes; within one node NCCL uses nvls");
      // Each GPU's link carries S (1 + 1/p) of an all_reduce of S: its S into the switch's
      // reductions, the S/p it reduces back, and out again as S/p multicast, the others' (p-1)S/p in.
      algbw = fabric_bw_ * (tree ? c_.nvls_tree_share() : c_.nvls_efficiency) / (1.0 + 1.0 / p);
      // Between nodes, NVLS trees move each rank's data once in each direction (twice as much
      // per byte as a ring for more than two nodes, as NCCL's model has it), through the NICs
      // as the rings do or at their own share of the line rate.
      if (tree) {
        const double net = c_.nvls_tree_network_efficiency > 0 ? nic_line * c_.nvls_tree_network_efficiency
                                                               : nic_node * c_.network_efficiency;
        algbw = std::min(algbw, net * (N <= 2 ? 1.0 : 0.5));
      }
      algbw *= share;
      e.latency = c_.nvls_latency.seconds() + (tree ? 2 * log2_floor(N) * kNetNvlsTree * inter_scale * kUs : 0.0);
      if (tree) e.latency += nvls_tree_waits(s.bytes, used, p, N, c_) * c_.net_overhead.seconds();
      break;
    }
    case CollAlgo::collnet: {
      if (!all_reduce) return no("CollNet is modelled for all_reduce only");
      if (!sharp_) return no("the network has no in-network reduction (network.sharp: true)");
      if (N == 1) return no("CollNet reduces between nodes; the group is on one node");
      if (proto != Protocol::simple) return no("CollNet runs the Simple protocol only");
      // Inside the node a reduce-scatter and an all-gather; between nodes each byte crosses once.
      double bw = nic_node * c_.network_efficiency;
      if (p > 1) bw = std::min(bw, fabric * c_.fabric_efficiency / (2.0 * (p - 1) / p));
      algbw = bw * share;
      e.latency =
          2 * (std::min(1, p - 1) * kNvlCollnet * intra_scale * kUs + (p - 1) * 0.4 * kUs) + c_.sharp_latency.seconds();
      break;
    }
    case CollAlgo::pat: {
      if (!is_reduce_gather(s.op)) return no("PAT serves all_gather and reduce_scatter only");
      if (p != 1 || N == 1) return no("PAT needs one rank per node");
      if (proto != Protocol::simple) return no("PAT runs the Simple protocol only");
      algbw = ring_bus * 0.75 / bus_factor(s.op, n);
      e.latency = kBasePat * kUs + log2_floor(N) * kNetTree[2] * inter_scale * kUs / 3.5 + n * 2.8 * kUs;
      break;
    }
    case CollAlgo::direct: {
      if (!p2p) return no("direct is NCCL's point-to-point pattern: all_to_all, gather and scatter");
      if (proto == Protocol::ll128) return no("point-to-point runs LL or Simple");
      // Bytes a rank exchanges inside its node and across nodes; a rank's share of the NICs.
      const double intra_bytes = s.bytes * (p - 1) / n, inter_bytes = s.bytes * (n - p) / n;
      const double nic_rank =
          (s.op == CollOp::all_to_all ? nics_used * nic_bw_ / p : nic_bw_) * s.network_factor / oversubscription;
      double t = 0;
      if (intra_bytes > 0) t = std::max(t, intra_bytes / (fabric * c_.alltoall_efficiency));
      if (inter_bytes > 0) {
        t = std::max(t, inter_bytes / (nic_rank * c_.alltoall_network_share()));
        // Each peer on another node gets its S / n through its own channels, at most
        // p2p_channel_network_bandwidth each: with few such peers, less than the NICs.
        if (c_.p2p_channel_network_bandwidth > 0)
          t = std::max(t, s.bytes / n / (p2p_net_channels_ * c_.p2p_channel_network_bandwidth));
      }
      if (proto == Protocol::ll) t *= 2;
      algbw = t > 0 ? s.bytes / t : kInf;
      e.channels = 1;
      // Peers are served in parallel by the channels; each still costs a short setup: the LL
      // hop latency per peer inside the node and peer_latency per peer on another node, one full
      // hop to reach the farthest.
      e.latency = base_latency(kBaseRing, proto) + (p - 1) * kNvlRing[0] * intra_scale * kUs + (n - p) * peer_cost(c_) +
                  (N > 1 ? kNetRing[pi(proto)] * inter_scale * kUs : intra_hop);
      // And each of the messages to those peers passes the proxy in turn.
      if (n > p) e.latency += (n - p) * p2p_messages(s.bytes / n, c_) * c_.message_latency.seconds();
      break;
    }
  }
  e.latency += c_.call_overhead.seconds();
  e.algbw = algbw;
  e.seconds = e.latency + (s.bytes > 0 ? s.bytes / algbw : 0.0);
  return e;
}

std::vector<CollectiveEstimate> CollectiveModel::candidates(const CollectiveShape& s) const {
  std::vector<CollectiveEstimate> out;
  for (int a = 0; a <= static_cast<int>(CollAlgo::direct); ++a)
    for (int q = 0; q <= static_cast<int>(Protocol::simple); ++q)
      if (auto e = estimate(s, static_cast<CollAlgo>(a), static_cast<Protocol>(q))) out.push_back(*e);
  return out;
}

CollectiveEstimate CollectiveModel::choose(const CollectiveShape& s, std::optional<CollAlgo> algo,
                                           std::optional<Protocol> proto) const {
  std::string forced;
  if (algo) forced += std::string("algorithm ") + to_string(*algo);
  if (proto) forced += (forced.empty() ? "" : " with ") + std::string("protocol ") + to_string(*proto);
  return choose_among(
      s, [&](CollAlgo a, Protocol q) { return (!algo || *algo == a) && (!proto || *proto == q); }, forced);
}

CollectiveEstimate CollectiveModel::choose(const CollectiveShape& s, const NcclAllowed& allowed) const {
  return choose_among(
      s, [&](CollAlgo a, Protocol q) { return allowed.allows(s.op, a, q); },
      allowed.restricted() ? "what " + allowed.describe() + " allows" : "");
}

CollectiveEstimate CollectiveModel::choose_among(const CollectiveShape& s,
                                                 const std::function<bool(CollAlgo, Protocol)>& allowed,
                                                 const std::string& forced) const {
  // A tuner plugin sees NCCL's cost table with the pairs NCCL_ALGO / NCCL_PROTO exclude, and
  // those that cannot serve the call, marked ignored; its first rule that applies to a pair
  // still open decides.
  if (c_.tuner)
    for (const TunerRule& r : c_.tuner->rules) {
      if (!r.applies_to(s) || !allowed(r.algorithm, r.protocol)) continue;
      if (auto e = estimate(s, r.algorithm, r.protocol, nullptr, std::max(0, r.channels))) {
        e->tuner_line = r.line;
        e->tuner_channels = std::max(0, r.channels);
        return *e;
      }
    }
  std::optional<CollectiveEstimate> best;
  std::string why;
  for (int a = 0; a <= static_cast<int>(CollAlgo::direct); ++a) {
    for (int q = 0; q <= static_cast<int>(Protocol::simple); ++q) {
      if (!allowed(static_cast<CollAlgo>(a), static_cast<Protocol>(q))) continue;
      std::string reason;
      const auto e = estimate(s, static_cast<CollAlgo>(a), static_cast<Protocol>(q), &reason);
      if (!e) {
        if (why.empty()) why = reason;
        continue;
      }
      if (!best || e->seconds < best->seconds) best = e;
    }
  }
  if (best) return *best;
  if (why.empty()) why = "that leaves this collective no algorithm and protocol";
  throw Error("no NCCL algorithm can run this collective" + (forced.empty() ? "" : " as " + forced) + ": " + why);
}

}  // namespace ranksim::sim

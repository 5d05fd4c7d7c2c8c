// A topology as its file describes it (docs/topology.md): the device kind, the intra-node fabric
// and the inter-node fat tree, with every value checked but nothing laid out as a graph yet.
//
// sim/topology_reader.h reads a TopologySpec from YAML; Topology (sim/topology.h) builds its
// vertices, links and routes from one and keeps the parts that describe the hardware
// (DeviceKind, Fabric, Network) for its callers. Plain values: copyable, no invariants beyond
// those the reader checks.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/kernel_profile.h"
#include "sim/time.h"

namespace ranksim::sim {

struct TunerConfig;  // sim/tuner_config.h

struct DeviceKind {
  std::string name;
  // dtype name ("f64", "f32", "tf32", "bf16", "f16", "fp8", "i8", "i32", "i64") -> FLOP/s.
  std::map<std::string, double, std::less<>> peak_flops;
  double memory_bandwidth = 0;  // bytes/s
  uint64_t memory_bytes = 0;
  Time launch_overhead;  // added to every kernel. Default: 0
  // The measured kernel profile (sim/kernel_profile.h); null: every kernel on the roofline.
  std::shared_ptr<const KernelProfile> profile;
};

enum class FabricType : uint8_t { none, switched, ring, mesh, links };

// The intra-node fabric as written (after ring/mesh expansion into explicit links).
struct Fabric {
  FabricType type = FabricType::none;
  std::string name;      // link kind name; Default: the type ("switch", "ring", ...)
  double bandwidth = 0;  // switched: per device per direction; ring/mesh: per link direction
  Time latency;          // switched: device to device through the switch; else per link
  struct LocalLink {
    int a = 0, b = 0;  // local device indices; full duplex
    double bandwidth = 0;
    Time latency;
  };
  std::vector<LocalLink> links;  // ring, mesh, links
};

struct FatTreeLevel {
  std::string name;               // "leaf", "spine", "core"
  int children = 0;               // units of the level below per switch group; 0 = unbounded (top)
  Time latency;                   // one traversal of a switch at this level
  double oversubscription = 1.0;  // down / up bandwidth of a switch group (not on the top level)
  bool rail_optimized = false;    // level 1 only: one group per local device index (rail)
};

enum class Transport : uint8_t { infiniband, roce, efa };

struct Network {
  double nic_bandwidth = 0;          // bytes/s per NIC, each direction
  Time nic_latency;                  // at each end of a transfer (NIC, PCIe, host)
  std::vector<FatTreeLevel> levels;  // bottom (leaf) first
  // NICs per node, each on its own rail (NIC i serves local devices i*d/k .. (i+1)*d/k - 1 for
  // k NICs and d devices). Default: one per device. Used by the nccl collective model; the
  // network graph keeps one NIC link per device (with nic_bandwidth * nics / devices each).
  int nics_per_node = 0;
  Transport transport = Transport::infiniband;
  bool sharp = false;  // in-network reduction (SHARP): NCCL's CollNet algorithms
};

// How collectives are timed (docs/collective-timing.md).
// - schedule: each collective's point-to-point schedule runs on the network graph (sim/network.h):
//   link contention inside a collective, datasheet link speeds, one ring.
// - nccl: NCCL's own structure (sim/collective_model.h): channels, algorithms (ring, tree, NVLS,
//   NVLS+tree, CollNet, PAT) and protocols (LL, LL128, Simple), chosen per call by predicted
//   time, with the constants below (NCCL's published defaults, or fitted by `ranksim calibrate`).
enum class CollectiveTimingModel : uint8_t { schedule, nccl };

struct CollectiveTiming {
  CollectiveTimingModel model = CollectiveTimingModel::schedule;
  int channels = 16;                // channels (rings / trees) a large collective runs at once
  double fabric_efficiency = 0.80;  // share of the fabric bandwidth a ring's bus bandwidth reaches
  // What an all_gather or reduce_scatter ring's loop loses on NVLink, in steps: the fabric's share
  // of its bus bandwidth is (n-1) / (n-1 + this) of fabric_efficiency's (an all_reduce ring's).
  // 0 (the default): nothing.
  double ring_loop_gap = 0;
  double network_efficiency = 0.95;   // share of the NICs' bandwidth a ring's bus bandwidth reaches
  double alltoall_efficiency = 0.80;  // share of the fabric bandwidth all-to-all reaches in a node
  // Share of the NICs' bandwidth all-to-all (NCCL's point-to-point) reaches between nodes; 0 (the
  // default) means network_efficiency. See alltoall_network_share().
  double alltoall_network_efficiency = 0;
  double alltoall_network_share() const {
    return alltoall_network_efficiency > 0 ? alltoall_network_efficiency : network_efficiency;
  }
  // The most network traffic one channel of a ring or tree moves (bytes/s, each direction): a
  // node's NICs carry at most channels x this. 0 (the default): no such limit.
  double channel_network_bandwidth = 0;
  // The most one channel of a point-to-point call (all_to_all, gather, scatter) moves to a peer on
  // another node (bytes/s): a peer's bytes go through NCCL's channels per network peer, at least
  // one a NIC of the GPU's and as many as its NICs need at 14 GB/s each (src/graph/paths.cc), so a
  // call with few peers across nodes may not fill the NICs. 0 (the default): no such limit.
  double p2p_channel_network_bandwidth = 0;
  bool nvls = false;  // NVLink SHARP: reductions inside the NVSwitch
  // NVLS's share of the fabric bandwidth; an all_reduce of S moves S (1 + 1/p) on each GPU's link
  // (0.675: algorithm bandwidth 0.6 of the fabric's on 8 GPUs).
  double nvls_efficiency = 0.675;
  // The same inside an NVLS tree (its reduce-scatter and all-gather halves, the network between
  // them); 0 (the default) means nvls_efficiency. See nvls_tree_share().
  double nvls_tree_efficiency = 0;
  double nvls_tree_share() const { return nvls_tree_efficiency > 0 ? nvls_tree_efficiency : nvls_efficiency; }
  // The share of the NICs' line rate an NVLS tree's network part reaches between nodes; 0 (the
  // default) means the rings': the NICs capped at channels x channel_network_bandwidth, times
  // network_efficiency.
  double nvls_tree_network_efficiency = 0;
  // Cap on LL's bus bandwidth for groups on 1, 2 and more nodes. NCCL's llMaxBws reads the first
  // by GPU (Hopper 141, Ampere 87.7 GB/s) and the others by the hosts' CPU (Intel 39, 20.4; AMD
  // 22.5, 19 GB/s); the default keeps the table's Hopper row, 45 and 35 GB/s across nodes
  // (docs/collective-timing.md, "Changes measured ... and not made").
  std::array<double, 3> ll_max_bandwidth{141e9, 45e9, 35e9};
  // Cap on what one channel of a tree moves across nodes, bus bandwidth, for groups on 1, 2 and
  // more nodes: Simple and LL128 (NCCL's perChMaxTreeBws and perChMaxTreeLL128Bws, Hopper rows:
  // 38.7, 41.4, 36 and 36.7, 36.7, 29 GB/s; Ampere's: 24, 23.6, 17.8 and 20, 20, 20 GB/s). A
  // node's tree has one channel per NIC it uses, as NCCL's search makes them.
  std::array<double, 3> tree_channel_bandwidth{38.7e9, 41.4e9, 36e9};
  std::array<double, 3> tree_ll128_channel_bandwidth{36.7e9, 36.7e9, 29e9};
  // Per-hop latencies of the Simple protocol; LL and LL128 scale them by NCCL's published ratios.
  Time intra_latency = Time::ns(3400);  // one hop inside a node (NCCL's NVLink ring Simple: 3.4 us)
  Time inter_latency = Time::us(14);    // one hop between nodes (NCCL's NET ring Simple: 14 us)
  // The host proxy's cost per network step: a ring that spans nodes pays it on each step of its
  // first loop (the later loops' waits overlap their transfers), a tree on each chunk until its
  // pipeline is full, a broadcast or reduce chain once a step and loop (NCCL's own model charges
  // getNetOverhead, 1 us on Intel hosts and 2 us on AMD, three times for Simple).
  Time net_overhead = Time::us(1);
  // The same wait for a step or chunk on the LL protocol (a few KiB a channel, flags in every
  // line); 0 (the default) means net_overhead. NCCL's own model costs LL's network hop at 2.7 us
  // against Simple's 14: h100-cluster.yaml sets net_overhead x 2.7 / 14.
  Time ll_net_overhead = Time::zero();
  // What each peer on another node adds to a point-to-point call (all_to_all, gather, scatter):
  // its send and receive through the proxies, the peers spread over the channels. 0 (the default)
  // means NCCL's network ring LL hop scaled as inter_latency is: peer_cost() in
  // sim/collective_model.h.
  Time peer_latency = Time::zero();
  // What each network message of a point-to-point call costs the sending GPU's proxy, which posts
  // and completes every message in turn. NCCL cuts each peer's bytes into messages of
  // p2p_chunk_size (see below); 0 (the default): messages cost nothing beyond peer_latency.
  Time message_latency = Time::zero();
  Time nvls_latency = Time::us(25);  // an NVLS reduction inside the switch (NCCL's NVLS: 25 us)
  // The base latency of a ring, tree or point-to-point call on the Simple protocol, before its
  // hops (NCCL's baseLat for ring and tree Simple: 8.4 us). LL and LL128 keep NCCL's bases.
  Time simple_latency = Time::ns(8400);
  Time sharp_latency = Time::us(30);  // one in-network reduction (NCCL's CollNet NET latency)
  // A fixed cost of every call beyond NCCL's latency model (host-side launch and synchronisation
  // of the ranks, one process per GPU). Fitted; default 0.
  Time call_overhead = Time::zero();
  // What one host thread spends per GPU to issue a call grouped over several GPUs (nccl-tests -g
  // G: one process drives G GPUs, launching each one's kernel in turn). Such a run takes at least
  // G x this per call, whatever the GPUs take (~35 us with 8 H100 or A100): a property of how a
  // table was measured, not of the collective, so only `ranksim calibrate` and `ranksim bench
  // collectives -g G` use it. Training runs one process per GPU.
  Time group_launch = Time::ns(4400);
  // A tuner plugin's choices (`tuner`: a file in the CSV of NCCL's example tuner plugin,
  // sim/tuner_config.h); null: NCCL's cost model chooses alone.
  std::shared_ptr<const TunerConfig> tuner;
  // The Simple protocol's buffer per channel and peer (NCCL_BUFFSIZE, 4 MiB by default; AWS's
  // libfabric plugin sets 8 MiB on p4d, p5 and later). NCCL splits it into NCCL_STEPS (8) steps;
  // a Simple ring's chunk is four of them, a tree's one. Across nodes a larger buffer means fewer
  // tree chunks and chain loops, each waiting on the proxy (net_overhead); a ring waits its first
  // loop's steps whatever the buffer.
  uint64_t buffer_size = 4ull << 20;
  // An NVLS tree's chunk (NCCL_NVLS_CHUNKSIZE, 128 KiB by default) and its cap across nodes
  // (NCCL_NVLSTREE_MAX_CHUNKSIZE; 0, the default, means NCCL's own: 64 KiB from four nodes, else
  // nvls_chunk_size). AWS's plugin sets both to 512 KiB on p5. Across nodes each chunk waits on
  // the proxy until the pipeline is full, so smaller chunks cost more waits on mid-size calls.
  uint64_t nvls_chunk_size = 128u << 10;
  uint64_t nvls_tree_max_chunk_size = 0;
  // A point-to-point message across nodes (NCCL_P2P_NET_CHUNKSIZE, 128 KiB by default; AWS's
  // plugin sets 512 KiB on p4d, p5 and later). NCCL halves it for a peer's bytes below 8 of it
  // and quarters it below one.
  uint64_t p2p_chunk_size = 128u << 10;
};

// A topology as written: validated, not yet laid out as a graph.
struct TopologySpec {
  std::string name;
  int num_nodes = 1;
  int devices_per_node = 0;
  std::vector<DeviceKind> kinds;
  int kind_index = 0;  // the nodes' device kind, an index into kinds
  std::string device_label = "dev";
  Fabric fabric;  // ring and mesh expanded into explicit links
  bool has_network = false;
  Network network;  // meaningful when has_network
  CollectiveTiming collectives;
};

}  // namespace ranksim::sim

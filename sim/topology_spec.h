// A topology as its file describes it (docs/topology.md): the device kind, the intra-node fabric
// and the inter-node fat tree, with every value checked but nothing laid out as a graph yet.
//
// sim/topology_reader.h reads a TopologySpec from YAML; Topology (sim/topology.h) builds its
// vertices, links and routes from one and keeps the parts that describe the hardware
// (DeviceKind, Fabric, Network) for its callers. Plain values: copyable, no invariants beyond
// those the reader checks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "sim/time.h"

namespace ranksim::sim {

struct DeviceKind {
  std::string name;
  // dtype name ("f64", "f32", "tf32", "bf16", "f16", "fp8", "i8", "i32", "i64") -> FLOP/s.
  std::map<std::string, double, std::less<>> peak_flops;
  double memory_bandwidth = 0;  // bytes/s
  uint64_t memory_bytes = 0;
  Time launch_overhead;  // added to every kernel. Default: 0
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

struct Network {
  double nic_bandwidth = 0;          // bytes/s per device, each direction
  Time nic_latency;                  // at each end of a transfer (NIC, PCIe, host)
  std::vector<FatTreeLevel> levels;  // bottom (leaf) first
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
};

}  // namespace ranksim::sim

// Topology: the hardware a run is timed on, loaded from YAML (format: docs/topology.md).
//
// A topology is `nodes` identical nodes. Each node holds `devices_per_node` devices of one device
// kind (peak FLOP/s per dtype, memory bandwidth and capacity, kernel launch overhead), joined by
// an intra-node fabric: a switch (NVSwitch), or explicit full-duplex links (a ring, a full mesh,
// or a list). Nodes are joined by an inter-node network: one NIC per device attached to a fat
// tree described level by level (switch groups, their latency and oversubscription).
//
// The topology is a directed graph. Vertices are the devices (ids 0..num_devices-1, node-major:
// device = node * devices_per_node + local_index), then the node switches, then the fat-tree
// switch groups. Links are directional; a physical full-duplex cable is two links, one per
// direction, each with the full bandwidth. Routes are computed, never listed:
// - same node: through the node switch (up, down), or the shortest explicit-link path (least
//   latency, then fewest hops, ties to the path found first from lower device ids); a node
//   without fabric goes out through its NICs like any other node;
// - different nodes: NIC up to the level-1 switch group, up the tree to the lowest common
//   level, down again, NIC down.
// A fat-tree level is modelled as one aggregated switch group per subtree, joined to its parent
// by one up-link and one down-link whose bandwidth is the subtree's aggregate divided by the
// level's oversubscription (Leiserson's fat tree). Fat-tree routes cost O(levels) to compute;
// explicit-link routes come from per-source searches over one node's local graph, done once at
// load time (all nodes share that graph). Memory is linear in the number of devices: no
// all-pairs tables.
//
// Route latency is the sum of its links' latencies; route bandwidth is the smallest link
// bandwidth (+infinity for the empty route from a device to itself).
//
// The hardware as the file describes it (DeviceKind, Fabric, FatTreeLevel, Network) is declared in
// sim/topology_spec.h, included here; Topology keeps those values and adds the graph.
//
// Errors: every problem in the YAML (or in an override) is a ConfigError with the 1-based line
// and column of the offending node, saying what is wrong and what was expected. A missing file
// is an Error naming the path. A Topology is immutable after loading; const methods are safe to
// call from several threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/time.h"
#include "sim/topology_spec.h"

namespace ranksim::sim {

struct Device {
  int id = 0;
  std::string name;  // "node3.gpu5": node index, then the node's device label and local index
  int node = 0;
  int local_index = 0;
  int kind = 0;  // index into Topology::kind()
};

// Links are grouped in kinds for reporting ("nvswitch up", "nic down", "leaf-spine up").
struct LinkKind {
  std::string name;
  std::string description;  // "device -> node switch"
};

struct Link {
  int id = 0;
  int from = 0, to = 0;  // vertex ids
  double bandwidth = 0;  // bytes/s, this direction
  Time latency;
  int kind = 0;  // index into Topology::link_kind()
  // True when the link can never limit a flow: its bandwidth is at least the sum of the
  // bandwidths of every link that can feed it (a fat-tree link without oversubscription). The
  // network model leaves such links out of bandwidth sharing; their presence in a route is
  // still reported.
  bool non_blocking = false;
};

struct Route {
  std::vector<int> links;  // link ids from source to destination
  Time latency;            // sum of the links' latencies
  double bandwidth = 0;    // bottleneck (smallest) link bandwidth; +inf when links is empty
};

class Topology {
 public:
  // Loads a topology file. overrides are "dotted.key=value" strings (e.g. "nodes=128",
  // "network.nic_bandwidth=200 Gb/s", "network.levels.leaf.latency=200 ns": a list element is
  // named by index or by its `name`), applied to the YAML tree before validation.
  // Throws Error (missing or unreadable file) or ConfigError.
  static Topology load_file(const std::string& path, const std::vector<std::string>& overrides = {});
  // The same from text; source_name is used in error messages.
  static Topology parse(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides = {});

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }  // file name or source_name
  int num_nodes() const { return num_nodes_; }
  int devices_per_node() const { return devices_per_node_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  // REQUIRES: 0 <= id < num_devices() (for every method taking a device id).
  const Device& device(int id) const;
  const DeviceKind& kind_of(int device) const;
  int num_kinds() const { return static_cast<int>(kinds_.size()); }
  const DeviceKind& kind(int index) const;
  bool same_node(int a, int b) const;

  const Fabric& fabric() const { return fabric_; }
  bool has_network() const { return has_network_; }
  const Network& network() const { return network_; }  // meaningful when has_network()
  // How collectives are timed, and the constants of the nccl model (sim/collective_model.h).
  const CollectiveTiming& collectives() const { return collectives_; }
  // NICs per node (network().nics_per_node, or one per device when not given).
  int nics_per_node() const { return network_.nics_per_node > 0 ? network_.nics_per_node : devices_per_node_; }

  int num_vertices() const { return num_vertices_; }
  std::string vertex_name(int vertex) const;  // "node0.gpu3", "node0.nvswitch", "leaf2.rail5"
  int num_links() const { return static_cast<int>(links_.size()); }
  const Link& link(int id) const;
  std::string link_name(int id) const;  // "node0.gpu3 -> node0.nvswitch"
  int num_link_kinds() const { return static_cast<int>(link_kinds_.size()); }
  const LinkKind& link_kind(int index) const;

  // The route from src to dst; src == dst gives the empty route.
  Route route(int src, int dst) const;
  // Appends the route's link ids to out (no allocation when out has room); for hot loops.
  void append_route_links(int src, int dst, std::vector<int>& out) const;

 private:
  friend class TopologyBuilder;
  Topology() = default;

  int level1_group(int device) const;
  int group_at(int level, int device) const;  // level >= 1, 1-based as in the YAML order
  void append_local_links(int node, int src_local, int dst_local, std::vector<int>& out) const;
  void append_network_links(int src, int dst, std::vector<int>& out) const;

  std::string name_;
  std::string source_;
  std::string device_label_;
  int num_nodes_ = 0;
  int devices_per_node_ = 0;
  std::vector<DeviceKind> kinds_;
  std::vector<Device> devices_;
  Fabric fabric_;
  bool has_network_ = false;
  Network network_;
  CollectiveTiming collectives_;

  // Vertex layout: devices, node switches (one per node when switched), fat-tree groups.
  int num_vertices_ = 0;
  int switch_vertex_base_ = 0;
  std::vector<int> level_vertex_base_;  // per level
  std::vector<int> level_groups_;       // groups per level
  std::vector<int> level_block_;        // nodes per group at each level (product of children)

  // Link layout: node fabric links (node-major), NIC links (2 per device: up, down), then the
  // up/down pair of every non-top group, level by level.
  std::vector<Link> links_;
  std::vector<LinkKind> link_kinds_;
  int fabric_links_per_node_ = 0;
  int nic_link_base_ = 0;
  std::vector<int> level_link_base_;  // per non-top level
  // Explicit fabrics: a shortest-path tree per local source, shared by all nodes.
  // local_pred_[src_local * devices_per_node + v] = the node-relative fabric link that enters v
  // on the path from src_local (-1 for v == src_local); routes walk it back from the destination.
  std::vector<int> local_pred_;
};

}  // namespace ranksim::sim

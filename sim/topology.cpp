#include "sim/topology.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>
#include <tuple>

#include "sim/check.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/topology_reader.h"
#include "sim/yaml_input.h"

namespace ranksim::sim {
namespace {

const char* fabric_type_name(FabricType t) {
  switch (t) {
    case FabricType::none:
      return "none";
    case FabricType::switched:
      return "switch";
    case FabricType::ring:
      return "ring";
    case FabricType::mesh:
      return "mesh";
    case FabricType::links:
      return "links";
  }
  return "?";
}

}  // namespace

// ---- Laying out a Topology from a validated spec --------------------------------------------

class TopologyBuilder {
 public:
  explicit TopologyBuilder(Topology& t) : t_(t) {}

  void build(TopologySpec spec) {
    t_.name_ = std::move(spec.name);
    t_.num_nodes_ = spec.num_nodes;
    t_.devices_per_node_ = spec.devices_per_node;
    t_.kinds_ = std::move(spec.kinds);
    t_.device_label_ = std::move(spec.device_label);
    t_.fabric_ = std::move(spec.fabric);
    t_.has_network_ = spec.has_network;
    t_.network_ = std::move(spec.network);
    t_.collectives_ = spec.collectives;
    kind_index_ = spec.kind_index;
    lay_out();
  }

 private:
  // Assigns vertex and link ids, computes fat-tree bandwidths and explicit-fabric routes.
  void lay_out() {
    Topology& t = t_;
    const int n = t.devices_per_node_;
    const int nodes = t.num_nodes_;
    const int ndev = nodes * n;
    t.devices_.resize(static_cast<size_t>(ndev));
    for (int d = 0; d < ndev; ++d) {
      Device& dev = t.devices_[static_cast<size_t>(d)];
      dev.id = d;
      dev.node = d / n;
      dev.local_index = d % n;
      dev.kind = kind_index_;
      dev.name = "node" + std::to_string(dev.node) + "." + t.device_label_ + std::to_string(dev.local_index);
    }
    int vertices = ndev;
    t.switch_vertex_base_ = vertices;
    if (t.fabric_.type == FabricType::switched) vertices += nodes;

    auto add_kind = [&](std::string name, std::string description) {
      t.link_kinds_.push_back({std::move(name), std::move(description)});
      return static_cast<int>(t.link_kinds_.size()) - 1;
    };
    auto add_link = [&](int from, int to, double bw, Time lat, int kind) {
      Link l;
      l.id = static_cast<int>(t.links_.size());
      l.from = from;
      l.to = to;
      l.bandwidth = bw;
      l.latency = lat;
      l.kind = kind;
      t.links_.push_back(l);
    };

    // Node fabrics.
    const Fabric& fab = t.fabric_;
    if (fab.type == FabricType::switched) {
      const int up = add_kind(fab.name + " up", "device -> node " + fab.name);
      const int down = add_kind(fab.name + " down", "node " + fab.name + " -> device");
      const Time up_lat = fab.latency / 2;
      const Time down_lat = fab.latency - up_lat;
      t.fabric_links_per_node_ = 2 * n;
      for (int node = 0; node < nodes; ++node)
        for (int i = 0; i < n; ++i) {
          add_link(node * n + i, t.switch_vertex_base_ + node, fab.bandwidth, up_lat, up);
          add_link(t.switch_vertex_base_ + node, node * n + i, fab.bandwidth, down_lat, down);
        }
    } else if (fab.type != FabricType::none) {
      const int kind = add_kind(fab.name, std::string("device -> device (") + fabric_type_name(fab.type) + ")");
      t.fabric_links_per_node_ = 2 * static_cast<int>(fab.links.size());
      for (int node = 0; node < nodes; ++node)
        for (const Fabric::LocalLink& l : fab.links) {
          add_link(node * n + l.a, node * n + l.b, l.bandwidth, l.latency, kind);
          add_link(node * n + l.b, node * n + l.a, l.bandwidth, l.latency, kind);
        }
      compute_local_routes();
    }

    if (!t.has_network_) {
      t.num_vertices_ = vertices;
      return;
    }
    // Fat tree: groups per level, then NIC links, then up/down pairs per non-top group.
    const Network& net = t.network_;
    const int L = static_cast<int>(net.levels.size());
    t.level_block_.assign(static_cast<size_t>(L), nodes);
    t.level_groups_.assign(static_cast<size_t>(L), 1);
    long long block = 1;
    for (int i = 0; i + 1 < L; ++i) {
      block = std::min<long long>(block * net.levels[static_cast<size_t>(i)].children, nodes);
      t.level_block_[static_cast<size_t>(i)] = static_cast<int>(block);
      const int blocks = static_cast<int>((nodes + block - 1) / block);
      t.level_groups_[static_cast<size_t>(i)] = i == 0 && net.levels[0].rail_optimized ? blocks * n : blocks;
    }
    t.level_vertex_base_.resize(static_cast<size_t>(L));
    for (int i = 0; i < L; ++i) {
      t.level_vertex_base_[static_cast<size_t>(i)] = vertices;
      vertices += t.level_groups_[static_cast<size_t>(i)];
    }
    t.num_vertices_ = vertices;

    const std::string& leaf = net.levels[0].name;
    const int nic_up = add_kind("nic up", "device -> " + leaf);
    const int nic_down = add_kind("nic down", leaf + " -> device");
    t.nic_link_base_ = static_cast<int>(t.links_.size());
    // The graph keeps one NIC link per device: with fewer NICs than devices, each device's link
    // carries its share of the node's NIC bandwidth.
    const double nic_bw = net.nic_bandwidth * (net.nics_per_node > 0 ? net.nics_per_node : n) / n;
    for (int d = 0; d < ndev; ++d) {
      const int g = t.level_vertex_base_[0] + t.level1_group(d);
      add_link(d, g, nic_bw, net.nic_latency + net.levels[0].latency, nic_up);
      add_link(g, d, nic_bw, net.nic_latency, nic_down);
    }
    // Aggregate bandwidth below each group (what its NICs can inject) and its uplink bandwidth.
    std::vector<double> nic_sum(static_cast<size_t>(t.level_groups_[0]), 0.0);
    for (int d = 0; d < ndev; ++d) nic_sum[static_cast<size_t>(t.level1_group(d))] += nic_bw;
    std::vector<double> below = nic_sum;  // downlink aggregate of each group at this level
    t.level_link_base_.resize(static_cast<size_t>(std::max(0, L - 1)));
    for (int i = 0; i + 1 < L; ++i) {
      const FatTreeLevel& lo = net.levels[static_cast<size_t>(i)];
      const FatTreeLevel& hi = net.levels[static_cast<size_t>(i) + 1];
      const int up = add_kind(lo.name + "-" + hi.name + " up", lo.name + " -> " + hi.name);
      const int down = add_kind(lo.name + "-" + hi.name + " down", hi.name + " -> " + lo.name);
      t.level_link_base_[static_cast<size_t>(i)] = static_cast<int>(t.links_.size());
      const int groups = t.level_groups_[static_cast<size_t>(i)];
      const int parents = t.level_groups_[static_cast<size_t>(i) + 1];
      std::vector<double> parent_below(static_cast<size_t>(parents), 0.0);
      std::vector<double> parent_nics(static_cast<size_t>(parents), 0.0);
      for (int g = 0; g < groups; ++g) {
        const int p = parent_of(i, g);
        const double bw = below[static_cast<size_t>(g)] / lo.oversubscription;
        const int gv = t.level_vertex_base_[static_cast<size_t>(i)] + g;
        const int pv = t.level_vertex_base_[static_cast<size_t>(i) + 1] + p;
        add_link(gv, pv, bw, hi.latency, up);
        add_link(pv, gv, bw, lo.latency, down);
        // Every flow on this pair entered (or leaves) through the NICs below g.
        const bool nb = bw >= nic_sum[static_cast<size_t>(g)] * (1 - 1e-9);
        t.links_[t.links_.size() - 2].non_blocking = nb;
        t.links_[t.links_.size() - 1].non_blocking = nb;
        parent_below[static_cast<size_t>(p)] += bw;
        parent_nics[static_cast<size_t>(p)] += nic_sum[static_cast<size_t>(g)];
      }
      below = std::move(parent_below);
      nic_sum = std::move(parent_nics);
    }
  }

  // The parent (at level i+1) of group g at level i (0-based levels).
  int parent_of(int i, int g) const {
    const Topology& t = t_;
    const int n = t.devices_per_node_;
    const bool rails = i == 0 && t.network_.levels[0].rail_optimized;
    const int first_node = (rails ? g / n : g) * t.level_block_[static_cast<size_t>(i)];
    const int L = static_cast<int>(t.network_.levels.size());
    if (i + 1 == L - 1) return 0;
    return first_node / t.level_block_[static_cast<size_t>(i) + 1];
  }

  // A shortest-path tree per local source over one node's explicit links: least latency, then
  // fewest hops; ties keep the first path found (lower vertex ids are settled first).
  void compute_local_routes() {
    Topology& t = t_;
    const int n = t.devices_per_node_;
    const std::vector<Fabric::LocalLink>& ll = t.fabric_.links;
    std::vector<std::vector<int>> out(static_cast<size_t>(n));  // local link indices
    std::vector<int> head(ll.size() * 2);
    for (size_t k = 0; k < ll.size(); ++k) {
      out[static_cast<size_t>(ll[k].a)].push_back(static_cast<int>(2 * k));
      out[static_cast<size_t>(ll[k].b)].push_back(static_cast<int>(2 * k + 1));
      head[2 * k] = ll[k].b;
      head[2 * k + 1] = ll[k].a;
    }
    t.local_pred_.assign(static_cast<size_t>(n) * static_cast<size_t>(n), -1);
    using Key = std::tuple<int64_t, int, int>;  // latency ps, hops, vertex
    for (int s = 0; s < n; ++s) {
      std::vector<int64_t> dist(static_cast<size_t>(n), std::numeric_limits<int64_t>::max());
      std::vector<int> hops(static_cast<size_t>(n), 0);
      std::priority_queue<Key, std::vector<Key>, std::greater<>> pq;
      dist[static_cast<size_t>(s)] = 0;
      pq.emplace(0, 0, s);
      int* pred = &t.local_pred_[static_cast<size_t>(s) * static_cast<size_t>(n)];
      while (!pq.empty()) {
        const auto [d, h, v] = pq.top();
        pq.pop();
        if (d != dist[static_cast<size_t>(v)] || h != hops[static_cast<size_t>(v)]) continue;
        for (int k : out[static_cast<size_t>(v)]) {
          const int w = head[static_cast<size_t>(k)];
          const int64_t nd = d + ll[static_cast<size_t>(k / 2)].latency.picoseconds();
          const int nh = h + 1;
          int64_t& dw = dist[static_cast<size_t>(w)];
          int& hw = hops[static_cast<size_t>(w)];
          if (nd < dw || (nd == dw && nh < hw)) {
            dw = nd;
            hw = nh;
            pred[w] = k;
            pq.emplace(nd, nh, w);
          }
        }
      }
    }
  }

  Topology& t_;
  int kind_index_ = 0;
};

// ---- Topology --------------------------------------------------------------------------------

Topology Topology::parse(const std::string& yaml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  YamlPositions pos(source_name);
  YAML::Node root = parse_yaml(yaml_text, source_name);
  if (root.IsNull())
    throw ConfigError(source_name, 1, 1,
                      "the topology is empty; expected a mapping with the keys "
                      "name, nodes, device_kinds, node and network");
  if (root.IsMap())
    for (const std::string& o : overrides) apply_set(root, o, topology_schema(), pos, topology_set_options());
  Topology t;
  t.source_ = source_name;
  try {
    TopologyBuilder(t).build(read_topology(root, pos));
  } catch (const YAML::Exception& e) {
    // Validation reads only checked node types; this is a backstop for yaml-cpp surprises.
    throw ConfigError(source_name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  return t;
}

Topology Topology::load_file(const std::string& path, const std::vector<std::string>& overrides) {
  return parse(read_text_file(path, "topology YAML file"), path, overrides);
}

const Device& Topology::device(int id) const {
  RANKSIM_CHECK(id >= 0 && id < num_devices(), "device id out of range");
  return devices_[static_cast<size_t>(id)];
}

const DeviceKind& Topology::kind_of(int dev) const { return kinds_[static_cast<size_t>(device(dev).kind)]; }

const DeviceKind& Topology::kind(int index) const {
  RANKSIM_CHECK(index >= 0 && index < num_kinds(), "device kind index out of range");
  return kinds_[static_cast<size_t>(index)];
}

bool Topology::same_node(int a, int b) const { return device(a).node == device(b).node; }

const Link& Topology::link(int id) const {
  RANKSIM_CHECK(id >= 0 && id < num_links(), "link id out of range");
  return links_[static_cast<size_t>(id)];
}

const LinkKind& Topology::link_kind(int index) const {
  RANKSIM_CHECK(index >= 0 && index < num_link_kinds(), "link kind index out of range");
  return link_kinds_[static_cast<size_t>(index)];
}

std::string Topology::vertex_name(int v) const {
  RANKSIM_CHECK(v >= 0 && v < num_vertices_, "vertex id out of range");
  if (v < num_devices()) return devices_[static_cast<size_t>(v)].name;
  if (fabric_.type == FabricType::switched && v < switch_vertex_base_ + num_nodes_)
    return "node" + std::to_string(v - switch_vertex_base_) + "." + fabric_.name;
  for (size_t i = level_vertex_base_.size(); i-- > 0;) {
    if (v < level_vertex_base_[i]) continue;
    const int g = v - level_vertex_base_[i];
    const std::string& name = network_.levels[i].name;
    if (i == 0 && network_.levels[0].rail_optimized)
      return name + std::to_string(g / devices_per_node_) + ".rail" + std::to_string(g % devices_per_node_);
    return name + std::to_string(g);
  }
  return "vertex" + std::to_string(v);
}

std::string Topology::link_name(int id) const {
  const Link& l = link(id);
  return vertex_name(l.from) + " -> " + vertex_name(l.to);
}

int Topology::level1_group(int dev) const {
  const int node = dev / devices_per_node_;
  const int block = node / level_block_[0];
  return network_.levels[0].rail_optimized ? block * devices_per_node_ + dev % devices_per_node_ : block;
}

int Topology::group_at(int level, int dev) const {
  if (level == 0) return level1_group(dev);
  if (level + 1 == static_cast<int>(level_block_.size())) return 0;
  return (dev / devices_per_node_) / level_block_[static_cast<size_t>(level)];
}

void Topology::append_local_links(int node, int src_local, int dst_local, std::vector<int>& out) const {
  const int base = node * fabric_links_per_node_;
  if (fabric_.type == FabricType::switched) {
    out.push_back(base + 2 * src_local);
    out.push_back(base + 2 * dst_local + 1);
    return;
  }
  const size_t n = static_cast<size_t>(devices_per_node_);
  const int* pred = &local_pred_[static_cast<size_t>(src_local) * n];
  const size_t first = out.size();
  for (int v = dst_local; v != src_local;) {
    const int k = pred[v];
    RANKSIM_CHECK(k >= 0, "explicit fabric is connected (checked at load)");
    out.push_back(base + k);
    const Fabric::LocalLink& l = fabric_.links[static_cast<size_t>(k / 2)];
    v = k % 2 == 0 ? l.a : l.b;
  }
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

void Topology::append_network_links(int src, int dst, std::vector<int>& out) const {
  const int L = static_cast<int>(level_block_.size());
  int lca = 0;
  while (lca < L - 1 && group_at(lca, src) != group_at(lca, dst)) ++lca;
  out.push_back(nic_link_base_ + 2 * src);
  for (int i = 0; i < lca; ++i) out.push_back(level_link_base_[static_cast<size_t>(i)] + 2 * group_at(i, src));
  for (int i = lca - 1; i >= 0; --i) out.push_back(level_link_base_[static_cast<size_t>(i)] + 2 * group_at(i, dst) + 1);
  out.push_back(nic_link_base_ + 2 * dst + 1);
}

void Topology::append_route_links(int src, int dst, std::vector<int>& out) const {
  const Device& a = device(src);
  const Device& b = device(dst);
  if (src == dst) return;
  if (a.node == b.node && fabric_.type != FabricType::none)
    append_local_links(a.node, a.local_index, b.local_index, out);
  else
    append_network_links(src, dst, out);
}

Route Topology::route(int src, int dst) const {
  Route r;
  r.links.reserve(2 + 2 * level_block_.size());
  append_route_links(src, dst, r.links);
  r.bandwidth = std::numeric_limits<double>::infinity();
  for (int id : r.links) {
    const Link& l = links_[static_cast<size_t>(id)];
    r.latency += l.latency;
    r.bandwidth = std::min(r.bandwidth, l.bandwidth);
  }
  return r;
}

}  // namespace ranksim::sim

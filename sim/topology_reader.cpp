#include "sim/topology_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <memory>

#include "sim/error.h"
#include "sim/suggest.h"
#include "sim/tuner_config.h"
#include "sim/units.h"
#include "sim/yaml_fields.h"

namespace ranksim::sim {
namespace {

constexpr long long kMaxDevices = 1LL << 24;
constexpr int kMaxDevicesPerNode = 1 << 16;
// Explicit fabrics keep a shortest-path tree per local source: devices_per_node^2 entries.
constexpr int kMaxExplicitDevicesPerNode = 1024;
const char* const kDtypes[] = {"f64", "f32", "tf32", "bf16", "f16", "fp8", "i8", "i32", "i64"};
const char* const kFabricTypes[] = {"switch", "ring", "mesh", "links"};

// ---- Schema: the known keys, shared by validation and by overrides -------------------------

struct Schemas {
  YamlSchema peak_flops, device_kind, device_kinds, local_link, local_links, fabric, node, level, levels, network,
      collectives, root;
  Schemas() {
    for (const char* d : kDtypes) peak_flops.keys.push_back({d, nullptr});
    device_kind.keys = {{"peak_flops", &peak_flops},
                        {"memory_bandwidth", nullptr},
                        {"memory", nullptr},
                        {"launch_overhead", nullptr},
                        {"kernel_profile", nullptr}};
    device_kinds.any_key = &device_kind;
    local_link.keys = {{"between", nullptr}, {"bandwidth", nullptr}, {"latency", nullptr}};
    local_links.items = &local_link;
    fabric.keys = {
        {"type", nullptr}, {"name", nullptr}, {"bandwidth", nullptr}, {"latency", nullptr}, {"links", &local_links}};
    node.keys = {{"devices", nullptr}, {"kind", nullptr}, {"label", nullptr}, {"fabric", &fabric}};
    level.keys = {{"name", nullptr},
                  {"children", nullptr},
                  {"latency", nullptr},
                  {"oversubscription", nullptr},
                  {"rail_optimized", nullptr}};
    levels.items = &level;
    network.keys = {{"nic_bandwidth", nullptr}, {"nic_latency", nullptr}, {"levels", &levels},
                    {"nics_per_node", nullptr}, {"transport", nullptr},   {"sharp", nullptr}};
    for (const char* k : {"model",
                          "channels",
                          "min_channels",
                          "max_channels",
                          "fabric_efficiency",
                          "ring_loop_gap",
                          "network_efficiency",
                          "alltoall_efficiency",
                          "alltoall_network_efficiency",
                          "channel_network_bandwidth",
                          "p2p_channel_network_bandwidth",
                          "nvls",
                          "nvls_efficiency",
                          "nvls_tree_efficiency",
                          "nvls_tree_network_efficiency",
                          "ll_max_bandwidth",
                          "tree_channel_bandwidth",
                          "tree_ll128_channel_bandwidth",
                          "intra_latency",
                          "inter_latency",
                          "net_overhead",
                          "ll_net_overhead",
                          "peer_latency",
                          "message_latency",
                          "nvls_latency",
                          "simple_latency",
                          "sharp_latency",
                          "call_overhead",
                          "group_launch",
                          "tuner",
                          "buffer_size",
                          "nvls_chunk_size",
                          "nvls_tree_max_chunk_size",
                          "p2p_chunk_size"})
      collectives.keys.push_back({k, nullptr});
    root.keys = {
        {"name", nullptr}, {"description", nullptr}, {"nodes", nullptr},           {"device_kinds", &device_kinds},
        {"node", &node},   {"network", &network},    {"collectives", &collectives}};
  }
  Schemas(const Schemas&) = delete;
  Schemas& operator=(const Schemas&) = delete;
};

const Schemas& schemas() {
  static const Schemas s;
  return s;
}

bool valid_label(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

class TopologyReader {
 public:
  explicit TopologyReader(const YamlPositions& pos) : rd_(pos) {}

  TopologySpec read(const YAML::Node& root) {
    const Schemas& s = schemas();
    const MapView top(rd_.pos(), root, "", s.root,
                      "a mapping with the keys name, nodes, device_kinds, node and network");
    s_.name = rd_.name(top.need("name", "the topology's name"));
    if (const Field* d = top.find("description")) rd_.scalar(*d, "a text");

    const Field* nodes_field = top.find("nodes");
    s_.num_nodes = nodes_field ? static_cast<int>(rd_.integer(*nodes_field, 1, kMaxDevices, "the number of nodes")) : 1;
    read_kinds(top.need("device_kinds",
                        "a mapping from kind name to its peak_flops, "
                        "memory_bandwidth, memory and launch_overhead"));
    const Field& node_field = top.need("node", "the node's devices, kind and fabric");
    const MapView node(rd_.pos(), node_field, s.node, "a mapping with the keys devices, kind, label and fabric");
    read_node(node);

    const long long total = static_cast<long long>(s_.num_nodes) * s_.devices_per_node;
    if (total > kMaxDevices)
      fail_nodes(nodes_field, top,
                 "the topology would hold " + std::to_string(total) + " devices; at most " +
                     std::to_string(kMaxDevices) + " are supported");

    const Field* net = top.find("network");
    if (net != nullptr) read_network(*net, nodes_field, top);
    if (const Field* c = top.find("collectives")) read_collectives(*c);

    if (s_.num_nodes > 1 && !s_.has_network)
      fail_nodes(nodes_field, top,
                 "nodes is " + std::to_string(s_.num_nodes) +
                     " but the topology has no 'network': devices on different nodes could not "
                     "reach each other; add a network section (NICs and fat-tree levels)");
    if (s_.devices_per_node > 1 && s_.fabric.type == FabricType::none && !s_.has_network)
      rd_.pos().fail(node.node(), "the node holds " + std::to_string(s_.devices_per_node) +
                                      " devices but has no fabric and the topology has no "
                                      "network: its devices could not reach each other; add "
                                      "node.fabric (e.g. type: switch)");
    return std::move(s_);
  }

 private:
  [[noreturn]] void fail_nodes(const Field* nodes_field, const MapView& top, const std::string& what) {
    if (nodes_field) rd_.pos().fail(nodes_field->value, what);
    rd_.pos().fail(top.node(), what);
  }

  void read_kinds(const Field& f) {
    const Schemas& s = schemas();
    const MapView kinds(rd_.pos(), f, s.device_kinds, "a mapping from kind name to its spec");
    if (kinds.fields().empty()) rd_.pos().fail(f.key_node, "'device_kinds' is empty; define at least one device kind");
    for (const Field& k : kinds.fields()) {
      DeviceKind kind;
      kind.name = k.key;
      const MapView spec(rd_.pos(), k, s.device_kind,
                         "a mapping with the keys peak_flops, memory_bandwidth, memory and "
                         "launch_overhead");
      const Field& peaks = spec.need("peak_flops",
                                     "peak FLOP/s per dtype, e.g. "
                                     "{bf16: 989.4 TFLOP/s}");
      const MapView pv(rd_.pos(), peaks, s.peak_flops, "a mapping from dtype to FLOP rate, e.g. {bf16: 989.4 TFLOP/s}");
      if (pv.fields().empty())
        rd_.pos().fail(peaks.key_node, "'" + peaks.path +
                                           "' is empty; give the peak FLOP/s of "
                                           "at least one dtype");
      for (const Field& p : pv.fields()) kind.peak_flops[p.key] = rd_.flop_rate(p);
      kind.memory_bandwidth = rd_.bandwidth(spec.need("memory_bandwidth", "a bandwidth such as '3.35 TB/s'"));
      kind.memory_bytes = rd_.bytes(spec.need("memory", "a size such as '80 GiB'"));
      if (const Field* lo = spec.find("launch_overhead")) kind.launch_overhead = rd_.duration(*lo);
      if (const Field* kp = spec.find("kernel_profile")) kind.profile = read_profile(*kp);
      s_.kinds.push_back(std::move(kind));
    }
  }

  // A file the field names relative to the topology file's folder (`what`, shipped in
  // topologies/`folder`/), or "" for `none` (`none_means`, for the message).
  std::string file_beside(const Field& f, const std::string& what, const std::string& folder,
                          const std::string& none_means) {
    const std::string name = rd_.name(f);
    if (name == "none") return "";
    std::filesystem::path path(name);
    if (path.is_relative()) path = std::filesystem::path(rd_.pos().source()).parent_path() / path;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      rd_.pos().fail(f.value, "'" + f.path + "' names the " + what + " '" + path.string() +
                                  "', which is not a file; give a path relative to this topology file (the shipped "
                                  "ones are in topologies/" +
                                  folder + "/), or 'none' for " + none_means);
    return path.string();
  }

  // A kernel profile file; `none`: the roofline.
  std::shared_ptr<const KernelProfile> read_profile(const Field& f) {
    const std::string path = file_beside(f, "kernel profile", "profiles", "the roofline");
    return path.empty() ? nullptr : std::make_shared<const KernelProfile>(load_kernel_profile(path));
  }

  // A tuner plugin's config (NCCL's example tuner CSV); `none`: NCCL's cost model alone.
  std::shared_ptr<const TunerConfig> read_tuner(const Field& f) {
    const std::string path = file_beside(f, "tuner config", "tuners", "NCCL's cost model alone");
    return path.empty() ? nullptr : std::make_shared<const TunerConfig>(load_tuner_config(path));
  }

  void read_node(const MapView& node) {
    const Schemas& s = schemas();
    s_.devices_per_node = static_cast<int>(
        rd_.integer(node.need("devices", "the number of devices per node"), 1, kMaxDevicesPerNode, "devices per node"));
    const Field& kind = node.need("kind", "the device kind, a key of device_kinds");
    const std::string kind_name = rd_.name(kind);
    std::vector<std::string> names;
    for (const DeviceKind& k : s_.kinds) names.push_back(k.name);
    const auto it = std::find(names.begin(), names.end(), kind_name);
    if (it == names.end())
      rd_.pos().fail(kind.value, "'" + kind.path + "' names the unknown device kind '" + kind_name + "'" +
                                     did_you_mean(kind_name, names) + " (device_kinds defines: " + join(names) + ")");
    s_.kind_index = static_cast<int>(it - names.begin());
    s_.device_label = "dev";
    if (const Field* label = node.find("label")) {
      s_.device_label = rd_.name(*label);
      if (!valid_label(s_.device_label))
        rd_.pos().fail(label->value, "'" + label->path +
                                         "' must be letters, digits, '_' or "
                                         "'-', got '" +
                                         s_.device_label + "'");
    }
    if (const Field* fab = node.find("fabric")) {
      const MapView fv(rd_.pos(), *fab, s.fabric, "a mapping with the keys type, name, bandwidth, latency (and links)");
      read_fabric(fv);
    }
  }

  void read_fabric(const MapView& fv) {
    Fabric& fab = s_.fabric;
    const Field& type = fv.need("type", "one of: switch, ring, mesh, links");
    const std::string tname = rd_.name(type);
    const std::vector<std::string> types(std::begin(kFabricTypes), std::end(kFabricTypes));
    if (tname == "switch")
      fab.type = FabricType::switched;
    else if (tname == "ring")
      fab.type = FabricType::ring;
    else if (tname == "mesh")
      fab.type = FabricType::mesh;
    else if (tname == "links")
      fab.type = FabricType::links;
    else
      rd_.pos().fail(type.value, "unknown fabric type '" + tname + "'" + did_you_mean(tname, types) +
                                     " (expected one of: " + join(types) + ")");
    fab.name = tname;
    if (const Field* nf = fv.find("name")) {
      fab.name = rd_.name(*nf);
      if (!valid_label(fab.name))
        rd_.pos().fail(nf->value, "'" + nf->path + "' must be letters, digits, '_' or '-', got '" + fab.name + "'");
    }
    const int n = s_.devices_per_node;
    const Field* links = fv.find("links");
    if (links != nullptr && fab.type != FabricType::links)
      rd_.pos().fail(links->key_node, "'" + links->path +
                                          "' is only used with type: links "
                                          "(this fabric is type: " +
                                          tname + ")");
    // Checked before any link is made: a mesh's links grow as the square of its devices.
    if (fab.type != FabricType::switched && n > kMaxExplicitDevicesPerNode)
      rd_.pos().fail(type.value, "explicit-link fabrics support at most " + std::to_string(kMaxExplicitDevicesPerNode) +
                                     " devices per node; use type: switch");
    if (fab.type == FabricType::links) {
      // Fabric-level bandwidth and latency are defaults for the listed links.
      const Field* bw = fv.find("bandwidth");
      const Field* lat = fv.find("latency");
      if (bw) fab.bandwidth = rd_.bandwidth(*bw);
      if (lat) fab.latency = rd_.duration(*lat);
      read_links(fv.need("links", "a list of {between: [a, b], bandwidth, latency}"), bw != nullptr, lat != nullptr);
    } else {
      fab.bandwidth = rd_.bandwidth(fv.need(
          "bandwidth", fab.type == FabricType::switched ? "the bandwidth per device and direction, e.g. '450 GB/s'"
                                                        : "the bandwidth of each link and direction, e.g. '50 GB/s'"));
      fab.latency = rd_.duration(fv.need("latency", fab.type == FabricType::switched
                                                        ? "device-to-device latency through the switch, e.g. '500 ns'"
                                                        : "the latency of each link, e.g. '1 us'"));
      if (fab.type != FabricType::switched && n < 2)
        rd_.pos().fail(type.value, "a " + tname +
                                       " needs at least 2 devices per node, but "
                                       "node.devices is " +
                                       std::to_string(n));
      if (fab.type == FabricType::ring) {
        for (int i = 0; i < n; ++i) {
          const int j = (i + 1) % n;
          if (n == 2 && i == 1) break;  // two devices: one cable, not two
          fab.links.push_back({i, j, fab.bandwidth, fab.latency});
        }
      } else if (fab.type == FabricType::mesh) {
        for (int i = 0; i < n; ++i)
          for (int j = i + 1; j < n; ++j) fab.links.push_back({i, j, fab.bandwidth, fab.latency});
      }
    }
    if (fab.type != FabricType::switched) check_connected(fv);
  }

  void read_links(const Field& f, bool default_bw, bool default_lat) {
    Fabric& fab = s_.fabric;
    const int n = s_.devices_per_node;
    if (!f.value.IsSequence())
      rd_.pos().fail(f.value.IsNull() ? f.key_node : f.value,
                     "'" + f.path +
                         "' must be a list of {between: [a, b], bandwidth, latency}, "
                         "got " +
                         describe(f.value));
    if (f.value.size() == 0) rd_.pos().fail(f.value, "'" + f.path + "' is empty; list at least one link");
    std::vector<std::pair<int, int>> seen;
    std::vector<YAML::Node> seen_at;
    for (size_t i = 0; i < f.value.size(); ++i) {
      const YAML::Node item = f.value[i];
      const std::string path = f.path + "[" + std::to_string(i) + "]";
      const MapView lv(rd_.pos(), item, path, schemas().local_link, "a mapping {between: [a, b], bandwidth, latency}");
      const Field& between = lv.need("between", "the two local device indices, e.g. [0, 1]");
      if (!between.value.IsSequence() || between.value.size() != 2)
        rd_.pos().fail(between.value.IsNull() ? between.key_node : between.value,
                       "'" + between.path +
                           "' must be a list of two local device indices such "
                           "as [0, 1], got " +
                           describe(between.value));
      int ends[2];
      for (size_t e = 0; e < 2; ++e) {
        const Field ef{"", between.value[e], between.value[e], between.path + "[" + std::to_string(e) + "]"};
        ends[e] = static_cast<int>(
            rd_.integer(ef, 0, n - 1, "a local device index below node.devices = " + std::to_string(n)));
      }
      if (ends[0] == ends[1])
        rd_.pos().fail(between.value, "'" + between.path + "' links device " + std::to_string(ends[0]) +
                                          " to itself; a link joins "
                                          "two different devices");
      const std::pair<int, int> key{std::min(ends[0], ends[1]), std::max(ends[0], ends[1])};
      for (size_t k = 0; k < seen.size(); ++k) {
        if (seen[k] == key) {
          const YAML::Mark m = seen_at[k].Mark();
          rd_.pos().fail(
              between.value,
              "duplicate link between devices " + std::to_string(key.first) + " and " + std::to_string(key.second) +
                  (m.is_null() ? std::string() : " (first listed on line " + std::to_string(m.line + 1) + ")") +
                  "; links are full duplex, list each pair once");
        }
      }
      seen.push_back(key);
      seen_at.push_back(between.value);
      Fabric::LocalLink link{ends[0], ends[1], fab.bandwidth, fab.latency};
      if (const Field* bw = lv.find("bandwidth"))
        link.bandwidth = rd_.bandwidth(*bw);
      else if (!default_bw)
        lv.need("bandwidth",
                "the link's bandwidth per direction, or set "
                "node.fabric.bandwidth as the default");
      if (const Field* lat = lv.find("latency"))
        link.latency = rd_.duration(*lat);
      else if (!default_lat)
        lv.need("latency",
                "the link's latency, or set "
                "node.fabric.latency as the default");
      fab.links.push_back(link);
    }
  }

  void check_connected(const MapView& fv) {
    const int n = s_.devices_per_node;
    std::vector<int> comp(static_cast<size_t>(n), -1);
    std::vector<std::vector<int>> adj(static_cast<size_t>(n));
    for (const Fabric::LocalLink& l : s_.fabric.links) {
      adj[static_cast<size_t>(l.a)].push_back(l.b);
      adj[static_cast<size_t>(l.b)].push_back(l.a);
    }
    int ncomp = 0;
    for (int s = 0; s < n; ++s) {
      if (comp[static_cast<size_t>(s)] >= 0) continue;
      std::vector<int> stack{s};
      comp[static_cast<size_t>(s)] = ncomp;
      while (!stack.empty()) {
        const int v = stack.back();
        stack.pop_back();
        for (int w : adj[static_cast<size_t>(v)])
          if (comp[static_cast<size_t>(w)] < 0) {
            comp[static_cast<size_t>(w)] = ncomp;
            stack.push_back(w);
          }
      }
      ++ncomp;
    }
    if (ncomp == 1) return;
    int other = 0;
    while (comp[static_cast<size_t>(other)] == 0) ++other;
    std::vector<std::string> groups;
    for (int c = 0; c < ncomp && c < 4; ++c) {
      std::vector<std::string> members;
      for (int v = 0; v < n; ++v)
        if (comp[static_cast<size_t>(v)] == c) members.push_back(std::to_string(v));
      if (members.size() > 8) {
        members.resize(8);
        members.push_back("...");
      }
      groups.push_back("{" + join(members) + "}");
    }
    const Field* links = fv.find("links");
    rd_.pos().fail(links ? links->value : fv.node(), "device 0 cannot reach device " + std::to_string(other) +
                                                         ": the fabric's links leave the node's devices in " +
                                                         std::to_string(ncomp) + " disconnected groups (" +
                                                         join(groups, " and ") +
                                                         "); add links between them or use type: switch");
  }

  void read_network(const Field& f, const Field* nodes_field, const MapView& top) {
    const Schemas& s = schemas();
    const MapView nv(rd_.pos(), f, s.network, "a mapping with the keys nic_bandwidth, nic_latency and levels");
    Network& net = s_.network;
    net.nic_bandwidth = rd_.bandwidth(nv.need("nic_bandwidth", "the NIC bandwidth per device, e.g. '400 Gb/s'"));
    net.nic_latency = rd_.duration(nv.need("nic_latency",
                                           "the latency at each end of a transfer, e.g. "
                                           "'300 ns'"));
    if (const Field* k = nv.find("nics_per_node")) {
      net.nics_per_node =
          static_cast<int>(rd_.integer(*k, 1, s_.devices_per_node, "NICs per node, at most node.devices"));
      if (s_.devices_per_node % net.nics_per_node != 0)
        rd_.pos().fail(k->value, "'" + k->path + "' = " + std::to_string(net.nics_per_node) +
                                     " does not divide node.devices = " + std::to_string(s_.devices_per_node) +
                                     "; each NIC serves the same number of devices");
    }
    if (const Field* t = nv.find("transport")) {
      const std::string v = rd_.name(*t);
      if (v == "infiniband")
        net.transport = Transport::infiniband;
      else if (v == "roce")
        net.transport = Transport::roce;
      else if (v == "efa")
        net.transport = Transport::efa;
      else
        rd_.pos().fail(t->value, "'" + t->path + "' must be infiniband, roce or efa, got '" + v + "'");
    }
    if (const Field* sh = nv.find("sharp")) net.sharp = rd_.boolean(*sh);
    const Field& lv = nv.need("levels", "the fat-tree levels, leaf first");
    if (!lv.value.IsSequence())
      rd_.pos().fail(lv.value.IsNull() ? lv.key_node : lv.value,
                     "'" + lv.path + "' must be a list of fat-tree levels (leaf first), got " + describe(lv.value));
    if (lv.value.size() == 0)
      rd_.pos().fail(lv.value, "'" + lv.path +
                                   "' is empty; give at least one level (a single "
                                   "switch is one level)");
    const size_t nlevels = lv.value.size();
    std::vector<YAML::Node> name_nodes;
    const Field* top_children = nullptr;
    for (size_t i = 0; i < nlevels; ++i) {
      const MapView v(rd_.pos(), lv.value[i], lv.path + "[" + std::to_string(i) + "]", s.level,
                      "a mapping with the keys name, children, latency, oversubscription and "
                      "rail_optimized");
      const bool is_top = i + 1 == nlevels;
      FatTreeLevel level;
      const Field& name = v.need("name", "a name such as 'leaf' or 'spine'");
      level.name = rd_.name(name);
      if (!valid_label(level.name))
        rd_.pos().fail(name.value, "'" + name.path +
                                       "' must be letters, digits, '_' or '-', "
                                       "got '" +
                                       level.name + "'");
      for (size_t k = 0; k < net.levels.size(); ++k)
        if (net.levels[k].name == level.name) {
          const YAML::Mark m = name_nodes[k].Mark();
          rd_.pos().fail(name.value, "duplicate level name '" + level.name + "'" +
                                         (m.is_null() ? std::string()
                                                      : " (first used on line " + std::to_string(m.line + 1) + ")"));
        }
      name_nodes.push_back(name.value);
      const std::string what = i == 0 ? "nodes per " + level.name + " switch group"
                                      : "'" + net.levels[i - 1].name + "' groups per " + level.name + " switch group";
      if (const Field* c = v.find("children")) {
        level.children = static_cast<int>(rd_.integer(*c, 1, kMaxDevices, what));
        if (is_top) top_children = c;
      } else if (!is_top) {
        v.need("children", what);
      }
      level.latency = rd_.duration(v.need("latency",
                                          "the latency of one switch traversal, "
                                          "e.g. '130 ns'"));
      if (const Field* o = v.find("oversubscription")) {
        if (is_top)
          rd_.pos().fail(o->key_node, "'" + o->path + "': the top level '" + level.name +
                                          "' has no uplinks, so it cannot be oversubscribed; "
                                          "set oversubscription on the levels below it");
        level.oversubscription = rd_.positive_number(*o, "downlink / uplink bandwidth");
      }
      if (const Field* r = v.find("rail_optimized")) {
        level.rail_optimized = rd_.boolean(*r);
        if (level.rail_optimized && i != 0)
          rd_.pos().fail(r->value, "'" + r->path +
                                       "': only the first level can be "
                                       "rail-optimized (rails are the devices' local indices)");
        if (level.rail_optimized && is_top && s_.devices_per_node > 1)
          rd_.pos().fail(r->value, "'" + r->path +
                                       "': a rail-optimized level needs a level "
                                       "above it to join the rails, or devices on different rails "
                                       "could not reach each other");
      }
      net.levels.push_back(level);
    }
    // Capacity: the top level's children, when given, bound how many nodes fit.
    long long capacity = 1;
    std::string product;
    for (const FatTreeLevel& l : net.levels) {
      if (l.children == 0) {
        capacity = -1;
        break;
      }
      capacity = std::min<long long>(capacity * l.children, kMaxDevices + 1);
      product += (product.empty() ? "" : " x ") + l.name + " " + std::to_string(l.children);
    }
    if (capacity >= 0 && s_.num_nodes > capacity) {
      const std::string what = "nodes = " + std::to_string(s_.num_nodes) +
                               " exceeds the capacity of the fat tree: " + std::to_string(capacity) + " nodes (" +
                               product + ")";
      if (nodes_field) rd_.pos().fail(nodes_field->value, what);
      rd_.pos().fail(top_children ? top_children->value : top.node(), what);
    }
    s_.has_network = true;
  }

  void read_collectives(const Field& f) {
    const MapView cv(rd_.pos(), f, schemas().collectives,
                     "a mapping with the keys model, channels, fabric_efficiency, network_efficiency, nvls, "
                     "intra_latency, inter_latency, ...");
    CollectiveTiming& c = s_.collectives;
    if (const Field* m = cv.find("model")) {
      const std::string v = rd_.name(*m);
      if (v == "nccl")
        c.model = CollectiveTimingModel::nccl;
      else if (v == "schedule")
        c.model = CollectiveTimingModel::schedule;
      else
        rd_.pos().fail(m->value, "'" + m->path + "' must be nccl (NCCL's channels, algorithms and protocols) or " +
                                     "schedule (point-to-point schedules on the network graph), got '" + v + "'");
    }
    if (const Field* k = cv.find("channels"))
      c.channels = static_cast<int>(rd_.integer(*k, 1, 64, "channels per collective, as NCCL_MAX_NCHANNELS"));
    // NCCL_MIN_CTAS and NCCL_MAX_CTAS (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS before NCCL 2.17):
    // NCCL adds channels up to the minimum and drops them down to the maximum after its search, so
    // a large call runs `channels` clamped to them.
    const Field* min_k = cv.find("min_channels");
    const Field* max_k = cv.find("max_channels");
    const int min_channels =
        min_k ? static_cast<int>(rd_.integer(*min_k, 1, 64, "channels at least, as NCCL_MIN_CTAS")) : 0;
    const int max_channels =
        max_k ? static_cast<int>(rd_.integer(*max_k, 1, 64, "channels at most, as NCCL_MAX_CTAS")) : 0;
    if (min_k && max_k && min_channels > max_channels)
      rd_.pos().fail(min_k->value, "'collectives.min_channels' (" + std::to_string(min_channels) +
                                       ") is above 'collectives.max_channels' (" + std::to_string(max_channels) +
                                       "), which NCCL refuses too: lower the one or raise the other");
    if (min_channels > 0) c.channels = std::max(c.channels, min_channels);
    if (max_channels > 0) c.channels = std::min(c.channels, max_channels);
    auto fraction = [&](const char* key, double& out) {
      if (const Field* k = cv.find(key)) {
        out = rd_.positive_number(*k, "a fraction of the hardware bandwidth, at most 1");
        if (out > 1)
          rd_.pos().fail(k->value, "'" + k->path + "' must be at most 1 (a fraction of the hardware " +
                                       "bandwidth), got " + rd_.scalar(*k, ""));
      }
    };
    fraction("fabric_efficiency", c.fabric_efficiency);
    fraction("network_efficiency", c.network_efficiency);
    fraction("alltoall_efficiency", c.alltoall_efficiency);
    fraction("alltoall_network_efficiency", c.alltoall_network_efficiency);
    fraction("nvls_efficiency", c.nvls_efficiency);
    fraction("nvls_tree_efficiency", c.nvls_tree_efficiency);
    fraction("nvls_tree_network_efficiency", c.nvls_tree_network_efficiency);
    if (const Field* k = cv.find("ring_loop_gap")) {
      c.ring_loop_gap = rd_.number(*k, "steps of a ring's loop, 0 or more");
      if (!(c.ring_loop_gap >= 0 && c.ring_loop_gap <= 64))
        rd_.pos().fail(k->value,
                       "'" + k->path + "' must be from 0 to 64 (steps of a ring's loop), got " + rd_.scalar(*k, ""));
    }
    if (const Field* k = cv.find("nvls")) {
      c.nvls = rd_.boolean(*k);
      if (c.nvls && s_.fabric.type != FabricType::switched)
        rd_.pos().fail(k->value,
                       "'" + k->path + "': NVLS reduces inside an NVSwitch; node.fabric.type must be " + "switch");
    }
    // One bandwidth for every node count, or three: groups on 1, 2 and more nodes.
    auto per_node_count = [&](const char* key, std::array<double, 3>& out, const char* example) {
      const Field* k = cv.find(key);
      if (!k) return;
      if (k->value.IsSequence()) {
        if (k->value.size() != 3)
          rd_.pos().fail(k->value, "'" + k->path + "' must be one bandwidth or a list of three (groups on 1, 2 and " +
                                       "more nodes, e.g. " + example + "), got a list of " +
                                       std::to_string(k->value.size()));
        for (size_t i = 0; i < 3; ++i)
          out[i] = rd_.bandwidth(Field{"", k->value[i], k->value[i], k->path + "[" + std::to_string(i) + "]"});
      } else {
        out.fill(rd_.bandwidth(*k));
      }
    };
    per_node_count("ll_max_bandwidth", c.ll_max_bandwidth, "[141 GB/s, 45 GB/s, 35 GB/s]");
    per_node_count("tree_channel_bandwidth", c.tree_channel_bandwidth, "[38.7 GB/s, 41.4 GB/s, 36 GB/s]");
    per_node_count("tree_ll128_channel_bandwidth", c.tree_ll128_channel_bandwidth, "[36.7 GB/s, 36.7 GB/s, 29 GB/s]");
    auto latency = [&](const char* key, Time& out) {
      if (const Field* k = cv.find(key)) {
        out = rd_.duration(*k);
        if (out > Time::ms(100))
          rd_.pos().fail(k->value,
                         "'" + k->path + "' must be at most 100 ms per hop, got '" + rd_.scalar(*k, "") + "'");
      }
    };
    if (const Field* k = cv.find("channel_network_bandwidth")) c.channel_network_bandwidth = rd_.bandwidth(*k);
    if (const Field* k = cv.find("p2p_channel_network_bandwidth")) c.p2p_channel_network_bandwidth = rd_.bandwidth(*k);
    latency("intra_latency", c.intra_latency);
    latency("inter_latency", c.inter_latency);
    latency("net_overhead", c.net_overhead);
    latency("ll_net_overhead", c.ll_net_overhead);
    latency("peer_latency", c.peer_latency);
    latency("message_latency", c.message_latency);
    latency("nvls_latency", c.nvls_latency);
    latency("simple_latency", c.simple_latency);
    latency("sharp_latency", c.sharp_latency);
    latency("call_overhead", c.call_overhead);
    latency("group_launch", c.group_launch);
    if (const Field* k = cv.find("tuner")) c.tuner = read_tuner(*k);
    // Buffer and chunk sizes, as NCCL's environment variables set them; bounded so that the
    // model's chunk arithmetic stays in range.
    auto buffer = [&](const char* key, uint64_t& out, uint64_t lo, uint64_t hi, const char* what) {
      if (const Field* k = cv.find(key)) {
        out = rd_.bytes(*k);
        if (out < lo || out > hi)
          rd_.pos().fail(k->value, "'" + k->path + "' must be from " + std::to_string(lo >> 10) + " KiB to " +
                                       std::to_string(hi >> 20) + " MiB (" + what + "), got '" + rd_.scalar(*k, "") +
                                       "'");
      }
    };
    buffer("buffer_size", c.buffer_size, 64u << 10, 1024u << 20, "NCCL_BUFFSIZE; NCCL's default is 4 MiB");
    buffer("nvls_chunk_size", c.nvls_chunk_size, 32u << 10, 64u << 20,
           "NCCL_NVLS_CHUNKSIZE; NCCL's default is 128 KiB");
    buffer("nvls_tree_max_chunk_size", c.nvls_tree_max_chunk_size, 32u << 10, 64u << 20,
           "NCCL_NVLSTREE_MAX_CHUNKSIZE; unset, NCCL uses 64 KiB from four nodes");
    buffer("p2p_chunk_size", c.p2p_chunk_size, 16u << 10, 64u << 20,
           "NCCL_P2P_NET_CHUNKSIZE; NCCL's default is 128 KiB");
  }

  Reader rd_;
  TopologySpec s_;
};

}  // namespace

const YamlSchema& topology_schema() { return schemas().root; }

SetOptions topology_set_options() {
  SetOptions o;
  o.document = "this topology";
  o.example = "nodes=128 or network.nic_bandwidth=200 Gb/s";
  // A scenario's --set topology.nodes=128, or topology_set.nodes=128 as its file's key is named.
  o.document_prefixes = {"topology.", "topology_set."};
  return o;
}

TopologySpec read_topology(const YAML::Node& root, const YamlPositions& positions) {
  return TopologyReader(positions).read(root);
}

}  // namespace ranksim::sim

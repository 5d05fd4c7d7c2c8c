#include "sim/topology.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>
#include <tuple>

#include "sim/check.h"
#include "sim/error.h"
#include "sim/suggest.h"
#include "sim/units.h"

namespace ranksim::sim {
namespace {

constexpr long long kMaxDevices = 1LL << 24;
constexpr int kMaxDevicesPerNode = 1 << 16;
// Explicit fabrics keep a shortest-path tree per local source: devices_per_node^2 entries.
constexpr int kMaxExplicitDevicesPerNode = 1024;
const char* const kDtypes[] = {"f64", "f32", "tf32", "bf16", "f16", "fp8", "i8", "i32", "i64"};
const char* const kFabricTypes[] = {"switch", "ring", "mesh", "links"};

// ---- Suggestions -------------------------------------------------------------------------

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

// ---- Schema: the known keys, shared by validation and by overrides -------------------------

struct Schema {
  std::vector<std::pair<std::string, const Schema*>> keys;  // a mapping with fixed keys
  const Schema* any_key = nullptr;  // a mapping whose keys the user names (device kinds)
  const Schema* items = nullptr;    // a list
  std::vector<std::string> key_names() const {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(k.first);
    return out;
  }
  // nullptr child means a plain value (or a list of plain values).
  bool has_key(std::string_view k, const Schema** child) const {
    for (const auto& [name, sub] : keys)
      if (name == k) {
        *child = sub;
        return true;
      }
    return false;
  }
};

struct Schemas {
  Schema peak_flops, device_kind, device_kinds, local_link, local_links, fabric, node, level,
      levels, network, root;
  Schemas() {
    for (const char* d : kDtypes) peak_flops.keys.push_back({d, nullptr});
    device_kind.keys = {{"peak_flops", &peak_flops},
                        {"memory_bandwidth", nullptr},
                        {"memory", nullptr},
                        {"launch_overhead", nullptr}};
    device_kinds.any_key = &device_kind;
    local_link.keys = {{"between", nullptr}, {"bandwidth", nullptr}, {"latency", nullptr}};
    local_links.items = &local_link;
    fabric.keys = {{"type", nullptr},
                   {"name", nullptr},
                   {"bandwidth", nullptr},
                   {"latency", nullptr},
                   {"links", &local_links}};
    node.keys = {{"devices", nullptr}, {"kind", nullptr}, {"label", nullptr}, {"fabric", &fabric}};
    level.keys = {{"name", nullptr},
                  {"children", nullptr},
                  {"latency", nullptr},
                  {"oversubscription", nullptr},
                  {"rail_optimized", nullptr}};
    levels.items = &level;
    network.keys = {{"nic_bandwidth", nullptr}, {"nic_latency", nullptr}, {"levels", &levels}};
    root.keys = {{"name", nullptr},         {"description", nullptr}, {"nodes", nullptr},
                 {"device_kinds", &device_kinds}, {"node", &node},        {"network", &network}};
  }
  Schemas(const Schemas&) = delete;
  Schemas& operator=(const Schemas&) = delete;
};

const Schemas& schemas() {
  static const Schemas s;
  return s;
}

// ---- Positions and errors ------------------------------------------------------------------

// Where a YAML node came from: the file (its mark), or an override string (nodes an override
// created or parsed carry no useful mark of their own, so they are registered here).
class Positions {
 public:
  explicit Positions(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  // Registers n and everything below it as coming from override `file`, whose value text starts
  // at 0-based column value_col.
  void add_override_tree(const YAML::Node& n, const std::string& file, size_t value_col) {
    const YAML::Mark m = n.Mark();
    const size_t col = value_col + (!m.is_null() && m.line == 0 ? static_cast<size_t>(m.column) : 0);
    origins_.push_back({n, file, static_cast<int>(col) + 1});
    if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) {
        add_override_tree(it->first, file, value_col);
        add_override_tree(it->second, file, value_col);
      }
    } else if (n.IsSequence()) {
      for (auto it = n.begin(); it != n.end(); ++it) add_override_tree(*it, file, value_col);
    }
  }
  void add_override_node(const YAML::Node& n, const std::string& file, size_t col) {
    origins_.push_back({n, file, static_cast<int>(col) + 1});
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const {
    for (const Origin& o : origins_)
      if (o.node.is(at)) throw ConfigError(o.file, 1, o.column, what);
    const YAML::Mark m = at.Mark();
    if (m.is_null()) throw ConfigError(source_, 0, 0, what);
    throw ConfigError(source_, m.line + 1, m.column + 1, what);
  }

 private:
  struct Origin {
    YAML::Node node;
    std::string file;
    int column;  // 1-based, in the override string
  };
  std::string source_;
  std::vector<Origin> origins_;
};

// ---- Overrides -------------------------------------------------------------------------------

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string trim_copy(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// A map's entry by exact key (first match), or an undefined node.
YAML::Node map_entry(const YAML::Node& map, std::string_view key) {
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

std::vector<std::string> map_keys(const YAML::Node& map) {
  std::vector<std::string> out;
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar()) out.push_back(it->first.Scalar());
  return out;
}

[[noreturn]] void override_error(const std::string& file, size_t col0, const std::string& what) {
  throw ConfigError(file, 1, static_cast<int>(col0) + 1, what);
}

void apply_override(YAML::Node& root, const std::string& text, Positions& pos) {
  const std::string file = "override '" + text + "'";
  auto fail_at = [&file](size_t col0, const std::string& what) {
    override_error(file, col0, what);
  };
  const size_t eq = text.find('=');
  if (eq == std::string::npos || trim_copy(std::string_view(text).substr(0, eq)).empty())
    fail_at(0, "expected key=value, such as nodes=128 or network.nic_bandwidth=200 Gb/s");

  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    fail_at(eq + 1 + static_cast<size_t>(std::max(0, e.mark.column)),
            "malformed value: " + e.msg);
  }
  if (value.IsNull()) fail_at(eq + 1, "missing value after '='");

  // Split the key at dots, remembering where each component starts.
  std::vector<std::pair<std::string, size_t>> parts;
  for (size_t b = 0; b <= eq;) {
    size_t e = text.find('.', b);
    if (e == std::string::npos || e > eq) e = eq;
    std::string part = trim_copy(std::string_view(text).substr(b, e - b));
    if (part.empty()) fail_at(b, "empty key component in '" + text.substr(0, eq) + "'");
    parts.emplace_back(std::move(part), b);
    b = e + 1;
  }

  YAML::Node cur;
  cur.reset(root);
  const Schema* sc = &schemas().root;
  std::string path;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& [part, col] = parts[i];
    const bool last = i + 1 == parts.size();
    const std::string here = path.empty() ? "the top level" : "'" + path + "'";
    if (sc == nullptr) fail_at(col, here + " is a single value; it has no key '" + part + "'");

    if (sc->items != nullptr) {
      if (!cur.IsSequence())
        fail_at(col, here + " is not a list in this topology, so it has no element '" + part + "'");
      size_t index = cur.size();
      std::vector<std::string> names;
      for (size_t k = 0; k < cur.size(); ++k) {
        const YAML::Node name = cur[k].IsMap() ? map_entry(cur[k], "name") : YAML::Node();
        if (name.IsDefined() && name.IsScalar()) {
          names.push_back(name.Scalar());
          if (name.Scalar() == part && index == cur.size()) index = k;
        }
      }
      if (all_digits(part)) {
        index = part.size() > 6 ? cur.size() : std::stoul(part);
        if (index >= cur.size())
          fail_at(col, "index " + part + " is out of range: " + here + " has " +
                           std::to_string(cur.size()) + " elements");
      } else if (index == cur.size()) {
        fail_at(col, here + " has no element named '" + part + "'" + did_you_mean(part, names) +
                         " (elements: " + join(names) + "; an index such as 0 also works)");
      }
      path += (path.empty() ? "" : ".") + part;
      if (last) {
        cur[index] = value;
        pos.add_override_tree(value, file, eq + 1);
        return;
      }
      YAML::Node next = cur[index];
      cur.reset(next);
      sc = sc->items;
      continue;
    }

    if (sc->any_key != nullptr) {
      const std::vector<std::string> keys = cur.IsMap() ? map_keys(cur) : std::vector<std::string>{};
      if (std::find(keys.begin(), keys.end(), part) == keys.end())
        fail_at(col, here + " has no entry '" + part + "'" + did_you_mean(part, keys) +
                         (keys.empty() ? std::string() : " (entries: " + join(keys) + ")"));
    } else {
      const Schema* child = nullptr;
      if (!sc->has_key(part, &child)) {
        fail_at(col, "unknown key '" + part + "' in " + here + did_you_mean(part, sc->key_names()) +
                         " (known keys: " + join(sc->key_names()) + ")");
      }
    }
    if (!cur.IsMap() && !cur.IsNull())
      fail_at(col, here + " is " + describe(cur) + ", not a mapping, so it has no key '" + part + "'");
    const Schema* child = sc->any_key;
    if (child == nullptr) sc->has_key(part, &child);
    path += (path.empty() ? "" : ".") + part;
    if (last) {
      cur[part] = value;
      pos.add_override_tree(value, file, eq + 1);
      return;
    }
    YAML::Node next = map_entry(cur, part);
    if (!next.IsDefined() || next.IsNull()) {
      if (child != nullptr && child->items != nullptr)
        fail_at(col, "'" + path + "' is not in this topology; an override cannot create list "
                     "elements (set the whole list instead)");
      YAML::Node created(YAML::NodeType::Map);
      cur[part] = created;
      pos.add_override_node(created, file, col);
      next.reset(created);
    }
    cur.reset(next);
    sc = child;
  }
}

// ---- Reading validated values ---------------------------------------------------------------

struct Field {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  std::string path;  // "node.fabric.bandwidth"
};

// A mapping checked against its schema: no unknown keys (with a suggestion), no key twice.
class MapView {
 public:
  // A mapping in the value of field f (a null value is reported at f's key).
  MapView(const Positions& pos, const Field& f, const Schema& schema, const std::string& expected)
      : MapView(pos, f.value, f.path, schema, expected, &f.key_node) {}
  MapView(const Positions& pos, const YAML::Node& node, std::string path, const Schema& schema,
          const std::string& expected, const YAML::Node* null_at = nullptr)
      : pos_(pos), node_(node), path_(std::move(path)) {
    const std::string where = path_.empty() ? "the topology" : "'" + path_ + "'";
    if (!node.IsMap())
      pos.fail(node.IsNull() && null_at != nullptr ? *null_at : node,
               where + " must be " + expected + ", got " + describe(node));
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar())
        pos.fail(it->first, "keys in " + where + " must be plain names, got " + describe(it->first));
      const std::string& key = it->first.Scalar();
      if (schema.any_key == nullptr) {
        const Schema* child = nullptr;
        if (!schema.has_key(key, &child))
          pos.fail(it->first, "unknown key '" + key + "' in " + where +
                                  did_you_mean(key, schema.key_names()) +
                                  " (known keys: " + join(schema.key_names()) + ")");
      }
      for (const Field& f : fields_) {
        if (f.key == key) {
          const YAML::Mark m = f.key_node.Mark();
          pos.fail(it->first, "duplicate key '" + key + "' in " + where +
                                  (m.is_null() ? std::string()
                                               : " (first given on line " +
                                                     std::to_string(m.line + 1) + ")"));
        }
      }
      fields_.push_back(
          {key, it->first, it->second, path_.empty() ? key : path_ + "." + key});
    }
  }

  const Field* find(std::string_view key) const {
    for (const Field& f : fields_)
      if (f.key == key) return &f;
    return nullptr;
  }
  const Field& need(std::string_view key, const std::string& expected) const {
    if (const Field* f = find(key)) return *f;
    pos_.fail(node_, (path_.empty() ? std::string("the topology") : "'" + path_ + "'") +
                         " is missing the key '" + std::string(key) + "' (" + expected + ")");
  }
  const std::vector<Field>& fields() const { return fields_; }
  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }

 private:
  const Positions& pos_;
  YAML::Node node_;
  std::string path_;
  std::vector<Field> fields_;
};

class Reader {
 public:
  explicit Reader(const Positions& pos) : pos_(pos) {}
  const Positions& pos() const { return pos_; }

  const std::string& scalar(const Field& f, const std::string& expected) const {
    if (f.value.IsNull())
      pos_.fail(f.key_node, "'" + f.path + "' has no value; expected " + expected);
    if (!f.value.IsScalar())
      pos_.fail(f.value, "'" + f.path + "' must be " + expected + ", got " + describe(f.value));
    return f.value.Scalar();
  }
  std::string name(const Field& f) const {
    const std::string& s = scalar(f, "a name");
    if (s.empty()) pos_.fail(f.value, "'" + f.path + "' must not be empty");
    return s;
  }
  long long integer(const Field& f, long long lo, long long hi, const std::string& meaning) const {
    const std::string& s = scalar(f, "a whole number (" + meaning + ")");
    long long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == s.data() + s.size() &&
                                                  (v < lo || v > hi)))
      pos_.fail(f.value, "'" + f.path + "' must be between " + std::to_string(lo) + " and " +
                             std::to_string(hi) + " (" + meaning + "), got " + s);
    if (ec != std::errc() || end != s.data() + s.size())
      pos_.fail(f.value, "'" + f.path + "' must be a whole number (" + meaning + "), got '" + s +
                             "'");
    return v;
  }
  double positive_number(const Field& f, const std::string& meaning) const {
    const std::string& s = scalar(f, "a number (" + meaning + ")");
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v))
      pos_.fail(f.value, "'" + f.path + "' must be a number (" + meaning + "), got '" + s + "'");
    if (!(v > 0))
      pos_.fail(f.value, "'" + f.path + "' must be positive (" + meaning + "), got " + s);
    return v;
  }
  bool boolean(const Field& f) const {
    const std::string& s = scalar(f, "true or false");
    if (s == "true") return true;
    if (s == "false") return false;
    pos_.fail(f.value, "'" + f.path + "' must be true or false, got '" + s + "'");
  }
  double bandwidth(const Field& f) const {
    return with_units(f, "a bandwidth such as '450 GB/s'", units::parse_bandwidth);
  }
  Time duration(const Field& f) const {
    return with_units(f, "a duration such as '2 us'", units::parse_duration);
  }
  uint64_t bytes(const Field& f) const {
    return with_units(f, "a size such as '80 GiB'", units::parse_bytes);
  }
  double flop_rate(const Field& f) const {
    return with_units(f, "a FLOP rate such as '989.4 TFLOP/s'", units::parse_flop_rate);
  }

 private:
  template <class Parse>
  auto with_units(const Field& f, const std::string& expected, Parse parse) const
      -> decltype(parse(std::string_view())) {
    const std::string& s = scalar(f, expected);
    try {
      return parse(s);
    } catch (const units::UnitError& e) {
      pos_.fail(f.value, "'" + f.path + "': " + e.what());
    }
  }
  const Positions& pos_;
};

bool valid_label(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

const char* fabric_type_name(FabricType t) {
  switch (t) {
    case FabricType::none: return "none";
    case FabricType::switched: return "switch";
    case FabricType::ring: return "ring";
    case FabricType::mesh: return "mesh";
    case FabricType::links: return "links";
  }
  return "?";
}

}  // namespace

// ---- Building a Topology from a validated tree ----------------------------------------------

class TopologyBuilder {
 public:
  TopologyBuilder(const Positions& pos, Topology& t) : rd_(pos), t_(t) {}

  void build(const YAML::Node& root) {
    const Schemas& s = schemas();
    const MapView top(rd_.pos(), root, "", s.root,
                      "a mapping with the keys name, nodes, device_kinds, node and network");
    t_.name_ = rd_.name(top.need("name", "the topology's name"));
    if (const Field* d = top.find("description")) rd_.scalar(*d, "a text");

    const Field* nodes_field = top.find("nodes");
    t_.num_nodes_ = nodes_field ? static_cast<int>(rd_.integer(*nodes_field, 1, kMaxDevices,
                                                               "the number of nodes"))
                                : 1;
    read_kinds(top.need("device_kinds", "a mapping from kind name to its peak_flops, "
                                        "memory_bandwidth, memory and launch_overhead"));
    const Field& node_field = top.need("node", "the node's devices, kind and fabric");
    const MapView node(rd_.pos(), node_field, s.node,
                       "a mapping with the keys devices, kind, label and fabric");
    read_node(node);

    const long long total = static_cast<long long>(t_.num_nodes_) * t_.devices_per_node_;
    if (total > kMaxDevices)
      fail_nodes(nodes_field, top, "the topology would hold " + std::to_string(total) +
                                       " devices; at most " + std::to_string(kMaxDevices) +
                                       " are supported");

    const Field* net = top.find("network");
    if (net != nullptr) read_network(*net, nodes_field, top);

    if (t_.num_nodes_ > 1 && !t_.has_network_)
      fail_nodes(nodes_field, top,
                 "nodes is " + std::to_string(t_.num_nodes_) +
                     " but the topology has no 'network': devices on different nodes could not "
                     "reach each other; add a network section (NICs and fat-tree levels)");
    if (t_.devices_per_node_ > 1 && t_.fabric_.type == FabricType::none && !t_.has_network_)
      rd_.pos().fail(node.node(), "the node holds " + std::to_string(t_.devices_per_node_) +
                                      " devices but has no fabric and the topology has no "
                                      "network: its devices could not reach each other; add "
                                      "node.fabric (e.g. type: switch)");
    lay_out();
  }

 private:
  [[noreturn]] void fail_nodes(const Field* nodes_field, const MapView& top,
                               const std::string& what) {
    if (nodes_field) rd_.pos().fail(nodes_field->value, what);
    rd_.pos().fail(top.node(), what);
  }

  void read_kinds(const Field& f) {
    const Schemas& s = schemas();
    const MapView kinds(rd_.pos(), f, s.device_kinds,
                        "a mapping from kind name to its spec");
    if (kinds.fields().empty())
      rd_.pos().fail(f.key_node, "'device_kinds' is empty; define at least one device kind");
    for (const Field& k : kinds.fields()) {
      DeviceKind kind;
      kind.name = k.key;
      const MapView spec(rd_.pos(), k, s.device_kind,
                         "a mapping with the keys peak_flops, memory_bandwidth, memory and "
                         "launch_overhead");
      const Field& peaks = spec.need("peak_flops", "peak FLOP/s per dtype, e.g. "
                                                   "{bf16: 989.4 TFLOP/s}");
      const MapView pv(rd_.pos(), peaks, s.peak_flops,
                       "a mapping from dtype to FLOP rate, e.g. {bf16: 989.4 TFLOP/s}");
      if (pv.fields().empty())
        rd_.pos().fail(peaks.key_node, "'" + peaks.path + "' is empty; give the peak FLOP/s of "
                                       "at least one dtype");
      for (const Field& p : pv.fields()) kind.peak_flops[p.key] = rd_.flop_rate(p);
      kind.memory_bandwidth =
          rd_.bandwidth(spec.need("memory_bandwidth", "a bandwidth such as '3.35 TB/s'"));
      kind.memory_bytes = rd_.bytes(spec.need("memory", "a size such as '80 GiB'"));
      if (const Field* lo = spec.find("launch_overhead")) kind.launch_overhead = rd_.duration(*lo);
      t_.kinds_.push_back(std::move(kind));
    }
  }

  void read_node(const MapView& node) {
    const Schemas& s = schemas();
    t_.devices_per_node_ = static_cast<int>(
        rd_.integer(node.need("devices", "the number of devices per node"), 1, kMaxDevicesPerNode,
                    "devices per node"));
    const Field& kind = node.need("kind", "the device kind, a key of device_kinds");
    const std::string kind_name = rd_.name(kind);
    std::vector<std::string> names;
    for (const DeviceKind& k : t_.kinds_) names.push_back(k.name);
    const auto it = std::find(names.begin(), names.end(), kind_name);
    if (it == names.end())
      rd_.pos().fail(kind.value, "'" + kind.path + "' names the unknown device kind '" +
                                     kind_name + "'" + did_you_mean(kind_name, names) +
                                     " (device_kinds defines: " + join(names) + ")");
    kind_index_ = static_cast<int>(it - names.begin());
    t_.device_label_ = "dev";
    if (const Field* label = node.find("label")) {
      t_.device_label_ = rd_.name(*label);
      if (!valid_label(t_.device_label_))
        rd_.pos().fail(label->value, "'" + label->path + "' must be letters, digits, '_' or "
                                     "'-', got '" + t_.device_label_ + "'");
    }
    if (const Field* fab = node.find("fabric")) {
      const MapView fv(rd_.pos(), *fab, s.fabric,
                       "a mapping with the keys type, name, bandwidth, latency (and links)");
      read_fabric(fv);
    }
  }

  void read_fabric(const MapView& fv) {
    Fabric& fab = t_.fabric_;
    const Field& type = fv.need("type", "one of: switch, ring, mesh, links");
    const std::string tname = rd_.name(type);
    const std::vector<std::string> types(std::begin(kFabricTypes), std::end(kFabricTypes));
    if (tname == "switch") fab.type = FabricType::switched;
    else if (tname == "ring") fab.type = FabricType::ring;
    else if (tname == "mesh") fab.type = FabricType::mesh;
    else if (tname == "links") fab.type = FabricType::links;
    else
      rd_.pos().fail(type.value, "unknown fabric type '" + tname + "'" +
                                     did_you_mean(tname, types) + " (expected one of: " +
                                     join(types) + ")");
    fab.name = tname;
    if (const Field* nf = fv.find("name")) {
      fab.name = rd_.name(*nf);
      if (!valid_label(fab.name))
        rd_.pos().fail(nf->value, "'" + nf->path + "' must be letters, digits, '_' or '-', got '" +
                                      fab.name + "'");
    }
    const int n = t_.devices_per_node_;
    const Field* links = fv.find("links");
    if (links != nullptr && fab.type != FabricType::links)
      rd_.pos().fail(links->key_node, "'" + links->path + "' is only used with type: links "
                                      "(this fabric is type: " + tname + ")");
    if (fab.type == FabricType::links) {
      // Fabric-level bandwidth and latency are defaults for the listed links.
      const Field* bw = fv.find("bandwidth");
      const Field* lat = fv.find("latency");
      if (bw) fab.bandwidth = rd_.bandwidth(*bw);
      if (lat) fab.latency = rd_.duration(*lat);
      read_links(fv.need("links", "a list of {between: [a, b], bandwidth, latency}"), bw != nullptr,
                 lat != nullptr);
    } else {
      fab.bandwidth = rd_.bandwidth(fv.need(
          "bandwidth", fab.type == FabricType::switched
                           ? "the bandwidth per device and direction, e.g. '450 GB/s'"
                           : "the bandwidth of each link and direction, e.g. '50 GB/s'"));
      fab.latency = rd_.duration(fv.need(
          "latency", fab.type == FabricType::switched
                         ? "device-to-device latency through the switch, e.g. '500 ns'"
                         : "the latency of each link, e.g. '1 us'"));
      if (fab.type != FabricType::switched && n < 2)
        rd_.pos().fail(type.value, "a " + tname + " needs at least 2 devices per node, but "
                                   "node.devices is " + std::to_string(n));
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
    if (fab.type != FabricType::switched && n > kMaxExplicitDevicesPerNode)
      rd_.pos().fail(type.value, "explicit-link fabrics support at most " +
                                     std::to_string(kMaxExplicitDevicesPerNode) +
                                     " devices per node; use type: switch");
    if (fab.type != FabricType::switched) check_connected(fv);
  }

  void read_links(const Field& f, bool default_bw, bool default_lat) {
    Fabric& fab = t_.fabric_;
    const int n = t_.devices_per_node_;
    if (!f.value.IsSequence())
      rd_.pos().fail(f.value.IsNull() ? f.key_node : f.value,
                     "'" + f.path + "' must be a list of {between: [a, b], bandwidth, latency}, "
                     "got " + describe(f.value));
    if (f.value.size() == 0)
      rd_.pos().fail(f.value, "'" + f.path + "' is empty; list at least one link");
    std::vector<std::pair<int, int>> seen;
    std::vector<YAML::Node> seen_at;
    for (size_t i = 0; i < f.value.size(); ++i) {
      const YAML::Node item = f.value[i];
      const std::string path = f.path + "[" + std::to_string(i) + "]";
      const MapView lv(rd_.pos(), item, path, schemas().local_link,
                       "a mapping {between: [a, b], bandwidth, latency}");
      const Field& between = lv.need("between", "the two local device indices, e.g. [0, 1]");
      if (!between.value.IsSequence() || between.value.size() != 2)
        rd_.pos().fail(between.value.IsNull() ? between.key_node : between.value,
                       "'" + between.path + "' must be a list of two local device indices such "
                       "as [0, 1], got " + describe(between.value));
      int ends[2];
      for (size_t e = 0; e < 2; ++e) {
        const Field ef{"", between.value[e], between.value[e],
                       between.path + "[" + std::to_string(e) + "]"};
        ends[e] = static_cast<int>(
            rd_.integer(ef, 0, n - 1, "a local device index below node.devices = " +
                                          std::to_string(n)));
      }
      if (ends[0] == ends[1])
        rd_.pos().fail(between.value, "'" + between.path + "' links device " +
                                          std::to_string(ends[0]) + " to itself; a link joins "
                                          "two different devices");
      const std::pair<int, int> key{std::min(ends[0], ends[1]), std::max(ends[0], ends[1])};
      for (size_t k = 0; k < seen.size(); ++k) {
        if (seen[k] == key) {
          const YAML::Mark m = seen_at[k].Mark();
          rd_.pos().fail(between.value,
                         "duplicate link between devices " + std::to_string(key.first) + " and " +
                             std::to_string(key.second) +
                             (m.is_null() ? std::string()
                                          : " (first listed on line " +
                                                std::to_string(m.line + 1) + ")") +
                             "; links are full duplex, list each pair once");
        }
      }
      seen.push_back(key);
      seen_at.push_back(between.value);
      Fabric::LocalLink link{ends[0], ends[1], fab.bandwidth, fab.latency};
      if (const Field* bw = lv.find("bandwidth")) link.bandwidth = rd_.bandwidth(*bw);
      else if (!default_bw) lv.need("bandwidth", "the link's bandwidth per direction, or set "
                                                 "node.fabric.bandwidth as the default");
      if (const Field* lat = lv.find("latency")) link.latency = rd_.duration(*lat);
      else if (!default_lat) lv.need("latency", "the link's latency, or set "
                                                "node.fabric.latency as the default");
      fab.links.push_back(link);
    }
  }

  void check_connected(const MapView& fv) {
    const int n = t_.devices_per_node_;
    std::vector<int> comp(static_cast<size_t>(n), -1);
    std::vector<std::vector<int>> adj(static_cast<size_t>(n));
    for (const Fabric::LocalLink& l : t_.fabric_.links) {
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
    rd_.pos().fail(links ? links->value : fv.node(),
                   "device 0 cannot reach device " + std::to_string(other) +
                       ": the fabric's links leave the node's devices in " +
                       std::to_string(ncomp) + " disconnected groups (" + join(groups, " and ") +
                       "); add links between them or use type: switch");
  }

  void read_network(const Field& f, const Field* nodes_field, const MapView& top) {
    const Schemas& s = schemas();
    const MapView nv(rd_.pos(), f, s.network,
                     "a mapping with the keys nic_bandwidth, nic_latency and levels");
    Network& net = t_.network_;
    net.nic_bandwidth =
        rd_.bandwidth(nv.need("nic_bandwidth", "the NIC bandwidth per device, e.g. '400 Gb/s'"));
    net.nic_latency =
        rd_.duration(nv.need("nic_latency", "the latency at each end of a transfer, e.g. "
                                            "'300 ns'"));
    const Field& lv = nv.need("levels", "the fat-tree levels, leaf first");
    if (!lv.value.IsSequence())
      rd_.pos().fail(lv.value.IsNull() ? lv.key_node : lv.value,
                     "'" + lv.path + "' must be a list of fat-tree levels (leaf first), got " +
                         describe(lv.value));
    if (lv.value.size() == 0)
      rd_.pos().fail(lv.value, "'" + lv.path + "' is empty; give at least one level (a single "
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
        rd_.pos().fail(name.value, "'" + name.path + "' must be letters, digits, '_' or '-', "
                                   "got '" + level.name + "'");
      for (size_t k = 0; k < net.levels.size(); ++k)
        if (net.levels[k].name == level.name) {
          const YAML::Mark m = name_nodes[k].Mark();
          rd_.pos().fail(name.value, "duplicate level name '" + level.name + "'" +
                                         (m.is_null() ? std::string()
                                                      : " (first used on line " +
                                                            std::to_string(m.line + 1) + ")"));
        }
      name_nodes.push_back(name.value);
      const std::string what = i == 0 ? "nodes per " + level.name + " switch group"
                                      : "'" + net.levels[i - 1].name + "' groups per " +
                                            level.name + " switch group";
      if (const Field* c = v.find("children")) {
        level.children = static_cast<int>(rd_.integer(*c, 1, kMaxDevices, what));
        if (is_top) top_children = c;
      } else if (!is_top) {
        v.need("children", what);
      }
      level.latency = rd_.duration(v.need("latency", "the latency of one switch traversal, "
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
          rd_.pos().fail(r->value, "'" + r->path + "': only the first level can be "
                                   "rail-optimized (rails are the devices' local indices)");
        if (level.rail_optimized && is_top && t_.devices_per_node_ > 1)
          rd_.pos().fail(r->value, "'" + r->path + "': a rail-optimized level needs a level "
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
    if (capacity >= 0 && t_.num_nodes_ > capacity) {
      const std::string what = "nodes = " + std::to_string(t_.num_nodes_) +
                               " exceeds the capacity of the fat tree: " +
                               std::to_string(capacity) + " nodes (" + product + ")";
      if (nodes_field) rd_.pos().fail(nodes_field->value, what);
      rd_.pos().fail(top_children ? top_children->value : top.node(), what);
    }
    t_.has_network_ = true;
  }

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
      dev.name = "node" + std::to_string(dev.node) + "." + t.device_label_ +
                 std::to_string(dev.local_index);
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
      const int kind = add_kind(fab.name, std::string("device -> device (") +
                                              fabric_type_name(fab.type) + ")");
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
      t.level_groups_[static_cast<size_t>(i)] =
          i == 0 && net.levels[0].rail_optimized ? blocks * n : blocks;
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
    for (int d = 0; d < ndev; ++d) {
      const int g = t.level_vertex_base_[0] + t.level1_group(d);
      add_link(d, g, net.nic_bandwidth, net.nic_latency + net.levels[0].latency, nic_up);
      add_link(g, d, net.nic_bandwidth, net.nic_latency, nic_down);
    }
    // Aggregate bandwidth below each group (what its NICs can inject) and its uplink bandwidth.
    std::vector<double> nic_sum(static_cast<size_t>(t.level_groups_[0]), 0.0);
    for (int d = 0; d < ndev; ++d) nic_sum[static_cast<size_t>(t.level1_group(d))] += net.nic_bandwidth;
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

  Reader rd_;
  Topology& t_;
  int kind_index_ = 0;
};

// ---- Topology --------------------------------------------------------------------------------

Topology Topology::parse(const std::string& yaml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  Positions pos(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source_name, e.mark.line + 1, e.mark.column + 1, "malformed YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source_name, 0, 0, std::string("malformed YAML: ") + e.what());
  }
  if (root.IsNull())
    throw ConfigError(source_name, 1, 1, "the topology is empty; expected a mapping with the keys "
                                         "name, nodes, device_kinds, node and network");
  if (root.IsMap())
    for (const std::string& o : overrides) apply_override(root, o, pos);
  Topology t;
  t.source_ = source_name;
  try {
    TopologyBuilder(pos, t).build(root);
  } catch (const YAML::Exception& e) {
    // Validation reads only checked node types; this is a backstop for yaml-cpp surprises.
    throw ConfigError(source_name, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  return t;
}

Topology Topology::load_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot open topology file '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read topology file '" + path + "'");
  return parse(text.str(), path, overrides);
}

const Device& Topology::device(int id) const {
  RANKSIM_CHECK(id >= 0 && id < num_devices(), "device id out of range");
  return devices_[static_cast<size_t>(id)];
}

const DeviceKind& Topology::kind_of(int dev) const {
  return kinds_[static_cast<size_t>(device(dev).kind)];
}

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
      return name + std::to_string(g / devices_per_node_) + ".rail" +
             std::to_string(g % devices_per_node_);
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
  return network_.levels[0].rail_optimized ? block * devices_per_node_ + dev % devices_per_node_
                                           : block;
}

int Topology::group_at(int level, int dev) const {
  if (level == 0) return level1_group(dev);
  if (level + 1 == static_cast<int>(level_block_.size())) return 0;
  return (dev / devices_per_node_) / level_block_[static_cast<size_t>(level)];
}

void Topology::append_local_links(int node, int src_local, int dst_local,
                                  std::vector<int>& out) const {
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
  for (int i = 0; i < lca; ++i)
    out.push_back(level_link_base_[static_cast<size_t>(i)] + 2 * group_at(i, src));
  for (int i = lca - 1; i >= 0; --i)
    out.push_back(level_link_base_[static_cast<size_t>(i)] + 2 * group_at(i, dst) + 1);
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

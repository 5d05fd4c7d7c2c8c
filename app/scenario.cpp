#include "app/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <ostream>
#include <sstream>
#include <tuple>

#include <unistd.h>

#include "app/bench.h"
#include "app/nccl_table.h"
#include "app/model_workload.h"
#include "app/devices.h"
#include "app/report_html.h"
#include "cp/context_parallel.h"
#include "cp/partition.h"
#include "runtime/tensor/cost.h"
#include "runtime/device/device.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/suggest.h"
#include "sim/topology.h"
#include "sim/units.h"
#include "models/run.h"
#include "models/validation.h"
#include "tp/mlp.h"
#include "tp/rank_grid.h"

namespace ranksim::app {

namespace {

namespace fs = std::filesystem;

// ---- The known keys (shared by validation and by --set) ----------------------------------

struct KeySchema {
  std::map<std::string, const KeySchema*> keys;  // nullptr: a value (or a list of values)
};

const KeySchema& root_schema() {
  static const KeySchema parallel{{{"tp", nullptr}, {"cp", nullptr}, {"pp", nullptr}, {"dp", nullptr},
                                    {"cp_comm", nullptr}, {"hierarchical_cp", nullptr}, {"order", nullptr}}};
  static const KeySchema model{{{"kind", nullptr}, {"dtype", nullptr}, {"format", nullptr}, {"mask", nullptr},
                                 {"window", nullptr}, {"weights", nullptr}, {"seed", nullptr}, {"vocab", nullptr},
                                 {"hidden", nullptr}, {"heads", nullptr}, {"head_dim", nullptr}, {"ffn", nullptr},
                                 {"layers", nullptr}}};
  static const KeySchema optimizer{{{"kind", nullptr}, {"lr", nullptr}, {"betas", nullptr}, {"eps", nullptr},
                                     {"weight_decay", nullptr}}};
  static const KeySchema train{{{"steps", nullptr}, {"micro_batches", nullptr}, {"optimizer", &optimizer},
                                 {"clip_grad_norm", nullptr}, {"zero", nullptr}, {"checkpoint", nullptr},
                                 {"shards", nullptr}}};
  static const KeySchema encoder{{{"tp", nullptr}, {"dp", nullptr}, {"features", nullptr}, {"ffn", nullptr}}};
  // batch is a file name or a synthetic batch's shape: --set batch.rows=16 reaches into the latter
  static const KeySchema batch{{{"lengths", nullptr}, {"rows", nullptr}, {"seq_len", nullptr}}};
  static const KeySchema baseline{{{"tp", nullptr}, {"cp", nullptr}}};
  static const KeySchema validate{{{"baseline", &baseline}, {"logits_atol", nullptr}, {"logits_share", nullptr},
                                    {"loss_rel", nullptr}, {"grad_norm_diff", nullptr}, {"acceptable_share", nullptr}}};
  static const KeySchema collectives{{{"op", nullptr}, {"sizes", nullptr}, {"dtype", nullptr}}};
  static const KeySchema steps{{{"repeat", nullptr}, {"do", nullptr}}};
  static const KeySchema workload{{{"collectives", &collectives}, {"steps", &steps}}};
  static const KeySchema outputs{{{"trace", nullptr}, {"json", nullptr}, {"report", nullptr}}};
  static const KeySchema root{{{"name", nullptr},
                               {"description", nullptr},
                               {"topology", nullptr},
                               {"topology_set", nullptr},
                               {"ranks", nullptr},
                               {"parallel", &parallel},
                               {"algorithm", nullptr},
                               {"data", nullptr},
                               {"workload", &workload},
                               {"model", &model},
                               {"encoder", &encoder},
                               {"batch", &batch},
                               {"dump", nullptr},
                               {"validate", &validate},
                               {"train", &train},
                               {"checks", nullptr},
                               {"outputs", &outputs}}};
  return root;
}

std::vector<std::string> names_of(const KeySchema& s) {
  std::vector<std::string> out;
  for (const auto& [k, v] : s.keys) out.push_back(k);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

// ---- Reading with positions ---------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  void note_override(const YAML::Node& value, const std::string& text, int column) {
    origins_.push_back({value, text, column});
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const {
    for (const auto& o : origins_)
      if (o.node.is(at)) throw ConfigError("override '" + o.text + "'", 1, o.column, what);
    const YAML::Mark m = at.Mark();
    if (m.is_null()) throw ConfigError(file_, 0, 0, what);
    throw ConfigError(file_, m.line + 1, m.column + 1, what);
  }

  void known_keys(const YAML::Node& map, const std::vector<std::string>& known,
                  const std::string& where) const {
    if (!map.IsMap()) fail(map, where + " must be a mapping, got " + describe(map));
    for (auto it = map.begin(); it != map.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end())
        fail(it->first, "unknown key '" + key + "' in " + where + sim::did_you_mean(key, known) +
                            " (known keys: " + join(known) + ")");
    }
  }

  std::string str(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar()) fail(n, what + " must be a single value, got " + describe(n));
    return n.Scalar();
  }
  int positive_int(const YAML::Node& n, const std::string& what) const {
    const std::string s = str(n, what);
    try {
      size_t used = 0;
      const long v = std::stol(s, &used);
      if (used == s.size() && v >= 1 && v <= (1 << 24)) return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    fail(n, what + " must be a positive integer, got '" + s + "'");
  }
  // An integer >= min (window bounds take -1 for "unbounded").
  int64_t integer(const YAML::Node& n, const std::string& what, int64_t min) const {
    const std::string s = str(n, what);
    try {
      size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used == s.size() && v >= min && v <= (int64_t{1} << 40)) return v;
    } catch (const std::exception&) {
    }
    fail(n, what + " must be an integer of at least " + std::to_string(min) + ", got '" + s + "'");
  }
  template <class Parse>
  auto unit(const YAML::Node& n, const std::string& what, Parse parse) const {
    const std::string s = str(n, what);
    try {
      return parse(s);
    } catch (const sim::units::UnitError& e) {
      fail(n, what + ": " + e.what());
    }
  }
  double number(const YAML::Node& n, const std::string& what) const {
    const std::string s = str(n, what);
    try {
      size_t used = 0;
      const double v = std::stod(s, &used);
      if (used == s.size() && v >= 0) return v;
    } catch (const std::exception&) {
    }
    fail(n, what + " must be a non-negative number, got '" + s + "'");
  }
  std::string one_of(const YAML::Node& n, const std::string& what,
                     const std::vector<std::string>& allowed) const {
    const std::string s = str(n, what);
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
      fail(n, what + " is '" + s + "'; expected one of " + join(allowed) + sim::did_you_mean(s, allowed));
    return s;
  }

  static std::string describe(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Map: return "a mapping";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
      default: return "nothing";
    }
  }

 private:
  struct Origin {
    YAML::Node node;
    std::string text;
    int column;
  };
  std::string file_;
  std::vector<Origin> origins_;
};

YAML::Node entry(const YAML::Node& map, const char* key) {
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.Scalar() == key) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

const std::vector<std::string> kCollectiveOps = {"all_reduce", "all_gather", "reduce_scatter",
                                                 "all_to_all", "broadcast", "barrier"};
const std::vector<std::string> kDtypes = {"f32", "f64", "bf16", "f16", "i64", "i32"};
const std::vector<std::string> kAlgorithms = {"auto", "ring", "tree", "direct", "hierarchical"};
const std::vector<std::string> kGroups = {"world", "tp", "cp", "dp", "pp", "dp_cp", "tp_cp"};

// Applies one --set to the tree (or to the topology overrides).
void apply_set(YAML::Node& root, const std::string& text, Reader& reader, Scenario& sc) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("override '" + text + "'", 1, 1,
                      "expected key=value, such as parallel.tp=2 or topology.nodes=4");
  const std::string key = text.substr(0, eq);
  if (key.rfind("topology.", 0) == 0) {
    sc.topology_sets.push_back(text.substr(9));
    return;
  }
  std::vector<std::pair<std::string, size_t>> parts;
  for (size_t b = 0; b <= key.size();) {
    size_t e = key.find('.', b);
    if (e == std::string::npos) e = key.size();
    parts.emplace_back(key.substr(b, e - b), b);
    b = e + 1;
  }
  const KeySchema* schema = &root_schema();
  YAML::Node cur = root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& [part, col] = parts[i];
    if (schema == nullptr)
      throw ConfigError("override '" + text + "'", 1, static_cast<int>(col) + 1,
                        "'" + key.substr(0, col - 1) + "' is a single value; it has no key '" + part + "'");
    auto it = schema->keys.find(part);
    if (it == schema->keys.end())
      throw ConfigError("override '" + text + "'", 1, static_cast<int>(col) + 1,
                        "unknown key '" + part + "'" + sim::did_you_mean(part, names_of(*schema)) +
                            " (known keys here: " + join(names_of(*schema)) + ")");
    if (i + 1 == parts.size()) {
      YAML::Node value;
      try {
        value = YAML::Load(text.substr(eq + 1));
      } catch (const YAML::Exception& e) {
        throw ConfigError("override '" + text + "'", 1, static_cast<int>(eq) + 2, "malformed value: " + e.msg);
      }
      cur[part] = value;
      reader.note_override(cur[part], text, static_cast<int>(eq) + 2);
      return;
    }
    if (!cur[part].IsMap()) cur[part] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = cur[part];
    cur.reset(next);
    schema = it->second;
  }
}

const std::vector<std::string> kCpComms = {"p2p", "all_gather", "a2a", "a2a+p2p"};

// A cp_attention step's keys, checked on their own; what depends on the layout (cp, tp, the
// default comm type) is checked by check_cp_attention.
ScenarioStep read_cp_attention(const YAML::Node& body, const Reader& r) {
  r.known_keys(body, {"comm", "format", "batch", "seq_len", "heads", "kv_heads", "head_dim", "mask", "window",
                      "hierarchical", "dtype", "backward"},
               "a cp_attention step");
  ScenarioStep st;
  st.kind = ScenarioStep::Kind::cp_attention;
  st.name = "cp_attention";
  st.group = "cp";
  auto need = [&](const char* k) {
    const YAML::Node v = entry(body, k);
    if (!v.IsDefined()) r.fail(body, std::string("a cp_attention step needs ") + k);
    return v;
  };
  if (auto v = entry(body, "comm"); v.IsDefined()) st.cp_comm = r.one_of(v, "cp_attention.comm", kCpComms);
  if (auto v = entry(body, "format"); v.IsDefined()) st.format = r.one_of(v, "cp_attention.format", {"bshd", "thd"});
  const bool thd = st.format == "thd";
  const YAML::Node len = need("seq_len");
  if (len.IsSequence()) {
    if (!thd)
      r.fail(len, "cp_attention.seq_len is one length S for format bshd; a list of sequence lengths needs format: thd");
    if (len.size() == 0) r.fail(len, "cp_attention.seq_len must list at least one sequence length");
    for (const YAML::Node& x : len) st.seq_lens.push_back(r.positive_int(x, "cp_attention.seq_len"));
  } else {
    st.seq_lens.push_back(r.positive_int(len, "cp_attention.seq_len"));
  }
  if (auto v = entry(body, "batch"); v.IsDefined()) {
    if (thd) r.fail(v, "cp_attention.batch is for format bshd; a thd step packs its sequences: list them in seq_len");
    st.batch = r.positive_int(v, "cp_attention.batch");
  }
  st.heads = r.positive_int(need("heads"), "cp_attention.heads");
  st.kv_heads = st.heads;
  if (auto v = entry(body, "kv_heads"); v.IsDefined()) {
    st.kv_heads = r.positive_int(v, "cp_attention.kv_heads");
    if (st.heads % st.kv_heads != 0)
      r.fail(v, "cp_attention: heads " + std::to_string(st.heads) + " is not a multiple of kv_heads " +
                    std::to_string(st.kv_heads) +
                    " (grouped-query attention shares each kv head among heads/kv_heads query heads)");
  }
  st.head_dim = r.positive_int(need("head_dim"), "cp_attention.head_dim");
  if (auto v = entry(body, "mask"); v.IsDefined()) {
    st.mask = r.one_of(v, "cp_attention.mask", {"causal", "no_mask", "padding"});
    if (!thd && st.mask == "padding")
      r.fail(v, "cp_attention: format bshd has no padding tokens, so it takes mask causal or no_mask; "
                "padding needs format: thd");
    if (thd && st.mask == "no_mask")
      r.fail(v, "cp_attention: format thd always masks its padding, so it takes mask padding or causal "
                "(causal with padding), not no_mask");
  }
  if (auto v = entry(body, "window"); v.IsDefined()) {
    if (!v.IsSequence() || v.size() != 2)
      r.fail(v, "cp_attention.window must be [left, right] (-1 = unbounded), such as [4096, 0], got " +
                    Reader::describe(v));
    st.window_left = r.integer(v[0], "cp_attention.window left", -1);
    st.window_right = r.integer(v[1], "cp_attention.window right", -1);
    if (st.mask == "causal" && st.window_right > 0)
      r.fail(v[1], "cp_attention: a causal mask hides every key after the query, so the window's right side must be "
                   "0 or -1, got " + std::to_string(st.window_right));
  }
  if (auto v = entry(body, "hierarchical"); v.IsDefined()) {
    if (!v.IsSequence() || v.size() != 2)
      r.fail(v, "cp_attention.hierarchical must be [a2a size, p2p size], such as [2, 4] for cp=8, got " +
                    Reader::describe(v));
    st.a2a_size = r.positive_int(v[0], "cp_attention.hierarchical a2a size");
    st.p2p_size = r.positive_int(v[1], "cp_attention.hierarchical p2p size");
  }
  if (auto d = entry(body, "dtype"); d.IsDefined())
    st.dtype = r.one_of(d, "cp_attention.dtype", {"f32", "f64", "bf16", "f16"});
  if (auto v = entry(body, "backward"); v.IsDefined())
    st.backward = r.one_of(v, "cp_attention.backward", {"true", "false"}) == "true";
  return st;
}

// The rules a cp_attention step must meet under the layout, each reported at the key it concerns:
// heads over tp, the comm type's head split (a2a over cp, a2a+p2p over a), the hierarchical sizes,
// and S a multiple of 2cp for bshd (thd pads every sequence to a multiple of 2cp itself).
// Resolves the comm type and the hierarchical sizes from the parallel defaults.
void check_cp_attention(ScenarioStep& st, const YAML::Node& body, const YAML::Node& par, const Scenario& sc,
                        const Reader& r) {
  const YAML::Node comm_at = entry(body, "comm").IsDefined() ? entry(body, "comm")
                             : par.IsDefined() && entry(par, "cp_comm").IsDefined() ? entry(par, "cp_comm")
                                                                                    : body;
  if (st.cp_comm.empty()) st.cp_comm = sc.cp_comm;
  const YAML::Node heads_at = entry(body, "heads");
  const int64_t cp = sc.cp, tp = sc.tp;
  if (st.heads % tp != 0 || st.kv_heads % tp != 0)
    r.fail(heads_at, "cp_attention: heads " + std::to_string(st.heads) + " and kv_heads " +
                         std::to_string(st.kv_heads) + " must both be divisible by tp=" + std::to_string(tp) +
                         " (each TP rank holds whole heads)");
  const int64_t hq = st.heads / tp, hkv = st.kv_heads / tp;
  const std::string per_rank = tp > 1 ? " per TP rank (heads / tp=" + std::to_string(tp) + ")" : "";
  const YAML::Node hier = entry(body, "hierarchical");
  if (hier.IsDefined() && st.cp_comm != "a2a+p2p")
    r.fail(hier, "cp_attention.hierarchical applies to comm a2a+p2p only; this step's comm is " + st.cp_comm);
  if (st.cp_comm == "a2a" && (hq % cp != 0 || hkv % cp != 0))
    r.fail(heads_at, "cp_attention: comm a2a splits the heads over cp=" + std::to_string(cp) + " ranks: heads " +
                         std::to_string(hq) + " and kv_heads " + std::to_string(hkv) + per_rank +
                         " must both be multiples of " + std::to_string(cp) + "; use p2p or all_gather, or another cp");
  if (st.cp_comm == "a2a+p2p") {
    if (hier.IsDefined()) {
      if (static_cast<int64_t>(st.a2a_size) * st.p2p_size != cp)
        r.fail(hier, "cp_attention.hierarchical [" + std::to_string(st.a2a_size) + ", " +
                         std::to_string(st.p2p_size) + "] multiplies to " +
                         std::to_string(st.a2a_size * st.p2p_size) + ", not cp=" + std::to_string(cp));
    } else if (sc.hierarchical_cp.size() == 2) {
      st.a2a_size = sc.hierarchical_cp[0];  // parallel.hierarchical_cp, checked against cp already
      st.p2p_size = sc.hierarchical_cp[1];
    } else {
      if (cp % 2 != 0)
        r.fail(comm_at, "cp_attention: comm a2a+p2p splits cp as [2, cp/2] by default, which needs an even cp, "
                        "got cp=" + std::to_string(cp) + "; give hierarchical: [a2a size, p2p size]");
      st.a2a_size = 2;
      st.p2p_size = static_cast<int>(cp / 2);
    }
    if (hq % st.a2a_size != 0 || hkv % st.a2a_size != 0)
      r.fail(heads_at, "cp_attention: comm a2a+p2p splits the heads over the a2a size " + std::to_string(st.a2a_size) +
                           ": heads " + std::to_string(hq) + " and kv_heads " + std::to_string(hkv) + per_rank +
                           " must both be multiples of " + std::to_string(st.a2a_size));
  }
  if (st.format == "bshd" && st.seq_lens[0] % (2 * cp) != 0)
    r.fail(entry(body, "seq_len"), "cp_attention: seq_len " + std::to_string(st.seq_lens[0]) +
                                       " is not a multiple of 2 x cp = " + std::to_string(2 * cp) +
                                       " (every rank holds two chunks of each sequence); thd pads instead");
}

ScenarioStep read_step(const YAML::Node& n, const Reader& r) {
  if (!n.IsMap() || n.size() != 1)
    r.fail(n, "a step must be a mapping with one key: compute, a collective name (" +
                  join(kCollectiveOps) + "), sendrecv, wait, tp_mlp or cp_attention");
  const YAML::Node key = n.begin()->first;
  const YAML::Node body = n.begin()->second;
  const std::string kind = key.Scalar();
  ScenarioStep st;
  if (kind == "wait") {
    st.kind = ScenarioStep::Kind::collective;
    st.wait = true;
    st.name = "wait";
    return st;
  }
  if (kind == "tp_mlp") {
    r.known_keys(body, {"hidden", "ffn", "tokens", "dtype", "sequence_parallel", "backward"}, "a tp_mlp step");
    st.kind = ScenarioStep::Kind::tp_mlp;
    st.name = "tp_mlp";
    st.group = "tp";
    auto need_int = [&](const char* k) {
      const YAML::Node v = entry(body, k);
      if (!v.IsDefined()) r.fail(body, std::string("a tp_mlp step needs ") + k);
      return static_cast<int64_t>(r.positive_int(v, std::string("tp_mlp.") + k));
    };
    st.hidden = need_int("hidden");
    st.ffn = need_int("ffn");
    st.tokens = need_int("tokens");
    if (auto d = entry(body, "dtype"); d.IsDefined()) st.dtype = r.one_of(d, "tp_mlp.dtype", {"f32", "bf16", "f16"});
    if (auto v = entry(body, "sequence_parallel"); v.IsDefined())
      st.sequence_parallel = r.one_of(v, "tp_mlp.sequence_parallel", {"true", "false"}) == "true";
    if (auto v = entry(body, "backward"); v.IsDefined())
      st.backward = r.one_of(v, "tp_mlp.backward", {"true", "false"}) == "true";
    return st;
  }
  if (kind == "cp_attention") return read_cp_attention(body, r);
  if (kind == "compute") {
    r.known_keys(body, {"name", "flops", "bytes", "gemm", "dtype"}, "a compute step");
    st.kind = ScenarioStep::Kind::compute;
    st.name = entry(body, "name").IsDefined() ? r.str(entry(body, "name"), "compute.name") : "compute";
    if (auto g = entry(body, "gemm"); g.IsDefined()) {
      if (!g.IsSequence() || g.size() != 3) r.fail(g, "compute.gemm must be [m, n, k]");
      const double m = r.positive_int(g[0], "gemm m"), nn = r.positive_int(g[1], "gemm n"),
                   k = r.positive_int(g[2], "gemm k");
      st.flops = 2 * m * nn * k;
      st.bytes = 2 * (m * k + k * nn + m * nn);  // 16-bit operands and result
    }
    if (auto f = entry(body, "flops"); f.IsDefined()) st.flops = r.number(f, "compute.flops");
    if (auto b = entry(body, "bytes"); b.IsDefined())
      st.bytes = static_cast<double>(r.unit(b, "compute.bytes", sim::units::parse_bytes));
    if (auto d = entry(body, "dtype"); d.IsDefined()) st.dtype = r.one_of(d, "compute.dtype", kDtypes);
    if (st.flops == 0 && st.bytes == 0) r.fail(body, "a compute step needs gemm: [m, n, k], flops or bytes");
    return st;
  }
  std::vector<std::string> step_kinds = kCollectiveOps;
  step_kinds.push_back("compute");
  step_kinds.push_back("sendrecv");
  step_kinds.push_back("wait");
  step_kinds.push_back("tp_mlp");
  step_kinds.push_back("cp_attention");
  if (std::find(step_kinds.begin(), step_kinds.end(), kind) == step_kinds.end())
    r.fail(key, "unknown step '" + kind + "'" + sim::did_you_mean(kind, step_kinds) +
                    " (steps: " + join(step_kinds) + ")");
  st.kind = kind == "sendrecv" ? ScenarioStep::Kind::sendrecv : ScenarioStep::Kind::collective;
  st.name = kind;
  if (body.IsNull() && kind == "barrier") return st;
  r.known_keys(body, {"bytes", "dtype", "group", "algorithm", "async"}, "a " + kind + " step");
  if (auto b = entry(body, "bytes"); b.IsDefined())
    st.bytes = static_cast<double>(r.unit(b, kind + ".bytes", sim::units::parse_bytes));
  else if (kind != "barrier")
    r.fail(body, "a " + kind + " step needs bytes (the per-rank buffer, e.g. 256 MiB)");
  if (auto d = entry(body, "dtype"); d.IsDefined()) st.dtype = r.one_of(d, kind + ".dtype", kDtypes);
  if (auto g = entry(body, "group"); g.IsDefined()) st.group = r.one_of(g, kind + ".group", kGroups);
  if (auto a = entry(body, "algorithm"); a.IsDefined())
    st.algorithm = r.one_of(a, kind + ".algorithm", kAlgorithms);
  if (auto a = entry(body, "async"); a.IsDefined())
    st.async = r.one_of(a, kind + ".async", {"true", "false"}) == "true";
  return st;
}


double fraction(const Reader& r, const YAML::Node& n, const std::string& what) {
  const double v = r.number(n, what);
  if (v > 1) r.fail(n, what + " is a share between 0 and 1, got " + n.Scalar());
  return v;
}

std::int64_t non_negative_int(const Reader& r, const YAML::Node& n, const std::string& what) {
  const std::string v = r.str(n, what);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size() && x >= 0) return x;
  } catch (const std::exception&) {
  }
  r.fail(n, what + " must be a non-negative integer, got '" + v + "'");
}

// `encoder:` beside `model:`: the two-model workload (models/multimodal.h). The encoder's grid must
// cover the same ranks; what the multimodal loop does not do is an error at its key.
void read_encoder(const YAML::Node& root, const YAML::Node& e, const Reader& r, const Scenario& sc, ModelWorkload& m) {
  r.known_keys(e, names_of(*root_schema().keys.at("encoder")), "encoder");
  EncoderSettings enc;
  if (auto v = entry(e, "tp"); v.IsDefined()) enc.tp = r.positive_int(v, "encoder.tp");
  if (auto v = entry(e, "dp"); v.IsDefined()) enc.dp = r.positive_int(v, "encoder.dp");
  if (auto v = entry(e, "features"); v.IsDefined()) enc.config.features = r.positive_int(v, "encoder.features");
  if (auto v = entry(e, "ffn"); v.IsDefined()) enc.config.ffn = r.positive_int(v, "encoder.ffn");
  if (enc.tp * enc.dp != sc.ranks)
    r.fail(e, "encoder tp=" + std::to_string(enc.tp) + " x dp=" + std::to_string(enc.dp) + " = " +
                  std::to_string(enc.tp * enc.dp) + " ranks, but the transformer's layout tp=" + std::to_string(sc.tp) +
                  " x cp=" + std::to_string(sc.cp) + " x dp=" + std::to_string(sc.dp) + " has " +
                  std::to_string(sc.ranks) + "; both grids cover the same ranks");
  if (enc.config.ffn % enc.tp != 0)
    r.fail(e, "encoder.ffn " + std::to_string(enc.config.ffn) + " is not divisible by encoder.tp=" + std::to_string(enc.tp));
  if (m.attention.format != cp::Format::bshd)
    r.fail(entry(root, "model"), "with an encoder the model's format must be bshd: the bridge moves [batch, seq, hidden]");
  if (sc.pp != 1) r.fail(entry(root, "parallel"), "with an encoder, pp must be 1 (the multimodal loop has no pipeline)");
  if (m.train) {
    const YAML::Node t = entry(root, "train");
    const TrainSettings& ts = *m.train;
    if (ts.micro_batches != 1 || ts.zero != 0 || ts.clip_grad_norm || !ts.checkpoint.empty() || !ts.shards.empty())
      r.fail(t, "with an encoder, train takes steps and optimizer only (micro_batches, zero, clip_grad_norm, "
                "checkpoint and shards belong to the transformer's own training)");
  } else {
    m.train = TrainSettings{};  // one step
  }
  const YAML::Node par = entry(root, "parallel");
  if (const YAML::Node o = par.IsDefined() ? entry(par, "order") : YAML::Node(YAML::NodeType::Undefined); o.IsDefined()) {
    if (!o.IsSequence() || o.size() != 3) r.fail(o, "parallel.order must list tp, cp and dp, fastest first, e.g. [tp, cp, dp]");
    m.order.clear();
    for (const YAML::Node& x : o) m.order.push_back(r.one_of(x, "parallel.order", {"tp", "cp", "dp"}));
  }
  m.encoder = enc;
}

// The `model:` workload and its companions `batch`, `dump` and `validate`, checked against the
// layout: everything that can be known before running is an error here, at the key it concerns.
ModelWorkload read_model(const YAML::Node& root, const YAML::Node& n, const Reader& r, const Scenario& sc,
                         bool data_given, const fs::path& folder) {
  ModelWorkload m;
  r.known_keys(n, names_of(*root_schema().keys.at("model")), "model");
  if (auto v = entry(n, "kind"); v.IsDefined()) r.one_of(v, "model.kind", {"transformer"});
  if (auto v = entry(n, "dtype"); v.IsDefined()) {
    const std::string d = r.one_of(v, "model.dtype", {"fp32", "bf16", "fp16", "f32", "f16"});
    m.config.dtype = d == "bf16" ? runtime::DType::bf16 : (d == "fp16" || d == "f16") ? runtime::DType::f16
                                                                                        : runtime::DType::f32;
  }
  if (auto v = entry(n, "format"); v.IsDefined())
    m.attention.format = r.one_of(v, "model.format", {"bshd", "thd"}) == "thd" ? cp::Format::thd : cp::Format::bshd;
  if (auto v = entry(n, "mask"); v.IsDefined())
    m.attention.mask = models::parse_mask(r.one_of(v, "model.mask", {"causal", "padding", "no_mask"}));
  if (auto v = entry(n, "window"); v.IsDefined()) {
    if (!v.IsSequence() || v.size() != 2) r.fail(v, "model.window must be [left, right] (-1 = unbounded), e.g. [128, 0]");
    std::int64_t w[2];
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string t = r.str(v[i], "model.window");
      try {
        size_t used = 0;
        w[i] = std::stoll(t, &used);
        if (used != t.size() || w[i] < -1) throw std::invalid_argument(t);
      } catch (const std::exception&) {
        r.fail(v[i], "model.window: each side is an integer >= 0, or -1 for unbounded; got '" + t + "'");
      }
    }
    m.attention.window_left = w[0];
    m.attention.window_right = w[1];
  }
  if (auto v = entry(n, "weights"); v.IsDefined() && !v.IsNull() && !r.str(v, "model.weights").empty()) {
    const fs::path w = r.str(v, "model.weights");
    m.weights = w.is_absolute() ? w.string() : (folder / w).lexically_normal().string();
  }
  if (auto v = entry(n, "seed"); v.IsDefined()) m.seed = static_cast<std::uint64_t>(non_negative_int(r, v, "model.seed"));
  for (auto [key, field] : {std::pair<const char*, std::int64_t*>{"vocab", &m.config.vocab}, {"hidden", &m.config.hidden},
                            {"heads", &m.config.heads}, {"head_dim", &m.config.head_dim}, {"ffn", &m.config.ffn},
                            {"layers", &m.config.layers}})
    if (auto v = entry(n, key); v.IsDefined()) *field = r.positive_int(v, std::string("model.") + key);
  m.attention.comm = cp::parse_comm_type(sc.cp_comm);
  if (sc.hierarchical_cp.size() == 2) {
    m.attention.a2a_size = sc.hierarchical_cp[0];
    m.attention.p2p_size = sc.hierarchical_cp[1];
  }
  try {
    models::check_config(m.config);
    models::check_attention(m.attention);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    r.fail(n, std::string("model: ") + e.what());
  }
  m.shape_only = data_given && !sc.real_data;
  const YAML::Node par = entry(root, "parallel");
  const YAML::Node at = par.IsDefined() ? par : n;
  auto layout_error = [&](const std::string& what) { r.fail(at, what); };
  const std::int64_t heads = m.config.heads;
  if (heads % sc.tp != 0)
    layout_error(std::to_string(heads) + " attention heads are not divisible by tp=" + std::to_string(sc.tp) +
                 " (each TP rank holds whole heads)");
  if (m.config.ffn % sc.tp != 0)
    layout_error("model.ffn " + std::to_string(m.config.ffn) + " is not divisible by tp=" + std::to_string(sc.tp));
  if (auto t = entry(root, "train"); t.IsDefined()) {
    r.known_keys(t, names_of(*root_schema().keys.at("train")), "train");
    TrainSettings ts;
    if (auto v = entry(t, "steps"); v.IsDefined()) ts.steps = r.positive_int(v, "train.steps");
    if (auto v = entry(t, "micro_batches"); v.IsDefined()) ts.micro_batches = r.positive_int(v, "train.micro_batches");
    if (auto v = entry(t, "zero"); v.IsDefined()) ts.zero = r.one_of(v, "train.zero", {"0", "1"}) == "1" ? 1 : 0;
    if (auto v = entry(t, "clip_grad_norm"); v.IsDefined() && !v.IsNull()) {
      ts.clip_grad_norm = r.number(v, "train.clip_grad_norm");
      if (!(*ts.clip_grad_norm > 0)) r.fail(v, "train.clip_grad_norm must be > 0");
    }
    if (auto v = entry(t, "checkpoint"); v.IsDefined() && !v.IsNull()) ts.checkpoint = r.str(v, "train.checkpoint");
    if (auto v = entry(t, "shards"); v.IsDefined() && !v.IsNull()) {
      ts.shards = r.str(v, "train.shards");
      if (m.shape_only) r.fail(v, "train.shards needs real data: remove data: shape_only");
    }
    if (auto o = entry(t, "optimizer"); o.IsDefined()) {
      r.known_keys(o, names_of(*root_schema().keys.at("train")->keys.at("optimizer")), "train.optimizer");
      if (auto v = entry(o, "kind"); v.IsDefined()) r.one_of(v, "train.optimizer.kind", {"adamw"});
      if (auto v = entry(o, "lr"); v.IsDefined()) ts.optimizer.lr = r.number(v, "train.optimizer.lr");
      if (auto v = entry(o, "eps"); v.IsDefined()) ts.optimizer.eps = r.number(v, "train.optimizer.eps");
      if (auto v = entry(o, "weight_decay"); v.IsDefined()) ts.optimizer.weight_decay = r.number(v, "train.optimizer.weight_decay");
      if (auto v = entry(o, "betas"); v.IsDefined()) {
        if (!v.IsSequence() || v.size() != 2) r.fail(v, "train.optimizer.betas must be [beta1, beta2], e.g. [0.9, 0.999]");
        ts.optimizer.beta1 = r.number(v[0], "train.optimizer.betas");
        ts.optimizer.beta2 = r.number(v[1], "train.optimizer.betas");
      }
      try {
        models::check_adamw(ts.optimizer);
      } catch (const Error& e) {
        r.fail(o, std::string("train.optimizer: ") + e.what());
      }
    }
    if (m.shape_only && !ts.checkpoint.empty()) r.fail(t, "train.checkpoint needs real data: remove data: shape_only");
    if (m.config.layers % sc.pp != 0)
      layout_error(std::to_string(m.config.layers) + " layers cannot be split evenly over pp=" + std::to_string(sc.pp) +
                   " stages; set model.layers to a multiple of pp");
    m.train = ts;
  } else if (sc.pp != 1) {
    layout_error("pp=" + std::to_string(sc.pp) + ": pipeline stages need a train: section (one forward and backward "
                 "without it runs with pp=1)");
  }
  if (auto e = entry(root, "encoder"); e.IsDefined()) read_encoder(root, e, r, sc, m);
  const std::int64_t local_heads = heads / sc.tp;
  if (m.attention.comm == cp::CommType::a2a && local_heads % sc.cp != 0)
    layout_error("cp_comm a2a: " + std::to_string(heads) + " heads / tp=" + std::to_string(sc.tp) + " = " +
                 std::to_string(local_heads) + " heads per rank, not divisible by cp=" + std::to_string(sc.cp) +
                 " (Ulysses splits the heads over CP); use p2p or all_gather, or another cp");
  if (m.attention.comm == cp::CommType::a2a_p2p) {
    const int a = m.attention.a2a_size ? m.attention.a2a_size : 2;
    if (!m.attention.a2a_size && sc.cp % 2 != 0)
      layout_error("cp_comm a2a+p2p: the default hierarchical_cp [2, cp/2] needs an even cp, got cp=" +
                   std::to_string(sc.cp) + "; set parallel.hierarchical_cp");
    if (local_heads % a != 0)
      layout_error("cp_comm a2a+p2p: " + std::to_string(local_heads) + " heads per TP rank are not divisible by the a2a size " +
                   std::to_string(a));
  }
  // batch: a safetensors file, or the shape of a synthetic batch
  const YAML::Node b = entry(root, "batch");
  if (b.IsDefined() && !b.IsNull()) {
    if (b.IsScalar()) {
      const fs::path f = b.Scalar();
      m.batch = f.is_absolute() ? f.string() : (folder / f).lexically_normal().string();
    } else {
      r.known_keys(b, {"lengths", "rows", "seq_len"}, "batch");
      if (auto l = entry(b, "lengths"); l.IsDefined()) {
        if (!l.IsSequence() || l.size() == 0) r.fail(l, "batch.lengths must be a non-empty list of sequence lengths");
        for (const YAML::Node& x : l) m.lengths.push_back(r.positive_int(x, "batch.lengths"));
        if (m.attention.format == cp::Format::bshd) r.fail(l, "batch.lengths is for format thd; a bshd batch has rows and seq_len");
      } else {
        const YAML::Node rows = entry(b, "rows"), len = entry(b, "seq_len");
        if (!rows.IsDefined() || !len.IsDefined()) r.fail(b, "batch needs lengths: [...] (thd) or rows and seq_len (bshd)");
        if (m.attention.format == cp::Format::thd) r.fail(b, "batch rows/seq_len are for format bshd; a thd batch has lengths: [...]");
        m.lengths.assign(static_cast<std::size_t>(r.positive_int(rows, "batch.rows")), r.positive_int(len, "batch.seq_len"));
      }
    }
  }
  if (m.encoder) {
    if (!m.batch.empty() && m.shape_only) r.fail(b, "a batch file needs real data: remove data: shape_only");
    // the default multimodal batch: the fewest rows both DP sizes divide, 32 tokens each
    if (m.batch.empty() && m.lengths.empty()) m.lengths.assign(static_cast<std::size_t>(std::lcm(m.encoder->dp, sc.dp)), 32);
  }
  m.shape_only = data_given && !sc.real_data;
  if (auto d = entry(root, "dump"); d.IsDefined() && !d.IsNull()) {
    m.dump = r.str(d, "dump");
    if (m.shape_only) r.fail(d, "dump needs real data: remove data: shape_only (or the dump)");
  }
  if (auto v = entry(root, "validate"); v.IsDefined()) {
    r.known_keys(v, names_of(*root_schema().keys.at("validate")), "validate");
    if (m.shape_only) r.fail(v, "validate needs real data: remove data: shape_only (or validate)");
    if (m.encoder) r.fail(v, "validate runs the transformer alone; with an encoder, compare the dumps of two layouts");
    if (m.train) r.fail(v, "validate compares one forward and backward step; with train:, compare the dumps of two runs");
    m.validate = true;
    m.thresholds = models::ValidationThresholds::for_dtype(m.config.dtype);
    if (auto bl = entry(v, "baseline"); bl.IsDefined()) {
      r.known_keys(bl, {"tp", "cp"}, "validate.baseline");
      if (auto t = entry(bl, "tp"); t.IsDefined()) m.baseline_tp = r.positive_int(t, "validate.baseline.tp");
      if (auto c = entry(bl, "cp"); c.IsDefined()) m.baseline_cp = r.positive_int(c, "validate.baseline.cp");
      if (heads % m.baseline_tp != 0 || m.config.ffn % m.baseline_tp != 0)
        r.fail(bl, "validate.baseline.tp=" + std::to_string(m.baseline_tp) + " does not divide heads " +
                       std::to_string(heads) + " and ffn " + std::to_string(m.config.ffn));
    }
    if (auto x = entry(v, "logits_atol"); x.IsDefined()) m.thresholds.logits_atol = r.number(x, "validate.logits_atol");
    if (auto x = entry(v, "logits_share"); x.IsDefined()) m.thresholds.logits_share = fraction(r, x, "validate.logits_share");
    if (auto x = entry(v, "loss_rel"); x.IsDefined()) m.thresholds.loss_rel = r.number(x, "validate.loss_rel");
    if (auto x = entry(v, "grad_norm_diff"); x.IsDefined()) m.thresholds.grad_norm_diff = r.number(x, "validate.grad_norm_diff");
    if (auto x = entry(v, "acceptable_share"); x.IsDefined())
      m.thresholds.acceptable_share = fraction(r, x, "validate.acceptable_share");
  }
  // The inputs themselves: files readable and well formed, the batch fitting the layout.
  if (m.encoder) {
    try {
      const ModelInputs in = load_model_inputs(m);
      models::check_multimodal(multimodal_spec(m, in, sc.tp, sc.cp, sc.dp), sc.ranks);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      const std::string what = e.what();
      const bool weights_error = !m.weights.empty() && what.find(m.weights) != std::string::npos;
      const bool batch_error = what.find("batch") != std::string::npos || what.find("features are") != std::string::npos ||
                               what.find("rows") != std::string::npos;
      r.fail(weights_error ? entry(n, "weights") : batch_error && b.IsDefined() ? b : entry(root, "encoder"), what);
    }
    return m;
  }
  try {
    const ModelInputs in = load_model_inputs(m);
    models::check_batch(in.batch, m.config, sc.cp, m.batch.empty() ? "batch" : m.batch);
    for (int d = 0; d < sc.dp; ++d) {
      const models::Batch mine = models::dp_slice(in.batch, sc.dp, d);
      if (m.train)
        for (int k = 0; k < m.train->micro_batches; ++k) models::batch_slice(mine, m.train->micro_batches, k, "train.micro_batches");
    }
    if (m.validate) models::check_batch(in.batch, m.config, m.baseline_cp, m.batch.empty() ? "batch" : m.batch);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    const YAML::Node w = entry(n, "weights");
    const bool weights_error = !m.weights.empty() && std::string(e.what()).find(m.weights) != std::string::npos;
    r.fail(weights_error ? w : (b.IsDefined() ? b : n), e.what());
  }
  return m;
}

}  // namespace

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets) {
  Scenario sc;
  sc.file = path;
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot read scenario file '" + path + "': no such file, or not readable");
  } catch (const YAML::ParserException& e) {
    throw ConfigError(path, e.mark.line + 1, e.mark.column + 1, "malformed YAML: " + e.msg);
  }
  Reader r(path);
  if (!root.IsMap()) r.fail(root, "a scenario file must be a mapping of keys (name, topology, workload, ...)");
  for (const std::string& s : sets) apply_set(root, s, r, sc);
  r.known_keys(root, names_of(root_schema()), "the scenario");

  auto need = [&](const char* key) {
    YAML::Node n = entry(root, key);
    if (!n.IsDefined()) r.fail(root, std::string("missing required key '") + key + "'");
    return n;
  };
  sc.name = r.str(need("name"), "name");
  if (auto d = entry(root, "description"); d.IsDefined()) sc.description = r.str(d, "description");
  const YAML::Node topo_node = need("topology");
  const fs::path topo_rel = r.str(topo_node, "topology");
  sc.topology_path = topo_rel.is_absolute() ? topo_rel.string()
                                            : (fs::path(path).parent_path() / topo_rel).lexically_normal().string();
  std::vector<std::string> file_sets;
  if (auto ts = entry(root, "topology_set"); ts.IsDefined()) {
    if (!ts.IsMap()) r.fail(ts, "topology_set must be a mapping of topology keys to values, e.g. {nodes: 2}");
    for (auto it = ts.begin(); it != ts.end(); ++it)
      file_sets.push_back(it->first.Scalar() + "=" + r.str(it->second, "topology_set." + it->first.Scalar()));
  }
  sc.topology_sets.insert(sc.topology_sets.begin(), file_sets.begin(), file_sets.end());

  sim::Topology topo = [&] {
    try {
      return sim::Topology::load_file(sc.topology_path, sc.topology_sets);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      r.fail(topo_node, std::string("topology: ") + e.what());
    }
  }();

  if (auto n = entry(root, "ranks"); n.IsDefined()) sc.ranks = r.positive_int(n, "ranks");
  YAML::Node par = entry(root, "parallel");
  bool dp_given = false;
  if (par.IsDefined()) {
    r.known_keys(par, names_of(*root_schema().keys.at("parallel")), "parallel");
    if (auto v = entry(par, "tp"); v.IsDefined()) sc.tp = r.positive_int(v, "parallel.tp");
    if (auto v = entry(par, "cp"); v.IsDefined()) sc.cp = r.positive_int(v, "parallel.cp");
    if (auto v = entry(par, "pp"); v.IsDefined()) sc.pp = r.positive_int(v, "parallel.pp");
    if (auto v = entry(par, "dp"); v.IsDefined()) {
      sc.dp = r.positive_int(v, "parallel.dp");
      dp_given = true;
    }
    if (auto v = entry(par, "cp_comm"); v.IsDefined())
      sc.cp_comm = r.one_of(v, "parallel.cp_comm", {"p2p", "all_gather", "a2a", "a2a+p2p"});
    if (auto v = entry(par, "hierarchical_cp"); v.IsDefined()) {
      if (!v.IsSequence() || v.size() != 2)
        r.fail(v, "parallel.hierarchical_cp must be [a2a size, p2p size], e.g. [2, 4] for cp=8");
      sc.hierarchical_cp = {r.positive_int(v[0], "parallel.hierarchical_cp"), r.positive_int(v[1], "parallel.hierarchical_cp")};
    }
  }
  const YAML::Node layout_at = par.IsDefined() ? par : root;
  const int model = sc.tp * sc.cp * sc.pp;
  const bool has_model = entry(root, "model").IsDefined();
  // The reference transformer's world is its layout; a workload fills the topology by default.
  if (sc.ranks == 0) sc.ranks = dp_given ? model * sc.dp : has_model ? model : topo.num_devices();
  if (dp_given && model * sc.dp != sc.ranks)
    r.fail(layout_at, "parallel layout tp=" + std::to_string(sc.tp) + " x cp=" + std::to_string(sc.cp) +
                          " x pp=" + std::to_string(sc.pp) + " x dp=" + std::to_string(sc.dp) + " = " +
                          std::to_string(model * sc.dp) + " ranks, but the run has " +
                          std::to_string(sc.ranks) + "; make the product equal ranks");
  if (!sc.hierarchical_cp.empty() && sc.hierarchical_cp[0] * sc.hierarchical_cp[1] != sc.cp)
    r.fail(entry(par, "hierarchical_cp"), "parallel.hierarchical_cp [" + std::to_string(sc.hierarchical_cp[0]) + ", " +
                                              std::to_string(sc.hierarchical_cp[1]) + "] multiplies to " +
                                              std::to_string(sc.hierarchical_cp[0] * sc.hierarchical_cp[1]) +
                                              ", not cp=" + std::to_string(sc.cp));
  if (sc.ranks % model != 0)
    r.fail(layout_at, "tp=" + std::to_string(sc.tp) + " x cp=" + std::to_string(sc.cp) + " x pp=" +
                          std::to_string(sc.pp) + " = " + std::to_string(model) +
                          " does not divide the " + std::to_string(sc.ranks) + " ranks");
  sc.dp = sc.ranks / model;
  if (sc.ranks > topo.num_devices())
    r.fail(layout_at, std::to_string(sc.ranks) + " ranks need " + std::to_string(sc.ranks) +
                          " devices but topology '" + topo.name() + "' has " +
                          std::to_string(topo.num_devices()) +
                          "; use fewer ranks or more nodes (--set topology.nodes=N)");

  if (auto a = entry(root, "algorithm"); a.IsDefined()) sc.algorithm = r.one_of(a, "algorithm", kAlgorithms);
  const YAML::Node data_node = entry(root, "data");
  if (data_node.IsDefined()) sc.real_data = r.one_of(data_node, "data", {"shape_only", "real"}) == "real";

  for (const char* k : {"batch", "dump", "validate", "train", "encoder"})
    if (!has_model && entry(root, k).IsDefined())
      r.fail(entry(root, k), std::string(k) + " belongs to the model workload; add model: {kind: transformer, ...}");
  if (has_model) {
    if (auto w = entry(root, "workload"); w.IsDefined())
      r.fail(w, "model and workload are alternatives: a scenario runs the reference transformer (model:) or a "
                "workload (collectives, steps), not both");
    if (!data_node.IsDefined()) sc.real_data = true;  // the model computes real numbers unless told not to
    sc.model = read_model(root, entry(root, "model"), r, sc, data_node.IsDefined(),
                          fs::path(path).parent_path());
    if (!sc.model->encoder && par.IsDefined() && entry(par, "order").IsDefined())
      r.fail(entry(par, "order"), "parallel.order orders the transformer's grid beside an encoder; without encoder: it is "
                                  "always tp, cp, dp");
  }
  const YAML::Node wl = has_model ? YAML::Node(YAML::NodeType::Undefined) : need("workload");
  if (!has_model) {
    r.known_keys(wl, names_of(*root_schema().keys.at("workload")), "workload");
    if (wl.size() != 1) r.fail(wl, "workload must have exactly one of: collectives, steps");
    if (auto c = entry(wl, "collectives"); c.IsDefined()) {
      r.known_keys(c, {"op", "sizes", "dtype"}, "workload.collectives");
      std::vector<std::string> ops = kCollectiveOps;
      ops.back() = "sendrecv";  // a sweep of barriers measures nothing; sendrecv instead
      sc.sweep_op = entry(c, "op").IsDefined() ? r.one_of(entry(c, "op"), "collectives.op", ops) : "all_reduce";
      const YAML::Node sz = entry(c, "sizes");
      try {
        sc.sweep_sizes = parse_size_sweep(sz.IsDefined() ? r.str(sz, "collectives.sizes") : "8B:128MiB");
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        r.fail(sz.IsDefined() ? sz : c, e.what());
      }
      if (auto d = entry(c, "dtype"); d.IsDefined()) sc.sweep_dtype = r.one_of(d, "collectives.dtype", kDtypes);
    } else {
      const YAML::Node s = entry(wl, "steps");
      r.known_keys(s, {"repeat", "do"}, "workload.steps");
      if (auto rep = entry(s, "repeat"); rep.IsDefined()) sc.repeat = r.positive_int(rep, "steps.repeat");
      const YAML::Node list = entry(s, "do");
      if (!list.IsDefined() || !list.IsSequence() || list.size() == 0)
        r.fail(s, "workload.steps needs a non-empty list `do:` of steps");
      for (const YAML::Node& st : list) {
        sc.steps.push_back(read_step(st, r));
        if (sc.steps.back().kind == ScenarioStep::Kind::cp_attention)
          check_cp_attention(sc.steps.back(), st.begin()->second, par, sc, r);
      }
      for (const ScenarioStep& st : sc.steps) {
        const int axis = st.group == "tp" ? sc.tp : st.group == "cp" ? sc.cp : st.group == "pp" ? sc.pp
                         : st.group == "dp" ? sc.dp : 2;
        if (st.kind == ScenarioStep::Kind::tp_mlp) {
          if (st.ffn % sc.tp != 0)
            r.fail(list, "tp_mlp: ffn " + std::to_string(st.ffn) + " is not divisible by tp=" + std::to_string(sc.tp));
          if (st.sequence_parallel && st.tokens % sc.tp != 0)
            r.fail(list, "tp_mlp: with sequence_parallel, tokens " + std::to_string(st.tokens) +
                             " must be divisible by tp=" + std::to_string(sc.tp));
        }
        if (st.kind == ScenarioStep::Kind::sendrecv && axis < 2 && st.group != "world")
          r.fail(list, "a sendrecv step on group '" + st.group + "' needs that axis to have at least 2 ranks");
      }
    }
  }

  if (auto cs = entry(root, "checks"); cs.IsDefined()) {
    if (!cs.IsSequence()) r.fail(cs, "checks must be a list, e.g. [{max_time: 5 ms}]");
    for (const YAML::Node& c : cs) {
      r.known_keys(c, {"max_time", "min_busbw", "op"}, "a check");
      ScenarioCheck ck;
      if (auto t = entry(c, "max_time"); t.IsDefined()) {
        ck.kind = ScenarioCheck::Kind::max_time;
        ck.time = r.unit(t, "max_time", sim::units::parse_duration);
        ck.text = "virtual time <= " + t.Scalar();
      } else if (auto b = entry(c, "min_busbw"); b.IsDefined()) {
        ck.kind = ScenarioCheck::Kind::min_busbw;
        ck.busbw = r.unit(b, "min_busbw", sim::units::parse_bandwidth);
        ck.op = entry(c, "op").IsDefined() ? r.str(entry(c, "op"), "check.op") : sc.sweep_op.value_or("all_reduce");
        ck.text = ck.op + " busbw >= " + b.Scalar();
      } else {
        r.fail(c, "a check needs max_time or min_busbw");
      }
      sc.checks.push_back(ck);
    }
  }
  if (auto o = entry(root, "outputs"); o.IsDefined()) {
    r.known_keys(o, {"trace", "json", "report"}, "outputs");
    if (auto h = entry(o, "report"); h.IsDefined()) sc.out_report = r.str(h, "outputs.report");
    if (auto t = entry(o, "trace"); t.IsDefined()) sc.out_trace = r.str(t, "outputs.trace");
    if (auto j = entry(o, "json"); j.IsDefined()) sc.out_json = r.str(j, "outputs.json");
  }
  return sc;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct CollectiveLine {
  std::string op, dtype, algorithm;
  std::string desc;  // the group's description (new_group's group_desc), empty for unnamed groups
  int group_size = 0;
  int64_t bytes = 0;
  int64_t calls = 0;
  double seconds = 0;  // summed over calls (one record per call, member-latest times)
};

// A cp_attention step's groups: the cp group, and for a2a+p2p its a2a and p2p subgroups (created
// by every member of the cp group, in step order).
cp::CpGroups cp_attention_groups(const ScenarioStep& st, const runtime::ProcessGroup& cp_group) {
  if (st.cp_comm != "a2a+p2p") return cp::CpGroups(cp_group);
  return cp::hierarchical_cp_groups(cp_group, st.a2a_size, st.p2p_size);
}

// One cp_attention step on this rank: its local q, k, v in the DualChunkSwap layout (heads / tp of
// them), the forward, and unless backward is false the backward from a dout of out's shape.
// Inputs are shape-only, or with real data uniform in [-1, 1) seeded by rank, iteration and tensor.
void run_cp_attention(const ScenarioStep& st, const cp::CpGroups& groups, int tp, bool real_data, int rank,
                      int iteration) {
  const int64_t cp = groups.cp.size();
  const runtime::DType dt = *runtime::dtype_from_name(st.dtype);
  cp::SequenceLayout layout;
  runtime::Shape lead;  // the local tensors' dims before [heads, head_dim]
  if (st.format == "thd") {
    std::vector<int64_t> cu{0};
    for (int64_t len : st.seq_lens) cu.push_back(cu.back() + len);
    std::vector<int64_t> padded = cp::thd_padded_cu_seqlens(cu, cp);
    lead = {padded.back() / cp};
    layout = cp::SequenceLayout::thd(std::move(cu), std::move(padded));
  } else {
    lead = {st.batch, st.seq_lens[0] / cp};
    layout = cp::SequenceLayout::bshd(st.batch, st.seq_lens[0]);
  }
  auto input = [&](int64_t heads, uint64_t which) {
    runtime::Shape shape = lead;
    shape.push_back(heads);
    shape.push_back(st.head_dim);
    const uint64_t seed = (static_cast<uint64_t>(iteration) * 4 + which) * 1000003 + static_cast<uint64_t>(rank);
    return real_data ? runtime::Tensor::uniform(shape, seed, -1.0, 1.0, dt) : runtime::Tensor::shape_only(shape, dt);
  };
  cp::CpOptions opts;
  opts.comm_type = cp::parse_comm_type(st.cp_comm);
  opts.attention.causal = st.mask == "causal";
  opts.attention.window_left = st.window_left;
  opts.attention.window_right = st.window_right;
  const int64_t hq = st.heads / tp, hkv = st.kv_heads / tp;
  const cp::CpForwardResult f =
      cp::attention_with_cp_forward(input(hq, 0), input(hkv, 1), input(hkv, 2), layout, groups, opts);
  if (st.backward) cp::attention_with_cp_backward(input(hq, 3), f.ctx);
}

}  // namespace

int run_scenario(const Scenario& sc, const RunFlags& flags, std::ostream& out) {
  const sim::Topology topo = sim::Topology::load_file(sc.topology_path, sc.topology_sets);
  const std::string trace_path = !flags.trace.empty() ? flags.trace : sc.out_trace;
  const std::string json_path = !flags.json.empty() ? flags.json : sc.out_json;
  const std::string report_path = !flags.report.empty() ? flags.report : sc.out_report;
  const std::string device_kind = !flags.device.empty() ? flags.device : flags.backend == "nccl" ? "gpu" : "cpu";
  const std::shared_ptr<runtime::Device> device = make_device(device_kind);
  const runtime::ScopedComputeDevice on_device(device);
  out << "ranksim run: " << sc.name << " — " << sc.ranks << " ranks on " << topo.name() << " ("
      << topo.num_nodes() << (topo.num_nodes() == 1 ? " node" : " nodes") << "), layout tp=" << sc.tp
      << " cp=" << sc.cp << " dp=" << sc.dp << " pp=" << sc.pp << ", "
      << (sc.real_data ? "real data" : "shape-only") << "\n";
  if (!sc.description.empty()) out << "  " << sc.description << "\n";
  if (device) out << "  ops compute on the " << device->name() << " device\n";
  out << "\n";

  sim::Time makespan;
  std::optional<ModelInputs> model_in;
  models::TransformerDump model_dump;
  models::TrainResult train_result;
  std::vector<double> pipeline_wait(static_cast<size_t>(sc.ranks), 0.0);
  std::optional<models::ValidationReport> validation;
  std::vector<SweepRow> sweep;
  std::vector<CollectiveLine> lines;
  runtime::RunReport rep;
  const runtime::BackendKind backend = runtime::parse_backend(flags.backend);
  if (sc.sweep_op && backend != runtime::BackendKind::sim)
    throw Error(sc.file + ": a collectives sweep runs on the sim backend only; use a steps workload "
                "to time collectives with --backend " + flags.backend);
  if (sc.sweep_op) {
    SweepRequest req;
    req.op = *sc.sweep_op;
    req.ranks = sc.ranks;
    req.sizes = sc.sweep_sizes;
    req.algorithm = sc.algorithm;
    req.dtype = sc.sweep_dtype;
    req.check = sc.real_data;
    sweep = run_sweep(topo, req);
    for (const SweepRow& r : sweep) makespan += sim::Time::from_seconds(r.seconds);
    out << *sc.sweep_op << " sweep (" << sc.sweep_dtype << "):\n";
    print_table_header(out);
    const auto kind = *sc.sweep_op == "all_reduce"       ? runtime::CollectiveKind::all_reduce
                      : *sc.sweep_op == "all_gather"     ? runtime::CollectiveKind::all_gather
                      : *sc.sweep_op == "reduce_scatter" ? runtime::CollectiveKind::reduce_scatter
                      : *sc.sweep_op == "all_to_all"     ? runtime::CollectiveKind::all_to_all
                                                         : runtime::CollectiveKind::broadcast;
    for (const SweepRow& r : sweep) {
      TableRow row{r.bytes, r.count, sc.sweep_dtype, r.algorithm, r.seconds, r.wrong};
      print_table_row(out, row, kind, sc.ranks);
    }
  } else {
    runtime::SpawnOptions so;
    so.topology = &topo;
    so.algorithm = runtime::parse_algorithm(sc.algorithm);
    so.backend = backend;
    so.device_collectives = flags.device_collectives;
    so.engine.trace = !trace_path.empty() || !report_path.empty();
    // Collectives and compute steps need little stack (64 KiB keeps 16k-rank runs small); layers
    // (tp_mlp, cp_attention, the model) call through attention kernels and collectives from deep
    // frames, and AddressSanitizer's frames are several times larger.
    bool layers = sc.model.has_value();
    for (const ScenarioStep& st : sc.steps)
      layers = layers || st.kind == ScenarioStep::Kind::tp_mlp || st.kind == ScenarioStep::Kind::cp_attention;
    std::size_t stack = layers ? 512 * 1024 : 64 * 1024;
#if defined(__SANITIZE_ADDRESS__)
    stack *= 4;
#endif
    so.engine.stack.size = stack;
    // A progress line on a terminal for runs longer than a second; nothing when piped.
    const bool tty = !flags.quiet && ::isatty(STDERR_FILENO) != 0;
    bool printed = false;
    if (tty) {
      so.progress = [&](const sim::Engine::Progress& p) {
        std::fprintf(stderr, "\r  %llu events, %d/%d ranks finished, virtual time %s   ",
                     static_cast<unsigned long long>(p.events), p.finished, p.ranks, p.now.str().c_str());
        printed = true;
      };
    }
    std::optional<models::TransformerRunSpec> model_run;
    std::optional<models::TrainSpec> train_run;
    std::optional<models::MultimodalSpec> multimodal_run;
    if (sc.model) {
      model_in = load_model_inputs(*sc.model);
      if (sc.model->encoder) {
        multimodal_run = multimodal_spec(*sc.model, *model_in, sc.tp, sc.cp, sc.dp);
      } else if (sc.model->train) {
        train_run = train_spec(*sc.model, *model_in, sc.tp, sc.cp, sc.dp, sc.pp);
        if (!sc.model->train->shards.empty()) {
          std::filesystem::create_directories(sc.model->train->shards);
          train_run->shard_dir = sc.model->train->shards;
        }
      } else {
        model_run = model_spec(*sc.model, *model_in, sc.tp, sc.cp, sc.dp);
      }
    }
    rep = runtime::spawn(
        [&](int rank) {
          if (multimodal_run) {
            models::TrainResult t = models::train_multimodal(*multimodal_run);
            if (rank == 0) train_result = std::move(t);
            return;
          }
          if (train_run) {
            models::TrainResult t = models::train(*train_run);
            pipeline_wait[static_cast<size_t>(rank)] = t.pipeline_wait_seconds;
            if (rank == 0) train_result = std::move(t);
            return;
          }
          if (model_run) {
            models::TransformerDump d = models::transformer_step(*model_run);
            if (rank == 0) model_dump = std::move(d);
            return;
          }
          tp::RankGrid grid({{"tp", sc.tp}, {"cp", sc.cp}, {"dp", sc.dp}, {"pp", sc.pp}}, sc.ranks);
          std::map<std::string, runtime::ProcessGroup> groups;
          groups["world"] = runtime::ProcessGroup{};
          groups["tp"] = grid.create_group({"tp"});
          groups["cp"] = grid.create_group({"cp"});
          groups["dp"] = grid.create_group({"dp"});
          groups["pp"] = grid.create_group({"pp"});
          groups["dp_cp"] = grid.create_group({"cp", "dp"});
          groups["tp_cp"] = grid.create_group({"tp", "cp"});
          std::vector<runtime::Work> pending;
          // Layers are built once per rank (weights from full masters, split by TP rank).
          std::map<const ScenarioStep*, tp::ParallelMLP> mlps;
          for (const ScenarioStep& st : sc.steps) {
            if (st.kind != ScenarioStep::Kind::tp_mlp) continue;
            const runtime::DType dt = *runtime::dtype_from_name(st.dtype);
            auto master = [&](int64_t rows, int64_t cols, uint64_t seed) {
              return sc.real_data ? runtime::Tensor::randn({rows, cols}, seed, 0.0, 0.02)
                                  : runtime::Tensor::shape_only({rows, cols});
            };
            tp::ParallelMLPOptions mo;
            mo.sequence_parallel = st.sequence_parallel;
            mo.dtype = dt;
            mlps.emplace(&st, tp::ParallelMLP(master(st.ffn, st.hidden, 1234), master(st.hidden, st.ffn, 1235),
                                              groups.at("tp"), mo));
          }
          std::map<const ScenarioStep*, cp::CpGroups> cp_groups;
          for (const ScenarioStep& st : sc.steps)
            if (st.kind == ScenarioStep::Kind::cp_attention)
              cp_groups.emplace(&st, cp_attention_groups(st, groups.at("cp")));
          for (int it = 0; it < sc.repeat; ++it) {
            for (const ScenarioStep& st : sc.steps) {
              const runtime::DType dt = *runtime::dtype_from_name(st.dtype);
              if (st.kind == ScenarioStep::Kind::cp_attention) {
                run_cp_attention(st, cp_groups.at(&st), sc.tp, sc.real_data, rank, it);
                continue;
              }
              if (st.kind == ScenarioStep::Kind::tp_mlp) {
                tp::ParallelMLP& mlp = mlps.at(&st);
                const int64_t rows = st.sequence_parallel ? st.tokens / sc.tp : st.tokens;
                runtime::Tensor x = sc.real_data ? runtime::Tensor::randn({rows, st.hidden}, 77 + static_cast<uint64_t>(rank), 0.0, 1.0, dt)
                                                 : runtime::Tensor::shape_only({rows, st.hidden}, dt);
                tp::MLPContext ctx;
                runtime::Tensor y = mlp.forward(x, ctx);
                if (st.backward) {
                  runtime::Tensor dy = sc.real_data ? runtime::Tensor::ones(y.shape(), dt)
                                                    : runtime::Tensor::shape_only(y.shape(), dt);
                  mlp.backward(dy, ctx);
                }
                continue;
              }
              if (st.kind == ScenarioStep::Kind::compute) {
                runtime::charge({st.name.c_str(), st.flops, st.bytes, dt});
                continue;
              }
              if (st.wait) {
                for (auto& w : pending) w.wait();
                pending.clear();
                continue;
              }
              const runtime::ProcessGroup& g = groups.at(st.group);
              const int n = g.size();
              const int64_t esize = static_cast<int64_t>(runtime::dtype_size(dt));
              auto make = [&](int64_t elems) {
                elems = std::max<int64_t>(elems, 1);
                return sc.real_data ? runtime::Tensor::zeros({elems}, dt)
                                    : runtime::Tensor::shape_only({elems}, dt);
              };
              const int64_t count = static_cast<int64_t>(st.bytes) / esize;
              runtime::CollectiveOptions base;
              base.group = g;
              base.async_op = st.async;
              base.algorithm = runtime::parse_algorithm(st.algorithm);
              runtime::Work w;
              if (st.kind == ScenarioStep::Kind::sendrecv) {
                const int me = g.rank();
                runtime::Tensor s = make(count), d = make(count);
                auto ws = runtime::batch_isend_irecv(
                    {{runtime::P2POp::Kind::isend, s, g.global_rank((me + 1) % n), g},
                     {runtime::P2POp::Kind::irecv, d, g.global_rank((me + n - 1) % n), g}});
                for (auto& x : ws) (st.async ? pending.push_back(x) : x.wait());
                continue;
              }
              if (st.name == "all_reduce") {
                runtime::AllreduceOptions o;
                static_cast<runtime::CollectiveOptions&>(o) = base;
                w = runtime::all_reduce(make(count), o);
              } else if (st.name == "all_gather") {
                runtime::AllgatherOptions o;
                static_cast<runtime::CollectiveOptions&>(o) = base;
                const int64_t per = std::max<int64_t>(count / n, 1);
                w = runtime::all_gather_into_tensor(make(per * n), make(per), o);
              } else if (st.name == "reduce_scatter") {
                runtime::ReduceScatterOptions o;
                static_cast<runtime::CollectiveOptions&>(o) = base;
                const int64_t per = std::max<int64_t>(count / n, 1);
                w = runtime::reduce_scatter_tensor(make(per), make(per * n), o);
              } else if (st.name == "all_to_all") {
                runtime::AllToAllOptions o;
                static_cast<runtime::CollectiveOptions&>(o) = base;
                const int64_t per = std::max<int64_t>(count / n, 1);
                w = runtime::all_to_all_single(make(per * n), make(per * n), o);
              } else if (st.name == "broadcast") {
                runtime::BroadcastOptions o;
                static_cast<runtime::CollectiveOptions&>(o) = base;
                o.src = g.global_rank(0);
                w = runtime::broadcast(make(count), o);
              } else {
                runtime::BarrierOptions o;
                static_cast<runtime::CollectiveOptions&>(o) = base;
                w = runtime::barrier(o);
              }
              if (st.async) pending.push_back(w);
            }
          }
          for (auto& w : pending) w.wait();
          (void)rank;
        },
        sc.ranks, so);
    makespan = rep.makespan;
    if (printed) std::fprintf(stderr, "\r%80s\r", "");

    char buf[200];
    std::snprintf(buf, sizeof buf, "%6s %12s %12s %12s %12s\n", "rank", "time", "compute", "comm", "idle");
    out << buf;
    const int shown = sc.ranks <= 16 ? sc.ranks : 8;
    for (int r = 0; r < sc.ranks; ++r) {
      if (r >= shown) {
        out << "   ... (" << sc.ranks - shown << " more ranks)\n";
        break;
      }
      const sim::Time idle = makespan - rep.compute[static_cast<size_t>(r)] - rep.comm[static_cast<size_t>(r)];
      std::snprintf(buf, sizeof buf, "%6d %12s %12s %12s %12s\n", r, makespan.str().c_str(),
                    rep.compute[static_cast<size_t>(r)].str().c_str(),
                    rep.comm[static_cast<size_t>(r)].str().c_str(),
                    (idle > sim::Time::zero() ? idle : sim::Time::zero()).str().c_str());
      out << buf;
    }
    // Collectives grouped by (op, group size, dtype, bytes, algorithm, group description), in
    // first-seen order.
    bool described = false;
    for (const auto& rec : rep.collectives) {
      const std::string op = runtime::to_string(rec.kind);
      const std::string algo = runtime::to_string(rec.algorithm);
      const std::string desc = runtime::group_desc_of(rec.group);
      described = described || !desc.empty();
      auto it = std::find_if(lines.begin(), lines.end(), [&](const CollectiveLine& l) {
        return l.op == op && l.group_size == rec.group_size && l.dtype == rec.dtype &&
               l.bytes == rec.bytes && l.algorithm == algo && l.desc == desc;
      });
      if (it == lines.end()) {
        lines.push_back({op, rec.dtype, algo, desc, rec.group_size, rec.bytes, 0, 0.0});
        it = lines.end() - 1;
      }
      ++it->calls;
      it->seconds += (rec.end - rec.start).seconds();
    }
    out << "\n";
    std::snprintf(buf, sizeof buf, "%-15s %6s %6s %14s %13s %8s %12s %12s %12s", "collective", "ranks",
                  "type", "size(B)", "algorithm", "calls", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
    out << buf << (described ? "  group\n" : "\n");
    for (const CollectiveLine& l : lines) {
      const double per_call = l.seconds / static_cast<double>(l.calls);
      const double algbw = per_call > 0 ? static_cast<double>(l.bytes) / per_call / 1e9 : 0;
      const runtime::CollectiveKind kind = [&] {
        for (auto k : {runtime::CollectiveKind::all_reduce, runtime::CollectiveKind::all_gather,
                       runtime::CollectiveKind::reduce_scatter, runtime::CollectiveKind::all_to_all})
          if (l.op == runtime::to_string(k)) return k;
        return runtime::CollectiveKind::broadcast;
      }();
      std::snprintf(buf, sizeof buf, "%-15s %6d %6s %14lld %13s %8lld %12.2f %12.2f %12.2f", l.op.c_str(),
                    l.group_size, l.dtype.c_str(), static_cast<long long>(l.bytes), l.algorithm.c_str(),
                    static_cast<long long>(l.calls), per_call * 1e6, algbw,
                    algbw * busbw_factor(kind, l.group_size));
      out << buf << (described ? "  " + (l.desc.empty() ? std::string("-") : l.desc) + "\n" : std::string("\n"));
    }
  }

  if (sc.model) {
    const ModelWorkload& m = *sc.model;
    const models::TransformerConfig& c = m.config;
    out << "\nmodel: reference transformer, vocab " << c.vocab << ", hidden " << c.hidden << ", " << c.heads
        << " heads of " << c.head_dim << ", ffn " << c.ffn << ", " << runtime::dtype_name(c.dtype) << ", "
        << (m.attention.format == cp::Format::thd ? "thd" : "bshd") << " " << models::mask_name(m.attention.mask);
    if (m.attention.window_left >= 0 || m.attention.window_right >= 0)
      out << " window [" << m.attention.window_left << ", " << m.attention.window_right << "]";
    out << ", cp_comm " << sc.cp_comm << "\n";
    if (m.encoder) {
      const EncoderSettings& e = *m.encoder;
      std::string order;
      for (const auto& d : m.order) order += (order.empty() ? "" : "-") + d;
      const char* mode = e.dp > sc.dp ? "fan-in" : e.dp < sc.dp ? "fan-out" : "identity";
      out << "  encoder: 2-layer MLP " << e.config.features << " -> " << e.config.ffn << " -> " << c.hidden
          << " at tp=" << e.tp << " dp=" << e.dp << ", bridged (" << mode << ") into the transformer's " << order
          << " grid; its outputs replace the embeddings\n";
      out << "  training: " << m.train->steps << " steps, adamw lr " << fmt("%g", m.train->optimizer.lr)
          << ", weight decay " << fmt("%g", m.train->optimizer.weight_decay) << "\n";
    } else if (m.train) {
      const TrainSettings& t = *m.train;
      out << "  training: " << t.steps << " steps, " << t.micro_batches << " micro-batches per DP rank, adamw lr "
          << fmt("%g", t.optimizer.lr) << ", weight decay " << fmt("%g", t.optimizer.weight_decay)
          << (t.clip_grad_norm ? ", clip " + fmt("%g", *t.clip_grad_norm) : std::string()) << ", zero " << t.zero
          << ", layers " << c.layers << " over pp=" << sc.pp << "\n";
    }
    if (m.train && sc.pp > 1) {
      const auto [lo, hi] = std::minmax_element(pipeline_wait.begin(), pipeline_wait.end());
      out << "  pipeline: time blocked in stage-to-stage receives (the 1F1B bubble plus activation transfers, "
             "counted in comm above): " << sim::Time::from_seconds(*lo).str() << " to "
          << sim::Time::from_seconds(*hi).str() << " per rank\n";
    }
    if (m.shape_only) {
      out << "  shape-only: timing only, no numbers\n";
    } else if (m.train) {
      out << "  step    loss";
      if (m.train->clip_grad_norm) out << "   grad norm";
      out << "\n";
      for (std::size_t i = 0; i < train_result.losses.size(); ++i) {
        out << fmt("  %4.0f", static_cast<double>(i + 1)) << fmt("  %.6f", train_result.losses[i]);
        if (m.train->clip_grad_norm) out << fmt("  %10.6f", train_result.grad_norms[i]);
        out << "\n";
      }
    } else {
      out << "  loss " << fmt("%.6f", model_dump.loss) << " over " << model_dump.tokens << " labelled tokens\n";
    }
    if (m.validate) {
      validation = validate_against_baseline(m, *model_in, model_dump, sc.dp);
      out << "\n";
      models::print_validation(*validation, baseline_name(m),
                               "tp=" + std::to_string(sc.tp) + " cp=" + std::to_string(sc.cp) + " " + sc.cp_comm, out);
    }
  }

  // Checks.
  struct CheckResult {
    std::string text;
    bool passed;
    std::string measured;
  };
  std::vector<CheckResult> results;
  if (validation) {
    const models::ValidationReport& v = *validation;
    const models::ValidationThresholds& t = v.thresholds;
    results.push_back({"validation logits: >= " + fmt("%g", 100 * t.logits_share) + "% within " + fmt("%g", t.logits_atol),
                       v.logits_ok, fmt("%.2f%%", 100 * v.logits_share)});
    results.push_back({"validation loss: relative difference <= " + fmt("%g", t.loss_rel), v.loss_ok, fmt("%.3g", v.loss_rel)});
    results.push_back({"validation gradients: norm difference <= " + fmt("%g", t.grad_norm_diff) + ", >= " +
                           fmt("%g", 100 * t.acceptable_share) + "% acceptable",
                       v.grads_ok, fmt("%.3g", v.grad_max_norm_diff) + ", " + fmt("%.0f%%", 100 * v.acceptable_share)});
  }
  for (const ScenarioCheck& ck : sc.checks) {
    if (ck.kind == ScenarioCheck::Kind::max_time) {
      results.push_back({ck.text, makespan <= ck.time, makespan.str()});
    } else {
      double busbw = -1;
      if (!sweep.empty() && sc.sweep_op == ck.op) busbw = sweep.back().busbw;
      for (const CollectiveLine& l : lines)
        if (l.op == ck.op) {
          const double per_call = l.seconds / static_cast<double>(l.calls);
          const runtime::CollectiveKind kind =
              l.op == "all_reduce" ? runtime::CollectiveKind::all_reduce
              : (l.op == "all_gather" || l.op == "reduce_scatter" || l.op == "all_to_all")
                  ? runtime::CollectiveKind::all_gather
                  : runtime::CollectiveKind::broadcast;
          busbw = std::max(busbw, static_cast<double>(l.bytes) / per_call * busbw_factor(kind, l.group_size));
        }
      results.push_back({ck.text, busbw >= ck.busbw,
                         busbw < 0 ? "no " + ck.op + " in this run" : sim::units::format_bandwidth(busbw)});
    }
  }
  bool all_passed = true;
  for (const auto& r : sweep)
    if (r.wrong > 0) all_passed = false;
  out << (backend != runtime::BackendKind::sim ? "\nwall time: " : "\nvirtual time: ") << makespan << "\n";
  if (device) {
    const runtime::DeviceStats& ds = device->stats();
    out << "device " << device->name() << ": " << ds.ops << " ops (" << ds.kernels << " kernels, " << ds.gemms
        << " GEMMs); " << ds.uploads << " uploads (" << sim::units::format_bytes(static_cast<uint64_t>(ds.upload_bytes))
        << "), " << ds.downloads << " downloads (" << sim::units::format_bytes(static_cast<uint64_t>(ds.download_bytes)) << ")\n";
  }
  if (!results.empty()) out << "checks:\n";
  for (const CheckResult& c : results) {
    out << "  [" << (c.passed ? "pass" : "FAIL") << "] " << c.text << " (measured " << c.measured << ")\n";
    all_passed = all_passed && c.passed;
  }

  if (sc.model && !sc.model->dump.empty()) {
    if (sc.model->train) {
      models::write_train_dump(sc.model->dump, train_result);
    } else {
      models::write_dump(sc.model->dump, model_dump);
    }
    out << "dump: " << sc.model->dump << "\n";
  }
  if (sc.model && sc.model->train && !sc.model->train->checkpoint.empty()) {
    models::save_checkpoint(sc.model->train->checkpoint, train_result);
    out << "checkpoint: " << sc.model->train->checkpoint << "\n";
  }
  if (sc.model && sc.model->train && !sc.model->train->shards.empty())
    out << "shards: " << sc.model->train->shards << " (one file per tp x pp rank; ranksim consolidate joins them)\n";
  if (!json_path.empty()) {
    sim::write_file_atomically(json_path, [&](std::ostream& j) {
      j << "{\n  \"scenario\": \"" << sc.name << "\",\n  \"backend\": \"" << flags.backend << "\",\n  \"device\": \"" << device_kind << "\",\n  \"topology\": \"" << topo.name()
        << "\",\n  \"ranks\": " << sc.ranks << ",\n  \"layout\": {\"tp\": " << sc.tp << ", \"cp\": " << sc.cp
        << ", \"dp\": " << sc.dp << ", \"pp\": " << sc.pp << "},\n  \"virtual_time_us\": "
        << sim::format_us(makespan) << ",\n  \"ranks_detail\": [";
      for (size_t r = 0; r < rep.clocks.size(); ++r) {
        j << (r ? "," : "") << "\n    {\"rank\": " << r << ", \"clock_us\": " << sim::format_us(rep.clocks[r])
          << ", \"compute_us\": " << sim::format_us(rep.compute[r]) << ", \"comm_us\": "
          << sim::format_us(rep.comm[r]) << "}";
      }
      j << "\n  ],\n  \"collectives\": [";
      for (size_t i = 0; i < lines.size(); ++i) {
        const auto& l = lines[i];
        j << (i ? "," : "") << "\n    {\"op\": \"" << l.op << "\", \"group_size\": " << l.group_size
          << ", \"dtype\": \"" << l.dtype << "\", \"bytes\": " << l.bytes << ", \"algorithm\": \""
          << l.algorithm << "\", \"calls\": " << l.calls << ", \"time_us\": "
          << fmt("%.6f", l.seconds / static_cast<double>(l.calls) * 1e6)
          << (l.desc.empty() ? std::string() : ", \"group\": \"" + l.desc + "\"") << "}";
      }
      j << "\n  ],\n  \"sweep\": [";
      for (size_t i = 0; i < sweep.size(); ++i) {
        const auto& r = sweep[i];
        j << (i ? "," : "") << "\n    {\"bytes\": " << r.bytes << ", \"count\": " << r.count
          << ", \"algorithm\": \"" << r.algorithm << "\", \"time_us\": " << fmt("%.6f", r.seconds * 1e6)
          << ", \"algbw_GBps\": " << fmt("%.6f", r.algbw / 1e9) << ", \"busbw_GBps\": "
          << fmt("%.6f", r.busbw / 1e9) << ", \"wrong\": " << r.wrong << "}";
      }
      j << "\n  ],";
      if (sc.model) {
        const bool numbers = !sc.model->shape_only && std::isfinite(model_dump.loss);
        j << "\n  \"model\": {";
        if (sc.model->train) {
          j << "\"pipeline_wait_us\": [";
          for (size_t i = 0; i < pipeline_wait.size(); ++i)
            j << (i ? ", " : "") << sim::format_us(sim::Time::from_seconds(pipeline_wait[i]));
          j << "], \"losses\": [";
          for (size_t i = 0; i < train_result.losses.size(); ++i)
            j << (i ? ", " : "") << (std::isfinite(train_result.losses[i]) ? fmt("%.9g", train_result.losses[i]) : std::string("null"));
          j << "]";
        } else {
          j << "\"loss\": " << (numbers ? fmt("%.9g", model_dump.loss) : std::string("null")) << ", \"tokens\": " << model_dump.tokens;
        }
        if (validation) {
          const models::ValidationReport& v = *validation;
          j << ", \"validation\": {\"baseline\": \"" << baseline_name(*sc.model) << "\", \"logits_share\": "
            << fmt("%.6f", v.logits_share) << ", \"logits_max_diff\": " << fmt("%.6g", v.logits_max_diff)
            << ", \"loss_rel\": " << fmt("%.6g", v.loss_rel) << ", \"grad_max_norm_diff\": "
            << fmt("%.6g", v.grad_max_norm_diff) << ", \"acceptable_share\": " << fmt("%.6f", v.acceptable_share)
            << ", \"passed\": " << (v.ok() ? "true" : "false") << ", \"grads\": [";
          for (size_t i = 0; i < v.grads.size(); ++i) {
            const auto& g = v.grads[i];
            j << (i ? ", " : "") << "{\"name\": \"" << g.name << "\", \"norm_diff\": " << fmt("%.6g", g.norm_diff)
              << ", \"category\": \"" << models::category_name(g.category) << "\"}";
          }
          j << "]}";
        }
        j << "},";
      }
      j << "\n  \"checks\": [";
      for (size_t i = 0; i < results.size(); ++i)
        j << (i ? "," : "") << "\n    {\"check\": \"" << results[i].text << "\", \"passed\": "
          << (results[i].passed ? "true" : "false") << ", \"measured\": \"" << results[i].measured << "\"}";
      j << "\n  ],\n  \"passed\": " << (all_passed ? "true" : "false") << "\n}\n";
    });
    out << "summary: " << json_path << "\n";
  }
  if (!report_path.empty()) {
    ReportData d;
    d.title = "ranksim: " + sc.name;
    d.subtitle = std::to_string(sc.ranks) + " ranks on " + topo.name() + ", tp=" + std::to_string(sc.tp) +
                 " cp=" + std::to_string(sc.cp) + " dp=" + std::to_string(sc.dp) + " pp=" +
                 std::to_string(sc.pp) + (sc.description.empty() ? "" : " — " + sc.description);
    d.makespan = makespan;
    d.nranks = sc.ranks;
    for (size_t r = 0; r < rep.clocks.size(); ++r)
      d.ranks.push_back({static_cast<int>(r), rep.clocks[r], rep.compute[r], rep.comm[r]});
    d.collective_header = {"collective", "ranks", "type", "size(B)", "algorithm", "calls", "time(us)", "busbw(GB/s)"};
    for (const CollectiveLine& l : lines) {
      const double per_call = l.seconds / static_cast<double>(l.calls);
      const runtime::CollectiveKind kind = l.op == "all_reduce" ? runtime::CollectiveKind::all_reduce
                                           : (l.op == "all_gather" || l.op == "reduce_scatter" || l.op == "all_to_all")
                                               ? runtime::CollectiveKind::all_gather
                                               : runtime::CollectiveKind::broadcast;
      const double busbw = per_call > 0 ? static_cast<double>(l.bytes) / per_call / 1e9 * busbw_factor(kind, l.group_size) : 0;
      d.collectives.push_back({{l.desc.empty() ? l.op : l.op + " (" + l.desc + ")", std::to_string(l.group_size), l.dtype, std::to_string(l.bytes), l.algorithm,
                                std::to_string(l.calls), fmt("%.2f", per_call * 1e6), fmt("%.2f", busbw)}});
    }
    if (sc.sweep_op) {
      d.sweep_op = *sc.sweep_op;
      d.collective_header = {"size(B)", "count", "type", "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)"};
      for (const SweepRow& r : sweep) {
        d.sweep.push_back({r.bytes, r.busbw / 1e9});
        d.collectives.push_back({{std::to_string(r.bytes), std::to_string(r.count), sc.sweep_dtype, r.algorithm,
                                  fmt("%.2f", r.seconds * 1e6), fmt("%.2f", r.algbw / 1e9), fmt("%.2f", r.busbw / 1e9)}});
      }
    }
    for (const CheckResult& c : results) d.checks.push_back({c.text, c.passed, c.measured});
    d.trace = sc.sweep_op ? nullptr : &rep.trace;
    write_html_report(report_path, d);
    out << "report: " << report_path << "\n";
  }
  if (!trace_path.empty() && !sc.sweep_op) {
    rep.trace.save(trace_path);
    out << "trace: " << trace_path << " (open in ui.perfetto.dev)\n";
  }
  return all_passed ? 0 : 1;
}

void list_shipped(const std::string& root, std::ostream& out) {
  for (const char* folder : {"topologies", "scenarios"}) {
    out << folder << ":\n";
    std::vector<fs::path> files;
    const fs::path dir = fs::path(root) / folder;
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".yaml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::string what;
      try {
        const YAML::Node n = YAML::LoadFile(f.string());
        if (n["description"]) what = n["description"].as<std::string>();
        else if (n["name"]) what = n["name"].as<std::string>();
      } catch (const YAML::Exception&) {
        what = "(unreadable)";
      }
      if (what.empty()) {
        // Topologies describe themselves in their first comment line.
        std::ifstream in(f);
        std::string line;
        if (std::getline(in, line) && line.rfind("# ", 0) == 0) what = line.substr(2);
      }
      char buf[300];
      std::snprintf(buf, sizeof buf, "  %-28s %s\n", (std::string(folder) + "/" + f.filename().string()).c_str(), what.c_str());
      out << buf;
    }
  }
}

}  // namespace ranksim::app

// Loading a scenario file: the document's schema, its --set overrides, and the checks of the
// whole document (layout against topology, workload, checks, outputs). Steps and the model
// workload are read by scenario_steps.cpp and scenario_model.cpp.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app/bench.h"
#include "app/scenario.h"
#include "app/scenario_reader.h"
#include "sim/check.h"
#include "sim/compute.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/suggest.h"
#include "sim/topology.h"
#include "sim/topology_reader.h"
#include "sim/units.h"

namespace ranksim::app {

const std::vector<std::string> kCollectiveOps = {"all_reduce", "all_gather", "reduce_scatter",
                                                 "all_to_all", "broadcast",  "barrier"};
const std::vector<std::string> kDtypes = {"f32", "f64", "bf16", "f16", "i64", "i32"};
const std::vector<std::string> kAlgorithms = {"auto", "ring",      "tree",    "direct", "hierarchical",
                                              "nvls", "nvls_tree", "collnet", "pat"};

namespace {

namespace fs = std::filesystem;

// The schema's keys are kept sorted: errors list them in this order.
struct ScenarioSchema {
  sim::YamlSchema parallel, model, optimizer, train, encoder, batch, baseline, validate, collectives, step, step_list,
      steps, workload, check, checks, fault, faults, outputs, root;
  ScenarioSchema() {
    parallel.keys = {{"cp", nullptr},
                     {"cp_comm", nullptr},
                     {"decoder_first_pipeline_num_layers", nullptr},
                     {"decoder_last_pipeline_num_layers", nullptr},
                     {"dp", nullptr},
                     {"hierarchical_cp", nullptr},
                     {"order", nullptr},
                     {"pp", nullptr},
                     {"sequence_parallel", nullptr},
                     {"tp", nullptr},
                     {"tp_comm_overlap", nullptr},
                     {"virtual_stages", nullptr}};
    model.keys = {{"activation", nullptr},
                  {"bias", nullptr},
                  {"dtype", nullptr},
                  {"family", nullptr},
                  {"ffn", nullptr},
                  {"format", nullptr},
                  {"fp8", nullptr},
                  {"head_dim", nullptr},
                  {"heads", nullptr},
                  {"hidden", nullptr},
                  {"kind", nullptr},
                  {"kv_heads", nullptr},
                  {"layers", nullptr},
                  {"make_vocab_size_divisible_by", nullptr},
                  {"mask", nullptr},
                  {"max_positions", nullptr},
                  {"norm", nullptr},
                  {"positions", nullptr},
                  {"recompute", nullptr},
                  {"recompute_method", nullptr},
                  {"recompute_num_layers", nullptr},
                  {"rope_base", nullptr},
                  {"seed", nullptr},
                  {"vocab", nullptr},
                  {"weights", nullptr},
                  {"window", nullptr}};
    optimizer.keys = {
        {"betas", nullptr}, {"eps", nullptr}, {"kind", nullptr}, {"lr", nullptr}, {"weight_decay", nullptr}};
    train.keys = {{"checkpoint", nullptr},
                  {"clip_grad_norm", nullptr},
                  {"ddp_bucket_size", nullptr},
                  {"overlap_grad_reduce", nullptr},
                  {"global_batch_size", nullptr},
                  {"micro_batch_size", nullptr},
                  {"micro_batches", nullptr},
                  {"optimizer", &optimizer},
                  {"shards", nullptr},
                  {"steps", nullptr},
                  {"zero", nullptr}};
    encoder.keys = {{"dp", nullptr}, {"features", nullptr}, {"ffn", nullptr}, {"tp", nullptr}};
    // batch is a file name or a synthetic batch's shape: --set batch.rows=16 reaches into the latter
    batch.keys = {{"lengths", nullptr}, {"rows", nullptr}, {"seq_len", nullptr}};
    baseline.keys = {{"cp", nullptr}, {"tp", nullptr}};
    validate.keys = {{"acceptable_share", nullptr}, {"baseline", &baseline},   {"grad_norm_diff", nullptr},
                     {"logits_atol", nullptr},      {"logits_share", nullptr}, {"loss_rel", nullptr}};
    collectives.keys = {{"dtype", nullptr}, {"op", nullptr}, {"sizes", nullptr}};
    // A step is a mapping of its kind to its settings; read_step checks the settings of each kind.
    static const sim::YamlSchema open{{}, nullptr, nullptr, true};
    step.any_key = &open;
    steps.keys = {{"do", &step_list}, {"repeat", nullptr}};
    step_list.items = &step;
    workload.keys = {{"collectives", &collectives}, {"steps", &steps}};
    check.keys = {{"max_time", nullptr}, {"min_busbw", nullptr}, {"op", nullptr}};
    checks.items = &check;
    // A fault is a mapping of its kind to its settings, as a step is; read_fault checks them.
    fault.any_key = &open;
    faults.items = &fault;
    outputs.keys = {{"json", nullptr}, {"report", nullptr}, {"trace", nullptr}};
    root.keys = {
        {"algorithm", nullptr},    {"batch", &batch},         {"checks", &checks},     {"data", nullptr},
        {"description", nullptr},  {"dump", nullptr},         {"encoder", &encoder},   {"faults", &faults},
        {"model", &model},         {"memory_check", nullptr}, {"name", nullptr},       {"outputs", &outputs},
        {"parallel", &parallel},   {"protocol", nullptr},     {"ranks", nullptr},      {"topology", nullptr},
        {"topology_set", nullptr}, {"train", &train},         {"validate", &validate}, {"workload", &workload}};
  }
  ScenarioSchema(const ScenarioSchema&) = delete;
  ScenarioSchema& operator=(const ScenarioSchema&) = delete;
};

const ScenarioSchema& schema() {
  static const ScenarioSchema s;
  return s;
}

// One --set: `topology.<key>=value` (or `topology_set.<key>=value`, after the file's key)
// overrides the topology file (applied when it is loaded, as typed: the topology skips the prefix
// and quotes the whole override in errors); any other key overrides the scenario's tree.
void apply_override(YAML::Node& root, const std::string& text, sim::YamlPositions& positions, Scenario& sc) {
  if (text.find('=') != std::string::npos) {
    for (const std::string& prefix : sim::topology_set_options().document_prefixes) {
      if (text.rfind(prefix, 0) == 0) {
        sc.topology_sets.push_back(text);
        return;
      }
    }
  }
  sim::SetOptions o;
  o.document = "this scenario";
  o.example = "parallel.tp=2 or topology.nodes=4";
  o.allow_empty_value = true;     // `--set dump=` clears an optional key
  o.replace_plain_values = true;  // `--set batch.rows=16` replaces a batch file by a synthetic batch
  o.name_parent_of_unknown_key = false;
  sim::apply_set(root, text, schema().root, positions, o);
}

}  // namespace

const sim::YamlSchema& scenario_schema() { return schema().root; }

std::vector<std::string> section_keys(const std::string& dotted) {
  const sim::YamlSchema* s = &scenario_schema();
  for (size_t b = 0; b < dotted.size();) {
    size_t e = dotted.find('.', b);
    if (e == std::string::npos) e = dotted.size();
    const sim::YamlSchema* child = nullptr;
    const bool known = s->has_key(dotted.substr(b, e - b), &child);
    RANKSIM_CHECK(known && child != nullptr, "section_keys: not a section of the scenario schema");
    s = child;
    b = e + 1;
  }
  return s->key_names();
}

void ScenarioReader::known_keys(const YAML::Node& map, const std::vector<std::string>& known,
                                const std::string& where) const {
  if (!map.IsMap()) fail(map, where + " must be a mapping, got " + sim::describe(map));
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end())
      fail(it->first, "unknown key '" + key + "' in " + where + sim::did_you_mean(key, known) +
                          " (known keys: " + sim::join(known) + ")");
    // YAML leaves a repeated key to the reader; taking either value silently would be a guess.
    for (auto earlier = map.begin(); earlier != it; ++earlier) {
      if (earlier->first.Scalar() != key) continue;
      const YAML::Mark m = earlier->first.Mark();
      fail(it->first, "duplicate key '" + key + "' in " + where +
                          (m.is_null() ? std::string() : " (first given on line " + std::to_string(m.line + 1) + ")") +
                          "; give each key once");
    }
  }
}

std::string ScenarioReader::str(const YAML::Node& n, const std::string& what) const {
  if (!n.IsScalar()) fail(n, what + " must be a single value, got " + sim::describe(n));
  return n.Scalar();
}

int ScenarioReader::positive_int(const YAML::Node& n, const std::string& what) const {
  const std::string s = str(n, what);
  try {
    size_t used = 0;
    const long v = std::stol(s, &used);
    if (used == s.size() && v >= 1 && v <= (1 << 24)) return static_cast<int>(v);
  } catch (const std::exception&) {
  }
  fail(n, what + " must be an integer from 1 to 16777216 (2^24), got '" + s + "'");
}

int64_t ScenarioReader::integer(const YAML::Node& n, const std::string& what, int64_t min) const {
  const std::string s = str(n, what);
  try {
    size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size() && v >= min && v <= (int64_t{1} << 40)) return v;
  } catch (const std::exception&) {
  }
  fail(n, what + " must be an integer of at least " + std::to_string(min) + ", got '" + s + "'");
}

double ScenarioReader::number(const YAML::Node& n, const std::string& what) const {
  const std::string s = str(n, what);
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  fail(n, what + " must be a non-negative number, got '" + s + "'");
}

std::string ScenarioReader::one_of(const YAML::Node& n, const std::string& what,
                                   const std::vector<std::string>& allowed) const {
  const std::string s = str(n, what);
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end())
    fail(n, what + " is '" + s + "'; expected one of " + sim::join(allowed) + sim::did_you_mean(s, allowed));
  return s;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets) {
  return load_scenario_text(sim::read_text_file(path, "scenario YAML file"), path, sets);
}

Scenario load_scenario_text(const std::string& text, const std::string& path, const std::vector<std::string>& sets) {
  Scenario sc;
  sc.file = path;
  YAML::Node root = sim::parse_yaml(text, path);
  sim::YamlPositions positions(path);
  const ScenarioReader r(positions);
  if (!root.IsMap()) {
    if (root.IsNull() && (root.Mark().is_null() || root.Mark().line < 0))
      throw ConfigError(path, 1, 1,
                        "the scenario is empty; a scenario file is a mapping of keys (name, topology, workload, "
                        "...): see docs/scenarios.md");
    r.fail(root, "a scenario file must be a mapping of keys (name, topology, workload, ...)");
  }
  for (const std::string& s : sets) apply_override(root, s, positions, sc);
  r.known_keys(root, section_keys(""), "the scenario");

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

  sc.topology = [&] {
    try {
      return std::make_shared<const sim::Topology>(sim::Topology::load_file(sc.topology_path, sc.topology_sets));
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      r.fail(topo_node, std::string("topology: ") + e.what());
    }
  }();
  const sim::Topology& topo = *sc.topology;

  if (auto n = entry(root, "ranks"); n.IsDefined()) sc.ranks = r.positive_int(n, "ranks");
  YAML::Node par = entry(root, "parallel");
  bool dp_given = false;
  if (par.IsDefined()) {
    r.known_keys(par, section_keys("parallel"), "parallel");
    if (auto v = entry(par, "tp"); v.IsDefined()) sc.tp = r.positive_int(v, "parallel.tp");
    if (auto v = entry(par, "cp"); v.IsDefined()) sc.cp = r.positive_int(v, "parallel.cp");
    if (auto v = entry(par, "pp"); v.IsDefined()) sc.pp = r.positive_int(v, "parallel.pp");
    // `dp: auto`: what tp x cp x pp leave of `ranks` (of the topology's devices without it)
    if (auto v = entry(par, "dp"); v.IsDefined() && !(v.IsScalar() && v.Scalar() == "auto")) {
      sc.dp = r.positive_int(v, "parallel.dp");
      dp_given = true;
    }
    if (auto v = entry(par, "cp_comm"); v.IsDefined())
      sc.cp_comm = r.one_of(v, "parallel.cp_comm", {"p2p", "all_gather", "a2a", "a2a+p2p"});
    if (auto v = entry(par, "hierarchical_cp"); v.IsDefined()) {
      if (!v.IsSequence() || v.size() != 2)
        r.fail(v, "parallel.hierarchical_cp must be [a2a size, p2p size], e.g. [2, 4] for cp=8");
      sc.hierarchical_cp = {r.positive_int(v[0], "parallel.hierarchical_cp"),
                            r.positive_int(v[1], "parallel.hierarchical_cp")};
    }
  }
  const YAML::Node layout_at = par.IsDefined() ? par : root;
  const int model = sc.tp * sc.cp * sc.pp;
  const bool has_model = entry(root, "model").IsDefined();
  // The reference transformer's world is its layout; a workload fills the topology by default.
  const bool dp_auto = par.IsDefined() && entry(par, "dp").IsDefined() && !dp_given;
  if (sc.ranks == 0) sc.ranks = dp_given ? model * sc.dp : has_model && !dp_auto ? model : topo.num_devices();
  if (dp_given && model * sc.dp != sc.ranks)
    r.fail(layout_at, "parallel layout tp=" + std::to_string(sc.tp) + " x cp=" + std::to_string(sc.cp) +
                          " x pp=" + std::to_string(sc.pp) + " x dp=" + std::to_string(sc.dp) + " = " +
                          std::to_string(model * sc.dp) + " ranks, but the run has " + std::to_string(sc.ranks) +
                          "; make the product equal ranks");
  if (!sc.hierarchical_cp.empty() && sc.hierarchical_cp[0] * sc.hierarchical_cp[1] != sc.cp)
    r.fail(entry(par, "hierarchical_cp"), "parallel.hierarchical_cp [" + std::to_string(sc.hierarchical_cp[0]) + ", " +
                                              std::to_string(sc.hierarchical_cp[1]) + "] multiplies to " +
                                              std::to_string(sc.hierarchical_cp[0] * sc.hierarchical_cp[1]) +
                                              ", not cp=" + std::to_string(sc.cp));
  if (sc.ranks % model != 0)
    r.fail(layout_at, "tp=" + std::to_string(sc.tp) + " x cp=" + std::to_string(sc.cp) +
                          " x pp=" + std::to_string(sc.pp) + " = " + std::to_string(model) + " does not divide the " +
                          std::to_string(sc.ranks) + " ranks");
  sc.dp = sc.ranks / model;
  if (sc.ranks > topo.num_devices())
    r.fail(entry(root, "ranks").IsDefined() ? entry(root, "ranks") : layout_at,
           std::to_string(sc.ranks) + " ranks need " + std::to_string(sc.ranks) + " devices but topology '" +
               topo.name() + "' has " + std::to_string(topo.num_devices()) +
               "; use fewer ranks or more nodes (--set topology.nodes=N)");

  // One name, or a list in NCCL_ALGO's syntax (sim::is_nccl_list).
  if (auto a = entry(root, "algorithm"); a.IsDefined()) {
    sc.algorithm =
        sim::is_nccl_list(r.str(a, "algorithm")) ? r.str(a, "algorithm") : r.one_of(a, "algorithm", kAlgorithms);
    try {
      (void)nccl_lists(sc.algorithm, "auto", "algorithm", "protocol");
    } catch (const Error& e) {
      r.fail(a, e.what());
    }
  }
  if (auto mc = entry(root, "memory_check"); mc.IsDefined())
    sc.memory_warn_only = r.one_of(mc, "memory_check", {"error", "warn"}) == "warn";
  if (auto a = entry(root, "protocol"); a.IsDefined()) {
    sc.protocol = sim::is_nccl_list(r.str(a, "protocol")) ? r.str(a, "protocol")
                                                          : r.one_of(a, "protocol", {"auto", "LL", "LL128", "Simple"});
    try {
      (void)nccl_lists("auto", sc.protocol, "algorithm", "protocol");
    } catch (const Error& e) {
      r.fail(a, e.what());
    }
  }
  const YAML::Node data_node = entry(root, "data");
  if (data_node.IsDefined()) sc.real_data = r.one_of(data_node, "data", {"shape_only", "real"}) == "real";

  for (const char* k : {"sequence_parallel", "tp_comm_overlap", "virtual_stages", "decoder_first_pipeline_num_layers",
                        "decoder_last_pipeline_num_layers"})
    if (!has_model && par.IsDefined() && entry(par, k).IsDefined())
      r.fail(entry(par, k),
             std::string("parallel.") + k + " belongs to the model workload; add model: {kind: transformer, ...}");
  for (const char* k : {"batch", "dump", "validate", "train", "encoder"})
    if (!has_model && entry(root, k).IsDefined())
      r.fail(entry(root, k), std::string(k) + " belongs to the model workload; add model: {kind: transformer, ...}");
  if (has_model) {
    if (auto w = entry(root, "workload"); w.IsDefined())
      r.fail(w,
             "model and workload are alternatives: a scenario runs the reference transformer (model:) or a "
             "workload (collectives, steps), not both");
    if (!data_node.IsDefined()) sc.real_data = true;  // the model computes real numbers unless told not to
    sc.model = read_model(root, entry(root, "model"), r, sc, data_node.IsDefined(), fs::path(path).parent_path());
    if (!sc.model->encoder && par.IsDefined() && entry(par, "order").IsDefined())
      r.fail(entry(par, "order"),
             "parallel.order orders the transformer's grid beside an encoder; without encoder: it is "
             "always tp, cp, dp");
  }
  const YAML::Node wl = has_model ? YAML::Node(YAML::NodeType::Undefined) : need("workload");
  if (!has_model) {
    r.known_keys(wl, section_keys("workload"), "workload");
    if (wl.size() != 1) r.fail(wl, "workload must have exactly one of: collectives, steps");
    if (auto c = entry(wl, "collectives"); c.IsDefined()) {
      r.known_keys(c, {"op", "sizes", "dtype"}, "workload.collectives");
      // What `bench collectives` sweeps: a sweep of barriers measures nothing; sendrecv instead.
      std::vector<std::string> ops = kCollectiveOps;
      ops.back() = "reduce";
      ops.insert(ops.end(), {"gather", "scatter", "sendrecv"});
      sc.sweep_op = entry(c, "op").IsDefined() ? r.one_of(entry(c, "op"), "collectives.op", ops) : "all_reduce";
      const YAML::Node sz = entry(c, "sizes");
      try {
        sc.sweep_sizes = parse_size_sweep(sz.IsDefined() ? r.str(sz, "collectives.sizes") : "8B:128MiB");
        check_sizes_fit(topo, sc.ranks, sc.sweep_sizes, "collectives.sizes");
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
        if (const YAML::Node body = st.begin()->second; body.IsMap() && entry(body, "ranks").IsDefined())
          sc.steps.back().ranks = read_rank_list(entry(body, "ranks"), sc.ranks, r);
        if (sc.steps.back().kind == ScenarioStep::Kind::cp_attention)
          check_cp_attention(sc.steps.back(), st.begin()->second, par, sc, r);
        // A collective's buffer must fit a device (as a sweep's sizes must).
        const ScenarioStep& last = sc.steps.back();
        if ((last.kind == ScenarioStep::Kind::collective || last.kind == ScenarioStep::Kind::sendrecv) &&
            last.bytes > 0) {
          const YAML::Node bytes_at = entry(st.begin()->second, "bytes");
          try {
            check_sizes_fit(topo, sc.ranks, {static_cast<int64_t>(last.bytes)}, last.name + ".bytes");
          } catch (const Error& e) {
            r.fail(bytes_at.IsDefined() ? bytes_at : st, e.what());
          }
        }
      }
      // A compute step whose kernel the clock cannot hold on some device of the run (flops:
      // 1e300) is refused here, at its position, not by every rank at run time.
      const sim::ComputeModel compute(*sc.topology);
      for (std::size_t i = 0; i < sc.steps.size(); ++i) {
        const ScenarioStep& st = sc.steps[i];
        if (st.kind != ScenarioStep::Kind::compute) continue;
        std::vector<const sim::DeviceKind*> seen;
        for (int d = 0; d < sc.ranks && d < sc.topology->num_devices(); ++d) {
          const sim::DeviceKind* k = &sc.topology->kind_of(d);
          if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
          seen.push_back(k);
          try {
            (void)compute.cost(d, st.flops, st.bytes, st.dtype);
          } catch (const Error& e) {
            r.fail(list[i], e.what());
          }
        }
      }
      for (const ScenarioStep& st : sc.steps) {
        const int axis = st.group == "tp"   ? sc.tp
                         : st.group == "cp" ? sc.cp
                         : st.group == "pp" ? sc.pp
                         : st.group == "dp" ? sc.dp
                                            : 2;
        if (st.kind == ScenarioStep::Kind::tp_mlp) {
          if (st.ffn % sc.tp != 0)
            r.fail(list, "tp_mlp: ffn " + std::to_string(st.ffn) + " is not divisible by tp=" + std::to_string(sc.tp));
          if (st.sequence_parallel && st.tokens % sc.tp != 0)
            r.fail(list, "tp_mlp: with sequence_parallel, tokens " + std::to_string(st.tokens) +
                             " must be divisible by tp=" + std::to_string(sc.tp));
        }
        if (st.kind == ScenarioStep::Kind::sendrecv && (st.group == "world" ? sc.ranks : axis) < 2) {
          r.fail(list, "a sendrecv step on group '" + st.group + "' needs at least 2 ranks in it (it has " +
                           std::to_string(st.group == "world" ? sc.ranks : axis) + ")");
        }
        // The scenario's default algorithm applies to the steps that leave theirs at auto.
        if (st.kind == ScenarioStep::Kind::collective && st.algorithm == "auto") {
          check_collective_algorithm(st.name, single_name(sc.algorithm), entry(root, "algorithm"), r);
        }
      }
    }
  }

  if (auto fs_node = entry(root, "faults"); fs_node.IsDefined()) {
    if (!fs_node.IsSequence()) r.fail(fs_node, "faults must be a list, e.g. [{straggler: {rank: 3, slowdown: 1.5}}]");
    if (sc.sweep_op && fs_node.size() > 0)
      r.fail(fs_node, "faults apply to steps and model workloads; a collectives sweep times each size alone");
    for (std::size_t i = 0; i < fs_node.size(); ++i)
      sc.faults.push_back(read_fault(fs_node[i], "faults[" + std::to_string(i) + "]", sc, r));
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

}  // namespace ranksim::app

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/scenario_reader.h"
#include "runtime/distributed/schedule.h"
#include "sim/suggest.h"
#include "sim/units.h"

namespace ranksim::app {

namespace {

const std::vector<std::string> kGroups = {"world", "tp", "cp", "dp", "pp", "dp_cp", "tp_cp"};
const std::vector<std::string> kCpComms = {"p2p", "all_gather", "a2a", "a2a+p2p"};

// A cp_attention step's keys, checked on their own; what depends on the layout (cp, tp, the
// default comm type) is checked by check_cp_attention.
ScenarioStep read_cp_attention(const YAML::Node& body, const ScenarioReader& r) {
  r.known_keys(body,
               {"comm", "format", "batch", "seq_len", "heads", "kv_heads", "head_dim", "mask", "window", "hierarchical",
                "dtype", "backward", "ranks"},
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
      r.fail(v,
             "cp_attention: format bshd has no padding tokens, so it takes mask causal or no_mask; "
             "padding needs format: thd");
    if (thd && st.mask == "no_mask")
      r.fail(v,
             "cp_attention: format thd always masks its padding, so it takes mask padding or causal "
             "(causal with padding), not no_mask");
  }
  if (auto v = entry(body, "window"); v.IsDefined()) {
    if (!v.IsSequence() || v.size() != 2)
      r.fail(v,
             "cp_attention.window must be [left, right] (-1 = unbounded), such as [4096, 0], got " + sim::describe(v));
    st.window_left = r.integer(v[0], "cp_attention.window left", -1);
    st.window_right = r.integer(v[1], "cp_attention.window right", -1);
    if (st.mask == "causal" && st.window_right > 0)
      r.fail(v[1],
             "cp_attention: a causal mask hides every key after the query, so the window's right side must be "
             "0 or -1, got " +
                 std::to_string(st.window_right));
  }
  if (auto v = entry(body, "hierarchical"); v.IsDefined()) {
    if (!v.IsSequence() || v.size() != 2)
      r.fail(v, "cp_attention.hierarchical must be [a2a size, p2p size], such as [2, 4] for cp=8, got " +
                    sim::describe(v));
    st.a2a_size = r.positive_int(v[0], "cp_attention.hierarchical a2a size");
    st.p2p_size = r.positive_int(v[1], "cp_attention.hierarchical p2p size");
  }
  if (auto d = entry(body, "dtype"); d.IsDefined())
    st.dtype = r.one_of(d, "cp_attention.dtype", {"f32", "f64", "bf16", "f16"});
  if (auto v = entry(body, "backward"); v.IsDefined())
    st.backward = r.one_of(v, "cp_attention.backward", {"true", "false"}) == "true";
  return st;
}

}  // namespace

// The rules a cp_attention step must meet under the layout, each reported at the key it concerns:
// heads over tp, the comm type's head split (a2a over cp, a2a+p2p over a), the hierarchical sizes,
// and S a multiple of 2cp for bshd (thd pads every sequence to a multiple of 2cp itself).
// Resolves the comm type and the hierarchical sizes from the parallel defaults.
void check_cp_attention(ScenarioStep& st, const YAML::Node& body, const YAML::Node& par, const Scenario& sc,
                        const ScenarioReader& r) {
  const YAML::Node comm_at = entry(body, "comm").IsDefined()                        ? entry(body, "comm")
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
        r.fail(hier, "cp_attention.hierarchical [" + std::to_string(st.a2a_size) + ", " + std::to_string(st.p2p_size) +
                         "] multiplies to " + std::to_string(st.a2a_size * st.p2p_size) +
                         ", not cp=" + std::to_string(cp));
    } else if (sc.hierarchical_cp.size() == 2) {
      st.a2a_size = sc.hierarchical_cp[0];  // parallel.hierarchical_cp, checked against cp already
      st.p2p_size = sc.hierarchical_cp[1];
    } else {
      if (cp % 2 != 0)
        r.fail(comm_at,
               "cp_attention: comm a2a+p2p splits cp as [2, cp/2] by default, which needs an even cp, "
               "got cp=" +
                   std::to_string(cp) + "; give hierarchical: [a2a size, p2p size]");
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

void check_collective_algorithm(const std::string& op, const std::string& algorithm, const YAML::Node& at,
                                const ScenarioReader& r) {
  // Whether the collective has that algorithm is the schedule builder's own answer (asked of a
  // small group), found at load rather than by every rank at run time.
  const std::optional<runtime::CollectiveKind> kind = runtime::parse_collective_kind(op);
  if (!kind || algorithm == "auto") return;
  if (runtime::timing_only(runtime::parse_algorithm(algorithm))) return;  // checked by the timing model at run time
  runtime::ScheduleRequest req;
  req.kind = *kind;
  req.algorithm = runtime::parse_algorithm(algorithm);
  req.nranks = 4;
  req.count = 16;
  if (req.kind == runtime::CollectiveKind::all_to_all) req.splits.assign(4, std::vector<std::int64_t>(4, 4));
  try {
    (void)runtime::make_schedule(req);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("algorithm; use one of") != std::string::npos) r.fail(at, what);
  }
}

ScenarioStep read_step(const YAML::Node& n, const ScenarioReader& r) {
  if (!n.IsMap() || n.size() != 1)
    r.fail(n, "a step must be a mapping with one key: compute, a collective name (" + sim::join(kCollectiveOps) +
                  "), sendrecv, wait, tp_mlp or cp_attention");
  const YAML::Node key = n.begin()->first;
  const YAML::Node body = n.begin()->second;
  const std::string& kind = key.Scalar();
  ScenarioStep st;
  if (kind == "wait") {
    if (body.IsDefined() && !body.IsNull() && !(body.IsMap() && body.size() == 0))
      r.known_keys(body, {"ranks"}, "a wait step");
    st.kind = ScenarioStep::Kind::collective;
    st.wait = true;
    st.name = "wait";
    return st;
  }
  if (kind == "tp_mlp") {
    r.known_keys(body, {"hidden", "ffn", "tokens", "dtype", "sequence_parallel", "backward", "ranks"}, "a tp_mlp step");
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
    r.known_keys(body, {"name", "flops", "bytes", "gemm", "dtype", "ranks"}, "a compute step");
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
                    " (steps: " + sim::join(step_kinds) + ")");
  st.kind = kind == "sendrecv" ? ScenarioStep::Kind::sendrecv : ScenarioStep::Kind::collective;
  st.name = kind;
  if (body.IsNull() && kind == "barrier") return st;
  if (body.IsNull())  // reported at the key: a null's own position is where the next line starts
    r.fail(key, "a " + kind + " step needs its settings, such as {bytes: 256 MiB, group: dp}");
  r.known_keys(body, {"bytes", "dtype", "group", "algorithm", "async", "ranks"}, "a " + kind + " step");
  if (auto b = entry(body, "bytes"); b.IsDefined())
    st.bytes = static_cast<double>(r.unit(b, kind + ".bytes", sim::units::parse_bytes));
  else if (kind != "barrier")
    r.fail(body, "a " + kind + " step needs bytes (the per-rank buffer, e.g. 256 MiB)");
  if (auto d = entry(body, "dtype"); d.IsDefined()) st.dtype = r.one_of(d, kind + ".dtype", kDtypes);
  if (auto g = entry(body, "group"); g.IsDefined()) st.group = r.one_of(g, kind + ".group", kGroups);
  if (auto a = entry(body, "algorithm"); a.IsDefined()) {
    st.algorithm = r.one_of(a, kind + ".algorithm", kAlgorithms);
    check_collective_algorithm(kind, st.algorithm, a, r);
  }
  if (auto a = entry(body, "async"); a.IsDefined())
    st.async = r.one_of(a, kind + ".async", {"true", "false"}) == "true";
  return st;
}

}  // namespace ranksim::app

#include "app/calibrate.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include "app/bench.h"
#include "app/workloads.h"
#include "runtime/distributed/nccl_names.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/topology_reader.h"
#include "sim/tuner_config.h"
#include "sim/units.h"
#include "sim/yaml_input.h"

namespace ranksim::app {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// A constant the fit may move, in an unbounded coordinate: fractions through the logistic
// function (they stay in (0, 1)), latencies and bandwidths through exp (they stay positive, and
// below `most`).
struct Param {
  const char* name;
  bool fraction;
  std::function<double(const sim::CollectiveTiming&)> get;
  std::function<void(sim::CollectiveTiming&, double)> set;
  double most = 0.1;  // seconds, for a latency
};

double to_x(const Param& p, double v) { return p.fraction ? std::log(v / (1 - v)) : std::log(v); }
double from_x(const Param& p, double x) {
  if (p.fraction) return std::clamp(1 / (1 + std::exp(-x)), 1e-4, 1.0 - 1e-9);
  return std::clamp(std::exp(x), 1e-9, p.most);
}

Param fraction_param(const char* name, double sim::CollectiveTiming::*field) {
  return {name, true, [field](const sim::CollectiveTiming& c) { return c.*field; },
          [field](sim::CollectiveTiming& c, double v) { c.*field = v; }};
}
Param latency_param(const char* name, sim::Time sim::CollectiveTiming::*field) {
  return {name, false, [field](const sim::CollectiveTiming& c) { return (c.*field).seconds(); },
          [field](sim::CollectiveTiming& c, double v) { c.*field = sim::Time::from_seconds(v); }};
}
// A latency that is unset at 0 and then reads as `unset` of the constants: the fit starts there.
Param unset_latency_param(const char* name, sim::Time sim::CollectiveTiming::*field,
                          double (*unset)(const sim::CollectiveTiming&)) {
  return {name, false,
          [field, unset](const sim::CollectiveTiming& c) {
            return c.*field > sim::Time::zero() ? (c.*field).seconds() : unset(c);
          },
          [field](sim::CollectiveTiming& c, double v) { c.*field = sim::Time::from_seconds(v); }};
}
// A fraction that is unset at 0 and then reads as another constant (`share`): the fit starts there.
Param share_param(const char* name, double sim::CollectiveTiming::*field,
                  double (sim::CollectiveTiming::*share)() const) {
  return {name, true, [share](const sim::CollectiveTiming& c) { return (c.*share)(); },
          [field](sim::CollectiveTiming& c, double v) { c.*field = v; }};
}

// Nelder-Mead on f from x0: deterministic, derivative-free (the model's minimum over algorithms
// and protocols has kinks where the choice switches).
std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                                int max_evals) {
  const size_t n = x0.size();
  if (n == 0) return x0;
  for (int restart = 0; restart < 3; ++restart) {
    std::vector<std::vector<double>> s(n + 1, x0);
    for (size_t i = 0; i < n; ++i) s[i + 1][i] += 0.5;
    std::vector<double> fs(n + 1);
    for (size_t i = 0; i <= n; ++i) fs[i] = f(s[i]);
    int evals = static_cast<int>(n) + 1;
    while (evals < max_evals) {
      std::vector<size_t> order(n + 1);
      for (size_t i = 0; i <= n; ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fs[a] < fs[b]; });
      std::vector<std::vector<double>> s2;
      std::vector<double> f2;
      for (size_t i : order) {
        s2.push_back(s[i]);
        f2.push_back(fs[i]);
      }
      s = std::move(s2);
      fs = std::move(f2);
      if (fs[n] - fs[0] < 1e-14 * (1 + fs[0])) break;
      std::vector<double> c(n, 0.0);
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < n; ++k) c[k] += s[i][k] / static_cast<double>(n);
      auto along = [&](double t) {
        std::vector<double> x(n);
        for (size_t k = 0; k < n; ++k) x[k] = c[k] + t * (s[n][k] - c[k]);
        return x;
      };
      const std::vector<double> xr = along(-1);
      const double fr = f(xr);
      ++evals;
      if (fr < fs[0]) {
        const std::vector<double> xe = along(-2);
        const double fe = f(xe);
        ++evals;
        if (fe < fr) {
          s[n] = xe;
          fs[n] = fe;
        } else {
          s[n] = xr;
          fs[n] = fr;
        }
      } else if (fr < fs[n - 1]) {
        s[n] = xr;
        fs[n] = fr;
      } else {
        const std::vector<double> xc = fr < fs[n] ? along(-0.5) : along(0.5);
        const double fc = f(xc);
        ++evals;
        if (fc < std::min(fr, fs[n])) {
          s[n] = xc;
          fs[n] = fc;
        } else {
          for (size_t i = 1; i <= n; ++i) {
            for (size_t k = 0; k < n; ++k) s[i][k] = s[0][k] + 0.5 * (s[i][k] - s[0][k]);
            fs[i] = f(s[i]);
            ++evals;
          }
        }
      }
    }
    size_t best = 0;
    for (size_t i = 1; i <= n; ++i)
      if (fs[i] < fs[best]) best = i;
    x0 = s[best];
  }
  return x0;
}

std::optional<sim::CollAlgo> parse_nccl_algo(const std::string& name, const std::string& where) {
  if (name.empty() || name == "auto") return std::nullopt;
  std::optional<sim::CollAlgo> a;
  try {
    a = runtime::nccl_algorithm(runtime::parse_algorithm(name));
  } catch (const Error&) {
    // not a name of the runtime's either: the message below names NCCL's
  }
  if (!a)
    throw Error(where + ": algorithm '" + name +
                "' is not one of NCCL's: auto, ring, tree, nvls, nvls_tree, collnet, pat");
  return a;
}

sim::CollOp coll_op(const std::string& op) {
  const auto kind = runtime::parse_collective_kind(op);
  if (!kind || *kind == runtime::CollectiveKind::gather || *kind == runtime::CollectiveKind::scatter ||
      *kind == runtime::CollectiveKind::barrier)
    throw Error("unknown --op '" + op +
                "': expected all_reduce, all_gather, reduce_scatter, all_to_all, broadcast or reduce");
  return runtime::nccl_op(*kind);
}

// Rows below 1 MiB weigh less: they are latency only, many, and noisier (the targets are 5% from
// 1 MiB up and 25% below).
constexpr double kSmallWeight = 0.3;

double case_error(const sim::CollectiveModel& m, const FitCase& c, double launch) {
  double sum = 0, weights = 0;
  for (const MeasuredRow& r : c.rows) {
    const double e = std::log(predict_row(m, c, r, launch) / r.seconds);
    const double w = r.bytes >= kMiB ? 1.0 : kSmallWeight;
    sum += w * e * e;
    weights += w;
  }
  return sum / weights;
}

}  // namespace

sim::CollectiveEstimate choose_for(const sim::CollectiveModel& model, const FitCase& c, const sim::CollectiveShape& s) {
  return c.allowed ? model.choose(s, *c.allowed) : model.choose(s, c.algorithm, c.protocol);
}

double as_measured(const FitCase& c, const sim::CollectiveTiming& constants, double seconds) {
  // nccl-tests issues its calls back to back: the thread that launches each GPU's kernel in turn
  // and the GPUs overlap, and a call takes the longer of the two.
  return std::max(seconds, one_thread_issue(constants, c.gpus_per_thread));
}

double predict_row(const sim::CollectiveModel& model, const FitCase& c, double bytes, double launch_seconds) {
  sim::CollectiveShape s = c.shape;
  s.bytes = bytes;
  return as_measured(c, model.constants(), launch_seconds + choose_for(model, c, s).seconds);
}

namespace {
// Whether the case's log names NCCL's own choice for any of its rows.
bool names_nccl_choice(const FitCase& c) {
  return std::any_of(c.rows.begin(), c.rows.end(), [](const MeasuredRow& r) { return !r.nccl.empty(); });
}
}  // namespace

sim::CollectiveEstimate estimate_row(const sim::CollectiveModel& model, const FitCase& c, const MeasuredRow& row) {
  sim::CollectiveShape s = c.shape;
  s.bytes = row.bytes;
  if (!c.as_nccl_chose || row.nccl.size() != 1) return choose_for(model, c, s);
  const NcclChoice& n = row.nccl.front();
  std::string why;
  if (std::optional<sim::CollectiveEstimate> e = model.estimate(s, n.algorithm, n.protocol, &why)) return *e;
  throw Error(c.name + ": NCCL ran its " + fmt("%.0f", row.bytes) + "-byte calls as " + sim::to_string(n.algorithm) +
              "/" + sim::to_string(n.protocol) + ", which the model cannot time on this topology: " + why);
}

double predict_row(const sim::CollectiveModel& model, const FitCase& c, const MeasuredRow& row, double launch_seconds) {
  return as_measured(c, model.constants(), launch_seconds + estimate_row(model, c, row).seconds);
}

double geomean_error(const std::vector<std::pair<double, double>>& pm) {
  if (pm.empty()) return 0;
  double sum = 0;
  for (const auto& [p, m] : pm) sum += std::abs(std::log(p / m));
  return std::exp(sum / static_cast<double>(pm.size())) - 1;
}

const std::vector<std::string>& fit_constant_names() {
  static const std::vector<std::string> names = {"fabric_efficiency",
                                                 "ring_loop_gap",
                                                 "intra_latency",
                                                 "network_efficiency",
                                                 "inter_latency",
                                                 "net_overhead",
                                                 "nvls_efficiency",
                                                 "nvls_tree_efficiency",
                                                 "nvls_tree_network_efficiency",
                                                 "nvls_latency",
                                                 "simple_latency",
                                                 "alltoall_efficiency",
                                                 "alltoall_network_efficiency",
                                                 "channel_network_bandwidth",
                                                 "p2p_channel_network_bandwidth",
                                                 "call_overhead",
                                                 "group_launch",
                                                 "peer_latency",
                                                 "message_latency",
                                                 "ll_net_overhead"};
  return names;
}

FitResult fit_collectives(const sim::Topology& topology, const sim::CollectiveTiming& start,
                          const std::vector<FitCase>& cases, const std::vector<std::string>& only,
                          std::vector<std::string>* held) {
  const double launch = topology.kind_of(0).launch_overhead.seconds();
  bool ring_intra = false, ring_inter = false, nvls = false, nvls_tree = false, a2a = false, a2a_net = false;
  bool nvls_tree_wide = false;  // an NVLS tree on more than two nodes: its network share
  bool gather_intra = false;    // an all_gather or reduce_scatter with GPUs on one node: ring_loop_gap
  // Hop latencies are told apart from the fixed overhead by the hop counts of the tables and by
  // the protocols' different latencies within one table.
  bool intra = false, net = false, inter = false;
  for (const FitCase& c : cases) {
    intra = intra || c.shape.ranks_per_node > 1;
    const bool direct = c.shape.op == sim::CollOp::all_to_all;
    // The NICs' efficiency for rings and trees; all-to-all's own between nodes.
    net = net || (!direct && c.shape.nodes > 1);
    a2a_net = a2a_net || (direct && c.shape.nodes > 1);
    // Rings across nodes are paced by net_overhead; the network's hop latency is that of the
    // other algorithms: trees and NVLS trees (all_reduce), PAT (one rank a node), point-to-point.
    const bool only_ring = (c.algorithm && *c.algorithm == sim::CollAlgo::ring) ||
                           (c.shape.op != sim::CollOp::all_reduce && !direct &&
                            !(c.shape.ranks_per_node == 1 &&
                              (c.shape.op == sim::CollOp::all_gather || c.shape.op == sim::CollOp::reduce_scatter)));
    inter = inter || (c.shape.nodes > 1 && !only_ring);
    ring_intra = ring_intra || (!direct && c.shape.ranks_per_node > 1);
    gather_intra = gather_intra || (c.shape.ranks_per_node > 1 && (c.shape.op == sim::CollOp::all_gather ||
                                                                   c.shape.op == sim::CollOp::reduce_scatter));
    ring_inter = ring_inter || (!direct && c.shape.nodes > 1);
    // All-to-all's efficiency in a node is the fabric's: only a table inside one node informs it
    // (across nodes the NICs bound it, at alltoall_network_efficiency).
    a2a = a2a || (direct && c.shape.nodes == 1);
    // NVLS in one node informs nvls_efficiency; an NVLS tree across nodes nvls_tree_efficiency.
    auto may_run = [&](sim::CollAlgo a) {
      return c.allowed ? c.allowed->allows(c.shape.op, a, sim::Protocol::simple) : !c.algorithm || *c.algorithm == a;
    };
    const bool can_nvls = start.nvls && c.shape.op == sim::CollOp::all_reduce && c.shape.ranks_per_node > 1 &&
                          (may_run(sim::CollAlgo::nvls) || may_run(sim::CollAlgo::nvls_tree));
    nvls = nvls || (can_nvls && c.shape.nodes == 1);
    nvls_tree = nvls_tree || (can_nvls && c.shape.nodes > 1);
    nvls_tree_wide = nvls_tree_wide || (can_nvls && c.shape.nodes > 2);
  }
  // The constants fitted only when --fit names them.
  auto named = [&](const char* name) { return std::find(only.begin(), only.end(), name) != only.end(); };
  std::vector<Param> params;
  if (ring_intra) params.push_back(fraction_param("fabric_efficiency", &sim::CollectiveTiming::fabric_efficiency));
  // What an all_gather or reduce_scatter ring's loop loses on NVLink, in steps: only when named
  // (--fit), since only such rings inside a node beside all_reduce rings (or rings of other sizes)
  // tell it from fabric_efficiency. Unset (0), the fit starts at a quarter of a step.
  if (gather_intra && named("ring_loop_gap"))
    params.push_back({"ring_loop_gap", false,
                      [](const sim::CollectiveTiming& c) { return c.ring_loop_gap > 0 ? c.ring_loop_gap : 0.25; },
                      [](sim::CollectiveTiming& c, double v) { c.ring_loop_gap = v; }, 64});
  if (intra) params.push_back(latency_param("intra_latency", &sim::CollectiveTiming::intra_latency));
  if (net) params.push_back(fraction_param("network_efficiency", &sim::CollectiveTiming::network_efficiency));
  if (inter) params.push_back(latency_param("inter_latency", &sim::CollectiveTiming::inter_latency));
  if (ring_inter) params.push_back(latency_param("net_overhead", &sim::CollectiveTiming::net_overhead));
  // LL's own wait: only when named, since only tables whose small calls cross nodes on LL tell it
  // from net_overhead. Unset (0), the fit starts at net_overhead.
  if (ring_inter && named("ll_net_overhead"))
    params.push_back(unset_latency_param("ll_net_overhead", &sim::CollectiveTiming::ll_net_overhead, sim::ll_net_wait));
  if (nvls) params.push_back(fraction_param("nvls_efficiency", &sim::CollectiveTiming::nvls_efficiency));
  if (nvls_tree)
    params.push_back(share_param("nvls_tree_efficiency", &sim::CollectiveTiming::nvls_tree_efficiency,
                                 &sim::CollectiveTiming::nvls_tree_share));
  if (nvls || nvls_tree) params.push_back(latency_param("nvls_latency", &sim::CollectiveTiming::nvls_latency));
  // An NVLS tree's own share of the NICs: only when named (--fit), since only NVLS trees on more
  // than two nodes tell it from the rings'. Unset (0), the fit starts at the rings' share.
  if (nvls_tree_wide && named("nvls_tree_network_efficiency")) {
    const double nics = topology.nics_per_node() * topology.network().nic_bandwidth;
    params.push_back({"nvls_tree_network_efficiency", true,
                      [nics](const sim::CollectiveTiming& c) {
                        if (c.nvls_tree_network_efficiency > 0) return c.nvls_tree_network_efficiency;
                        const double capped =
                            c.channel_network_bandwidth > 0
                                ? std::min(1.0, std::max(1, c.channels) * c.channel_network_bandwidth / nics)
                                : 1.0;
                        return std::min(0.99, capped * c.network_efficiency);
                      },
                      [](sim::CollectiveTiming& c, double v) { c.nvls_tree_network_efficiency = v; }});
  }
  if (a2a) params.push_back(fraction_param("alltoall_efficiency", &sim::CollectiveTiming::alltoall_efficiency));
  // The Simple protocol's base latency: only when named (--fit), since only tables whose small
  // calls run LL or LL128 and whose large ones run Simple tell it from call_overhead.
  if (named("simple_latency"))
    params.push_back(latency_param("simple_latency", &sim::CollectiveTiming::simple_latency));
  // The channels' cap on network traffic: only when named (--fit), since it binds only where a
  // node's NICs outrun its channels. Unset (0, no cap), the fit starts where it binds: 0.8 of the
  // NICs' line rate shared by the channels.
  if (net && named("channel_network_bandwidth")) {
    const double nics = topology.nics_per_node() * topology.network().nic_bandwidth;
    const int channels = std::max(1, start.channels);
    params.push_back({"channel_network_bandwidth", false,
                      [nics, channels](const sim::CollectiveTiming& c) {
                        return c.channel_network_bandwidth > 0 ? c.channel_network_bandwidth : 0.8 * nics / channels;
                      },
                      [](sim::CollectiveTiming& c, double v) { c.channel_network_bandwidth = v; }, 1e13});
  }
  if (a2a_net) {
    params.push_back(share_param("alltoall_network_efficiency", &sim::CollectiveTiming::alltoall_network_efficiency,
                                 &sim::CollectiveTiming::alltoall_network_share));
    // A point-to-point channel's rate to a peer across nodes: only when named (--fit), since only
    // tables with few peers on other nodes (two nodes of one or two GPUs) show it. Unset (0, no
    // cap), the fit starts where it binds: a peer's channels at 0.7 of a GPU's NIC line rate.
    if (named("p2p_channel_network_bandwidth")) {
      const double start_rate =
          0.7 * sim::gpu_network_bandwidth(topology) / std::max(1, sim::p2p_network_channels(topology));
      params.push_back({"p2p_channel_network_bandwidth", false,
                        [start_rate](const sim::CollectiveTiming& c) {
                          return c.p2p_channel_network_bandwidth > 0 ? c.p2p_channel_network_bandwidth : start_rate;
                        },
                        [](sim::CollectiveTiming& c, double v) { c.p2p_channel_network_bandwidth = v; }, 1e13});
    }
    // Each peer across nodes: only when named (--fit), since only tables of many nodes' small
    // calls tell it from call_overhead. Unset (0), the fit starts at what it reads as.
    if (named("peer_latency"))
      params.push_back(unset_latency_param("peer_latency", &sim::CollectiveTiming::peer_latency, sim::peer_cost));
    // Each message of those peers: only when named, since only tables of several node counts
    // (many small messages or few large ones) tell it from peer_latency. Unset (0), from 1 us.
    if (named("message_latency"))
      params.push_back(unset_latency_param("message_latency", &sim::CollectiveTiming::message_latency,
                                           [](const sim::CollectiveTiming&) { return 1e-6; }));
  }
  params.push_back(latency_param("call_overhead", &sim::CollectiveTiming::call_overhead));
  // A table of one thread driving several GPUs has a floor: their issue time.
  if (std::any_of(cases.begin(), cases.end(), [](const FitCase& c) { return c.gpus_per_thread > 1; }))
    params.push_back(latency_param("group_launch", &sim::CollectiveTiming::group_launch));
  if (!only.empty()) {
    std::vector<Param> chosen;
    for (const std::string& name : only) {
      const std::vector<std::string>& all = fit_constant_names();
      if (std::find(all.begin(), all.end(), name) == all.end())
        throw Error("--fit " + name + ": not a constant calibrate fits; expected some of " + sim::join(all));
      const auto it = std::find_if(params.begin(), params.end(), [&](const Param& p) { return name == p.name; });
      if (it == params.end() && held) {
        held->push_back(name);
        continue;
      }
      if (it == params.end())
        throw Error("--fit " + name +
                    ": the tables do not inform it (e.g. no table spans nodes, none runs an "
                    "algorithm other than ring across nodes, none runs NVLS or all_to_all, or none is an "
                    "all_gather or reduce_scatter inside a node)");
      chosen.push_back(*it);
    }
    params = std::move(chosen);
  }

  auto constants_at = [&](const std::vector<double>& x) {
    sim::CollectiveTiming c = start;
    for (size_t i = 0; i < params.size(); ++i) params[i].set(c, from_x(params[i], x[i]));
    return c;
  };
  auto objective = [&](const std::vector<double>& x) {
    const sim::CollectiveModel m(topology, constants_at(x));
    double sum = 0;
    for (const FitCase& c : cases) sum += case_error(m, c, launch);
    return sum / static_cast<double>(cases.size());
  };
  // The objective has several minima (the choice of algorithm and protocol switches with the
  // constants), so the search starts from the topology's constants and from the defaults (NCCL's
  // published figures) and keeps the better end.
  std::vector<double> x;
  double best = 0;
  for (const sim::CollectiveTiming& from : {start, sim::CollectiveTiming{}}) {
    std::vector<double> x0;
    for (const Param& p : params)
      x0.push_back(to_x(p, std::clamp(p.get(from), 1e-6, p.fraction ? 1.0 - 1e-6 : p.most)));
    std::vector<double> end = nelder_mead(objective, x0, 600 * static_cast<int>(params.size() + 1));
    const double f = objective(end);
    if (x.empty() || f < best) {
      x = std::move(end);
      best = f;
    }
  }
  FitResult r;
  r.constants = constants_at(x);
  for (const Param& p : params) r.fitted.emplace_back(p.name);
  r.rms_log_error = std::sqrt(objective(x));
  return r;
}

CaseError case_errors(const sim::Topology& topology, const sim::CollectiveTiming& constants, const FitCase& c) {
  const double launch = topology.kind_of(0).launch_overhead.seconds();
  const sim::CollectiveModel m(topology, constants);
  std::vector<std::pair<double, double>> big, small;
  for (const MeasuredRow& r : c.rows)
    (r.bytes >= kMiB ? big : small).emplace_back(predict_row(m, c, r, launch), r.seconds);
  CaseError e;
  if (!big.empty()) e.big = geomean_error(big);
  if (!small.empty()) e.small = geomean_error(small);
  return e;
}

namespace {

// A table is a file or one test of a log: a single log of several tests can be left out of.
void require_tables_to_leave_out(size_t tables) {
  if (tables < 2)
    throw Error(
        "--leave-one-out needs two or more tables (files, or tests of a log): it fits to all but one and "
        "predicts that one");
}

}  // namespace

std::vector<LeftOut> leave_one_out(const sim::Topology& topology, const sim::CollectiveTiming& start,
                                   const std::vector<FitCase>& cases, const FitResult& all) {
  require_tables_to_leave_out(cases.size());
  std::vector<LeftOut> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<FitCase> others;
    for (size_t j = 0; j < cases.size(); ++j)
      if (j != i) others.push_back(cases[j]);
    LeftOut l;
    const FitResult without = fit_collectives(topology, start, others, all.fitted, &l.held);
    l.fitted = case_errors(topology, all.constants, cases[i]);
    l.left_out = case_errors(topology, without.constants, cases[i]);
    out.push_back(std::move(l));
  }
  return out;
}

namespace {

// The sizes of --sizes MIN:MAX (either end may be left out); [0, max] for "".
struct SizeRange {
  double lo = 0, hi = std::numeric_limits<double>::max();
};

SizeRange parse_size_range(const std::string& spec) {
  SizeRange r;
  if (spec.empty()) return r;
  const std::string how = " (write MIN:MAX, e.g. 1MiB:8GiB; 1MiB: for 1 MiB and up, :64KiB for up to 64 KiB)";
  const auto colon = spec.find(':');
  if (colon == std::string::npos || spec.find(':', colon + 1) != std::string::npos)
    throw Error("--sizes '" + spec + "': expected one ':' between the smallest and the largest size" + how);
  const std::string lo = spec.substr(0, colon), hi = spec.substr(colon + 1);
  if (lo.empty() && hi.empty()) throw Error("--sizes '" + spec + "': give a smallest or a largest size" + how);
  try {
    if (!lo.empty()) r.lo = static_cast<double>(sim::units::parse_bytes(lo));
    if (!hi.empty()) r.hi = static_cast<double>(sim::units::parse_bytes(hi));
  } catch (const sim::units::UnitError& e) {
    throw Error("--sizes '" + spec + "': " + e.what() + how);
  }
  if (r.hi < r.lo) throw Error("--sizes '" + spec + "': the largest size is below the smallest");
  return r;
}

// The case of one measured table, checked against the topology and the options.
void load_case(const CalibrateOptions& o, const sim::Topology& topo, const sim::CollectiveModel& model,
               const SizeRange& range, MeasuredTable t, std::vector<FitCase>& cases,
               std::vector<MeasuredTable>& tables) {
  const std::string& path = t.path;
  const std::string op = !t.op.empty() ? t.op : o.op;
  if (op.empty())
    throw Error(path + ": the file does not name its collective; give it with --op (all_reduce, all_gather, ...)");
  if (o.ranks > 0 && t.ranks > 0 && t.ranks != o.ranks)
    throw Error(path + ": wrong rank count: the table ran on " + std::to_string(t.ranks) + " ranks but --ranks is " +
                std::to_string(o.ranks));
  const int n = t.ranks > 0 ? t.ranks : o.ranks;
  if (n <= 0) throw Error(path + ": the file does not say how many ranks ran; give --ranks N");
  if (n > topo.num_devices())
    throw Error(path + ": the table ran on " + std::to_string(n) + " ranks but topology '" + topo.name() + "' has " +
                std::to_string(topo.num_devices()) + " devices; add nodes with --set nodes=N");
  const int dpn = topo.devices_per_node();
  FitCase c;
  c.name = path;
  c.shape = sim::first_devices_shape(topo, coll_op(op), n);
  // A table that names its nodes ran the same number of ranks on each (nccl-tests' -g or MPI's
  // ranks per host): the ranks go on the first devices of that many nodes.
  if (t.nodes > 0) {
    const std::string ran =
        path + ": the table ran " + std::to_string(n) + " ranks on " + std::to_string(t.nodes) + " node(s)";
    if (n % t.nodes != 0) throw Error(ran + ", not the same number on each node; ranksim places as many on each");
    if (t.nodes > topo.num_nodes())
      throw Error(ran + ", but topology '" + topo.name() + "' has " + std::to_string(topo.num_nodes()) +
                  "; add nodes with --set nodes=" + std::to_string(t.nodes));
    if (n / t.nodes > dpn)
      throw Error(ran + ", " + std::to_string(n / t.nodes) + " per node, but topology '" + topo.name() + "' has " +
                  std::to_string(dpn) + " devices per node; use a topology with that many");
    c.shape.nodes = t.nodes;
    c.shape.ranks_per_node = n / t.nodes;
  }
  if (!o.algorithm.empty() && !t.algorithm.empty() && t.algorithm != o.algorithm)
    throw Error(path + ": the file says the run used algorithm " + t.algorithm + " but --algo says " + o.algorithm);
  const std::string algo = !t.algorithm.empty() ? t.algorithm : o.algorithm;
  if (o.protocol != "auto" && !t.protocol.empty() && t.protocol != o.protocol)
    throw Error(path + ": the file says the runs set NCCL_PROTO=" + t.protocol + " but --proto says " + o.protocol);
  const std::string protocol = !t.protocol.empty() ? t.protocol : o.protocol;
  const std::optional<sim::Protocol> proto = parse_protocol_option(single_name(protocol));
  c.allowed =
      with_error_prefix(path, [&] { return nccl_lists(algo, protocol, "the runs' algorithm", "the runs' protocol"); });
  if (c.allowed) {
    c.algorithm = c.allowed->single_algorithm(c.shape.op);
  } else {
    if (c.shape.op != sim::CollOp::all_to_all) c.algorithm = parse_nccl_algo(algo, path);
    c.protocol = proto;
  }
  c.gpus_per_thread = t.gpus_per_thread;
  for (const MeasuredRow& r : t.rows)
    if (r.bytes >= range.lo && r.bytes <= range.hi) c.rows.push_back(r);
  if (c.rows.empty()) {
    const auto [lo, hi] = std::minmax_element(
        t.rows.begin(), t.rows.end(), [](const MeasuredRow& a, const MeasuredRow& b) { return a.bytes < b.bytes; });
    throw Error(path + ": no row within --sizes " + o.sizes + " (its sizes run from " + fmt("%.0f", lo->bytes) +
                " to " + fmt("%.0f", hi->bytes) + " bytes)");
  }
  // The model must be able to run the table as stated (a forced algorithm that cannot serve it),
  // and each row as NCCL ran it when asked to.
  with_error_prefix(path, [&] { (void)predict_row(model, c, c.rows.front().bytes, 0); });
  c.as_nccl_chose = o.nccl_choice;
  if (c.as_nccl_chose)
    for (const MeasuredRow& r : c.rows) (void)estimate_row(model, c, r);
  cases.push_back(std::move(c));
  tables.push_back(std::move(t));
}

// The cases of the files, checked against the topology and the options.
std::vector<FitCase> load_cases(const CalibrateOptions& o, const sim::Topology& topo,
                                std::vector<MeasuredTable>& tables, std::vector<std::string>& left_out) {
  std::vector<FitCase> cases;
  (void)parse_protocol_option(single_name(o.protocol));
  (void)nccl_lists("auto", o.protocol, "--algo", "--proto");
  if (!o.op.empty()) (void)coll_op(o.op);
  const SizeRange range = parse_size_range(o.sizes);
  const sim::CollectiveModel model(topo);
  for (const std::string& file : o.files) {
    // A log of several tests gives a case each (those of --op when it is given).
    for (MeasuredTable& t : select_tests(read_nccl_tests_log(file), o.op, file, &left_out)) {
      load_case(o, topo, model, range, std::move(t), cases, tables);
    }
  }
  return cases;
}

void print_comparison(std::ostream& out, const sim::Topology& topo, const std::vector<FitCase>& cases,
                      const sim::CollectiveTiming& before, const sim::CollectiveTiming* after) {
  const double launch = topo.kind_of(0).launch_overhead.seconds();
  const sim::CollectiveModel mb(topo, before);
  std::optional<sim::CollectiveModel> ma;
  if (after) ma.emplace(topo, *after);
  for (const FitCase& c : cases) {
    std::string how;
    if (c.shape.op == sim::CollOp::all_to_all)
      how = sim::to_string(sim::CollAlgo::direct);
    else if (c.allowed)
      how = "NCCL's choice among what " + c.allowed->describe() + " allows";
    else if (c.algorithm)
      how = sim::to_string(*c.algorithm);
    else
      how = "ring (or NCCL's choice: default algorithm)";
    out << "# " << c.name << ": " << how << ", " << c.shape.nranks << " ranks on " << c.shape.nodes << " node(s)"
        << (c.gpus_per_thread > 1 ? ", one thread driving " + std::to_string(c.gpus_per_thread) + " GPUs (-g)" : "")
        << "\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "%14s %12s %12s %8s", "size(B)", "measured(us)", "model(us)", "error");
    out << buf;
    if (ma) {
      std::snprintf(buf, sizeof buf, " %12s %8s", "fitted(us)", "error");
      out << buf;
    }
    // NCCL's own choices, where the log's tuning messages name them: a column, and how often the
    // model's choice differs.
    const bool said = names_nccl_choice(c);
    out << (said ? "  choice           nccl\n" : "  choice\n");
    int named = 0, differ = 0;
    std::vector<std::pair<double, double>> big_b, small_b, big_a, small_a;
    for (const MeasuredRow& r : c.rows) {
      // each model's choice once: its time is the prediction (predict_row), its name the column
      const sim::CollectiveEstimate eb = estimate_row(mb, c, r);
      const double pb = as_measured(c, before, launch + eb.seconds);
      (r.bytes >= kMiB ? big_b : small_b).emplace_back(pb, r.seconds);
      std::snprintf(buf, sizeof buf, "%14.0f %12.2f %12.2f %+7.1f%%", r.bytes, r.seconds * 1e6, pb * 1e6,
                    (pb / r.seconds - 1) * 100);
      out << buf;
      std::optional<sim::CollectiveEstimate> ea;
      if (ma) {
        ea = estimate_row(*ma, c, r);
        const double pa = as_measured(c, *after, launch + ea->seconds);
        (r.bytes >= kMiB ? big_a : small_a).emplace_back(pa, r.seconds);
        std::snprintf(buf, sizeof buf, " %12.2f %+7.1f%%", pa * 1e6, (pa / r.seconds - 1) * 100);
        out << buf;
      }
      const sim::CollectiveEstimate& e = ea ? *ea : eb;
      const std::string choice = std::string(sim::to_string(e.algorithm)) + "/" + sim::to_string(e.protocol) + "/" +
                                 std::to_string(e.channels) + "ch" + (e.tuner_line > 0 ? "+tuner" : "");
      out << "  " << choice;
      if (!r.nccl.empty()) {
        std::vector<std::string> ran;
        for (const NcclChoice& n : r.nccl)
          ran.push_back(std::string(sim::to_string(n.algorithm)) + "/" + sim::to_string(n.protocol) +
                        (n.channels > 0 ? "/" + std::to_string(n.channels) + "ch" : ""));
        out << std::string(choice.size() < 17 ? 17 - choice.size() : 1, ' ') << sim::join(ran, "|");
        ++named;
        if (r.nccl.size() > 1 || r.nccl.front().algorithm != e.algorithm || r.nccl.front().protocol != e.protocol)
          ++differ;
      }
      out << "\n";
    }
    auto summary = [&](const char* what, const auto& b, const auto& a) {
      if (b.empty()) return;
      out << "#   geometric-mean error, sizes " << what << ": " << fmt("%.1f%%", geomean_error(b) * 100);
      if (ma) out << " -> " << fmt("%.1f%%", geomean_error(a) * 100) << " fitted";
      out << " (" << b.size() << " sizes)\n";
    };
    summary(">= 1 MiB", big_b, big_a);
    summary("< 1 MiB", small_b, small_a);
    // How far the file's two runs of each size (out of place, in place) lie apart: a prediction,
    // one a size, cannot be nearer both than about half of that.
    for (const bool big : {true, false}) {
      std::vector<std::pair<double, double>> pairs;
      for (const MeasuredRow& r : c.rows)
        if ((r.bytes >= kMiB) == big && r.in_place_seconds > 0) pairs.emplace_back(r.in_place_seconds, r.seconds);
      if (pairs.empty()) continue;
      out << "#   out-of-place and in-place times apart, sizes " << (big ? ">= 1 MiB" : "< 1 MiB") << ": "
          << fmt("%.1f%%", geomean_error(pairs) * 100) << " (" << pairs.size() << " sizes)\n";
    }
    if (said)
      out << "#   NCCL's own choice (its tuning messages) differs from the " << (c.as_nccl_chose ? "timed" : "model's")
          << " algorithm or protocol at " << differ << " of the " << named << " sizes it names"
          << (c.as_nccl_chose ? " (timed as NCCL ran them: --nccl-choice)" : "") << "\n";
    out << "\n";
  }
}

std::string latency_text(sim::Time t) { return fmt("%.4g us", t.seconds() * 1e6); }

YAML::Node collectives_node(const sim::CollectiveTiming& c) {
  YAML::Node n;
  n["model"] = "nccl";
  n["channels"] = c.channels;
  n["fabric_efficiency"] = fmt("%.4f", c.fabric_efficiency);
  if (c.ring_loop_gap > 0) n["ring_loop_gap"] = fmt("%.4g", c.ring_loop_gap);
  n["network_efficiency"] = fmt("%.4f", c.network_efficiency);
  n["alltoall_efficiency"] = fmt("%.4f", c.alltoall_efficiency);
  if (c.alltoall_network_efficiency > 0) n["alltoall_network_efficiency"] = fmt("%.4f", c.alltoall_network_efficiency);
  if (c.channel_network_bandwidth > 0)
    n["channel_network_bandwidth"] = fmt("%.4g GB/s", c.channel_network_bandwidth / 1e9);
  if (c.p2p_channel_network_bandwidth > 0)
    n["p2p_channel_network_bandwidth"] = fmt("%.4g GB/s", c.p2p_channel_network_bandwidth / 1e9);
  n["nvls"] = c.nvls ? "true" : "false";
  n["nvls_efficiency"] = fmt("%.4f", c.nvls_efficiency);
  if (c.nvls_tree_efficiency > 0) n["nvls_tree_efficiency"] = fmt("%.4f", c.nvls_tree_efficiency);
  if (c.nvls_tree_network_efficiency > 0)
    n["nvls_tree_network_efficiency"] = fmt("%.4f", c.nvls_tree_network_efficiency);
  // Bandwidths for groups on 1, 2 and more nodes, as the reader takes them.
  auto per_node_count = [&](const char* key, const std::array<double, 3>& values) {
    for (const double b : values) n[key].push_back(fmt("%.4g GB/s", b / 1e9));
  };
  per_node_count("ll_max_bandwidth", c.ll_max_bandwidth);
  per_node_count("tree_channel_bandwidth", c.tree_channel_bandwidth);
  per_node_count("tree_ll128_channel_bandwidth", c.tree_ll128_channel_bandwidth);
  n["intra_latency"] = latency_text(c.intra_latency);
  n["inter_latency"] = latency_text(c.inter_latency);
  n["net_overhead"] = latency_text(c.net_overhead);
  if (c.ll_net_overhead > sim::Time::zero()) n["ll_net_overhead"] = latency_text(c.ll_net_overhead);
  if (c.peer_latency > sim::Time::zero()) n["peer_latency"] = latency_text(c.peer_latency);
  if (c.message_latency > sim::Time::zero()) n["message_latency"] = latency_text(c.message_latency);
  n["nvls_latency"] = latency_text(c.nvls_latency);
  n["simple_latency"] = latency_text(c.simple_latency);
  n["sharp_latency"] = latency_text(c.sharp_latency);
  n["call_overhead"] = latency_text(c.call_overhead);
  n["group_launch"] = latency_text(c.group_launch);
  // Sizes as NCCL's environment sets them, written only where they differ from NCCL's defaults,
  // exactly: in the largest binary unit that divides them.
  const sim::CollectiveTiming defaults;
  auto size = [&](const char* key, uint64_t v, uint64_t d) {
    if (v == d) return;
    n[key] = v % (1u << 20) == 0   ? std::to_string(v >> 20) + " MiB"
             : v % (1u << 10) == 0 ? std::to_string(v >> 10) + " KiB"
                                   : std::to_string(v) + " B";
  };
  size("buffer_size", c.buffer_size, defaults.buffer_size);
  size("nvls_chunk_size", c.nvls_chunk_size, defaults.nvls_chunk_size);
  size("nvls_tree_max_chunk_size", c.nvls_tree_max_chunk_size, defaults.nvls_tree_max_chunk_size);
  size("p2p_chunk_size", c.p2p_chunk_size, defaults.p2p_chunk_size);
  return n;
}

}  // namespace

int calibrate(const CalibrateOptions& o, std::ostream& out) {
  if (o.files.empty()) throw Error("calibrate needs at least one nccl-tests output file");
  if (!o.check_only && o.output.empty()) throw Error("calibrate needs -o OUT.yaml (or --check to compare only)");
  if (o.check_only && !o.output.empty()) throw Error("calibrate --check writes nothing; drop -o " + o.output);
  if (o.check_only && !o.fit.empty()) throw Error("calibrate --check fits nothing; drop --fit (or --check to fit)");
  if (o.check_only && o.leave_one_out)
    throw Error("calibrate --check fits nothing to leave a table out of; drop --leave-one-out (or --check)");
  // The output is checked before the fit: its folder exists, and it is none of the inputs.
  if (!o.check_only) {
    std::vector<sim::NamedPath> ins = {{"the topology", o.topology}};
    for (const std::string& f : o.files) ins.push_back({"a measured table", f});
    sim::check_output_paths({{"-o", o.output}}, ins);
  }
  const sim::Topology topo = sim::Topology::load_file(o.topology, o.sets);
  std::vector<MeasuredTable> tables;
  std::vector<std::string> left_out;  // tests of the logs that ranksim does not time
  const std::vector<FitCase> cases = load_cases(o, topo, tables, left_out);
  if (o.nccl_choice && std::none_of(cases.begin(), cases.end(), names_nccl_choice))
    throw Error(
        "--nccl-choice needs a log with NCCL's tuning messages (\"... Bytes -> Algo ... proto ...\"): run "
        "nccl-tests with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING (NCCL 2.20 or later)");
  if (o.leave_one_out) require_tables_to_leave_out(cases.size());  // before the fit
  auto say_left_out = [&](std::ostream& to, const char* lead) {
    for (const std::string& l : left_out) to << lead << "left out " << l << "\n";
  };
  sim::CollectiveTiming before = topo.collectives();
  before.model = sim::CollectiveTimingModel::nccl;

  if (o.check_only) {
    out << "# ranksim calibrate --check: measured vs predicted on " << topo.name() << " (" << o.topology << ")\n";
    if (!o.sizes.empty()) out << "# rows of sizes " << o.sizes << " only\n";
    say_left_out(out, "# ");
    out << "\n";
    print_comparison(out, topo, cases, before, nullptr);
    return 0;
  }
  const FitResult fit = fit_collectives(topo, before, cases, o.fit);
  out << "# ranksim calibrate: " << topo.name() << " (" << o.topology << ") fitted to " << cases.size()
      << " table(s); fitted constants:";
  for (const std::string& f : fit.fitted) out << " " << f;
  out << "\n# rms log error " << fmt("%.4f", fit.rms_log_error) << "\n";
  if (!o.sizes.empty()) out << "# rows of sizes " << o.sizes << " only\n";
  say_left_out(out, "# ");
  out << "\n";
  print_comparison(out, topo, cases, before, &fit.constants);
  if (o.leave_one_out) {
    out << "# leave one out: each table predicted by the constants fitted to the others\n";
    const std::vector<LeftOut> loo = leave_one_out(topo, before, cases, fit);
    auto pct = [](const std::optional<double>& e) { return e ? fmt("%.1f%%", *e * 100) : std::string("-"); };
    for (size_t i = 0; i < cases.size(); ++i) {
      const LeftOut& l = loo[i];
      std::vector<std::string> parts;
      if (l.fitted.big)
        parts.push_back("sizes >= 1 MiB " + pct(l.fitted.big) + " fitted, " + pct(l.left_out.big) + " left out");
      if (l.fitted.small)
        parts.push_back("sizes < 1 MiB " + pct(l.fitted.small) + " fitted, " + pct(l.left_out.small) + " left out");
      if (!l.held.empty()) parts.push_back("held at the topology's value: " + sim::join(l.held));
      out << "# " << cases[i].name << ": " << sim::join(parts, "; ") << "\n";
    }
    out << "\n";
  }

  // The calibrated file: the topology as loaded (overrides applied), with the fitted section.
  const std::string text = sim::read_text_file(o.topology, "topology YAML file");
  YAML::Node root = sim::parse_yaml(text, o.topology);
  sim::YamlPositions positions(o.topology);
  for (const std::string& s : o.sets)
    sim::apply_set(root, s, sim::topology_schema(), positions, sim::topology_set_options());
  root["collectives"] = collectives_node(fit.constants);
  // Kernel profiles and tuner configs are named relative to the topology's folder: the written
  // file names them relative to its own, so that it loads wherever it is written.
  namespace fs = std::filesystem;
  const fs::path to = fs::absolute(fs::path(o.output)).parent_path();
  if (fit.constants.tuner)
    root["collectives"]["tuner"] =
        fs::absolute(fs::path(fit.constants.tuner->source)).lexically_normal().lexically_relative(to).string();
  if (YAML::Node kinds = root["device_kinds"]; kinds.IsMap()) {
    const fs::path from = fs::absolute(fs::path(o.topology)).parent_path();
    for (auto it = kinds.begin(); it != kinds.end(); ++it) {
      const YAML::Node kp = sim::map_entry(it->second, "kernel_profile");
      if (!kp.IsScalar() || kp.Scalar() == "none" || fs::path(kp.Scalar()).is_absolute()) continue;
      it->second["kernel_profile"] = (from / kp.Scalar()).lexically_normal().lexically_relative(to).string();
    }
  }
  YAML::Emitter em;
  em << root;
  std::ostringstream doc;
  doc << "# Calibrated by `ranksim calibrate` from " << o.topology;
  for (const std::string& s : o.sets) doc << " --set " << s;
  doc << "\n# against these nccl-tests measurements:\n";
  for (const MeasuredTable& t : tables) {
    doc << "#   " << t.path << "\n";
    for (const std::string& a : t.about) doc << "#     " << a << "\n";
  }
  say_left_out(doc, "#   (");
  if (!o.sizes.empty()) doc << "# (their rows of sizes " << o.sizes << " only)\n";
  doc << "# Fitted:";
  for (const std::string& f : fit.fitted) doc << " " << f;
  doc << " (rms log error " << fmt("%.4f", fit.rms_log_error) << "); the rest as in " << o.topology << ".\n";
  doc << em.c_str() << "\n";
  // What is written must load: checked before the file appears.
  (void)sim::Topology::parse(doc.str(), o.output);
  sim::write_file_atomically(o.output, [&](std::ostream& f) { f << doc.str(); });
  out << "# wrote " << o.output << "\n";
  return 0;
}

}  // namespace ranksim::app

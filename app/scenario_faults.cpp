// Reading a scenario's `faults:` list and a step's `ranks:` (docs/scenarios.md, "Faults").
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "app/scenario_reader.h"
#include "sim/suggest.h"
#include "sim/units.h"

namespace ranksim::app {

namespace {

const std::vector<std::string> kFaultKinds = {"rank_fails", "rank_stops", "straggler", "network_degrades",
                                              "network_fails"};

// A rank of the run: an integer from 0 to ranks - 1.
int rank_of_run(const YAML::Node& n, const std::string& what, int ranks, const ScenarioReader& r) {
  const int64_t v = r.integer(n, what, 0);
  if (v >= ranks)
    r.fail(n, what + " must be a rank of this run, 0 to " + std::to_string(ranks - 1) + ", got " + std::to_string(v));
  return static_cast<int>(v);
}

// A number in [lo, hi] (finite).
double bounded(const YAML::Node& n, const std::string& what, double lo, double hi, const std::string& why,
               const ScenarioReader& r) {
  const double v = r.number(n, what);
  if (!std::isfinite(v) || v < lo || v > hi) r.fail(n, what + " " + why + ", got " + n.Scalar());
  return v;
}

}  // namespace

std::vector<int> read_rank_list(const YAML::Node& n, int ranks, const ScenarioReader& r) {
  if (!n.IsSequence() || n.size() == 0)
    r.fail(n, "ranks must be a non-empty list of the ranks that run the step, such as [0, 2], got " + sim::describe(n));
  std::vector<int> out;
  for (const YAML::Node& x : n) {
    const int v = rank_of_run(x, "ranks", ranks, r);
    if (std::find(out.begin(), out.end(), v) != out.end())
      r.fail(x, "ranks lists rank " + std::to_string(v) + " twice");
    out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

ScenarioFault read_fault(const YAML::Node& n, const std::string& where, const Scenario& sc, const ScenarioReader& r) {
  if (!n.IsMap() || n.size() != 1)
    r.fail(n, "a fault must be a mapping with one key (" + sim::join(kFaultKinds) +
                  "), such as {straggler: {rank: 3, slowdown: 1.5}}, got " + sim::describe(n));
  const YAML::Node key = n.begin()->first;
  const YAML::Node body = n.begin()->second;
  const std::string& kind = key.Scalar();
  if (std::find(kFaultKinds.begin(), kFaultKinds.end(), kind) == kFaultKinds.end())
    r.fail(key, where + ": unknown fault '" + kind + "'" + sim::did_you_mean(kind, kFaultKinds) +
                    " (faults: " + sim::join(kFaultKinds) + ")");
  if (!body.IsMap())
    r.fail(body, where + ": " + kind + " needs its settings as a mapping, such as {rank: 3, at: 2 ms}");
  ScenarioFault f;
  const std::string w = where + "." + kind;
  auto need = [&](const char* k) {
    const YAML::Node v = entry(body, k);
    if (!v.IsDefined()) r.fail(body, where + ": " + kind + " needs " + k);
    return v;
  };
  auto time_at = [&](const char* k) { return r.unit(entry(body, k), w + "." + k, sim::units::parse_duration); };

  if (kind == "rank_fails" || kind == "rank_stops") {
    r.known_keys(body, {"rank", "at", "step", "iteration"}, "a " + kind + " fault");
    f.kind = kind == "rank_fails" ? ScenarioFault::Kind::rank_fails : ScenarioFault::Kind::rank_stops;
    f.rank = rank_of_run(need("rank"), w + ".rank", sc.ranks, r);
    const YAML::Node at = entry(body, "at"), step = entry(body, "step"), it = entry(body, "iteration");
    if (at.IsDefined() == step.IsDefined())
      r.fail(body, where + ": " + kind + " needs exactly one of at (a virtual time, such as 2 ms) or step (an index " +
                       "into workload.steps.do)");
    if (at.IsDefined()) {
      f.at = time_at("at");
      if (it.IsDefined()) r.fail(it, w + ".iteration goes with step, not with at");
    } else {
      if (sc.steps.empty())
        r.fail(step,
               w + ".step counts the steps of a steps workload; this scenario has none: give at (a virtual time)");
      f.step = static_cast<int>(r.integer(step, w + ".step", 0));
      if (f.step >= static_cast<int>(sc.steps.size()))
        r.fail(step, w + ".step must index workload.steps.do, 0 to " + std::to_string(sc.steps.size() - 1) + ", got " +
                         std::to_string(f.step));
      if (it.IsDefined()) {
        const int64_t v = r.integer(it, w + ".iteration", 0);
        if (v >= sc.repeat)
          r.fail(it, w + ".iteration must be a repetition of the steps, 0 to " + std::to_string(sc.repeat - 1) +
                         " (workload.steps.repeat is " + std::to_string(sc.repeat) + "), got " + std::to_string(v));
        f.iteration = static_cast<int>(v);
      }
    }
    f.label = where + " (" + kind + ": rank " + std::to_string(f.rank) + ")";
    return f;
  }
  if (kind == "straggler") {
    r.known_keys(body, {"rank", "slowdown", "from"}, "a straggler fault");
    f.kind = ScenarioFault::Kind::straggler;
    f.rank = rank_of_run(need("rank"), w + ".rank", sc.ranks, r);
    f.slowdown = bounded(need("slowdown"), w + ".slowdown", 1, 1e6,
                         "must be a number from 1 to 1e6 (its kernels take that many times as long)", r);
    f.at = entry(body, "from").IsDefined() ? time_at("from") : sim::Time::zero();
    f.label = where + " (straggler: rank " + std::to_string(f.rank) + ")";
    return f;
  }
  // network_degrades, network_fails: the links a node (or one rank's NIC) has to the network.
  const bool degrades = kind == "network_degrades";
  r.known_keys(body,
               degrades ? std::vector<std::string>{"node", "rank", "factor", "at"}
                        : std::vector<std::string>{"node", "rank", "at"},
               "a " + kind + " fault");
  f.kind = degrades ? ScenarioFault::Kind::network_degrades : ScenarioFault::Kind::network_fails;
  const sim::Topology& topo = *sc.topology;
  const int nodes_used = topo.device(sc.ranks - 1).node + 1;
  if (nodes_used < 2)
    r.fail(key, where + ": this run's " + std::to_string(sc.ranks) + " ranks are on one node of topology '" +
                    topo.name() + "', so no collective crosses the network; use more ranks or nodes " +
                    "(--set topology.nodes=N)");
  const YAML::Node node = entry(body, "node"), rank = entry(body, "rank");
  if (node.IsDefined() == rank.IsDefined())
    r.fail(body, where + ": " + kind + " needs exactly one of node (all of its network links) or rank (its NIC)");
  if (node.IsDefined()) {
    const int64_t v = r.integer(node, w + ".node", 0);
    if (v >= nodes_used)
      r.fail(node, w + ".node must be a node of this run, 0 to " + std::to_string(nodes_used - 1) + ", got " +
                       std::to_string(v));
    f.node = static_cast<int>(v);
  } else {
    f.rank = rank_of_run(rank, w + ".rank", sc.ranks, r);
  }
  if (degrades)
    f.factor = bounded(need("factor"), w + ".factor", 1e-6, 1,
                       "must be the links' remaining share of their bandwidth, above 0 and at most 1 "
                       "(network_fails is a link that carries nothing)",
                       r);
  f.at = entry(body, "at").IsDefined() ? time_at("at") : sim::Time::zero();
  f.label = where + " (" + kind + ": " +
            (f.node >= 0 ? "node " + std::to_string(f.node) : "rank " + std::to_string(f.rank) + "'s NIC") + ")";
  return f;
}

}  // namespace ranksim::app

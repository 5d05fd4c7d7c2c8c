#include "app/nccl_tests_output.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <utility>

#include "runtime/distributed/nccl_names.h"
#include "runtime/distributed/schedule_types.h"
#include "sim/error.h"
#include "sim/nccl_env.h"

namespace ranksim::app {
namespace {

// nccl-tests' binary for each of ranksim's ops, the reduction it prints and whether it has a
// root (src/*.cu: root 0 for broadcast, reduce, gather and scatter; -1 for the others).
struct PerfBinary {
  const char* binary;
  const char* redop;
  bool rooted;
};
PerfBinary perf_binary(const std::string& op) {
  static const std::map<std::string, PerfBinary> known = {{"all_reduce", {"all_reduce_perf", "sum", false}},
                                                          {"all_gather", {"all_gather_perf", "none", false}},
                                                          {"reduce_scatter", {"reduce_scatter_perf", "sum", false}},
                                                          {"all_to_all", {"alltoall_perf", "none", false}},
                                                          {"broadcast", {"broadcast_perf", "none", true}},
                                                          {"reduce", {"reduce_perf", "sum", true}},
                                                          {"gather", {"gather_perf", "none", true}},
                                                          {"scatter", {"scatter_perf", "none", true}},
                                                          {"sendrecv", {"sendrecv_perf", "none", false}}};
  const auto it = known.find(op);
  if (it == known.end()) throw Error("no nccl-tests binary runs op '" + op + "'");
  return it->second;
}

// ranksim's dtypes and nccl-tests' names for them (-d).
constexpr std::pair<const char*, const char*> kTypes[] = {{"f32", "float"},     {"f64", "double"}, {"f16", "half"},
                                                          {"bf16", "bfloat16"}, {"i32", "int32"},  {"i64", "int64"}};

}  // namespace

const char* nccl_tests_type(const std::string& dtype) {
  for (const auto& [ours, theirs] : kTypes)
    if (dtype == ours) return theirs;
  throw Error("no nccl-tests type for dtype '" + dtype + "'");
}

std::optional<std::string> dtype_of_nccl_tests_type(const std::string& name) {
  for (const auto& [ours, theirs] : kTypes)
    if (name == theirs) return std::string(ours);
  return std::nullopt;
}

std::string nccl_tests_json(const sim::Topology& topo, const NcclTestsRun& run, const std::vector<TableRow>& rows) {
  using json = nlohmann::ordered_json;  // keys in nccl-tests' order
  const PerfBinary bin = perf_binary(run.op);
  const runtime::CollectiveKind kind =
      run.op == "sendrecv" ? runtime::CollectiveKind::broadcast : *runtime::parse_collective_kind(run.op);
  const bool stepped = run.step_factor > 1;
  json args = json::array({bin.binary, "-b", std::to_string(run.min_bytes), "-e", std::to_string(run.max_bytes)});
  args.insert(args.end(), {stepped ? "-f" : "-i", std::to_string(stepped ? run.step_factor : run.step_bytes)});
  args.insert(args.end(), {"-g", std::to_string(run.gpus_per_thread), "-d", nccl_tests_type(run.dtype), "-c",
                           run.check ? "1" : "0"});
  if (bin.rooted) args.insert(args.end(), {"-r", "0"});
  if (run.iters > 0) args.insert(args.end(), {"-n", std::to_string(run.iters)});
  if (run.warmup_iters >= 0) args.insert(args.end(), {"-w", std::to_string(run.warmup_iters)});
  json env = json::array();
  // What NCCL would have been given; ranksim's own schedules (direct, hierarchical) have no
  // NCCL_ALGO, and stay in the "ranksim" block only.
  const auto nccl_name = [](const std::string& v, bool algo) -> std::string {
    if (v.empty() || v == "auto") return "";
    try {
      return algo ? sim::nccl_algo_value(v) : sim::nccl_proto_value(v);
    } catch (const Error&) {
      return "";
    }
  };
  if (const std::string a = nccl_name(run.algorithm, true); !a.empty()) env.push_back("NCCL_ALGO=" + a);
  if (const std::string p = nccl_name(run.protocol, false); !p.empty()) env.push_back("NCCL_PROTO=" + p);
  for (const std::string& v : run.environment) env.push_back(v);

  json devices = json::array();
  for (int first = 0; first < run.ranks; first += run.gpus_per_thread) {
    const sim::Device& d = topo.device(first);
    devices.push_back({{"rank", first},
                       {"group", 0},
                       {"hostname", "node" + std::to_string(d.node)},
                       {"device", d.local_index},
                       {"device_info", topo.kind_of(first).name}});
  }
  json config = {{"nthreads", 1},
                 {"ngpus", run.gpus_per_thread},
                 {"minimum_bytes", run.min_bytes},
                 {"maximum_bytes", run.max_bytes}};
  if (stepped)
    config["step_factor"] = run.step_factor;
  else
    config["step_bytes"] = run.step_bytes;
  config.update({{"warmup_iters", 0},
                 {"iterations", 1},
                 {"aggregated_iterations", 1},
                 {"validation", run.check ? 1 : 0},
                 {"graph", 0},
                 {"blocking_collectives", "false"},
                 {"per_iter_timing", "false"},
                 {"per_iter_skip", 0},
                 {"parallel_init", "false"},
                 {"devices", devices}});

  char root[16];
  std::snprintf(root, sizeof root, "%6i", bin.rooted ? 0 : -1);
  json results = json::array();
  int64_t wrong = 0;
  double busbw_sum = 0;
  for (const TableRow& r : rows) {
    const double us = r.seconds * 1e6;
    const double algbw = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
    const double busbw = algbw * busbw_factor(kind, run.ranks);
    busbw_sum += busbw;
    if (r.wrong > 0) wrong += r.wrong;
    const json timed = {{"time", us},
                        {"alg_bw", algbw},
                        {"bus_bw", busbw},
                        {"nwrong", r.wrong < 0 ? json(nullptr) : json(static_cast<double>(r.wrong))}};
    results.push_back({{"size", r.bytes},
                       {"count", r.count},
                       {"type", nccl_tests_type(run.dtype)},
                       {"redop", bin.redop},
                       {"root", root},
                       {"out_of_place", timed},
                       {"in_place", timed},
                       {"actual_iterations", 1},
                       {"experiment_name", ""},
                       {"ranksim_choice", r.algorithm}});
  }
  const json out = {
      {"version", 3},
      {"args", args},
      {"env", env},
      {"config", config},
      {"results", results},
      {"out_of_bounds", {{"count", wrong}, {"okay", wrong == 0 ? "true" : "false"}}},
      {"average_bus_bandwidth",
       {{"bandwidth", rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size())}, {"okay", "unchecked"}}},
      {"ranksim",
       {{"predicted_by", "ranksim bench collectives"},
        {"topology", topo.name()},
        {"topology_file", run.topology_file},
        {"timing_model",
         topo.collectives().model == sim::CollectiveTimingModel::nccl ? "nccl" : "schedule on the network"},
        {"op", run.op},
        {"ranks", run.ranks},
        {"algorithm", run.algorithm},
        {"protocol", run.protocol},
        {"data", run.check ? "real, checked" : "shape-only"}}}};
  return out.dump(1) + "\n";
}

}  // namespace ranksim::app

// run_scenario: one run of a loaded scenario, from its workload's runner (workloads.h) to the
// summary writers (text, JSON, HTML) and the trace.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "app/bench.h"
#include "app/devices.h"
#include "app/model_workload.h"
#include "app/run_summary.h"
#include "app/scenario.h"
#include "app/summary_html.h"
#include "app/summary_json.h"
#include "app/summary_text.h"
#include "app/workloads.h"
#include "runtime/device/device.h"
#include "sim/check.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/units.h"

namespace ranksim::app {

namespace fs = std::filesystem;

runtime::FaultPlan fault_plan(const Scenario& sc) {
  runtime::FaultPlan plan;
  for (const ScenarioFault& f : sc.faults) {
    using K = ScenarioFault::Kind;
    if ((f.kind == K::rank_fails || f.kind == K::rank_stops) && f.at)
      plan.ranks.push_back(
          {f.rank, *f.at, f.kind == K::rank_stops, f.label + (f.kind == K::rank_stops ? ": stopped" : ": failed")});
    if (f.kind == K::straggler) plan.stragglers.push_back({f.rank, f.slowdown, f.at.value_or(sim::Time::zero())});
    if (f.kind == K::network_degrades || f.kind == K::network_fails)
      plan.network.push_back({f.node, f.rank, f.factor, f.at.value_or(sim::Time::zero()), f.label});
  }
  return plan;
}

runtime::RunReport spawn_scenario(const Scenario& sc, const RunFlags& flags, bool trace,
                                  const std::function<void(int)>& rank) {
  runtime::SpawnOptions so;
  so.topology = sc.topology.get();
  so.algorithm = runtime::parse_algorithm(single_name(sc.algorithm));
  so.protocol = parse_protocol_option(single_name(sc.protocol));
  so.nccl_allowed = nccl_lists(sc.algorithm, sc.protocol, "algorithm", "protocol");
  so.backend = runtime::parse_backend(flags.backend);
  // Real NCCL takes the algorithm and protocol from its environment, read at init.
  if (so.backend == runtime::BackendKind::nccl) set_nccl_environment(sc.algorithm, sc.protocol);
  so.device_collectives = flags.device_collectives;
  so.engine.trace = trace;
  so.count_memory = flags.count_memory;
  so.guard = host_memory_guard();  // stops a run about to exhaust the host, with exit 2
  so.faults = fault_plan(sc);
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
  // CUDA, cuBLAS and NCCL run from the ranks' fibers too: their first calls (NCCL's topology
  // search, cuBLAS's heuristics) go deep. GPU runs have few ranks per process, so they get large
  // stacks (only the pages touched cost memory) behind guard pages, so an overflow faults at
  // once instead of corrupting a neighbour.
  if (flags.device == "gpu" || flags.backend == "nccl") {
    so.engine.stack.size = std::max(stack, kGpuFiberStackBytes);
    so.engine.stack.guard_page = true;
  }
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
  runtime::RunReport rep = runtime::spawn(rank, sc.ranks, so);
  if (printed) std::fprintf(stderr, "\r%80s\r", "");
  return rep;
}

namespace {

// Refuses, before anything runs, outputs that could not all be written or that would destroy
// something: an output the workload never writes, two outputs on one path, an output on one of
// the run's inputs, an output in a folder that does not exist. (Found only after a whole
// training run otherwise, or silently keeping one of two files.)
void check_outputs(const Scenario& sc, const std::string& trace, const std::string& json, const std::string& report) {
  if (sc.sweep_op && !trace.empty()) {
    throw Error(sc.file +
                ": a collectives sweep records no trace (each size is timed alone); drop --trace "
                "(outputs.trace), or time the collective in a steps workload to trace it");
  }
  std::vector<sim::NamedPath> outs;
  const auto add = [&](const char* what, const std::string& path) {
    if (!path.empty()) outs.push_back({what, path});
  };
  add("--trace", trace);
  add("--json", json);
  add("--report", report);
  std::vector<sim::NamedPath> ins = {{"the scenario", sc.file}, {"the topology", sc.topology_path}};
  if (sc.model) {
    add("dump", sc.model->dump);
    if (sc.model->train) add("train.checkpoint", sc.model->train->checkpoint);
    if (!sc.model->weights.empty()) ins.push_back({"model.weights", sc.model->weights});
    if (!sc.model->batch.empty()) ins.push_back({"batch", sc.model->batch});
  }
  sim::check_output_paths(outs, ins);
}

}  // namespace

int run_scenario(const Scenario& sc, const RunFlags& flags, std::ostream& out) {
  RANKSIM_CHECK(sc.topology != nullptr, "run_scenario: the scenario was not loaded by load_scenario");
  const sim::Topology& topo = *sc.topology;
  const std::string trace_path = !flags.trace.empty() ? flags.trace : sc.out_trace;
  const std::string json_path = !flags.json.empty() ? flags.json : sc.out_json;
  const std::string report_path = !flags.report.empty() ? flags.report : sc.out_report;
  check_outputs(sc, trace_path, json_path, report_path);
  // Real data: every rank holds its collectives' buffers. Refused before the run when the machine
  // cannot hold them (else the kernel kills the run part way).
  if (sc.real_data && !sc.model) {
    double largest = 0;
    for (const int64_t b : sc.sweep_sizes) largest = std::max(largest, static_cast<double>(b));
    for (const ScenarioStep& st : sc.steps)
      if (st.kind == ScenarioStep::Kind::collective || st.kind == ScenarioStep::Kind::sendrecv)
        largest = std::max(largest, st.bytes);
    check_host_memory(collective_host_bytes(sc.ranks, largest),
                      sc.file + ": data: real on " + std::to_string(sc.ranks) + " ranks at " +
                          sim::units::format_bytes(static_cast<uint64_t>(largest)) + " per rank");
  }
  check_direct_schedule(topo, sc.ranks, sc.algorithm, sc.file + ": algorithm: direct");
  RunSummary s;
  s.backend = flags.backend;
  s.device_kind = !flags.device.empty() ? flags.device : flags.backend == "nccl" ? "gpu" : "cpu";
  const std::shared_ptr<runtime::Device> device = make_device(s.device_kind);
  const runtime::ScopedComputeDevice on_device(device);
  print_run_header(out, sc, topo, device.get());

  const runtime::BackendKind backend = runtime::parse_backend(flags.backend);
  if (sc.sweep_op && backend != runtime::BackendKind::sim)
    throw Error(sc.file +
                ": a collectives sweep runs on the sim backend only; use a steps workload "
                "to time collectives with --backend " +
                flags.backend);
  const bool trace = !trace_path.empty() || !report_path.empty();
  std::optional<ModelInputs> model_in;
  if (sc.sweep_op) {
    s.sweep = run_sweep_workload(sc);
    for (const SweepRow& r : s.sweep) s.makespan += sim::Time::from_seconds(r.seconds);
    print_sweep_table(out, sc, s.sweep);
  } else {
    if (sc.model) {
      model_in = run_model_workload(sc, flags, trace, s);
    } else {
      s.report = run_steps_workload(sc, flags, trace);
    }
    s.makespan = s.report.makespan;
    if (!sc.faults.empty()) {
      // The faults' effect: the same run without them (no trace, no progress line).
      Scenario clean = sc;
      clean.faults.clear();
      RunFlags quiet = flags;
      quiet.quiet = true;
      RunSummary other;
      s.without_faults = sc.model ? (run_model_workload(clean, quiet, false, other), other.report.makespan)
                                  : run_steps_workload(clean, quiet, false).makespan;
    }
    s.lines = group_collectives(s.report);
    print_rank_table(out, sc, s);
    print_collectives_table(out, s);
  }
  if (sc.model) {
    if (sc.model->validate) s.validation = validate_against_baseline(*sc.model, *model_in, s.model_dump, sc.dp);
    print_model_section(out, sc, s);
  }
  evaluate_checks(sc, s);
  print_totals(out, s, backend != runtime::BackendKind::sim, device.get());
  print_faults(out, sc, s);

  // The outputs appear together or not at all (a signal or an error in one of them leaves none),
  // and are named once they are all in place.
  std::ostringstream written;
  sim::OutputGroup outputs;
  if (sc.model) write_model_outputs(sc, s, written);
  if (!json_path.empty()) {
    write_json_summary(json_path, sc, topo.name(), s);
    written << "summary: " << json_path << "\n";
  }
  if (!report_path.empty()) {
    write_run_report(report_path, sc, topo, s);
    written << "report: " << report_path << "\n";
  }
  if (!trace_path.empty()) {
    // Each rank's device memory as a counter track beside its spans (the ranks that kept a
    // timeline: runtime/distributed/run_report.h).
    for (size_t r = 0; r < s.report.memory.size(); ++r) {
      for (const runtime::MemorySample& m : s.report.memory[r].timeline) {
        sim::Counter c{"memory rank " + std::to_string(r) + " (bytes)", m.time, {}};
        for (int k = 0; k < runtime::kMemoryKinds; ++k)
          c.values.emplace_back(runtime::memory_kind_name(static_cast<runtime::MemoryKind>(k)),
                                static_cast<double>(m.bytes[static_cast<size_t>(k)]));
        s.report.trace.add_counter(std::move(c));
      }
    }
    s.report.trace.save(trace_path);
    written << "trace: " << trace_path << " (open in ui.perfetto.dev)\n";
  }
  outputs.commit_all();
  out << written.str();
  return s.passed ? 0 : 1;
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
        if (n["description"])
          what = n["description"].as<std::string>();
        else if (n["name"])
          what = n["name"].as<std::string>();
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
      std::snprintf(buf, sizeof buf, "  %-28s %s\n", (std::string(folder) + "/" + f.filename().string()).c_str(),
                    what.c_str());
      out << buf;
    }
  }
}

}  // namespace ranksim::app

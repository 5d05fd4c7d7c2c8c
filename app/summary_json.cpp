#include "app/summary_json.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <ostream>

#include "sim/check.h"
#include "sim/io.h"

namespace ranksim::app {

namespace {

using Json = nlohmann::ordered_json;

// The notation of each number field that is not an integer (the key names the field; a list's
// elements follow the list's key).
const std::map<std::string, const char*, std::less<>>& float_formats() {
  static const std::map<std::string, const char*, std::less<>> formats = {{"virtual_time_us", "%.6f"},
                                                                          {"clock_us", "%.6f"},
                                                                          {"compute_us", "%.6f"},
                                                                          {"comm_us", "%.6f"},
                                                                          {"time_us", "%.6f"},
                                                                          {"algbw_GBps", "%.6f"},
                                                                          {"busbw_GBps", "%.6f"},
                                                                          {"pipeline_wait_us", "%.6f"},
                                                                          {"loss", "%.9g"},
                                                                          {"losses", "%.9g"},
                                                                          {"logits_share", "%.6f"},
                                                                          {"acceptable_share", "%.6f"},
                                                                          {"logits_max_diff", "%.6g"},
                                                                          {"loss_rel", "%.6g"},
                                                                          {"grad_max_norm_diff", "%.6g"},
                                                                          {"norm_diff", "%.6g"},
                                                                          {"gemm_us", "%.6f"},
                                                                          {"attention_us", "%.6f"},
                                                                          {"memory_bound_us", "%.6f"},
                                                                          {"other_us", "%.6f"},
                                                                          {"tflops", "%.6g"},
                                                                          {"mfu", "%.6g"},
                                                                          {"peak_time_us", "%.6f"},
                                                                          {"iteration_time_s", "%.9g"},
                                                                          {"tokens_per_step", "%.17g"},
                                                                          {"model_flops_per_step", "%.17g"},
                                                                          {"tokens_per_s_per_gpu", "%.9g"},
                                                                          {"tflops_per_gpu", "%.9g"},
                                                                          {"exposed_us", "%.6f"},
                                                                          {"tp_us", "%.6f"},
                                                                          {"cp_us", "%.6f"},
                                                                          {"dp_us", "%.6f"},
                                                                          {"pp_us", "%.6f"},
                                                                          {"idle_us", "%.6f"},
                                                                          {"virtual_time_without_faults_us", "%.6f"}};
  return formats;
}

// A Time in microseconds: exact to the picosecond at 6 decimals.
double us(sim::Time t) { return static_cast<double>(t.picoseconds()) / 1e6; }

std::string text_of(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

void write_inline(std::ostream& out, const Json& v, const std::string& key) {
  if (v.is_object()) {
    out << "{";
    bool first = true;
    for (const auto& [k, child] : v.items()) {
      out << (first ? "" : ", ") << text_of(Json(k)) << ": ";
      write_inline(out, child, k);
      first = false;
    }
    out << "}";
  } else if (v.is_array()) {
    out << "[";
    for (size_t i = 0; i < v.size(); ++i) {
      out << (i ? ", " : "");
      write_inline(out, v[i], key);
    }
    out << "]";
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    const auto f = float_formats().find(key);
    RANKSIM_CHECK(f != float_formats().end(), "summary_json: a number field without a notation");
    if (!std::isfinite(x)) {
      out << "null";
    } else {
      out << fmt(f->second, x);
    }
  } else {
    out << text_of(v);
  }
}

void write_layout(std::ostream& out, const Json& top) {
  out << "{";
  bool first = true;
  for (const auto& [k, v] : top.items()) {
    out << (first ? "\n  " : ",\n  ") << text_of(Json(k)) << ": ";
    first = false;
    if (!v.is_array()) {
      write_inline(out, v, k);
      continue;
    }
    out << "[";
    for (size_t i = 0; i < v.size(); ++i) {
      out << (i ? ",\n    " : "\n    ");
      write_inline(out, v[i], k);
    }
    out << "\n  ]";
  }
  out << "\n}\n";
}

Json model_json(const Scenario& sc, const RunSummary& s) {
  const ModelWorkload& m = *sc.model;
  Json j = Json::object();
  if (m.train) {
    Json waits = Json::array();
    for (double w : s.pipeline_wait) waits.push_back(us(sim::Time::from_seconds(w)));
    j["pipeline_wait_us"] = waits;
    Json losses = Json::array();
    for (double l : s.train_result.losses) losses.push_back(std::isfinite(l) ? Json(l) : Json(nullptr));
    j["losses"] = losses;
    if (const std::optional<Throughput> t = training_throughput(sc, s)) {
      j["iteration_time_s"] = t->iteration_s;
      j["tokens_per_step"] = t->tokens_per_step;
      j["model_flops_per_step"] = t->model_flops_per_step;
      j["tokens_per_s_per_gpu"] = t->tokens_per_s_per_gpu;
      j["tflops_per_gpu"] = t->tflops_per_gpu;
      if (t->peak_tflops > 0) {
        j["mfu"] = t->mfu;
        j["mfu_peak"] = Json{{"dtype", t->peak_dtype}, {"tflops", t->peak_tflops}};
      }
    }
  } else {
    const bool numbers = !m.shape_only && std::isfinite(s.model_dump.loss);
    j["loss"] = numbers ? Json(s.model_dump.loss) : Json(nullptr);
    j["tokens"] = s.model_dump.tokens;
  }
  if (s.validation) {
    const models::ValidationReport& v = *s.validation;
    Json grads = Json::array();
    for (const auto& g : v.grads)
      grads.push_back(
          Json{{"name", g.name}, {"norm_diff", g.norm_diff}, {"category", models::category_name(g.category)}});
    j["validation"] = Json{{"baseline", baseline_name(m)},
                           {"logits_share", v.logits_share},
                           {"logits_max_diff", v.logits_max_diff},
                           {"loss_rel", v.loss_rel},
                           {"grad_max_norm_diff", v.grad_max_norm_diff},
                           {"acceptable_share", v.acceptable_share},
                           {"passed", v.ok()},
                           {"grads", grads}};
  }
  return j;
}

}  // namespace

void write_json_summary(const std::string& path, const Scenario& sc, const std::string& topology_name,
                        const RunSummary& s) {
  const runtime::RunReport& rep = s.report;
  Json j = Json::object();
  j["scenario"] = sc.name;
  j["backend"] = s.backend;
  j["device"] = s.device_kind;
  j["topology"] = topology_name;
  j["ranks"] = sc.ranks;
  j["layout"] = Json{{"tp", sc.tp}, {"cp", sc.cp}, {"dp", sc.dp}, {"pp", sc.pp}};
  // NCCL's variables the run read (app/nccl_environment.h)
  if (!sc.nccl_environment.empty()) j["nccl_environment"] = sc.nccl_environment;
  j["virtual_time_us"] = us(s.makespan);
  Json ranks = Json::array();
  for (size_t r = 0; r < rep.clocks.size(); ++r) {
    Json rank{
        {"rank", r}, {"clock_us", us(rep.clocks[r])}, {"compute_us", us(rep.compute[r])}, {"comm_us", us(rep.comm[r])}};
    if (r < rep.compute_detail.size()) {
      const runtime::ComputeBreakdown& c = rep.compute_detail[r];
      const ComputeRates rates = compute_rates(c, s.makespan);
      rank["compute_by_kind"] = Json{{"gemm_us", us(c.time[0])},
                                     {"attention_us", us(c.time[1])},
                                     {"memory_bound_us", us(c.time[2])},
                                     {"other_us", us(c.time[3])}};
      rank["tflops"] = rates.tflops;
      rank["mfu"] = rates.mfu;
    }
    if (r < rep.comm_by_group.size()) {
      Json by = Json::array();
      for (const auto& [desc, t] : rep.comm_by_group[r]) by.push_back(Json{{"group", desc}, {"exposed_us", us(t)}});
      rank["comm_by_group"] = by;
    }
    if (r < rep.memory.size()) {
      const runtime::MemoryUse& m = rep.memory[r];
      Json mem{{"peak_bytes", m.peak}, {"capacity_bytes", m.capacity}};
      for (int k = 0; k < runtime::kMemoryKinds; ++k)
        mem[std::string(runtime::memory_kind_name(static_cast<runtime::MemoryKind>(k))) + "_bytes"] =
            m.at_peak[static_cast<size_t>(k)];
      mem["peak_time_us"] = us(m.peak_time);
      mem["after_op"] = m.after_op;
      mem["phase"] = m.phase;
      rank["memory"] = mem;
    }
    ranks.push_back(rank);
  }
  j["ranks_detail"] = ranks;
  if (const std::vector<TimeBreakdown> rows = time_breakdown(sc, s); !rows.empty()) {
    Json breakdown = Json::array();
    for (const TimeBreakdown& r : rows) {
      Json exposed = Json::object();
      for (int d = 0; d < kCommDims; ++d)
        exposed[std::string(kCommDimNames[d]) + "_us"] = r.exposed_s[static_cast<std::size_t>(d)] * 1e6;
      Json overlapped = Json::object();
      for (int d = 0; d < kCommDims; ++d)
        overlapped[std::string(kCommDimNames[d]) + "_us"] = r.overlapped_s[static_cast<std::size_t>(d)] * 1e6;
      Json row{{"first_rank", r.first_rank}, {"last_rank", r.last_rank},      {"compute_us", r.compute_s * 1e6},
               {"exposed_comm", exposed},    {"overlapped_comm", overlapped}, {"idle_us", r.idle_s * 1e6}};
      if (r.stage >= 0) row["pipeline_stage"] = r.stage;
      breakdown.push_back(row);
    }
    j["time_breakdown"] = breakdown;
  }
  if (!rep.compute_models.empty()) {
    j["compute_model"] = rep.compute_models;
    Json notes = Json::array();
    for (const auto& [note, kernels] : rep.compute_notes) notes.push_back(Json{{"note", note}, {"kernels", kernels}});
    j["compute_notes"] = notes;
  }
  if (!sc.faults.empty()) {
    Json injected = Json::array();
    for (const ScenarioFault& f : sc.faults) injected.push_back(f.label);
    Json faults{{"injected", injected}};
    if (s.without_faults) faults["virtual_time_without_faults_us"] = us(*s.without_faults);
    j["faults"] = faults;
  }
  Json collectives = Json::array();
  for (const CollectiveLine& l : s.lines) {
    Json c{{"op", l.op},
           {"group_size", l.group_size},
           {"dtype", l.dtype},
           {"bytes", l.bytes},
           {"algorithm", l.algorithm},
           {"calls", l.calls},
           {"time_us", l.seconds_per_call() * 1e6}};
    if (!l.desc.empty()) c["group"] = l.desc;
    collectives.push_back(c);
  }
  j["collectives"] = collectives;
  Json sweep = Json::array();
  for (const SweepRow& r : s.sweep)
    sweep.push_back(Json{{"bytes", r.bytes},
                         {"count", r.count},
                         {"algorithm", r.algorithm},
                         {"time_us", r.seconds * 1e6},
                         {"algbw_GBps", r.algbw / 1e9},
                         {"busbw_GBps", r.busbw / 1e9},
                         {"wrong", r.wrong}});
  j["sweep"] = sweep;
  if (sc.model) j["model"] = model_json(sc, s);
  Json checks = Json::array();
  for (const CheckResult& c : s.checks)
    checks.push_back(Json{{"check", c.text}, {"passed", c.passed}, {"measured", c.measured}});
  j["checks"] = checks;
  j["passed"] = s.passed;
  sim::write_file_atomically(path, [&](std::ostream& out) { write_layout(out, j); });
}

}  // namespace ranksim::app

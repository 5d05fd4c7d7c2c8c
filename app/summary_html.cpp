#include "app/summary_html.h"

#include "app/nccl_table.h"
#include "app/report_html.h"
#include "sim/units.h"

namespace ranksim::app {

void write_run_report(const std::string& path, const Scenario& sc, const sim::Topology& topo, const RunSummary& s) {
  ReportData d;
  d.title = "ranksim: " + sc.name;
  d.subtitle = std::to_string(sc.ranks) + " ranks on " + topo.name() + ", tp=" + std::to_string(sc.tp) +
               " cp=" + std::to_string(sc.cp) + " dp=" + std::to_string(sc.dp) + " pp=" + std::to_string(sc.pp) +
               (sc.description.empty() ? "" : " — " + sc.description);
  d.makespan = s.makespan;
  d.nranks = sc.ranks;
  for (size_t r = 0; r < s.report.clocks.size(); ++r)
    d.ranks.push_back({static_cast<int>(r), s.report.clocks[r], s.report.compute[r], s.report.comm[r]});
  d.breakdown_parts = {"compute", "TP", "CP", "DP", "PP", "other", "idle"};
  for (const TimeBreakdown& b : time_breakdown(sc, s)) {
    ReportData::Bar bar{"ranks " + std::to_string(b.first_rank) + "-" + std::to_string(b.last_rank), {b.compute_s}};
    if (b.stage >= 0) bar.label = "stage " + std::to_string(b.stage) + " (" + bar.label.substr(6) + ")";
    bar.seconds.insert(bar.seconds.end(), b.exposed_s.begin(), b.exposed_s.end());
    bar.seconds.push_back(b.idle_s);
    d.breakdown.push_back(std::move(bar));
  }
  if (!s.report.compute_detail.empty()) {
    d.compute_header = {"rank", "gemm", "attention", "memory-bound", "other", "TFLOP/s", "MFU"};
    for (size_t r = 0; r < s.report.compute_detail.size(); ++r) {
      const runtime::ComputeBreakdown& c = s.report.compute_detail[r];
      const ComputeRates rates = compute_rates(c, s.makespan);
      d.compute.push_back({{std::to_string(r), c.time[0].str(), c.time[1].str(), c.time[2].str(), c.time[3].str(),
                            fmt("%.1f", rates.tflops), fmt("%.1f%%", 100 * rates.mfu)}});
    }
    for (const std::string& m : s.report.compute_models) d.compute_notes.push_back("timed by " + m);
    for (const auto& [note, kernels] : s.report.compute_notes)
      d.compute_notes.push_back(note + ": " + std::to_string(kernels) + " kernels");
  }
  if (!s.report.memory.empty()) {
    d.memory_header = {"rank",      "peak",        "capacity", "parameters", "gradients",
                       "optimizer", "activations", "buffers",  "when"};
    auto bytes = [](uint64_t b) { return sim::units::format_bytes(b); };
    for (size_t r = 0; r < s.report.memory.size(); ++r) {
      const runtime::MemoryUse& m = s.report.memory[r];
      ReportData::Row row{{std::to_string(r), bytes(m.peak), bytes(m.capacity)}};
      for (uint64_t b : m.at_peak) row.cells.push_back(bytes(b));
      row.cells.push_back(memory_peak_when(m));
      d.memory.push_back(std::move(row));
      if (!m.timeline.empty()) d.memory_series.push_back({static_cast<int>(r), m.peak, m.capacity, m.timeline});
    }
  }
  d.collective_header = {"collective", "ranks", "type", "size(B)", "algorithm", "calls", "time(us)", "busbw(GB/s)"};
  for (const CollectiveLine& l : s.lines) {
    const double per_call = l.seconds_per_call();
    const runtime::CollectiveKind kind = l.kind();
    const double busbw =
        per_call > 0 ? static_cast<double>(l.bytes) / per_call / 1e9 * busbw_factor(kind, l.group_size) : 0;
    d.collectives.push_back({{l.desc.empty() ? l.op : l.op + " (" + l.desc + ")", std::to_string(l.group_size), l.dtype,
                              std::to_string(l.bytes), l.algorithm, std::to_string(l.calls),
                              fmt("%.2f", per_call * 1e6), fmt("%.2f", busbw)}});
  }
  if (sc.sweep_op) {
    d.sweep_op = *sc.sweep_op;
    d.collective_header = {"size(B)", "count", "type", "algorithm", "time(us)", "algbw(GB/s)", "busbw(GB/s)"};
    for (const SweepRow& r : s.sweep) {
      d.sweep.push_back({r.bytes, r.busbw / 1e9});
      d.collectives.push_back({{std::to_string(r.bytes), std::to_string(r.count), sc.sweep_dtype, r.algorithm,
                                fmt("%.2f", r.seconds * 1e6), fmt("%.2f", r.algbw / 1e9), fmt("%.2f", r.busbw / 1e9)}});
    }
  }
  for (const CheckResult& c : s.checks) d.checks.push_back({c.text, c.passed, c.measured});
  d.trace = sc.sweep_op ? nullptr : &s.report.trace;
  write_html_report(path, d);
}

}  // namespace ranksim::app

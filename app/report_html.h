// The `--report` output of `ranksim run`: one self-contained HTML file (no scripts, no external
// resources) with the run's summary, an SVG timeline of the ranks (compute and communication
// spans), an SVG plot of device memory over time, and for collective sweeps an SVG plot of bus
// bandwidth against message size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/distributed/run_report.h"
#include "sim/time.h"
#include "sim/trace.h"

namespace ranksim::app {

// Text for HTML: <, >, & and " as entities.
std::string html_escape(const std::string& s);

struct ReportData {
  std::string title;
  std::string subtitle;
  sim::Time makespan;
  struct RankRow {
    int rank;
    sim::Time clock, compute, comm;
  };
  std::vector<RankRow> ranks;
  // Where the time goes (run_summary.h's time_breakdown): one stacked bar per group of ranks,
  // its parts (seconds) in breakdown_parts' order.
  std::vector<std::string> breakdown_parts;
  struct Bar {
    std::string label;
    std::vector<double> seconds;
  };
  std::vector<Bar> breakdown;
  struct Row {
    std::vector<std::string> cells;
  };
  // Compute by kernel class per rank (sim runs), and how kernels were timed; empty elsewhere.
  std::vector<std::string> compute_header;
  std::vector<Row> compute;
  std::vector<std::string> compute_notes;
  // Device memory at each rank's peak (sim runs), and the bytes over time of the ranks that kept a
  // timeline (runtime/distributed/run_report.h): the one with the largest peak is drawn stacked by
  // kind, the others as lines of their totals.
  std::vector<std::string> memory_header;
  std::vector<Row> memory;
  struct MemorySeries {
    int rank = 0;
    uint64_t peak = 0, capacity = 0;
    std::vector<runtime::MemorySample> samples;
  };
  std::vector<MemorySeries> memory_series;
  std::vector<std::string> collective_header;
  std::vector<Row> collectives;
  struct Point {
    int64_t bytes;
    double busbw_gbps;
  };
  std::string sweep_op;
  std::vector<Point> sweep;
  struct Check {
    std::string text;
    bool passed;
    std::string measured;
  };
  std::vector<Check> checks;
  const sim::Trace* trace = nullptr;  // spans for the timeline (may be null)
  int nranks = 0;
};

// Writes the file whole or not at all. Throws ranksim::Error naming the path.
void write_html_report(const std::string& path, const ReportData& data);

}  // namespace ranksim::app

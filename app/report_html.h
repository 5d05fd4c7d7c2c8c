// The `--report` output of `ranksim run`: one self-contained HTML file (no scripts, no external
// resources) with the run's summary, an SVG timeline of the ranks (compute and communication
// spans), and for collective sweeps an SVG plot of bus bandwidth against message size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/time.h"
#include "sim/trace.h"

namespace ranksim::app {

struct ReportData {
  std::string title;
  std::string subtitle;
  sim::Time makespan;
  struct RankRow {
    int rank;
    sim::Time clock, compute, comm;
  };
  std::vector<RankRow> ranks;
  struct Row {
    std::vector<std::string> cells;
  };
  // Compute by kernel class per rank (sim runs), and how kernels were timed; empty elsewhere.
  std::vector<std::string> compute_header;
  std::vector<Row> compute;
  std::vector<std::string> compute_notes;
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

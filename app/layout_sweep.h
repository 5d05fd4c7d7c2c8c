// `ranksim sweep`: one training scenario timed over a grid of its keys (parallel.tp=2,4,8
// parallel.pp=1,2,4 ...), shape-only, each valid layout run once; the invalid ones listed with
// the loader's reason. The table on stdout is best first (layouts that fit in memory by predicted
// iteration time, then those that do not); --csv, --json and --report write the same rows
// (docs/scenarios.md, "Sweeps").
//
// The world stays the base scenario's: unless the grid names `ranks`, `parallel.dp` or a
// topology key, each layout runs on the base's ranks with `parallel.dp: auto`, so tp x cp x pp
// decide dp.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "app/run_summary.h"

namespace ranksim::app {

struct SweepOptions {
  std::string scenario;                 // a scenario file, or
  std::string megatron_args, topology;  // Megatron-LM's arguments on a topology (app/megatron_args.h)
  std::vector<std::string> sets;        // --set, applied to every layout
  std::vector<std::string> grid;        // KEY=V1,V2,...: the layouts are their product
  std::string csv, json, report;        // outputs; empty: not written
  bool progress_bar = false;            // redraw one progress line (a terminal) instead of a line per layout
};

// One layout of the grid.
struct SweepLayout {
  std::vector<std::string> values;  // per grid key, as given
  std::string error;                // not empty: the layout is invalid, and why
  int tp = 1, cp = 1, pp = 1, dp = 1, virtual_stages = 1;
  double iteration_s = 0, tokens_per_s_per_gpu = 0, tflops_per_gpu = 0, mfu = 0;
  std::uint64_t peak_bytes = 0, capacity_bytes = 0;  // the largest peak of any rank; the smallest capacity
  bool fits = true;                                  // every rank's peak within its device's memory
  double compute_s = 0;                              // mean per rank
  std::array<double, kCommDims> exposed_s{};         // mean per rank, by parallelism
};

// The grid's keys and values, each "KEY=V1,V2,...". Throws Error for a malformed item, a key
// given twice, or more than kMaxSweepLayouts layouts.
inline constexpr std::size_t kMaxSweepLayouts = 4096;
std::vector<std::pair<std::string, std::vector<std::string>>> parse_sweep_grid(const std::vector<std::string>& grid);

// Runs the sweep: the table to out, progress to err. Returns 0, or 2 when no layout is valid.
// Throws Error when the base scenario cannot be loaded or has no training section, or for an
// output that cannot be written (checked before any layout runs).
int sweep_layouts(const SweepOptions& o, std::ostream& out, std::ostream& err);

}  // namespace ranksim::app

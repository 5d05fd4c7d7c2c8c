// What one run of a scenario produced, in one value that the summary writers read: the text
// tables (summary_text.h), the JSON summary (summary_json.h) and the HTML report
// (summary_html.h). Internal to app/.
//
// The runners (workloads.h) fill it; group_collectives and evaluate_checks derive the per-call
// collective lines and the checks' verdicts from what the runners recorded, so every writer
// reports the same numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/bench.h"
#include "app/scenario.h"
#include "models/run.h"
#include "models/validation.h"
#include "runtime/distributed/schedule.h"
#include "runtime/distributed/spawn.h"
#include "sim/time.h"

namespace ranksim::app {

// The collectives of a run grouped by (op, group size, dtype, bytes, algorithm, group
// description), in first-seen order.
struct CollectiveLine {
  std::string op, dtype, algorithm;
  std::string desc;  // the group's description (new_group's group_desc), empty for unnamed groups
  int group_size = 0;
  int64_t bytes = 0;
  int64_t calls = 0;
  double seconds = 0;  // summed over calls (one record per call, member-latest times)

  double seconds_per_call() const { return seconds / static_cast<double>(calls); }
  // The busbw factor's collective kind (busbw_factor in nccl_table.h); broadcast's for ops
  // without one of their own.
  runtime::CollectiveKind kind() const;
};

struct CheckResult {
  std::string text;
  bool passed = false;
  std::string measured;
};

struct RunSummary {
  std::string backend;                // sim, mpi, nccl
  std::string device_kind;            // cpu, gpu, emulated
  sim::Time makespan;                 // virtual time (wall time on the mpi and nccl backends)
  std::vector<SweepRow> sweep;        // a collectives sweep
  runtime::RunReport report;          // steps and model workloads
  std::vector<CollectiveLine> lines;  // report's collectives, grouped
  // The model workload: rank 0's results, and each rank's time blocked in pipeline receives.
  models::TransformerDump model_dump;
  models::TrainResult train_result;
  std::vector<double> pipeline_wait;
  std::optional<models::ValidationReport> validation;
  std::vector<CheckResult> checks;  // validation's, then the scenario's checks
  bool passed = true;               // every check passed and no sweep result was wrong
};

std::vector<CollectiveLine> group_collectives(const runtime::RunReport& report);

// Fills summary.checks and summary.passed.
void evaluate_checks(const Scenario& sc, RunSummary& summary);

// "rank 5 needs 92.4 GiB of 80.0 GiB in layer 17 backward (after matmul_backward at 3.2 ms):
// activations 61.0, optimizer 16.2, ..." (GiB, largest first): a rank whose peak exceeds its
// device's memory.
std::string memory_overflow(int rank, const runtime::MemoryUse& m);
// When a rank's peak came: "in PHASE (after OP at T)", "after OP at T" with no phase, or "-".
std::string memory_peak_when(const runtime::MemoryUse& m);

// A rank's achieved FLOP rate (every FLOP it was charged, over the makespan) and its model FLOPs
// utilisation (its GEMM and attention FLOPs at its device's peak for their dtype, over the
// makespan; docs/compute.md). Zero for an empty run.

struct ComputeRates {
  double tflops = 0;
  double mfu = 0;
};
ComputeRates compute_rates(const runtime::ComputeBreakdown& c, sim::Time makespan);

// printf-style formatting of one number.
std::string fmt(const char* format, double v);

}  // namespace ranksim::app

// What one run of a scenario produced, in one value that the summary writers read: the text
// tables (summary_text.h), the JSON summary (summary_json.h) and the HTML report
// (summary_html.h). Internal to app/.
//
// The runners (workloads.h) fill it; group_collectives and evaluate_checks derive the per-call
// collective lines and the checks' verdicts from what the runners recorded, so every writer
// reports the same numbers.
#pragma once

#include <array>
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
  // With `faults:` that let the run finish (stragglers, degraded links): the same run's virtual
  // time without them, for the faults' effect.
  std::optional<sim::Time> without_faults;
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

// A training run's throughput as Megatron reports it (docs/models.md, "Throughput"): the
// iteration time (the makespan over the steps), tokens per second per GPU, model TFLOP/s per
// GPU and MFU against rank 0's device peak for the GEMMs' dtype (fp8 with model.fp8). Model
// FLOPs per step, Megatron-LM's formula generalised to sequences of any length:
//   12 l h^2 [ T ((1 + g/a) r + (F/h) m + V / (2 l h)) + c r (sum of len^2) / h ]
// (l layers, h hidden, a heads, g query groups, r = a d / h, F ffn, m = 3/2 with SwiGLU, V the
// padded vocabulary, T tokens, c = 1/2 with a causal mask as Megatron-Bridge counts it; windows
// are not counted). Recomputation adds none. Empty when the batch's lengths are not known (a
// batch file) or the run has no training section.
struct Throughput {
  double iteration_s = 0, tokens_per_step = 0, model_flops_per_step = 0;
  double tokens_per_s_per_gpu = 0, tflops_per_gpu = 0, mfu = 0;
  std::string peak_dtype;  // the peak MFU is taken against
  double peak_tflops = 0;
};
std::optional<Throughput> training_throughput(const Scenario& sc, const RunSummary& s);
double model_flops(const models::TransformerConfig& c, const std::vector<std::int64_t>& lengths, bool causal);

// Where the ranks' time went, by parallelism (docs/scenarios.md, "What a run shows"): each
// rank's exposed communication (time blocked waiting on it) by the dimension of the group it
// waited on, from RunReport::comm_by_group. A group named by a rank grid ("tp", "cp", "cp-dp",
// "pp"; cp.a2a and cp.p2p for hierarchical CP) counts for its outermost dimension: pp, then dp,
// then cp, then tp; other groups (the world, unnamed ones, a bridge's) count as "other". The
// pipeline's column holds its bubble and its activation transfers.
inline constexpr int kCommDims = 5;
inline constexpr const char* kCommDimNames[kCommDims] = {"tp", "cp", "dp", "pp", "other"};
int comm_dimension(const std::string& group_desc);  // index into kCommDimNames
struct TimeBreakdown {
  int first_rank = 0, last_rank = 0;  // the ranks averaged
  int stage = -1;                     // their pipeline stage; -1 when pp = 1
  double compute_s = 0, idle_s = 0;
  std::array<double, kCommDims> exposed_s{};
  // Communication that overlapped the rank's own work: its calls' time in flight (post to
  // completion, summed over calls) less the time it waited on them, by the same dimensions.
  std::array<double, kCommDims> overlapped_s{};
};
// One row per pipeline stage (every rank when pp = 1), each the mean of its ranks (the
// layout's order: tp fastest, pp slowest). Empty when the run recorded no communication by group
// (backends other than sim, sweeps).
std::vector<TimeBreakdown> time_breakdown(const Scenario& sc, const RunSummary& s);

// printf-style formatting of one number.
std::string fmt(const char* format, double v);

}  // namespace ranksim::app

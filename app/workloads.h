// The runners of a scenario's workloads, one per file: the collectives sweep (run_sweep.cpp),
// the steps workload of kernels, collectives and layers (run_steps.cpp) and the reference
// transformer (run_model.cpp). run_scenario (scenario_run.cpp) picks one, then hands the
// RunSummary to the writers. Internal to app/.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "app/model_workload.h"
#include "app/run_summary.h"
#include "app/scenario.h"
#include "runtime/distributed/spawn.h"

namespace ranksim::app {

// Runs rank(r) on every rank of the scenario's layout on flags.backend, over the scenario's
// topology; records a trace when `trace`. Shows a progress line on a terminal unless
// flags.quiet. Shared by the steps and model runners.
// The scenario's faults at virtual times (those at a step are the steps runner's), as spawn takes
// them.
runtime::FaultPlan fault_plan(const Scenario& sc);
runtime::RunReport spawn_scenario(const Scenario& sc, const RunFlags& flags, bool trace,
                                  const std::function<void(int)>& rank);

// workload.collectives: one nccl-tests sweep (sim backend only). REQUIRES: sc.sweep_op.
std::vector<SweepRow> run_sweep_workload(const Scenario& sc);

// workload.steps: `repeat` times the steps over the layout's groups.
runtime::RunReport run_steps_workload(const Scenario& sc, const RunFlags& flags, bool trace);

// model: one forward and backward, or training steps, of the reference transformer (with its
// encoder when given). Fills summary.report, model_dump or train_result, and pipeline_wait;
// returns the inputs, which validation reads again. REQUIRES: sc.model.
ModelInputs run_model_workload(const Scenario& sc, const RunFlags& flags, bool trace, RunSummary& summary);

// The model workload's files: its dump, checkpoint and shards, each named on out.
void write_model_outputs(const Scenario& sc, const RunSummary& summary, std::ostream& out);

}  // namespace ranksim::app

// The text summary that `ranksim run` prints, in the order it prints it: the run's header, the
// sweep table (nccl-tests' layout) or the per-rank and per-collective tables, the model
// workload's section, then the totals and the checks. Internal to app/.
#pragma once

#include <iosfwd>

#include "app/run_summary.h"
#include "app/scenario.h"
#include "runtime/device/device.h"
#include "sim/topology.h"

namespace ranksim::app {

// device: where ops compute; null when none was made.
void print_run_header(std::ostream& out, const Scenario& sc, const sim::Topology& topo, const runtime::Device* device);
void print_sweep_table(std::ostream& out, const Scenario& sc, const std::vector<SweepRow>& sweep);
// Time, compute, comm and idle per rank (the first 8 of a run over 16 ranks).
// Then print_compute_table.
void print_rank_table(std::ostream& out, const Scenario& sc, const RunSummary& s);
// Per rank (sim backend): compute by kernel class, achieved TFLOP/s and MFU; how kernels were
// timed, and the kernels the profile could not time from measurements. Nothing on other backends.
// Exposed communication by parallelism, one row per pipeline stage (time_breakdown); nothing
// when the run recorded none.
void print_breakdown_table(std::ostream& out, const Scenario& sc, const RunSummary& s);
void print_compute_table(std::ostream& out, const Scenario& sc, const RunSummary& s);
// Per rank (sim backend): the peak of device memory, the capacity, what the peak held by kind, and
// the op run last before it.
void print_memory_table(std::ostream& out, const Scenario& sc, const RunSummary& s);
void print_collectives_table(std::ostream& out, const RunSummary& s);
// REQUIRES: sc.model.
void print_model_section(std::ostream& out, const Scenario& sc, const RunSummary& s);
// The run's time (virtual, or wall on a real backend), the device's counters, the checks.
// The injected faults (`faults:`) and their effect on the virtual time; nothing without faults.
void print_faults(std::ostream& out, const Scenario& sc, const RunSummary& s);
void print_totals(std::ostream& out, const RunSummary& s, bool wall_time, runtime::Device* device);

}  // namespace ranksim::app

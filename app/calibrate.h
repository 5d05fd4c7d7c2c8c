// `ranksim calibrate`: fits a topology's collective-timing constants (sim/collective_model.h) to
// measured nccl-tests tables, by least squares on log time, and writes the calibrated topology.
//
// What is fitted is what the tables can tell apart: a fixed per-call overhead always; the fabric's
// efficiency and hop latency when a table has several ranks on a node (the protocols' different
// hop latencies and the tables' hop counts tell the hop latency from the fixed overhead); the
// network's efficiency and hop latency when a table spans nodes; the NVLS efficiency and latency
// when the topology has NVLS and a default-algorithm all_reduce runs
// on one node; the all-to-all efficiency when a table is all_to_all. Everything else (NCCL's base
// latencies, protocol factors, the hardware's bandwidths) stays as the topology has it.
//
// The prediction of a row is what `ranksim bench collectives` prints for it: the device's launch
// overhead plus the model's time, on the first `ranks` devices of the topology; for a table run by
// one thread driving G GPUs (nccl-tests -g G), at least G x the topology's group_launch (fitted
// too when such a table is given).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "app/nccl_tests_input.h"
#include "sim/collective_model.h"
#include "sim/topology.h"

namespace ranksim::app {

struct CalibrateOptions {
  std::string topology;            // topology YAML
  std::vector<std::string> sets;   // its --set overrides
  int ranks = 0;                   // ranks of every table; 0: each table's own (required somewhere)
  std::string op;                  // the collective when a file does not name it
  std::string algorithm;           // NCCL_ALGO of the runs when the files do not say ("" = auto)
  std::string protocol = "auto";   // NCCL_PROTO of the runs
  std::string output;              // the calibrated topology YAML; "" with check_only
  std::vector<std::string> files;  // nccl-tests outputs
  bool check_only = false;         // compare only: no fit, no output
  // "MIN:MAX": only the rows whose size is within [MIN, MAX] are compared and fitted; either end
  // may be left out ("1MiB:" keeps 1 MiB and up). "": every row.
  std::string sizes;
  // The constants to fit (names in the collectives section); empty: every one the tables can
  // tell apart. A name the tables cannot inform is an Error.
  std::vector<std::string> fit;
  // After the fit, refit once without each table and predict it (leave_one_out): how well the
  // constants carry to a table they were not fitted to. Needs two or more tables.
  bool leave_one_out = false;
  // Time each row with the algorithm and protocol NCCL ran it with, as the log's tuning messages
  // say (MeasuredRow::nccl), not with the model's choice: fits the timing apart from the choice.
  // Rows the messages do not name (or name several ways) keep the model's choice. Needs a table
  // with such messages.
  bool nccl_choice = false;
};

// Runs the command: prints the tables and writes options.output. Returns 0. Throws ranksim::Error
// for bad input (nothing written).
int calibrate(const CalibrateOptions& options, std::ostream& out);

// One measured table, as the model sees it.
struct FitCase {
  std::string name;
  sim::CollectiveShape shape;  // bytes ignored: each row's size
  std::optional<sim::CollAlgo> algorithm;
  std::optional<sim::Protocol> protocol;
  // NCCL_ALGO / NCCL_PROTO lists the runs set (sim::is_nccl_list): the model's choice is
  // made among what they allow, and `algorithm` is the one algorithm they allow, if they allow one.
  std::optional<sim::NcclAllowed> allowed;
  int gpus_per_thread = 1;  // one thread drove this many GPUs (nccl-tests -g): see group_launch
  std::vector<MeasuredRow> rows;
  bool as_nccl_chose = false;  // rows NCCL's messages name are timed as NCCL ran them (nccl_choice)
};

// A fitted constant: its name in the topology's `collectives` section.
struct FitResult {
  sim::CollectiveTiming constants;
  std::vector<std::string> fitted;
  double rms_log_error = 0;  // root mean square of ln(predicted / measured), tables weighted equally
};

// The model's choice for a row of shape `s` of the case: among what its lists allow, or its forced
// algorithm and protocol.
sim::CollectiveEstimate choose_for(const sim::CollectiveModel& model, const FitCase& c, const sim::CollectiveShape& s);
// The predicted seconds of one row: launch overhead + the model's choice for the case, or, when one
// thread drove several GPUs, the thread's issue time (gpus_per_thread x group_launch) if longer.
double predict_row(const sim::CollectiveModel& model, const FitCase& c, double bytes, double launch_seconds);
// What a row is timed with: NCCL's own choice for it when the case is timed as NCCL chose and the
// log names one choice for its size, else the model's choice (choose_for). Throws ranksim::Error
// when the model cannot run NCCL's choice on the topology.
sim::CollectiveEstimate estimate_row(const sim::CollectiveModel& model, const FitCase& c, const MeasuredRow& row);
// predict_row for a measured row: estimate_row's time, as measured.
double predict_row(const sim::CollectiveModel& model, const FitCase& c, const MeasuredRow& row, double launch_seconds);
// What a run of the case takes when the GPUs take `seconds` (launch overhead included).
double as_measured(const FitCase& c, const sim::CollectiveTiming& constants, double seconds);

// The constants fit_collectives can fit, in the order it reports them (`--fit` takes these).
// simple_latency, channel_network_bandwidth, nvls_tree_network_efficiency, peer_latency,
// message_latency, ll_net_overhead, ring_loop_gap and p2p_channel_network_bandwidth are fitted
// only when named.
const std::vector<std::string>& fit_constant_names();

// Fits the constants of `topology` (with `start` as the starting point) to the cases.
// only: restrict the fit to these constants (empty: all that the cases inform); throws Error for
// a name that is not a constant or that the cases do not inform, unless `held` is given: then such
// a name stays at its value in `start` and is appended to *held.
FitResult fit_collectives(const sim::Topology& topology, const sim::CollectiveTiming& start,
                          const std::vector<FitCase>& cases, const std::vector<std::string>& only = {},
                          std::vector<std::string>* held = nullptr);

// The geometric-mean errors of a case's rows from 1 MiB up and below (nullopt: no such rows) under
// the constants.
struct CaseError {
  std::optional<double> big, small;
};
CaseError case_errors(const sim::Topology& topology, const sim::CollectiveTiming& constants, const FitCase& c);

// One table left out of a fit: its errors under the fit to every table, and under the fit to the
// others (the same constants as `all` fitted; those the others do not inform held at their value
// in `start`, named in `held`).
struct LeftOut {
  CaseError fitted, left_out;
  std::vector<std::string> held;
};
// Refits the constants of `all` once without each case, from `start`, and predicts the case left
// out. Throws Error for fewer than two cases.
std::vector<LeftOut> leave_one_out(const sim::Topology& topology, const sim::CollectiveTiming& start,
                                   const std::vector<FitCase>& cases, const FitResult& all);

// exp(mean |ln(predicted / measured)|) - 1 over the pairs: the geometric-mean error.
double geomean_error(const std::vector<std::pair<double, double>>& predicted_measured);

}  // namespace ranksim::app

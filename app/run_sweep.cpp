#include "app/workloads.h"

namespace ranksim::app {

std::vector<SweepRow> run_sweep_workload(const Scenario& sc) {
  SweepRequest req;
  req.op = *sc.sweep_op;
  req.ranks = sc.ranks;
  req.sizes = sc.sweep_sizes;
  req.algorithm = sc.algorithm;
  req.protocol = sc.protocol;
  req.dtype = sc.sweep_dtype;
  req.check = sc.real_data;
  return run_sweep(*sc.topology, req);
}

}  // namespace ranksim::app

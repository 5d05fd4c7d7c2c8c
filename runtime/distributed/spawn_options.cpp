#include "runtime/distributed/spawn_options.h"

#include <string>

#include "sim/error.h"

namespace ranksim::runtime {

const char* to_string(BackendKind backend) {
  return backend == BackendKind::mpi ? "mpi" : backend == BackendKind::nccl ? "nccl" : "sim";
}

BackendKind parse_backend(std::string_view name) {
  if (name == "sim") return BackendKind::sim;
  if (name == "mpi") return BackendKind::mpi;
  if (name == "nccl") return BackendKind::nccl;
  throw Error("unknown backend '" + std::string(name) + "'; use sim, mpi or nccl");
}

void check_fault_backend(const FaultPlan& plan, BackendKind backend) {
  if (!plan.empty() && backend != BackendKind::sim)
    throw Error(std::string("injected faults at virtual times run on the sim backend only, not on ") +
                to_string(backend) + "; run without --backend, or drop the faults");
}

}  // namespace ranksim::runtime

#include "runtime/distributed/backends/registry.h"

#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/backends/sim/sim_backend.h"

namespace ranksim::runtime::detail {

Launcher launcher(BackendKind kind) {
  switch (kind) {
    case BackendKind::sim:
      return &spawn_sim;
    case BackendKind::mpi:
    case BackendKind::nccl:
      return &spawn_mpi;
  }
  return &spawn_sim;  // not reached: every kind is listed above
}

}  // namespace ranksim::runtime::detail

// How long a process backend (mpi, nccl) waits for its peers in a blocked collective or receive
// before it declares the run hung: RANKSIM_COLLECTIVE_TIMEOUT seconds (default 600, as
// torch.distributed's NCCL default; 0 waits forever). Throws Error when the variable is not a
// number of seconds. Defined with the mpi backend (backends/mpi/mpi_process.cpp), which both
// process backends are built on.
#pragma once

namespace ranksim::runtime::detail {

double collective_timeout();

}  // namespace ranksim::runtime::detail

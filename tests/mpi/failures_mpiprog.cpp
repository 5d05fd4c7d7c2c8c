// Programs that must fail under mpirun, promptly and with the failing rank's message; driven by
// tests/mpi/expect_failure.sh, which checks the exit code, the message and the time taken.
//   throw     rank 1 throws while the others wait in a collective it never joins
//   mismatch  rank 0 all-reduces f32, the others bf16
//   p2p       rank 0 sends 8 floats, rank 1 receives 4
//   size      spawn asks for one more rank than the job has
//   hang      rank 1 skips a collective the others wait in (run with RANKSIM_COLLECTIVE_TIMEOUT)
//   p2p_hang  rank 0 receives from rank 1, which never sends (likewise)
#include <cstdio>
#include <stdexcept>
#include <string>

#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"

using namespace ranksim::runtime;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "mismatch" && mode != "p2p" && mode != "size" && mode != "hang" &&
      mode != "p2p_hang") {
    std::fprintf(stderr, "usage: %s throw|mismatch|p2p|size|hang|p2p_hang (under mpirun)\n", argv[0]);
    return 2;
  }
  try {
    SpawnOptions so;
    so.backend = BackendKind::mpi;
    const int n = mpi::world_size();
    spawn(
        [&](int rank) {
          if (mode == "throw") {
            all_reduce(Tensor::ones({4}));
            if (rank == 1) throw std::runtime_error("rank one gives up");
            all_reduce(Tensor::ones({4}));
          } else if (mode == "mismatch") {
            all_reduce(Tensor::ones({16}, rank == 0 ? DType::f32 : DType::bf16));
          } else if (mode == "p2p") {
            if (rank == 0) send(Tensor::ones({8}), 1);
            if (rank == 1) recv(Tensor::zeros({4}), 0);
          } else if (mode == "hang") {
            if (rank != 1) all_reduce(Tensor::ones({4}));
          } else if (mode == "p2p_hang") {
            if (rank == 0) recv(Tensor::zeros({4}), 1);
          }
        },
        mode == "size" ? n + 1 : n, so);
  } catch (const ranksim::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  std::printf("no failure\n");
  return 0;
}

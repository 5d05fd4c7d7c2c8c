// Programs that must fail under mpirun, promptly and with the failing rank's message; driven by
// tests/mpi/expect_failure.sh, which checks the exit code, the message and the time taken.
//   throw     rank 1 throws while the others wait in a collective it never joins
//   mismatch  rank 0 all-reduces f32, the others bf16
//   p2p       rank 0 sends 8 floats, rank 1 receives 4
//   size      spawn asks for one more rank than the job has
//   hang      rank 1 skips a collective the others wait in (run with RANKSIM_COLLECTIVE_TIMEOUT)
//   p2p_hang  rank 0 receives from rank 1, which never sends (likewise)
// A second argument `nccl` runs throw and hang on the nccl backend with the ops on each process's
// GPU (label gpu); it exits 77 (ctest's skip) unless the node has a GPU for every process.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "app/devices.h"
#include "runtime/device/device.h"
#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#if RANKSIM_HAVE_NCCL_BACKEND
#include "runtime/device/cuda/cuda.h"
#include "runtime/distributed/backends/nccl/nccl_collectives.h"
#endif

using namespace ranksim::runtime;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "throw" && mode != "mismatch" && mode != "p2p" && mode != "size" && mode != "hang" &&
      mode != "p2p_hang") {
    std::fprintf(stderr, "usage: %s throw|mismatch|p2p|size|hang|p2p_hang (under mpirun)\n", argv[0]);
    return 2;
  }
  const bool nccl = argc > 2 && std::string(argv[2]) == "nccl";
  std::shared_ptr<Device> device;
  try {
    SpawnOptions so;
    so.backend = BackendKind::mpi;
    const int n = mpi::world_size();
    if (nccl) {
#if RANKSIM_HAVE_NCCL_BACKEND
      MPI_Comm node = MPI_COMM_NULL;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      int local = 1;
      MPI_Comm_size(node, &local);
      MPI_Comm_free(&node);
      const int gpus = gpu::device_info().count;
      if (gpus < local) {
        std::printf("skip: the nccl backend needs a GPU per process: %d process(es) on this node, %d GPU(s)\n", local,
                    gpus);
        return 77;
      }
      so.backend = BackendKind::nccl;
      so.device_collectives = gpu::nccl_collectives;
      device = ranksim::app::make_device("gpu");
#else
      std::printf("skip: built without the nccl backend\n");
      return 77;
#endif
    }
    const ScopedComputeDevice on(device);
    spawn(
        [&](int rank) {
          if (mode == "throw") {
            const Tensor t = add(Tensor::ones({4}), Tensor::ones({4}));  // on the GPU with nccl
            all_reduce(t);
            if (rank == 1) throw std::runtime_error("rank one gives up");
            all_reduce(t);
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

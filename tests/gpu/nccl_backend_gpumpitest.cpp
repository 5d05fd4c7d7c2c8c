// The nccl backend end to end, under mpirun (label `gpu`): the same programs as the sim backend,
// their collectives through NCCL on each process's GPU. Results equal sim's exactly where no
// reduction order enters (gathers, scatters, broadcasts, all-to-all, integer-valued sums) and to
// fp32 rounding elsewhere. Without a GPU in every process the device tests skip, saying why,
// and the backend's own error is checked instead.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <string>
#include <vector>

#include "app/devices.h"
#include "mpi/compare.h"
#include "runtime/device/cuda/cuda.h"
#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/backends/nccl/nccl_collectives.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/mlp.h"

namespace ranksim::runtime {
namespace {

using mpitest::Bytes;
using mpitest::Program;
using mpitest::run_on;
using ::testing::HasSubstr;

// Processes of this job on this node (one node's processes see the same devices).
int processes_on_this_node() {
  mpi::init();
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

// NCCL refuses two ranks of one communicator on one GPU: the device tests need a GPU for every
// process on the node (all ranks agree: they see the same devices).
bool every_process_has_a_gpu() {
  const int gpus = gpu::device_info().count;
  return gpus > 0 && gpus >= processes_on_this_node();
}

#define REQUIRE_GPU_PER_PROCESS()                                                                      \
  do {                                                                                                 \
    if (!every_process_has_a_gpu()) {                                                                  \
      GTEST_SKIP() << "the nccl backend needs a CUDA device per process: " << processes_on_this_node() \
                   << " process(es) on this node, " << gpu::device_info().count << " GPU(s) "          \
                   << gpu::device_info().reason;                                                       \
    }                                                                                                  \
  } while (0)

TEST(NcclBackend, WithoutAGpuTheBackendSaysSoOnEveryRank) {
  if (gpu::device_info().count > 0) GTEST_SKIP() << "this machine has GPUs: the device tests run instead";
  SpawnOptions so;
  so.backend = BackendKind::nccl;
  so.device_collectives = gpu::nccl_collectives;
  EXPECT_THAT([&] { spawn([](int) {}, mpi::world_size(), so); },
              ::testing::ThrowsMessage<Error>(HasSubstr("needs a CUDA device in every process")));
}

TEST(NcclBackend, MoreProcessesThanGpusIsAClearError) {
  const int gpus = gpu::device_info().count;
  if (gpus == 0 || gpus >= processes_on_this_node()) {
    GTEST_SKIP() << "needs fewer GPUs than processes on this node, and at least one (" << gpus << " GPU(s), "
                 << processes_on_this_node() << " process(es))";
  }
  SpawnOptions so;
  so.backend = BackendKind::nccl;
  so.device_collectives = gpu::nccl_collectives;
  EXPECT_THAT([&] { spawn([](int) {}, mpi::world_size(), so); },
              ::testing::ThrowsMessage<Error>(HasSubstr("needs one GPU per process")));
}

// Exact: data movement and sums of small integers.
TEST(NcclBackend, DataMovementEqualsSimBitForBit) {
  REQUIRE_GPU_PER_PROCESS();
  const Program program = [](int rank, std::vector<Bytes>& out) {
    const int n = get_world_size();
    Tensor t = Tensor::full({1000}, rank + 1);
    all_reduce(t);
    out.push_back(mpitest::bytes_of(t));
    Tensor g = Tensor::zeros({n * 7}, DType::bf16);
    all_gather_into_tensor(g, Tensor::full({7}, 3 * rank, DType::bf16));
    out.push_back(mpitest::bytes_of(g));
    Tensor rs = Tensor::zeros({5}, DType::i64);
    reduce_scatter_tensor(rs, Tensor::arange(5 * n, DType::i64));
    out.push_back(mpitest::bytes_of(rs));
    Tensor b = Tensor::full({9}, rank, DType::f64);
    BroadcastOptions bo;
    bo.src = n - 1;
    broadcast(b, bo);
    out.push_back(mpitest::bytes_of(b));
    // uneven all-to-all: rank r sends j + 1 rows to rank j, receives r + 1 rows from each
    std::vector<int64_t> in_split, out_split(static_cast<size_t>(n), rank + 1);
    int64_t rows = 0;
    for (int j = 0; j < n; ++j) {
      in_split.push_back(j + 1);
      rows += j + 1;
    }
    Tensor in = Tensor::arange(rows * 3, DType::f32).reshape({rows, 3});
    Tensor o = Tensor::zeros({(rank + 1) * n, 3});
    AllToAllOptions ao;
    ao.input_split_sizes = in_split;
    ao.output_split_sizes = out_split;
    all_to_all_single(o, in, ao);
    out.push_back(mpitest::bytes_of(o));
    std::vector<Tensor> list;
    for (int i = 0; i < n; ++i) list.push_back(Tensor::zeros({4}));
    GatherOptions go;
    go.dst = 0;
    gather(Tensor::full({4}, 10 + rank), rank == 0 ? list : std::vector<Tensor>{}, go);
    if (rank == 0)
      for (const Tensor& x : list) out.push_back(mpitest::bytes_of(x));
    Tensor piece = Tensor::zeros({4});
    std::vector<Tensor> parts;
    for (int i = 0; i < n; ++i) parts.push_back(Tensor::full({4}, 100 + i));
    ScatterOptions so;
    so.src = 0;
    scatter(piece, rank == 0 ? parts : std::vector<Tensor>{}, so);
    out.push_back(mpitest::bytes_of(piece));
  };
  const int me = mpi::world_rank();
  SpawnOptions so;
  so.device_collectives = gpu::nccl_collectives;
  const auto want = run_on(BackendKind::sim, program, so);
  const auto got = run_on(BackendKind::nccl, program, so);
  ASSERT_EQ(got[static_cast<size_t>(me)].size(), want[static_cast<size_t>(me)].size());
  for (size_t k = 0; k < want[static_cast<size_t>(me)].size(); ++k) {
    EXPECT_TRUE(got[static_cast<size_t>(me)][k] == want[static_cast<size_t>(me)][k])
        << "rank " << me << " output " << k;
  }
}

// The default path (--backend nccl --device gpu): a tensor the GPU wrote goes through sync and
// async collectives and on to the next kernel without crossing to the host, and the host reads
// the right values at the end.
TEST(NcclBackend, InPlaceCollectivesKeepTensorsOnTheGpu) {
  REQUIRE_GPU_PER_PROCESS();
  const std::shared_ptr<Device> dev = app::make_device("gpu");
  const ScopedComputeDevice on(dev);
  SpawnOptions so;
  so.backend = BackendKind::nccl;
  so.device_collectives = gpu::nccl_collectives;
  const int n = mpi::world_size();
  std::vector<float> got;
  DeviceStats before{}, after{};
  spawn(
      [&](int rank) {
        const Tensor x = Tensor::full({4096}, 0.25 * (rank + 1));
        Tensor y = add(x, x);  // on the GPU: 0.5 (rank + 1)
        dev->synchronize();
        before = dev->stats();
        all_reduce(y);  // sum: 0.25 n (n + 1)
        AllreduceOptions async;
        async.async_op = true;
        Work w = all_reduce(y, async);  // x n
        w.wait();
        Tensor z = add(y, y);  // the next kernel reads the device copy
        after = dev->stats();
        got = z.to_vector<float>();
      },
      n, so);
  EXPECT_EQ(after.downloads - before.downloads, 0) << "a collective downloaded its tensor";
  EXPECT_EQ(after.uploads - before.uploads, 0) << "a result went through the host";
  ASSERT_EQ(got.size(), 4096u);
  const float want = 2.0f * 0.25f * static_cast<float>(n * (n + 1)) * static_cast<float>(n);
  for (float v : got) ASSERT_EQ(v, want);
}

// Rounding: the TP MLP's all-reduces in f32, against sim to fp32 rounding.
TEST(NcclBackend, TensorParallelMlpMatchesSimToFp32Rounding) {
  REQUIRE_GPU_PER_PROCESS();
  std::vector<std::vector<float>> ys(2);
  for (int pass = 0; pass < 2; ++pass) {
    SpawnOptions so;
    so.backend = pass == 0 ? BackendKind::sim : BackendKind::nccl;
    so.device_collectives = gpu::nccl_collectives;
    so.engine.trace = false;
    const int n = mpi::world_size();
    spawn(
        [&](int rank) {
          tp::ParallelMLP mlp = tp::ParallelMLP::seeded(64, 256, 7, ProcessGroup{});
          tp::MLPContext ctx;
          const Tensor y = mlp.forward(Tensor::uniform({16, 64}, 3, -1, 1), ctx);
          if (rank == mpi::world_rank()) ys[static_cast<size_t>(pass)] = y.to_vector<float>();
        },
        n, so);
  }
  ASSERT_EQ(ys[0].size(), ys[1].size());
  for (size_t i = 0; i < ys[0].size(); ++i) EXPECT_NEAR(ys[1][i], ys[0][i], 1e-5 * (1 + std::abs(ys[0][i]))) << i;
}

}  // namespace
}  // namespace ranksim::runtime

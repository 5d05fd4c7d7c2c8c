// Benchmarks of the collectives runtime (issue #3 targets, on this 2-core machine):
// - ring all-reduce of 64 Ki f32 per rank on 1,024 ranks of h100-cluster (128 nodes), real data:
//   < 1 s and < 1 GiB peak;
// - shape-only all-reduce on 16,384 ranks (2,048 nodes), algorithm of choice (tree): < 5 s;
// - reduction arithmetic at >= half of memcpy bandwidth.
// Issue #20: a shape-only ring all-reduce on 16,384 ranks timed as a schedule on the network
// (collectives.model: schedule): memory linear in the ranks (< 1 GiB; its schedule would hold
// 5e8 moves, about 20 GB).
// Issue #20 too: a shape-only hierarchical all_gather on 16,384 ranks (schedule model; its
// schedule's moves grow as ranks x nodes) and an even all_to_all on 16,384 ranks (nccl model; its
// table of split sizes was ranks^2): each < 1 GiB.
// Issue #16: `ranksim bench collectives` at 1,024 ranks over 128 nodes of h100-cluster (the nccl
// timing model), shape-only, 64 sizes: < 10 s.
#include <benchmark/benchmark.h>

#include "peak_rss.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "app/bench.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/reduce.h"
#include "runtime/distributed/spawn.h"
#include "sim/topology.h"

namespace {

using namespace ranksim;

using ranksim::bench::peak_rss_mib;
using ranksim::bench::reset_peak_rss;

sim::Topology cluster(int nodes, const std::string& model = "nccl") {
  return sim::Topology::load_file(std::string(RANKSIM_SOURCE_DIR) + "/topologies/h100-cluster.yaml",
                                  {"nodes=" + std::to_string(nodes), "collectives.model=" + model});
}

void run_all_reduce(benchmark::State& state, int nodes, int ranks, int64_t count, bool data, runtime::Algorithm algo,
                    const std::string& model = "nccl") {
  const sim::Topology topo = cluster(nodes, model);
  double peak = 0, virt = 0;
  for (auto _ : state) {
    reset_peak_rss();
    runtime::SpawnOptions so;
    so.topology = &topo;
    so.engine.trace = false;
    so.engine.stack.size = 32 * 1024;
    const runtime::RunReport rep = runtime::spawn(
        [&](int rank) {
          runtime::Tensor t = data ? runtime::Tensor::full({count}, rank % 7) : runtime::Tensor::shape_only({count});
          runtime::AllreduceOptions o;
          o.algorithm = algo;
          runtime::all_reduce(t, o);
        },
        ranks, so);
    virt = rep.makespan.seconds() * 1e6;
    peak = peak_rss_mib();
  }
  state.counters["peak_rss_MiB"] = peak;
  state.counters["virtual_us"] = virt;
}

void BM_RingAllReduce1024RanksRealData(benchmark::State& state) {
  run_all_reduce(state, 128, 1024, 64 * 1024, true, runtime::Algorithm::ring);
}
BENCHMARK(BM_RingAllReduce1024RanksRealData)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_ShapeOnlyAllReduce16384Ranks(benchmark::State& state) {
  run_all_reduce(state, 2048, 16384, 64 * 1024, false, runtime::Algorithm::tree);
}
BENCHMARK(BM_ShapeOnlyAllReduce16384Ranks)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_ShapeOnlyRingAllReduce16384RanksScheduleModel(benchmark::State& state) {
  run_all_reduce(state, 2048, 16384, 256 * 1024, false, runtime::Algorithm::ring, "schedule");
}
BENCHMARK(BM_ShapeOnlyRingAllReduce16384RanksScheduleModel)->Unit(benchmark::kMillisecond)->Iterations(1);

// One size of `ranksim bench collectives` (shape-only) on 16,384 ranks of 2,048 nodes.
void run_sweep_16384(benchmark::State& state, const std::string& op, const std::string& algo,
                     const std::string& model) {
  const sim::Topology topo = cluster(2048, model);
  app::SweepRequest req;
  req.op = op;
  req.algorithm = algo;
  req.ranks = 16384;
  req.sizes = {1 << 20};
  double peak = 0, virt = 0;
  for (auto _ : state) {
    reset_peak_rss();
    const std::vector<app::SweepRow> rows = app::run_sweep(topo, req);
    virt = rows.back().seconds * 1e6;
    peak = peak_rss_mib();
  }
  state.counters["peak_rss_MiB"] = peak;
  state.counters["virtual_us"] = virt;
}

void BM_ShapeOnlyHierarchicalAllGather16384RanksScheduleModel(benchmark::State& state) {
  run_sweep_16384(state, "all_gather", "hierarchical", "schedule");
}
BENCHMARK(BM_ShapeOnlyHierarchicalAllGather16384RanksScheduleModel)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_ShapeOnlyAllToAll16384Ranks(benchmark::State& state) { run_sweep_16384(state, "all_to_all", "auto", "nccl"); }
BENCHMARK(BM_ShapeOnlyAllToAll16384Ranks)->Unit(benchmark::kMillisecond)->Iterations(1);

// Bytes touched per second by the f32 SUM kernel (reads dst and src, writes dst), against memcpy
// (reads src, writes dst) on the same 64 MiB buffers.
// The bench command's own sweep: 64 sizes from 8 B, each 1.5x the last (8 B to ~1.1 TB), one
// spawn of 1,024 shape-only ranks per size.
void BM_NcclSweep1024Ranks64Sizes(benchmark::State& state) {
  const sim::Topology topo = cluster(128);
  app::SweepRequest req;
  req.ranks = 1024;
  double s = 8;
  for (int i = 0; i < 64; ++i, s *= 1.5) req.sizes.push_back(static_cast<int64_t>(s));
  double last_us = 0;
  for (auto _ : state) {
    const std::vector<app::SweepRow> rows = app::run_sweep(topo, req);
    last_us = rows.back().seconds * 1e6;
    benchmark::DoNotOptimize(rows.data());
  }
  state.counters["largest_virtual_us"] = last_us;
}
BENCHMARK(BM_NcclSweep1024Ranks64Sizes)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_ReduceKernelF32Sum(benchmark::State& state) {
  const size_t n = 16 << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  const auto k = runtime::reduce_kernel(runtime::DType::f32, runtime::ReduceOp::SUM);
  for (auto _ : state) {
    k(reinterpret_cast<std::byte*>(a.data()), reinterpret_cast<const std::byte*>(b.data()), static_cast<int64_t>(n));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(3 * n * sizeof(float)));
}
BENCHMARK(BM_ReduceKernelF32Sum)->Unit(benchmark::kMillisecond);

void BM_ReduceKernelBF16Sum(benchmark::State& state) {
  const size_t n = 16 << 20;
  std::vector<uint16_t> a(n, 0x3F80), b(n, 0x4000);
  const auto k = runtime::reduce_kernel(runtime::DType::bf16, runtime::ReduceOp::SUM);
  for (auto _ : state) {
    k(reinterpret_cast<std::byte*>(a.data()), reinterpret_cast<const std::byte*>(b.data()), static_cast<int64_t>(n));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(3 * n * sizeof(uint16_t)));
}
BENCHMARK(BM_ReduceKernelBF16Sum)->Unit(benchmark::kMillisecond);

void BM_Memcpy(benchmark::State& state) {
  const size_t n = 16 << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  for (auto _ : state) {
    std::memcpy(a.data(), b.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * n * sizeof(float)));
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

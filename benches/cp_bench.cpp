// Context-parallel attention benchmarks (issue #5):
// - BM_RingAttentionRealData/S: the p2p ring, forward + backward, causal BSHD, b = 1, 16 heads of
//   64, bf16, cp = 8, real numbers: wall time on this machine (one core does all eight ranks'
//   kernels). The default runs S = 2048; RANKSIM_CP_BENCH_FULL=1 adds S = 16384 (minutes).
// - BM_ShapeOnly/comm/S: the same problem in shape-only mode on topologies/dgx-h100.yaml, for each
//   comm type: the virtual time of forward + backward (counter virtual_ms) from the timing model.
// `cp_bench --markdown-table` prints the comm-type table of docs/cp.md instead of benchmarking.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cp/context_parallel.h"
#include "cp/partition.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/topology.h"

namespace {

using namespace ranksim;
using cp::CommType;
using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;

constexpr int kCp = 8;
constexpr i64 kHeads = 16, kDim = 64;

struct Outcome {
  double virtual_ms = 0;
  double compute_ms = 0;  // rank 0's time charged to compute
};

// Forward + backward of causal attention over one sequence of length S on cp ranks (the whole
// world); a2a+p2p splits cp as [a2a, cp/a2a].
Outcome run(CommType comm, i64 S, bool data, const sim::Topology* topo, int cp = kCp, int a2a = 2) {
  cp::CpOptions opts;
  opts.comm_type = comm;
  opts.attention.causal = true;
  const cp::SequenceLayout layout = cp::SequenceLayout::bshd(1, S);
  const runtime::Shape shape{1, S / cp, kHeads, kDim};
  runtime::SpawnOptions so;
  so.topology = topo;
  so.engine.trace = false;
  const runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        auto input = [&](std::uint64_t seed) {
          return data ? Tensor::uniform(shape, seed * 131 + std::uint64_t(rank), -1.0, 1.0, DType::bf16)
                      : Tensor::shape_only(shape, DType::bf16);
        };
        std::vector<int> all(static_cast<std::size_t>(cp));
        for (int i = 0; i < cp; ++i) all[static_cast<std::size_t>(i)] = i;
        const runtime::ProcessGroup world = runtime::new_group(all);
        const cp::CpGroups groups =
            comm == CommType::a2a_p2p ? cp::hierarchical_cp_groups(world, a2a, cp / a2a) : cp::CpGroups(world);
        const cp::CpForwardResult f = cp::attention_with_cp_forward(input(1), input(2), input(3), layout, groups, opts);
        const cp::CpGrads g = cp::attention_with_cp_backward(input(4), f.ctx);
        benchmark::DoNotOptimize(g.dq);
      },
      cp, so);
  return Outcome{rep.makespan.seconds() * 1e3, rep.compute[0].seconds() * 1e3};
}

sim::Topology dgx(int nodes = 1) {
  return sim::Topology::load_file(std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml",
                                  {"nodes=" + std::to_string(nodes)});
}

void BM_RingAttentionRealData(benchmark::State& state) {
  const i64 S = state.range(0);
  Outcome o;
  for (auto _ : state) o = run(CommType::p2p, S, true, nullptr);
  // Causal: about S^2/2 visible pairs; forward 2*P*h*(d+d), backward 2*P*h*(3d+2d).
  const double pairs = double(S) * double(S + 1) / 2.0;
  state.counters["GFLOP"] = 2.0 * pairs * kHeads * (2 * kDim + 5 * kDim) / 1e9;
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * pairs * kHeads * (7 * kDim), benchmark::Counter::kIsIterationInvariantRate);
}

const CommType kAll[] = {CommType::p2p, CommType::all_gather, CommType::a2a, CommType::a2a_p2p};

void BM_ShapeOnly(benchmark::State& state) {
  const sim::Topology topo = dgx();
  const CommType comm = kAll[state.range(0)];
  state.SetLabel(cp::comm_type_name(comm));
  Outcome o;
  for (auto _ : state) o = run(comm, state.range(1), false, &topo);
  state.counters["virtual_ms"] = o.virtual_ms;
}

const std::vector<i64> kLengths = {4096, 8192, 16384, 32768, 65536, 131072, 262144};

// One row per sequence length: the virtual forward + backward time of each comm type (a2a+p2p
// once per listed a2a size), and the fastest.
void print_table(int nodes, int cp, const std::vector<int>& a2a_sizes) {
  const sim::Topology topo = dgx(nodes);
  std::printf("\ncp = %d on %d DGX H100 node(s); virtual ms, forward + backward\n\n", cp, nodes);
  std::printf("| sequence | p2p | all_gather | a2a |");
  for (int a : a2a_sizes) std::printf(" a2a+p2p [%d, %d] |", a, cp / a);
  std::printf(" fastest |\n|---:|---:|---:|---:|");
  for (std::size_t i = 0; i < a2a_sizes.size(); ++i) std::printf("---:|");
  std::printf("---|\n");
  for (i64 S : kLengths) {
    std::printf("| %lldk |", static_cast<long long>(S / 1024));
    double best = 0;
    std::string winner;
    auto take = [&](double ms, const std::string& name) {
      std::printf(" %.3f |", ms);
      if (winner.empty() || ms < best) {
        best = ms;
        winner = name;
      }
    };
    for (CommType c : {CommType::p2p, CommType::all_gather, CommType::a2a}) {
      take(run(c, S, false, &topo, cp).virtual_ms, cp::comm_type_name(c));
    }
    for (int a : a2a_sizes) {
      take(run(CommType::a2a_p2p, S, false, &topo, cp, a).virtual_ms,
           "a2a+p2p [" + std::to_string(a) + ", " + std::to_string(cp / a) + "]");
    }
    std::printf(" %s |\n", winner.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--markdown-table") == 0) {
      print_table(1, 8, {2, 4});
      print_table(2, 16, {2, 8});
      return 0;
    }
  }
  auto* real = benchmark::RegisterBenchmark("BM_RingAttentionRealData", BM_RingAttentionRealData);
  real->Arg(2048)->Unit(benchmark::kSecond)->Iterations(1);
  const char* full = std::getenv("RANKSIM_CP_BENCH_FULL");
  if (full && std::string(full) == "1") real->Arg(16384);
  auto* shape = benchmark::RegisterBenchmark("BM_ShapeOnly", BM_ShapeOnly);
  for (i64 c = 0; c < 4; ++c) {
    for (i64 S : kLengths) shape->Args({c, S});
  }
  shape->Unit(benchmark::kMillisecond)->Iterations(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

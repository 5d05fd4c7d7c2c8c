// Training benchmarks (issue #8):
// - BM_TrainStep/<tp>/<cp>/<dp>/<steps>: AdamW training steps of the reference transformer at its default
//   sizes (vocab 33, hidden 320, 20 heads of 16, ffn 1280, one block, fp32) on the built-in THD
//   batch of four sequences (9, 14, 6, 11 tokens), real data, on fibers: wall time on this machine
//   (one core runs every rank). Counters: virtual_ms (the step's simulated time on
//   topologies/dgx-h100.yaml), compute_ms and comm_ms (rank 0's split; blocking pipeline receives
//   count as communication).
// - BM_TrainStepShapeOnly: a 4096-hidden, 4-layer bf16 model at tp2 x pp2 x dp2 (1F1B over 4
//   micro-batches), shape-only: the timing model's step time and its split.
// - BM_MultimodalStep/<enc tp>/<enc dp>/<tp>/<cp>/<dp>/<steps> (issue #9): the encoder (32 -> 128
//   -> 320) bridged into the default transformer, 8 rows of 64 tokens, AdamW on both; the layouts
//   of the shipped scenarios, and one rank.
// - BM_Llama70bStep/<nodes> (issue #19): one training step of Llama 3 70B (80 layers, hidden 8192,
//   64 heads over 8 KV groups, SwiGLU 28672, vocabulary 128256, 8192-token sequences, bf16) at
//   TP8 x PP4 x DP with sequence parallelism and the distributed optimizer, 8 micro-batches per
//   DP rank, shape-only, built from Megatron-LM arguments on h100-cluster.yaml with `nodes` nodes
//   of 8 GPUs, through the command's own path (load_megatron_scenario, run_scenario): wall time
//   and peak resident memory (the target at 128 nodes, 1,024 ranks: under 30 s, 4 GiB).
// - BM_ShapeOnlyOp/<op> (issue #19): what one shape-only op costs the simulator (checks, the
//   result's shape, the charge through the kernel profile, the rank's clock), on one rank of
//   dgx-h100: a bf16 matmul [8192, 4096] x [4096, 4096], an add of [8192, 4096], a matmul
//   followed by its FP8 cast (inside an FP8 scope). The target: under 1 us per op.
#include <benchmark/benchmark.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "app/megatron_args.h"
#include "app/scenario.h"
#include "peak_rss.h"

#include "models/multimodal.h"
#include "models/train.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/topology.h"

namespace {

using namespace ranksim;

sim::Topology dgx() {
  return sim::Topology::load_file(std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml", {});
}

// Times run(options, &report) -> TrainResult over the benchmark's iterations on dgx-h100 without
// a trace, then reports the last run's virtual time and rank 0's split.
template <class Run>
void time_runs(benchmark::State& state, const Run& run) {
  const sim::Topology topo = dgx();
  runtime::SpawnOptions so;
  so.topology = &topo;
  so.engine.trace = false;
  runtime::RunReport rep;
  for (auto _ : state) {
    models::TrainResult r = run(so, &rep);
    benchmark::DoNotOptimize(r.losses);
  }
  state.counters["virtual_ms"] = rep.makespan.seconds() * 1e3;
  state.counters["compute_ms"] = rep.compute[0].seconds() * 1e3;
  state.counters["comm_ms"] = rep.comm[0].seconds() * 1e3;
}

void BM_TrainStep(benchmark::State& state) {
  models::TrainSpec s;
  s.tp = static_cast<int>(state.range(0));
  s.cp = static_cast<int>(state.range(1));
  s.dp = static_cast<int>(state.range(2));
  s.attention.format = cp::Format::thd;
  s.attention.mask = models::Mask::causal;
  s.weights = models::seeded_weights(s.config, 42);
  s.batch = models::synthetic_batch(cp::Format::thd, s.config.vocab, {9, 14, 6, 11}, 43);
  s.steps = static_cast<int>(state.range(3));
  time_runs(state,
            [&](const runtime::SpawnOptions& so, runtime::RunReport* rep) { return models::run_training(s, so, rep); });
}
// Args: tp, cp, dp, steps. A run's wall time includes building the ranks' models and consolidating
// the weights at the end; the difference between 1 and 5 steps, over 4, is one step's wall time.
BENCHMARK(BM_TrainStep)
    ->Args({1, 1, 1, 1})
    ->Args({1, 1, 1, 5})
    ->Args({2, 2, 2, 1})
    ->Args({2, 2, 2, 5})
    ->Unit(benchmark::kMillisecond);

void BM_MultimodalStep(benchmark::State& state) {
  models::MultimodalSpec s;
  s.src_tp = static_cast<int>(state.range(0));
  s.src_dp = static_cast<int>(state.range(1));
  s.tp = static_cast<int>(state.range(2));
  s.cp = static_cast<int>(state.range(3));
  s.dp = static_cast<int>(state.range(4));
  s.steps = static_cast<int>(state.range(5));
  s.attention.format = cp::Format::bshd;
  s.weights = models::seeded_multimodal_weights(s.config, s.encoder, 42);
  s.batch = models::synthetic_multimodal_batch(s.config, s.encoder, 8, 64, 43);
  time_runs(state, [&](const runtime::SpawnOptions& so, runtime::RunReport* rep) {
    return models::run_multimodal(s, so, rep);
  });
}
BENCHMARK(BM_MultimodalStep)
    ->Args({1, 1, 1, 1, 1, 1})
    ->Args({2, 4, 2, 2, 2, 1})
    ->Args({2, 4, 2, 2, 2, 5})
    ->Args({4, 2, 1, 2, 4, 1})
    ->Args({4, 2, 1, 2, 4, 5})
    ->Unit(benchmark::kMillisecond);

void BM_TrainStepShapeOnly(benchmark::State& state) {
  models::TrainSpec s;
  s.config.vocab = 32000;
  s.config.hidden = 4096;
  s.config.heads = 32;
  s.config.head_dim = 128;
  s.config.ffn = 16384;
  s.config.layers = 4;
  s.config.dtype = runtime::DType::bf16;
  s.tp = 2;
  s.pp = 2;
  s.dp = 2;
  s.micro_batches = 4;
  s.zero = 1;
  s.weights = models::shape_only_weights(s.config);
  s.batch = models::synthetic_batch(cp::Format::bshd, s.config.vocab, std::vector<std::int64_t>(16, 4096), 1);
  time_runs(state,
            [&](const runtime::SpawnOptions& so, runtime::RunReport* rep) { return models::run_training(s, so, rep); });
}
BENCHMARK(BM_TrainStepShapeOnly)->Unit(benchmark::kMillisecond);

void BM_Llama70bStep(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int dp = nodes * 8 / 32;  // TP8 x PP4 per replica
  const std::string args =
      "--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
      "--group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
      "--vocab-size 128256 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu "
      "--disable-bias-linear --untie-embeddings-and-output-weights --bf16 --tensor-model-parallel-size 8 "
      "--pipeline-model-parallel-size 4 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
      "--micro-batch-size 1 --hidden-dropout 0 --attention-dropout 0 --global-batch-size " +
      std::to_string(8 * dp);
  bench::reset_peak_rss();
  const app::Scenario sc = app::load_megatron_scenario(
      args, std::string(RANKSIM_SOURCE_DIR) + "/topologies/h100-cluster.yaml", {"nodes=" + std::to_string(nodes)});
  app::RunFlags flags;
  flags.quiet = true;
  std::ostream sink(nullptr);
  for (auto _ : state) benchmark::DoNotOptimize(app::run_scenario(sc, flags, sink));
  state.counters["ranks"] = sc.ranks;
  state.counters["peak_rss_mib"] = bench::peak_rss_mib();
}
BENCHMARK(BM_Llama70bStep)->Arg(4)->Arg(32)->Arg(128)->Iterations(1)->Unit(benchmark::kSecond);

// Shape-only ops, 100,000 per rank run; items_per_second is ops per second of CPU time.
void BM_ShapeOnlyOp(benchmark::State& state) {
  const sim::Topology topo = dgx();
  runtime::SpawnOptions so;
  so.topology = &topo;
  so.engine.trace = false;
  const int op = static_cast<int>(state.range(0));
  constexpr int kOps = 100'000;
  for (auto _ : state) {
    runtime::spawn(
        [&](int) {
          const runtime::Tensor x = runtime::Tensor::shape_only({8192, 4096}, runtime::DType::bf16);
          const runtime::Tensor w = runtime::Tensor::shape_only({4096, 4096}, runtime::DType::bf16);
          std::optional<runtime::GemmPrecisionScope> fp8;
          if (op == 2) fp8.emplace(runtime::GemmPrecision::fp8);
          for (int i = 0; i < kOps; ++i) {
            benchmark::DoNotOptimize(op == 1 ? runtime::add(x, x) : runtime::matmul(x, w));
          }
        },
        1, so);
  }
  state.SetItemsProcessed(state.iterations() * kOps);  // items_per_second: ops per CPU second
  state.SetLabel(op == 0 ? "matmul" : op == 1 ? "add" : "fp8 matmul + cast");
}
BENCHMARK(BM_ShapeOnlyOp)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// What device-memory accounting (runtime/tensor/memory.h) costs (issue #17: under 5% of the wall
// time of the shipped scenarios).
// - BM_Scenario/<scenario>/<counted>: `ranksim run` of a shipped scenario, summary printed to a
//   discarded stream, no trace; counted 1 with the per-rank ledger (the default), 0 without it
//   (RunFlags::count_memory). Compare the two rows of a scenario: the difference is the cost of
//   counting every tensor storage, its peak, phase and timeline.
#include <benchmark/benchmark.h>

#include <array>
#include <sstream>
#include <string>

#include "app/scenario.h"

namespace {

using namespace ranksim;

constexpr std::array<const char*, 5> kScenarios = {
    "train-pp2-1f1b-dgx-h100.yaml",     // shape-only 4096-hidden model, 1F1B, ZeRO-1
    "train-tp2-cp2-dp2-dgx-h100.yaml",  // real data, AdamW, every layout at once
    "cp-attention-p2p-dgx-h100.yaml",   // shape-only 32k-token causal attention over cp=8
    "tp-mlp-dgx-h100.yaml",             // Megatron MLP, tp=8
    "tp-dp-cluster.yaml",               // collectives only, 2 nodes
};

void BM_Scenario(benchmark::State& state) {
  const std::string file =
      std::string(RANKSIM_SOURCE_DIR) + "/scenarios/" + kScenarios[static_cast<size_t>(state.range(0))];
  const app::Scenario sc = app::load_scenario(file);
  app::RunFlags flags;
  flags.quiet = true;
  flags.count_memory = state.range(1) != 0;
  for (auto _ : state) {
    std::ostringstream out;
    benchmark::DoNotOptimize(app::run_scenario(sc, flags, out));
  }
  state.SetLabel(std::string(kScenarios[static_cast<size_t>(state.range(0))]) +
                 (flags.count_memory ? " counted" : " not counted"));
}
// Each scenario's two rows side by side, so a change in the machine's load hits both alike.
void scenario_args(benchmark::internal::Benchmark* b) {
  for (int s = 0; s < static_cast<int>(kScenarios.size()); ++s) b->Args({s, 1})->Args({s, 0});
}
BENCHMARK(BM_Scenario)
    ->Apply(scenario_args)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();

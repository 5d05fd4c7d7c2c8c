// Benchmarks of the discrete-event kernel: fiber switches, the event queue, and runs with many
// ranks. Targets (issue #2, on a 2-core CI-class machine): <= 20 ns per fiber switch;
// >= 10 M event push+pop per second; 65,536 ranks x 10 yields in < 0.5 s and < 512 MiB;
// 1,048,576 ranks (16 KiB stacks) x 10 yields in < 10 s and < 6 GiB.
//
// Peak memory is the process's peak resident set (VmHWM), reset before each measurement through
// /proc/self/clear_refs, and reported as the counter peak_rss_MiB.
#include <benchmark/benchmark.h>

#include "peak_rss.h"

#include <cstdint>
#include <fstream>
#include <string>

#include "sim/engine.h"
#include "sim/event_queue.h"
#include "sim/fiber.h"

namespace {

using ranksim::sim::Engine;
using ranksim::sim::EngineOptions;
using ranksim::sim::EventQueue;
using ranksim::sim::Fiber;
using ranksim::sim::StackOptions;
using ranksim::sim::StackPool;
using ranksim::sim::Time;

using ranksim::bench::peak_rss_mib;
using ranksim::bench::reset_peak_rss;

// One resume() plus one suspend() per iteration: two stack switches.
void BM_FiberSwitch(benchmark::State& state) {
  StackPool pool(StackOptions{64 * 1024, false});
  bool stop = false;
  Fiber* self = nullptr;
  Fiber fiber(pool, [&] {
    while (!stop) self->suspend();
  });
  self = &fiber;
  for (auto _ : state) fiber.resume();
  stop = true;
  fiber.resume();
  // Time per iteration / 2 is the cost of one switch; items are switches.
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_FiberSwitch);

// A full engine round trip: yield() pushes an event, the driver pops it and resumes the rank.
void BM_EngineYield(benchmark::State& state) {
  const int64_t n = 1'000'000;
  for (auto _ : state) {
    Engine engine;
    engine.run(2, [n](int) {
      for (int64_t i = 0; i < n / 2; ++i) ranksim::sim::this_rank::yield();
    });
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_EngineYield)->Unit(benchmark::kMillisecond);

// Push then pop with pseudo-random future times over a queue holding `range(0)` events.
void BM_EventQueuePushPop(benchmark::State& state) {
  EventQueue q;
  uint64_t x = 88172645463325252ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int64_t i = 0; i < state.range(0); ++i) q.push(Time::ps(static_cast<int64_t>(next() % 1'000'000) + 1), 0);
  for (auto _ : state) {
    q.push(q.now() + Time::ps(static_cast<int64_t>(next() % 1'000'000) + 1), 0);
    benchmark::DoNotOptimize(q.pop());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EventQueuePushPop)->Arg(1 << 10)->Arg(1 << 16)->Arg(1 << 20);

// `range(0)` ranks, each yielding 10 times, with `range(1)` KiB stacks.
void BM_ManyRanksYield(benchmark::State& state) {
  const int nranks = static_cast<int>(state.range(0));
  double peak = 0;
  for (auto _ : state) {
    reset_peak_rss();
    EngineOptions opt;
    opt.stack = StackOptions{static_cast<size_t>(state.range(1)) * 1024, false};
    opt.trace = false;
    Engine engine(opt);
    engine.run(nranks, [](int) {
      for (int i = 0; i < 10; ++i) ranksim::sim::this_rank::yield();
    });
    peak = peak_rss_mib();
  }
  state.counters["peak_rss_MiB"] = peak;
  state.SetItemsProcessed(state.iterations() * nranks * 10);
}
BENCHMARK(BM_ManyRanksYield)->Args({65536, 64})->Args({1 << 20, 16})->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();

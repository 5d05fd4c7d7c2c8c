// Device-memory accounting on the sim backend (runtime/tensor/memory.h): each rank's peak and what
// it was made of, against sums worked out by hand from the tensors the ranks create and drop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/distributed/spawn.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/engine.h"
#include "sim/topology.h"

namespace ranksim::runtime {
namespace {

const std::string kRoot = RANKSIM_SOURCE_DIR;

uint64_t at(const MemoryUse& m, MemoryKind k) { return m.at_peak[static_cast<size_t>(k)]; }

TEST(Memory, ThePeakIsTheBytesAliveAtItsWorstMoment) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  SpawnOptions so;
  so.topology = &topo;
  const Tensor before = Tensor::zeros({1 << 20});  // made outside the run: not a rank's
  Tensor kept;                                     // outlives the run
  const RunReport rep = spawn(
      [&](int rank) {
        Tensor a = Tensor::zeros({1000}, DType::f32);  // 4000 B, activations
        Tensor view = a.narrow(0, 10, 100);            // a view: nothing more
        Tensor b;
        {
          const MemoryScope s(MemoryKind::optimizer);
          b = Tensor::zeros({500}, DType::f32);  // 2000 B, optimizer
        }
        {
          Tensor c = Tensor::shape_only({250 * (rank + 1)}, DType::bf16);  // 500 (rank 0) or 1000 B, no data
          (void)c;
        }  // freed: 6500 (rank 0) / 7000 (rank 1) was the peak so far
        retag_memory(a, MemoryKind::parameters);
        Tensor d = Tensor::zeros({1000}, DType::f64);  // 8000 B, activations: a new peak of 14000
        Tensor e = add(d, d);                          // 8000 B more: 22000
        if (rank == 1) kept = e;
      },
      2, so);
  ASSERT_EQ(rep.memory.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const MemoryUse& m = rep.memory[static_cast<size_t>(r)];
    EXPECT_EQ(m.peak, 4000u + 2000u + 8000u + 8000u);
    EXPECT_EQ(at(m, MemoryKind::parameters), 4000u);
    EXPECT_EQ(at(m, MemoryKind::optimizer), 2000u);
    EXPECT_EQ(at(m, MemoryKind::activations), 16000u);
    EXPECT_EQ(at(m, MemoryKind::gradients), 0u);
    EXPECT_EQ(m.capacity, uint64_t{16} << 30);  // ring4's toy device
  }
  EXPECT_TRUE(kept.defined());  // and dropping it after the run is harmless
  kept = Tensor();
}

TEST(Memory, ShapeOnlyTensorsCountTheirShapeAndEveryRankItsOwn) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  SpawnOptions so;
  so.topology = &topo;
  const RunReport rep = spawn(
      [&](int rank) {
        std::vector<Tensor> live;
        for (int i = 0; i <= rank; ++i) live.push_back(Tensor::shape_only({1024, 1024}, DType::bf16));  // 2 MiB each
      },
      4, so);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rep.memory[static_cast<size_t>(r)].peak, uint64_t(r + 1) << 21);
}

uint64_t total(const MemorySample& s) { return std::accumulate(s.bytes.begin(), s.bytes.end(), uint64_t{0}); }

TEST(MemoryTimeline, EachInstantKeepsTheMostHeldAtIt) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  SpawnOptions so;
  so.topology = &topo;
  const sim::Time us = sim::Time::from_seconds(1e-6);
  const RunReport rep = spawn(
      [&](int) {
        Tensor a = Tensor::zeros({250}, DType::f32);  // t = 0: 1000 B
        sim::this_rank::sleep_for(us);
        Tensor b;
        {
          const MemoryScope s(MemoryKind::gradients);
          b = Tensor::zeros({500}, DType::f32);  // t = 1 us: 3000 B ...
        }
        a = Tensor();  // ... then 2000 B at the same instant: the instant keeps 3000
        sim::this_rank::sleep_for(us);
        b = Tensor();  // t = 2 us: 0 B
      },
      1, so);
  const std::vector<MemorySample>& tl = rep.memory[0].timeline;
  ASSERT_EQ(tl.size(), 3u);
  EXPECT_EQ(tl[0].time, sim::Time::zero());
  EXPECT_EQ(total(tl[0]), 1000u);
  EXPECT_EQ(tl[1].time, us);
  EXPECT_EQ(tl[1].bytes[static_cast<size_t>(MemoryKind::activations)], 1000u);
  EXPECT_EQ(tl[1].bytes[static_cast<size_t>(MemoryKind::gradients)], 2000u);
  EXPECT_EQ(tl[2].time, us * 2);
  EXPECT_EQ(total(tl[2]), 0u);
}

TEST(MemoryTimeline, ALongRunKeepsAtMost512SamplesInOrderAndThePeak) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  SpawnOptions so;
  so.topology = &topo;
  so.engine.trace = false;
  constexpr int kInstants = 5000, kPeakAt = 3333;
  const RunReport rep = spawn(
      [&](int) {
        for (int i = 0; i < kInstants; ++i) {
          // A saw-tooth of 4..4*(1 + i % 97) bytes, and once, at kPeakAt, far above it.
          const int64_t n = i == kPeakAt ? 100000 : 1 + i % 97;
          const Tensor t = Tensor::shape_only({n}, DType::f32);
          sim::this_rank::sleep_for(sim::Time::from_seconds(1e-6));
        }
      },
      1, so);
  const MemoryUse& m = rep.memory[0];
  EXPECT_EQ(m.peak, 400000u);
  ASSERT_FALSE(m.timeline.empty());
  EXPECT_LE(m.timeline.size(), kMemoryTimelineSamples);
  EXPECT_GT(m.timeline.size(), kMemoryTimelineSamples / 4);  // halved at most down to a quarter
  EXPECT_TRUE(std::is_sorted(m.timeline.begin(), m.timeline.end(),
                             [](const MemorySample& a, const MemorySample& b) { return a.time < b.time; }));
  const auto top = std::max_element(m.timeline.begin(), m.timeline.end(),
                                    [](const MemorySample& a, const MemorySample& b) { return total(a) < total(b); });
  EXPECT_EQ(total(*top), m.peak);
  EXPECT_EQ(top->time, m.peak_time);
  EXPECT_EQ(m.peak_time, sim::Time::from_seconds(1e-6) * kPeakAt);
  // Every kept sample is one instant's real value: a multiple of 4 bytes up to 4 * 97, or the peak.
  for (const MemorySample& s : m.timeline) EXPECT_TRUE(total(s) == m.peak || (total(s) % 4 == 0 && total(s) <= 388));
}

TEST(MemoryTimeline, OnlyTheFirst64RanksKeepOne) {
  SpawnOptions so;  // the default machine: one node of 72 devices
  so.engine.trace = false;
  const RunReport rep = spawn([&](int) { const Tensor t = Tensor::shape_only({16}, DType::f32); }, 72, so);
  ASSERT_EQ(rep.memory.size(), 72u);
  for (size_t r = 0; r < 72; ++r) {
    EXPECT_EQ(rep.memory[r].peak, 64u);
    EXPECT_EQ(rep.memory[r].timeline.empty(), r >= static_cast<size_t>(kMemoryTimelineRanks)) << r;
  }
}

TEST(MemoryPhase, ThePeakNamesTheInnermostPhaseAndPhasesNest) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  SpawnOptions so;
  so.topology = &topo;
  std::vector<uint64_t> in_use(2);
  const RunReport rep = spawn(
      [&](int rank) {
        const MemoryPhase outer("step");
        Tensor a = Tensor::zeros({100}, DType::f32);
        {
          const MemoryPhase inner("layer 3 backward");
          if (rank == 0) {
            const Tensor b = Tensor::zeros({1000}, DType::f32);  // rank 0 peaks in the inner phase
          }
        }
        const Tensor c = Tensor::zeros({200}, DType::f32);  // rank 1 peaks back in the outer one
        const auto use = memory_in_use();
        in_use[static_cast<size_t>(rank)] = std::accumulate(use.begin(), use.end(), uint64_t{0});
      },
      2, so);
  EXPECT_EQ(rep.memory[0].phase, "layer 3 backward");
  EXPECT_EQ(rep.memory[0].peak, 4400u);
  EXPECT_EQ(rep.memory[1].phase, "step");
  EXPECT_EQ(rep.memory[1].peak, 1200u);
  EXPECT_EQ(in_use[0], 1200u);  // a and c, read inside the rank
  EXPECT_EQ(in_use[1], 1200u);
}

TEST(MemoryPhase, WithoutALedgerNothingIsCounted) {
  const MemoryPhase p("outside any run");
  const Tensor t = Tensor::zeros({10});
  const auto use = memory_in_use();
  EXPECT_EQ(std::accumulate(use.begin(), use.end(), uint64_t{0}), 0u);
}

TEST(Memory, CountingCanBeTurnedOff) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  SpawnOptions so;
  so.topology = &topo;
  so.count_memory = false;
  uint64_t seen = 1;
  const RunReport rep = spawn(
      [&](int) {
        const Tensor t = Tensor::zeros({10});
        const auto use = memory_in_use();
        seen = std::accumulate(use.begin(), use.end(), uint64_t{0});
      },
      1, so);
  EXPECT_TRUE(rep.memory.empty());
  EXPECT_EQ(seen, 0u);
}

}  // namespace
}  // namespace ranksim::runtime

// Device-memory accounting on the sim backend (runtime/tensor/memory.h): each rank's peak and what
// it was made of, against sums worked out by hand from the tensors the ranks create and drop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/distributed/spawn.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
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

}  // namespace
}  // namespace ranksim::runtime

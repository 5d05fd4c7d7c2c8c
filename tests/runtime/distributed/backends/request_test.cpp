// The typed requests at the backend seam (runtime/distributed/backends/request.h) and the
// launcher registry (runtime/distributed/backends/registry.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <variant>
#include <vector>

#include "runtime/distributed/backends/registry.h"
#include "runtime/distributed/backends/request.h"
#include "runtime/distributed/backends/sim/sim_backend.h"
#include "runtime/distributed/spawn.h"

namespace ranksim::runtime::detail {
namespace {

TEST(CollectiveTensors, EachStructNamesItsKind) {
  const Tensor t = Tensor::ones({4});
  EXPECT_EQ(kind_of(AllReduceTensors{t}), CollectiveKind::all_reduce);
  EXPECT_EQ(kind_of(BroadcastTensors{t}), CollectiveKind::broadcast);
  EXPECT_EQ(kind_of(ReduceTensors{t}), CollectiveKind::reduce);
  EXPECT_EQ(kind_of(AllGatherTensors{t, t}), CollectiveKind::all_gather);
  EXPECT_EQ(kind_of(ReduceScatterTensors{t, t}), CollectiveKind::reduce_scatter);
  EXPECT_EQ(kind_of(GatherTensors{t, {}}), CollectiveKind::gather);
  EXPECT_EQ(kind_of(ScatterTensors{t, {}}), CollectiveKind::scatter);
  EXPECT_EQ(kind_of(AllToAllTensors{t, t, {}, {}}), CollectiveKind::all_to_all);
  EXPECT_EQ(kind_of(BarrierTensors{}), CollectiveKind::barrier);
}

// Even split sizes are one number for the whole group; given ones are the list. Both read alike.
TEST(SplitSizes, EvenSizesReadAsTheListTheyStandFor) {
  const SplitSizes even = SplitSizes::even(4, 3);
  EXPECT_TRUE(even.is_even());
  EXPECT_EQ(even.size(), 4);
  EXPECT_EQ(even[0], 3);
  EXPECT_EQ(even[3], 3);
  EXPECT_EQ(even.total(), 12);
  EXPECT_EQ(even.to_vector(), (std::vector<int64_t>{3, 3, 3, 3}));
  const SplitSizes given({5, 0, 2});
  EXPECT_FALSE(given.is_even());
  EXPECT_EQ(given.size(), 3);
  EXPECT_EQ(given[0], 5);
  EXPECT_EQ(given[1], 0);
  EXPECT_EQ(given.total(), 7);
  EXPECT_EQ(given.to_vector(), (std::vector<int64_t>{5, 0, 2}));
  EXPECT_EQ(SplitSizes().total(), 0);
}

TEST(CollectiveTensors, HasDataFollowsTheTensorsAndABarrierHasNone) {
  const Tensor data = Tensor::ones({4});
  const Tensor shape_only = Tensor::shape_only({4}, DType::f32);
  EXPECT_TRUE(has_data(AllReduceTensors{data}));
  EXPECT_FALSE(has_data(AllReduceTensors{shape_only}));
  EXPECT_TRUE(has_data(AllGatherTensors{data, data}));
  EXPECT_FALSE(has_data(ReduceScatterTensors{shape_only, shape_only}));
  EXPECT_TRUE(has_data(AllToAllTensors{data, data, {}, {}}));
  EXPECT_TRUE(has_data(GatherTensors{data, {}}));
  EXPECT_FALSE(has_data(ScatterTensors{shape_only, {}}));
  EXPECT_FALSE(has_data(BarrierTensors{}));
}

TEST(CollectiveTensors, AnotherKindsStructCannotBeRead) {
  const CollectiveTensors t = AllGatherTensors{Tensor::ones({8}), Tensor::ones({4})};
  EXPECT_THROW((void)std::get<ReduceScatterTensors>(t), std::bad_variant_access);
}

TEST(Registry, EachBackendHasALauncherAndSimIsTheDefault) {
  EXPECT_EQ(launcher(BackendKind::sim), &spawn_sim);
  EXPECT_EQ(launcher(SpawnOptions{}.backend), &spawn_sim);
  EXPECT_NE(launcher(BackendKind::mpi), nullptr);
  EXPECT_EQ(launcher(BackendKind::nccl), launcher(BackendKind::mpi));  // mpi with device collectives
}

}  // namespace
}  // namespace ranksim::runtime::detail

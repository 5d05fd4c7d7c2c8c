#include "tp/parallel_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "tp/rank_grid.h"

namespace ranksim::tp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using Lists = std::vector<std::vector<int>>;

// The spec's world-8 tp2 cp2 dp2 table.
const Lists kTp = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
const Lists kCp = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
const Lists kDp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
const Lists kDpCp = {{0, 2, 4, 6}, {1, 3, 5, 7}};
const Lists kTpCp = {{0, 1, 2, 3}, {4, 5, 6, 7}};
const Lists kPp = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

TEST(RankGrid, FirstDimensionVariesFastest) {
  RankGrid g({{"tp", 2}, {"cp", 3}, {"dp", 2}}, 12);
  EXPECT_EQ(g.size(), 12);
  EXPECT_THAT(g.coords(0), ElementsAre(0, 0, 0));
  EXPECT_THAT(g.coords(1), ElementsAre(1, 0, 0));
  EXPECT_THAT(g.coords(2), ElementsAre(0, 1, 0));
  EXPECT_THAT(g.coords(11), ElementsAre(1, 2, 1));
  for (int r = 0; r < 12; ++r) {
    const std::vector<int> c = g.coords(r);
    EXPECT_EQ(c[0] + 2 * (c[1] + 3 * c[2]), r);
    EXPECT_EQ(g.rank_at(c), r);
  }
  EXPECT_EQ(g.coord(7, "cp"), 0);
  EXPECT_EQ(g.coord(9, "cp"), 1);
  EXPECT_EQ(g.str(), "tp=2 x cp=3 x dp=2");
}

TEST(RankGrid, GroupsEnumerateChosenDimsWithOthersFixed) {
  RankGrid g({{"tp", 2}, {"cp", 3}, {"dp", 2}}, 12);
  EXPECT_EQ(g.group_ranks({"cp"}), (Lists{{0, 2, 4}, {1, 3, 5}, {6, 8, 10}, {7, 9, 11}}));
  // Names may come in any order; members are in grid order, which is ascending.
  EXPECT_EQ(g.group_ranks({"dp", "tp"}), (Lists{{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}}));
  EXPECT_EQ(g.group_ranks({"tp", "cp", "dp"}), (Lists{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}));
  EXPECT_THAT(g.group_of({"cp"}, 9), ElementsAre(7, 9, 11));
}

TEST(RankGrid, OffsetGridCoversItsRangeOnly) {
  RankGrid g({{"tp", 2}, {"dp", 2}}, 10, 6);
  EXPECT_FALSE(g.contains(5));
  EXPECT_TRUE(g.contains(6));
  EXPECT_FALSE(g.contains(10));
  EXPECT_EQ(g.group_ranks({"dp"}), (Lists{{6, 8}, {7, 9}}));
  EXPECT_THAT([&] { g.coords(3); }, ThrowsMessage<Error>(HasSubstr("outside its ranks [6, 10)")));
}

TEST(RankGrid, RejectsLayoutsThatDoNotFitTheWorld) {
  EXPECT_THAT(
      [] {
        RankGrid({{"tp", 2}, {"dp", 3}}, 8);
      },
      ThrowsMessage<Error>(HasSubstr("rank grid tp=2 x dp=3 has 6 ranks but the world has "
                                     "8; the dimension sizes must multiply to the world "
                                     "size")));
  EXPECT_THAT(
      [] {
        RankGrid({{"tp", 4}}, 8, 6);
      },
      ThrowsMessage<Error>(HasSubstr("covers ranks [6, 10), outside the world of 8")));
  EXPECT_THAT([] { RankGrid({{"tp", 0}}, 0); }, ThrowsMessage<Error>(HasSubstr("dimension 'tp' has size 0")));
  EXPECT_THAT(
      [] {
        RankGrid({{"tp", 2}, {"tp", 2}}, 4);
      },
      ThrowsMessage<Error>(HasSubstr("dimension name 'tp' is used twice")));
  RankGrid g({{"tp", 2}, {"dp", 2}}, 4);
  EXPECT_THAT([&] { g.group_ranks({"cp"}); },
              ThrowsMessage<Error>(HasSubstr("no dimension named 'cp' (it has tp, dp)")));
  EXPECT_THAT([&] { g.group_ranks({"tp", "tp"}); }, ThrowsMessage<Error>(HasSubstr("'tp' is named twice")));
}

TEST(ModelParallelGrid, SpecTableWorld8Tp2Cp2Dp2) {
  const RankGrid g = model_parallel_grid(8, 2, 1, 2);
  EXPECT_EQ(g.str(), "tp=2 x cp=2 x ep=1 x dp=2 x pp=1");
  EXPECT_EQ(g.group_ranks({"tp"}), kTp);
  EXPECT_EQ(g.group_ranks({"cp"}), kCp);
  EXPECT_EQ(g.group_ranks({"dp"}), kDp);
  EXPECT_EQ(g.group_ranks({"cp", "dp"}), kDpCp);
  EXPECT_EQ(g.group_ranks({"tp", "cp"}), kTpCp);
  EXPECT_EQ(g.group_ranks({"pp"}), kPp);
  EXPECT_EQ(g.group_ranks({"tp", "pp"}), kTp);
}

TEST(ModelParallelGrid, PipelineIsSlowestByDefault) {
  // tp2 pp2 on 8 ranks: dp = 2, rank = tp_r + 2 * (dp_r + 2 * pp_r).
  const RankGrid g = model_parallel_grid(8, 2, 2, 1);
  EXPECT_EQ(g.group_ranks({"pp"}), (Lists{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.group_ranks({"dp"}), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.group_ranks({"tp", "pp"}), (Lists{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

TEST(ModelParallelGrid, OrderStringChangesTheLayout) {
  ModelParallelOptions o;
  o.order = "tp-dp-pp";  // cp and ep have size 1 and are appended
  const RankGrid g = model_parallel_grid(8, 2, 2, 1, o);
  EXPECT_EQ(g.str(), "tp=2 x dp=2 x pp=2 x cp=1 x ep=1");
  EXPECT_EQ(g.group_ranks({"dp"}), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(ModelParallelGrid, LayoutErrorsNameTheNumbers) {
  EXPECT_THAT([] { model_parallel_grid(6, 4); },
              ThrowsMessage<Error>(HasSubstr("initialize_model_parallel(tp=4, pp=1, cp=1): world "
                                             "size 6 is not divisible by tp x pp x cp = 4")));
  EXPECT_THAT([] { model_parallel_grid(8, 2, 1, 3); },
              ThrowsMessage<Error>(HasSubstr("world size 8 is not divisible by tp x pp x cp = 6")));
  EXPECT_THAT([] { model_parallel_grid(8, 0); }, ThrowsMessage<Error>(HasSubstr("every size must be at least 1")));
  ModelParallelOptions bad;
  bad.order = "tp-cp-xx-dp-pp";
  EXPECT_THAT([&] { model_parallel_grid(8, 2, 1, 1, bad); }, ThrowsMessage<Error>(HasSubstr("names 'xx'")));
  bad.order = "tp-cp-pp";
  EXPECT_THAT([&] { model_parallel_grid(8, 2, 1, 1, bad); },
              ThrowsMessage<Error>(HasSubstr("dp has size 4 but order 'tp-cp-pp' does not place it")));
  bad.order = "tp-tp-dp";
  EXPECT_THAT([&] { model_parallel_grid(8, 2, 1, 1, bad); }, ThrowsMessage<Error>(HasSubstr("names 'tp' twice")));
}

const std::vector<int>& find_list(const Lists& lists, int rank) {
  for (const auto& l : lists) {
    for (int r : l) {
      if (r == rank) return l;
    }
  }
  static const std::vector<int> none;
  return none;
}

TEST(InitializeModelParallel, EveryRankGetsTheSpecGroupsAndTheyReduce) {
  struct Seen {
    std::vector<int> tp, cp, dp, dp_cp, tp_cp, pp, mp;
    int tp_rank = -1, cp_rank = -1, dp_rank = -1, dp_cp_rank = -1;
    int dp_cp_sum = 0;
    std::vector<int> cp_global;
  };
  std::vector<Seen> seen(8);
  runtime::spawn(
      [&](int rank) {
        ParallelState ps = initialize_model_parallel(2, 1, 2);
        Seen& s = seen[static_cast<std::size_t>(rank)];
        s.tp = ps.tp().ranks;
        s.cp = ps.cp().ranks;
        s.dp = ps.dp().ranks;
        s.dp_cp = ps.dp_cp().ranks;
        s.tp_cp = ps.tp_cp().ranks;
        s.pp = ps.pp().ranks;
        s.mp = ps.mp().ranks;
        s.tp_rank = ps.tp().rank;
        s.cp_rank = ps.cp().rank;
        s.dp_rank = ps.dp().rank;
        s.dp_cp_rank = ps.dp_cp().rank;
        s.cp_global = ps.cp_global_ranks();
        // The runtime's group must be the one the grid describes: members contribute rank + 1.
        runtime::Tensor t = runtime::Tensor::full({1}, rank + 1);
        runtime::AllreduceOptions o;
        o.group = ps.dp_cp().group;
        runtime::all_reduce(t, o);
        s.dp_cp_sum = static_cast<int>(t.item());
        EXPECT_EQ(ps.dp_cp().group.ranks(), ps.dp_cp().ranks);
        EXPECT_EQ(ps.tp().size, 2);
        EXPECT_EQ(ps.dp_cp().size, 4);
        EXPECT_TRUE(ps.is_pipeline_first_stage());
        EXPECT_TRUE(ps.is_pipeline_last_stage());
      },
      8);
  for (int r = 0; r < 8; ++r) {
    const Seen& s = seen[static_cast<std::size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(s.tp, find_list(kTp, r));
    EXPECT_EQ(s.cp, find_list(kCp, r));
    EXPECT_EQ(s.dp, find_list(kDp, r));
    EXPECT_EQ(s.dp_cp, find_list(kDpCp, r));
    EXPECT_EQ(s.tp_cp, find_list(kTpCp, r));
    EXPECT_EQ(s.pp, find_list(kPp, r));
    EXPECT_EQ(s.mp, find_list(kTp, r));
    EXPECT_EQ(s.cp_global, find_list(kCp, r));
    // rank = tp_r + 2 * (cp_r + 2 * dp_r)
    EXPECT_EQ(s.tp_rank + 2 * (s.cp_rank + 2 * s.dp_rank), r);
    EXPECT_EQ(s.dp_cp_rank, s.cp_rank + 2 * s.dp_rank);
    int expected = 0;
    for (int m : find_list(kDpCp, r)) expected += m + 1;
    EXPECT_EQ(s.dp_cp_sum, expected);
  }
}

TEST(InitializeModelParallel, TwoRunsInOneProcessAreIndependent) {
  // A state is owned by its run: a second run with another layout sees its own groups.
  for (int tp : {4, 2}) {
    std::vector<std::vector<int>> tp_groups(4);
    runtime::spawn(
        [&](int rank) {
          ParallelState ps = initialize_model_parallel(tp);
          tp_groups[static_cast<std::size_t>(rank)] = ps.tp().ranks;
          EXPECT_EQ(ps.dp().size, 4 / tp);
        },
        4);
    EXPECT_EQ(tp_groups[3].size(), static_cast<std::size_t>(tp));
    EXPECT_EQ(tp_groups[3].back(), 3);
  }
}

TEST(InitializeModelParallel, BadLayoutFailsTheRunWithTheMessage) {
  EXPECT_THAT([] { runtime::spawn([](int) { initialize_model_parallel(4); }, 6); },
              ThrowsMessage<Error>(HasSubstr("world size 6 is not divisible by tp x pp x cp = 4")));
}

}  // namespace
}  // namespace ranksim::tp

// Rank grids (tp x cp x dp x pp) for parameterised tests, and running a function on one.
//
// A GridShape is a Megatron layout; run_grid starts tp*cp*dp*pp ranks, gives each its
// tp::ParallelState (tp::initialize_model_parallel, Megatron's order "tp-cp-ep-dp-pp": rank =
// tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r))) and collects what the function returns.
// RankGridTest is the fixture for TEST_P over layouts; grids_of(world) lists every layout of a
// world size, for ::testing::ValuesIn.
//
// Example:
//   class MyLayerTest : public ranksim::testing::RankGridTest {};
//   TEST_P(MyLayerTest, MatchesOneRank) {
//     RankRun run = this->run([](const tp::ParallelState& ps) -> Outputs { ... ps.tp().group ... });
//     EXPECT_TRUE(outputs_match(run.outputs, reference, chunk(1, grid().tp, tp_part(grid()))));
//   }
//   INSTANTIATE_TEST_SUITE_P(Layouts, MyLayerTest,
//                            ::testing::Values(GridShape(2), GridShape(2, 2), GridShape(2, 1, 2)), GridName());
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/ranks.h"
#include "tp/parallel_state.h"

namespace ranksim::testing {

struct GridShape {
  // GridShape(2, 1, 2) is tp2 x dp2. Default: 1 for each dimension.
  GridShape(int tp_ = 1, int cp_ = 1, int dp_ = 1, int pp_ = 1)  // NOLINT(google-explicit-constructor)
      : tp(tp_), cp(cp_), dp(dp_), pp(pp_) {}
  int tp = 1;
  int cp = 1;
  int dp = 1;
  int pp = 1;
  int world() const { return tp * cp * dp * pp; }
  std::string name() const;  // "tp2_cp1_dp2_pp1": a valid GoogleTest parameter name
};
void PrintTo(const GridShape& grid, std::ostream* os);

// A rank's coordinates in the grid (Megatron's default order, as above).
struct GridCoords {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;
};
GridCoords coords_of(const GridShape& grid, int rank);
// The part of a TP-sharded output a rank holds: its tp coordinate (for chunk()'s part_of).
std::function<int(int rank)> tp_part(const GridShape& grid);

// Every layout of `world` ranks (all tp*cp*dp*pp == world), tp fastest-varying first.
// REQUIRES: world >= 1.
std::vector<GridShape> grids_of(int world);

// For INSTANTIATE_TEST_SUITE_P's name generator argument.
struct GridName {
  std::string operator()(const ::testing::TestParamInfo<GridShape>& info) const { return info.param.name(); }
};

using GridRankFn = std::function<Outputs(const tp::ParallelState& state)>;
// Runs fn on grid.world() ranks, each with its parallel state. Throws as run_ranks.
RankRun run_grid(const GridShape& grid, const GridRankFn& fn, const RunOptions& opts = {});

class RankGridTest : public ::testing::TestWithParam<GridShape> {
 protected:
  const GridShape& grid() const { return GetParam(); }
  RankRun run(const GridRankFn& fn, const RunOptions& opts = {}) const { return run_grid(grid(), fn, opts); }
};

}  // namespace ranksim::testing

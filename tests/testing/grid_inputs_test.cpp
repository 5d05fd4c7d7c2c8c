// ranksim::testing's rank grids and inputs (testing/grid.h, testing/inputs.h): coordinates follow
// Megatron's order as tp::ParallelState builds it, every layout of a world is listed once, the
// grid fixture runs a TP-sharded layer against one rank, and inputs are deterministic and
// exact-sum inputs sum to the same bits in any order.
#include "testing/grid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "runtime/tensor/ops.h"
#include "testing/inputs.h"

namespace ranksim::testing {
namespace {

using runtime::Tensor;

TEST(Grid, CoordinatesFollowTheParallelStateGroups) {
  const GridShape g(2, 2, 2, 1);
  const RankRun run = run_grid(g, [&](const tp::ParallelState& ps) -> Outputs {
    const GridCoords c = coords_of(g, ps.global_rank());
    EXPECT_EQ(c.tp, ps.tp().rank);
    EXPECT_EQ(c.cp, ps.cp().rank);
    EXPECT_EQ(c.dp, ps.dp().rank);
    EXPECT_EQ(c.pp, ps.pp().rank);
    return {{"rank", Tensor::full({1}, ps.global_rank())}};
  });
  ASSERT_EQ(run.outputs.size(), 8U);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(run.outputs[static_cast<std::size_t>(r)].at("rank").item(), r);
  // rank = tp_r + tp * (cp_r + cp * (dp_r + dp * pp_r)), for a layout with pp too.
  const GridShape h(2, 1, 3, 2);
  for (int r = 0; r < h.world(); ++r) {
    const GridCoords c = coords_of(h, r);
    EXPECT_EQ(c.tp + 2 * (c.cp + 1 * (c.dp + 3 * c.pp)), r);
  }
  EXPECT_THROW(coords_of(h, 12), Error);
}

TEST(Grid, EveryLayoutOfAWorldOnce) {
  const std::vector<GridShape> grids = grids_of(8);
  // Ordered 4-tuples of powers of two with exponents summing to 3: C(3 + 3, 3) = 20.
  EXPECT_EQ(grids.size(), 20U);
  std::set<std::string> names;
  for (const GridShape& g : grids) {
    EXPECT_EQ(g.world(), 8);
    names.insert(g.name());
  }
  EXPECT_EQ(names.size(), grids.size());
  EXPECT_EQ(grids.front().name(), "tp8_cp1_dp1_pp1");
  EXPECT_EQ(grids_of(1).size(), 1U);
}

// The fixture over layouts: a column-parallel product, each rank's shard against one rank.
class ColumnShardTest : public RankGridTest {};

TEST_P(ColumnShardTest, MatchesOneRankBitwise) {
  const Tensor x = seeded_normal({4, 8}, seed_for("x")), w = seeded_normal({8, 8}, seed_for("w"));
  const Outputs reference{{"y", runtime::matmul(x, w, false, true)}};
  const RankRun run = this->run([&](const tp::ParallelState& ps) -> Outputs {
    const std::int64_t n = 8 / ps.tp().size;
    return {{"y", runtime::matmul(x, w.narrow(0, ps.tp().rank * n, n).contiguous(), false, true)}};
  });
  EXPECT_EQ(static_cast<int>(run.outputs.size()), grid().world());
  EXPECT_TRUE(outputs_match(run.outputs, reference, chunk(1, grid().tp, tp_part(grid()))));
  // Compared as the wrong shard (each rank's neighbour), every TP rank but a lone one fails.
  const auto shifted = chunk(1, grid().tp, [g = grid()](int r) { return (coords_of(g, r).tp + 1) % g.tp; });
  EXPECT_EQ(static_cast<bool>(outputs_match(run.outputs, reference, shifted)), grid().tp == 1);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ColumnShardTest,
                         ::testing::Values(GridShape(1), GridShape(2), GridShape(2, 2), GridShape(4, 1, 2),
                                           GridShape(2, 1, 1, 2)),
                         GridName());

TEST(Inputs, SeededInputsDependOnlyOnTheSeed) {
  const Tensor a = seeded_normal({64}, 7), b = seeded_normal({64}, 7), c = seeded_normal({64}, 8);
  EXPECT_TRUE(tensors_match(a, b));
  EXPECT_FALSE(tensors_match(a, c));
  // A slice of a larger draw is the same draw: element i depends on (seed, i) only.
  EXPECT_TRUE(tensors_match(seeded_uniform({16}, 3), seeded_uniform({32}, 3).narrow(0, 0, 16).contiguous()));
  EXPECT_EQ(seed_for("w", 1), seed_for("w", 1));
  EXPECT_NE(seed_for("w", 1), seed_for("w", 2));
  EXPECT_NE(seed_for("w"), seed_for("x"));
}

TEST(Inputs, ExactSumIntsSumToTheSameBitsInAnyOrder) {
  const Tensor t = exact_sum_ints({1000}, seed_for("sum"), -3, 3);
  std::vector<float> v = t.to_vector<float>();
  std::set<float> values(v.begin(), v.end());
  EXPECT_EQ(values, (std::set<float>{-3, -2, -1, 0, 1, 2, 3}));  // every integer of [-3, 3] drawn
  double exact = 0;
  for (const float x : v) exact += x;
  const float forward = std::accumulate(v.begin(), v.end(), 0.0F);
  std::reverse(v.begin(), v.end());
  const float backward = std::accumulate(v.begin(), v.end(), 0.0F);
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(static_cast<double>(forward), exact);
  // Random normals, summed the same two ways, do not (which is why the inputs matter).
  std::vector<float> r = seeded_normal({1000}, 1).to_vector<float>();
  const float rf = std::accumulate(r.begin(), r.end(), 0.0F);
  std::reverse(r.begin(), r.end());
  EXPECT_NE(rf, std::accumulate(r.begin(), r.end(), 0.0F));
}

}  // namespace
}  // namespace ranksim::testing

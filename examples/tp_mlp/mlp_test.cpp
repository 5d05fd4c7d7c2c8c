// SPDX-License-Identifier: Apache-2.0
// The MLP on 2 and 4 TP ranks (and inside a tp x dp grid) against the same code on one rank:
// each rank's hidden slice is bit for bit the reference's columns (its sums never cross ranks);
// the output is the same sum in another order, so it is compared within a tolerance, and with
// exact-sum inputs and no activation it must match bit for bit too.
#include <gtest/gtest.h>

#include "mlp.h"
#include "runtime/tensor/ops.h"
#include "testing/testing.h"

namespace {

namespace rt = ranksim::runtime;
namespace rtest = ranksim::testing;
using rtest::Outputs;

constexpr std::int64_t kTokens = 8, kHidden = 16, kFfn = 32;

Outputs run_mlp(int /*rank*/) {
  const rt::Tensor x = rtest::seeded_normal({kTokens, kHidden}, rtest::seed_for("x"));
  const rt::Tensor w1 = rtest::seeded_normal({kFfn, kHidden}, rtest::seed_for("w1"), rt::DType::f32, 0.0, 0.25);
  const rt::Tensor w2 = rtest::seeded_normal({kHidden, kFfn}, rtest::seed_for("w2"), rt::DType::f32, 0.0, 0.25);
  const mymlp::MlpOutputs out = mymlp::mlp_forward(x, w1, w2, rt::ProcessGroup{});
  return {{"hidden", out.hidden}, {"y", out.y}};
}

class MlpTest : public ::testing::TestWithParam<int> {};

TEST_P(MlpTest, MatchesOneRank) {
  const int tp = GetParam();
  const rtest::RankRun one = rtest::run_ranks(1, run_mlp);
  const rtest::RankRun many = rtest::run_ranks(tp, run_mlp);
  // Only the hidden slices, bitwise; then only the outputs, within a tolerance.
  std::vector<Outputs> hidden(many.outputs.size()), y(many.outputs.size());
  for (std::size_t r = 0; r < many.outputs.size(); ++r) {
    hidden[r] = {{"hidden", many.outputs[r].at("hidden")}};
    y[r] = {{"y", many.outputs[r].at("y")}};
  }
  EXPECT_TRUE(rtest::outputs_match(hidden, one.outputs[0], rtest::chunk(1, tp)));
  EXPECT_TRUE(rtest::outputs_match(y, one.outputs[0], rtest::whole(), rtest::Tolerance::within(1e-5, 1e-5)));
  // One all_reduce per rank, of the whole [tokens, hidden] f32 output, on the TP group.
  for (int r = 0; r < tp; ++r) {
    EXPECT_TRUE(rtest::issued_collectives(many.report, r, {{"all_reduce", tp, kTokens * kHidden * 4}}));
  }
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, MlpTest, ::testing::Values(2, 4));

// Exact-sum weights and inputs, and the row-parallel half alone (no gelu): any summation order
// gives the same integers, so the all-reduced output matches one rank bit for bit.
TEST(MlpExact, RowParallelSumIsBitwiseWithExactSumInputs) {
  const auto fn = [](int) -> Outputs {
    const rt::Tensor h = rtest::exact_sum_ints({kTokens, kFfn}, rtest::seed_for("h"));
    const rt::Tensor w2 = rtest::exact_sum_ints({kHidden, kFfn}, rtest::seed_for("w2"));
    const rt::ProcessGroup world;
    const std::int64_t shard = kFfn / world.size();
    rt::Tensor y = rt::matmul(h.narrow(1, world.rank() * shard, shard).contiguous(),
                              w2.narrow(1, world.rank() * shard, shard).contiguous(), false, true);
    rt::all_reduce(y);
    return {{"y", y}};
  };
  EXPECT_TRUE(rtest::matches_single_rank(4, fn, fn, rtest::whole()));
}

// The MLP's TP group inside a tp x dp grid: each DP replica computes the same result.
class MlpGridTest : public rtest::RankGridTest {};

TEST_P(MlpGridTest, EveryReplicaMatchesOneRank) {
  const rtest::RankRun one = rtest::run_ranks(1, run_mlp);
  const rtest::RankRun run = this->run([](const ranksim::tp::ParallelState& ps) -> Outputs {
    const rt::Tensor x = rtest::seeded_normal({kTokens, kHidden}, rtest::seed_for("x"));
    const rt::Tensor w1 = rtest::seeded_normal({kFfn, kHidden}, rtest::seed_for("w1"), rt::DType::f32, 0.0, 0.25);
    const rt::Tensor w2 = rtest::seeded_normal({kHidden, kFfn}, rtest::seed_for("w2"), rt::DType::f32, 0.0, 0.25);
    return {{"hidden", mymlp::mlp_forward(x, w1, w2, ps.tp().group).hidden}};
  });
  EXPECT_TRUE(rtest::outputs_match(run.outputs, one.outputs[0], rtest::chunk(1, grid().tp, rtest::tp_part(grid()))));
  EXPECT_TRUE(rtest::issued_count(run.report, 0, "all_reduce", 1));
}

INSTANTIATE_TEST_SUITE_P(Layouts, MlpGridTest, ::testing::Values(rtest::GridShape(2, 1, 2), rtest::GridShape(4)),
                         rtest::GridName());

}  // namespace

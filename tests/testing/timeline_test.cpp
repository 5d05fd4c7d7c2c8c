// ranksim::testing's assertions on virtual time and on the collectives each rank issued
// (testing/timeline.h), on a program whose collectives and sleeps are known in closed form.
#include "testing/timeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn_options.h"
#include "sim/engine.h"
#include "testing/ranks.h"

namespace ranksim::testing {
namespace {

using runtime::Tensor;
using ::testing::HasSubstr;

// 4 ranks: two all_reduces of 1024 f32 on the world, then ranks 0 and 2 all_gather 256 f32 on
// their pair; rank 3 sleeps 50 us first.
RankRun program(const RunOptions& run_opts = {}) {
  return run_ranks(
      4,
      [](int rank) -> Outputs {
        if (rank == 3) sim::this_rank::sleep_for(sim::Time::us(50));
        Tensor t = Tensor::full({1024}, rank + 1);
        runtime::all_reduce(t);
        runtime::all_reduce(t);
        const runtime::ProcessGroup pair = runtime::new_group({0, 2});
        if (pair.is_member()) {
          Tensor out = Tensor::zeros({512});
          runtime::AllgatherOptions opts;
          opts.group = pair;
          runtime::all_gather_into_tensor(out, Tensor::full({256}, rank), opts);
        }
        return {{"t", t}};
      },
      run_opts);
}

TEST(Timeline, ListsTheCollectivesEachRankIssued) {
  const RankRun run = program();
  const std::vector<IssuedCollective> c0 = collectives_of(run.report, 0);
  ASSERT_EQ(c0.size(), 3U);
  EXPECT_EQ(c0[0].kind, "all_reduce");
  EXPECT_EQ(c0[0].group, "world");
  EXPECT_EQ(c0[0].group_size, 4);
  EXPECT_EQ(c0[0].bytes, 4096);
  EXPECT_EQ(c0[0].dtype, "f32");
  EXPECT_EQ(c0[1].call, 1U);
  EXPECT_EQ(c0[2].kind, "all_gather");
  EXPECT_EQ(c0[2].group, "group[0, 2]");
  EXPECT_EQ(c0[2].group_size, 2);
  EXPECT_EQ(c0[2].bytes, 2048);  // nccl-tests counts all_gather by its output buffer
  EXPECT_LE(c0[0].start, c0[0].end);
  EXPECT_EQ(collectives_of(run.report, 1).size(), 2U);
  // The all_reduces could not start before rank 3 posted, 50 us in.
  EXPECT_GE(c0[0].end, sim::Time::us(50));

  EXPECT_TRUE(issued_count(run.report, 0, "all_reduce", 2));
  EXPECT_TRUE(issued_count(run.report, 2, "", 3));
  EXPECT_TRUE(
      issued_collectives(run.report, 2, {{"all_reduce", 4, 4096, "world"}, {"all_reduce"}, {"all_gather", 2, 2048}}));
}

TEST(Timeline, DifferencesAreNamed) {
  const RankRun run = program();
  const ::testing::AssertionResult count = issued_count(run.report, 1, "all_gather", 1);
  EXPECT_FALSE(count);
  EXPECT_THAT(count.message(), HasSubstr("rank 1 issued 0 all_gather, expected 1"));
  const ::testing::AssertionResult seq = issued_collectives(run.report, 0, {{"all_reduce"}, {"all_reduce", 0, 8192}});
  EXPECT_FALSE(seq);
  EXPECT_THAT(seq.message(), HasSubstr("rank 0: collective #1 is all_reduce on world (4 ranks, 4096 bytes f32"));
  EXPECT_THAT(seq.message(), HasSubstr("expected all_reduce, 8192 bytes"));
  const ::testing::AssertionResult too_few = issued_collectives(run.report, 1, {{}, {}, {}});
  EXPECT_THAT(too_few.message(), HasSubstr("collective #2 should be any collective, but it issued 2"));
  EXPECT_FALSE(issued_collectives(run.report, 0, std::vector<ExpectedCollective>(1)));  // two more than asked
}

TEST(Timeline, ClocksAndMakespan) {
  const RankRun run = program();
  // Rank 3 slept 50 us before the first collective; everyone else waited for it.
  EXPECT_TRUE(clock_within(run.report, 3, sim::Time::us(50), sim::Time::ms(10)));
  EXPECT_TRUE(makespan_within(run.report, sim::Time::us(50), sim::Time::ms(10)));
  const ::testing::AssertionResult early = clock_within(run.report, 1, sim::Time::zero(), sim::Time::us(1));
  EXPECT_FALSE(early);
  EXPECT_THAT(early.message(), HasSubstr("rank 1's clock is "));
  EXPECT_FALSE(clock_within(run.report, 9, sim::Time::zero(), sim::Time::max()));
  EXPECT_FALSE(makespan_within(run.report, sim::Time::zero(), sim::Time::us(50)));
}

TEST(Timeline, RefusesARunWithoutATrace) {
  RunOptions opts;
  opts.spawn.engine.trace = false;
  const RankRun run = program(opts);
  EXPECT_THROW(collectives_of(run.report, 0), Error);
}

}  // namespace
}  // namespace ranksim::testing

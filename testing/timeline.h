// Assertions on what a run did in virtual time: each rank's clock, the makespan, and the
// collectives each rank issued (count, kind, group, size).
//
// The collectives a rank issued are read from the run's trace (runtime::RunReport::trace: one
// comm span per member of each collective, in the order they completed), so the trace must be
// on (spawn's default). Point-to-point sends and receives are not collectives and are not listed.
// Kinds are named as the runtime names them: "all_reduce", "all_gather", "reduce_scatter",
// "all_to_all", "broadcast", "reduce", "gather", "scatter", "barrier".
//
// Example:
//   RankRun run = run_ranks(4, fn);
//   EXPECT_TRUE(issued_count(run.report, 0, "all_reduce", 2));
//   EXPECT_TRUE(issued_collectives(run.report, 1, {{"all_reduce", 4, 4096}, {"all_gather", 2}}));
//   EXPECT_TRUE(clock_within(run.report, 3, sim::Time::us(10), sim::Time::ms(1)));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/distributed/run_report.h"
#include "sim/time.h"

namespace ranksim::testing {

// One collective as one member saw it.
struct IssuedCollective {
  std::string kind;        // "all_reduce", ...
  std::string group;       // "world", "group[0, 2]", "tp[0, 1]"
  int group_size = 0;      // members
  std::uint64_t call = 0;  // call number within the group
  std::int64_t bytes = 0;  // nccl-tests "size" (all_gather: the output buffer)
  std::string dtype;       // "f32", ...
  sim::Time start;         // this rank's post
  sim::Time end;           // this rank's completion
};

// The collectives `rank` took part in, in trace order. Throws ranksim::Error when the run
// recorded collectives but no trace (trace turned off).
std::vector<IssuedCollective> collectives_of(const runtime::RunReport& report, int rank);

// A pattern for one issued collective; an empty, zero or negative field matches anything:
// {} is any collective, {"all_reduce", 4, 4096} an all_reduce on 4 ranks of 4096 bytes,
// {"all_gather", 0, -1, "group[0, 2]"} an all_gather on that group.
struct ExpectedCollective {
  ExpectedCollective(std::string kind_ = "", int group_size_ = 0, std::int64_t bytes_ = -1,  // NOLINT
                     std::string group_ = "")
      : kind(std::move(kind_)), group(std::move(group_)), group_size(group_size_), bytes(bytes_) {}
  std::string kind;         // Default: any
  std::string group;        // Default: any
  int group_size = 0;       // Default: any
  std::int64_t bytes = -1;  // Default: any
};

// `rank` issued exactly these collectives, in this order; the failure names the first one that
// differs and lists what the rank issued.
::testing::AssertionResult issued_collectives(const runtime::RunReport& report, int rank,
                                              const std::vector<ExpectedCollective>& expected);
// `rank` issued `count` collectives of `kind` (any kind when empty).
::testing::AssertionResult issued_count(const runtime::RunReport& report, int rank, std::string_view kind, int count);
// lo <= rank's final clock <= hi.
::testing::AssertionResult clock_within(const runtime::RunReport& report, int rank, sim::Time lo, sim::Time hi);
// lo <= makespan (the latest rank's clock) <= hi.
::testing::AssertionResult makespan_within(const runtime::RunReport& report, sim::Time lo, sim::Time hi);

}  // namespace ranksim::testing

// Running a function on N ranks and on one rank, and comparing what they return.
//
// The test users write for a parallel layer: run it on N ranks of a topology, run it on one rank
// (the same code on a world of one, or a plain reference), and check that each rank's outputs are
// the reference's (whole, or the rank's shard) bit for bit or within a tolerance. A failure names
// the first differing element: rank, tensor, index, both values (testing/compare.h).
//
// A rank function returns its outputs by name (Outputs); run_ranks collects them per rank after
// spawn() returns, with the run's report (virtual clocks, collectives, trace: testing/timeline.h).
// Everything runs in the calling thread on a fresh run, so two calls never share state and the
// same inputs give the same bits on every call.
//
// Example (a column-parallel linear: rank r holds rows [r*n/4, (r+1)*n/4) of W and of y):
//   auto layer = [](int rank) -> Outputs {
//     const int ws = runtime::get_world_size();
//     Tensor x = seeded_normal({8, 16}, 1), w = seeded_normal({32, 16}, 2);
//     Tensor w_r = w.narrow(0, rank * 32 / ws, 32 / ws).contiguous();
//     return {{"y", runtime::matmul(x, w_r, false, true)}};  // y_r = x w_r^T: [8, 32 / ws]
//   };
//   EXPECT_TRUE(matches_single_rank(4, layer, layer, chunk(1, 4)));  // bitwise
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn_options.h"
#include "runtime/tensor/tensor.h"
#include "testing/compare.h"

namespace ranksim::testing {

// A rank's outputs by name (ordered by name, so reports are deterministic).
using Outputs = std::map<std::string, runtime::Tensor>;
using RankFn = std::function<Outputs(int rank)>;

struct RunOptions {
  // How the ranks run: spawn.topology is the machine (it must have at least as many devices as
  // ranks), spawn.engine.trace must stay on for testing/timeline.h. Default: spawn's defaults,
  // an ideal node of N devices, sim backend, trace on.
  runtime::SpawnOptions spawn;
};

struct RankRun {
  std::vector<Outputs> outputs;  // outputs[rank]
  runtime::RunReport report;
};

// Runs fn on nranks ranks (runtime::spawn) and returns each rank's outputs and the report.
// Throws what spawn throws (sim::RankFailure listing each failing rank, sim::DeadlockError).
// REQUIRES: nranks >= 1.
RankRun run_ranks(int nranks, const RankFn& fn, const RunOptions& opts = {});

// What rank `rank`'s output `name` must equal, made from the single-rank reference's outputs.
// Throwing ranksim::Error (e.g. a name the reference lacks) fails the comparison with its message.
using ExpectedOf = std::function<runtime::Tensor(int rank, const std::string& name, const Outputs& reference)>;

// Every rank holds the reference's whole tensor of the same name (replicated outputs, the
// row-parallel output after its all_reduce).
ExpectedOf whole();
// Rank r holds part part_of(r) of `parts` equal parts of the reference along dim (a column
// shard: chunk(1, tp)). Default part_of: r % parts (TP varies fastest in Megatron's grid).
// REQUIRES: the reference's size along dim divides by parts.
ExpectedOf chunk(std::int64_t dim, int parts, std::function<int(int rank)> part_of = {});
// A rule per output name; a name without a rule fails the comparison.
ExpectedOf by_name(std::map<std::string, ExpectedOf> rules);

// Checks every output of every rank of `parallel` against expected(rank, name, reference), in
// rank order then name order; the first difference is the failure message. A rank returning no
// outputs at all fails too (a test comparing nothing proves nothing).
::testing::AssertionResult outputs_match(const std::vector<Outputs>& parallel, const Outputs& reference,
                                         const ExpectedOf& expected, const Tolerance& tol = {});

// Runs `parallel` on nranks ranks and `reference` on one rank (a world of one, with the same
// options), then outputs_match. The usual call passes the same function twice.
::testing::AssertionResult matches_single_rank(int nranks, const RankFn& parallel, const RankFn& reference,
                                               const ExpectedOf& expected, const Tolerance& tol = {},
                                               const RunOptions& opts = {});

}  // namespace ranksim::testing

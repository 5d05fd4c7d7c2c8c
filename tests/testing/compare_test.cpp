// ranksim::testing's comparisons (testing/compare.h, testing/ranks.h): a correct parallel layer
// passes against one rank, and a deliberately wrong one is reported with the right rank, tensor,
// index and values. The wrong layers are built so that the first difference is known in closed
// form (exact-sum inputs: every value is an integer).
#include "testing/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/ops.h"
#include "testing/inputs.h"
#include "testing/ranks.h"

namespace ranksim::testing {
namespace {

using runtime::Tensor;
using ::testing::HasSubstr;

TEST(TensorsMatch, BitwiseNamesTheFirstDifference) {
  const Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 7, 9}, {2, 3});
  const auto m = first_mismatch(a, b, Tolerance::exact(), 2, "y");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rank, 2);
  EXPECT_EQ(m->tensor, "y");
  EXPECT_EQ(m->index, 4);
  EXPECT_EQ(m->coords, (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(m->expected, 5.0);
  EXPECT_EQ(m->actual, 7.0);
  const ::testing::AssertionResult r = tensors_match(a, b, {}, 2, "y");
  EXPECT_FALSE(r);
  EXPECT_THAT(r.message(), HasSubstr("rank 2, tensor \"y\", index 4 (at [1, 1]): expected 5, got 7 (bitwise)"));
  EXPECT_TRUE(tensors_match(a, a.clone()));
}

TEST(TensorsMatch, BitwiseTellsSignedZerosApartAndNaNsAlike) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor a = Tensor::from_vector(std::vector<double>{0.0, nan}, {2});
  const Tensor b = Tensor::from_vector(std::vector<double>{-0.0, nan}, {2});
  const auto m = first_mismatch(a, b);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->index, 0);
  EXPECT_TRUE(std::signbit(m->actual));
  EXPECT_TRUE(tensors_match(a, b, Tolerance::within(0.0)));  // 0 == -0 and NaN matches NaN there
}

TEST(TensorsMatch, ToleranceIsAbsolutePlusRelative) {
  const Tensor e = Tensor::from_vector(std::vector<double>{100.0, 1.0}, {2});
  // |diff| 0.5 at index 0: allowed by rel 1e-2 (1.0 + 0) but not by abs 0.25 alone.
  const Tensor a = Tensor::from_vector(std::vector<double>{100.5, 1.0}, {2});
  EXPECT_TRUE(tensors_match(e, a, Tolerance::within(0.0, 1e-2)));
  const ::testing::AssertionResult r = tensors_match(e, a, Tolerance::within(0.25), -1, "w");
  EXPECT_FALSE(r);
  EXPECT_THAT(r.message(), HasSubstr("tensor \"w\", index 0: expected 100, got 100.5 (|diff| 0.5 > 0.25"));
  const Tensor nan = Tensor::from_vector(std::vector<double>{std::numeric_limits<double>::quiet_NaN(), 1.0}, {2});
  EXPECT_FALSE(tensors_match(e, nan, Tolerance::within(1e9)));
}

TEST(TensorsMatch, ShapeAndDtypeDifferencesAreNamed) {
  const Tensor a = Tensor::zeros({2, 3});
  EXPECT_THAT(tensors_match(a, Tensor::zeros({3, 2}), {}, 0, "x").message(),
              HasSubstr("rank 0, tensor \"x\": shape [3, 2], expected [2, 3]"));
  EXPECT_THAT(tensors_match(a, Tensor::zeros({2, 3}, runtime::DType::f64)).message(),
              HasSubstr("dtype f64, expected f32"));
}

// A row-parallel linear: rank r holds columns [r*k, (r+1)*k) of x and of w, computes its partial
// product and all-reduces it. `bug` picks a deliberate mistake.
enum class Bug { none, skip_all_reduce, rank2_element };

RankFn row_parallel(Bug bug) {
  return [bug](int rank) -> Outputs {
    const int ws = runtime::get_world_size();
    const Tensor x = exact_sum_ints({4, 8}, seed_for("x"));
    const Tensor w = exact_sum_ints({6, 8}, seed_for("w"));
    const std::int64_t k = 8 / ws;
    Tensor y =
        runtime::matmul(x.narrow(1, rank * k, k).contiguous(), w.narrow(1, rank * k, k).contiguous(), false, true);
    if (bug != Bug::skip_all_reduce) runtime::all_reduce(y);
    if (bug == Bug::rank2_element && rank == 2) {
      std::vector<float> v = y.to_vector<float>();
      v[7] += 1.0F;  // index 7 of [4, 6] is [1, 1]
      y = Tensor::from_vector(v, y.shape());
    }
    return {{"y", y}};
  };
}

TEST(MatchesSingleRank, ACorrectRowParallelLayerMatchesBitwise) {
  const RankFn fn = row_parallel(Bug::none);
  EXPECT_TRUE(matches_single_rank(4, fn, fn, whole()));
}

TEST(MatchesSingleRank, AWrongElementIsReportedWithItsRankIndexAndValues) {
  const RankFn good = row_parallel(Bug::none);
  const RankRun one = run_ranks(1, good);
  const double want = one.outputs[0].at("y").to_vector<double>()[7];
  const ::testing::AssertionResult r = matches_single_rank(4, row_parallel(Bug::rank2_element), good, whole());
  ASSERT_FALSE(r);
  std::ostringstream expected;
  expected << "rank 2, tensor \"y\", index 7 (at [1, 1]): expected " << want << ", got " << want + 1;
  EXPECT_THAT(r.message(), HasSubstr(expected.str()));
}

TEST(MatchesSingleRank, AMissingAllReduceFailsOnRankZeroFirst) {
  const RankFn good = row_parallel(Bug::none);
  const RankRun one = run_ranks(1, good);
  const RankRun bad = run_ranks(2, row_parallel(Bug::skip_all_reduce));
  // Rank 0's partial product over columns [0, 4): the first element where it differs from the
  // full product is the first whose columns [4, 8) contribute anything.
  const std::vector<double> full = one.outputs[0].at("y").to_vector<double>();
  const std::vector<double> part = bad.outputs[0].at("y").to_vector<double>();
  std::size_t first = 0;
  while (first < full.size() && full[first] == part[first]) ++first;
  ASSERT_LT(first, full.size());
  const ::testing::AssertionResult r = outputs_match(bad.outputs, one.outputs[0], whole());
  ASSERT_FALSE(r);
  std::ostringstream expected;
  expected << "rank 0, tensor \"y\", index " << first;
  EXPECT_THAT(r.message(), HasSubstr(expected.str()));
  expected.str("");
  expected << "expected " << full[first] << ", got " << part[first];
  EXPECT_THAT(r.message(), HasSubstr(expected.str()));
}

TEST(MatchesSingleRank, ChunksCompareEachRanksShard) {
  // Column-parallel: rank r computes rows [r*3, (r+1)*3) of w, i.e. columns of y.
  const RankFn fn = [](int rank) -> Outputs {
    const int ws = runtime::get_world_size();
    const Tensor x = seeded_normal({4, 8}, 1), w = seeded_normal({6, 8}, 2);
    const std::int64_t n = 6 / ws;
    return {{"y", runtime::matmul(x, w.narrow(0, rank * n, n).contiguous(), false, true)}};
  };
  EXPECT_TRUE(matches_single_rank(2, fn, fn, chunk(1, 2)));  // no sum crosses ranks: bitwise
  // The same shards compared as whole tensors: a shape difference on rank 0.
  EXPECT_THAT(matches_single_rank(2, fn, fn, whole()).message(),
              HasSubstr("rank 0, tensor \"y\": shape [4, 3], expected [4, 6]"));
  // A rank returning nothing fails rather than passing vacuously.
  const RankFn nothing = [](int) { return Outputs{}; };
  EXPECT_THAT(matches_single_rank(2, nothing, fn, whole()).message(), HasSubstr("rank 0 returned no outputs"));
  EXPECT_THAT(matches_single_rank(2, fn, fn, by_name({})).message(), HasSubstr("no rule for output \"y\""));
}

}  // namespace
}  // namespace ranksim::testing

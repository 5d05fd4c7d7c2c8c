#include "models/bridge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "tp/rank_grid.h"

namespace ranksim::models {
namespace {

using runtime::Tensor;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using Lists = std::vector<std::vector<int>>;
using D = DestCoords;

constexpr int kWorld = 8;

tp::RankGrid src_grid(int tp, int dp) { return tp::RankGrid({{"tp", tp}, {"dp", dp}}, kWorld); }
tp::RankGrid dst_grid(int tp, int cp, int dp) { return tp::RankGrid({{"tp", tp}, {"cp", cp}, {"dp", dp}}, kWorld); }

// Every world rank in exactly one group.
void expect_covers_world(const Lists& groups) {
  std::vector<int> seen(kWorld, 0);
  for (const auto& g : groups) {
    for (int r : g) {
      ASSERT_GE(r, 0);
      ASSERT_LT(r, kWorld);
      ++seen[static_cast<std::size_t>(r)];
    }
  }
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(seen[static_cast<std::size_t>(r)], 1) << "rank " << r;
}

std::vector<D> dest_table(const ColocatedBridge& b) {
  std::vector<D> out;
  for (int r = 0; r < kWorld; ++r) out.push_back(b.dest_coords(r));
  return out;
}

std::vector<int> slices(const ColocatedBridge& b) {
  std::vector<int> out;
  for (int r = 0; r < kWorld; ++r) out.push_back(b.slice_index(r));
  return out;
}

// A [batch, seq, hidden] f32 tensor with element (i, q, h) = f(i, q, h).
Tensor make(std::int64_t batch, std::int64_t seq, std::int64_t hidden,
            const std::function<double(std::int64_t, std::int64_t, std::int64_t)>& f) {
  Tensor t = Tensor::zeros({batch, seq, hidden});
  for (std::int64_t i = 0; i < batch; ++i)
    for (std::int64_t q = 0; q < seq; ++q)
      for (std::int64_t h = 0; h < hidden; ++h) t.set({i, q, h}, f(i, q, h));
  return t;
}

// Load-balanced CP sharding of seq into 2*cp chunks: CP rank c owns chunks c and 2*cp-1-c.
bool owns(int cp_rank, int cp, std::int64_t q, std::int64_t seq) {
  const std::int64_t chunk = q / (seq / (2 * cp));
  return chunk == cp_rank || chunk == 2 * cp - 1 - cp_rank;
}

// What a CP-sharded destination's backward leaves on CP rank c: full's values at c's positions,
// zero elsewhere.
Tensor zero_padded(const Tensor& full, int cp_rank, int cp) {
  const std::int64_t seq = full.size(1);
  return make(full.size(0), seq, full.size(2), [&](std::int64_t i, std::int64_t q, std::int64_t h) {
    return owns(cp_rank, cp, q, seq) ? full.at({i, q, h}) : 0.0;
  });
}

// Exact-sum values: activation row i of source replica s, and gradient row i of destination
// replica d.
double act(int s, std::int64_t i, std::int64_t q, std::int64_t h) {
  return 1000.0 * s + 100.0 * static_cast<double>(i) + 10.0 * static_cast<double>(q) + static_cast<double>(h) + 1;
}
double grad_val(int d, std::int64_t i, std::int64_t q, std::int64_t h) {
  return -(5000.0 * d + 100.0 * static_cast<double>(i) + 10.0 * static_cast<double>(q) + static_cast<double>(h) + 1);
}

// --- grid set -------------------------------------------------------------------------------------

TEST(GridSet, RankAsksItsCoordinatesInEachGrid) {
  GridSet grids(kWorld);
  grids.add("encoder", src_grid(2, 4));
  grids.add("llm", dst_grid(2, 2, 2));
  EXPECT_EQ(grids.names(), (std::vector<std::string>{"encoder", "llm"}));
  EXPECT_EQ(grids.coords("encoder", 5), (std::map<std::string, int>{{"tp", 1}, {"dp", 2}}));
  EXPECT_EQ(grids.coords("llm", 5), (std::map<std::string, int>{{"tp", 1}, {"cp", 0}, {"dp", 1}}));
  EXPECT_THAT([&] { grids.add("llm", dst_grid(2, 2, 2)); }, ThrowsMessage<Error>(HasSubstr("'llm' exists already")));
  EXPECT_THAT(
      [&] {
        grids.add("big", tp::RankGrid({{"tp", 16}}, 16));
      },
      ThrowsMessage<Error>(AllOf(HasSubstr("16 ranks"), HasSubstr("has 8"))));
  EXPECT_THAT([&] { (void)grids.grid("vision"); }, ThrowsMessage<Error>(HasSubstr("no grid named 'vision'")));
}

TEST(GridSet, EachGridCreatesItsOwnGroupsInsideARun) {
  std::vector<std::vector<int>> enc_tp(kWorld), llm_cp(kWorld);
  runtime::spawn(
      [&](int rank) {
        GridSet grids(kWorld);
        tp::RankGrid& enc = grids.add("encoder", src_grid(2, 4));
        tp::RankGrid& llm = grids.add("llm", dst_grid(2, 2, 2));
        enc_tp[static_cast<std::size_t>(rank)] = enc.create_group({"tp"}).ranks();
        llm_cp[static_cast<std::size_t>(rank)] = llm.create_group({"cp"}).ranks();
      },
      kWorld);
  EXPECT_EQ(enc_tp[5], (std::vector<int>{4, 5}));
  EXPECT_EQ(llm_cp[5], (std::vector<int>{5, 7}));
  EXPECT_EQ(llm_cp[2], (std::vector<int>{0, 2}));
}

// --- rank mappings and group tables -----------------------------------------------------------

TEST(BridgeMapping, FanInTp2Dp4ToTp2Cp2Dp2) {
  tp::RankGrid src = src_grid(2, 4), dst = dst_grid(2, 2, 2);
  ColocatedBridge b(src, dst);
  EXPECT_EQ(b.mode(), BridgeMode::fan_in);
  EXPECT_EQ(b.ratio(), 2);
  // (dp, tp, cp) of every destination rank.
  EXPECT_EQ(dest_table(b),
            (std::vector<D>{{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}, {1, 0, 0}, {1, 1, 0}, {1, 0, 1}, {1, 1, 1}}));
  EXPECT_EQ(b.feeding_src_dp(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(b.feeding_src_dp(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(slices(b), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(b.fan_in_groups(), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_TRUE(b.fan_out_groups().empty());
  EXPECT_EQ(b.cp_groups(), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  expect_covers_world(b.fan_in_groups());
  expect_covers_world(b.cp_groups());
}

TEST(BridgeMapping, FanInTp2Dp4ToTp4Cp1Dp2) {
  tp::RankGrid src = src_grid(2, 4), dst = dst_grid(4, 1, 2);
  ColocatedBridge b(src, dst);
  EXPECT_EQ(b.mode(), BridgeMode::fan_in);
  EXPECT_EQ(dest_table(b),
            (std::vector<D>{{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 3, 0}, {1, 0, 0}, {1, 1, 0}, {1, 2, 0}, {1, 3, 0}}));
  EXPECT_EQ(slices(b), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(b.fan_in_groups(), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(b.cp_groups(), (Lists{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  expect_covers_world(b.fan_in_groups());
  expect_covers_world(b.cp_groups());
}

TEST(BridgeMapping, FanOutTp4Dp2ToTp1Cp2Dp4) {
  tp::RankGrid src = src_grid(4, 2), dst = dst_grid(1, 2, 4);
  ColocatedBridge b(src, dst);
  EXPECT_EQ(b.mode(), BridgeMode::fan_out);
  EXPECT_EQ(b.ratio(), 2);
  EXPECT_EQ(dest_table(b),
            (std::vector<D>{{0, 0, 0}, {0, 0, 1}, {1, 0, 0}, {1, 0, 1}, {2, 0, 0}, {2, 0, 1}, {3, 0, 0}, {3, 0, 1}}));
  EXPECT_EQ(b.feeding_src_dp(3), (std::vector<int>{1}));
  EXPECT_EQ(slices(b), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  // One group per (source dp, destination tp, cp): the cp=1 ranks get their own groups.
  EXPECT_EQ(b.fan_out_groups(), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_TRUE(b.fan_in_groups().empty());
  EXPECT_EQ(b.cp_groups(), (Lists{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  expect_covers_world(b.fan_out_groups());
  expect_covers_world(b.cp_groups());
}

TEST(BridgeMapping, FanOutTp4Dp2ToTp2Cp1Dp4) {
  tp::RankGrid src = src_grid(4, 2), dst = dst_grid(2, 1, 4);
  ColocatedBridge b(src, dst);
  EXPECT_EQ(b.mode(), BridgeMode::fan_out);
  EXPECT_EQ(dest_table(b),
            (std::vector<D>{{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}, {2, 0, 0}, {2, 1, 0}, {3, 0, 0}, {3, 1, 0}}));
  EXPECT_EQ(slices(b), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(b.fan_out_groups(), (Lists{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  expect_covers_world(b.fan_out_groups());
  expect_covers_world(b.cp_groups());
}

TEST(BridgeMapping, EqualDpIsIdentityWithoutFanGroups) {
  tp::RankGrid src = src_grid(2, 4), dst = dst_grid(1, 2, 4);
  ColocatedBridge b(src, dst);
  EXPECT_EQ(b.mode(), BridgeMode::identity);
  EXPECT_EQ(b.ratio(), 1);
  EXPECT_EQ(b.feeding_src_dp(2), (std::vector<int>{2}));
  EXPECT_TRUE(b.fan_in_groups().empty());
  EXPECT_TRUE(b.fan_out_groups().empty());
}

// The groups the run creates are the tables' groups, on every rank.
TEST(BridgeGroups, CreatedGroupsMatchTheTables) {
  struct Case {
    int src_tp, src_dp, dst_tp, dst_cp, dst_dp;
  };
  for (const Case c : {Case{2, 4, 2, 2, 2}, Case{2, 4, 4, 1, 2}, Case{4, 2, 1, 2, 4}, Case{4, 2, 2, 1, 4}}) {
    std::vector<std::vector<int>> fan(kWorld), cp(kWorld);
    Lists table;
    runtime::spawn(
        [&](int rank) {
          tp::RankGrid src = src_grid(c.src_tp, c.src_dp);
          tp::RankGrid dst = dst_grid(c.dst_tp, c.dst_cp, c.dst_dp);
          ColocatedBridge b(src, dst);
          b.create_groups();
          b.create_groups();  // idempotent
          fan[static_cast<std::size_t>(rank)] = b.fan_group().ranks();
          if (c.dst_cp > 1) cp[static_cast<std::size_t>(rank)] = b.cp_group().ranks();
          if (rank == 0) {
            table = b.mode() == BridgeMode::fan_in ? b.fan_in_groups() : b.fan_out_groups();
          }
        },
        kWorld);
    for (const auto& g : table) {
      for (int r : g) EXPECT_EQ(fan[static_cast<std::size_t>(r)], g) << "rank " << r;
    }
    if (c.dst_cp > 1) {
      tp::RankGrid dst = dst_grid(c.dst_tp, c.dst_cp, c.dst_dp);
      for (int r = 0; r < kWorld; ++r) {
        EXPECT_EQ(cp[static_cast<std::size_t>(r)], dst.group_of({"cp"}, r));
      }
    }
  }
}

// --- data round trips -------------------------------------------------------------------------

constexpr std::int64_t kSeq = 4, kHidden = 2;

// Fan-in, src TP2/DP4 -> dst TP2/CP2/DP2: forward concatenates the two feeding replicas' batches;
// backward sums the zero-padded CP gradients and hands each source replica its rows.
TEST(BridgeData, FanInForwardGathersAndBackwardSumsCpThenNarrows) {
  constexpr std::int64_t kB = 2;  // per source replica
  std::vector<Tensor> fwd(kWorld), bwd(kWorld), no_sum(kWorld);
  std::vector<int> src_dp(kWorld), dst_dp(kWorld);
  runtime::spawn(
      [&](int rank) {
        tp::RankGrid src = src_grid(2, 4), dst = dst_grid(2, 2, 2);
        ColocatedBridge b(src, dst);
        const auto r = static_cast<std::size_t>(rank);
        const int s = b.src_dp_index(rank);
        const DestCoords d = b.dest_coords(rank);
        src_dp[r] = s;
        dst_dp[r] = d.dp;
        fwd[r] = b.forward(make(kB, kSeq, kHidden, [&](auto i, auto q, auto h) { return act(s, i, q, h); }));
        const Tensor full =
            make(2 * kB, kSeq, kHidden, [&](auto i, auto q, auto h) { return grad_val(d.dp, i, q, h); });
        const Tensor padded = zero_padded(full, d.cp, 2);
        const Tensor padded_copy = padded.clone();
        bwd[r] = b.backward(padded);
        EXPECT_TRUE(runtime::bitwise_equal(padded, padded_copy)) << "backward changed its input";
        // What a bridge without the CP sum would hand back.
        no_sum[r] = padded.narrow(0, b.slice_index(rank) * kB, kB).clone();
      },
      kWorld);
  auto is_full_grad = [&](const Tensor& g, int r) {
    if (g.shape() != runtime::Shape{kB, kSeq, kHidden}) return false;
    const int s = src_dp[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < kB; ++i)
      for (std::int64_t q = 0; q < kSeq; ++q)
        for (std::int64_t h = 0; h < kHidden; ++h)
          if (g.at({i, q, h}) != grad_val(s / 2, (s % 2) * kB + i, q, h)) return false;
    return true;
  };
  for (int r = 0; r < kWorld; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const Tensor& y = fwd[ur];
    ASSERT_EQ(y.shape(), (runtime::Shape{2 * kB, kSeq, kHidden})) << "rank " << r;
    const int d = dst_dp[ur];
    for (std::int64_t i = 0; i < 2 * kB; ++i)
      for (std::int64_t q = 0; q < kSeq; ++q)
        for (std::int64_t h = 0; h < kHidden; ++h)
          ASSERT_EQ(y.at({i, q, h}), act(2 * d + static_cast<int>(i / kB), i % kB, q, h))
              << "rank " << r << " row " << i;
    EXPECT_TRUE(is_full_grad(bwd[ur], r)) << "rank " << r;
    EXPECT_FALSE(is_full_grad(no_sum[ur], r)) << "rank " << r << ": the oracle must catch a "
                                              << "missing CP sum";
  }
}

// Fan-out, src TP4/DP2 -> dst TP1/CP2/DP4: forward narrows to the destination replica's half;
// backward sums over CP, then gathers the halves over the per-(src dp, tp, cp) groups.
TEST(BridgeData, FanOutForwardNarrowsAndBackwardSumsCpThenGathers) {
  constexpr std::int64_t kB = 4;  // per source replica
  std::vector<Tensor> fwd(kWorld), bwd(kWorld), no_sum(kWorld);
  std::vector<int> src_dp(kWorld), dst_dp(kWorld);
  runtime::spawn(
      [&](int rank) {
        tp::RankGrid src = src_grid(4, 2), dst = dst_grid(1, 2, 4);
        ColocatedBridge b(src, dst);
        const auto r = static_cast<std::size_t>(rank);
        const int s = b.src_dp_index(rank);
        const DestCoords d = b.dest_coords(rank);
        src_dp[r] = s;
        dst_dp[r] = d.dp;
        fwd[r] = b.forward(make(kB, kSeq, kHidden, [&](auto i, auto q, auto h) { return act(s, i, q, h); }));
        const Tensor full =
            make(kB / 2, kSeq, kHidden, [&](auto i, auto q, auto h) { return grad_val(d.dp, i, q, h); });
        const Tensor padded = zero_padded(full, d.cp, 2);
        bwd[r] = b.backward(padded);
        // A bridge without the CP sum: the same gather of the zero-padded pieces.
        runtime::AllgatherOptions opts;
        opts.group = b.fan_group();
        no_sum[r] = Tensor::zeros({kB, kSeq, kHidden});
        runtime::all_gather_into_tensor(no_sum[r], padded, opts);
      },
      kWorld);
  auto is_full_grad = [&](const Tensor& g, int r) {
    if (g.shape() != runtime::Shape{kB, kSeq, kHidden}) return false;
    const int s = src_dp[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < kB; ++i)
      for (std::int64_t q = 0; q < kSeq; ++q)
        for (std::int64_t h = 0; h < kHidden; ++h)
          if (g.at({i, q, h}) != grad_val(2 * s + static_cast<int>(i / 2), i % 2, q, h)) return false;
    return true;
  };
  for (int r = 0; r < kWorld; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const Tensor& y = fwd[ur];
    ASSERT_EQ(y.shape(), (runtime::Shape{kB / 2, kSeq, kHidden})) << "rank " << r;
    const int d = dst_dp[ur];
    for (std::int64_t i = 0; i < kB / 2; ++i)
      for (std::int64_t q = 0; q < kSeq; ++q)
        for (std::int64_t h = 0; h < kHidden; ++h)
          ASSERT_EQ(y.at({i, q, h}), act(d / 2, (d % 2) * (kB / 2) + i, q, h)) << "rank " << r;
    EXPECT_TRUE(is_full_grad(bwd[ur], r)) << "rank " << r;
    EXPECT_FALSE(is_full_grad(no_sum[ur], r)) << "rank " << r;
  }
}

// Equal DP: forward is the identity; backward still sums over CP.
TEST(BridgeData, IdentityPassesThroughAndSumsCp) {
  std::vector<Tensor> fwd(kWorld), bwd(kWorld), in(kWorld);
  std::vector<int> dp(kWorld);
  runtime::spawn(
      [&](int rank) {
        tp::RankGrid src = src_grid(2, 4), dst = dst_grid(1, 2, 4);
        ColocatedBridge b(src, dst);
        const auto r = static_cast<std::size_t>(rank);
        const DestCoords d = b.dest_coords(rank);
        dp[r] = d.dp;
        in[r] = make(2, kSeq, kHidden, [&](auto i, auto q, auto h) { return act(d.dp, i, q, h); });
        fwd[r] = b.forward(in[r]);
        const Tensor full = make(2, kSeq, kHidden, [&](auto i, auto q, auto h) { return grad_val(d.dp, i, q, h); });
        bwd[r] = b.backward(zero_padded(full, d.cp, 2));
      },
      kWorld);
  for (int r = 0; r < kWorld; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    EXPECT_TRUE(runtime::bitwise_equal(fwd[ur], in[ur]));
    EXPECT_TRUE(runtime::bitwise_equal(
        bwd[ur], make(2, kSeq, kHidden, [&](auto i, auto q, auto h) { return grad_val(dp[ur], i, q, h); })));
  }
}

TEST(BridgeData, FanOutBatchMustSplit) {
  EXPECT_THAT(
      [] {
        runtime::spawn(
            [](int) {
              tp::RankGrid src = src_grid(4, 2), dst = dst_grid(1, 2, 4);
              ColocatedBridge b(src, dst);
              (void)b.forward(Tensor::zeros({3, kSeq, kHidden}));
            },
            kWorld);
      },
      ThrowsMessage<sim::RankFailure>(HasSubstr("batch 3")));
}

// --- bad layouts ------------------------------------------------------------------------------

TEST(BridgeErrors, SourceWithContextParallelismIsRejected) {
  tp::RankGrid src({{"tp", 2}, {"cp", 2}, {"dp", 2}}, kWorld), dst = dst_grid(2, 2, 2);
  EXPECT_THAT(
      [&] { ColocatedBridge b(src, dst); },
      ThrowsMessage<Error>(AllOf(HasSubstr("source grid has cp=2"), HasSubstr("must not be context-parallel"))));
}

TEST(BridgeErrors, DestinationWithDpBeforeCpIsRejectedWithTheReason) {
  tp::RankGrid src = src_grid(2, 4);
  tp::RankGrid dst({{"tp", 2}, {"dp", 2}, {"cp", 2}}, kWorld);
  EXPECT_THAT([&] { ColocatedBridge b(src, dst); },
              ThrowsMessage<Error>(AllOf(HasSubstr("orders dp before cp"), HasSubstr("cp must vary faster than dp"),
                                         HasSubstr("tp=2 x dp=2 x cp=2"))));
}

TEST(BridgeErrors, WorldSizesThatDisagreeAreRejectedNamingBoth) {
  tp::RankGrid src = src_grid(2, 4);
  tp::RankGrid dst({{"tp", 2}, {"cp", 2}, {"dp", 4}}, 16);
  EXPECT_THAT([&] { ColocatedBridge b(src, dst); },
              ThrowsMessage<Error>(AllOf(HasSubstr("world of 8 ranks"), HasSubstr("one of 16"),
                                         HasSubstr("tp=2 x dp=4"), HasSubstr("tp=2 x cp=2 x dp=4"))));
}

TEST(BridgeErrors, OtherBadLayouts) {
  tp::RankGrid src = src_grid(2, 4);
  tp::RankGrid dp3({{"tp", 2}, {"dp", 3}}, 6), dst6({{"tp", 1}, {"cp", 3}, {"dp", 2}}, 6);
  EXPECT_THAT([&] { ColocatedBridge b(dp3, dst6); }, ThrowsMessage<Error>(HasSubstr("not multiples of each other")));
  tp::RankGrid src_dp_inner({{"dp", 4}, {"tp", 2}}, kWorld), dst = dst_grid(2, 2, 2);
  EXPECT_THAT([&] { ColocatedBridge b(src_dp_inner, dst); }, ThrowsMessage<Error>(HasSubstr("does not feed")));
  tp::RankGrid with_pp({{"tp", 2}, {"cp", 2}, {"dp", 1}, {"pp", 2}}, kWorld);
  EXPECT_THAT([&] { ColocatedBridge b(src, with_pp); }, ThrowsMessage<Error>(HasSubstr("dimension 'pp' has size 2")));
  tp::RankGrid no_dp({{"tp", 8}}, kWorld);
  EXPECT_THAT([&] { ColocatedBridge b(src, no_dp); }, ThrowsMessage<Error>(HasSubstr("no 'dp' dimension")));
}

}  // namespace
}  // namespace ranksim::models

// Every collective x algorithm x group size 1..9 x element count, executed on float64 buffers
// holding exact-sum inputs (small integers: any reduction order gives the same bits), checked
// against closed-form results. Also checks that every step is hazard-free, which the executor
// relies on.
#include "runtime/distributed/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/distributed/execute.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using ::testing::HasSubstr;

double input(int rank, int64_t e) { return (rank + 1) * 1000.0 + static_cast<double>(e % 97); }

struct Buffers {
  std::vector<std::vector<double>> data;
  std::vector<std::byte*> ptrs;
  Buffers(int n, int64_t elems) : data(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(elems))) {
    for (auto& d : data) ptrs.push_back(reinterpret_cast<std::byte*>(d.data()));
  }
  void run(const Schedule& s) {
    execute_schedule(s, ptrs, sizeof(double), [](std::byte* dst, const std::byte* src, int64_t n) {
      auto* d = reinterpret_cast<double*>(dst);
      const auto* x = reinterpret_cast<const double*>(src);
      for (int64_t k = 0; k < n; ++k) d[k] += x[k];
    });
  }
};

void expect_hazard_free(const Schedule& s) {
  for (size_t t = 0; t < s.steps.size(); ++t) {
    const auto& moves = s.steps[t].moves;
    for (const Move& w : moves) {
      for (const Move& r : moves) {
        if (&w == &r || w.dst != r.src || w.count == 0 || r.count == 0) continue;
        const bool overlap = w.dst_off < r.src_off + r.count && r.src_off < w.dst_off + w.count;
        ASSERT_FALSE(overlap) << "step " << t << " writes rank " << w.dst << " [" << w.dst_off << ", +" << w.count
                              << ") while another move reads it";
      }
    }
  }
}

void expect_in_bounds(const Schedule& s) {
  for (const Step& st : s.steps)
    for (const Move& m : st.moves) {
      ASSERT_GE(m.src, 0);
      ASSERT_LT(m.src, s.nranks);
      ASSERT_GE(m.dst, 0);
      ASSERT_LT(m.dst, s.nranks);
      ASSERT_GE(m.src_off, 0);
      ASSERT_GE(m.dst_off, 0);
      ASSERT_LE(m.src_off + m.count, s.buffer_elems);
      ASSERT_LE(m.dst_off + m.count, s.buffer_elems);
    }
}

using Param = std::tuple<CollectiveKind, Algorithm, int /*n*/, int64_t /*count*/>;

class ScheduleTest : public ::testing::TestWithParam<Param> {};

// Nodes of equal size for hierarchical: the largest divisor L of n with 1 < L < n (else 1 node).
std::vector<int> nodes_for(int n) {
  int L = n;
  for (int d = n - 1; d > 1; --d)
    if (n % d == 0) {
      L = d;
      break;
    }
  std::vector<int> node_of;
  for (int i = 0; i < n; ++i) node_of.push_back(i / L);
  return node_of;
}

TEST_P(ScheduleTest, ProducesTheClosedFormResult) {
  const auto [kind, algo, n, count] = GetParam();
  ScheduleRequest req;
  req.kind = kind;
  req.algorithm = algo;
  req.nranks = n;
  req.count = count;
  req.root = n > 2 ? 2 : n - 1;  // a root that is not rank 0 where possible
  if (algo == Algorithm::hierarchical) req.node_of = nodes_for(n);
  if (kind == CollectiveKind::all_to_all) {
    req.splits.assign(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n)));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) req.splits[i][j] = (count + i + 2 * j) % 5;  // uneven, some 0
  }
  Schedule s;
  try {
    s = make_schedule(req);
  } catch (const Error& e) {
    // Only the documented unsupported combinations may refuse.
    const bool allowed =
        ((kind == CollectiveKind::gather || kind == CollectiveKind::scatter) &&
         (algo == Algorithm::ring || algo == Algorithm::hierarchical)) ||
        (kind == CollectiveKind::all_to_all && (algo == Algorithm::tree || algo == Algorithm::hierarchical));
    ASSERT_TRUE(allowed) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("use one of"));
    return;
  }
  expect_in_bounds(s);
  expect_hazard_free(s);

  Buffers b(n, std::max<int64_t>(s.buffer_elems, 1));
  const double total_ranks = n * (n + 1) / 2.0;
  auto sum_at = [&](int64_t e) { return total_ranks * 1000.0 + n * static_cast<double>(e % 97); };
  switch (kind) {
    case CollectiveKind::all_reduce:
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count; ++e) b.data[i][e] = input(i, e);
      b.run(s);
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count; ++e) ASSERT_EQ(b.data[i][e], sum_at(e)) << i << "," << e;
      break;
    case CollectiveKind::reduce:
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count; ++e) b.data[i][e] = input(i, e);
      b.run(s);
      for (int64_t e = 0; e < count; ++e) ASSERT_EQ(b.data[req.root][e], sum_at(e)) << e;
      break;
    case CollectiveKind::broadcast:
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count; ++e) b.data[i][e] = i == req.root ? input(i, e) : -1;
      b.run(s);
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count; ++e) ASSERT_EQ(b.data[i][e], input(req.root, e));
      break;
    case CollectiveKind::all_gather:
    case CollectiveKind::gather:
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count * n; ++e)
          b.data[i][e] = (e / std::max<int64_t>(count, 1) == i) ? input(i, e) : -1;
      b.run(s);
      for (int i = 0; i < n; ++i) {
        if (kind == CollectiveKind::gather && i != req.root) continue;
        for (int64_t e = 0; e < count * n; ++e)
          ASSERT_EQ(b.data[i][e], input(static_cast<int>(e / count), e)) << i << "," << e;
      }
      break;
    case CollectiveKind::scatter:
      for (int64_t e = 0; e < count * n; ++e) b.data[req.root][e] = input(req.root, e);
      b.run(s);
      for (int i = 0; i < n; ++i)
        for (int64_t e = i * count; e < (i + 1) * count; ++e)
          ASSERT_EQ(b.data[i][e], input(req.root, e)) << i << "," << e;
      break;
    case CollectiveKind::reduce_scatter:
      for (int i = 0; i < n; ++i)
        for (int64_t e = 0; e < count * n; ++e) b.data[i][e] = input(i, e);
      b.run(s);
      for (int i = 0; i < n; ++i)
        for (int64_t e = i * count; e < (i + 1) * count; ++e) ASSERT_EQ(b.data[i][e], sum_at(e)) << i << "," << e;
      break;
    case CollectiveKind::all_to_all: {
      std::vector<int64_t> in_total(static_cast<size_t>(n), 0);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) in_total[i] += req.splits[i][j];
      // Input element k of rank i encodes (i, k).
      for (int i = 0; i < n; ++i)
        for (int64_t k = 0; k < in_total[i]; ++k) b.data[i][k] = i * 10000.0 + static_cast<double>(k);
      b.run(s);
      for (int j = 0; j < n; ++j) {
        int64_t at = in_total[j];
        for (int i = 0; i < n; ++i) {
          int64_t src = 0;
          for (int q = 0; q < j; ++q) src += req.splits[i][q];
          for (int64_t k = 0; k < req.splits[i][j]; ++k)
            ASSERT_EQ(b.data[j][at + k], i * 10000.0 + static_cast<double>(src + k)) << i << "->" << j;
          at += req.splits[i][j];
        }
      }
      break;
    }
    case CollectiveKind::barrier:
      // Everyone must (transitively) hear from everyone: propagate "heard" sets along moves.
      {
        std::vector<std::vector<bool>> heard(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n)));
        for (int i = 0; i < n; ++i) heard[i][i] = true;
        for (const Step& st : s.steps) {
          auto before = heard;
          for (const Move& m : st.moves)
            for (int q = 0; q < n; ++q) heard[m.dst][q] = heard[m.dst][q] || before[m.src][q];
        }
        for (int i = 0; i < n; ++i)
          for (int q = 0; q < n; ++q) ASSERT_TRUE(heard[i][q]) << i << " never heard from " << q;
      }
      break;
  }
}

std::string name_of(const ::testing::TestParamInfo<Param>& info) {
  const auto [kind, algo, n, count] = info.param;
  return std::string(to_string(kind)) + "_" + to_string(algo) + "_n" + std::to_string(n) + "_c" + std::to_string(count);
}

INSTANTIATE_TEST_SUITE_P(
    AllCollectives, ScheduleTest,
    ::testing::Combine(::testing::Values(CollectiveKind::all_reduce, CollectiveKind::broadcast, CollectiveKind::reduce,
                                         CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                                         CollectiveKind::gather, CollectiveKind::scatter, CollectiveKind::all_to_all,
                                         CollectiveKind::barrier),
                       ::testing::Values(Algorithm::ring, Algorithm::tree, Algorithm::direct, Algorithm::hierarchical),
                       ::testing::Range(1, 10), ::testing::Values<int64_t>(1, 7, 64)),
    name_of);

TEST(Schedule, HierarchicalNeedsEqualRanksPerNode) {
  ScheduleRequest req;
  req.kind = CollectiveKind::all_reduce;
  req.algorithm = Algorithm::hierarchical;
  req.nranks = 3;
  req.count = 8;
  req.node_of = {0, 0, 1};
  EXPECT_THROW(
      {
        try {
          make_schedule(req);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("same number of group ranks on every node (found 2 and 1)"));
          throw;
        }
      },
      Error);
}

TEST(Schedule, RingAllReduceHasTwoNMinusOneStepsAndMovesTwiceTheData) {
  ScheduleRequest req;
  req.kind = CollectiveKind::all_reduce;
  req.algorithm = Algorithm::ring;
  req.nranks = 8;
  req.count = 800;
  const Schedule s = make_schedule(req);
  EXPECT_EQ(s.steps.size(), 14u);
  EXPECT_EQ(s.moved_elems(), 2 * 7 * 800);  // 2(n-1)/n of the buffer, from each of n ranks
}

// The rings made step by step (what a shape-only call is timed from) are the schedule's own
// steps, move for move, for every ring collective, group size and element count (uneven pieces
// included).
TEST(Schedule, LazyStepsMadeOneAtATimeAreTheSchedulesSteps) {  // and hierarchical all-reduce's
  for (const CollectiveKind kind :
       {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    for (int n = 1; n <= 9; ++n) {
      for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}}) {
        ScheduleRequest req;
        req.kind = kind;
        req.algorithm = Algorithm::ring;
        req.nranks = n;
        req.count = count;
        ASSERT_TRUE(LazySteps::serves(req));
        EXPECT_TRUE(LazySteps::exact(req));
        const Schedule full = make_schedule(req);
        const LazySteps ring(req);
        ASSERT_EQ(static_cast<std::size_t>(ring.size()), full.steps.size()) << to_string(kind) << " n=" << n;
        Step st;
        for (int k = 0; k < ring.size(); ++k) {
          ring.step(k, st);
          const std::vector<Move>& want = full.steps[static_cast<std::size_t>(k)].moves;
          ASSERT_EQ(st.moves.size(), want.size());
          for (std::size_t m = 0; m < want.size(); ++m) {
            const Move& a = st.moves[m];
            const Move& b = want[m];
            EXPECT_EQ(std::tie(a.src, a.dst, a.src_off, a.dst_off, a.count, a.reduce),
                      std::tie(b.src, b.dst, b.src_off, b.dst_off, b.count, b.reduce))
                << to_string(kind) << " n=" << n << " count=" << count << " step " << k << " move " << m;
          }
        }
      }
    }
  }
  // Hierarchical all-reduce: rings inside the nodes, across them, and inside them again, for
  // node layouts in order and interleaved.
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 0, 0, 1, 1, 1, 1}, {0, 1, 2, 0, 1, 2, 0, 1, 2},
      {0, 1, 2, 3}, {0, 0, 0, 0}, {2, 2, 0, 0, 1, 1}};
  for (const std::vector<int>& node_of : layouts) {
    for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}}) {
      ScheduleRequest req;
      req.kind = CollectiveKind::all_reduce;
      req.algorithm = Algorithm::hierarchical;
      req.nranks = static_cast<int>(node_of.size());
      req.count = count;
      req.node_of = node_of;
      ASSERT_TRUE(LazySteps::serves(req));
      EXPECT_TRUE(LazySteps::exact(req));
      const Schedule full = make_schedule(req);
      const LazySteps ring(req);
      ASSERT_EQ(static_cast<std::size_t>(ring.size()), full.steps.size()) << "n=" << req.nranks;
      Step st;
      for (int k = 0; k < ring.size(); ++k) {
        ring.step(k, st);
        const std::vector<Move>& want = full.steps[static_cast<std::size_t>(k)].moves;
        ASSERT_EQ(st.moves.size(), want.size()) << "n=" << req.nranks << " count=" << count << " step " << k;
        for (std::size_t m = 0; m < want.size(); ++m) {
          const Move& a = st.moves[m];
          const Move& b = want[m];
          EXPECT_EQ(std::tie(a.src, a.dst, a.src_off, a.dst_off, a.count, a.reduce),
                    std::tie(b.src, b.dst, b.src_off, b.dst_off, b.count, b.reduce))
              << "hierarchical n=" << req.nranks << " count=" << count << " step " << k << " move " << m;
        }
      }
    }
  }
  ScheduleRequest uneven;
  uneven.algorithm = Algorithm::hierarchical;
  uneven.kind = CollectiveKind::all_gather;
  uneven.nranks = 3;
  uneven.count = 8;
  uneven.node_of = {0, 0, 1};
  EXPECT_THROW(LazySteps{uneven}, Error);
  ScheduleRequest tree;
  tree.algorithm = Algorithm::tree;
  EXPECT_FALSE(LazySteps::serves(tree));
  ScheduleRequest bcast;
  bcast.kind = CollectiveKind::broadcast;
  EXPECT_FALSE(LazySteps::serves(bcast));
}

// Hierarchical all_gather and reduce_scatter made step by step move, in every step, what the
// schedule's step moves between each pair of ranks (the elements of its moves summed), which is
// all that timing reads: over node layouts in order and interleaved, and counts with odd pieces.
TEST(Schedule, LazyHierarchicalGatherAndScatterStepsMoveTheSchedulesTrafficPerPair) {
  using Traffic = std::map<std::tuple<int, int, bool>, int64_t>;
  const auto traffic = [](const Step& st) {
    Traffic t;
    for (const Move& m : st.moves) t[{m.src, m.dst, m.reduce}] += m.count;
    return t;
  };
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 0, 0, 1, 1, 1, 1}, {0, 1, 2, 0, 1, 2, 0, 1, 2},
      {0, 1, 2, 3}, {0, 0, 0, 0}, {2, 2, 0, 0, 1, 1},       {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}};
  for (const CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    for (const std::vector<int>& node_of : layouts) {
      for (const int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
        ScheduleRequest req;
        req.kind = kind;
        req.algorithm = Algorithm::hierarchical;
        req.nranks = static_cast<int>(node_of.size());
        req.count = count;
        req.node_of = node_of;
        ASSERT_TRUE(LazySteps::serves(req));
        EXPECT_FALSE(LazySteps::exact(req));
        const Schedule full = make_schedule(req);
        const LazySteps lazy(req);
        ASSERT_EQ(static_cast<std::size_t>(lazy.size()), full.steps.size())
            << to_string(kind) << " n=" << req.nranks << " count=" << count;
        Step st;
        int64_t moved = 0;
        for (int k = 0; k < lazy.size(); ++k) {
          lazy.step(k, st);
          const Traffic got = traffic(st);
          EXPECT_EQ(got, traffic(full.steps[static_cast<std::size_t>(k)]))
              << to_string(kind) << " n=" << req.nranks << " count=" << count << " step " << k;
          // one move per pair: the steps grow with the group, not with group x nodes
          EXPECT_EQ(st.moves.size(), got.size());
          for (const Move& m : st.moves) moved += m.count;
        }
        EXPECT_EQ(moved, full.moved_elems());
      }
    }
  }
}

TEST(Schedule, TreeAllReduceTakesLogarithmicSteps) {
  ScheduleRequest req;
  req.kind = CollectiveKind::all_reduce;
  req.algorithm = Algorithm::tree;
  req.nranks = 16;
  req.count = 1600;
  EXPECT_EQ(make_schedule(req).steps.size(), 8u);  // 4 halvings + 4 doublings
  req.nranks = 6;                                  // fold 6 -> 4, 2 halvings, 2 doublings, unfold 4 -> 6
  EXPECT_EQ(make_schedule(req).steps.size(), 6u);
}

TEST(Schedule, ChunksSplitNearEqually) {
  EXPECT_EQ(chunk_begin(10, 4, 0), 0);
  EXPECT_EQ(chunk_begin(10, 4, 1), 2);
  EXPECT_EQ(chunk_begin(10, 4, 2), 5);
  EXPECT_EQ(chunk_begin(10, 4, 3), 7);
  EXPECT_EQ(chunk_begin(10, 4, 4), 10);
  EXPECT_EQ(chunk_begin(int64_t{1} << 40, 3, 3), int64_t{1} << 40);
}

TEST(Schedule, ParsesAlgorithmNames) {
  EXPECT_EQ(parse_algorithm("ring"), Algorithm::ring);
  EXPECT_EQ(parse_algorithm("auto"), Algorithm::automatic);
  EXPECT_THROW(parse_algorithm("butterfly"), Error);
}

}  // namespace
}  // namespace ranksim::runtime

// Data-parallel gradient buckets (models/grad_buckets.h, TrainSpec::bucket_size).
//
// - The collective itself, against closed-form sums: each rank's gradient element is a small
//   integer (rank + 1) * (index + 1), so every sum is exact and the expected values are
//   sum over ranks = (index + 1) * d (d + 1) / 2; the reduce-scatter must leave each rank slice r
//   of every parameter's zero-padded gradient (AdamW's layout), whatever shares its bucket.
// - Where buckets close: at bucket_size elements (at the end of the add() call that reaches it),
//   or per call with bucket_size 0, or once at finish().
// - Training: the bucket size changes the collectives, never the bits (each element is summed in
//   the collective's one order whatever else is in the buffer): bucket sizes 0, 1, a few blocks and
//   "everything" give identical runs with plain DP, ZeRO-1 and FSDP; the shape-only timeline has
//   one gradient collective per bucket.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "models/batch.h"
#include "models/grad_buckets.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "sim/trace.h"
#include "training_checks.h"

namespace ranksim::models {
namespace {

using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;

// Parameters of the given element counts whose gradient on rank r is (r + 1) * (i + 1).
std::vector<tp::Parameter> params_of(const std::vector<i64>& sizes, int rank) {
  std::vector<tp::Parameter> out;
  for (i64 n : sizes) {
    tp::Parameter p;
    std::vector<float> g;
    for (i64 i = 0; i < n; ++i) g.push_back(static_cast<float>((rank + 1) * (i + 1)));
    p.value = Tensor::zeros({n});
    p.grad = Tensor::from_vector(g, {n});
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::pair<std::string, tp::Parameter*>> named(std::vector<tp::Parameter>& ps, std::size_t first,
                                                          std::size_t last) {
  std::vector<std::pair<std::string, tp::Parameter*>> out;
  for (std::size_t i = first; i < last; ++i) out.emplace_back("p" + std::to_string(i), &ps[i]);
  return out;
}

TEST(GradBuckets, AllReduceSumsEveryGradientAndClosesAtTheBucketSize) {
  const std::vector<i64> sizes{5, 3, 7, 2};  // 17 elements
  constexpr int d = 4;
  std::vector<std::vector<i64>> closed(d);
  runtime::spawn(
      [&](int rank) {
        std::vector<tp::Parameter> ps = params_of(sizes, rank);
        GradBuckets b(runtime::ProcessGroup{}, GradBuckets::Mode::all_reduce, 8);
        b.add(named(ps, 0, 2));  // 8 elements: closes
        b.add(named(ps, 2, 3));  // 7: stays open
        b.add(named(ps, 3, 4));  // 9: closes
        b.finish();
        closed[static_cast<std::size_t>(rank)] = b.bucket_sizes();
        for (std::size_t k = 0; k < sizes.size(); ++k) {
          const std::vector<float> g = ps[k].grad.to_vector<float>();
          ASSERT_EQ(ps[k].grad.shape(), (runtime::Shape{sizes[k]}));
          for (i64 i = 0; i < sizes[k]; ++i) EXPECT_EQ(g[static_cast<std::size_t>(i)], (i + 1) * d * (d + 1) / 2.0f);
        }
      },
      d);
  for (const auto& c : closed) EXPECT_EQ(c, (std::vector<i64>{8, 9}));
}

TEST(GradBuckets, ReduceScatterLeavesEachRankItsPaddedSliceOfEveryParameter) {
  const std::vector<i64> sizes{5, 3, 7, 1};  // padded to 8, 4, 8, 4 at d = 4
  constexpr int d = 4;
  for (i64 bucket : {i64{0}, i64{6}, std::numeric_limits<i64>::max()}) {
    runtime::spawn(
        [&](int rank) {
          std::vector<tp::Parameter> ps = params_of(sizes, rank);
          GradBuckets b(runtime::ProcessGroup{}, GradBuckets::Mode::reduce_scatter, bucket);
          b.add(named(ps, 0, 1));
          b.add(named(ps, 1, 3));
          b.add(named(ps, 3, 4));
          b.finish();
          const std::size_t want_buckets = bucket == 0 ? 3 : bucket == 6 ? 2 : 1;
          EXPECT_EQ(b.bucket_sizes().size(), want_buckets) << bucket;
          for (std::size_t k = 0; k < sizes.size(); ++k) {
            const i64 n = sizes[k], per = (n + d - 1) / d;
            ASSERT_EQ(ps[k].grad.numel(), per) << k;
            const std::vector<float> g = ps[k].grad.contiguous().to_vector<float>();
            for (i64 j = 0; j < per; ++j) {
              const i64 i = rank * per + j;  // the element of the full gradient
              const float want = i < n ? static_cast<float>((i + 1) * d * (d + 1) / 2) : 0.0f;
              EXPECT_EQ(g[static_cast<std::size_t>(j)], want)
                  << "bucket " << bucket << " param " << k << " rank " << rank << " slot " << j;
            }
          }
        },
        d);
  }
}

TEST(GradBuckets, ParametersWithoutAGradientAreSkipped) {
  runtime::spawn(
      [&](int rank) {
        std::vector<tp::Parameter> ps = params_of({4, 4}, rank);
        ps[0].grad = Tensor();
        GradBuckets b(runtime::ProcessGroup{}, GradBuckets::Mode::all_reduce, 0);
        b.add(named(ps, 0, 2));
        b.finish();
        EXPECT_FALSE(ps[0].grad.defined());
        EXPECT_EQ(b.bucket_sizes(), (std::vector<i64>{4}));
        EXPECT_EQ(ps[1].grad.to_vector<float>()[3], 4.0f * 3);
      },
      2);
}

// --- In training --------------------------------------------------------------------------------

constexpr i64 kVocab = 17;

TrainSpec spec(int dp, int cp, int zero, i64 bucket, bool shape_only = false) {
  TrainSpec s;
  s.config = llama_config(kVocab, 32, 4, 2, 48, 4);
  s.attention.format = cp::Format::thd;
  s.attention.mask = Mask::causal;
  s.weights = shape_only ? shape_only_weights(s.config) : seeded_weights(s.config, 7);
  s.batch = synthetic_batch(cp::Format::thd, kVocab, {9, 14, 6, 12, 7, 10, 11, 8}, 3);
  s.dp = dp;
  s.cp = cp;
  s.micro_batches = 2;
  s.zero = zero;
  s.bucket_size = bucket;
  s.steps = 1;  // one update compares the gradients, the state and the weights; ASan makes more costly
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-4;
  s.clip_grad_norm = 0.5;
  return s;
}

// A block of this model holds 4 * 32 * 32 (q, proj) ... : 2 * 32 (norms) + 32 * 32 + 2 * 16 * 32
// (q; k, v of 2 heads of 8) + 32 * 32 (proj) + 96 * 32 (fc1) + 32 * 48 (fc2) = 7744 elements.
constexpr i64 kBlock = 2 * 32 + 32 * 32 + 2 * 16 * 32 + 32 * 32 + 96 * 32 + 32 * 48;

// With ZeRO-1 and FSDP every element stays in its rank's part of the buffer, whatever the bucket,
// and is reduced in the same order: the same bits. A plain all-reduce sums each element in an order
// that depends on where it sits in the buffer (a ring reduces each chunk starting at another rank)
// and on the algorithm `auto` picks by size (docs/distributed.md) -- as NCCL does, so Megatron's
// bucket size changes its bits too. Over 2 ranks each sum has two terms, whose order does not
// matter: the same bits; over 4 the runs agree within train_test.cpp's bound.
TEST(GradBucketsTraining, TheBucketSizeChangesNoBitButAllReducesOrder) {
  const std::vector<i64> buckets{2 * kBlock, std::numeric_limits<i64>::max()};  // (1 closes per block, as 0)
  for (int zero : {1, 3}) {
    const TrainResult want = run_training(spec(2, 2, zero, 0));
    ASSERT_EQ(want.losses.size(), 1u);
    for (i64 bucket : buckets) {
      testing::expect_bit_identical(run_training(spec(2, 2, zero, bucket)), want,
                                    "zero " + std::to_string(zero) + " bucket " + std::to_string(bucket), true);
    }
  }
  const TrainResult two = run_training(spec(2, 1, 0, 0)), four = run_training(spec(2, 2, 0, 0));
  for (i64 bucket : buckets) {
    const std::string what = "all-reduce bucket " + std::to_string(bucket);
    testing::expect_bit_identical(run_training(spec(2, 1, 0, bucket)), two, what + " over 2 ranks", true);
    testing::expect_close_training(run_training(spec(2, 2, 0, bucket)), four, 1e-2, what + " over 4 ranks");
  }
}

TEST(GradBucketsTraining, OneGradientCollectivePerBucket) {
  struct Case {
    int zero;
    i64 bucket;
    int collectives;  // gradient all-reduces (zero 0) or reduce-scatters over DP x CP per step
  };
  // 4 blocks then the embedding and head: bucket 0 closes 5 buckets; 2 blocks' worth closes after
  // every second block (2), then the rest; everything: one bucket at the end
  for (const Case c : {Case{0, 0, 5}, Case{0, 2 * kBlock, 3}, Case{0, std::numeric_limits<i64>::max(), 1},
                       Case{1, 0, 5}, Case{3, 2 * kBlock, 3}}) {
    runtime::RunReport rep;
    run_training(spec(2, 1, c.zero, c.bucket, true), {}, &rep);
    int all_reduce = 0, reduce_scatter = 0;
    for (const sim::Span& s : rep.trace.spans()) {
      if (s.rank != 0 || s.kind != sim::SpanKind::comm) continue;
      all_reduce += s.name == "all_reduce" ? 1 : 0;
      reduce_scatter += s.name == "reduce_scatter" ? 1 : 0;
    }
    const std::string what = "zero " + std::to_string(c.zero) + " bucket " + std::to_string(c.bucket);
    if (c.zero == 0) {
      EXPECT_EQ(all_reduce, c.collectives + 1) << what;  // + the loss's sum
      EXPECT_EQ(reduce_scatter, 0) << what;
    } else {
      EXPECT_EQ(reduce_scatter, c.collectives) << what;
    }
  }
}

TEST(GradBucketsTraining, NegativeBucketSizeIsRefused) {
  TrainSpec s = spec(2, 1, 0, -1, true);
  EXPECT_THROW(run_training(s), Error);
}

}  // namespace
}  // namespace ranksim::models

// Fully sharded data parallelism (TrainSpec::zero = 3, models/train.h): parameters, gradients and
// optimizer state sharded over DP x CP, each block's parameters all-gathered around its forward
// and its backward, gradients reduce-scattered as the last micro-batch completes them.
//
// - The numbers: FSDP reduce-scatters the same accumulated gradients ZeRO-1 does, with the same
//   padding and slices, and updates the same slices, so the two runs agree bit for bit (and with
//   plain AdamW on all-reduced gradients within train_test.cpp's bound).
// - The memory: between uses a rank holds 1/D of every parameter (D = DP x CP), so its peak
//   parameter bytes fall to about the largest unit plus 1/D of the rest.
// - The timeline: per step, each block's parameters are all-gathered once before its forward and
//   once before its backward, and each block's gradients reduce-scattered once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/batch.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn_options.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "sim/trace.h"
#include "training_checks.h"

namespace ranksim::models {
namespace {

using runtime::DType;
using ::testing::HasSubstr;
using i64 = std::int64_t;

constexpr i64 kVocab = 17;

// Llama style with 2 of 4 heads for keys and values, 4 blocks; eight THD sequences.
TrainSpec make_spec(int tp, int cp, int dp, int pp, int micro, int zero, bool shape_only = false) {
  TrainSpec s;
  s.config = llama_config(kVocab, 32, 4, 2, 48, 4);
  s.attention.format = cp::Format::thd;
  s.attention.mask = Mask::causal;
  s.weights = shape_only ? shape_only_weights(s.config) : seeded_weights(s.config, 7);
  s.batch = synthetic_batch(cp::Format::thd, kVocab, {9, 14, 6, 12, 7, 10, 11, 8}, 3);
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.micro_batches = micro;
  s.zero = zero;
  s.steps = shape_only ? 1 : 3;
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-4;  // train_test.cpp's base() says why
  s.clip_grad_norm = 0.5;  // so the norm over the shards is exercised too
  return s;
}

using testing::expect_bit_identical;

TEST(Fsdp, EqualsTheDistributedOptimizerBitForBit) {
  struct Layout {
    int tp, cp, dp, pp, micro;
  };
  for (const Layout l : {Layout{1, 1, 2, 1, 1}, Layout{1, 1, 4, 1, 2}, Layout{2, 1, 2, 1, 2}, Layout{1, 2, 2, 1, 1},
                         Layout{1, 1, 2, 2, 2}, Layout{2, 2, 2, 1, 1}}) {
    const std::string what = "tp" + std::to_string(l.tp) + " cp" + std::to_string(l.cp) + " dp" + std::to_string(l.dp) +
                             " pp" + std::to_string(l.pp) + " x" + std::to_string(l.micro);
    const TrainResult zero1 = run_training(make_spec(l.tp, l.cp, l.dp, l.pp, l.micro, 1));
    const TrainResult fsdp = run_training(make_spec(l.tp, l.cp, l.dp, l.pp, l.micro, 3));
    ASSERT_EQ(fsdp.losses.size(), 3u) << what;
    EXPECT_LT(fsdp.losses.back(), fsdp.losses.front()) << what;  // it trains
    expect_bit_identical(fsdp, zero1, what, true);
  }
}

TEST(Fsdp, WithSequenceParallelismAndInterleavingStillEqualsZeroOne) {
  TrainSpec a = make_spec(2, 1, 2, 2, 2, 1);
  a.config.sequence_parallel = true;
  a.config.recompute = Recompute::full;
  a.virtual_stages = 2;
  TrainSpec b = a;
  b.zero = 3;
  expect_bit_identical(run_training(b), run_training(a), "tp2 sp dp2 pp2 v2 full recompute", true);
}

// Parameters on each rank at its peak: FSDP keeps the slices plus the units gathered at that
// moment; ZeRO-1 keeps every value whole.
TEST(Fsdp, ParametersAreShardedBetweenUses) {
  const auto peak_parameters = [](int zero) {
    runtime::RunReport rep;
    TrainSpec s = make_spec(1, 1, 4, 1, 1, zero, true);
    s.config = llama_config(kVocab, 256, 4, 2, 512, 8);
    s.weights = shape_only_weights(s.config);
    run_training(s, {}, &rep);
    EXPECT_EQ(rep.memory.size(), 4u);
    return rep.memory.at(0).at_peak[static_cast<int>(runtime::MemoryKind::parameters)];
  };
  const std::uint64_t whole = peak_parameters(1), sharded = peak_parameters(3);
  // 8 blocks of about 0.72 MB in f32 each and the embeddings; dp = 4
  EXPECT_GT(whole, 6u << 20);
  EXPECT_LT(sharded, whole / 2) << "ZeRO-1 " << whole << " B, FSDP " << sharded << " B";
  EXPECT_GT(sharded, whole / 4);  // its quarter of everything, plus what is gathered
}

// Per step: each block's all-gathers in forward and backward, its reduce-scatters once, over the
// DP group (the only group of size > 1 here), and no all-reduce of gradients.
TEST(Fsdp, TimelineGathersEachBlockTwiceAndReduceScattersItOnce) {
  runtime::RunReport rep;  // tracing is on by default
  run_training(make_spec(1, 1, 2, 1, 1, 3, true), {}, &rep);
  int gathers = 0, scatters = 0, reduces = 0;
  for (const sim::Span& s : rep.trace.spans()) {
    if (s.rank != 0 || s.kind != sim::SpanKind::comm) continue;
    gathers += s.name == "all_gather" ? 1 : 0;
    scatters += s.name == "reduce_scatter" ? 1 : 0;
    reduces += s.name == "all_reduce" ? 1 : 0;
  }
  // llama block: ln1, q, k, v, proj, ln2, fc1, fc2 = 8 tensors; 4 blocks; embedding; head: final
  // norm and output. Forward gathers every unit, backward every unit but the embedding (its
  // backward reads no weight); the gradients are reduce-scattered in one bucket per block and one
  // for the embedding and head (TrainSpec::bucket_size 0, models/grad_buckets.h).
  EXPECT_EQ(gathers, (4 * 8 + 1 + 2) + (4 * 8 + 2));
  EXPECT_EQ(scatters, 4 + 1);
  EXPECT_EQ(reduces, 2);  // the loss and the clipping norm's sums (over DP x CP), no gradient
}

TEST(Fsdp, Errors) {
  TrainSpec s = make_spec(1, 1, 2, 1, 1, 2);
  try {
    run_training(s);
    ADD_FAILURE() << "zero 2 ran";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("zero must be 0, 1 (the distributed optimizer) or 3 (FSDP), got 2"));
  }
}

}  // namespace
}  // namespace ranksim::models

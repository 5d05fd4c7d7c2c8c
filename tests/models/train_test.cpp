// Training (models/train.h): every layout -- tp, cp, dp, pp, ZeRO-1, accumulation, clipping --
// trains the same model as one rank; checkpoints consolidate and reload into another layout; a
// tiny dataset is overfit under a layout with every axis above one.
//
// Bound (fp32): the layouts reorder sums (TP partial products, CP merges, DP/CP gradient sums,
// micro-batch accumulation), so gradients agree to a few ulps of their magnitude; AdamW's update
// m/(sqrt(v)+eps) divides by sqrt(v) ~ |g|, so a parameter moves by lr * (1 +- ~1e-6) per step and
// after k steps the weights agree within about k * lr * 1e-5 absolute (with eps chosen so that
// gradients at rounding-noise level cannot take lr-sized steps: see base()). We assert
// 2e-5 * k * lr (plus rounding of the weights themselves) and losses within 1e-5 relative.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include "model_test_util.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/tensor/safetensors.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "training_checks.h"

namespace ranksim::models {
namespace {

using testing::error_of;

using runtime::DType;
using runtime::Tensor;
using ::testing::HasSubstr;
using i64 = std::int64_t;

TransformerConfig small(i64 layers) {
  TransformerConfig c;
  c.hidden = 64;
  c.heads = 4;
  c.head_dim = 16;
  c.ffn = 128;
  c.layers = layers;
  return c;
}

TrainSpec base(cp::Format f, i64 layers) {
  TrainSpec s;
  s.config = small(layers);
  s.attention.format = f;
  s.attention.mask = Mask::causal;
  s.weights = seeded_weights(s.config, 7);
  // 4 sequences / rows so that dp = 2 with 2 micro-batches each divides them
  s.batch = synthetic_batch(
      f, s.config.vocab, f == cp::Format::thd ? std::vector<i64>{9, 14, 6, 11} : std::vector<i64>{16, 16, 16, 16}, 3);
  s.optimizer.lr = 1e-2;
  // Adam divides by sqrt(v): a gradient that is zero in exact arithmetic (the key bias: adding a
  // constant to every key's score row leaves the softmax unchanged) carries only rounding noise,
  // and with eps = 1e-8 that noise becomes an lr-sized step of random sign, different in every
  // layout. eps = 1e-4 keeps such steps ~ lr * noise / eps while real gradients (1e-3 and up) are
  // barely damped, so the weights can be compared tightly. The overfit test keeps torch's eps.
  s.optimizer.eps = 1e-4;
  return s;
}

using testing::max_abs;
// Two layouts of the same training agree (training_checks.h's bound).
void expect_same_training(const TrainResult& got, const TrainResult& want, double lr, const std::string& what) {
  testing::expect_close_training(got, want, lr, what);
}

struct Layout {
  int tp, cp, dp, pp, micro, zero;
  bool clip;
  cp::Format format;
};

std::string name_of(const Layout& l) {
  return std::string(l.format == cp::Format::thd ? "thd" : "bshd") + "_tp" + std::to_string(l.tp) + "_cp" +
         std::to_string(l.cp) + "_dp" + std::to_string(l.dp) + "_pp" + std::to_string(l.pp) + "_mb" +
         std::to_string(l.micro) + (l.zero ? "_zero1" : "") + (l.clip ? "_clip" : "");
}

class TrainLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(TrainLayouts, ThreeStepsEqualOneRank) {
  const Layout l = GetParam();
  TrainSpec one = base(l.format, 2);
  one.steps = 3;
  if (l.clip) one.clip_grad_norm = 0.5;
  const TrainResult want = run_training(one);
  ASSERT_EQ(want.losses.size(), 3u);
  EXPECT_LT(want.losses[2], want.losses[0]);  // it learns
  if (l.clip) {
    EXPECT_GT(want.grad_norms[0], 0.5);  // so clipping really happened
  }
  TrainSpec s = one;
  s.tp = l.tp;
  s.cp = l.cp;
  s.dp = l.dp;
  s.pp = l.pp;
  s.micro_batches = l.micro;
  s.zero = l.zero;
  s.attention.comm = cp::CommType::p2p;
  const TrainResult got = run_training(s);
  expect_same_training(got, want, one.optimizer.lr, name_of(l));
  for (std::size_t i = 0; i < got.grad_norms.size(); ++i)
    EXPECT_NEAR(got.grad_norms[i], want.grad_norms[i], 1e-5 * want.grad_norms[i]);
}

INSTANTIATE_TEST_SUITE_P(All, TrainLayouts,
                         ::testing::Values(Layout{2, 1, 1, 1, 1, 0, false, cp::Format::bshd},
                                           Layout{1, 2, 1, 1, 1, 0, false, cp::Format::thd},
                                           Layout{1, 1, 2, 1, 1, 0, false, cp::Format::thd},
                                           Layout{1, 1, 1, 2, 1, 0, false, cp::Format::bshd},
                                           Layout{1, 1, 1, 1, 4, 0, true, cp::Format::thd},
                                           Layout{1, 1, 2, 1, 2, 1, false, cp::Format::bshd},
                                           Layout{1, 1, 1, 2, 4, 0, false, cp::Format::thd},
                                           Layout{2, 2, 2, 1, 1, 1, true, cp::Format::bshd},
                                           Layout{2, 1, 2, 2, 2, 0, true, cp::Format::thd},
                                           Layout{1, 2, 2, 2, 2, 1, true, cp::Format::bshd}),
                         [](const ::testing::TestParamInfo<Layout>& p) { return name_of(p.param); });

TEST(Train, CheckpointsConsolidateAndReloadIntoAnotherLayout) {
  TrainSpec straight = base(cp::Format::thd, 2);
  straight.steps = 4;
  const TrainResult want = run_training(straight);
  // two steps at tp2 x dp2 with ZeRO-1, a checkpoint, two more at cp2 x pp2
  TrainSpec first = base(cp::Format::thd, 2);
  first.steps = 2;
  first.tp = 2;
  first.dp = 2;
  first.zero = 1;
  const TrainResult half = run_training(first);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ranksim_ckpt_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  save_checkpoint(path, half);
  auto [weights, state] = load_checkpoint(path, first.config);
  // the checkpoint holds the weights under the contract's names: a model loads them as they are
  const runtime::SafetensorsFile f = runtime::load_safetensors(path);
  EXPECT_TRUE(f.contains("layers.1.qkv.weight"));
  EXPECT_TRUE(f.contains("optimizer.exp_avg.layers.1.qkv.weight"));
  EXPECT_NO_THROW(checked_weights(f, first.config));
  // A checkpoint whose numbers cannot be a training run's is refused, naming the tensor.
  const auto refused = [&](const std::string& key, double value, const std::string& message) {
    std::vector<std::pair<std::string, Tensor>> edited;
    for (const auto& [name, t] : f.tensors) {
      Tensor c = t.clone();
      if (name == key) c.reshape({c.numel()}).set({0}, value);
      edited.emplace_back(name, c);
    }
    const std::string bad = path + ".bad.safetensors";
    runtime::save_safetensors(bad, edited);
    EXPECT_THAT([&] { (void)load_checkpoint(bad, first.config); }, ::testing::ThrowsMessage<Error>(HasSubstr(message)))
        << key;
    std::filesystem::remove(bad);
  };
  refused("optimizer.step", -5, "'optimizer.step' must hold one whole number of steps, 0 to 2^24, got -5");
  refused("optimizer.step", std::nan(""), "'optimizer.step' must hold one whole number of steps");
  refused("optimizer.step", 2.5, "'optimizer.step' must hold one whole number of steps");
  refused("optimizer.exp_avg_sq.layers.1.qkv.weight", -1,
          "'optimizer.exp_avg_sq.layers.1.qkv.weight' holds -1 at element 0; second moments must be finite");
  refused("optimizer.exp_avg.layers.0.fc1.bias", std::numeric_limits<double>::infinity(),
          "'optimizer.exp_avg.layers.0.fc1.bias' holds inf at element 0; must be finite");
  refused("layers.0.fc2.weight", std::nan(""),
          "tensor 'layers.0.fc2.weight' holds NaN at element 0; weights must be finite");
  std::filesystem::remove(path);
  TrainSpec second = base(cp::Format::thd, 2);
  second.weights = weights;
  second.optimizer_state = state;
  second.steps = 2;
  second.cp = 2;
  second.pp = 2;
  const TrainResult rest = run_training(second);
  ASSERT_EQ(rest.losses.size(), 2u);
  EXPECT_NEAR(half.losses[0], want.losses[0], 1e-5 * want.losses[0]);
  EXPECT_NEAR(half.losses[1], want.losses[1], 1e-5 * want.losses[1]);
  EXPECT_NEAR(rest.losses[0], want.losses[2], 1e-5 * want.losses[2]);
  EXPECT_NEAR(rest.losses[1], want.losses[3], 1e-5 * want.losses[3]);
  TrainResult joined = rest;
  joined.losses = want.losses;
  expect_same_training(joined, want, straight.optimizer.lr, "round trip");
}

// Per-rank shards (tp2 x pp2 x dp2 with ZeRO-1 write one file per (tp, pp) rank), joined offline,
// equal the consolidated result bit for bit, and training resumes from them in another layout.
TEST(Train, PerRankShardsConsolidateOfflineAndResume) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ranksim_shards_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  TrainSpec straight = base(cp::Format::bshd, 2);
  straight.steps = 4;
  const TrainResult want = run_training(straight);
  TrainSpec s = base(cp::Format::bshd, 2);
  s.steps = 2;
  s.tp = 2;
  s.pp = 2;
  s.dp = 2;
  s.zero = 1;
  s.shard_dir = dir.string();
  const TrainResult half = run_training(s);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".safetensors";
  EXPECT_EQ(files, 4);
  auto [weights, state] = consolidate_shards(dir.string(), s.config);
  for (const auto& [name, t] : half.params) EXPECT_TRUE(runtime::bitwise_equal(weights.at(name), t)) << name;
  for (const auto& [key, t] : half.optimizer_state) EXPECT_TRUE(runtime::bitwise_equal(state.at(key), t)) << key;
  // a missing shard is named
  std::filesystem::remove(dir / "shard-tp1-pp0.safetensors");
  EXPECT_THAT(error_of([&] { consolidate_shards(dir.string(), s.config); }), HasSubstr("shard-tp1-pp0.safetensors"));
  std::filesystem::remove_all(dir);
  TrainSpec rest = base(cp::Format::bshd, 2);
  rest.weights = weights;
  rest.optimizer_state = state;
  rest.steps = 2;
  rest.cp = 2;
  const TrainResult second = run_training(rest);
  EXPECT_NEAR(second.losses[0], want.losses[2], 1e-5 * want.losses[2]);
  EXPECT_NEAR(second.losses[1], want.losses[3], 1e-5 * want.losses[3]);
}

TEST(Train, OverfitsATinyDatasetWithEveryAxisAboveOne) {
  TrainSpec one = base(cp::Format::bshd, 2);
  one.batch = synthetic_batch(cp::Format::bshd, one.config.vocab, {8, 8, 8, 8}, 11);
  one.steps = 60;
  one.optimizer.lr = 1e-2;
  one.optimizer.weight_decay = 0;
  const TrainResult want = run_training(one);
  TrainSpec s = one;
  s.tp = 2;
  s.cp = 2;
  s.dp = 2;
  s.pp = 2;
  s.micro_batches = 2;
  const TrainResult got = run_training(s);
  EXPECT_GT(want.losses.front(), 2.0);
  EXPECT_LT(want.losses.back(), 0.05);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-3 * want.losses[i] + 1e-5) << i;
}

TEST(Train, BadLayoutsGiveClearErrors) {
  TrainSpec s = base(cp::Format::thd, 3);
  s.pp = 2;
  EXPECT_THAT(error_of([&] { run_training(s); }), HasSubstr("3 layers cannot be split evenly over pp=2"));
  s = base(cp::Format::thd, 2);
  s.micro_batches = 3;
  EXPECT_THAT(error_of([&] { run_training(s); }), HasSubstr("4 sequences, which micro_batches=3 does not divide"));
  s = base(cp::Format::bshd, 2);
  s.dp = 2;
  s.micro_batches = 4;
  EXPECT_THAT(error_of([&] { run_training(s); }), HasSubstr("2 rows, which micro_batches=4 does not divide"));
  s = base(cp::Format::bshd, 2);
  s.clip_grad_norm = -1;
  EXPECT_THAT(error_of([&] { run_training(s); }), HasSubstr("clip_grad_norm must be > 0"));
}

}  // namespace
}  // namespace ranksim::models

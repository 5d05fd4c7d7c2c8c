// The two-model workload end to end: an encoder on a (tp, dp) grid feeding the reference
// transformer on a (tp, cp, dp) grid through the colocated bridge. Every layout trains the same
// models on the same global batch, so its weights after a step must equal those of the reference
// layout with destination CP = 1 (same source layout) and of a single rank, to fp32 rounding.
#include "models/multimodal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "runtime/distributed/spawn.h"
#include "sim/error.h"

namespace ranksim::models {
namespace {

using runtime::Tensor;
using ::testing::HasSubstr;

struct Layout {
  int src_tp, src_dp, tp, cp, dp;
};

TransformerConfig small_config() {
  TransformerConfig c;
  c.vocab = 33;
  c.hidden = 32;
  c.heads = 4;
  c.head_dim = 8;
  c.ffn = 64;
  return c;
}

MultimodalSpec make_spec(const Layout& l, int steps, double lr) {
  MultimodalSpec s;
  s.config = small_config();
  s.encoder.features = 16;
  s.encoder.ffn = 32;
  s.attention.format = cp::Format::bshd;
  s.attention.mask = Mask::causal;
  s.src_tp = l.src_tp;
  s.src_dp = l.src_dp;
  s.tp = l.tp;
  s.cp = l.cp;
  s.dp = l.dp;
  s.weights = seeded_multimodal_weights(s.config, s.encoder, 7);
  s.batch = synthetic_multimodal_batch(s.config, s.encoder, 8, 16, 11);
  s.steps = steps;
  s.optimizer.lr = lr;
  return s;
}

using Named = std::vector<std::pair<std::string, Tensor>>;

// Largest |a - b| / (atol + rtol |b|) over every element of every tensor (<= 1 passes).
double worst(const Named& a, const Named& b, double atol, double rtol, std::string* where) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    const std::vector<float> x = a[i].second.to_vector<float>();
    const std::vector<float> y = b[i].second.to_vector<float>();
    EXPECT_EQ(x.size(), y.size()) << a[i].first;
    for (std::size_t k = 0; k < std::min(x.size(), y.size()); ++k) {
      const double e = std::abs(double(x[k]) - double(y[k])) / (atol + rtol * std::abs(double(y[k])));
      if (e > w) {
        w = e;
        *where = a[i].first + "[" + std::to_string(k) + "]";
      }
    }
  }
  return w;
}

// The largest change any parameter made in the step: the comparison must see updates far larger
// than its tolerance, or it could not tell a wrong gradient from a right one.
double largest_update(const TrainResult& r, const Weights& initial) {
  double m = 0;
  for (const auto& [name, t] : r.params) {
    const std::vector<float> x = t.to_vector<float>(), y = initial.at(name).to_vector<float>();
    for (std::size_t k = 0; k < x.size(); ++k) m = std::max(m, std::abs(double(x[k]) - double(y[k])));
  }
  return m;
}

void expect_same_step(const Layout& layout, const Layout& reference) {
  const MultimodalSpec spec = make_spec(layout, 1, 1e-2);
  const TrainResult got = run_multimodal(spec);
  const TrainResult ref = run_multimodal(make_spec(reference, 1, 1e-2));
  const TrainResult one = run_multimodal(make_spec({1, 1, 1, 1, 1}, 1, 1e-2));
  ASSERT_EQ(got.params.size(), one.params.size());
  ASSERT_EQ(got.params.front().first, "encoder.fc1.weight");
  // AdamW's first step moves each weight by about lr: far above the tolerance below
  EXPECT_GT(largest_update(one, spec.weights), 5e-3);
  std::string where;
  EXPECT_LE(worst(got.params, ref.params, 1e-6, 1e-5, &where), 1.0) << "weights vs destination cp=1, at " << where;
  EXPECT_LE(worst(got.params, one.params, 1e-6, 1e-5, &where), 1.0) << "weights vs one rank, at " << where;
  // AdamW's first step hardly sees a gradient's scale (m / sqrt(v) = sign(g)), so the gradients
  // themselves are compared too: a loss normalised per CP rank, or a CP sum counted twice, scales
  // the encoder's
  EXPECT_LE(worst(got.grads, ref.grads, 1e-7, 1e-4, &where), 1.0) << "gradients vs destination cp=1, at " << where;
  EXPECT_LE(worst(got.grads, one.grads, 1e-7, 1e-4, &where), 1.0) << "gradients vs one rank, at " << where;
  ASSERT_EQ(got.losses.size(), 1u);
  EXPECT_NEAR(got.losses[0], one.losses[0], 1e-6 * one.losses[0]);
  EXPECT_NEAR(ref.losses[0], one.losses[0], 1e-6 * one.losses[0]);
}

TEST(Multimodal, FanInTp2Dp4ToTp2Dp2Cp2MatchesCp1ReferenceAndOneRank) {
  expect_same_step({2, 4, 2, 2, 2}, {2, 4, 2, 1, 4});
}

TEST(Multimodal, FanOutTp4Dp2ToTp1Dp4Cp2MatchesCp1ReferenceAndOneRank) {
  expect_same_step({4, 2, 1, 2, 4}, {4, 2, 1, 1, 8});
}

TEST(Multimodal, IdentityWithCp4MatchesOneRank) { expect_same_step({2, 2, 1, 4, 1}, {2, 2, 1, 1, 4}); }

// The encoder's own gradient scale: with CP > 1 in the language model, the encoder's summed
// gradient must equal the one at CP = 1 element by element (a bridge without the CP sum zeroes
// parts of it; a loss normalised per CP rank, or a CP sum counted twice, scales it by cp).
TEST(Multimodal, EncoderGradientsDoNotDependOnDestinationCp) {
  for (const Layout& l : {Layout{2, 4, 2, 2, 2}, Layout{2, 4, 1, 4, 2}, Layout{4, 2, 1, 2, 4}}) {
    const TrainResult cp = run_multimodal(make_spec(l, 1, 1e-2));
    const TrainResult cp1 = run_multimodal(make_spec({l.src_tp, l.src_dp, l.tp, 1, l.dp * l.cp}, 1, 1e-2));
    for (std::size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(cp.grads[i].first.rfind("encoder.", 0), 0u);
      const std::vector<float> a = cp.grads[i].second.to_vector<float>(), b = cp1.grads[i].second.to_vector<float>();
      double diff = 0, scale = 0;
      for (std::size_t k = 0; k < a.size(); ++k) {
        diff = std::max(diff, std::abs(double(a[k]) - double(b[k])));
        scale = std::max(scale, std::abs(double(b[k])));
      }
      EXPECT_GT(scale, 1e-4) << cp.grads[i].first;  // a gradient worth comparing
      EXPECT_LT(diff, 1e-5 * scale) << cp.grads[i].first << " at cp=" << l.cp;
    }
  }
}

TEST(Multimodal, TrainsEndToEndLikeOneRank) {
  const TrainResult fan_in = run_multimodal(make_spec({2, 4, 2, 2, 2}, 25, 2e-2));
  const TrainResult one = run_multimodal(make_spec({1, 1, 1, 1, 1}, 25, 2e-2));
  ASSERT_EQ(fan_in.losses.size(), 25u);
  EXPECT_GT(fan_in.losses.front(), 3.0);  // about ln(33) at the start
  EXPECT_LT(fan_in.losses.back(), 0.6 * fan_in.losses.front());
  for (std::size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(fan_in.losses[i], one.losses[i], 1e-4 * one.losses[i]) << "step " << i;
  }
}

// bf16: the encoder computes in the language model's dtype; the layouts agree to bf16 rounding.
TEST(Multimodal, Bf16FanInMatchesOneRankToBf16Rounding) {
  MultimodalSpec a = make_spec({2, 4, 2, 2, 2}, 3, 1e-2), b = make_spec({1, 1, 1, 1, 1}, 3, 1e-2);
  a.config.dtype = b.config.dtype = runtime::DType::bf16;
  const TrainResult x = run_multimodal(a), y = run_multimodal(b);
  ASSERT_EQ(x.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(x.losses[i], y.losses[i], 2e-2 * y.losses[i]) << "step " << i;
  EXPECT_LT(x.losses[2], x.losses[0]);
  EXPECT_EQ(x.params.front().second.dtype(), runtime::DType::f32);  // full f32 copies
}

TEST(Multimodal, SameInputsSameBitsSameTrace) {
  runtime::RunReport r1, r2;
  const TrainResult a = run_multimodal(make_spec({4, 2, 1, 2, 4}, 2, 1e-2), {}, &r1);
  const TrainResult b = run_multimodal(make_spec({4, 2, 1, 2, 4}, 2, 1e-2), {}, &r2);
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].second.to_vector<float>(), b.params[i].second.to_vector<float>()) << a.params[i].first;
  }
  EXPECT_EQ(a.losses, b.losses);
  ASSERT_EQ(r1.trace.spans().size(), r2.trace.spans().size());
  EXPECT_EQ(r1.makespan, r2.makespan);
}

// The bridge's collectives are named in the timeline.
TEST(Multimodal, TraceShowsTheBridgeCollectives) {
  auto groups_of = [](const runtime::RunReport& r) {
    std::set<std::string> out;
    for (const auto& s : r.trace.spans()) {
      for (const auto& [k, v] : s.args) {
        if (k == "group" && v.rfind("bridge.", 0) == 0) out.insert(s.name + " " + runtime::group_desc_of(v));
      }
    }
    return out;
  };
  runtime::RunReport fan_in, fan_out;
  run_multimodal(make_spec({2, 4, 2, 2, 2}, 1, 1e-2), {}, &fan_in);
  run_multimodal(make_spec({4, 2, 1, 2, 4}, 1, 1e-2), {}, &fan_out);
  EXPECT_EQ(groups_of(fan_in), (std::set<std::string>{"all_gather bridge.fan_in", "all_reduce bridge.cp_sum"}));
  EXPECT_EQ(groups_of(fan_out), (std::set<std::string>{"all_gather bridge.fan_out", "all_reduce bridge.cp_sum"}));
}

void expect_error(const MultimodalSpec& spec, const std::string& text) {
  EXPECT_THAT([&] { run_multimodal(spec); }, ::testing::ThrowsMessage<Error>(HasSubstr(text)));
}

TEST(Multimodal, BadLayoutsAreClearErrors) {
  expect_error(make_spec({2, 4, 2, 2, 1}, 1, 1e-2), "must both cover");
  MultimodalSpec dp_first = make_spec({2, 4, 2, 2, 2}, 1, 1e-2);
  dp_first.order = {"tp", "dp", "cp"};
  expect_error(dp_first, "before cp");
  MultimodalSpec bad_order = make_spec({2, 4, 2, 2, 2}, 1, 1e-2);
  bad_order.order = {"tp", "cp", "pp"};
  expect_error(bad_order, "permutation of tp, cp and dp");
  MultimodalSpec thd = make_spec({1, 1, 1, 1, 1}, 1, 1e-2);
  thd.attention.format = cp::Format::thd;
  thd.attention.mask = Mask::padding;
  expect_error(thd, "use format bshd");
  MultimodalSpec rows = make_spec({1, 8, 2, 2, 2}, 1, 1e-2);
  rows.batch = synthetic_multimodal_batch(rows.config, rows.encoder, 4, 16, 1);
  expect_error(rows, "do not split over dp=8");
  MultimodalSpec ffn = make_spec({4, 2, 1, 2, 4}, 1, 1e-2);
  ffn.encoder.ffn = 30;
  ffn.weights = seeded_multimodal_weights(ffn.config, ffn.encoder, 7);
  expect_error(ffn, "not divisible by the encoder's tp=4");
  MultimodalSpec feats = make_spec({1, 1, 1, 1, 1}, 1, 1e-2);
  feats.encoder.features = 8;
  expect_error(feats, "features are");
  MultimodalSpec missing = make_spec({1, 1, 1, 1, 1}, 1, 1e-2);
  missing.weights.erase("encoder.fc2.bias");
  expect_error(missing, "'encoder.fc2.bias' is missing");
}

}  // namespace
}  // namespace ranksim::models

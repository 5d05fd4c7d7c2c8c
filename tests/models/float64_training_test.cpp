// Issue #18's training against float64: three AdamW steps of a small Llama-style model (GQA,
// SwiGLU, RMSNorm, RoPE, untied embeddings, 4 blocks) on one rank, and under TP2 with sequence
// parallelism, CP2 (p2p), PP2 with 2 virtual stages, DP2 with FSDP, 4 micro-batches and selective
// recomputation (16 ranks), each agree with a float64 loop written here: float64_reference.h's
// loss and exact gradients on the whole global batch (the mean cross-entropy over every labelled
// token, which is what every layout computes), then AdamW as torch.optim.AdamW documents it, from
// the same initial weights. Neither shares code with models/transformer.cpp or models/adamw.cpp.
// (options_test.cpp's CombinedLayoutEqualsOneRank holds the layout against one rank directly.)
// First, the float64 gradients against central differences of the reference's own loss.
//
// Bounds.
//
// Reference gradients against central differences (float64, step 1e-5): the truncation error
// step^2 / 6 * f''' and the rounding of the two losses divided by the step (~1e-16 * loss / 1e-5)
// are both ~1e-10; we assert 1e-6 of the tensor's largest gradient plus 1e-9 (a bias at its
// weight's scale: the key bias's gradient is zero in exact arithmetic, rounding noise in both).
// Measured, the worst is 7e-9 of the scale.
//
// fp32 training against the float64 loop, per element, by what each step can move it:
// (a) AdamW rounds the weight to f32 twice a step (the decayed and the updated weight, each line
//     once; models/adamw.h): at most 2^-24 (|p_before| + |p_after|). Its f32 m and v move the
//     step by a few 2^-24 of lr: we allow lr 2^-20.
// (b) The fp32 gradient differs from the exact one by rounding -- chains of dot products of < 100
//     terms with O(1) inputs, n u < 6e-6 of the terms' magnitude each -- and, from the second step
//     on, by what the weights' differences change in it. We take |dg| <= delta = rho * G, rho =
//     1e-5 and G the tensor's largest |gradient| so far (measured on this run: 6e-7 G from
//     rounding at the first step, 5e-7 G from three steps' weight differences). Adam's
//     bias-corrected m_hat and sqrt(v_hat) are a weighted mean and a weighted root mean square of
//     the gradients so far, with weights summing to 1, so each moves by at most delta, and the step
//     lr m_hat / d, d = sqrt(v_hat) + eps, by at most lr delta (1 + |m_hat| / d) / (d - delta)
//     (d >= eps > delta). That is about 2 lr rho for an element with a large gradient and
//     lr delta / eps for one whose gradient is near zero: eps = 1e-4 (as options_test.cpp's;
//     train_test.cpp's base() says why) keeps rounding noise from taking lr-sized steps, where
//     torch's 1e-8 would make the bound larger than a whole step.
// The float64 loop adds (a) and (b) per element over the steps (weight decay only shrinks an
// earlier difference). Measured, the worst element of either run is at 17% of its bound (3.7e-7,
// an embedding weight of magnitude 2: one and a half f32 ulps), and the largest bound is 1.3e-4,
// a hundredth of what one step moves a weight; the test checks it stays below 5% of lr, so that
// a wrong step cannot hide in it.
//
// The losses: at the first step the weights are the same and the fp32 forward's rounding is
// below rho * loss, as in (b); after it, the loss moves by at most sum |g_i| b_i (to first order)
// for weights within their bounds b_i. Measured: below 2.5e-8 (1e-8 relative), the bounds 3e-5 to
// 9e-5: the weights are the sharp test, the losses a coarse one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cp/context_parallel.h"
#include "models/adamw.h"
#include "models/batch.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/tensor/tensor.h"

#include "float64_reference.h"

namespace ranksim::models {
namespace {

using runtime::DType;
using testing::LossAndGradients;
using testing::Params;
using testing::Reference;
using testing::Token;
using testing::Vec;
using i64 = std::int64_t;
using std::size_t;

constexpr i64 kVocab = 17;

// RANKSIM_PRINT_DIFFS=1 prints the measured differences and bounds.
bool print_diffs() { return std::getenv("RANKSIM_PRINT_DIFFS") != nullptr; }

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// --- 1. The reference's gradients against central differences of its loss ------------------------

// The scale a gradient is measured at: its tensor's largest magnitude, or for a bias its weight's.
double grad_scale(const Params& grads, const std::string& name) {
  const std::string suffix = ".bias";
  double s = max_abs(grads.at(name));
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    s = std::max(s, max_abs(grads.at(name.substr(0, name.size() - suffix.size()) + ".weight")));
  return s;
}

struct GradientCase {
  std::string name;
  TransformerConfig config;
  Batch batch;
  Mask mask;
};

// Every operation the training below differentiates (GQA, RoPE, RMSNorm, SwiGLU, THD causal, the
// mean over labelled tokens), and the family's others: LayerNorm, GELU, biases, fused qkv, learned
// positions, the THD padding and BSHD causal masks, hidden != heads * head_dim.
std::vector<GradientCase> gradient_cases() {
  TransformerConfig narrow;  // GQA with biases, SwiGLU with biases, LayerNorm, learned positions
  narrow.vocab = kVocab;
  narrow.hidden = 24;
  narrow.heads = 4;
  narrow.head_dim = 8;
  narrow.kv_heads = 2;
  narrow.ffn = 40;
  narrow.activation = Activation::swiglu;
  narrow.positions = Positions::learned;
  narrow.max_positions = 16;
  TransformerConfig wide;  // fused qkv wider than hidden, RMSNorm, GELU, biases, RoPE
  wide.vocab = kVocab;
  wide.hidden = 16;
  wide.heads = 4;
  wide.head_dim = 8;
  wide.ffn = 24;
  wide.norm = Norm::rmsnorm;
  using cp::Format;
  return {
      {"llama", llama_config(kVocab, 16, 4, 2, 32, 4), synthetic_batch(Format::thd, kVocab, {9, 5}, 3), Mask::causal},
      {"gpt", gpt_config(kVocab, 16, 4, 32, 1, 16), synthetic_batch(Format::thd, kVocab, {7, 5}, 4), Mask::padding},
      {"narrow", narrow, synthetic_batch(Format::bshd, kVocab, {6, 6}, 5), Mask::causal},
      {"wide", wide, synthetic_batch(Format::thd, kVocab, {6, 8}, 6), Mask::causal},
  };
}

// The recorded run's loss is the plain run's, bit for bit; its gradients are central differences
// of the plain run's loss at each tensor's largest entry and three drawn ones.
TEST(Float64Reference, GradientsMatchCentralDifferences) {
  for (const GradientCase& gc : gradient_cases()) {
    Params p = testing::to_params(seeded_weights(gc.config, 3));
    const std::vector<Token> tok = testing::tokens_of(gc.batch);
    const LossAndGradients got = testing::loss_and_gradients(gc.config, p, tok, gc.mask);
    const Reference ref{gc.config, p};
    EXPECT_EQ(got.loss, ref.run(tok, gc.mask).loss) << gc.name;
    ASSERT_EQ(got.grads.size(), p.size()) << gc.name;
    double worst = 0;
    for (const auto& [name, g] : got.grads) {
      ASSERT_EQ(g.size(), p.at(name).size()) << name;
      const double scale = grad_scale(got.grads, name);
      ASSERT_GT(scale, 0) << gc.name << " " << name;
      std::vector<size_t> picks = {static_cast<size_t>(
          std::max_element(g.begin(), g.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }) -
          g.begin())};
      for (std::uint64_t k = 0; k < 3; ++k) picks.push_back(runtime::random_bits(23, k) % g.size());
      for (size_t i : picks) {
        const double keep = p[name][i], step = 1e-5;
        p[name][i] = keep + step;
        const double up = ref.run(tok, gc.mask).loss;
        p[name][i] = keep - step;
        const double down = ref.run(tok, gc.mask).loss;
        p[name][i] = keep;
        const double fd = (up - down) / (2 * step);
        worst = std::max(worst, std::abs(g[i] - fd) / scale);
        EXPECT_NEAR(g[i], fd, 1e-6 * scale + 1e-9) << gc.name << " " << name << "[" << i << "]";
      }
    }
    if (print_diffs()) std::printf("gradients %-8s worst |ad - fd| / scale %.3g\n", gc.name.c_str(), worst);
  }
}

// --- 2. Training against a float64 loop ----------------------------------------------------------

// options_test.cpp's combined layout: 8 THD sequences (dp 2 x 4 micro-batches), 74 tokens.
TrainSpec make_spec(int tp, int cp, int dp, int pp, int micro) {
  TrainSpec s;
  s.config = llama_config(kVocab, 16, 4, 2, 32, 4);  // head_dim 4; 4 blocks for pp 2 x 2 chunks
  s.attention.format = cp::Format::thd;
  s.attention.mask = Mask::causal;
  s.attention.comm = cp::CommType::p2p;
  s.weights = seeded_weights(s.config, 7);
  s.batch = synthetic_batch(cp::Format::thd, kVocab, {9, 14, 6, 12, 7, 11, 5, 10}, 3);
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.micro_batches = micro;
  s.steps = 3;
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-4;  // the header says why
  return s;
}

// One element's step of torch.optim.AdamW as its documentation writes the algorithm (amsgrad and
// maximize off), t = 1, 2, ...:
//   theta <- theta - lr * lambda * theta
//   m <- beta1 m + (1 - beta1) g,   v <- beta2 v + (1 - beta2) g^2
//   m_hat = m / (1 - beta1^t),      v_hat = v / (1 - beta2^t)
//   theta <- theta - lr * m_hat / (sqrt(v_hat) + eps)
// Returns m_hat and sqrt(v_hat) + eps, which the bound needs.
struct AdamWTerms {
  double m_hat, denom;
};
AdamWTerms adamw(double& theta, double g, double& m, double& v, int t, const AdamWOptions& o) {
  theta = theta - o.lr * o.weight_decay * theta;
  m = o.beta1 * m + (1 - o.beta1) * g;
  v = o.beta2 * v + (1 - o.beta2) * g * g;
  const double m_hat = m / (1 - std::pow(o.beta1, t));
  const double v_hat = v / (1 - std::pow(o.beta2, t));
  const double denom = std::sqrt(v_hat) + o.eps;
  theta = theta - o.lr * m_hat / denom;
  return {m_hat, denom};
}

constexpr double kRho = 1e-5;  // the fp32 gradient's error, of its tensor's largest |gradient|

struct Float64Run {
  std::vector<double> losses;       // each step's, before its update
  std::vector<double> loss_bounds;  // how far an fp32 run's loss may be from it
  Params params;                    // the final weights
  Params bounds;                    // per element, how far an fp32 run's final weight may be
};

Float64Run float64_training(const TrainSpec& s) {
  const AdamWOptions& o = s.optimizer;
  const std::vector<Token> tok = testing::tokens_of(s.batch);
  Float64Run out;
  out.params = testing::to_params(s.weights);
  Params m, v;
  std::map<std::string, double> largest;  // each tensor's largest |gradient| so far
  for (const auto& [name, x] : out.params) m[name] = v[name] = out.bounds[name] = Vec(x.size(), 0.0);
  for (int t = 1; t <= s.steps; ++t) {
    const LossAndGradients lg = testing::loss_and_gradients(s.config, out.params, tok, s.attention.mask);
    double first_order = 0;  // sum |g_i| b_i: the most the weights' differences move the loss
    for (const auto& [name, g] : lg.grads) {
      for (size_t i = 0; i < g.size(); ++i) first_order += std::abs(g[i]) * out.bounds[name][i];
    }
    out.losses.push_back(lg.loss);
    out.loss_bounds.push_back(kRho * lg.loss + first_order);
    for (auto& [name, x] : out.params) {
      const Vec& g = lg.grads.at(name);
      double& big = largest[name];
      big = std::max(big, max_abs(g));
      const double delta = kRho * big;
      Vec& b = out.bounds[name];
      for (size_t i = 0; i < x.size(); ++i) {
        const double before = x[i];
        const AdamWTerms a = adamw(x[i], g[i], m[name][i], v[name][i], t, o);
        b[i] += o.lr * delta * (1 + std::abs(a.m_hat) / a.denom) / (a.denom - delta)           // (b)
                + std::ldexp(std::abs(before) + std::abs(x[i]), -24) + std::ldexp(o.lr, -20);  // (a)
      }
    }
  }
  return out;
}

void expect_agrees(const TrainResult& got, const Float64Run& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t t = 0; t < got.losses.size(); ++t) {
    EXPECT_NEAR(got.losses[t], want.losses[t], want.loss_bounds[t]) << what << " step " << t;
    if (print_diffs())
      std::printf("%-8s loss %zu: |fp32 - f64| %.3g, bound %.3g\n", what.c_str(), t,
                  std::abs(got.losses[t] - want.losses[t]), want.loss_bounds[t]);
  }
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  double worst = 0, worst_ratio = 0, largest_bound = 0;
  for (const auto& [name, tensor] : got.params) {
    ASSERT_TRUE(want.params.count(name)) << what << ": " << name;
    const Vec a = tensor.to(DType::f64).to_vector<double>();
    const Vec &b = want.params.at(name), &bound = want.bounds.at(name);
    ASSERT_EQ(a.size(), b.size()) << what << ": " << name;
    size_t over = 0, first = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::abs(a[i] - b[i]);
      if (!(d <= bound[i]) && over++ == 0) first = i;
      worst = std::max(worst, d);
      worst_ratio = std::max(worst_ratio, d / bound[i]);
      largest_bound = std::max(largest_bound, bound[i]);
    }
    EXPECT_EQ(over, 0u) << what << ": " << name << " has " << over << " elements past their bounds, the first ["
                        << first << "]: fp32 " << a[first] << ", float64 " << b[first] << ", bound " << bound[first];
  }
  if (print_diffs())
    std::printf("%-8s weights: worst |fp32 - f64| %.3g, worst |fp32 - f64| / bound %.3g, largest bound %.3g\n",
                what.c_str(), worst, worst_ratio, largest_bound);
}

TEST(Float64Training, CombinedLayoutAndOneRankAgreeWithAFloat64Loop) {
  const TrainSpec one = make_spec(1, 1, 1, 1, 1);
  TrainSpec s = make_spec(2, 2, 2, 2, 4);  // 16 ranks
  s.config.sequence_parallel = true;
  s.config.recompute = Recompute::selective;
  s.virtual_stages = 2;
  s.zero = 3;  // FSDP over DP x CP
  const Float64Run want = float64_training(one);
  ASSERT_EQ(want.losses.size(), 3u);
  // The bounds stay far below what a step moves a weight (about lr).
  double largest_bound = 0;
  for (const auto& [name, b] : want.bounds) largest_bound = std::max(largest_bound, max_abs(b));
  EXPECT_LT(largest_bound, 0.05 * one.optimizer.lr);
  // it trains: every step lowers the loss
  EXPECT_LT(want.losses[1], want.losses[0]);
  EXPECT_LT(want.losses[2], want.losses[1]);
  if (print_diffs()) std::printf("float64 losses %.9g %.9g %.9g\n", want.losses[0], want.losses[1], want.losses[2]);
  expect_agrees(run_training(one), want, "one rank");
  expect_agrees(run_training(s), want, "16 ranks");
}

}  // namespace
}  // namespace ranksim::models

// The reference transformer (models/transformer.h): its contract against an independent float64
// implementation written here from the contract's formulas, its backward against central finite
// differences of that implementation, and every tp x cp layout against tp = cp = 1.
//
// Bounds (fp32). The single-rank model against the float64 reference: every value is a chain of
// dot products of at most K = 1280 terms (fc2) with O(1) inputs, so rounding is bounded by about
// K u |.| in the worst case and sqrt(K) u |.| in practice (u = 2^-24); we assert 2e-5 of the
// tensor's largest magnitude, which also covers the f64-vs-f32 transcendental differences.
// Parallel layouts against one rank: the same arithmetic with sums split differently (TP: the
// row-parallel partial products and the column-parallel input gradients are added across ranks;
// CP: LSE merges and dK/dV summed over ring steps; gradients summed over CP ranks), so the same
// bound applies, relative to each tensor's largest magnitude; measured, the largest is 4.6e-7 (of
// the logits), so we assert 5e-6 there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "cp/context_parallel.h"
#include "model_test_util.h"
#include "models/rope.h"
#include "models/run.h"
#include "models/transformer.h"
#include "models/validation.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/safetensors.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"

namespace ranksim::models {
namespace {

using testing::error_of;

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using ::testing::HasSubstr;
using i64 = std::int64_t;

// --- RoPE ---------------------------------------------------------------------------------------

TEST(Rope, MatchesTheClosedFormInFloat64) {
  const Tensor x = Tensor::uniform({5, 3, 8}, 7, -1, 1);
  const std::vector<i64> pos = {0, 1, 7, 100, 4095};
  const Tensor y = rope(x.to(DType::f64), pos);
  for (i64 t = 0; t < 5; ++t) {
    for (i64 h = 0; h < 3; ++h) {
      for (i64 i = 0; i < 4; ++i) {
        const double theta = static_cast<double>(pos[static_cast<std::size_t>(t)]) * std::pow(10000.0, -2.0 * i / 8.0);
        const double a = x.at({t, h, i}), b = x.at({t, h, i + 4});
        EXPECT_NEAR(y.at({t, h, i}), a * std::cos(theta) - b * std::sin(theta), 1e-12);
        EXPECT_NEAR(y.at({t, h, i + 4}), b * std::cos(theta) + a * std::sin(theta), 1e-12);
      }
    }
  }
}

TEST(Rope, PositionZeroIsTheIdentityAndBackwardIsTheAdjoint) {
  const Tensor x = Tensor::uniform({4, 2, 16}, 3, -1, 1).to(DType::f64);
  const Tensor dy = Tensor::uniform({4, 2, 16}, 4, -1, 1).to(DType::f64);
  EXPECT_TRUE(runtime::bitwise_equal(rope(x, {0, 0, 0, 0}), x));
  const std::vector<i64> pos = {3, 0, 17, 9};
  // <rope(x), dy> == <x, rope_backward(dy)>: the backward is the transpose of the rotation.
  const std::vector<double> a = rope(x, pos).to_vector<double>(), b = dy.to_vector<double>();
  const std::vector<double> c = x.to_vector<double>(), d = rope_backward(dy, pos).to_vector<double>();
  double lhs = 0, rhs = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    lhs += a[i] * b[i];
    rhs += c[i] * d[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-12);
  EXPECT_GT(std::abs(lhs - std::inner_product(c.begin(), c.end(), b.begin(), 0.0)), 1e-3);
}

TEST(Rope, Errors) {
  EXPECT_THAT(error_of([] { rope(Tensor::zeros({2, 1, 3}), {0, 1}); }), HasSubstr("head_dim 3 must be even"));
  EXPECT_THAT(error_of([] { rope(Tensor::zeros({2, 1, 4}), {0}); }), HasSubstr("1 positions"));
  EXPECT_THAT(error_of([] { rope(Tensor::zeros({2, 4}), {0, 1}); }), HasSubstr("[tokens, heads, head_dim]"));
}

// --- An independent float64 implementation of the contract ---------------------------------------

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;

Params to_params(const Weights& w) {
  Params p;
  for (const auto& [name, t] : w) p[name] = t.to(DType::f64).to_vector<double>();
  return p;
}

struct Token {
  i64 id, label, pos, seg;
};

std::vector<Token> tokens_of(const Batch& b) {
  std::vector<Token> out;
  const std::vector<i64> ids = b.input_ids.to(DType::i64).to_vector<i64>();
  const std::vector<i64> labels = b.labels.to(DType::i64).to_vector<i64>();
  if (b.format == cp::Format::bshd) {
    const i64 S = b.input_ids.size(1);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      out.push_back({ids[i], labels[i], static_cast<i64>(i) % S, static_cast<i64>(i) / S});
    }
  } else {
    for (std::size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
      for (i64 t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1]; ++t) {
        out.push_back({ids[static_cast<std::size_t>(t)], labels[static_cast<std::size_t>(t)], t - b.cu_seqlens[s],
                       static_cast<i64>(s)});
      }
    }
  }
  return out;
}

// y[n, out] = x[n, in] W[out, in]^T + b
Vec linear(const Vec& x, i64 n, i64 in, const Vec& w, const Vec& b, i64 out) {
  Vec y(static_cast<std::size_t>(n * out));
  for (i64 r = 0; r < n; ++r) {
    for (i64 o = 0; o < out; ++o) {
      double s = b[static_cast<std::size_t>(o)];
      for (i64 i = 0; i < in; ++i)
        s += x[static_cast<std::size_t>(r * in + i)] * w[static_cast<std::size_t>(o * in + i)];
      y[static_cast<std::size_t>(r * out + o)] = s;
    }
  }
  return y;
}

Vec layer_norm(const Vec& x, i64 n, i64 h, const Vec& w, const Vec& b) {
  Vec y(x.size());
  for (i64 r = 0; r < n; ++r) {
    double m = 0, v = 0;
    for (i64 j = 0; j < h; ++j) m += x[static_cast<std::size_t>(r * h + j)];
    m /= static_cast<double>(h);
    for (i64 j = 0; j < h; ++j) v += std::pow(x[static_cast<std::size_t>(r * h + j)] - m, 2);
    v /= static_cast<double>(h);
    for (i64 j = 0; j < h; ++j) {
      const std::size_t k = static_cast<std::size_t>(r * h + j);
      y[k] = (x[k] - m) / std::sqrt(v + 1e-5) * w[static_cast<std::size_t>(j)] + b[static_cast<std::size_t>(j)];
    }
  }
  return y;
}

struct RefOut {
  Vec logits;  // [tokens, vocab], every token in global order
  double loss = 0;
};

RefOut reference(const TransformerConfig& c, const Params& p, const std::vector<Token>& tok, const AttentionSetup& a) {
  const i64 n = static_cast<i64>(tok.size()), h = c.hidden, d = c.head_dim, nh = c.heads;
  Vec x(static_cast<std::size_t>(n * h));
  for (i64 r = 0; r < n; ++r) {
    for (i64 j = 0; j < h; ++j)
      x[static_cast<std::size_t>(r * h + j)] =
          p.at("embedding.weight")[static_cast<std::size_t>(tok[static_cast<std::size_t>(r)].id * h + j)];
  }
  const Vec qkv = linear(layer_norm(x, n, h, p.at("layer.ln1.weight"), p.at("layer.ln1.bias")), n, h,
                         p.at("layer.qkv.weight"), p.at("layer.qkv.bias"), 3 * h);
  auto at = [&](i64 r, i64 part, i64 head, i64 i) {
    return qkv[static_cast<std::size_t>(r * 3 * h + part * h + head * d + i)];
  };
  // rotated q and k: [n, heads, d]
  Vec q(static_cast<std::size_t>(n * h)), k(static_cast<std::size_t>(n * h));
  for (i64 r = 0; r < n; ++r) {
    for (i64 hd = 0; hd < nh; ++hd) {
      for (i64 i = 0; i < d / 2; ++i) {
        const double th = static_cast<double>(tok[static_cast<std::size_t>(r)].pos) *
                          std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        for (int part = 0; part < 2; ++part) {
          Vec& dst = part == 0 ? q : k;
          const double x1 = at(r, part, hd, i), x2 = at(r, part, hd, i + d / 2);
          dst[static_cast<std::size_t>(r * h + hd * d + i)] = x1 * std::cos(th) - x2 * std::sin(th);
          dst[static_cast<std::size_t>(r * h + hd * d + i + d / 2)] = x2 * std::cos(th) + x1 * std::sin(th);
        }
      }
    }
  }
  auto visible = [&](const Token& qt, const Token& kt) {
    if (qt.seg != kt.seg) return false;
    const i64 delta = kt.pos - qt.pos;
    const i64 right = a.mask == Mask::causal ? 0 : a.window_right;
    if (right >= 0 && delta > right) return false;
    if (a.window_left >= 0 && -delta > a.window_left) return false;
    return true;
  };
  Vec att(static_cast<std::size_t>(n * h), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (i64 hd = 0; hd < nh; ++hd) {
    for (i64 r = 0; r < n; ++r) {
      Vec s(static_cast<std::size_t>(n), -INFINITY);
      double m = -INFINITY;
      for (i64 j = 0; j < n; ++j) {
        if (!visible(tok[static_cast<std::size_t>(r)], tok[static_cast<std::size_t>(j)])) continue;
        double dot = 0;
        for (i64 i = 0; i < d; ++i)
          dot += q[static_cast<std::size_t>(r * h + hd * d + i)] * k[static_cast<std::size_t>(j * h + hd * d + i)];
        s[static_cast<std::size_t>(j)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      if (m == -INFINITY) continue;
      double z = 0;
      for (i64 j = 0; j < n; ++j) z += std::exp(s[static_cast<std::size_t>(j)] - m);
      for (i64 j = 0; j < n; ++j) {
        const double pj = std::exp(s[static_cast<std::size_t>(j)] - m) / z;
        for (i64 i = 0; i < d; ++i) att[static_cast<std::size_t>(r * h + hd * d + i)] += pj * at(j, 2, hd, i);
      }
    }
  }
  const Vec proj = linear(att, n, h, p.at("layer.proj.weight"), p.at("layer.proj.bias"), h);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  Vec f1 = linear(layer_norm(x, n, h, p.at("layer.ln2.weight"), p.at("layer.ln2.bias")), n, h, p.at("layer.fc1.weight"),
                  p.at("layer.fc1.bias"), c.ffn);
  for (double& v : f1) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  const Vec f2 = linear(f1, n, c.ffn, p.at("layer.fc2.weight"), p.at("layer.fc2.bias"), h);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += f2[i];
  RefOut out;
  out.logits = linear(layer_norm(x, n, h, p.at("final_ln.weight"), p.at("final_ln.bias")), n, h, p.at("output.weight"),
                      p.at("output.bias"), c.vocab);
  double sum = 0;
  i64 count = 0;
  for (i64 r = 0; r < n; ++r) {
    const i64 label = tok[static_cast<std::size_t>(r)].label;
    if (label == kIgnoreIndex) continue;
    double m = -INFINITY, z = 0;
    for (i64 j = 0; j < c.vocab; ++j) m = std::max(m, out.logits[static_cast<std::size_t>(r * c.vocab + j)]);
    for (i64 j = 0; j < c.vocab; ++j) z += std::exp(out.logits[static_cast<std::size_t>(r * c.vocab + j)] - m);
    sum += m + std::log(z) - out.logits[static_cast<std::size_t>(r * c.vocab + label)];
    ++count;
  }
  out.loss = sum / static_cast<double>(count);
  return out;
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

AttentionSetup setup(cp::Format f, Mask m, cp::CommType comm = cp::CommType::p2p, i64 wl = -1, i64 wr = -1) {
  AttentionSetup a;
  a.format = f;
  a.mask = m;
  a.comm = comm;
  a.window_left = wl;
  a.window_right = wr;
  return a;
}

struct RefCase {
  cp::Format format;
  Mask mask;
  i64 wl, wr;
};

class ContractTest : public ::testing::TestWithParam<RefCase> {};

TEST_P(ContractTest, SingleRankForwardMatchesFloat64) {
  const RefCase rc = GetParam();
  TransformerRunSpec s;
  s.weights = seeded_weights(s.config, 11);
  s.batch = dummy_batch(rc.format, s.config.vocab, 5);
  s.attention = setup(rc.format, rc.mask, cp::CommType::p2p, rc.wl, rc.wr);
  const TransformerDump got = run_transformer(s);
  const RefOut want = reference(s.config, to_params(s.weights), tokens_of(s.batch), s.attention);
  const Vec g = got.logits.to(DType::f64).to_vector<double>();
  ASSERT_EQ(g.size(), want.logits.size());
  const double bound = 2e-5 * max_abs(want.logits);
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - want.logits[i]));
  EXPECT_LE(worst, bound);
  EXPECT_GT(max_abs(want.logits), 0.5);  // a problem with something in it
  EXPECT_NEAR(got.loss, want.loss, 2e-6 * want.loss);
  EXPECT_EQ(got.tokens, s.batch.format == cp::Format::thd ? 20 : 62);
}

INSTANTIATE_TEST_SUITE_P(
    Masks, ContractTest,
    ::testing::Values(RefCase{cp::Format::thd, Mask::padding, -1, -1}, RefCase{cp::Format::thd, Mask::causal, -1, -1},
                      RefCase{cp::Format::thd, Mask::causal, 3, 0}, RefCase{cp::Format::bshd, Mask::causal, -1, -1},
                      RefCase{cp::Format::bshd, Mask::no_mask, -1, -1}, RefCase{cp::Format::bshd, Mask::no_mask, 5, 2}),
    [](const ::testing::TestParamInfo<RefCase>& p) {
      const RefCase& c = p.param;
      return std::string(c.format == cp::Format::thd ? "thd_" : "bshd_") + mask_name(c.mask) +
             (c.wl >= 0 ? "_window" : "");
    });

// The backward against central differences of the float64 reference, on a small model (every
// parameter, the largest-gradient elements and a few seeded ones).
TEST(Transformer, GradientsMatchFiniteDifferencesOfTheFloat64Reference) {
  for (const RefCase rc :
       {RefCase{cp::Format::thd, Mask::causal, -1, -1}, RefCase{cp::Format::bshd, Mask::no_mask, 4, 4}}) {
    TransformerRunSpec s;
    s.config.hidden = 32;
    s.config.heads = 4;
    s.config.head_dim = 8;
    s.config.ffn = 48;
    s.weights = seeded_weights(s.config, 3);
    s.batch = dummy_batch(rc.format, s.config.vocab, 9);
    s.attention = setup(rc.format, rc.mask, cp::CommType::p2p, rc.wl, rc.wr);
    const TransformerDump got = run_transformer(s);
    Params p = to_params(s.weights);
    const std::vector<Token> tok = tokens_of(s.batch);
    for (const auto& [name, grad] : got.grads) {
      const Vec g = grad.to(DType::f64).to_vector<double>();
      std::vector<std::size_t> picks;
      const std::size_t big = static_cast<std::size_t>(
          std::max_element(g.begin(), g.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }) -
          g.begin());
      picks.push_back(big);
      for (std::uint64_t c = 0; c < 3; ++c) picks.push_back(runtime::random_bits(17, c) % g.size());
      const double scale = max_abs(g);
      ASSERT_GT(scale, 0) << name << " has a zero gradient";
      for (std::size_t i : picks) {
        const double keep = p[name][i], eps = 1e-5;
        p[name][i] = keep + eps;
        const double up = reference(s.config, p, tok, s.attention).loss;
        p[name][i] = keep - eps;
        const double down = reference(s.config, p, tok, s.attention).loss;
        p[name][i] = keep;
        const double fd = (up - down) / (2 * eps);
        EXPECT_NEAR(g[i], fd, 2e-4 * scale + 1e-8) << name << "[" << i << "]";
      }
    }
  }
}

TEST(Transformer, ParameterNamesAndShapesAreTheContract) {
  const TransformerConfig c;
  const std::vector<std::pair<std::string, Shape>> want = {
      {"embedding.weight", {33, 320}},   {"layer.ln1.weight", {320}}, {"layer.ln1.bias", {320}},
      {"layer.qkv.weight", {960, 320}},  {"layer.qkv.bias", {960}},   {"layer.proj.weight", {320, 320}},
      {"layer.proj.bias", {320}},        {"layer.ln2.weight", {320}}, {"layer.ln2.bias", {320}},
      {"layer.fc1.weight", {1280, 320}}, {"layer.fc1.bias", {1280}},  {"layer.fc2.weight", {320, 1280}},
      {"layer.fc2.bias", {320}},         {"final_ln.weight", {320}},  {"final_ln.bias", {320}},
      {"output.weight", {33, 320}},      {"output.bias", {33}}};
  EXPECT_EQ(parameter_shapes(c), want);
  const Weights a = seeded_weights(c, 1), b = seeded_weights(c, 1), d = seeded_weights(c, 2);
  for (const auto& [name, shape] : want) {
    EXPECT_TRUE(runtime::bitwise_equal(a.at(name), b.at(name))) << name;
    EXPECT_FALSE(runtime::bitwise_equal(a.at(name), d.at(name))) << name;
  }
}

// --- tp x cp against tp = cp = 1 ----------------------------------------------------------------

struct Layout {
  cp::Format format;
  Mask mask;
  cp::CommType comm;
  int tp, cp;
  i64 wl = -1, wr = -1;
};

std::string layout_name(const Layout& l) {
  std::string comm = cp::comm_type_name(l.comm);
  std::replace(comm.begin(), comm.end(), '+', '_');
  return std::string(l.format == cp::Format::thd ? "thd_" : "bshd_") + mask_name(l.mask) +
         (l.wl >= 0 ? "_window" : "") + "_" + comm + "_tp" + std::to_string(l.tp) + "_cp" + std::to_string(l.cp);
}

const TransformerDump& baseline(cp::Format f, Mask m, i64 wl, i64 wr, DType dtype = DType::f32) {
  static std::map<std::tuple<int, int, i64, i64, int>, TransformerDump> cache;
  const auto key = std::make_tuple(static_cast<int>(f), static_cast<int>(m), wl, wr, static_cast<int>(dtype));
  auto it = cache.find(key);
  if (it == cache.end()) {
    TransformerRunSpec s;
    s.config.dtype = dtype;
    s.weights = seeded_weights(s.config, 11);
    s.batch = dummy_batch(f, s.config.vocab, 5);
    s.attention = setup(f, m, cp::CommType::p2p, wl, wr);
    it = cache.emplace(key, run_transformer(s)).first;
  }
  return it->second;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const Vec g = got.to(DType::f64).to_vector<double>(), w = want.to(DType::f64).to_vector<double>();
  const double bound = 5e-6 * max_abs(w);
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
  EXPECT_LE(worst, bound) << what << ": max |diff| " << worst << " over a largest magnitude " << max_abs(w);
  if (std::getenv("RANKSIM_PRINT_DIFFS")) std::printf("%-24s %.3g\n", what.c_str(), worst / max_abs(w));
  EXPECT_TRUE(std::isfinite(worst)) << what;
}

class ParallelTest : public ::testing::TestWithParam<Layout> {};

TEST_P(ParallelTest, EqualsTheSingleRankRun) {
  const Layout l = GetParam();
  TransformerRunSpec s;
  s.tp = l.tp;
  s.cp = l.cp;
  s.weights = seeded_weights(s.config, 11);
  s.batch = dummy_batch(l.format, s.config.vocab, 5);
  s.attention = setup(l.format, l.mask, l.comm, l.wl, l.wr);
  const TransformerDump got = run_transformer(s);
  const TransformerDump& want = baseline(l.format, l.mask, l.wl, l.wr);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  expect_close(got.logits, want.logits, "logits");
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (std::size_t i = 0; i < got.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].first, want.grads[i].first);
    expect_close(got.grads[i].second, want.grads[i].second, "grad " + got.grads[i].first);
  }
  // And the framework's own verdict, with its fp32 thresholds.
  EXPECT_TRUE(compare_dumps(want, got, ValidationThresholds::for_dtype(DType::f32)).ok());
}

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  const std::vector<std::pair<int, int>> grids = {{1, 2}, {1, 4}, {2, 2}};
  for (cp::CommType comm : {cp::CommType::p2p, cp::CommType::all_gather, cp::CommType::a2a, cp::CommType::a2a_p2p}) {
    for (const auto& [tp, cpn] : grids) {
      out.push_back({cp::Format::thd, Mask::padding, comm, tp, cpn});
      out.push_back({cp::Format::thd, Mask::causal, comm, tp, cpn});
      out.push_back({cp::Format::bshd, Mask::causal, comm, tp, cpn});
      out.push_back({cp::Format::bshd, Mask::no_mask, comm, tp, cpn});
    }
    out.push_back({cp::Format::thd, Mask::causal, comm, 1, 2, 3, 0});
    out.push_back({cp::Format::bshd, Mask::no_mask, comm, 2, 2, 5, 2});
  }
  // TP alone, and the widest CP the dummy batches allow (BSHD 32 tokens per row at cp 8).
  out.push_back({cp::Format::thd, Mask::causal, cp::CommType::p2p, 2, 1});
  out.push_back({cp::Format::bshd, Mask::causal, cp::CommType::p2p, 4, 1});
  out.push_back({cp::Format::bshd, Mask::causal, cp::CommType::p2p, 1, 8});
  out.push_back({cp::Format::thd, Mask::padding, cp::CommType::all_gather, 1, 8});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ParallelTest, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& p) { return layout_name(p.param); });

// Data parallelism: DP ranks take whole rows / sequences; loss and gradients over DP x CP give the
// gradient of the whole batch.
TEST(Transformer, DataParallelLayoutsEqualTheSingleRankRun) {
  for (const Layout l : {Layout{cp::Format::thd, Mask::causal, cp::CommType::p2p, 1, 2},
                         Layout{cp::Format::bshd, Mask::causal, cp::CommType::all_gather, 2, 2}}) {
    TransformerRunSpec one;
    one.weights = seeded_weights(one.config, 11);
    one.batch =
        synthetic_batch(l.format, one.config.vocab,
                        l.format == cp::Format::thd ? std::vector<i64>{7, 11, 5, 9} : std::vector<i64>{16, 16}, 21);
    one.attention = setup(l.format, l.mask, l.comm);
    const TransformerDump want = run_transformer(one);
    TransformerRunSpec s = one;
    s.tp = l.tp;
    s.cp = l.cp;
    s.dp = 2;
    const TransformerDump got = run_transformer(s);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
    expect_close(got.logits, want.logits, "logits");
    for (std::size_t i = 0; i < got.grads.size(); ++i)
      expect_close(got.grads[i].second, want.grads[i].second, "grad " + got.grads[i].first);
  }
  TransformerRunSpec s;
  s.dp = 2;
  s.weights = seeded_weights(s.config, 1);
  s.batch = dummy_batch(cp::Format::thd, 33, 1);  // 3 sequences
  EXPECT_THAT(error_of([&] { run_transformer(s); }), HasSubstr("3 sequences, which dp=2 does not divide"));
}

// Several blocks: names layers.<i>.<name>, and tp x cp equal to one rank.
TEST(Transformer, SeveralLayersAreNamedByIndexAndSplitLikeOne) {
  TransformerConfig c;
  c.layers = 3;
  const auto shapes = parameter_shapes(c);
  EXPECT_EQ(shapes.size(), 1u + 3u * 12u + 4u);
  EXPECT_EQ(shapes[1].first, "layers.0.ln1.weight");
  EXPECT_EQ(shapes[13 + 2].first, "layers.1.qkv.weight");
  EXPECT_EQ(shapes[shapes.size() - 5].first, "layers.2.fc2.bias");
  TransformerRunSpec one;
  one.config = c;
  one.weights = seeded_weights(c, 11);
  one.batch = dummy_batch(cp::Format::thd, c.vocab, 5);
  one.attention = setup(cp::Format::thd, Mask::causal, cp::CommType::a2a_p2p);
  const TransformerDump want = run_transformer(one);
  TransformerRunSpec s = one;
  s.tp = 2;
  s.cp = 2;
  const TransformerDump got = run_transformer(s);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  expect_close(got.logits, want.logits, "logits");
  ASSERT_EQ(got.grads.size(), shapes.size());
  for (std::size_t i = 0; i < got.grads.size(); ++i) {
    EXPECT_EQ(got.grads[i].first, shapes[i].first);
    expect_close(got.grads[i].second, want.grads[i].second, "grad " + got.grads[i].first);
  }
}

// --- bf16: the framework's thresholds -------------------------------------------------------------

TEST(Transformer, Bf16ContextParallelPassesTheFrameworkThresholds) {
  for (const Layout l : {Layout{cp::Format::thd, Mask::padding, cp::CommType::p2p, 1, 2},
                         Layout{cp::Format::bshd, Mask::no_mask, cp::CommType::a2a, 2, 2}}) {
    TransformerRunSpec s;
    s.config.dtype = DType::bf16;
    s.tp = l.tp;
    s.cp = l.cp;
    s.weights = seeded_weights(s.config, 11);
    s.batch = dummy_batch(l.format, s.config.vocab, 5);
    s.attention = setup(l.format, l.mask, l.comm);
    const TransformerDump got = run_transformer(s);
    const TransformerDump& bf16_one = baseline(l.format, l.mask, -1, -1, DType::bf16);
    const ValidationReport r = compare_dumps(bf16_one, got, ValidationThresholds::for_dtype(DType::bf16));
    EXPECT_TRUE(r.ok()) << layout_name(l) << ": logits " << r.logits_share << ", loss " << r.loss_rel << ", grads "
                        << r.grad_max_norm_diff << " / " << r.acceptable_share;
    // bf16 against the fp32 single-rank run as well: same thresholds.
    const ValidationReport f =
        compare_dumps(baseline(l.format, l.mask, -1, -1), got, ValidationThresholds::for_dtype(DType::bf16));
    EXPECT_TRUE(f.ok()) << layout_name(l) << " vs fp32: logits " << f.logits_share << ", loss " << f.loss_rel;
    // But not the fp32 thresholds: bf16 is visibly different, which the fp32 defaults catch.
    EXPECT_FALSE(
        compare_dumps(baseline(l.format, l.mask, -1, -1), got, ValidationThresholds::for_dtype(DType::f32)).ok());
  }
}

TEST(Validation, CatchesAWrongRun) {
  const TransformerDump& good = baseline(cp::Format::thd, Mask::causal, -1, -1);
  TransformerDump bad = good;
  // a run whose gradients of one parameter were not summed over CP (half of them)
  bad.grads[3].second = runtime::scale(good.grads[3].second, 0.5);
  ValidationReport r = compare_dumps(good, bad, ValidationThresholds::for_dtype(DType::bf16));
  EXPECT_TRUE(r.logits_ok);
  EXPECT_TRUE(r.loss_ok);
  EXPECT_FALSE(r.grads_ok);
  EXPECT_EQ(r.grads[3].category, GradCategory::poor);
  // logits of the wrong tokens: shifted by one row
  TransformerDump shifted = good;
  shifted.logits = runtime::cat({good.logits.narrow(0, 1, good.logits.size(0) - 1), good.logits.narrow(0, 0, 1)}, 0);
  EXPECT_FALSE(compare_dumps(good, shifted, ValidationThresholds::for_dtype(DType::bf16)).logits_ok);
  TransformerDump lossy = good;
  lossy.loss *= 1.1;
  EXPECT_FALSE(compare_dumps(good, lossy, ValidationThresholds::for_dtype(DType::bf16)).loss_ok);
}

// --- determinism, dumps and errors ----------------------------------------------------------------

TEST(Transformer, RunsRepeatBitForBitAndDumpsRoundTrip) {
  TransformerRunSpec s;
  s.tp = 2;
  s.cp = 2;
  s.weights = seeded_weights(s.config, 11);
  s.batch = dummy_batch(cp::Format::thd, s.config.vocab, 5);
  s.attention = setup(cp::Format::thd, Mask::causal, cp::CommType::a2a_p2p);
  const TransformerDump a = run_transformer(s), b = run_transformer(s);
  EXPECT_TRUE(runtime::bitwise_equal(a.logits, b.logits));
  EXPECT_EQ(a.loss, b.loss);
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(runtime::bitwise_equal(a.grads[i].second, b.grads[i].second));
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ranksim_dump_" + std::to_string(::getpid()) + ".safetensors"))
          .string();
  write_dump(path, a);
  const runtime::SafetensorsFile f = runtime::load_safetensors(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(runtime::bitwise_equal(f.at("logits"), a.logits));
  EXPECT_EQ(f.at("logits").shape(), (Shape{23, 33}));
  EXPECT_EQ(f.at("loss").item(), static_cast<float>(a.loss));
  for (const auto& [name, g] : a.grads) EXPECT_TRUE(runtime::bitwise_equal(f.at("grad/" + name), g)) << name;
}

std::string run_error(TransformerRunSpec s) {
  if (!s.weights.size()) s.weights = seeded_weights(s.config, 1);
  if (!s.batch.input_ids.defined()) s.batch = dummy_batch(s.attention.format, s.config.vocab, 1);
  return error_of([&] { run_transformer(s); });
}

TEST(Transformer, BadInputGivesClearErrors) {
  {
    TransformerRunSpec s;  // 20 heads, tp 3
    s.tp = 3;
    EXPECT_THAT(run_error(s), HasSubstr("20 attention heads are not divisible by tp=3"));
  }
  {
    TransformerRunSpec s;  // a2a: 20 heads over cp 8
    s.cp = 8;
    s.attention = setup(cp::Format::bshd, Mask::causal, cp::CommType::a2a);
    EXPECT_THAT(run_error(s), HasSubstr("20"));
    EXPECT_THAT(run_error(s), HasSubstr("8"));
  }
  {
    TransformerRunSpec s;
    s.attention = setup(cp::Format::bshd, Mask::padding);
    EXPECT_THAT(run_error(s), HasSubstr("mask 'padding' needs format thd"));
    s.attention = setup(cp::Format::thd, Mask::no_mask);
    EXPECT_THAT(run_error(s), HasSubstr("format thd takes mask 'padding'"));
    s.attention = setup(cp::Format::thd, Mask::causal, cp::CommType::p2p, 4, 2);
    EXPECT_THAT(run_error(s), HasSubstr("a causal mask takes a right window of 0"));
  }
  {
    TransformerRunSpec s;
    s.attention = setup(cp::Format::thd, Mask::causal);
    s.batch = dummy_batch(cp::Format::thd, 33, 1);
    s.batch.cu_seqlens = {0, 7, 5, 23};
    EXPECT_THAT(run_error(s), HasSubstr("cu_seqlens [0, 7, 5, 23] decreases at index 2"));
    s.batch.cu_seqlens = {0, 7, 18, 22};
    EXPECT_THAT(run_error(s), HasSubstr("ends at 22 but input_ids has 23 tokens"));
  }
  {
    TransformerRunSpec s;
    s.batch = dummy_batch(cp::Format::bshd, 33, 1);
    s.batch.labels = s.batch.labels.narrow(1, 0, 16).contiguous();
    EXPECT_THAT(run_error(s), HasSubstr("must have the same shape"));
    s.batch = dummy_batch(cp::Format::bshd, 33, 1);
    s.batch.input_ids.set({0, 3}, 33);
    EXPECT_THAT(run_error(s), HasSubstr("input id 33 is outside the vocabulary [0, 33)"));
    s.batch = dummy_batch(cp::Format::bshd, 33, 1);
    s.cp = 3;
    EXPECT_THAT(run_error(s), HasSubstr("not a multiple of 2*cp = 6"));
  }
  {
    TransformerRunSpec s;
    s.config.kv_heads = 3;  // of 20 query heads
    EXPECT_THAT(error_of([&] { seeded_weights(s.config, 1); }), HasSubstr("kv_heads 3 must divide heads 20"));
  }
}

}  // namespace
}  // namespace ranksim::models

// The GPT / Llama decoder family (models/transformer.h: TransformerConfig's kv_heads, norm,
// activation, bias, positions): each variant against a float64 implementation of the contract
// written here from its formulas (not from the model's code), its backward against central finite
// differences of that implementation, every tp / cp / dp / pp layout against one rank, and the
// parameter list and the errors against the contract.
//
// Bounds (fp32), as in transformer_test.cpp. One rank against float64: chains of dot products of
// at most 64 terms with O(1) inputs, rounding well inside 2e-5 of a tensor's largest magnitude
// (which also covers f64-vs-f32 transcendentals). Layouts against one rank: TP adds row-parallel
// partial products (and, with kv < tp, the key/value gradients of the query heads each rank holds)
// across ranks, CP merges softmax partials and sums dK/dV over steps, DP sums gradients over ranks;
// each is the same sum in another order, so these are not bitwise (runtime/tensor/ops.h: each sum
// runs in one fixed order, which a split changes) and we assert 5e-6 of each tensor's largest
// magnitude, as ParallelTest does (measured, the largest is 6e-7). A gradient that is zero in
// exact arithmetic (the key bias: a constant added to a score row leaves the softmax unchanged) is
// rounding noise, so a bias is measured at the scale of its weight's gradient. A pipeline split
// does not reorder any sum: pp = 2 equals one rank bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cp/context_parallel.h"
#include "models/batch.h"
#include "models/run.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"

#include "float64_reference.h"
#include "model_test_util.h"

namespace ranksim::models {
namespace {

using testing::error_of;

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using ::testing::HasSubstr;
using i64 = std::int64_t;
using std::size_t;

// --- The configs under test -----------------------------------------------------------------------

constexpr i64 kVocab = 17;

// Llama: RMSNorm, SwiGLU, no biases, 2 of 4 heads for keys and values, RoPE; two blocks.
TransformerConfig llama() { return llama_config(kVocab, 32, 4, 2, 48, 2); }
// Multi-query attention: one key/value head.
TransformerConfig mqa() { return llama_config(kVocab, 32, 4, 1, 48, 1); }
// GPT: LayerNorm, GELU, biases, multi-head attention, learned positions (the dummy batches'
// longest sequence is 32 tokens: positions 0..31).
TransformerConfig gpt() { return gpt_config(kVocab, 32, 4, 64, 1, 32); }
// hidden 24 != heads * head_dim 32, grouped-query attention with biases, SwiGLU with biases,
// LayerNorm, learned positions.
TransformerConfig narrow() {
  TransformerConfig c;
  c.vocab = kVocab;
  c.hidden = 24;
  c.heads = 4;
  c.head_dim = 8;
  c.kv_heads = 2;
  c.ffn = 40;
  c.activation = Activation::swiglu;
  c.positions = Positions::learned;
  c.max_positions = 40;
  return c;
}
// hidden 16 < heads * head_dim 32 with fused qkv, RMSNorm, GELU, biases, RoPE.
TransformerConfig wide() {
  TransformerConfig c;
  c.vocab = kVocab;
  c.hidden = 16;
  c.heads = 4;
  c.head_dim = 8;
  c.ffn = 24;
  c.norm = Norm::rmsnorm;
  return c;
}

// --- An independent float64 implementation of the family's contract --------------------------------

using testing::Params;
using testing::Reference;
using testing::to_params;
using testing::Token;
using testing::tokens_of;
using testing::Vec;

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}
double max_abs(const Tensor& t) { return max_abs(t.to(DType::f64).to_vector<double>()); }

AttentionSetup setup(cp::Format f, Mask m, cp::CommType comm = cp::CommType::p2p) {
  AttentionSetup a;
  a.format = f;
  a.mask = m;
  a.comm = comm;
  return a;
}

// --- 1. One rank against the float64 reference ----------------------------------------------------

struct ForwardCase {
  std::string name;
  TransformerConfig config;
  cp::Format format;
  Mask mask;
};

void PrintTo(const ForwardCase& c, std::ostream* os) { *os << c.name; }

class FamilyForward : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(FamilyForward, SingleRankMatchesFloat64) {
  const ForwardCase& fc = GetParam();
  TransformerRunSpec s;
  s.config = fc.config;
  s.weights = seeded_weights(s.config, 11);
  s.batch = dummy_batch(fc.format, s.config.vocab, 5);
  s.attention = setup(fc.format, fc.mask);
  const TransformerDump got = run_transformer(s);
  const Params p = to_params(s.weights);
  const Reference::Out want = Reference{s.config, p}.run(tokens_of(s.batch), fc.mask);
  const Vec g = got.logits.to(DType::f64).to_vector<double>();
  ASSERT_EQ(g.size(), want.logits.v.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - want.logits.v[i]));
  EXPECT_LE(worst, 2e-5 * max_abs(want.logits.v)) << "largest |logit| " << max_abs(want.logits.v);
  EXPECT_GT(max_abs(want.logits.v), 0.5);  // logits with something in them
  EXPECT_NEAR(got.loss, want.loss, 2e-6 * want.loss);
  EXPECT_EQ(got.tokens, fc.format == cp::Format::thd ? 20 : 62);
}

std::vector<ForwardCase> forward_cases() {
  std::vector<ForwardCase> out;
  for (const auto& [name, config] : std::vector<std::pair<std::string, TransformerConfig>>{
           {"llama", llama()}, {"mqa", mqa()}, {"gpt", gpt()}, {"narrow", narrow()}, {"wide", wide()}}) {
    out.push_back({name + "_bshd_causal", config, cp::Format::bshd, Mask::causal});
    out.push_back({name + "_thd_padding", config, cp::Format::thd, Mask::padding});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, FamilyForward, ::testing::ValuesIn(forward_cases()),
                         [](const ::testing::TestParamInfo<ForwardCase>& p) { return p.param.name; });

// --- 2. The backward against central differences of the reference ----------------------------------

// The scale a gradient is measured at: its own largest magnitude, or for a bias its weight's
// (a bias gradient can be zero in exact arithmetic: the key bias).
double grad_scale(const std::vector<std::pair<std::string, Tensor>>& grads, const std::string& name) {
  double s = 0;
  const std::string suffix = ".bias";
  const bool bias =
      name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string weight = bias ? name.substr(0, name.size() - suffix.size()) + ".weight" : name;
  for (const auto& [n, g] : grads) {
    if (n == name || n == weight) s = std::max(s, max_abs(g));
  }
  return s;
}

TEST(FamilyGradients, MatchFiniteDifferencesOfTheFloat64Reference) {
  struct Case {
    TransformerConfig config;
    Batch batch;
    Mask mask;
  };
  const std::vector<Case> cases = {
      {llama(), dummy_batch(cp::Format::thd, kVocab, 9), Mask::causal},
      {llama(), synthetic_batch(cp::Format::bshd, kVocab, {12, 12}, 4), Mask::causal},
      {narrow(), dummy_batch(cp::Format::thd, kVocab, 9), Mask::padding},
  };
  for (const Case& cs : cases) {
    TransformerRunSpec s;
    s.config = cs.config;
    s.weights = seeded_weights(s.config, 3);
    s.batch = cs.batch;
    s.attention = setup(cs.batch.format, cs.mask);
    const TransformerDump got = run_transformer(s);
    Params p = to_params(s.weights);
    const std::vector<Token> tok = tokens_of(s.batch);
    const Reference ref{s.config, p};
    ASSERT_EQ(got.grads.size(), p.size());
    for (const auto& [name, grad] : got.grads) {
      const Vec g = grad.to(DType::f64).to_vector<double>();
      ASSERT_EQ(g.size(), p.at(name).size()) << name;
      const double scale = grad_scale(got.grads, name);
      ASSERT_GT(scale, 0) << name;
      std::vector<size_t> picks = {static_cast<size_t>(
          std::max_element(g.begin(), g.end(), [](double a, double b) { return std::abs(a) < std::abs(b); }) -
          g.begin())};
      for (std::uint64_t k = 0; k < 3; ++k) picks.push_back(runtime::random_bits(17, k) % g.size());
      for (size_t i : picks) {
        const double keep = p[name][i], eps = 1e-5;
        p[name][i] = keep + eps;
        const double up = ref.run(tok, cs.mask).loss;
        p[name][i] = keep - eps;
        const double down = ref.run(tok, cs.mask).loss;
        p[name][i] = keep;
        EXPECT_NEAR(g[i], (up - down) / (2 * eps), 2e-4 * scale + 1e-8) << name << "[" << i << "]";
      }
    }
  }
}

// --- 3. Layouts against one rank ------------------------------------------------------------------

void expect_close(const Tensor& got, const Tensor& want, double scale, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const Vec g = got.to(DType::f64).to_vector<double>(), w = want.to(DType::f64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
  EXPECT_TRUE(std::isfinite(worst)) << what;
  EXPECT_LE(worst, 5e-6 * scale) << what << ": max |diff| " << worst << " at a scale of " << scale;
  if (std::getenv("RANKSIM_PRINT_DIFFS"))
    std::printf("%-28s %.3g%s\n", what.c_str(), worst / scale, runtime::bitwise_equal(got, want) ? " (bitwise)" : "");
}

void expect_same_step(const TransformerDump& got, const TransformerDump& want) {
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss);
  expect_close(got.logits, want.logits, max_abs(want.logits), "logits");
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].first, want.grads[i].first);
    expect_close(got.grads[i].second, want.grads[i].second, grad_scale(want.grads, want.grads[i].first),
                 "grad " + got.grads[i].first);
  }
}

struct Layout {
  std::string config;  // "llama<kv>", "narrow", "gpt"
  cp::Format format;
  Mask mask;
  cp::CommType comm;
  int tp, cp, dp = 1;
  bool sp = false;  // sequence parallelism
};

// heads = 8 (head_dim 4) with kv key/value heads.
TransformerConfig llama8(i64 kv) { return llama_config(kVocab, 32, 8, kv, 48, 1); }

TransformerConfig layout_config(const std::string& name) {
  if (name == "gpt") return gpt();
  if (name == "narrow") return narrow();
  return llama8(std::stoi(name.substr(5)));
}

// Batches every layout splits: BSHD 2 rows of 16 (S a multiple of 2 cp = 4), THD four sequences
// (two per DP rank) of 33 tokens, which tp does not divide.
Batch layout_batch(cp::Format f) {
  return synthetic_batch(f, kVocab, f == cp::Format::thd ? std::vector<i64>{7, 11, 5, 10} : std::vector<i64>{16, 16},
                         5);
}

std::string layout_name(const Layout& l) {
  std::string comm = cp::comm_type_name(l.comm);
  std::replace(comm.begin(), comm.end(), '+', '_');
  return l.config + (l.format == cp::Format::thd ? "_thd_" : "_bshd_") + mask_name(l.mask) + "_" + comm + "_tp" +
         std::to_string(l.tp) + "_cp" + std::to_string(l.cp) + "_dp" + std::to_string(l.dp) + (l.sp ? "_sp" : "");
}

void PrintTo(const Layout& l, std::ostream* os) { *os << layout_name(l); }

class FamilyLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(FamilyLayouts, EqualTheSingleRankRun) {
  const Layout& l = GetParam();
  TransformerRunSpec one;
  one.config = layout_config(l.config);
  one.weights = seeded_weights(one.config, 11);
  one.batch = layout_batch(l.format);
  one.attention = setup(l.format, l.mask, l.comm);
  const TransformerDump want = run_transformer(one);
  TransformerRunSpec s = one;
  s.tp = l.tp;
  s.cp = l.cp;
  s.dp = l.dp;
  s.config.sequence_parallel = l.sp;
  expect_same_step(run_transformer(s), want);
}

std::vector<Layout> layouts() {
  using cp::CommType;
  using cp::Format;
  std::vector<Layout> out;
  for (i64 kv : {1, 2, 4, 8}) {
    const std::string c = "llama" + std::to_string(kv);
    for (int tp : {2, 4}) {  // kv < tp, kv == tp and kv > tp
      out.push_back({c, Format::thd, Mask::causal, CommType::p2p, tp, 1});
      out.push_back({c, Format::bshd, Mask::causal, CommType::p2p, tp, 1});
    }
    out.push_back({c, Format::thd, Mask::padding, CommType::p2p, 1, 2});
    out.push_back({c, Format::bshd, Mask::causal, CommType::p2p, 1, 2});
    if (kv >= 2) {  // a2a splits the key/value heads over cp (kv = 1: FamilyErrors)
      out.push_back({c, Format::thd, Mask::causal, CommType::a2a, 1, 2});
      out.push_back({c, Format::bshd, Mask::causal, CommType::a2a, 1, 2});
    }
    out.push_back({c, Format::thd, Mask::causal, CommType::p2p, 1, 1, 2});
    out.push_back({c, Format::bshd, Mask::causal, CommType::all_gather, 2, 2, 2});
  }
  // Biases with separate q, k and v (and a SwiGLU fc1 bias), learned positions, hidden != heads *
  // head_dim; and GPT.
  for (int tp : {2, 4}) out.push_back({"narrow", Format::thd, Mask::causal, CommType::p2p, tp, 1});
  out.push_back({"narrow", Format::thd, Mask::padding, CommType::a2a, 1, 2});
  out.push_back({"narrow", Format::bshd, Mask::causal, CommType::p2p, 2, 2});
  out.push_back({"gpt", Format::thd, Mask::causal, CommType::p2p, 2, 1, 2});
  out.push_back({"gpt", Format::bshd, Mask::causal, CommType::a2a, 2, 2});
  // Sequence parallelism, also with token counts that tp does not divide (THD at cp 1: 33 tokens).
  out.push_back({"llama2", Format::thd, Mask::causal, CommType::p2p, 4, 1, 1, true});
  out.push_back({"llama1", Format::bshd, Mask::causal, CommType::p2p, 2, 1, 1, true});
  out.push_back({"narrow", Format::thd, Mask::padding, CommType::p2p, 2, 2, 1, true});
  out.push_back({"gpt", Format::bshd, Mask::causal, CommType::a2a, 2, 2, 1, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, FamilyLayouts, ::testing::ValuesIn(layouts()),
                         [](const ::testing::TestParamInfo<Layout>& p) { return layout_name(p.param); });

// THD pads each sequence to a multiple of 2 cp; the pads sit past the sequence's end, so a table
// exactly as long as the longest sequence (11) must still serve cp = 2.
TEST(FamilyCp, LearnedPositionsUpToTheLongestSequence) {
  TransformerRunSpec one;
  one.config = narrow();
  one.config.max_positions = 11;
  one.weights = seeded_weights(one.config, 11);
  one.batch = layout_batch(cp::Format::thd);
  one.attention = setup(cp::Format::thd, Mask::causal);
  const TransformerDump want = run_transformer(one);
  for (const cp::CommType comm : {cp::CommType::p2p, cp::CommType::a2a}) {
    TransformerRunSpec s = one;
    s.cp = 2;
    s.attention.comm = comm;
    expect_same_step(run_transformer(s), want);
  }
}

// pp = 2 (one block per stage) runs the same arithmetic as one rank: one AdamW step's loss and
// weights are the same bits, with one and with two micro-batches.
TEST(FamilyPipeline, TwoStagesEqualOneRankBitForBit) {
  for (const cp::Format f : {cp::Format::thd, cp::Format::bshd}) {
    for (const int micro : {1, 2}) {
      TrainSpec one;
      one.config = llama();
      one.attention = setup(f, Mask::causal);
      one.weights = seeded_weights(one.config, 7);
      one.batch = layout_batch(f);
      one.micro_batches = micro;
      one.optimizer.lr = 1e-2;
      const TrainResult want = run_training(one);
      TrainSpec s = one;
      s.pp = 2;
      const TrainResult got = run_training(s);
      ASSERT_EQ(got.losses.size(), 1u);
      EXPECT_EQ(got.losses, want.losses);
      ASSERT_EQ(got.params.size(), want.params.size());
      for (size_t i = 0; i < got.params.size(); ++i) {
        EXPECT_EQ(got.params[i].first, want.params[i].first);
        EXPECT_TRUE(runtime::bitwise_equal(got.params[i].second, want.params[i].second))
            << got.params[i].first << " (micro-batches " << micro << ")";
        // and the step moved it
        EXPECT_FALSE(runtime::bitwise_equal(got.params[i].second, one.weights.at(got.params[i].first)))
            << got.params[i].first;
      }
    }
  }
}

// --- 4. Parameter names and shapes ----------------------------------------------------------------

using ShapeList = std::vector<std::pair<std::string, Shape>>;

// The contract, written out: embedding (+ positions), each block, final norm and output.
ShapeList contract_shapes(const TransformerConfig& c) {
  const i64 h = c.hidden, d = c.head_dim, nh = c.heads, kv = c.kv_heads == 0 ? c.heads : c.kv_heads;
  const bool ln = c.norm == Norm::layernorm;
  ShapeList out = {{"embedding.weight", {c.vocab, h}}};
  if (c.positions == Positions::learned) out.push_back({"position_embedding.weight", {c.max_positions, h}});
  auto linear = [&](const std::string& name, i64 o, i64 in) {
    out.push_back({name + ".weight", {o, in}});
    if (c.bias) out.push_back({name + ".bias", {o}});
  };
  auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {h}});
    if (ln) out.push_back({name + ".bias", {h}});
  };
  for (i64 l = 0; l < c.layers; ++l) {
    const std::string b = c.layers == 1 ? "layer." : "layers." + std::to_string(l) + ".";
    norm(b + "ln1");
    if (kv == nh) {
      linear(b + "qkv", 3 * nh * d, h);
    } else {
      linear(b + "q", nh * d, h);
      linear(b + "k", kv * d, h);
      linear(b + "v", kv * d, h);
    }
    linear(b + "proj", h, nh * d);
    norm(b + "ln2");
    linear(b + "fc1", c.activation == Activation::swiglu ? 2 * c.ffn : c.ffn, h);
    linear(b + "fc2", h, c.ffn);
  }
  norm("final_ln");
  linear("output", c.vocab, h);
  return out;
}

void expect_shapes(const TransformerConfig& c, const ShapeList& want) {
  EXPECT_EQ(parameter_shapes(c), want);
  EXPECT_EQ(contract_shapes(c), want);  // the helper the other tests rely on
  const Weights w = seeded_weights(c, 1);
  EXPECT_EQ(w.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(w.count(name)) << name;
    EXPECT_EQ(w.at(name).shape(), shape) << name;
  }
}

TEST(FamilyParameters, GptPresetIsTheContract) {
  const TransformerConfig c = gpt_config(kVocab, 32, 4, 64, 2, 40);
  EXPECT_EQ(c.norm, Norm::layernorm);
  EXPECT_EQ(c.activation, Activation::gelu);
  EXPECT_TRUE(c.bias);
  EXPECT_EQ(c.positions, Positions::learned);
  EXPECT_EQ(c.max_positions, 40);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.query_groups(), 4);
  EXPECT_EQ(c.layers, 2);
  ShapeList want = {{"embedding.weight", {17, 32}}, {"position_embedding.weight", {40, 32}}};
  for (const std::string b : {"layers.0.", "layers.1."}) {
    const ShapeList block = {{b + "ln1.weight", {32}}, {b + "ln1.bias", {32}},        {b + "qkv.weight", {96, 32}},
                             {b + "qkv.bias", {96}},   {b + "proj.weight", {32, 32}}, {b + "proj.bias", {32}},
                             {b + "ln2.weight", {32}}, {b + "ln2.bias", {32}},        {b + "fc1.weight", {64, 32}},
                             {b + "fc1.bias", {64}},   {b + "fc2.weight", {32, 64}},  {b + "fc2.bias", {32}}};
    want.insert(want.end(), block.begin(), block.end());
  }
  want.insert(want.end(),
              {{"final_ln.weight", {32}}, {"final_ln.bias", {32}}, {"output.weight", {17, 32}}, {"output.bias", {17}}});
  expect_shapes(c, want);
}

TEST(FamilyParameters, LlamaPresetIsTheContract) {
  const TransformerConfig c = llama_config(kVocab, 32, 4, 2, 48, 1);
  EXPECT_EQ(c.norm, Norm::rmsnorm);
  EXPECT_EQ(c.activation, Activation::swiglu);
  EXPECT_FALSE(c.bias);
  EXPECT_EQ(c.positions, Positions::rope);
  EXPECT_EQ(c.max_positions, 0);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.query_groups(), 2);
  EXPECT_FALSE(c.fused_qkv());
  expect_shapes(c, {{"embedding.weight", {17, 32}},
                    {"layer.ln1.weight", {32}},
                    {"layer.q.weight", {32, 32}},
                    {"layer.k.weight", {16, 32}},
                    {"layer.v.weight", {16, 32}},
                    {"layer.proj.weight", {32, 32}},
                    {"layer.ln2.weight", {32}},
                    {"layer.fc1.weight", {96, 32}},
                    {"layer.fc2.weight", {32, 48}},
                    {"final_ln.weight", {32}},
                    {"output.weight", {17, 32}}});
  // kv_heads == heads: the fused qkv, still without biases.
  const TransformerConfig mha = llama_config(kVocab, 32, 4, 4, 48, 1);
  EXPECT_TRUE(mha.fused_qkv());
  const ShapeList shapes = parameter_shapes(mha);
  ASSERT_EQ(shapes.size(), 9u);
  EXPECT_EQ(shapes[2], (std::pair<std::string, Shape>{"layer.qkv.weight", {96, 32}}));
  EXPECT_EQ(shapes, contract_shapes(mha));
}

TEST(FamilyParameters, GroupedQueryAttentionWithBiasesIsTheContract) {
  const TransformerConfig c = narrow();  // hidden 24, 4 heads of 8, 2 kv heads, ffn 40, SwiGLU
  expect_shapes(c, {{"embedding.weight", {17, 24}},  {"position_embedding.weight", {40, 24}},
                    {"layer.ln1.weight", {24}},      {"layer.ln1.bias", {24}},
                    {"layer.q.weight", {32, 24}},    {"layer.q.bias", {32}},
                    {"layer.k.weight", {16, 24}},    {"layer.k.bias", {16}},
                    {"layer.v.weight", {16, 24}},    {"layer.v.bias", {16}},
                    {"layer.proj.weight", {24, 32}}, {"layer.proj.bias", {24}},
                    {"layer.ln2.weight", {24}},      {"layer.ln2.bias", {24}},
                    {"layer.fc1.weight", {80, 24}},  {"layer.fc1.bias", {80}},
                    {"layer.fc2.weight", {24, 40}},  {"layer.fc2.bias", {24}},
                    {"final_ln.weight", {24}},       {"final_ln.bias", {24}},
                    {"output.weight", {17, 24}},     {"output.bias", {17}}});
  for (const TransformerConfig& other : {llama(), mqa(), gpt(), wide()})
    EXPECT_EQ(parameter_shapes(other), contract_shapes(other));
}

// --- 5. Errors ------------------------------------------------------------------------------------

std::string run_error(TransformerRunSpec s) {
  return error_of([&] {
    if (s.weights.empty()) s.weights = seeded_weights(s.config, 1);
    if (!s.batch.input_ids.defined()) s.batch = layout_batch(s.attention.format);
    run_transformer(s);
  });
}

TEST(FamilyErrors, KeyValueHeadsMustDivideHeads) {
  TransformerConfig c = llama_config(kVocab, 32, 4, 3, 48, 1);
  EXPECT_THAT(error_of([&] { check_config(c); }), HasSubstr("kv_heads 3 must divide heads 4"));
  TransformerRunSpec s;
  s.config = c;
  EXPECT_THAT(run_error(s), HasSubstr("kv_heads 3 must divide heads 4"));
}

TEST(FamilyErrors, LearnedPositionsNeedATable) {
  TransformerConfig c = gpt();
  c.max_positions = 0;
  EXPECT_THAT(error_of([&] { check_config(c); }), HasSubstr("max_positions >= 1"));
  EXPECT_THAT(error_of([&] { seeded_weights(c, 1); }), HasSubstr("max_positions >= 1"));
}

TEST(FamilyErrors, PositionsPastTheTable) {
  TransformerRunSpec s;
  s.config = gpt();
  s.config.max_positions = 12;  // BSHD rows of 16 tokens: positions up to 15
  EXPECT_THAT(run_error(s), HasSubstr("a sequence of 16 tokens is longer than the learned position table (12 rows)"));
  s.attention = setup(cp::Format::thd, Mask::causal);  // THD sequences 7, 11, 5, 10: positions up to 10
  s.config.max_positions = 10;
  EXPECT_THAT(run_error(s), HasSubstr("a sequence of 11 tokens is longer than the learned position table (10 rows)"));
  s.config.max_positions = 11;
  EXPECT_EQ(run_error(s), "(no error)");
}

TEST(FamilyErrors, TensorParallelMustSplitTheKeyValueHeads) {
  TransformerRunSpec s;
  s.config = llama_config(kVocab, 48, 6, 3, 48, 1);  // kv 3 > tp 2, not a multiple
  s.tp = 2;
  EXPECT_THAT(run_error(s), HasSubstr("3 key/value heads and tp=2 do not divide one another"));
  s.config = llama_config(kVocab, 48, 6, 2, 48, 1);  // kv 2 < tp 3, which it does not divide
  s.tp = 3;
  EXPECT_THAT(run_error(s), HasSubstr("2 key/value heads and tp=3 do not divide one another"));
}

TEST(FamilyErrors, AllToAllMustSplitTheKeyValueHeads) {
  TransformerRunSpec s;
  s.config = llama8(1);
  s.cp = 2;
  s.attention = setup(cp::Format::bshd, Mask::causal, cp::CommType::a2a);
  // refused when the model is built, before any rank runs attention
  EXPECT_THAT(run_error(s), HasSubstr("a2a splits the heads over 2 CP ranks, but each TP rank has 8 query and 1 "
                                      "key/value heads"));
}

}  // namespace
}  // namespace ranksim::models

// Megatron-LM's vocab-parallel embedding and output layer, and its uneven pipeline stages, on the
// decoder (models/transformer.h, models/train.h):
//
// - which tables are split: Transformer::vocab_parallel() holds exactly when tp > 1 divides the
//   vocabulary, and then each rank keeps V/tp rows of embedding.weight, output.weight and
//   output.bias (otherwise the whole tables);
// - the numbers: every vocab-parallel layout (tp 2 and 4, with and without sequence parallelism,
//   RoPE and learned positions, with cp, dp, pp, ZeRO-1 and FSDP) against the one-rank run --
//   one step's logits, loss and every gradient (run_transformer), and two AdamW steps
//   (run_training). The lookup's sum over TP is exact (every row has one non-zero term, the
//   others add +0): the embedding's output is the one-rank output bit for bit, checked on a first
//   stage without blocks. The rest is not bitwise: the blocks' row-parallel layers sum partial
//   products over TP, and the vocab-parallel loss sums each row's exponentials per shard and then
//   over TP (another order than one rank's loop), so one step agrees within family_test.cpp's
//   5e-6 of each tensor's largest magnitude and training within train_test.cpp's bound
//   (training_checks.h expect_close_training);
// - the timeline (shape-only runs, RunReport::trace): the embedding's all-reduce (a
//   reduce-scatter into the sequence-parallel region with RoPE), the loss's three all-reduces of
//   one float per token (max, predicted logit, sum of exponentials) and the output layer's input
//   gradient summed over TP; none of them with a vocabulary tp does not divide;
// - memory: the last stage's logits are [N, V/tp] and counted as such;
// - uneven stages: models::stage_layers' split (closed forms) and errors, training that equals
//   the even one-stage run bit for bit (a pipeline split reorders no sum; options_test.cpp's
//   interleaved test says why), and each stage running its share of blocks in the timeline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "model_test_util.h"
#include "models/batch.h"
#include "models/run.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "sim/trace.h"
#include "tp/parallel_state.h"
#include "training_checks.h"

namespace ranksim::models {
namespace {

using testing::arg;
using testing::error_of;
using testing::operator+;
using testing::repeat;
using testing::Seq;

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using ::testing::HasSubstr;
using i64 = std::int64_t;
using u64 = std::uint64_t;
using std::size_t;

constexpr i64 kVocab = 16;     // tp 2 and tp 4 divide it: vocab-parallel
constexpr i64 kOddVocab = 17;  // no tp > 1 divides it: replicated tables
constexpr i64 kHidden = 32;
// Four THD sequences, 41 tokens: no tp > 1 divides them, so sequence parallelism pads (42 rows
// at tp 2, 44 at tp 4); two sequences per DP rank at dp 2, per micro-batch at 2 micro-batches.
const std::vector<i64> kLengths{9, 14, 6, 12};
constexpr i64 kTokens = 41;

// Llama (RMSNorm, SwiGLU, no biases, RoPE, 2 of 4 heads for keys and values) or GPT (LayerNorm,
// GELU, biases, learned positions up to 16), hidden 32.
TransformerConfig family(const std::string& name, i64 vocab, i64 layers) {
  return name == "gpt" ? gpt_config(vocab, kHidden, 4, 64, layers, 16) : llama_config(vocab, kHidden, 4, 2, 48, layers);
}

AttentionSetup thd_causal() {
  AttentionSetup a;
  a.format = cp::Format::thd;
  a.mask = Mask::causal;
  return a;
}

Batch thd_batch(i64 vocab) { return synthetic_batch(cp::Format::thd, vocab, kLengths, 3); }

// Megatron's groups for a world of tp x cp ranks (built inside a rank).
TransformerGroups groups_of(int tp, int cp = 1) {
  const tp::ParallelState ps = tp::initialize_model_parallel(tp, 1, cp);
  TransformerGroups g;
  g.tp = ps.tp().group;
  g.cp = transformer_cp_groups(ps.cp().group, thd_causal());
  return g;
}

using testing::expect_bit_identical;
using testing::expect_close_training;  // train_test.cpp's bound
using testing::max_abs;

// --- 1. Which tables are split ------------------------------------------------------------------

// GPT style (so output.bias exists), 12 heads and ffn 48: every tp from 1 to 4 splits the blocks.
// The vocabularies: 12 (every tp divides it), 16 (2 and 4), 17 (none), 18 (2 and 3).
TEST(VocabParallelTables, SplitExactlyWhenTpDividesTheVocabulary) {
  constexpr i64 hidden = 48;
  for (const i64 vocab : {12, 16, 17, 18}) {
    const TransformerConfig c = gpt_config(vocab, hidden, 12, 48, 1, 8);
    const Weights w = shape_only_weights(c);
    for (const int tp : {1, 2, 3, 4}) {
      const bool want = tp > 1 && vocab % tp == 0;
      const i64 rows = want ? vocab / tp : vocab;
      const std::string what = "vocab " + std::to_string(vocab) + " tp " + std::to_string(tp);
      runtime::spawn(
          [&](int) {
            Transformer model(c, w, groups_of(tp), thd_causal());
            EXPECT_EQ(model.vocab_parallel(), want) << what;
            EXPECT_EQ(model.vocab_group() != nullptr, want) << what;
            if (want) {
              EXPECT_EQ(model.vocab_group()->size(), tp) << what;
            }
            int tables = 0;
            for (auto& [name, p] : model.named_parameters()) {
              if (name == "embedding.weight" || name == "output.weight") {
                ++tables;
                EXPECT_EQ(p->value.shape(), (Shape{rows, hidden})) << what << " " << name;
                // the per-rank bytes: V/tp x hidden floats when split
                EXPECT_EQ(p->value.nbytes(), static_cast<size_t>(rows * hidden * 4)) << what << " " << name;
                EXPECT_EQ(p->partition_dim, want ? 0 : -1) << what << " " << name;
              } else if (name == "output.bias") {
                ++tables;
                EXPECT_EQ(p->value.shape(), (Shape{rows})) << what;
              } else if (name == "position_embedding.weight") {
                ++tables;
                EXPECT_EQ(p->value.shape(), (Shape{8, hidden})) << what;  // never split
              }
            }
            EXPECT_EQ(tables, 4) << what;
          },
          tp);
    }
  }
}

// --- 2. One step against one rank ---------------------------------------------------------------

double max_abs_of(const Tensor& t) { return max_abs(t); }

// The scale a gradient is measured at: its own largest magnitude, or for a bias its weight's (a
// bias gradient can be zero in exact arithmetic: the key bias), as family_test.cpp does.
double grad_scale(const std::vector<std::pair<std::string, Tensor>>& grads, const std::string& name) {
  const std::string suffix = ".bias";
  const bool bias =
      name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string weight = bias ? name.substr(0, name.size() - suffix.size()) + ".weight" : name;
  double s = 0;
  for (const auto& [n, g] : grads)
    if (n == name || n == weight) s = std::max(s, max_abs_of(g));
  return s;
}

// Within 5e-6 of `scale` (RANKSIM_PRINT_DIFFS=1 prints the measured difference per tensor).
void expect_close(const Tensor& got, const Tensor& want, double scale, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(DType::f64).to_vector<double>(), w = want.to(DType::f64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
  EXPECT_TRUE(std::isfinite(worst)) << what;
  EXPECT_GT(scale, 0) << what;
  EXPECT_LE(worst, 5e-6 * scale) << what << ": max |diff| " << worst << " at a scale of " << scale;
  if (std::getenv("RANKSIM_PRINT_DIFFS"))
    std::printf("%-44s %.3g%s\n", what.c_str(), worst / scale, runtime::bitwise_equal(got, want) ? " (bitwise)" : "");
}

void expect_same_step(const TransformerDump& got, const TransformerDump& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss) << what;
  // full logits: gathered over TP (Transformer::full_logits), then CP and DP
  expect_close(got.logits, want.logits, max_abs_of(want.logits), what + " logits");
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < got.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].first, want.grads[i].first) << what;
    expect_close(got.grads[i].second, want.grads[i].second, grad_scale(want.grads, want.grads[i].first),
                 what + " grad " + got.grads[i].first);
  }
}

struct StepLayout {
  std::string family;  // "llama" (RoPE) or "gpt" (learned positions)
  int tp, cp = 1, dp = 1;
  bool sp = false;
};

std::string step_name(const StepLayout& l) {
  return l.family + "_tp" + std::to_string(l.tp) + "_cp" + std::to_string(l.cp) + "_dp" + std::to_string(l.dp) +
         (l.sp ? "_sp" : "");
}

void PrintTo(const StepLayout& l, std::ostream* os) { *os << step_name(l); }

class VocabParallelStep : public ::testing::TestWithParam<StepLayout> {};

TEST_P(VocabParallelStep, EqualsTheSingleRankRun) {
  const StepLayout& l = GetParam();
  TransformerRunSpec one;
  one.config = family(l.family, kVocab, 2);
  one.weights = seeded_weights(one.config, 11);
  one.batch = thd_batch(kVocab);
  one.attention = thd_causal();
  const TransformerDump want = run_transformer(one);
  EXPECT_GT(max_abs_of(want.logits), 0.5);  // logits with something in them
  TransformerRunSpec s = one;
  s.tp = l.tp;
  s.cp = l.cp;
  s.dp = l.dp;
  s.config.sequence_parallel = l.sp;
  expect_same_step(run_transformer(s), want, step_name(l));
}

INSTANTIATE_TEST_SUITE_P(Layouts, VocabParallelStep,
                         ::testing::Values(StepLayout{"llama", 2}, StepLayout{"llama", 4},
                                           StepLayout{"llama", 2, 1, 1, true}, StepLayout{"llama", 4, 1, 1, true},
                                           StepLayout{"gpt", 2}, StepLayout{"gpt", 4}, StepLayout{"gpt", 2, 1, 1, true},
                                           StepLayout{"gpt", 4, 1, 1, true}, StepLayout{"llama", 2, 2, 1, true},
                                           StepLayout{"gpt", 2, 2, 1, false}, StepLayout{"llama", 2, 2, 2, true}),
                         [](const ::testing::TestParamInfo<StepLayout>& p) { return step_name(p.param); });

// The first stage without blocks (Stage::first_stage_layers = 0) returns the embedding's output:
// each rank's hidden rows, or with sequence parallelism its share of the (padded) rows.
struct EmbeddingOut {
  std::vector<std::vector<float>> rows;  // per TP rank, flattened
  std::vector<bool> vocab_parallel;
};

EmbeddingOut embedding_output(const TransformerConfig& c, const Weights& w, const Batch& b, int tp) {
  EmbeddingOut out;
  out.rows.resize(static_cast<size_t>(tp));
  out.vocab_parallel.resize(static_cast<size_t>(tp));
  runtime::spawn(
      [&](int rank) {
        Stage st{0, 2};
        st.first_stage_layers = 0;
        Transformer model(c, w, groups_of(tp), thd_causal(), st);
        EXPECT_EQ(model.num_layers(), 0);
        TransformerContext ctx;
        const Tensor x = model.stage_forward(shard_batch(b, 1, 0), Tensor(), ctx);
        out.rows[static_cast<size_t>(rank)] = x.to_vector<float>();
        out.vocab_parallel[static_cast<size_t>(rank)] = model.vocab_parallel();
      },
      tp);
  return out;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  out.reserve(v.size());
  for (float x : v) out.push_back(std::bit_cast<std::uint32_t>(x));
  return out;
}

// The lookup's sum over TP adds one non-zero term per row: the embedding's output is the one-rank
// output bit for bit -- whole rows on every rank without sequence parallelism, each rank's share
// with it (reduce-scattered straight into the region with RoPE; all-reduced, positions added and
// split with learned positions), the padding rows zero.
TEST(VocabParallelNumbers, EmbeddingSumOverTpIsExact) {
  for (const std::string name : {"llama", "gpt"}) {
    TransformerConfig c = family(name, kVocab, 1);
    const Weights w = seeded_weights(c, 5);
    const Batch b = thd_batch(kVocab);
    const EmbeddingOut one = embedding_output(c, w, b, 1);
    ASSERT_EQ(one.rows[0].size(), static_cast<size_t>(kTokens * kHidden));
    for (const int tp : {2, 4}) {
      for (const bool sp : {false, true}) {
        c.sequence_parallel = sp;
        const EmbeddingOut got = embedding_output(c, w, b, tp);
        const std::string what = name + " tp " + std::to_string(tp) + (sp ? " sp" : "");
        const i64 share = (kTokens + tp - 1) / tp;  // rows per rank with SP (padded)
        for (int r = 0; r < tp; ++r) {
          const auto ru = static_cast<size_t>(r);
          EXPECT_TRUE(got.vocab_parallel[ru]) << what;
          std::vector<float> want = one.rows[0];
          if (sp) {  // rows [r share, (r + 1) share) of the padded rows
            want.assign(static_cast<size_t>(share * kHidden), 0.0f);
            for (i64 i = 0; i < share && r * share + i < kTokens; ++i)
              std::copy_n(one.rows[0].begin() + (r * share + i) * kHidden, kHidden, want.begin() + i * kHidden);
          }
          EXPECT_EQ(bits(got.rows[ru]), bits(want)) << what << " rank " << r;
        }
      }
    }
  }
}

// --- 3. Training against one rank -----------------------------------------------------------------

TrainSpec make_spec(const std::string& name, i64 vocab, i64 layers, bool shape_only = false) {
  TrainSpec s;
  s.config = family(name, vocab, layers);
  s.attention = thd_causal();
  s.weights = shape_only ? shape_only_weights(s.config) : seeded_weights(s.config, 7);
  s.batch = thd_batch(vocab);
  s.steps = shape_only ? 1 : 2;
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-4;  // train_test.cpp's base() says why
  return s;
}

struct TrainLayout {
  std::string family;
  int tp, cp, dp, pp, micro, zero;
  bool sp;
};

// Two AdamW steps in each layout equal the one-rank run within expect_close_training's bound;
// ZeRO-1 and FSDP (which shards the vocabulary shards once more over DP x CP) give the same bits.
TEST(VocabParallelTraining, LayoutsTrainAsOneRank) {
  const std::vector<TrainLayout> layouts{
      {"llama", 2, 1, 1, 1, 1, 0, false}, {"llama", 4, 1, 1, 1, 1, 0, true}, {"gpt", 2, 1, 1, 1, 1, 0, true},
      {"gpt", 4, 1, 1, 1, 1, 0, false},   {"llama", 2, 2, 1, 1, 1, 0, true}, {"gpt", 2, 2, 1, 1, 1, 0, false},
      {"llama", 2, 1, 1, 2, 2, 0, false}, {"gpt", 2, 1, 1, 2, 2, 0, true},   {"llama", 2, 1, 2, 1, 1, 1, true},
      {"llama", 2, 1, 2, 1, 1, 3, true},  {"gpt", 2, 2, 1, 2, 2, 3, true},
  };
  std::map<std::string, TrainResult> one;
  for (const std::string name : {"llama", "gpt"}) {
    one[name] = run_training(make_spec(name, kVocab, 2));
    ASSERT_EQ(one[name].losses.size(), 2u);
    EXPECT_LT(one[name].losses[1], one[name].losses[0]) << name;
  }
  std::map<int, TrainResult> by_zero;  // llama tp 2 dp 2 sp
  for (const TrainLayout& l : layouts) {
    TrainSpec s = make_spec(l.family, kVocab, 2);
    s.tp = l.tp;
    s.cp = l.cp;
    s.dp = l.dp;
    s.pp = l.pp;
    s.micro_batches = l.micro;
    s.zero = l.zero;
    s.config.sequence_parallel = l.sp;
    const std::string what = l.family + " tp" + std::to_string(l.tp) + " cp" + std::to_string(l.cp) + " dp" +
                             std::to_string(l.dp) + " pp" + std::to_string(l.pp) + " zero" + std::to_string(l.zero) +
                             (l.sp ? " sp" : "");
    const TrainResult got = run_training(s);
    expect_close_training(got, one[l.family], s.optimizer.lr, what);
    if (l.dp == 2) by_zero[l.zero] = got;
  }
  ASSERT_EQ(by_zero.size(), 2u);
  EXPECT_EQ(by_zero[3].losses, by_zero[1].losses);
  ASSERT_EQ(by_zero[3].params.size(), by_zero[1].params.size());
  for (size_t i = 0; i < by_zero[3].params.size(); ++i)
    EXPECT_TRUE(runtime::bitwise_equal(by_zero[3].params[i].second, by_zero[1].params[i].second))
        << by_zero[3].params[i].first;
}

// --- 4. Timeline ----------------------------------------------------------------------------------

// One rank's collectives in call order as "all_reduce 164" (name and bytes); the runs below make
// tp the whole world, so they are all over TP.
Seq collectives_of(const runtime::RunReport& rep, int rank) {
  std::vector<const sim::Span*> coll;
  for (const sim::Span& s : rep.trace.spans())
    if (s.rank == rank && s.kind == sim::SpanKind::comm && !arg(s, "group").empty()) coll.push_back(&s);
  std::stable_sort(coll.begin(), coll.end(), [](const sim::Span* a, const sim::Span* b) {
    return std::stoul(arg(*a, "call")) < std::stoul(arg(*b, "call"));
  });
  Seq out;
  for (const sim::Span* s : coll) out.push_back(s->name + " " + arg(*s, "bytes"));
  return out;
}

// Collectives of `rows` hidden rows (f32) and of one float per token.
std::string hidden(const std::string& op, i64 rows) { return op + " " + std::to_string(rows * kHidden * 4); }
const std::string kPerToken = "all_reduce " + std::to_string(kTokens * 4);  // the loss's

runtime::RunReport shape_only_run(const std::string& name, i64 vocab, int tp, bool sp) {
  TrainSpec s = make_spec(name, vocab, 2, true);
  s.tp = tp;
  s.config.sequence_parallel = sp;
  runtime::RunReport rep;
  run_training(s, {}, &rep);
  return rep;
}

// Without sequence parallelism, 2 blocks at tp 2 (41 tokens, 5248 bytes of hidden rows): the
// vocab-parallel forward all-reduces the lookup's partial rows before the blocks' all-reduces
// (proj and fc2 each) and the loss's three all-reduces of 41 floats after them; backward sums the
// output layer's partial input gradient before the blocks' (fc1 and q/k/v each). With vocabulary
// 17 only the blocks' remain.
TEST(VocabParallelTimeline, EmbeddingAndLossAllReducesWithoutSequenceParallelism) {
  const std::string AR = "all_reduce";
  const Seq blocks = repeat({hidden(AR, kTokens), hidden(AR, kTokens)}, 2);
  const runtime::RunReport vp = shape_only_run("llama", kVocab, 2, false);
  const runtime::RunReport rep = shape_only_run("llama", kOddVocab, 2, false);
  for (int rank : {0, 1}) {
    EXPECT_EQ(collectives_of(vp, rank),
              Seq{hidden(AR, kTokens)} + blocks + repeat({kPerToken}, 3) + Seq{hidden(AR, kTokens)} + blocks)
        << rank;
    EXPECT_EQ(collectives_of(rep, rank), blocks + blocks) << rank;
  }
}

// With sequence parallelism and RoPE (42 padded rows at tp 2): the lookup's partial rows are
// reduce-scattered straight into the region, the loss all-reduces 41 floats three times after the
// output layer's gather, and backward reduce-scatters the output layer's partial input gradient
// where the replicated layer only splits its rows. Learned positions all-reduce the lookup (41
// rows) and add the positions before the split. Vocabulary 17: neither the lookup's collective nor
// the loss's; the rest is the same.
TEST(VocabParallelTimeline, SequenceParallelReduceScattersTheLookupWithRope) {
  const std::string AG = "all_gather", RS = "reduce_scatter", AR = "all_reduce";
  const i64 p = 42;  // padded rows
  const Seq fwd_blocks = repeat({hidden(AG, p), hidden(RS, p), hidden(AG, p), hidden(RS, p)}, 2);
  const Seq bwd_blocks =
      repeat({hidden(AG, p), hidden(AG, p), hidden(RS, p), hidden(AG, p), hidden(AG, p), hidden(RS, p)}, 2);
  // RMSNorm weights: ln1 and ln2 of both blocks and the final norm, summed over TP at the end
  const Seq norms = repeat({"all_reduce " + std::to_string(kHidden * 4)}, 5);
  const runtime::RunReport vp = shape_only_run("llama", kVocab, 2, true);
  const runtime::RunReport rep = shape_only_run("llama", kOddVocab, 2, true);
  const runtime::RunReport learned = shape_only_run("gpt", kVocab, 2, true);
  for (int rank : {0, 1}) {
    const Seq want = Seq{hidden(RS, p)} + fwd_blocks + Seq{hidden(AG, p)} + repeat({kPerToken}, 3) +
                     Seq{hidden(AG, p), hidden(RS, p)} + bwd_blocks + Seq{hidden(AG, p)} + norms;
    EXPECT_EQ(collectives_of(vp, rank), want) << rank;
    EXPECT_EQ(collectives_of(rep, rank),
              fwd_blocks + Seq{hidden(AG, p)} + Seq{hidden(AG, p)} + bwd_blocks + Seq{hidden(AG, p)} + norms)
        << rank;
    const Seq g = collectives_of(learned, rank);
    const Seq head = Seq{hidden(AR, kTokens)} + fwd_blocks + Seq{hidden(AG, p)} + repeat({kPerToken}, 3) +
                     Seq{hidden(AG, p), hidden(RS, p)} + bwd_blocks + Seq{hidden(AG, p)};
    ASSERT_GT(g.size(), head.size()) << rank;
    EXPECT_EQ(Seq(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(head.size())), head) << rank;
    for (size_t i = head.size(); i < g.size(); ++i) EXPECT_EQ(g[i].rfind(AR, 0), 0u) << g[i];  // norms, biases
  }
}

// At tp 4 too the loss's all-reduces carry one float per token (not per vocabulary column): three
// of 41 floats on every rank, and the lookup's reduce-scatter 44 padded rows.
TEST(VocabParallelTimeline, LossMessagesCarryOneFloatPerToken) {
  const runtime::RunReport rep = shape_only_run("llama", kVocab, 4, true);
  for (int rank = 0; rank < 4; ++rank) {
    const Seq c = collectives_of(rep, rank);
    ASSERT_FALSE(c.empty());
    EXPECT_EQ(c.front(), hidden("reduce_scatter", 44)) << rank;
    EXPECT_EQ(std::count(c.begin(), c.end(), kPerToken), 3) << rank;
  }
}

// --- 5. Memory --------------------------------------------------------------------------------------

// The last of two stages (shape-only, tp 2 the whole world): its logits are [N, V/tp] for the 41
// local tokens -- with sequence parallelism too (the output layer gathers the rows) -- and [N, V]
// with the replicated layer; the ledger counts exactly those bytes as activations while the
// caller holds them.
TEST(VocabParallelMemory, LastStageLogitsAreTheRanksVocabularyColumns) {
  for (const i64 vocab : {kVocab, kOddVocab}) {
    for (const bool sp : {false, true}) {
      TransformerConfig c = family("llama", vocab, 2);
      c.sequence_parallel = sp;
      const Weights w = shape_only_weights(c);
      const Batch b = thd_batch(vocab);
      const i64 cols = vocab == kVocab ? vocab / 2 : vocab;
      const std::string what = "vocab " + std::to_string(vocab) + (sp ? " sp" : "");
      runtime::spawn(
          [&](int) {
            Transformer model(c, w, groups_of(2), thd_causal(), Stage{1, 2});
            const LocalBatch local = shard_batch(b, 1, 0);
            const Tensor input = Tensor::shape_only(model.hidden_shape(local), c.dtype);
            EXPECT_EQ(input.size(0), sp ? 21 : kTokens) << what;
            constexpr auto act = static_cast<size_t>(runtime::MemoryKind::activations);
            TransformerContext ctx;
            u64 held = 0;
            {
              const Tensor logits = model.stage_forward(local, input, ctx);
              EXPECT_EQ(logits.shape(), (Shape{kTokens, cols})) << what;
              held = runtime::memory_in_use()[act];
            }
            EXPECT_EQ(held - runtime::memory_in_use()[act], static_cast<u64>(kTokens * cols * 4)) << what;
          },
          2);
    }
  }
}

// --- 6. Uneven pipeline stages ------------------------------------------------------------------------

StageLayers split_of(i64 layers, int rank, int size, i64 first, i64 last) {
  Stage st{rank, size};
  st.first_stage_layers = first;
  st.last_stage_layers = last;
  return stage_layers(layers, st, "test");
}

// Each stage's [first, first + count): the fixed first and last counts, the other stages the
// rest evenly, (layers - first - last) / (pp - fixed stages), in rank order.
TEST(UnevenStages, StageLayersSplitsTheRestEvenly) {
  struct Case {
    i64 layers;
    int pp;
    i64 first, last;
    std::vector<i64> counts;  // per stage
  };
  const std::vector<Case> cases{
      {8, 4, -1, -1, {2, 2, 2, 2}},  // even: layers / pp each
      {4, 2, 1, -1, {1, 3}},        {5, 3, 1, 1, {1, 3, 1}},      {12, 4, 3, 1, {3, 4, 4, 1}},
      {12, 4, 2, 2, {2, 4, 4, 2}},  {6, 3, -1, 0, {3, 3, 0}},     {4, 2, 0, -1, {0, 4}},
      {5, 2, 2, 3, {2, 3}},  // no middle stage
      {7, 3, 1, -1, {1, 3, 3}},     {10, 4, -1, 1, {3, 3, 3, 1}},
  };
  for (const Case& c : cases) {
    i64 next = 0;
    for (int r = 0; r < c.pp; ++r) {
      const StageLayers sl = split_of(c.layers, r, c.pp, c.first, c.last);
      EXPECT_EQ(sl.first, next) << c.layers << " layers pp " << c.pp << " stage " << r;
      EXPECT_EQ(sl.count, c.counts[static_cast<size_t>(r)]) << c.layers << " layers pp " << c.pp << " stage " << r;
      next += sl.count;
    }
    EXPECT_EQ(next, c.layers);
  }
}

TEST(UnevenStages, StageLayersErrors) {
  auto err = [](i64 layers, int size, i64 first, i64 last) {
    return error_of([&] { split_of(layers, 0, size, first, last); });
  };
  EXPECT_EQ(err(5, 2, -1, -1),
            "test: 5 layers cannot be split evenly over pp=2 stages; use a pp that divides the layer count, or uneven "
            "first/last stages");
  // the rest does not divide over the middle stages
  EXPECT_EQ(err(6, 3, 1, -1),
            "test: 6 layers cannot be split over pp=3 stages with first stage 1, last stage even layers: the other 2 "
            "stages must share the remaining 5 layers evenly");
  EXPECT_EQ(err(12, 4, 2, 1),
            "test: 12 layers cannot be split over pp=4 stages with first stage 2, last stage 1 layers: the other 2 "
            "stages must share the remaining 9 layers evenly");
  // counts above the layers (a negative rest), and fixed counts that leave layers to no stage
  EXPECT_THAT(err(4, 2, 5, -1), HasSubstr("the other 1 stages must share the remaining -1 layers evenly"));
  EXPECT_THAT(err(4, 3, 3, 2), HasSubstr("the other 1 stages must share the remaining -1 layers evenly"));
  EXPECT_THAT(err(6, 2, 2, 3), HasSubstr("the other 0 stages must share the remaining 1 layers evenly"));
  EXPECT_EQ(err(4, 1, 1, -1), "test: uneven first/last pipeline stages need pp >= 2");
  EXPECT_EQ(err(4, 1, -1, 4), "test: uneven first/last pipeline stages need pp >= 2");
  EXPECT_EQ(err(4, 2, -2, 1), "test: the first and last stages' layer counts must be >= 0");
  EXPECT_EQ(err(4, 2, 1, -3), "test: the first and last stages' layer counts must be >= 0");
}

// models/transformer.h promises an error for counts below -1 (stage_layers' comment), as with the
// other count >= 0 above. Fails as of 942a7f4: with the other count -1 stage_layers takes the even
// path before it checks the counts, so -2 (or -5) passes as "even" -- and so does a TrainSpec with
// first_stage_layers = -2.
TEST(UnevenStages, CountsBelowMinusOneAreRefusedWhenTheOtherIsEven) {
  auto err = [](i64 first, i64 last) { return error_of([&] { split_of(4, 0, 2, first, last); }); };
  EXPECT_EQ(err(-2, -1), "test: the first and last stages' layer counts must be >= 0");
  EXPECT_EQ(err(-1, -2), "test: the first and last stages' layer counts must be >= 0");
}

void expect_train_error(const TrainSpec& s, const std::string& message) {
  EXPECT_THAT(error_of([&] { run_training(s); }), HasSubstr(message));
}

TEST(UnevenStages, TrainSpecErrors) {
  TrainSpec s = make_spec("llama", kVocab, 4, true);
  s.pp = 2;
  s.micro_batches = 2;
  s.first_stage_layers = 1;
  s.virtual_stages = 2;  // 4 chunks: 1 + 3 over the other 3
  EXPECT_EQ(error_of([&] { run_training(s); }), "(no error)");
  s.first_stage_layers = 2;  // 2 + 2 over 3 chunks
  expect_train_error(s,
                     "training: 4 layers cannot be split over pp=4 stages with first stage 2, last stage even layers: "
                     "the other 3 stages must share the remaining 2 layers evenly");
  s.virtual_stages = 1;
  s.first_stage_layers = -1;
  s.last_stage_layers = 2;
  EXPECT_EQ(error_of([&] { run_training(s); }), "(no error)");  // 2 + 2
  s.pp = 3;
  s.last_stage_layers = 1;  // 4 - 1 over 2 stages
  expect_train_error(s,
                     "training: 4 layers cannot be split over pp=3 stages with first stage even, last stage 1 layers: "
                     "the other 2 stages must share the remaining 3 layers evenly");
  s.pp = 1;
  s.micro_batches = 1;
  expect_train_error(s, "training: uneven first/last pipeline stages need pp >= 2");
  s.pp = 2;
  s.last_stage_layers = 5;
  expect_train_error(s, "the remaining -1 layers evenly");
}

struct Split {
  i64 layers;
  int pp;
  i64 first, last;
  std::vector<i64> counts;
};
const std::vector<Split> kSplits{
    {4, 2, 1, -1, {1, 3}},
    {5, 3, 1, 1, {1, 3, 1}},
    {12, 4, 3, 1, {3, 4, 4, 1}},
    {4, 3, 0, 0, {0, 4, 0}},  // a first stage of the embedding only, a last of the output layer only
};

TrainSpec uneven_spec(const Split& sp, int tp, bool shape_only) {
  TrainSpec s;
  s.config = llama_config(kVocab, 16, 4, 2, 32, sp.layers);  // head_dim 4: small enough for 12 blocks
  s.attention = thd_causal();
  s.weights = shape_only ? shape_only_weights(s.config) : seeded_weights(s.config, 9);
  s.batch = thd_batch(kVocab);
  s.steps = shape_only ? 1 : 2;
  s.micro_batches = shape_only ? 1 : 2;
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-4;
  s.tp = tp;
  s.pp = sp.pp;
  s.first_stage_layers = sp.first;
  s.last_stage_layers = sp.last;
  return s;
}

// Under the interleaved schedule the counts are the first and last of the pp x v model chunks
// (Megatron's --account-for-embedding/loss-in-pipeline-split with virtual stages): two steps equal
// the one-stage run bit for bit, at tp 1 and 2.
TEST(UnevenStages, InterleavedChunksTrainAsOneStageBitForBit) {
  for (const int tp : {1, 2}) {
    const Split sp{6, 2, 1, 1, {}};  // 4 chunks: 1, 2, 2, 1
    TrainSpec one = uneven_spec(sp, tp, false);
    one.pp = 1;
    one.first_stage_layers = one.last_stage_layers = -1;
    const TrainResult want = run_training(one);
    TrainSpec inter = uneven_spec(sp, tp, false);
    inter.virtual_stages = 2;
    const TrainResult got = run_training(inter);
    expect_bit_identical(got, want, "6 layers pp 2 x 2 chunks 1-2-2-1, tp " + std::to_string(tp));
  }
}

// Two steps over uneven stages equal the one-stage run at the same tp bit for bit (a pipeline
// split reorders no sum, whatever the stages' sizes; without clipping, so the stages' partial
// norms are not summed), at tp 1 and at tp 2 (vocab-parallel), and the training moves every weight.
TEST(UnevenStages, TrainAsOneStageBitForBit) {
  for (const Split& sp : kSplits) {
    for (const int tp : {1, 2}) {
      const std::string what =
          std::to_string(sp.layers) + " layers pp " + std::to_string(sp.pp) + " tp " + std::to_string(tp);
      TrainSpec one = uneven_spec(sp, tp, false);
      one.pp = 1;
      one.first_stage_layers = one.last_stage_layers = -1;
      const TrainResult want = run_training(one);
      ASSERT_EQ(want.losses.size(), 2u);
      EXPECT_LT(want.losses[1], want.losses[0]) << what;
      const TrainResult got = run_training(uneven_spec(sp, tp, false));
      expect_bit_identical(got, want, what);
      for (const auto& [name, t] : got.params)
        EXPECT_FALSE(runtime::bitwise_equal(t, one.weights.at(name))) << what << ": " << name;
    }
  }
}

// Each pipeline rank runs its stage's blocks: one attention span per block in the forward of one
// micro-batch, on every TP rank of the stage (rank = tp rank + tp x pp rank).
TEST(UnevenStages, EachStageRunsItsBlocks) {
  for (const Split& sp : kSplits) {
    for (const int tp : {1, 2}) {
      runtime::RunReport rep;
      run_training(uneven_spec(sp, tp, true), {}, &rep);
      std::map<int, i64> attention;
      for (const sim::Span& s : rep.trace.spans())
        if (s.kind == sim::SpanKind::compute && s.name == "attention") ++attention[s.rank];
      for (int q = 0; q < sp.pp; ++q) {
        const i64 want = sp.counts[static_cast<size_t>(q)];
        EXPECT_EQ(split_of(sp.layers, q, sp.pp, sp.first, sp.last).count, want);
        for (int t = 0; t < tp; ++t)
          EXPECT_EQ(attention[t + tp * q], want)
              << sp.layers << " layers pp " << sp.pp << " tp " << tp << ": stage " << q << " rank " << t + tp * q;
      }
    }
  }
}

}  // namespace
}  // namespace ranksim::models

// `--megatron-args`: a scenario built from Megatron-LM's command line. The tokenizer, the @FILE
// form, the mapping of a Llama-3-like line and of Megatron's defaults, the layouts (virtual
// pipeline, FSDP, --set), the errors naming the arguments, and the built document itself.
#include "app/megatron_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/scenario.h"
#include "models/transformer.h"
#include "runtime/device/dtype.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kRoot = RANKSIM_SOURCE_DIR;
const std::string kDgx = kRoot + "/topologies/dgx-h100.yaml";          // 8 GPUs
const std::string kCluster = kRoot + "/topologies/h100-cluster.yaml";  // 8 GPUs x `nodes` (default 2)

// ctest runs tests in parallel processes: each process gets its own folder.
fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_megatron_args_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// A minimal GPT line: every required argument, nothing else (Megatron's defaults for the rest).
const std::string kGpt =
    "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
    "--vocab-size 50257";

const std::string kLlama =
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--vocab-size 128256 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm "
    "--swiglu --disable-bias-linear --untie-embeddings-and-output-weights --micro-batch-size 1 "
    "--global-batch-size 16 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
    "--overlap-grad-reduce --bf16 --recompute-activations --lr 3e-4 --data-path /x/y --log-interval 10 "
    "--save /ckpt --hidden-dropout 0.0 --attention-dropout 0.0";

// The message of the Error load_megatron_scenario throws, or "no error".
std::string megatron_error(const std::string& args, const std::string& topology = kDgx,
                           const std::vector<std::string>& sets = {}) {
  try {
    load_megatron_scenario(args, topology, sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool any_has(const std::vector<std::string>& v, const std::string& part) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return s.find(part) != std::string::npos; });
}

// ---------------------------------------------------------------------------------------------
// split_megatron_args

TEST(MegatronArgs, SplitSeparatesOnWhitespaceAndNewlines) {
  EXPECT_THAT(split_megatron_args("  --a   b\t--c\n\n  --d  e  \n"), ElementsAre("--a", "b", "--c", "--d", "e"));
  EXPECT_THAT(split_megatron_args("--a b\r\n--c d\r\n"), ElementsAre("--a", "b", "--c", "d"));
  EXPECT_THAT(split_megatron_args(""), IsEmpty());
  EXPECT_THAT(split_megatron_args(" \n\t \n"), IsEmpty());
}

TEST(MegatronArgs, SplitJoinsBackslashContinuedLines) {
  // a launch script's layout: one argument per line, each ending in a backslash
  EXPECT_THAT(split_megatron_args("--num-layers 32 \\\n    --hidden-size 4096 \\\n    --bf16\n"),
              ElementsAre("--num-layers", "32", "--hidden-size", "4096", "--bf16"));
  // a continuation inside a word joins its two halves, as the shell does
  EXPECT_THAT(split_megatron_args("--hidden-\\\nsize 8"), ElementsAre("--hidden-size", "8"));
  // a backslash not before a newline is kept
  EXPECT_THAT(split_megatron_args("--save a\\b"), ElementsAre("--save", "a\\b"));
}

TEST(MegatronArgs, SplitDropsComments) {
  EXPECT_THAT(split_megatron_args("# the model\n--num-layers 4  # four --layers\n--bf16 # --fp16\n"),
              ElementsAre("--num-layers", "4", "--bf16"));
  EXPECT_THAT(split_megatron_args("--a 1 \\\n# --b 2\n--c 3"), ElementsAre("--a", "1", "--c", "3"));
  // a '#' inside a word is part of it (as in the shell)
  EXPECT_THAT(split_megatron_args("--save a#b --c"), ElementsAre("--save", "a#b", "--c"));
  EXPECT_THAT(split_megatron_args("#only a comment"), IsEmpty());
}

TEST(MegatronArgs, SplitHonoursSingleAndDoubleQuotes) {
  EXPECT_THAT(split_megatron_args("--data-path 'a b' \"c  d\" --x"), ElementsAre("--data-path", "a b", "c  d", "--x"));
  // quotes keep '#', the other quote, newlines and backslashes as they are
  EXPECT_THAT(split_megatron_args("--save '# not a comment' \"it's\" 'say \"hi\"'"),
              ElementsAre("--save", "# not a comment", "it's", "say \"hi\""));
  EXPECT_THAT(split_megatron_args("--save 'two\nlines'"), ElementsAre("--save", "two\nlines"));
  // quoted parts join the unquoted ones next to them; an empty pair is an empty token
  EXPECT_THAT(split_megatron_args("--save=/a' 'b\"c\"d --x ''"), ElementsAre("--save=/a bcd", "--x", ""));
  EXPECT_THROW(split_megatron_args("--save 'open"), Error);
  EXPECT_THROW(split_megatron_args("--save \"open"), Error);
}

TEST(MegatronArgs, SplitKeepsNameEqualsValueAsOneToken) {
  EXPECT_THAT(split_megatron_args("--a=b --num-layers=4 --c"), ElementsAre("--a=b", "--num-layers=4", "--c"));
  EXPECT_THAT(split_megatron_args("--data-path='x y'"), ElementsAre("--data-path=x y"));
}

// ---------------------------------------------------------------------------------------------
// megatron_args_text

TEST(MegatronArgs, TextIsTheValueOrTheFileAfterAnAt) {
  EXPECT_EQ(megatron_args_text("--num-layers 4 --bf16"), "--num-layers 4 --bf16");
  EXPECT_EQ(megatron_args_text(""), "");
  const fs::path f = scratch() / "llama.args";
  const std::string text = "# Llama\n--num-layers 32 \\\n  --bf16\n";
  std::ofstream(f) << text;
  EXPECT_EQ(megatron_args_text("@" + f.string()), text);
  fs::remove(f);
}

TEST(MegatronArgs, TextOfAMissingFileIsAnErrorNamingIt) {
  const std::string missing = (scratch() / "no-such-file.args").string();
  try {
    megatron_args_text("@" + missing);
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(missing));
  }
}

// ---------------------------------------------------------------------------------------------
// The mapping

TEST(MegatronArgs, Llama3LikeLineMapsOntoTheScenario) {
  MegatronScenario built;
  const Scenario sc = load_megatron_scenario(kLlama, kDgx, {}, &built);
  EXPECT_EQ(sc.ranks, 8);
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.dp, 4);  // 8 / (tp 2 x pp 1 x cp 1)
  EXPECT_EQ(sc.pp, 1);
  EXPECT_EQ(sc.cp, 1);
  ASSERT_TRUE(sc.model.has_value());
  const ModelWorkload& m = *sc.model;
  const models::TransformerConfig& c = m.config;
  EXPECT_EQ(c.layers, 32);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.heads, 32);
  EXPECT_EQ(c.kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // 4096 / 32
  EXPECT_EQ(c.ffn, 14336);
  EXPECT_EQ(c.norm, models::Norm::rmsnorm);
  EXPECT_EQ(c.activation, models::Activation::swiglu);
  EXPECT_FALSE(c.bias);
  EXPECT_EQ(c.positions, models::Positions::rope);
  EXPECT_DOUBLE_EQ(c.rope_base, 500000.0);
  EXPECT_EQ(c.max_positions, 0);
  EXPECT_EQ(c.dtype, runtime::DType::bf16);
  EXPECT_FALSE(c.fp8);
  EXPECT_EQ(c.recompute, models::Recompute::selective);
  EXPECT_TRUE(c.sequence_parallel);
  EXPECT_FALSE(c.tp_comm_overlap);
  // 128256 = 501 x 256 is already a multiple of 128 x tp
  EXPECT_EQ(m.tokenizer_vocab, 128256);
  EXPECT_EQ(c.vocab, 128256);
  EXPECT_EQ(m.vocab_divisible_by, 128);
  EXPECT_TRUE(m.shape_only);
  EXPECT_EQ(m.lengths, std::vector<std::int64_t>(16, 8192));  // the global batch: 16 sequences of 8192
  ASSERT_TRUE(m.train.has_value());
  const TrainSettings& t = *m.train;
  EXPECT_EQ(t.steps, 1);
  EXPECT_EQ(t.zero, 1);
  EXPECT_EQ(t.micro_batch_size, 1);
  EXPECT_EQ(t.global_batch_size, 16);
  EXPECT_EQ(t.micro_batches, 4);  // 16 / (dp 4 x micro-batch size 1)
  EXPECT_EQ(t.virtual_stages, 1);
  // --overlap-grad-reduce: Megatron-Core's buckets, max(40M, 1M x dp x cp) elements
  EXPECT_EQ(t.bucket_size, 40'000'000);
  ASSERT_TRUE(t.clip_grad_norm.has_value());
  EXPECT_DOUBLE_EQ(*t.clip_grad_norm, 1.0);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 3e-4);

  EXPECT_TRUE(contains(built.ignored, "--data-path /x/y"));
  EXPECT_TRUE(contains(built.ignored, "--log-interval 10"));
  EXPECT_TRUE(contains(built.ignored, "--save /ckpt"));
  EXPECT_EQ(built.ignored.size(), 3u);
  // untied embeddings and no dropout: nothing is approximated
  EXPECT_THAT(built.approximated, IsEmpty());
}

TEST(MegatronArgs, MissingArgumentsTakeMegatronsDefaults) {
  MegatronScenario built;
  const Scenario sc = load_megatron_scenario(kGpt, kDgx, {}, &built);
  EXPECT_EQ(sc.ranks, 8);
  EXPECT_EQ(sc.tp, 1);
  EXPECT_EQ(sc.pp, 1);
  EXPECT_EQ(sc.cp, 1);
  EXPECT_EQ(sc.dp, 8);
  ASSERT_TRUE(sc.model.has_value());
  const ModelWorkload& m = *sc.model;
  const models::TransformerConfig& c = m.config;
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.query_groups(), 8);  // no --group-query-attention: one key/value head per query head
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.norm, models::Norm::layernorm);
  EXPECT_EQ(c.activation, models::Activation::gelu);
  EXPECT_TRUE(c.bias);
  EXPECT_EQ(c.positions, models::Positions::learned);
  EXPECT_EQ(c.max_positions, 512);
  EXPECT_EQ(c.ffn, 4 * 256);
  EXPECT_EQ(c.dtype, runtime::DType::f32);
  EXPECT_EQ(c.recompute, models::Recompute::none);
  EXPECT_FALSE(c.sequence_parallel);
  // the tokenizer's 50257 padded up to a multiple of 128 x tp(1): 393 x 128 = 50304
  EXPECT_EQ(m.tokenizer_vocab, 50257);
  EXPECT_EQ(c.vocab, 50304);
  ASSERT_TRUE(m.train.has_value());
  const TrainSettings& t = *m.train;
  EXPECT_EQ(t.zero, 0);
  EXPECT_EQ(t.micro_batch_size, 1);
  EXPECT_EQ(t.global_batch_size, 8);  // micro-batch size 1 x dp 8
  EXPECT_EQ(t.micro_batches, 1);
  EXPECT_EQ(m.lengths, std::vector<std::int64_t>(8, 512));
  // without --overlap-grad-reduce: one bucket after backward
  EXPECT_EQ(t.bucket_size, std::numeric_limits<std::int64_t>::max());
  ASSERT_TRUE(t.clip_grad_norm.has_value());
  EXPECT_DOUBLE_EQ(*t.clip_grad_norm, 1.0);

  EXPECT_THAT(built.ignored, IsEmpty());
  EXPECT_TRUE(any_has(built.approximated, "tied embeddings")) << ::testing::PrintToString(built.approximated);
  EXPECT_TRUE(any_has(built.approximated, "--hidden-dropout")) << ::testing::PrintToString(built.approximated);
  EXPECT_TRUE(any_has(built.approximated, "--attention-dropout")) << ::testing::PrintToString(built.approximated);
  EXPECT_EQ(built.approximated.size(), 3u) << ::testing::PrintToString(built.approximated);
}

TEST(MegatronArgs, VocabularyIsPaddedToAMultipleOf128TimesTp) {
  // tp 2: a multiple of 256 -> ceil(50257 / 256) = 197, 197 x 256 = 50432
  Scenario sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->tokenizer_vocab, 50257);
  EXPECT_EQ(sc.model->config.vocab, 50432);
  // --make-vocab-size-divisible-by 1000 at tp 1: ceil(50257 / 1000) = 51, 51 x 1000 = 51000
  sc = load_megatron_scenario(kGpt + " --make-vocab-size-divisible-by 1000", kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->config.vocab, 51000);
}

TEST(MegatronArgs, SwigluWithoutFfnSizeTakesMegatronsRule) {
  // Megatron: int(4 * h * 2 / 3 / 64) * 64
  // h = 256: 4 * 256 * 2 / 3 = 682.67 -> / 64 = 10.67 -> 10 x 64 = 640
  Scenario sc = load_megatron_scenario(kGpt + " --swiglu", kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->config.activation, models::Activation::swiglu);
  EXPECT_EQ(sc.model->config.ffn, 640);
  // h = 4096: 4 * 4096 * 2 / 3 = 10922.67 -> / 64 = 170.67 -> 170 x 64 = 10880
  sc = load_megatron_scenario(
      "--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --seq-length 128 --max-position-embeddings 128 "
      "--vocab-size 32000 --swiglu",
      kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->config.ffn, 10880);
  // an explicit --ffn-hidden-size wins over the rule
  sc = load_megatron_scenario(kGpt + " --swiglu --ffn-hidden-size 768", kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->config.ffn, 768);
}

TEST(MegatronArgs, InlineValuesRepeatsAndOtherSpellings) {
  // --name=value works like --name value; a repeated argument keeps its last value (argparse)
  const Scenario sc = load_megatron_scenario(
      "--num-layers=2 --hidden-size=256 --num-attention-heads=8 --seq-length=256 --vocab-size=1000 "
      "--num-layers 6 --use-rotary-position-embeddings --fp16 --clip-grad 0 --recompute-granularity full "
      "--recompute-method block --recompute-num-layers 2",
      kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  const models::TransformerConfig& c = sc.model->config;
  EXPECT_EQ(c.layers, 6);
  EXPECT_EQ(c.positions, models::Positions::rope);
  EXPECT_EQ(c.dtype, runtime::DType::f16);
  EXPECT_EQ(c.recompute, models::Recompute::full);
  EXPECT_EQ(c.recompute_method, models::RecomputeMethod::block);
  EXPECT_EQ(c.recompute_num_layers, 2);
  ASSERT_TRUE(sc.model->train.has_value());
  EXPECT_FALSE(sc.model->train->clip_grad_norm.has_value());  // --clip-grad 0: no clipping
}

// ---------------------------------------------------------------------------------------------
// Layouts

TEST(MegatronArgs, VirtualPipelineStages) {
  // 4 layers, pp 2, dp 4; a global batch of 8 gives 2 micro-batches per DP rank (a multiple of pp)
  const std::string pp2 = kGpt + " --pipeline-model-parallel-size 2 --global-batch-size 8";
  Scenario sc = load_megatron_scenario(pp2 + " --num-layers-per-virtual-pipeline-stage 1", kDgx, {});
  EXPECT_EQ(sc.pp, 2);
  EXPECT_EQ(sc.dp, 4);
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->virtual_stages, 2);  // 4 layers / (pp 2 x 1 layer per chunk)
  EXPECT_EQ(sc.model->train->micro_batches, 2);

  sc = load_megatron_scenario(pp2 + " --num-virtual-stages-per-pipeline-rank 2", kDgx, {});
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->virtual_stages, 2);

  // no virtual pipeline: 1F1B
  sc = load_megatron_scenario(pp2, kDgx, {});
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->virtual_stages, 1);

  const std::string both =
      megatron_error(pp2 + " --num-layers-per-virtual-pipeline-stage 1 --num-virtual-stages-per-pipeline-rank 2");
  EXPECT_THAT(both, AllOf(HasSubstr("--num-layers-per-virtual-pipeline-stage"),
                          HasSubstr("--num-virtual-stages-per-pipeline-rank")));
}

TEST(MegatronArgs, EmbeddingAndLossCanCountAsPipelineLayers) {
  // Llama 3 405B's split: 126 layers + the embedding + the loss = 128 units over 16 stages of 8
  const std::string base =
      "--num-layers 126 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --vocab-size 50257 "
      "--max-position-embeddings 512 --pipeline-model-parallel-size 16 --global-batch-size 16 ";
  const Scenario both = load_megatron_scenario(
      base + "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", kCluster, {"nodes=2"});
  ASSERT_TRUE(both.model && both.model->train);
  EXPECT_EQ(both.model->train->first_stage_layers, 7);  // 128 / 16 - 1
  EXPECT_EQ(both.model->train->last_stage_layers, 7);
  // the embedding alone: 127 units do not split over 16; with 127 layers, 128 do
  EXPECT_THAT(megatron_error(base + "--account-for-embedding-in-pipeline-split", kCluster, {"nodes=2"}),
              HasSubstr("126 layers and 1 more do not split evenly over pp=16"));
  const Scenario emb = load_megatron_scenario(
      "--num-layers 127" + base.substr(base.find(" --hidden-size")) + "--account-for-embedding-in-pipeline-split",
      kCluster, {"nodes=2"});
  EXPECT_EQ(emb.model->train->first_stage_layers, 7);
  EXPECT_EQ(emb.model->train->last_stage_layers, -1);  // the even share of the other stages: 8
  // not with explicit stage sizes, nor without a pipeline
  EXPECT_THAT(megatron_error(base + "--account-for-loss-in-pipeline-split --decoder-last-pipeline-num-layers 6",
                             kCluster, {"nodes=2"}),
              HasSubstr("not both"));
  EXPECT_THAT(megatron_error(kGpt + " --account-for-loss-in-pipeline-split"), HasSubstr("needs pp > 1"));
  // With virtual stages (Megatron-Bridge's 405B: pp 8, chunks of 2): the 128 units make 8 x 8
  // chunks, the first and last of which hold one decoder layer beside the embedding or the loss.
  const std::string pp8 =
      "--num-layers 126 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --vocab-size 50257 "
      "--max-position-embeddings 512 --pipeline-model-parallel-size 8 --global-batch-size 16 "
      "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split ";
  const Scenario chunks =
      load_megatron_scenario(pp8 + "--num-layers-per-virtual-pipeline-stage 2", kCluster, {"nodes=1"});
  ASSERT_TRUE(chunks.model && chunks.model->train);
  EXPECT_EQ(chunks.model->train->virtual_stages, 8);
  EXPECT_EQ(chunks.model->train->first_stage_layers, 1);
  EXPECT_EQ(chunks.model->train->last_stage_layers, 1);
  EXPECT_THAT(megatron_error(pp8 + "--num-layers-per-virtual-pipeline-stage 3", kCluster, {"nodes=1"}),
              HasSubstr("126 layers and 2 more do not split into pp=8 stages of chunks of 3 layers"));
  EXPECT_THAT(megatron_error(pp8 + "--num-virtual-stages-per-pipeline-rank 3", kCluster, {"nodes=1"}),
              HasSubstr("126 layers and 2 more do not split evenly over pp=8 x 3 virtual stages"));
}

TEST(MegatronArgs, CommonLaunchScriptArgumentsAreSorted) {
  // a rank order other than Megatron's default would move ranks between nodes: refused
  EXPECT_THAT(megatron_error(kGpt + " --use-tp-pp-dp-mapping"), HasSubstr("orders ranks tp-cp-dp-pp"));
  EXPECT_THAT(megatron_error(kGpt + " --no-position-embedding"), HasSubstr("without position embeddings"));
  // per-token loss normalisation changes no timing: ignored; a deferred wgrad: approximated
  const MegatronScenario m =
      megatron_scenario(kGpt + " --calculate-per-token-loss --defer-embedding-wgrad-compute", kDgx, 8);
  EXPECT_TRUE(contains(m.ignored, "--calculate-per-token-loss"));
  EXPECT_TRUE(std::any_of(m.approximated.begin(), m.approximated.end(),
                          [](const std::string& a) { return a.rfind("--defer-embedding-wgrad-compute: ", 0) == 0; }));
}

TEST(MegatronArgs, FsdpSetsTheZeroStage) {
  Scenario sc = load_megatron_scenario(kGpt + " --use-torch-fsdp2", kDgx, {});
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->zero, 3);

  MegatronScenario built;
  sc = load_megatron_scenario(kGpt + " --use-megatron-fsdp --data-parallel-sharding-strategy optim", kDgx, {}, &built);
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->zero, 1);
  EXPECT_FALSE(any_has(built.approximated, "--data-parallel-sharding-strategy"));

  sc = load_megatron_scenario(kGpt + " --use-megatron-fsdp", kDgx, {});  // optim_grads_params
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->zero, 3);

  sc = load_megatron_scenario(kGpt + " --use-megatron-fsdp --data-parallel-sharding-strategy no_shard", kDgx, {});
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->zero, 0);

  sc = load_megatron_scenario(kGpt + " --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", kDgx, {},
                              &built);
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->zero, 1);
  EXPECT_TRUE(any_has(built.approximated, "--data-parallel-sharding-strategy optim_grads"));

  EXPECT_THAT(megatron_error(kGpt + " --use-torch-fsdp2 --data-parallel-sharding-strategy optim"),
              HasSubstr("--use-torch-fsdp2"));
}

// ---------------------------------------------------------------------------------------------
// Errors: each names the argument

TEST(MegatronArgs, UnknownArgumentIsAnErrorNamingIt) {
  EXPECT_THAT(megatron_error(kGpt + " --frobnicate"), AllOf(HasSubstr("--frobnicate"), HasSubstr("unknown")));
  EXPECT_THAT(megatron_error(kGpt + " --frobnicate 3"), HasSubstr("--frobnicate"));
}

TEST(MegatronArgs, TypoSuggestsTheNearestName) {
  const std::string e =
      megatron_error("--num-layer 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --vocab-size 50257");
  EXPECT_THAT(e, HasSubstr("unknown argument --num-layer;"));
  EXPECT_THAT(e, HasSubstr("'--num-layers'"));
}

TEST(MegatronArgs, RefusedFeatureSaysWhatItIs) {
  EXPECT_THAT(megatron_error(kGpt + " --num-experts 8"),
              AllOf(HasSubstr("--num-experts"), HasSubstr("Mixture-of-Experts")));
  EXPECT_THAT(megatron_error(kGpt + " --moe-router-topk 2"),
              AllOf(HasSubstr("--moe-router-topk"), HasSubstr("Mixture-of-Experts")));
  EXPECT_THAT(megatron_error(kGpt + " --expert-model-parallel-size 2"),
              AllOf(HasSubstr("--expert-model-parallel-size"), HasSubstr("Mixture-of-Experts")));
  EXPECT_THAT(megatron_error(kGpt + " --multi-latent-attention"), HasSubstr("--multi-latent-attention"));
  // expert parallelism of 1 is no expert parallelism
  EXPECT_EQ(megatron_error(kGpt + " --expert-model-parallel-size 1"), "no error");
}

TEST(MegatronArgs, MissingRequiredArgumentIsAnErrorNamingIt) {
  EXPECT_THAT(megatron_error("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512"),
              AllOf(HasSubstr("--vocab-size"), HasSubstr("required")));
  EXPECT_THAT(megatron_error("--hidden-size 256 --num-attention-heads 8 --seq-length 512 --vocab-size 100"),
              HasSubstr("--num-layers"));
  EXPECT_THAT(megatron_error("--num-layers 4 --hidden-size 256 --num-attention-heads 8 --vocab-size 100"),
              HasSubstr("--seq-length"));
}

TEST(MegatronArgs, MalformedValuesAreErrorsNamingTheArgument) {
  EXPECT_THAT(megatron_error("--num-layers abc --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
                             "--vocab-size 50257"),
              AllOf(HasSubstr("--num-layers"), HasSubstr("abc")));
  EXPECT_THAT(megatron_error(kGpt + " --tensor-model-parallel-size 0"), HasSubstr("--tensor-model-parallel-size"));
  EXPECT_THAT(megatron_error(kGpt + " --micro-batch-size 2x"), AllOf(HasSubstr("--micro-batch-size"), HasSubstr("2x")));
  EXPECT_THAT(megatron_error(kGpt + " --normalization LayerNrom"),
              AllOf(HasSubstr("--normalization"), HasSubstr("LayerNorm")));
  EXPECT_THAT(megatron_error(kGpt + " --hidden-dropout -0.1"), HasSubstr("--hidden-dropout"));
}

TEST(MegatronArgs, FlagGivenAValueIsAnError) {
  EXPECT_THAT(megatron_error(kGpt + " --swiglu=1"), HasSubstr("--swiglu"));
  // a flag followed by a bare word: the word is not an argument
  EXPECT_THAT(megatron_error(kGpt + " --swiglu 1"), AllOf(HasSubstr("'1'"), HasSubstr("--swiglu")));
}

TEST(MegatronArgs, ValueMissingAtTheEndIsAnError) {
  EXPECT_THAT(megatron_error(kGpt + " --hidden-size"), AllOf(HasSubstr("--hidden-size"), HasSubstr("value")));
  // ... or before the next argument
  EXPECT_THAT(megatron_error(kGpt + " --ffn-hidden-size --bf16"), HasSubstr("--ffn-hidden-size"));
}

TEST(MegatronArgs, LayoutNotDividingTheWorldNamesTheSizes) {
  const std::string e = megatron_error(kGpt + " --tensor-model-parallel-size 3");
  EXPECT_THAT(e, StartsWith("--megatron-args"));
  EXPECT_THAT(e, HasSubstr("--tensor-model-parallel-size")) << e;
  // tp 2 x pp 2 x cp 4 = 16 on 8 GPUs
  const std::string e2 = megatron_error(kGpt +
                                        " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                                        "--context-parallel-size 4");
  EXPECT_THAT(e2, AllOf(HasSubstr("16"), HasSubstr("8 GPUs")));
}

TEST(MegatronArgs, TwoContextParallelCommTypesAreAnError) {
  EXPECT_THAT(megatron_error(kGpt + " --context-parallel-size 2 --cp-comm-type p2p a2a"), HasSubstr("--cp-comm-type"));
  // one type given once per layer, all the same, is that type
  const Scenario sc =
      load_megatron_scenario(kGpt + " --context-parallel-size 2 --cp-comm-type a2a a2a a2a a2a", kDgx, {});
  EXPECT_EQ(sc.cp, 2);
  EXPECT_EQ(sc.cp_comm, "a2a");
  EXPECT_EQ(load_megatron_scenario(kGpt + " --context-parallel-size 2 --cp-comm-type allgather", kDgx, {}).cp_comm,
            "all_gather");
}

TEST(MegatronArgs, RecomputeMethodNeedsFullGranularity) {
  EXPECT_THAT(megatron_error(kGpt + " --recompute-method uniform"),
              AllOf(HasSubstr("--recompute-method"), HasSubstr("full")));
  EXPECT_THAT(megatron_error(kGpt + " --recompute-activations --recompute-num-layers 1"),
              HasSubstr("--recompute-num-layers"));
}

TEST(MegatronArgs, LoaderErrorsAreReportedAgainstTheArguments) {
  // 30 heads do not split over tp 4: the scenario loader finds it in the built document, and
  // load_megatron_scenario reports it against the Megatron arguments, not the document's line
  const std::string args =
      "--num-layers 4 --hidden-size 960 --num-attention-heads 30 --seq-length 512 --max-position-embeddings 512 "
      "--vocab-size 50257 --tensor-model-parallel-size 4";
  const std::string e = megatron_error(args);
  EXPECT_THAT(e, StartsWith("--megatron-args"));
  EXPECT_THAT(e, HasSubstr("30"));
  EXPECT_TRUE(e.find("--num-attention-heads") != std::string::npos ||
              e.find("--tensor-model-parallel-size") != std::string::npos)
      << e;
  EXPECT_THROW(load_megatron_scenario(args, kDgx, {}), Error);
}

TEST(MegatronArgs, LoaderErrorsNameTheArgumentsTheyConcern) {
  // A learned position table shorter than the sequence: the loader's error concerns
  // --max-position-embeddings and --seq-length, and must say so, not show a note of the
  // document's as if it were the arguments.
  const std::string short_table = megatron_error(
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
      "--max-position-embeddings 256 --vocab-size 50257");
  EXPECT_THAT(short_table, StartsWith("--megatron-args"));
  EXPECT_THAT(short_table, HasSubstr("256"));
  EXPECT_TRUE(short_table.find("--max-position-embeddings") != std::string::npos ||
              short_table.find("--seq-length") != std::string::npos)
      << short_table;
  EXPECT_THAT(short_table, Not(HasSubstr("(Megatron's default"))) << short_table;

  // A global batch of 6 sequences does not split over dp 8: the error names --global-batch-size.
  const std::string batch = megatron_error(kGpt + " --global-batch-size 6");
  EXPECT_THAT(batch, StartsWith("--megatron-args"));
  EXPECT_THAT(batch, HasSubstr("--global-batch-size")) << batch;
}

// ---------------------------------------------------------------------------------------------
// --set

TEST(MegatronArgs, SetTakesTopologyAndScenarioKeys) {
  // topology keys with or without `topology.`: h100-cluster's nodes of 8 GPUs (2 by default)
  Scenario sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kCluster, {"nodes=4"});
  EXPECT_EQ(sc.ranks, 32);
  EXPECT_EQ(sc.dp, 16);
  sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kCluster, {"topology.nodes=3"});
  EXPECT_EQ(sc.ranks, 24);
  EXPECT_EQ(sc.dp, 12);
  sc = load_megatron_scenario(kGpt, kCluster, {"nodes=2"});
  EXPECT_EQ(sc.ranks, 16);
  EXPECT_EQ(sc.dp, 16);

  // ranks=N: fewer GPUs than the topology has
  sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kDgx, {"ranks=8"});
  EXPECT_EQ(sc.ranks, 8);
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.dp, 4);
  sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kDgx, {"ranks=4"});
  EXPECT_EQ(sc.ranks, 4);
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.dp, 2);
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->train->global_batch_size, 2);  // micro-batch size 1 x dp 2

  // scenario keys
  sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kDgx, {"parallel.sequence_parallel=true"});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_TRUE(sc.model->config.sequence_parallel);
  sc = load_megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kDgx, {});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_FALSE(sc.model->config.sequence_parallel);
  sc = load_megatron_scenario(kGpt, kDgx, {"model.dtype=bf16"});
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->config.dtype, runtime::DType::bf16);
}

TEST(MegatronArgs, ArgumentsFromAFile) {
  const fs::path f = scratch() / "gpt.args";
  std::ofstream(f) << "# a small GPT\n"
                      "--num-layers 4 \\\n"
                      "  --hidden-size 256 --num-attention-heads 8   # heads\n"
                      "  --seq-length 512 --max-position-embeddings 512 \\\n"
                      "  --vocab-size 50257 --tensor-model-parallel-size 2 --data-path '/data/my corpus'\n";
  MegatronScenario built;
  const Scenario sc = load_megatron_scenario("@" + f.string(), kDgx, {}, &built);
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.dp, 4);
  ASSERT_TRUE(sc.model.has_value());
  EXPECT_EQ(sc.model->config.layers, 4);
  EXPECT_EQ(sc.model->config.heads, 8);
  EXPECT_THAT(built.ignored, ElementsAre("--data-path /data/my corpus"));
  fs::remove(f);
  EXPECT_THAT(megatron_error("@" + f.string()), HasSubstr(f.string()));
}

// ---------------------------------------------------------------------------------------------
// The built document

TEST(MegatronArgs, BuiltYamlReloadsToTheSameLayoutAndNamesItsArguments) {
  const MegatronScenario m = megatron_scenario(kLlama, kDgx, 8);
  const std::vector<std::string> lines = lines_of(m.yaml);
  ASSERT_EQ(m.line_args.size(), lines.size());
  ASSERT_FALSE(m.yaml.empty());
  EXPECT_EQ(m.yaml.back(), '\n');

  const Scenario sc = load_scenario_text(m.yaml, (scratch() / "built.yaml").string());
  EXPECT_EQ(sc.ranks, 8);
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.dp, 4);
  EXPECT_EQ(sc.pp, 1);
  EXPECT_EQ(sc.cp, 1);
  ASSERT_TRUE(sc.model.has_value() && sc.model->train.has_value());
  EXPECT_EQ(sc.model->config.layers, 32);
  EXPECT_EQ(sc.model->config.kv_heads, 8);
  EXPECT_EQ(sc.model->train->zero, 1);
  EXPECT_EQ(sc.model->train->micro_batches, 4);

  // every line that came from arguments carries them as its comment
  int from_args = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& from = m.line_args[i];
    if (from.rfind("--", 0) != 0) continue;
    ++from_args;
    if (lines[i].rfind("  tp:", 0) == 0) {
      // the layout section's first key: loader errors there concern the whole layout and name all of it
      EXPECT_THAT(lines[i], HasSubstr("  # --tensor-model-parallel-size 2"));
      EXPECT_EQ(from, "--tensor-model-parallel-size 2 x --pipeline-model-parallel-size 1 x --context-parallel-size 1");
      continue;
    }
    EXPECT_THAT(lines[i], HasSubstr("  # " + from)) << "line " << i + 1;
    EXPECT_EQ(lines[i].substr(lines[i].size() - from.size()), from) << "line " << i + 1;
  }
  EXPECT_GE(from_args, 20);
  // lines with no argument carry no argument comment
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (m.line_args[i].empty()) {
      EXPECT_THAT(lines[i], Not(HasSubstr("# --"))) << "line " << i + 1;
    }

  // the keys with the arguments they came from, written independently
  const auto line_of = [&](const std::string& key) -> std::string {
    for (const std::string& l : lines)
      if (l.rfind(key, 0) == 0) return l;
    return "(no line " + key + ")";
  };
  EXPECT_THAT(line_of("  tp: 2"), HasSubstr("# --tensor-model-parallel-size 2"));
  EXPECT_THAT(line_of("  sequence_parallel: true"), HasSubstr("# --sequence-parallel"));
  EXPECT_THAT(line_of("  layers: 32"), HasSubstr("# --num-layers 32"));
  EXPECT_THAT(line_of("  hidden: 4096"), HasSubstr("# --hidden-size 4096"));
  EXPECT_THAT(line_of("  heads: 32"), HasSubstr("# --num-attention-heads 32"));
  EXPECT_THAT(line_of("  kv_heads: 8"), AllOf(HasSubstr("--group-query-attention"), HasSubstr("--num-query-groups 8")));
  EXPECT_THAT(line_of("  ffn: 14336"), HasSubstr("# --ffn-hidden-size 14336"));
  EXPECT_THAT(line_of("  vocab: 128256"), HasSubstr("# --vocab-size 128256"));
  EXPECT_THAT(line_of("  norm: rmsnorm"), HasSubstr("# --normalization RMSNorm"));
  EXPECT_THAT(line_of("  activation: swiglu"), HasSubstr("# --swiglu"));
  EXPECT_THAT(line_of("  bias: false"), HasSubstr("# --disable-bias-linear"));
  EXPECT_THAT(line_of("  positions: rope"), HasSubstr("# --position-embedding-type rope"));
  EXPECT_THAT(line_of("  rope_base: 500000"), HasSubstr("# --rotary-base 500000"));
  EXPECT_THAT(line_of("  dtype: bf16"), HasSubstr("# --bf16"));
  EXPECT_THAT(line_of("  recompute: selective"), HasSubstr("# --recompute-activations"));
  EXPECT_THAT(line_of("  seq_len: 8192"), HasSubstr("# --seq-length 8192"));
  EXPECT_THAT(line_of("  rows: 16"), HasSubstr("# --global-batch-size 16"));
  EXPECT_THAT(line_of("  micro_batch_size: 1"), HasSubstr("# --micro-batch-size 1"));
  EXPECT_THAT(line_of("  zero: 1"), HasSubstr("# --use-distributed-optimizer"));
  EXPECT_THAT(line_of("  overlap_grad_reduce: true"), HasSubstr("# --overlap-grad-reduce"));
  EXPECT_THAT(line_of("    lr: 3e-4"), HasSubstr("# --lr 3e-4"));
  // ignored arguments leave no trace in the document
  EXPECT_THAT(m.yaml, Not(HasSubstr("--data-path")));
  EXPECT_THAT(m.yaml, Not(HasSubstr("--log-interval")));

  // the document of load_megatron_scenario is the same one
  MegatronScenario built;
  load_megatron_scenario(kLlama, kDgx, {}, &built);
  EXPECT_EQ(built.yaml, m.yaml);
  EXPECT_EQ(built.line_args, m.line_args);
}

TEST(MegatronArgs, BuiltYamlFollowsTheWorldSize) {
  // the world as given: 16 GPUs with tp 2 x pp 2 -> dp 4
  const MegatronScenario m =
      megatron_scenario(kGpt + " --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", kCluster, 16);
  const Scenario sc = load_scenario_text(m.yaml, (scratch() / "built16.yaml").string());
  EXPECT_EQ(sc.ranks, 16);
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.pp, 2);
  EXPECT_EQ(sc.dp, 4);
  EXPECT_EQ(lines_of(m.yaml).size(), m.line_args.size());
  EXPECT_THROW(megatron_scenario(kGpt + " --tensor-model-parallel-size 2", kDgx, 7), Error);
}

}  // namespace
}  // namespace ranksim::app

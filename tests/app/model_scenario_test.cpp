// Scenarios with the `model:` workload: the reference transformer under a tp x cp x dp layout, its
// dump, the CP=1 vs CP=N validation framework and the errors of its keys.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/cli.h"
#include "app/run_summary.h"
#include "app/scenario.h"
#include "models/multimodal.h"
#include "models/transformer.h"
#include "runtime/tensor/safetensors.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using runtime::DType;
using runtime::Tensor;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRoot = RANKSIM_SOURCE_DIR;

fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_model_scenario_" + std::to_string(::getpid()));
  fs::create_directories(d / "scenarios");
  fs::create_directories(d / "topologies" / "profiles");
  for (const char* t : {"dgx-h100.yaml", "h100-cluster.yaml", "ring4.yaml", "profiles/h100-sxm.yaml"})
    fs::copy_file(kRoot + "/topologies/" + t, d / "topologies" / t, fs::copy_options::overwrite_existing);
  return d;
}

std::string write_scenario(const std::string& text, const std::string& name = "m.yaml") {
  const fs::path p = scratch() / "scenarios" / name;
  std::ofstream(p) << text;
  return p.string();
}

std::string load_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  const std::string path = write_scenario(text);
  try {
    load_scenario(path, sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

struct RunResult {
  int code = -1;
  std::string out, error;
};

RunResult run(const std::string& path, const std::vector<std::string>& sets = {}) {
  RunResult r;
  std::ostringstream out;
  try {
    RunFlags f;
    f.quiet = true;
    r.code = run_scenario(load_scenario(path, sets), f, out);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.out = out.str();
  return r;
}

const std::string kHead =
    "name: m\n"
    "topology: ../topologies/dgx-h100.yaml\n";

TEST(ModelScenario, ShippedValidationScenariosPassAndWriteTheirDump) {
  for (const char* name : {"cp-validation-thd.yaml", "cp-validation-bshd.yaml"}) {
    const fs::path dump = scratch() / (std::string(name) + ".safetensors");
    const RunResult r = run(kRoot + "/scenarios/" + name, {"dump=" + dump.string()});
    ASSERT_EQ(r.code, 0) << name << "\n" << r.out << r.error;
    EXPECT_THAT(r.out, HasSubstr("validation: tp="));
    EXPECT_THAT(r.out, HasSubstr("PASS  logits"));
    EXPECT_THAT(r.out, HasSubstr("PASS  loss"));
    EXPECT_THAT(r.out, HasSubstr("PASS  gradients"));
    EXPECT_THAT(r.out, HasSubstr("layer.qkv.weight"));
    const runtime::SafetensorsFile f = runtime::load_safetensors(dump.string());
    const bool thd = std::string(name).find("thd") != std::string::npos;
    EXPECT_EQ(f.at("logits").shape(), thd ? (runtime::Shape{23, 33}) : (runtime::Shape{2, 32, 33}));
    EXPECT_EQ(f.at("logits").dtype(), DType::f32);
    EXPECT_EQ(f.at("loss").dim(), 0);
    EXPECT_GT(f.at("loss").item(), 0.5);
    for (const auto& [pname, shape] : models::parameter_shapes(models::TransformerConfig{})) {
      ASSERT_TRUE(f.contains("grad/" + pname)) << pname;
      EXPECT_EQ(f.at("grad/" + pname).shape(), shape) << pname;
      EXPECT_EQ(f.at("grad/" + pname).dtype(), DType::f32) << pname;
    }
    fs::remove(dump);
  }
}

TEST(ModelScenario, Fp32ValidationUsesTightDefaultsAndAFailedCheckExitsWithOne) {
  const std::string text = kHead +
                           "parallel: {tp: 2, cp: 2, cp_comm: a2a+p2p}\n"
                           "model: {kind: transformer, dtype: fp32, format: thd, mask: causal, window: [4, 0]}\n"
                           "validate: {baseline: {tp: 1, cp: 1}}\n";
  const RunResult ok = run(write_scenario(text));
  ASSERT_EQ(ok.code, 0) << ok.out << ok.error;
  EXPECT_THAT(ok.out, HasSubstr("within 0.0001"));
  EXPECT_THAT(ok.out, HasSubstr("100.00% of 759"));
  // bf16 against an fp32 threshold fails, with exit code 1 and the numbers shown.
  const RunResult bad = run(write_scenario(text), {"model.dtype=bf16", "validate.loss_rel=1e-9"});
  EXPECT_EQ(bad.code, 1) << bad.out << bad.error;
  EXPECT_THAT(bad.out, HasSubstr("FAIL  loss"));
}

TEST(ModelScenario, BatchAndWeightsFilesAreUsed) {
  const fs::path dir = scratch();
  // A THD batch of two sequences (lengths 5 and 9), labels shifted, as a user writes it.
  std::vector<std::int64_t> ids, labels;
  for (int i = 0; i < 14; ++i) ids.push_back(2 + (i * 7) % 30);
  for (int i = 0; i < 14; ++i) labels.push_back((i == 4 || i == 13) ? -100 : ids[static_cast<size_t>(i) + 1]);
  runtime::save_safetensors((dir / "batch.safetensors").string(),
                            {{"input_ids", Tensor::from_vector(ids, {14})},
                             {"labels", Tensor::from_vector(labels, {14})},
                             {"cu_seqlens", Tensor::from_vector(std::vector<std::int32_t>{0, 5, 14}, {3})}});
  models::Weights w = models::seeded_weights(models::TransformerConfig{}, 5);
  std::vector<std::pair<std::string, Tensor>> wt(w.begin(), w.end());
  runtime::save_safetensors((dir / "weights.safetensors").string(), wt);
  const std::string body = kHead +
                           "parallel: {tp: 1, cp: 2}\n"
                           "model: {kind: transformer, format: thd, mask: padding, weights: ../weights.safetensors}\n"
                           "batch: ../batch.safetensors\n"
                           "dump: " +
                           (dir / "a.safetensors").string() + "\n";
  const RunResult a = run(write_scenario(body));
  ASSERT_EQ(a.code, 0) << a.out << a.error;
  // the same weights from the seed
  const RunResult b =
      run(write_scenario(body), {"model.weights=", "model.seed=5", "dump=" + (dir / "b.safetensors").string()});
  ASSERT_EQ(b.code, 0) << b.out << b.error;
  const runtime::SafetensorsFile fa = runtime::load_safetensors((dir / "a.safetensors").string());
  const runtime::SafetensorsFile fb = runtime::load_safetensors((dir / "b.safetensors").string());
  EXPECT_EQ(fa.at("logits").shape(), (runtime::Shape{14, 33}));
  for (const auto& [name, t] : fa.tensors) EXPECT_TRUE(runtime::bitwise_equal(t, fb.at(name))) << name;
  // A different seed gives different numbers: the file was really used.
  const RunResult c =
      run(write_scenario(body), {"model.weights=", "model.seed=6", "dump=" + (dir / "c.safetensors").string()});
  ASSERT_EQ(c.code, 0);
  EXPECT_FALSE(runtime::bitwise_equal(fa.at("logits"),
                                      runtime::load_safetensors((dir / "c.safetensors").string()).at("logits")));
}

TEST(ModelScenario, BadInputNamesTheFileAndWhatToDo) {
  const std::string model = "model: {kind: transformer, format: thd, mask: padding}\n";
  EXPECT_THAT(load_error(kHead + "model: {kind: transformer, fromat: thd}\n"),
              HasSubstr("m.yaml:3:28: unknown key 'fromat' in model; did you mean 'format'?"));
  EXPECT_THAT(load_error(kHead + "model: {kind: transformer, format: bshd, mask: padding}\n"),
              HasSubstr("mask 'padding' needs format thd"));
  EXPECT_THAT(load_error(kHead + "model: {kind: transformer, format: thd, mask: no_mask}\n"),
              HasSubstr("format thd takes mask 'padding'"));
  EXPECT_THAT(load_error(kHead + "model: {kind: transformer, mask: causal, window: [3, 2]}\n"),
              HasSubstr("a causal mask takes a right window of 0"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 3}\n" + model),
              HasSubstr("20 attention heads are not divisible by tp=3"));
  EXPECT_THAT(load_error(kHead + "parallel: {cp: 8, cp_comm: a2a}\n" + model), HasSubstr("20"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 4, cp: 4}\n" + model),
              HasSubstr("16 ranks need 16 devices but topology 'dgx-h100' has 8"));
  EXPECT_THAT(load_error(kHead + "data: shape_only\ndump: x.safetensors\n" + model), HasSubstr("dump needs real data"));
  EXPECT_THAT(load_error(kHead + model + "workload: {steps: {do: [wait: {}]}}\n"), HasSubstr("model and workload"));
  EXPECT_THAT(load_error(kHead + model + "batch: ../nope.safetensors\n"), HasSubstr("nope.safetensors"));
  EXPECT_THAT(
      load_error(kHead +
                 "model: {kind: transformer, format: bshd}\nbatch: {rows: 2, seq_len: 30}\nparallel: {cp: 4}\n"),
      HasSubstr("not a multiple of 2*cp = 8"));
  EXPECT_THAT(load_error(kHead + "model: {kind: gpt}\n"),
              HasSubstr("model.kind is 'gpt'; expected one of transformer"));
  // A batch file whose cu_seqlens decrease.
  const fs::path dir = scratch();
  runtime::save_safetensors((dir / "bad.safetensors").string(),
                            {{"input_ids", Tensor::from_vector(std::vector<std::int64_t>{2, 3, 4, 5}, {4})},
                             {"labels", Tensor::from_vector(std::vector<std::int64_t>{3, 4, 5, -100}, {4})},
                             {"cu_seqlens", Tensor::from_vector(std::vector<std::int32_t>{0, 3, 2, 4}, {4})}});
  EXPECT_THAT(load_error(kHead + model + "batch: ../bad.safetensors\n"),
              HasSubstr("cu_seqlens [0, 3, 2, 4] decreases at index 2"));
  // A weights file with a wrong shape.
  runtime::save_safetensors((dir / "w.safetensors").string(), {{"embedding.weight", Tensor::zeros({33, 16})}});
  EXPECT_THAT(load_error(kHead + "model: {kind: transformer, weights: ../w.safetensors}\n"),
              HasSubstr("'embedding.weight' is f32[33, 16], expected shape [33, 320]"));
}

TEST(ModelScenario, TrainingDumpsLossesAndParamsAndResumesFromItsCheckpoint) {
  const fs::path dir = scratch();
  const std::string text =
      kHead +
      "parallel: {tp: 2, cp: 2, dp: 2}\n"
      "model: {kind: transformer, format: thd, mask: causal, layers: 2, hidden: 64, heads: 4, ffn: 128}\n"
      "batch: {lengths: [9, 14, 6, 11]}\n"
      "train: {steps: 4, micro_batches: 2, optimizer: {lr: 0.01, eps: 1.0e-4}, zero: 1}\n";
  const std::string path = write_scenario(text);
  const RunResult full = run(path, {"dump=" + (dir / "full.safetensors").string()});
  ASSERT_EQ(full.code, 0) << full.out << full.error;
  EXPECT_THAT(full.out, HasSubstr("training: 4 steps, 2 micro-batches"));
  const runtime::SafetensorsFile f = runtime::load_safetensors((dir / "full.safetensors").string());
  ASSERT_EQ(f.at("losses").shape(), (runtime::Shape{4}));
  EXPECT_TRUE(f.contains("param/layers.1.fc2.weight"));
  EXPECT_EQ(f.at("param/embedding.weight").shape(), (runtime::Shape{33, 64}));
  // two steps, a checkpoint, two more steps in another layout (pp=2, no ZeRO)
  const RunResult first = run(path, {"train.steps=2", "train.checkpoint=" + (dir / "ckpt.safetensors").string()});
  ASSERT_EQ(first.code, 0) << first.out << first.error;
  // the same state as per-rank shards, joined by `ranksim consolidate`
  const RunResult sharded = run(path, {"train.steps=2", "train.shards=" + (dir / "shards").string()});
  ASSERT_EQ(sharded.code, 0) << sharded.out << sharded.error;
  std::ostringstream cout_, cerr_;
  const std::string joined = (dir / "joined.safetensors").string();
  std::vector<std::string> args = {"ranksim", "consolidate", path, (dir / "shards").string(), joined};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_EQ(run_cli(static_cast<int>(argv.size()), argv.data(), cout_, cerr_), 0) << cerr_.str();
  const runtime::SafetensorsFile ck = runtime::load_safetensors((dir / "ckpt.safetensors").string());
  const runtime::SafetensorsFile jn = runtime::load_safetensors(joined);
  for (const auto& [name, t] : ck.tensors) EXPECT_TRUE(runtime::bitwise_equal(t, jn.at(name))) << name;
  const RunResult second = run(path, {"train.steps=2", "train.zero=0", "parallel.pp=2", "parallel.dp=1",
                                      "model.weights=" + joined, "dump=" + (dir / "second.safetensors").string()});
  ASSERT_EQ(second.code, 0) << second.out << second.error;
  EXPECT_THAT(second.out, HasSubstr("pipeline: time blocked in stage-to-stage receives"));
  EXPECT_THAT(first.out, Not(HasSubstr("pipeline:")));  // pp = 1 has no pipeline
  const std::vector<float> a = f.at("losses").to_vector<float>();
  const std::vector<float> b =
      runtime::load_safetensors((dir / "second.safetensors").string()).at("losses").to_vector<float>();
  EXPECT_NEAR(b[0], a[2], 1e-5 * a[2]);
  EXPECT_NEAR(b[1], a[3], 1e-5 * a[3]);
}

TEST(ModelScenario, TrainingErrors) {
  const std::string model = "model: {kind: transformer, format: thd, mask: causal}\n";
  EXPECT_THAT(load_error(kHead + "parallel: {pp: 2}\n" + model), HasSubstr("pipeline stages need a train: section"));
  EXPECT_THAT(load_error(kHead + "parallel: {pp: 2}\nmodel: {kind: transformer, layers: 3}\ntrain: {steps: 1}\n"),
              HasSubstr("3 layers cannot be split evenly over pp=2"));
  EXPECT_THAT(load_error(kHead + model + "train: {steps: 1}\nvalidate: {}\n"),
              HasSubstr("validate compares one forward"));
  EXPECT_THAT(load_error(kHead + model + "train: {micro_batches: 2}\n"),
              HasSubstr("3 sequences, which train.micro_batches=2 does not divide"));
  EXPECT_THAT(load_error(kHead + model + "train: {optimizer: {betas: [0.9, 1.5]}}\n"),
              HasSubstr("beta2 must be in [0, 1)"));
  EXPECT_THAT(load_error(kHead + model + "train: {stpes: 3}\n"), HasSubstr("did you mean 'steps'?"));
  EXPECT_THAT(load_error(kHead + "workload: {steps: {do: [wait: {}]}}\ntrain: {steps: 1}\n"),
              HasSubstr("train belongs to the model workload"));
}

// The decoder family and Megatron's options as scenario keys: what they set, and the errors at
// the key (file:line:column) for combinations that cannot work.
TEST(ModelScenario, FamilyAndMegatronOptionKeys) {
  const std::string llama =
      "model: {kind: transformer, family: llama, format: thd, mask: causal, hidden: 64, heads: 8, kv_heads: 2, "
      "ffn: 96, vocab: 40, layers: 4, recompute: full, recompute_method: block, recompute_num_layers: 2}\n";
  const std::string batch = "batch: {lengths: [9, 14, 6, 11, 7, 10, 5, 8]}\n";
  const Scenario sc = load_scenario(
      write_scenario(kHead + "parallel: {tp: 2, pp: 2, dp: 2, sequence_parallel: true, virtual_stages: 2}\n" + llama +
                     batch + "train: {micro_batch_size: 2, global_batch_size: 8, zero: 3}\n"));
  const ModelWorkload& m = *sc.model;
  EXPECT_EQ(m.config.norm, models::Norm::rmsnorm);
  EXPECT_EQ(m.config.activation, models::Activation::swiglu);
  EXPECT_FALSE(m.config.bias);
  EXPECT_EQ(m.config.positions, models::Positions::rope);
  EXPECT_EQ(m.config.query_groups(), 2);
  EXPECT_EQ(m.config.head_dim, 8);  // hidden / heads
  EXPECT_TRUE(m.config.sequence_parallel);
  EXPECT_EQ(m.config.recompute, models::Recompute::full);
  EXPECT_EQ(m.config.recompute_method, models::RecomputeMethod::block);
  EXPECT_EQ(m.config.recompute_num_layers, 2);
  EXPECT_EQ(m.train->virtual_stages, 2);
  EXPECT_EQ(m.train->micro_batches, 2);  // 8 sequences / (dp 2 x micro-batch size 2)
  EXPECT_EQ(m.train->zero, 3);

  const RunResult r =
      run(write_scenario(kHead + "parallel: {tp: 2, pp: 2, dp: 2, sequence_parallel: true, virtual_stages: 2}\n" +
                         llama + batch + "train: {steps: 2, micro_batch_size: 2, zero: 3}\n"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("decoder (RMSNorm, SwiGLU, RoPE, no biases)"));
  EXPECT_THAT(r.out, HasSubstr("8 heads of 8 (2 KV heads)"));
  EXPECT_THAT(r.out, HasSubstr("over pp=2 x 2 virtual stages (interleaved 1F1B)"));
  EXPECT_THAT(r.out, HasSubstr("ideal bubble (pp - 1) / (v m) = 25.0%"));

  const std::string gpt = "model: {kind: transformer, family: gpt, hidden: 32, heads: 4, ffn: 64, vocab: 40}\n";
  EXPECT_THAT(load_error(kHead + gpt), HasSubstr("learned positions need model.max_positions"));
  EXPECT_EQ(load_error(kHead + "parallel: {tp: 4}\n" + llama + batch), "no error");  // kv 2 < tp 4: shared
  const std::string gqa3 = "model: {kind: transformer, family: llama, hidden: 96, heads: 12, kv_heads: 3, ffn: 96}\n";
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 4}\n" + gqa3),
              HasSubstr("m.yaml:3:11: model.kv_heads 3 and tp=4 do not divide one another"));
  EXPECT_THAT(load_error(kHead + "parallel: {virtual_stages: 2}\n" + llama + batch + "train: {steps: 1}\n"),
              HasSubstr("parallel.virtual_stages interleaves the pipeline schedule: it needs pp >= 2"));
  EXPECT_THAT(
      load_error(kHead + "parallel: {pp: 2, virtual_stages: 2}\n" + llama + batch + "train: {micro_batches: 3}\n"),
      HasSubstr("not a multiple of pp=2"));
  EXPECT_THAT(load_error(kHead + llama + batch + "train: {micro_batches: 2, micro_batch_size: 2}\n"),
              HasSubstr("give train.micro_batches or train.micro_batch_size"));
  EXPECT_THAT(load_error(kHead + llama + batch + "train: {global_batch_size: 16}\n"),
              HasSubstr("train.global_batch_size 16 but the batch has 8 sequences"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 1, sequence_parallel: true}\n" + llama + batch),
              HasSubstr("parallel.sequence_parallel splits the tokens over TP: it needs tp > 1"));
  EXPECT_THAT(load_error(kHead + llama + batch + "train: {zero: 2}\n"), HasSubstr("train.zero"));
}

// Megatron's vocabulary padding (model.make_vocab_size_divisible_by) and uneven pipeline stages
// (parallel.decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers): the padded
// vocabulary, whether the tables are split over TP, and the stages' blocks in the summary; the
// errors at the key (file:line:column) for combinations that cannot work.
TEST(ModelScenario, VocabPaddingAndUnevenPipelineStageKeys) {
  const std::string model =
      "model: {kind: transformer, family: llama, format: thd, mask: causal, hidden: 32, heads: 4, kv_heads: 2, "
      "ffn: 64, ";
  const std::string batch = "batch: {lengths: [9, 14, 6, 11]}\n";  // 40 tokens
  auto with = [&](const std::string& parallel, const std::string& rest) {
    return write_scenario(kHead + "parallel: " + parallel + "\n" + model + rest + "}\n" + batch);
  };
  // 50 padded to a multiple of 8 x tp = 16: 64 rows, split over the 2 TP ranks
  const Scenario sc = load_scenario(with("{tp: 2}", "vocab: 50, make_vocab_size_divisible_by: 8"));
  EXPECT_EQ(sc.model->config.vocab, 64);
  EXPECT_EQ(sc.model->tokenizer_vocab, 50);
  EXPECT_EQ(sc.model->vocab_divisible_by, 8);
  const fs::path dump = scratch() / "vocab.safetensors";
  const RunResult padded =
      run(with("{tp: 2}", "vocab: 50, make_vocab_size_divisible_by: 8"), {"dump=" + dump.string()});
  ASSERT_EQ(padded.code, 0) << padded.out << padded.error;
  EXPECT_THAT(padded.out, HasSubstr("vocab 64 (50 padded to a multiple of 8 x tp) vocab-parallel, hidden 32"));
  // the dump's logits have every padded column (gathered over TP)
  EXPECT_EQ(runtime::load_safetensors(dump.string()).at("logits").shape(), (runtime::Shape{40, 64}));
  fs::remove(dump);
  struct Wording {
    std::string parallel, model, summary;
  };
  const std::vector<Wording> wordings{
      {"{tp: 4}", "vocab: 50, make_vocab_size_divisible_by: 8",
       "vocab 64 (50 padded to a multiple of 8 x tp) "
       "vocab-parallel, hidden 32"},                                                                    // 8 x 4 = 32
      {"{tp: 2}", "vocab: 64, make_vocab_size_divisible_by: 8", "vocab 64 vocab-parallel, hidden 32"},  // a multiple
      {"{tp: 2}", "vocab: 50", "vocab 50 vocab-parallel, hidden 32"},  // not given: no padding; 2 divides 50
      {"{tp: 2}", "vocab: 51",
       "vocab 51 replicated over TP (tp does not divide it; Megatron pads it: set model.make_vocab_size_divisible_by), "
       "hidden 32"},
      {"{tp: 1}", "vocab: 51", "vocab 51, hidden 32"},
      {"{tp: 1}", "vocab: 51, make_vocab_size_divisible_by: 8", "vocab 56 (51 padded to a multiple of 8 x tp), hidden"},
  };
  for (const Wording& w : wordings) {
    const RunResult r = run(with(w.parallel, w.model), {"data=shape_only"});
    ASSERT_EQ(r.code, 0) << w.model << "\n" << r.out << r.error;
    EXPECT_THAT(r.out, HasSubstr(w.summary)) << w.parallel << " " << w.model;
  }

  // Uneven stages: the split in the training line, and the run trains
  const std::string train = "train: {steps: 1, micro_batches: 2}\n";
  struct Stages {
    std::string parallel;
    int layers;
    std::int64_t first, last;
    std::string split;
  };
  const std::vector<Stages> splits{
      {"{tp: 2, pp: 4, decoder_first_pipeline_num_layers: 3, decoder_last_pipeline_num_layers: 1}", 12, 3, 1,
       "layers 12 over pp=4 (stages 3-4-4-1)"},
      {"{pp: 3, decoder_first_pipeline_num_layers: 1, decoder_last_pipeline_num_layers: 1}", 5, 1, 1,
       "layers 5 over pp=3 (stages 1-3-1)"},
      {"{pp: 2, decoder_last_pipeline_num_layers: 1}", 3, -1, 1, "layers 3 over pp=2 (stages 2-1)"},
      {"{pp: 3, decoder_first_pipeline_num_layers: 0}", 4, 0, -1, "layers 4 over pp=3 (stages 0-2-2)"},
  };
  for (const Stages& st : splits) {
    const std::string path = write_scenario(kHead + "parallel: " + st.parallel + "\n" + model +
                                            "layers: " + std::to_string(st.layers) + "}\n" + batch + train);
    const Scenario s = load_scenario(path);
    ASSERT_TRUE(s.model->train.has_value());
    EXPECT_EQ(s.model->train->first_stage_layers, st.first) << st.parallel;
    EXPECT_EQ(s.model->train->last_stage_layers, st.last) << st.parallel;
    const RunResult r = run(path);
    ASSERT_EQ(r.code, 0) << st.parallel << "\n" << r.out << r.error;
    EXPECT_THAT(r.out, HasSubstr(st.split));
    EXPECT_THAT(r.out, HasSubstr("pipeline: time blocked in stage-to-stage receives"));
  }
  // even stages say nothing of a split
  const RunResult even =
      run(write_scenario(kHead + "parallel: {pp: 2}\n" + model + "layers: 4}\n" + batch + train), {"data=shape_only"});
  ASSERT_EQ(even.code, 0) << even.out << even.error;
  EXPECT_THAT(even.out, AllOf(HasSubstr("layers 4 over pp=2"), Not(HasSubstr("(stages"))));

  auto error = [&](const std::string& parallel, int layers, const std::string& rest) {
    return load_error(kHead + "parallel: " + parallel + "\n" + model + "layers: " + std::to_string(layers) + "}\n" +
                      batch + rest);
  };
  // With virtual stages the counts are the first and last model chunks' (Megatron's
  // account-for-embedding/loss split with an interleaved pipeline).
  const RunResult chunks =
      run(write_scenario(kHead +
                         "parallel: {pp: 2, virtual_stages: 2, decoder_first_pipeline_num_layers: 1, "
                         "decoder_last_pipeline_num_layers: 1}\n" +
                         model + "layers: 6}\n" + batch + train),
          {"data=shape_only"});
  ASSERT_EQ(chunks.code, 0) << chunks.out << chunks.error;
  EXPECT_THAT(chunks.out, HasSubstr("(chunks 1-2x2-1) x 2 virtual stages"));
  // even chunks must divide the layers
  EXPECT_THAT(error("{pp: 2, virtual_stages: 3}", 4, train),
              HasSubstr("m.yaml:3:35: model.layers 4 cannot be split into pp=2 x virtual_stages=3 chunks; use a layer "
                        "count that is a multiple of 6"));
  EXPECT_THAT(error("{pp: 2, virtual_stages: 2, decoder_first_pipeline_num_layers: 2}", 4, train),
              HasSubstr("m.yaml:3:73: parallel.decoder_first_pipeline_num_layers: the pipeline's 2 x 2 model chunks "
                        "(pp x virtual_stages): 4 layers cannot be split over pp=4 stages with first stage 2, last "
                        "stage even layers: the other 3 stages must share the remaining 2 layers evenly"));
  EXPECT_THAT(error("{decoder_last_pipeline_num_layers: 1}", 4, train),
              HasSubstr("m.yaml:3:46: parallel.decoder_last_pipeline_num_layers sets a pipeline stage's layers: it "
                        "needs pp >= 2"));
  EXPECT_THAT(error("{pp: 3, decoder_first_pipeline_num_layers: 1}", 4, train),
              HasSubstr("m.yaml:3:54: parallel.decoder_first_pipeline_num_layers: the pipeline: 4 layers cannot be "
                        "split over pp=3 stages with first stage 1, last stage even layers: the other 2 stages must "
                        "share the remaining 3 layers evenly"));
  EXPECT_THAT(error("{pp: 4, decoder_first_pipeline_num_layers: 13}", 12, train),
              HasSubstr("m.yaml:3:54: parallel.decoder_first_pipeline_num_layers: the pipeline: 12 layers cannot be "
                        "split over pp=4 stages"));
  EXPECT_THAT(error("{pp: 2, decoder_first_pipeline_num_layers: 1}", 4, ""),
              HasSubstr("m.yaml:3:54: parallel.decoder_first_pipeline_num_layers needs a train: section (a pipeline "
                        "schedule)"));
  EXPECT_THAT(error("{pp: 2, decoder_last_pipeline_num_layers: 1}", 4, ""),
              HasSubstr("m.yaml:3:53: parallel.decoder_last_pipeline_num_layers needs a train: section (a pipeline "
                        "schedule)"));
  EXPECT_THAT(error("{pp: 2, decoder_first_pipeline_num_layers: -1}", 4, train),
              HasSubstr("m.yaml:3:54: parallel.decoder_first_pipeline_num_layers must be a non-negative integer, "
                        "got '-1'"));
  EXPECT_THAT(error("{pp: 2}", 3, train),
              HasSubstr("3 layers cannot be split evenly over pp=2 stages; set model.layers to a multiple of pp, or "
                        "parallel.decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers"));
  EXPECT_THAT(load_error(kHead + "parallel: {decoder_first_pipeline_num_layers: 1}\n" +
                         "workload: {steps: {do: [wait: {}]}}\n"),
              HasSubstr("m.yaml:3:47: parallel.decoder_first_pipeline_num_layers belongs to the model workload"));
  EXPECT_THAT(load_error(kHead + model + "make_vocab_size_divisible_by: 0}\n"),
              HasSubstr("m.yaml:3:144: model.make_vocab_size_divisible_by"));
}

// parallel.tp_comm_overlap: named in the summary's options, and refused without sequence
// parallelism at its key; a real-data run with it trains the plain run's numbers (the model test
// OptionsTpCommOverlap checks the bits).
TEST(ModelScenario, TpCommOverlapKey) {
  const std::string model =
      "model: {kind: transformer, family: llama, format: thd, mask: causal, vocab: 32, hidden: 32, heads: 4, "
      "kv_heads: 2, ffn: 64, layers: 2}\n";
  const std::string rest = "batch: {lengths: [9, 14, 6, 11]}\ntrain: {steps: 1}\n";
  const RunResult r =
      run(write_scenario(kHead + "parallel: {tp: 2, sequence_parallel: true, tp_comm_overlap: true}\n" + model + rest),
          {"data=shape_only"});
  ASSERT_EQ(r.code, 0) << r.out << r.error;
  EXPECT_THAT(r.out, HasSubstr("  options: sequence parallelism, TP communication overlap\n"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 2, tp_comm_overlap: true}\n" + model + rest),
              HasSubstr("m.yaml:3:36: parallel.tp_comm_overlap pipelines sequence parallelism's all-gathers and "
                        "reduce-scatters with the GEMMs (Megatron's --tp-comm-overlap): it needs "
                        "parallel.sequence_parallel: true"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 2, sequence_parallel: true, tp_comm_overlap: yes}\n" + model + rest),
              HasSubstr("parallel.tp_comm_overlap"));
}

// train.ddp_bucket_size / overlap_grad_reduce: Megatron-Core's default bucket (max(40M, 1M x
// DP x CP) elements), a given size, one bucket after backward, and the contradiction refused.
TEST(ModelScenario, GradientBucketKeys) {
  const std::string head = kHead + "parallel: {dp: 2}\n" +
                           "model: {kind: transformer, family: llama, format: thd, mask: causal, vocab: 32, "
                           "hidden: 32, heads: 4, kv_heads: 2, ffn: 64, layers: 2}\n" +
                           "batch: {lengths: [9, 14, 6, 11]}\n";
  struct Case {
    std::string train, summary;
  };
  for (const Case& c :
       {Case{"{steps: 1}", "gradient buckets of 4e+07 elements overlapped with backward"},
        Case{"{steps: 1, zero: 1, ddp_bucket_size: 5000}",
             "gradient buckets of 5000 elements overlapped with backward"},
        Case{"{steps: 1, overlap_grad_reduce: false}", "gradients reduced in one bucket after backward"},
        Case{"{steps: 1, overlap_grad_reduce: true}", "gradient buckets of 4e+07 elements"}}) {
    const RunResult r = run(write_scenario(head + "train: " + c.train + "\n"), {"data=shape_only"});
    ASSERT_EQ(r.code, 0) << c.train << "\n" << r.out << r.error;
    EXPECT_THAT(r.out, HasSubstr(c.summary)) << c.train;
  }
  EXPECT_THAT(load_error(head + "train: {steps: 1, ddp_bucket_size: 100, overlap_grad_reduce: false}\n"),
              HasSubstr("m.yaml:6:62: train.overlap_grad_reduce: false reduces the gradients in one bucket after "
                        "backward; remove train.ddp_bucket_size or set overlap_grad_reduce: true"));
  EXPECT_THAT(load_error(head + "train: {steps: 1, ddp_bucket_size: 0}\n"), HasSubstr("train.ddp_bucket_size"));
}

// Megatron's model FLOPs (app/run_summary.h), against closed forms and a published pair:
// - GPT-3 style (multi-head attention, ffn 4h, no mask): Narayanan et al. 2021's
//   72 B s l h^2 (1 + s/(6h) + V/(12 l h));
// - Llama 3 8B at 8192 tokens, causal: Megatron-Bridge's performance summary (25.11, DGX-H100,
//   8 GPUs, FP8-CS, FSDP) reports 744 model TFLOP/s/GPU at 14,451 tokens/s/GPU, i.e.
//   5.148e10 FLOPs per token; the formula with the causal half gives 5.147e10.
TEST(ModelScenario, ModelFlopsAreMegatronsFormula) {
  const double b = 4, s = 2048, l = 24, h = 2048, v = 51200;
  const models::TransformerConfig gpt = models::gpt_config(51200, 2048, 16, 8192, 24, 2048);
  const double want = 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h));
  EXPECT_NEAR(model_flops(gpt, std::vector<std::int64_t>(4, 2048), false), want, 1e-12 * want);
  models::TransformerConfig llama = models::llama_config(128256, 4096, 32, 8, 14336, 32);
  const double per_token = model_flops(llama, {8192}, true) / 8192;
  EXPECT_NEAR(per_token, 744e12 / 14451, 0.002 * per_token);
  EXPECT_LT(model_flops(llama, {8192}, true), model_flops(llama, {8192}, false));  // the causal half
  // THD: the score term follows each sequence's own length
  EXPECT_LT(model_flops(llama, {4096, 4096}, true), model_flops(llama, {8192}, true));
}

// The summary's throughput line and the JSON keys: tokens/s/GPU is the batch's tokens over the
// iteration time over the GPUs, TFLOP/s/GPU the model FLOPs likewise, MFU against the bf16 peak.
TEST(ModelScenario, TrainingThroughputLine) {
  const std::string text = kHead + "data: shape_only\nparallel: {tp: 2, dp: 2}\n" +
                           "model: {kind: transformer, family: llama, dtype: bf16, format: bshd, mask: causal, "
                           "vocab: 512, hidden: 256, heads: 8, kv_heads: 2, ffn: 512, layers: 2}\n" +
                           "batch: {rows: 4, seq_len: 1024}\ntrain: {steps: 2, micro_batches: 2}\n";
  const fs::path json = scratch() / "throughput.json";
  RunFlags f;
  f.quiet = true;
  f.json = json.string();
  std::ostringstream out;
  ASSERT_EQ(run_scenario(load_scenario(write_scenario(text), {}), f, out), 0) << out.str();
  EXPECT_THAT(out.str(), HasSubstr("  throughput (Megatron's model FLOPs, docs/models.md): iteration "));
  EXPECT_THAT(out.str(), HasSubstr("% of bf16 989 TFLOP/s\n"));
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& m = j.at("model");
  const double iteration = m.at("iteration_time_s").get<double>();
  EXPECT_NEAR(iteration * 2, j.at("virtual_time_us").get<double>() * 1e-6, 1e-9);
  EXPECT_EQ(m.at("tokens_per_step").get<double>(), 4 * 1024);
  // (9 significant digits in the file, 6 for the MFU)
  const double tokens_per_s = 4 * 1024 / iteration / 4;
  EXPECT_NEAR(m.at("tokens_per_s_per_gpu").get<double>(), tokens_per_s, 1e-8 * tokens_per_s);
  const double flops =
      model_flops(load_scenario(write_scenario(text), {}).model->config, std::vector<std::int64_t>(4, 1024), true);
  EXPECT_NEAR(m.at("model_flops_per_step").get<double>(), flops, 1e-6 * flops);
  const double tflops = flops / iteration / 4 / 1e12;
  EXPECT_NEAR(m.at("tflops_per_gpu").get<double>(), tflops, 1e-8 * tflops);
  EXPECT_NEAR(m.at("mfu").get<double>(), tflops / 989.4, 1e-6 * tflops / 989.4);
  EXPECT_EQ(m.at("mfu_peak").at("dtype"), "bf16");
  fs::remove(json);
}

// The two counts are one split: each key is checked with both counts (the error at the key that
// completes a split that cannot work), so first 2 and last 2 of 12 layers over pp 4 (2-4-4-2)
// load, though the first count alone (2, then 10 layers for 3 stages) would not divide.
TEST(ModelScenario, UnevenStageKeysAreCheckedTogether) {
  const std::string model =
      "model: {kind: transformer, family: llama, format: thd, mask: causal, hidden: 32, heads: 4, kv_heads: 2, "
      "ffn: 64, layers: 12}\n";
  const std::string rest = "batch: {lengths: [9, 14, 6, 11]}\ntrain: {steps: 1, micro_batches: 2}\n";
  auto error = [&](const std::string& parallel) {
    return load_error(kHead + "parallel: " + parallel + "\n" + model + rest);
  };
  EXPECT_EQ(error("{pp: 4, decoder_first_pipeline_num_layers: 2, decoder_last_pipeline_num_layers: 2}"), "no error");
  const RunResult r = run(write_scenario(kHead +
                                         "parallel: {pp: 4, decoder_first_pipeline_num_layers: 2, "
                                         "decoder_last_pipeline_num_layers: 2}\n" +
                                         model + rest),
                          {"data=shape_only"});
  EXPECT_EQ(r.code, 0) << r.out << r.error;
  EXPECT_THAT(r.out, HasSubstr("layers 12 over pp=4 (stages 2-4-4-2)")) << r.error;
  EXPECT_THAT(error("{pp: 4, decoder_first_pipeline_num_layers: 3, decoder_last_pipeline_num_layers: 2}"),
              HasSubstr("m.yaml:3:91: parallel.decoder_last_pipeline_num_layers: the pipeline: 12 layers cannot be "
                        "split over pp=4 stages with first stage 3, last stage 2 layers: the other 2 stages must "
                        "share the remaining 7 layers evenly"));
}

TEST(ModelScenario, TwoNodeTpCpDpTimingRun) {
  const RunResult r = run(kRoot + "/scenarios/tp-cp-dp-2node.yaml");
  ASSERT_EQ(r.code, 0) << r.out << r.error;
  EXPECT_THAT(r.out, HasSubstr("layout tp=4 cp=2 dp=2"));
  EXPECT_THAT(r.out, HasSubstr("all_reduce"));
  // The DP x CP gradient all-reduce crosses the nodes: NCCL's NVLS within them, trees between.
  EXPECT_THAT(r.out, HasSubstr("nvls_tree/Simple/16ch"));
  EXPECT_THAT(r.out, HasSubstr("shape-only: timing only"));
}

// The two-model workload: the shipped fan-in and fan-out scenarios train end to end, name the
// bridge's collectives in the table, the JSON and the report, and give the encoder the same
// weights as the transformer at cp = 1 (its CP ranks folded into DP).
TEST(ModelScenario, ShippedMultimodalScenariosMatchTheirCp1Layout) {
  struct Shipped {
    const char* file;
    const char* gather;
    std::vector<std::string> cp1;  // the same source layout, destination cp = 1
  };
  for (const Shipped& s :
       {Shipped{"multimodal-fan-in-dgx-h100.yaml", "bridge.fan_in", {"parallel.cp=1", "parallel.dp=4"}},
        Shipped{"multimodal-fan-out-dgx-h100.yaml", "bridge.fan_out", {"parallel.cp=1", "parallel.dp=8"}}}) {
    const fs::path dir = scratch();
    const std::string path = kRoot + "/scenarios/" + s.file;
    std::vector<std::string> sets = {"train.steps=1", "dump=" + (dir / "cp2.safetensors").string()};
    RunResult r;
    {
      std::ostringstream out;
      RunFlags f;
      f.quiet = true;
      f.report = (dir / "report.html").string();
      f.json = (dir / "run.json").string();
      r.code = run_scenario(load_scenario(path, sets), f, out);
      r.out = out.str();
    }
    ASSERT_EQ(r.code, 0) << s.file << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("encoder: 2-layer MLP 32 -> 128 -> 320"));
    EXPECT_THAT(r.out, HasSubstr(s.gather));
    EXPECT_THAT(r.out, HasSubstr("bridge.cp_sum"));
    std::ifstream html(dir / "report.html"), json(dir / "run.json");
    const std::string page((std::istreambuf_iterator<char>(html)), {}), js((std::istreambuf_iterator<char>(json)), {});
    EXPECT_THAT(page, HasSubstr(std::string("all_gather on ") + s.gather));
    EXPECT_THAT(js, HasSubstr(std::string("\"group\": \"") + s.gather + "\""));
    std::vector<std::string> sets1 = s.cp1;
    sets1.push_back("train.steps=1");
    sets1.push_back("dump=" + (dir / "cp1.safetensors").string());
    const RunResult r1 = run(path, sets1);
    ASSERT_EQ(r1.code, 0) << s.file << "\n" << r1.out << r1.error;
    EXPECT_THAT(r1.out, Not(HasSubstr("bridge.cp_sum")));  // no CP, no CP sum
    const runtime::SafetensorsFile a = runtime::load_safetensors((dir / "cp2.safetensors").string());
    const runtime::SafetensorsFile b = runtime::load_safetensors((dir / "cp1.safetensors").string());
    // After one step: the summed gradients to a few ulps of their sums, and the weights to fp32
    // rounding -- where the gradient is not itself rounding noise: AdamW's first update is
    // lr * g / (|g| + eps), so a gradient of 1e-11 whose sign the summation order decides moves
    // its weight by up to 2 lr either way.
    for (const char* p : {"encoder.fc1.weight", "encoder.fc1.bias", "encoder.fc2.weight", "encoder.fc2.bias",
                          "layer.qkv.weight", "output.weight"}) {
      const std::string param = std::string("param/") + p, grad = std::string("grad/") + p;
      const std::vector<float> x = a.at(param).to_vector<float>(), y = b.at(param).to_vector<float>();
      const std::vector<float> gx = a.at(grad).to_vector<float>(), gy = b.at(grad).to_vector<float>();
      ASSERT_EQ(x.size(), y.size()) << p;
      ASSERT_EQ(gx.size(), gy.size()) << p;
      for (std::size_t k = 0; k < x.size(); ++k) {
        ASSERT_NEAR(gx[k], gy[k], 1e-7 + 1e-4 * std::abs(gy[k])) << grad << "[" << k << "]";
        const double tol = std::abs(gy[k]) > 1e-6 ? 1e-6 + 1e-5 * std::abs(y[k]) : 2 * 0.01 + 1e-6;
        ASSERT_NEAR(x[k], y[k], tol) << param << "[" << k << "] (gradient " << gy[k] << ")";
      }
    }
    EXPECT_FALSE(a.contains("param/embedding.weight"));  // the encoder replaces the embeddings
    const std::vector<float> la = a.at("losses").to_vector<float>(), lb = b.at("losses").to_vector<float>();
    ASSERT_EQ(la.size(), 1u);
    EXPECT_NEAR(la[0], lb[0], 1e-5 * lb[0]);
  }
}

TEST(ModelScenario, MultimodalBatchAndWeightsFiles) {
  const fs::path dir = scratch();
  models::TransformerConfig c;
  c.hidden = 64;
  c.heads = 4;
  c.ffn = 128;
  models::EncoderConfig e;
  e.features = 8;
  e.ffn = 16;
  const models::MultimodalBatch mb = models::synthetic_multimodal_batch(c, e, 4, 16, 3);
  runtime::save_safetensors(
      (dir / "mm.safetensors").string(),
      {{"input_ids", mb.tokens.input_ids}, {"labels", mb.tokens.labels}, {"features", mb.features}});
  const models::Weights w = models::seeded_multimodal_weights(c, e, 9);
  runtime::save_safetensors((dir / "w.safetensors").string(),
                            std::vector<std::pair<std::string, Tensor>>(w.begin(), w.end()));
  const std::string text =
      kHead +
      "parallel: {tp: 1, cp: 2, dp: 2}\n"
      "model: {kind: transformer, format: bshd, hidden: 64, heads: 4, ffn: 128, weights: ../w.safetensors}\n"
      "encoder: {tp: 2, dp: 2, features: 8, ffn: 16}\n"
      "batch: ../mm.safetensors\n"
      "train: {steps: 2, optimizer: {lr: 0.01}}\n"
      "dump: " +
      (dir / "d.safetensors").string() + "\n";
  const RunResult r = run(write_scenario(text));
  ASSERT_EQ(r.code, 0) << r.out << r.error;
  EXPECT_THAT(r.out, HasSubstr("identity"));
  // the same run, in process, from the same tensors
  models::MultimodalSpec spec;
  spec.config = c;
  spec.encoder = e;
  spec.attention.format = cp::Format::bshd;
  spec.src_tp = 2;
  spec.src_dp = 2;
  spec.cp = 2;
  spec.dp = 2;
  spec.weights = w;
  spec.batch = mb;
  spec.steps = 2;
  spec.optimizer.lr = 0.01;
  const models::TrainResult ref = models::run_multimodal(spec);
  const runtime::SafetensorsFile d = runtime::load_safetensors((dir / "d.safetensors").string());
  for (const auto& [name, t] : ref.params) EXPECT_TRUE(runtime::bitwise_equal(t, d.at("param/" + name))) << name;
  // a batch without features names the file
  runtime::save_safetensors((dir / "nofeat.safetensors").string(),
                            {{"input_ids", mb.tokens.input_ids}, {"labels", mb.tokens.labels}});
  std::string bad = text;
  bad.replace(bad.find("../mm.safetensors"), 17, "../nofeat.safetensors");
  EXPECT_THAT(load_error(bad), AllOf(HasSubstr("nofeat.safetensors"), HasSubstr("no 'features' tensor")));
}

TEST(ModelScenario, MultimodalShapeOnlyTimesALargeBf16Layout) {
  const RunResult r =
      run(kRoot + "/scenarios/multimodal-fan-in-dgx-h100.yaml",
          {"data=shape_only", "model.dtype=bf16", "model.hidden=1024", "model.heads=8", "model.head_dim=128",
           "model.ffn=4096", "encoder.features=256", "encoder.ffn=1024", "batch.seq_len=512", "train.steps=1"});
  ASSERT_EQ(r.code, 0) << r.out << r.error;
  EXPECT_THAT(r.out, HasSubstr("shape-only: timing only"));
  // the bridge moves bf16 activations: each of 2 source replicas' 2 rows x 512 tokens x 1024 x
  // 2 bytes, 4 MiB gathered (nccl-tests' all_gather size is the output)
  EXPECT_THAT(r.out, HasSubstr("all_gather           2   bf16        4194304"));
  EXPECT_THAT(r.out, HasSubstr("bridge.cp_sum"));
}

TEST(ModelScenario, MultimodalErrors) {
  const std::string model = "model: {kind: transformer, format: bshd, hidden: 64, heads: 4, ffn: 128}\n";
  const std::string lm = "parallel: {tp: 2, cp: 2, dp: 2}\n";
  const std::string enc = "encoder: {tp: 2, dp: 4}\n";
  EXPECT_EQ(load_error(kHead + lm + model + enc), "no error");  // the default batch: lcm(4, 2) rows of 32
  EXPECT_THAT(load_error(kHead + lm + model + "encoder: {tp: 2, dp: 2}\n"),
              AllOf(HasSubstr("encoder tp=2 x dp=2 = 4 ranks"), HasSubstr("has 8")));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 2, cp: 2, dp: 2, order: [tp, dp, cp]}\n" + model + enc),
              HasSubstr("orders dp before cp"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 2, cp: 2, dp: 2, order: [tp, cp, pp]}\n" + model + enc),
              HasSubstr("parallel.order"));
  EXPECT_THAT(load_error(kHead + "parallel: {tp: 2, cp: 2, order: [tp, cp, dp]}\n" + model),
              HasSubstr("beside an encoder"));
  EXPECT_THAT(
      load_error(kHead + lm + "model: {kind: transformer, format: thd, hidden: 64, heads: 4, ffn: 128}\n" + enc),
      HasSubstr("format must be bshd"));
  EXPECT_THAT(load_error(kHead + lm + model + enc + "train: {steps: 2, micro_batches: 2}\n"),
              HasSubstr("train takes steps and optimizer only"));
  EXPECT_THAT(load_error(kHead + lm + model + enc + "validate: {}\n"),
              HasSubstr("validate runs the transformer alone"));
  EXPECT_THAT(load_error(kHead + lm + model + "encoder: {tp: 4, dp: 2, ffn: 30}\n"),
              HasSubstr("encoder.ffn 30 is not divisible"));
  EXPECT_THAT(load_error(kHead + lm + model + enc + "batch: {rows: 6, seq_len: 16}\n"),
              HasSubstr("do not split over dp=4"));
  EXPECT_THAT(load_error(kHead + lm + model + "encoder: {tp: 2, dp: 4, feature: 3}\n"),
              HasSubstr("did you mean 'features'?"));
  EXPECT_THAT(load_error(kHead + "workload: {steps: {do: [wait: {}]}}\n" + enc),
              HasSubstr("encoder belongs to the model workload"));
}

}  // namespace
}  // namespace ranksim::app

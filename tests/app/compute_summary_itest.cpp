// What a run reports of its compute (docs/compute.md): the kernel classes add up to each rank's
// compute time, TFLOP/s and MFU follow from the charged FLOPs, and the profile's use is named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "app/cli_run.h"

namespace ranksim::app::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

nlohmann::json run_json(const std::vector<std::string>& extra,
                        const std::string& file = "cp-attention-p2p-dgx-h100.yaml") {
  const fs::path dir = fs::temp_directory_path() / ("ranksim_compute_summary_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path json = dir / "out.json";
  std::vector<std::string> args{"run", scenario(file), "--json", json.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const CliResult r = run(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(slurp(json));
}

TEST(ComputeSummary, KernelClassesAddUpAndTheProfileIsNamed) {
  const nlohmann::json j = run_json({});
  ASSERT_EQ(j["ranks_detail"].size(), 8u);
  const double makespan_us = j["virtual_time_us"].get<double>();
  for (const auto& r : j["ranks_detail"]) {
    const auto& by = r["compute_by_kind"];
    const double sum = by["gemm_us"].get<double>() + by["attention_us"].get<double>() +
                       by["memory_bound_us"].get<double>() + by["other_us"].get<double>();
    EXPECT_NEAR(sum, r["compute_us"].get<double>(), 1e-5);
    // CP attention: the fused kernels take most of the time, and no GEMM runs.
    EXPECT_EQ(by["gemm_us"].get<double>(), 0);
    EXPECT_GT(by["attention_us"].get<double>(), by["memory_bound_us"].get<double>());
    EXPECT_GT(r["tflops"].get<double>(), 0);
    EXPECT_GT(r["mfu"].get<double>(), 0);
    EXPECT_LT(r["mfu"].get<double>(), 1);
    // The attention FLOPs run at the measured ~300-650 TFLOP/s, so the MFU can be no more than
    // the attention share of the run times 650 / 989.4.
    EXPECT_LT(r["mfu"].get<double>(), by["attention_us"].get<double>() / makespan_us * 650 / 989.4 + 1e-9);
  }
  ASSERT_EQ(j["compute_model"].size(), 1u);
  EXPECT_THAT(j["compute_model"][0].get<std::string>(), HasSubstr("kernel profile h100-sxm-bf16"));
}

TEST(ComputeSummary, MeasuredKernelsAreNeverFasterThanTheRoofline) {
  const nlohmann::json profiled = run_json({});
  const nlohmann::json roof = run_json({"--set", "topology.device_kinds.h100-sxm.kernel_profile=none"});
  EXPECT_THAT(roof["compute_model"][0].get<std::string>(), HasSubstr("roofline"));
  // Measured kernels are never faster than the peak roofline.
  EXPECT_GE(profiled["virtual_time_us"].get<double>(), roof["virtual_time_us"].get<double>());
  EXPECT_EQ(roof["compute_notes"].size(), 0u);
}

TEST(ComputeSummary, Fp8TimesOnlyTheBlocksGemmsAndTheirCastsAndChangesNoNumber) {
  // Shape-only 1F1B run: the blocks' GEMMs at the FP8 rate, followed by their inputs' casts
  // (memory-bound); attention as before.
  const nlohmann::json bf16 = run_json({}, "train-pp2-1f1b-dgx-h100.yaml");
  const nlohmann::json fp8 = run_json({"--set", "model.fp8=hybrid"}, "train-pp2-1f1b-dgx-h100.yaml");
  for (size_t r = 0; r < 8; ++r) {
    const auto& a = bf16["ranks_detail"][r]["compute_by_kind"];
    const auto& b = fp8["ranks_detail"][r]["compute_by_kind"];
    EXPECT_LT(b["gemm_us"].get<double>(), a["gemm_us"].get<double>()) << r;
    EXPECT_EQ(b["attention_us"].get<double>(), a["attention_us"].get<double>()) << r;
    EXPECT_GT(b["memory_bound_us"].get<double>(), a["memory_bound_us"].get<double>()) << r;
  }
  // The shipped H100 profile has an fp8 grid (measured): no GEMM falls back to the fp8 roofline.
  for (const auto& n : fp8["compute_notes"])
    EXPECT_THAT(n["note"].get<std::string>(), Not(HasSubstr("fp8: roofline"))) << fp8["compute_notes"].dump();
  // Real data: two bf16 training steps give the same losses with and without FP8 timing; the
  // time differs (this model is small enough that the casts cost more than the GEMMs save).
  const std::vector<std::string> real{"--set", "model.dtype=bf16", "--set", "train.steps=2"};
  std::vector<std::string> real_fp8 = real;
  real_fp8.insert(real_fp8.end(), {"--set", "model.fp8=e4m3"});
  const nlohmann::json plain = run_json(real, "train-tp2-cp2-dp2-dgx-h100.yaml");
  const nlohmann::json timed = run_json(real_fp8, "train-tp2-cp2-dp2-dgx-h100.yaml");
  EXPECT_EQ(plain["model"]["losses"], timed["model"]["losses"]);
  EXPECT_NE(timed["virtual_time_us"].get<double>(), plain["virtual_time_us"].get<double>());
  // An fp32 model cannot: the error names the key.
  const CliResult bad = run({"run", scenario("train-tp2-cp2-dp2-dgx-h100.yaml"), "--set", "model.fp8=hybrid"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("model.fp8 needs model.dtype bf16 or fp16"));
}

TEST(MemorySummary, ZeroOneDividesTheOptimizerStateByDpTimesCp) {
  // The reference transformer at tp2 cp2 dp2: AdamW keeps an f32 master and two moments per
  // parameter; ZeRO-1 shards them over DP x CP = 4 ranks (each slice padded to a multiple of 4).
  const nlohmann::json whole = run_json({"--set", "train.steps=1"}, "train-tp2-cp2-dp2-dgx-h100.yaml");
  const nlohmann::json zero =
      run_json({"--set", "train.steps=1", "--set", "train.zero=1"}, "train-tp2-cp2-dp2-dgx-h100.yaml");
  const auto& w = whole["ranks_detail"][0]["memory"];
  const auto& z = zero["ranks_detail"][0]["memory"];
  EXPECT_EQ(w["optimizer_bytes"].get<double>(), 3 * w["parameters_bytes"].get<double>());  // f32 parameters
  const double ratio = w["optimizer_bytes"].get<double>() / z["optimizer_bytes"].get<double>();
  EXPECT_GT(ratio, 3.9);
  EXPECT_LE(ratio, 4.0);
  // The same parameters, but for ZeRO's all-gathered copies keeping their padding (a few bytes).
  EXPECT_NEAR(z["parameters_bytes"].get<double>() / w["parameters_bytes"].get<double>(), 1, 1e-4);
}

TEST(MemorySummary, ALayoutThatDoesNotFitFailsWithItsBreakdown) {
  // One CP rank of the shipped 32k-token causal attention holds ~0.72 GiB at its peak.
  const std::vector<std::string> big{"run", scenario("cp-attention-p2p-dgx-h100.yaml"), "--set",
                                     "topology.device_kinds.h100-sxm.memory=0.5GiB"};
  const CliResult r = run(big);
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("[FAIL] rank 0 needs 0.7 GiB of 0.5 GiB after"));
  EXPECT_THAT(r.out, HasSubstr("activations 0.7, parameters 0.0"));
  EXPECT_THAT(r.out, HasSubstr("set memory_check: warn to run anyway"));
  std::vector<std::string> warn = big;
  warn.insert(warn.end(), {"--set", "memory_check=warn"});
  const CliResult w = run(warn);
  EXPECT_EQ(w.code, 0) << w.out << w.err;
  EXPECT_THAT(w.out, HasSubstr("(memory_check: warn)"));
  // A model names the phase: the first pipeline stage of the 1F1B run peaks at ~5.5 GiB while
  // running a block (its activations of the micro-batches in flight, plus 2.5 GiB of state: the
  // embedding is vocab-parallel, half of it on each of the 2 TP ranks).
  const CliResult m =
      run({"run", scenario("train-pp2-1f1b-dgx-h100.yaml"), "--set", "topology.device_kinds.h100-sxm.memory=4GiB"});
  EXPECT_EQ(m.code, 1);
  EXPECT_THAT(m.out,
              ::testing::ContainsRegex("\\[FAIL\\] rank 0 needs 5\\.5 GiB of 4\\.0 GiB in layer [01] "
                                       "(forward|backward) \\(after [a-z_]+ at [0-9.]+ ms\\): activations 3\\.0, "
                                       "optimizer 1\\.5, parameters 0\\.5, gradients 0\\.5, buffers 0\\.0"));
}

TEST(MemorySummary, ThePeakNamesItsPhaseAndTheReportDrawsTheBytesOverTime) {
  // The 1F1B pipeline: the model labels each block's forward and backward, the loss and the
  // optimizer step, so every rank's peak is in one of them.
  const fs::path dir = fs::temp_directory_path() / ("ranksim_memory_report_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path json = dir / "out.json", html = dir / "out.html", trace = dir / "trace.json";
  const CliResult r = run({"run", scenario("train-pp2-1f1b-dgx-h100.yaml"), "--json", json.string(), "--report",
                           html.string(), "--trace", trace.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  when\n"));
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  for (const auto& rank : j["ranks_detail"]) {
    const std::string phase = rank["memory"]["phase"].get<std::string>();
    EXPECT_THAT(phase, ::testing::MatchesRegex("layer [0-9]+ (forward|backward)|loss|output layer (forward|backward)|"
                                               "embedding (forward|backward)|gradient reduction|optimizer step"));
    EXPECT_THAT(r.out, HasSubstr("in " + phase + " (after "));
  }
  const std::string page = slurp(html);
  EXPECT_THAT(page, HasSubstr("<table id=\"memory-peaks\">"));
  EXPECT_THAT(page, HasSubstr("<svg id=\"memory\""));
  // One band per kind for the largest rank, and the seven other ranks' totals as lines.
  size_t bands = 0, lines = 0;
  for (size_t at = page.find("class=\"memory-kind\""); at != std::string::npos;
       at = page.find("class=\"memory-kind\"", at + 1))
    ++bands;
  for (size_t at = page.find("class=\"memory-rank\""); at != std::string::npos;
       at = page.find("class=\"memory-rank\"", at + 1))
    ++lines;
  EXPECT_EQ(bands, 5u);
  EXPECT_EQ(lines, 7u);
  // 80 GiB is far above the ~6 GiB peak: no capacity line.
  EXPECT_THAT(page, ::testing::Not(HasSubstr("memory-capacity")));
  // The trace has each rank's bytes as a counter track; its largest total is the rank's peak.
  const nlohmann::json tr = nlohmann::json::parse(slurp(trace));
  std::vector<double> most(8, 0);
  size_t counters = 0;
  for (const auto& ev : tr["traceEvents"]) {
    if (ev["ph"] != "C") continue;
    ++counters;
    const std::string track = ev["name"].get<std::string>();
    ASSERT_THAT(track, ::testing::MatchesRegex("memory rank [0-7] \\(bytes\\)"));
    double sum = 0;
    for (const auto& [kind, bytes] : ev["args"].items()) sum += bytes.get<double>();
    const size_t rank = static_cast<size_t>(track[12] - '0');
    most[rank] = std::max(most[rank], sum);
  }
  EXPECT_GT(counters, 8u);
  for (size_t rank = 0; rank < 8; ++rank)
    EXPECT_EQ(most[rank], j["ranks_detail"][rank]["memory"]["peak_bytes"].get<double>()) << rank;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ranksim::app::testing

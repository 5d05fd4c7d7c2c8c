// `ranksim sweep` (docs/scenarios.md, "Sweeps"): each layout's figures are what `ranksim run`
// predicts for it alone, the table is best first (fitting layouts by iteration time, then those
// over memory), invalid layouts are listed with the loader's reason, and the CSV, JSON and HTML
// outputs hold every layout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli_run.h"
#include "app/layout_sweep.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run;
using testing::scenario;
using testing::slurp;

fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_sweep_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// Llama 3 8B without sequence parallelism or recomputation, 16 rows in 2 micro-batches: at tp 1
// it does not fit an H100's 80 GiB; at 16k tokens neither layout does.
const std::vector<std::string> kSets = {
    "--set", "parallel.sequence_parallel=false", "--set", "model.recompute=none", "--set", "train.micro_batches=2"};

TEST(Sweep, TheGridIsParsedOrRefused) {
  const auto g = parse_sweep_grid({"parallel.tp=1,2,4", "train.zero=3"});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].first, "parallel.tp");
  EXPECT_EQ(g[0].second, (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_EQ(g[1].second, (std::vector<std::string>{"3"}));
  const struct {
    std::vector<std::string> grid;
    std::string says;
  } bad[] = {
      {{"parallel.tp"}, "expected KEY=V1,V2"},
      {{"=1,2"}, "expected KEY=V1,V2"},
      {{"parallel.tp="}, "expected KEY=V1,V2"},
      {{"parallel.tp=1,,2"}, "an empty value"},
      {{"parallel.tp=1,2,"}, "an empty value"},
      {{"parallel.tp=2,2"}, "listed twice"},
      {{"parallel.tp=1", "parallel.tp=2"}, "given twice"},
      {{}, "at least one --grid"},
      // 17^3 = 4913 layouts
      {{"a=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "b=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
        "c=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"},
       "more than 4096 layouts"},
  };
  for (const auto& b : bad) {
    try {
      (void)parse_sweep_grid(b.grid);
      ADD_FAILURE() << "accepted: " << ::testing::PrintToString(b.grid);
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(b.says));
    }
  }
}

TEST(Sweep, EachLayoutIsWhatRunPredictsForItAloneBestFirst) {
  const fs::path d = scratch();
  std::vector<std::string> args = {"sweep", scenario("llama3-8b-train-dgx-h100.yaml"), "--grid", "parallel.tp=1,2",
                                   "batch.seq_len=8192,16384"};
  args.insert(args.end(), kSets.begin(), kSets.end());
  for (const char* o : {"--csv", "--json", "--report"}) {
    args.emplace_back(o);
    args.push_back((d / (std::string(o + 2) + ".out")).string());
  }
  const CliResult r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 layouts, 4 valid, best first"));
  EXPECT_THAT(r.err, HasSubstr("sweep: 4/4 parallel.tp=2 batch.seq_len=16384: "));  // a progress line per layout
  const nlohmann::json j = nlohmann::json::parse(slurp(d / "json.out"));
  ASSERT_EQ(j["layouts"].size(), 4u);
  bool seen_over = false;
  double last = 0;
  for (const auto& l : j["layouts"]) {
    ASSERT_TRUE(l["valid"].get<bool>());
    // the same layout run alone: its iteration time and whether it fits (the memory check)
    std::vector<std::string> alone = {"run",    scenario("llama3-8b-train-dgx-h100.yaml"),
                                      "--set",  "parallel.tp=" + l["values"]["parallel.tp"].get<std::string>(),
                                      "--set",  "parallel.dp=auto",
                                      "--set",  "ranks=8",
                                      "--set",  "batch.seq_len=" + l["values"]["batch.seq_len"].get<std::string>(),
                                      "--json", (d / "alone.json").string()};
    alone.insert(alone.end(), kSets.begin(), kSets.end());
    const CliResult a = run(alone);
    const nlohmann::json aj = nlohmann::json::parse(slurp(d / "alone.json"));
    // (the run's JSON holds 9 significant digits)
    EXPECT_NEAR(l["iteration_time_s"].get<double>(), aj["model"]["iteration_time_s"].get<double>(),
                1e-8 * aj["model"]["iteration_time_s"].get<double>());
    EXPECT_EQ(l["fits_memory"].get<bool>(), a.code == 0) << a.out;  // a run over memory fails its check
    std::uint64_t peak = 0;
    for (const auto& rk : aj["ranks_detail"]) peak = std::max(peak, rk["memory"]["peak_bytes"].get<std::uint64_t>());
    EXPECT_EQ(l["peak_memory_bytes"].get<std::uint64_t>(), peak);
    // best first: the fitting layouts by time, then those over memory by time
    const bool over = !l["fits_memory"].get<bool>();
    if (over && !seen_over) last = 0;
    EXPECT_FALSE(seen_over && !over) << "a fitting layout after one over memory";
    seen_over = seen_over || over;
    EXPECT_GE(l["iteration_time_s"].get<double>(), last);
    last = l["iteration_time_s"].get<double>();
  }
  EXPECT_TRUE(seen_over);  // the grid was chosen to have both
  EXPECT_TRUE(j["layouts"][0]["fits_memory"].get<bool>());
  // the CSV: a header and a row per layout, 22 columns each (2 keys and 20 figures), in the same order
  std::ifstream csv(d / "csv.out");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].rfind("parallel.tp,batch.seq_len,valid,tp,", 0), 0u) << lines[0];
  for (const std::string& line : lines) EXPECT_EQ(std::count(line.begin(), line.end(), ','), 21) << line;
  EXPECT_EQ(lines[1].rfind(j["layouts"][0]["values"]["parallel.tp"].get<std::string>() + "," +
                               j["layouts"][0]["values"]["batch.seq_len"].get<std::string>() + ",true,",
                           0),
            0u);
  // the HTML: three charts of the four layouts, and the table
  const std::string html = slurp(d / "report.out");
  for (const char* id : {"iteration-time", "tflops", "peak-memory", "layouts"})
    EXPECT_THAT(html, HasSubstr(std::string("id=\"") + id + "\"")) << id;
  EXPECT_THAT(html, HasSubstr("parallel.tp=1 batch.seq_len=8192"));
}

TEST(Sweep, InvalidLayoutsAreListedWithTheirReason) {
  const CliResult r =
      run({"sweep", scenario("llama3-8b-train-dgx-h100.yaml"), "--grid", "parallel.tp=2,3,8", "parallel.pp=1,2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("6 layouts, 3 valid"));  // tp 2 pp 1, tp 2 pp 2, tp 8 pp 1
  EXPECT_THAT(r.out, HasSubstr("invalid layouts:"));
  EXPECT_THAT(r.out, HasSubstr("parallel.tp=3 parallel.pp=1: "));
  EXPECT_THAT(r.out, HasSubstr("tp=8 x cp=1 x pp=2 = 16 does not divide the 8 ranks"));
}

TEST(Sweep, BadSweepsAreRefusedBeforeAnythingRuns) {
  const fs::path d = scratch();
  // no layout valid: exit 2, the reasons listed
  const CliResult none = run({"sweep", scenario("llama3-8b-train-dgx-h100.yaml"), "--grid", "parallel.tpp=2,4"});
  EXPECT_EQ(none.code, 2);
  EXPECT_THAT(none.out, HasSubstr("unknown key 'tpp'"));
  // not a training scenario
  const CliResult steps = run({"sweep", scenario("quickstart.yaml"), "--grid", "parallel.tp=1,2"});
  EXPECT_EQ(steps.code, 2);
  EXPECT_THAT(steps.err, HasSubstr("needs model: and train: sections"));
  // an output in a folder that does not exist: refused, nothing run, nothing written
  const CliResult missing = run({"sweep", scenario("llama3-8b-train-dgx-h100.yaml"), "--grid", "parallel.tp=2,4",
                                 "--csv", (d / "no-such-folder" / "out.csv").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("does not exist"));
  EXPECT_THAT(missing.err, Not(HasSubstr("sweep: 1/2")));
  // the scenario itself as an output
  const CliResult self = run({"sweep", scenario("llama3-8b-train-dgx-h100.yaml"), "--grid", "parallel.tp=2,4", "--json",
                              scenario("llama3-8b-train-dgx-h100.yaml")});
  EXPECT_EQ(self.code, 2);
  EXPECT_THAT(self.err, HasSubstr("is the scenario, which the run reads: writing it would destroy the input"));
  // a malformed grid; no grid
  EXPECT_EQ(run({"sweep", scenario("llama3-8b-train-dgx-h100.yaml"), "--grid", "parallel.tp"}).code, 2);
  EXPECT_EQ(run({"sweep", scenario("llama3-8b-train-dgx-h100.yaml")}).code, 2);
}

TEST(Sweep, AMegatronLineSweepsLikeAScenario) {
  const CliResult r =
      run({"sweep", "-t", testing::topo("dgx-h100.yaml"),
           "--megatron-args=@" + scenario("llama3-8b-dgx-h100.megatron-args"), "--grid", "parallel.tp=2,4"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 layouts, 2 valid"));
  // tp 2 is the shipped layout: its prediction (1.557 s) leads
  EXPECT_THAT(r.out, HasSubstr("  1  2              2  1  1  4  1     1.557 s"));
}

}  // namespace
}  // namespace ranksim::app

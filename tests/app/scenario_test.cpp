// Scenario files: every shipped scenario runs; errors name file:line:column and suggest keys;
// checks decide the exit code; runs are byte-for-byte deterministic.
#include "app/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "app/cli.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kRoot = RANKSIM_SOURCE_DIR;

// A scratch scenario next to the shipped topologies' relative path (../topologies/...).
// ctest runs tests in parallel processes: each process gets its own folder.
fs::path scratch_root() {
  return fs::temp_directory_path() / ("ranksim_scenario_test_" + std::to_string(::getpid()));
}

struct TempScenario {
  fs::path dir = scratch_root() / "scenarios";
  fs::path path;
  explicit TempScenario(const std::string& text, const std::string& name = "s.yaml") {
    fs::create_directories(dir);
    fs::create_directories(dir.parent_path() / "topologies");
    for (const char* t : {"dgx-h100.yaml", "ring4.yaml", "h100-cluster.yaml"})
      fs::copy_file(kRoot + "/topologies/" + t, dir.parent_path() / "topologies" / t,
                    fs::copy_options::overwrite_existing);
    path = dir / name;
    std::ofstream(path) << text;
  }
};

std::string load_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  TempScenario s(text);
  try {
    load_scenario(s.path.string(), sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

const char* kGood =
    "name: t\n"
    "topology: ../topologies/ring4.yaml\n"
    "workload:\n"
    "  steps:\n"
    "    do:\n"
    "      - compute: {gemm: [64, 64, 64], dtype: f32}\n"
    "      - all_reduce: {bytes: 1 MiB, dtype: f32}\n";

TEST(Scenario, EveryShippedScenarioRunsAndPasses) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(kRoot + "/scenarios")) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    std::ostringstream out;
    const Scenario sc = load_scenario(e.path().string());
    EXPECT_EQ(run_scenario(sc, {}, out), 0) << e.path() << "\n" << out.str();
    EXPECT_THAT(out.str(), HasSubstr("virtual time"));
  }
  EXPECT_GE(n, 3u);
}

TEST(Scenario, TwoRunsWriteByteIdenticalSummariesAndTraces) {
  const fs::path dir = scratch_root() / "determinism";
  fs::create_directories(dir);
  std::string json[2], trace[2];
  for (int i = 0; i < 2; ++i) {
    RunFlags f;
    f.json = (dir / ("s" + std::to_string(i) + ".json")).string();
    f.trace = (dir / ("t" + std::to_string(i) + ".json")).string();
    std::ostringstream out;
    ASSERT_EQ(run_scenario(load_scenario(kRoot + "/scenarios/tp-dp-cluster.yaml"), f, out), 0);
    std::stringstream a, b;
    a << std::ifstream(f.json).rdbuf();
    b << std::ifstream(f.trace).rdbuf();
    json[i] = a.str();
    trace[i] = b.str();
  }
  EXPECT_EQ(json[0], json[1]);
  EXPECT_EQ(trace[0], trace[1]);
  EXPECT_THAT(json[0], HasSubstr("\"layout\": {\"tp\": 8, \"cp\": 1, \"dp\": 2, \"pp\": 1}"));
  EXPECT_THAT(json[0], HasSubstr("\"passed\": true"));
  EXPECT_THAT(trace[0], HasSubstr("\"cat\":\"comm\""));
  fs::remove_all(dir);
}

TEST(Scenario, OverridesChangeKeysByDottedPath) {
  TempScenario s(kGood);
  const Scenario sc = load_scenario(s.path.string(), {"parallel.tp=2", "workload.steps.repeat=3"});
  EXPECT_EQ(sc.tp, 2);
  EXPECT_EQ(sc.dp, 2);
  EXPECT_EQ(sc.repeat, 3);
  const Scenario big = load_scenario(kRoot + "/scenarios/tp-dp-cluster.yaml",
                                     {"topology.nodes=4", "parallel.dp=4"});
  EXPECT_EQ(big.ranks, 32);
}

TEST(Scenario, ErrorsNameTheFileLineColumnAndSuggest) {
  EXPECT_THAT(load_error(std::string(kGood) + "paralel: {tp: 2}\n"),
              HasSubstr("s.yaml:8:1: unknown key 'paralel' in the scenario; did you mean 'parallel'?"));
  EXPECT_THAT(load_error(std::string(kGood) + "parallel: {tp: 3}\n"),
              HasSubstr("s.yaml:8:11: tp=3 x cp=1 x pp=1 = 3 does not divide the 4 ranks"));
  EXPECT_THAT(load_error(std::string(kGood) + "parallel: {tp: 2, dp: 4}\n"),
              HasSubstr("s.yaml:8:11: 8 ranks need 8 devices but topology 'ring4' has 4"));
  EXPECT_THAT(load_error("name: t\ntopology: ../topologies/ring4.yaml\nworkload:\n  steps:\n    do:\n"
                         "      - all_reduce: {bytes: 12 parsecs}\n"),
              HasSubstr("s.yaml:6:29: all_reduce.bytes:"));
  EXPECT_THAT(load_error("name: t\ntopology: ../topologies/ring4.yaml\nworkload:\n  steps:\n    do:\n"
                         "      - all_reduse: {bytes: 1 MiB}\n"),
              HasSubstr("unknown step 'all_reduse'; did you mean 'all_reduce'?"));
  EXPECT_THAT(load_error("name: t\ntopology: ../topologies/ring4.yaml\n"),
              HasSubstr("missing required key 'workload'"));
  EXPECT_THAT(load_error("name: [t\n"), HasSubstr("s.yaml:"));
  EXPECT_THAT(load_error("name: t\ntopology: ../topologies/nope.yaml\nworkload: {steps: {do: [wait: {}]}}\n"),
              HasSubstr("nope.yaml"));
  EXPECT_THAT(load_error(kGood, {"parallel.tq=2"}),
              HasSubstr("override 'parallel.tq=2':1:10: unknown key 'tq'; did you mean 'tp'?"));
  EXPECT_THAT(load_error(kGood, {"parallel.tp=two"}),
              HasSubstr("override 'parallel.tp=two':1:13: parallel.tp must be a positive integer"));
  EXPECT_THAT(load_error(kGood, {"topology.nodez=2"}), HasSubstr("nodez"));
}

TEST(Scenario, AFailedCheckExitsWithOne) {
  TempScenario s(std::string(kGood) + "checks:\n  - max_time: 1 ns\n");
  const char* argv[] = {"ranksim", "run", s.path.c_str()};
  std::ostringstream out, err;
  EXPECT_EQ(run_cli(3, argv, out, err), 1);
  EXPECT_THAT(out.str(), HasSubstr("[FAIL] virtual time <= 1 ns"));
  const char* bad[] = {"ranksim", "validate", s.path.c_str(), "--set", "parallel.tp=3"};
  EXPECT_EQ(run_cli(5, bad, out, err), 2);
  const char* ok[] = {"ranksim", "validate", s.path.c_str()};
  std::ostringstream vout;
  EXPECT_EQ(run_cli(3, ok, vout, err), 0);
  EXPECT_THAT(vout.str(), HasSubstr("valid"));
}

TEST(Scenario, ListShowsShippedFilesWithOneLineEach) {
  std::ostringstream out;
  list_shipped(kRoot, out);
  EXPECT_THAT(out.str(), HasSubstr("topologies/dgx-h100.yaml"));
  EXPECT_THAT(out.str(), HasSubstr("scenarios/quickstart.yaml"));
  EXPECT_THAT(out.str(), HasSubstr("One data-parallel training step"));
}

}  // namespace
}  // namespace ranksim::app

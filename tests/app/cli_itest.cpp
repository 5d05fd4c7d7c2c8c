// The ranksim command line end to end (in-process through run_cli): exit codes, the demo, the
// collectives benchmark with --check, and errors that name the input.
#include "app/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ranksim::app {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  args.insert(args.begin(), "ranksim");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

std::string topo(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + name; }

TEST(Cli, DemoRunsEveryDeviceOfTheDgx) {
  const Result r = run({"demo", "--topology", topo("dgx-h100.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("8 ranks on dgx-h100"));
  EXPECT_THAT(r.out, HasSubstr("all_reduce"));
  EXPECT_THAT(r.out, HasSubstr("busbw(GB/s)"));
  EXPECT_THAT(r.out, HasSubstr("virtual time"));
}

TEST(Cli, DemoWritesATraceWholeAndOverridesNodes) {
  const auto path = std::filesystem::temp_directory_path() / "ranksim_cli_demo_trace.json";
  std::filesystem::remove(path);
  const Result r =
      run({"demo", "-t", topo("h100-cluster.yaml"), "--set", "nodes=3", "--ranks", "24", "--trace", path.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("24 ranks on h100-cluster (3 nodes"));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_THAT(ss.str(), HasSubstr("\"name\":\"all_reduce\""));
  EXPECT_THAT(ss.str(), HasSubstr("\"name\":\"gemm\""));
  std::filesystem::remove(path);
}

TEST(Cli, BenchCollectivesChecksEveryRankAndPrintsTheNcclTable) {
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv"}) {
    const Result r =
        run({"bench", "collectives", "-t", topo("ring4.yaml"), "--op", op, "--sizes", "64B:4KiB", "--check"});
    ASSERT_EQ(r.code, 0) << op << ": " << r.err << r.out;
    EXPECT_THAT(r.out, HasSubstr("all results correct")) << op;
    EXPECT_THAT(r.out, HasSubstr("#wrong")) << op;
    EXPECT_THAT(r.out, Not(HasSubstr("N/A"))) << op;
  }
}

TEST(Cli, BenchBusBandwidthApproachesTheLinkSpeedForLargeMessages) {
  // dgx-h100: 450 GB/s per GPU each way through NVSwitch; a 1 GiB ring all-reduce reaches
  // close to it (bus bandwidth is defined to make this comparison).
  const Result r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1GiB", "--algo", "ring"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  double busbw = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
    std::istringstream f(line);
    std::string size, count, type, algo;
    double time_us, algbw;
    f >> size >> count >> type >> algo >> time_us >> algbw >> busbw;
  }
  EXPECT_GT(busbw, 400.0) << r.out;
  EXPECT_LE(busbw, 450.0) << r.out;
}

TEST(Cli, BadInputExitsWithTwoAndNamesTheInput) {
  Result r = run({"bench", "collectives", "-t", topo("ring4.yaml"), "--op", "all_reduse"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown --op 'all_reduse'"));
  r = run({"bench", "collectives", "-t", topo("ring4.yaml"), "--ranks", "9"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--ranks 9 is more than the 4 devices"));
  r = run({"demo", "-t", "/no/such/topology.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("/no/such/topology.yaml"));
  r = run({"bench", "collectives", "-t", topo("ring4.yaml"), "--sizes", "8 parsecs"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--sizes"));
  r = run({"frobnicate"});
  EXPECT_EQ(r.code, 2);
}

TEST(Cli, TopoPrintsWhatAFileHolds) {
  const Result r = run({"topo", topo("h100-cluster.yaml"), "--set", "nodes=16"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("h100-cluster"));
  EXPECT_THAT(r.out, HasSubstr("128"));
}

}  // namespace
}  // namespace ranksim::app

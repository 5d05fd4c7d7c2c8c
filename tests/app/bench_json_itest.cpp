// `ranksim bench collectives` as a drop-in for nccl-tests: its size flags (-b, -e, -f, -i) give
// the sizes nccl-tests would run, and -J writes nccl-tests' JSON, which `calibrate` reads back to
// the table printed and from which it recovers the constants the sweep was predicted with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/bench.h"
#include "app/nccl_tests_input.h"
#include "sim/error.h"
#include "sim/topology.h"
#include "tests/app/cli_run.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run;
using testing::slurp;
using testing::topo;

std::vector<int64_t> doubling(int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t s = lo; s <= hi; s *= 2) out.push_back(s);
  return out;
}

TEST(NcclTestsSizes, FactorMultipliesFromMinToMax) {
  EXPECT_THAT(nccl_tests_sweep("8", "128M", "", 2).sizes, ElementsAreArray(doubling(8, 128LL << 20)));
  EXPECT_THAT(nccl_tests_sweep("1K", "1G", "", 4).sizes,
              ElementsAreArray(std::vector<int64_t>{1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
                                                    67108864, 268435456, 1073741824}));
  // The last size is the largest the factor reaches without passing -e.
  EXPECT_THAT(nccl_tests_sweep("3", "100", "", 2).sizes, ElementsAreArray(std::vector<int64_t>{3, 6, 12, 24, 48, 96}));
}

TEST(NcclTestsSizes, WithoutAFactorTheyStepByBytes) {
  // nccl-tests' -i default is 1M, and -b and -e default to 32M.
  EXPECT_THAT(nccl_tests_sweep("1M", "4M", "", 0).sizes,
              ElementsAreArray(std::vector<int64_t>{1 << 20, 2 << 20, 3 << 20, 4 << 20}));
  EXPECT_THAT(nccl_tests_sweep("1000", "2600", "512", 1).sizes,
              ElementsAreArray(std::vector<int64_t>{1000, 1512, 2024, 2536}));
  EXPECT_EQ(nccl_tests_sweep("", "64M", "", 0).sizes.size(), 33u);  // 32M, 33M, ..., 64M
  EXPECT_THAT(nccl_tests_sweep("", "", "", 0).sizes, ElementsAreArray(std::vector<int64_t>{32LL << 20}));
}

TEST(NcclTestsSizes, ReadsSizesAsNcclTestsDoes) {
  EXPECT_EQ(nccl_tests_sweep("1.5K", "1.5K", "", 2).sizes.front(), 1536);       // fractions of a unit
  EXPECT_EQ(nccl_tests_sweep("2g", "2g", "", 2).sizes.front(), 2LL << 30);      // either case
  EXPECT_EQ(nccl_tests_sweep("8GiB", "8GiB", "", 2).sizes.front(), 8LL << 30);  // and ranksim's units
}

TEST(NcclTestsSizes, RefusesWhatNcclTestsCouldNotRun) {
  const auto says = [](const std::string& lo, const std::string& hi, const std::string& step, int64_t f) {
    try {
      nccl_tests_sweep(lo, hi, step, f).sizes;
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(says("8X", "1M", "", 2), HasSubstr("-b '8X' is not a size"));
  EXPECT_THAT(says("8", "lots", "", 2), HasSubstr("-e 'lots' is not a size"));
  EXPECT_THAT(says("2M", "1M", "", 2), HasSubstr("-e 1048576 is below -b 2097152"));
  EXPECT_THAT(says("0", "1M", "", 2), HasSubstr("-b 0 with -f 2: the sizes never grow"));
  EXPECT_THAT(says("8", "1M", "0", 0), HasSubstr("-i 0: the sizes never grow"));
  EXPECT_THAT(says("8", "8G", "", 0), HasSubstr("more than 4096 sizes (without -f, nccl-tests steps by -i"));
  EXPECT_THAT(says("8", "8G", "", -2), HasSubstr("-f -2: the factor must be positive"));
}

class BenchJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ranksim_bench_json_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// The rows a bench table printed: size, algorithm and time (us).
struct Printed {
  int64_t bytes;
  std::string algorithm;
  double us;
};
std::vector<Printed> printed_rows(const std::string& out) {
  std::vector<Printed> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
    std::istringstream f(line);
    Printed p{};
    std::string count, type;
    if (f >> p.bytes >> count >> type >> p.algorithm >> p.us) rows.push_back(p);
  }
  return rows;
}

TEST_F(BenchJson, CalibrateReadsBackTheTablePrinted) {
  const std::string json = file("ar.json");
  const auto r = run({"bench", "collectives", "-t", topo("h100-cluster.yaml"), "--set", "nodes=2", "-b", "64K", "-e",
                      "1G", "-f", "4", "-J", json, "--algo", "^nvls_tree", "--proto", "^LL"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("# wrote " + json));
  const std::vector<Printed> printed = printed_rows(r.out);
  ASSERT_EQ(printed.size(), 8u);  // 64K, 256K, ..., 1G
  const MeasuredTable t = read_nccl_tests(json);
  EXPECT_EQ(t.op, "all_reduce");
  EXPECT_EQ(t.test, "all_reduce_perf");
  EXPECT_EQ(t.ranks, 16);
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.gpus_per_thread, 1);
  EXPECT_EQ(t.algorithm, "^nvlstree");  // NCCL_ALGO as NCCL spells it
  EXPECT_EQ(t.protocol, "^LL");
  ASSERT_EQ(t.rows.size(), printed.size());
  for (size_t i = 0; i < printed.size(); ++i) {
    EXPECT_EQ(t.rows[i].bytes, printed[i].bytes);
    EXPECT_NEAR(t.rows[i].seconds * 1e6, printed[i].us, 0.005 + 1e-9 * printed[i].us) << printed[i].bytes;
  }
  // The fields nccl-tests writes, and the choice beside them.
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["config"]["step_factor"], 4);
  EXPECT_EQ(j["config"]["devices"].size(), 16u);
  EXPECT_EQ(j["config"]["devices"][8]["hostname"], "node1");
  EXPECT_EQ(j["results"][0]["redop"], "sum");
  EXPECT_EQ(j["results"][0]["root"], "    -1");
  EXPECT_TRUE(j["results"][0]["out_of_place"]["nwrong"].is_null());  // not checked
  EXPECT_EQ(j["results"][7]["ranksim_choice"], printed[7].algorithm);
  const double algbw = j["results"][7]["out_of_place"]["alg_bw"], busbw = j["results"][7]["out_of_place"]["bus_bw"];
  EXPECT_NEAR(busbw / algbw, 2.0 * 15 / 16, 1e-12);
}

TEST_F(BenchJson, WritesTheRootAndTheCheckedElementsAsNcclTests) {
  const std::string json = file("g.json");
  const auto r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--op", "gather", "-b", "1K", "-e", "64K",
                      "-f", "2", "--check", "-J", json});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["args"][0], "gather_perf");
  EXPECT_EQ(j["results"][0]["root"], "     0");
  EXPECT_EQ(j["results"][0]["redop"], "none");
  EXPECT_EQ(j["results"][0]["out_of_place"]["nwrong"], 0.0);
  EXPECT_EQ(j["out_of_bounds"]["okay"], "true");
  // calibrate does not time gather: it says so.
  const auto c = run({"calibrate", "--check", "-t", topo("dgx-h100.yaml"), json});
  EXPECT_EQ(c.code, 2);
  EXPECT_THAT(c.err, HasSubstr("collective test 'gather_perf' is not one ranksim times"));
}

// Calibration recovers the constant a sweep was predicted with, from the file alone: the table
// is predicted on dgx-h100.yaml with a fabric efficiency of 0.70 (the shipped file says 0.794), and
// fitted from the shipped file.
TEST_F(BenchJson, CalibrateRecoversTheConstantTheSweepWasPredictedWith) {
  const std::string json = file("ring.json"), out = file("fitted.yaml");
  const auto b =
      run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--set", "collectives.fabric_efficiency=0.70", "--algo",
           "ring", "-b", "1M", "-e", "8G", "-f", "2", "-J", json});
  ASSERT_EQ(b.code, 0) << b.err;
  const auto c = run({"calibrate", "-t", topo("dgx-h100.yaml"), "--fit", "fabric_efficiency", "-o", out, json});
  ASSERT_EQ(c.code, 0) << c.err;
  const sim::Topology fitted = sim::Topology::load_file(out);
  EXPECT_NEAR(fitted.collectives().fabric_efficiency, 0.70, 0.70 * 0.01);
  EXPECT_NE(sim::Topology::load_file(topo("dgx-h100.yaml")).collectives().fabric_efficiency, 0.70);
}

// -d takes nccl-tests' type names for ranksim's types: the same sweep, and nccl-tests' name in
// the JSON.
TEST_F(BenchJson, TakesNcclTestsTypeNames) {
  const std::string json = file("bf16.json");
  const auto ours =
      run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--dtype", "bf16", "-b", "1M", "-e", "64M", "-f", "8"});
  const auto theirs = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "-d", "bfloat16", "-b", "1M", "-e",
                           "64M", "-f", "8", "-J", json});
  ASSERT_EQ(ours.code, 0) << ours.err;
  ASSERT_EQ(theirs.code, 0) << theirs.err;
  const std::vector<Printed> a = printed_rows(ours.out), b = printed_rows(theirs.out);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].us, b[i].us) << a[i].bytes;
  EXPECT_EQ(nlohmann::json::parse(slurp(json))["results"][0]["type"], "bfloat16");
  const auto bad = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "-d", "uint8"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("unknown --dtype 'uint8'"));
}

TEST_F(BenchJson, RefusesTheSizesTwiceAndAnOutputItCannotWrite) {
  auto r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1MiB:8MiB", "-b", "1M"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--sizes 1MiB:8MiB and nccl-tests' -b/-e/-f/-i both give the sizes"));
  // A folder that does not exist: refused before the sweep, nothing printed or written.
  const std::string missing = file("no/such/folder/x.json");
  r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "-J", missing});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("-J '" + missing + "': the folder"));
  EXPECT_THAT(r.out, Not(HasSubstr("size(B)")));
  EXPECT_FALSE(fs::exists(missing));
  // The topology itself (ring4.yaml names no kernel profile beside it: the copy loads).
  const std::string t = file("t.yaml");
  fs::copy_file(topo("ring4.yaml"), t);
  const std::string before = slurp(t);
  r = run({"bench", "collectives", "-t", t, "-J", t});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("is the topology, which the run reads"));
  EXPECT_EQ(slurp(t), before);
}

}  // namespace
}  // namespace ranksim::app

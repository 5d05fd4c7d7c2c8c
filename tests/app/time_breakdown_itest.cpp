// Where the time goes (docs/scenarios.md): each rank's exposed communication split by the group it
// waited on, and the per-stage rows by parallelism. The split adds up to the rank's whole
// communication time, lands where the layout puts the communication, and the pipeline's share
// holds at least what the training loop itself measured as blocked in pipeline receives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli_run.h"
#include "app/run_summary.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using ::testing::HasSubstr;
using testing::run;
using testing::scenario;
using testing::slurp;

struct Output {
  nlohmann::json j;
  std::string out;
};

Output run_json(const std::string& file, const std::vector<std::string>& extra = {}) {
  const fs::path dir = fs::temp_directory_path() / ("ranksim_time_breakdown_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path json = dir / "out.json";
  std::vector<std::string> args{"run", scenario(file), "--json", json.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const CliResult r = run(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return {nlohmann::json::parse(slurp(json)), r.out};
}

// Each rank's exposed microseconds by group name.
std::map<std::string, double> by_group(const nlohmann::json& rank) {
  std::map<std::string, double> m;
  for (const auto& e : rank["comm_by_group"]) m[e["group"].get<std::string>()] += e["exposed_us"].get<double>();
  return m;
}

// An async all-reduce on dp posted at 0, a kernel of C while it runs, then a wait: the all-reduce
// was in flight for its whole duration D, of which the rank waited D - C (exposed) and C
// overlapped the kernel. Synchronous, nothing overlaps.
TEST(TimeBreakdown, OverlappedCommunicationIsTheTimeInFlightLessTheWait) {
  const fs::path dir = fs::temp_directory_path() / ("ranksim_time_breakdown_overlap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const bool async : {true, false}) {
    const fs::path file = dir / "overlap.yaml", json = dir / "overlap.json";
    std::ofstream(file) << "name: overlap\n"
                           "topology: "
                        << RANKSIM_SOURCE_DIR
                        << "/topologies/dgx-h100.yaml\n"
                           "ranks: 2\n"
                           "workload:\n"
                           "  steps:\n"
                           "    do:\n"
                           "      - all_reduce: {bytes: 4 GiB, dtype: bf16, group: dp, async: "
                        << (async ? "true" : "false")
                        << "}\n"
                           "      - compute: {name: k, flops: 1e12, dtype: bf16}\n"
                           "      - wait: {}\n";
    const CliResult r = run({"run", file.string(), "--json", json.string()});
    ASSERT_EQ(r.code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(slurp(json));
    const double compute = j["ranks_detail"][0]["compute_us"].get<double>();
    const double total = j["virtual_time_us"].get<double>();
    const nlohmann::json& row = j["time_breakdown"][0];
    if (async) {
      ASSERT_GT(total, 2 * compute);  // the all-reduce outlasts the kernel
      EXPECT_NEAR(row["overlapped_comm"]["dp_us"].get<double>(), compute, 1e-3);
      EXPECT_NEAR(row["exposed_comm"]["dp_us"].get<double>(), total - compute, 1e-3);
      EXPECT_THAT(r.out, HasSubstr("overlapped communication (in flight while the rank worked"));
    } else {
      EXPECT_EQ(row["overlapped_comm"]["dp_us"].get<double>(), 0.0);
      EXPECT_NEAR(row["exposed_comm"]["dp_us"].get<double>(), total - compute, 1e-3);
      EXPECT_THAT(r.out, ::testing::Not(HasSubstr("overlapped communication")));
    }
    for (const char* d : {"tp_us", "cp_us", "pp_us", "other_us"})
      EXPECT_EQ(row["overlapped_comm"][d].get<double>(), 0.0) << d;
  }
  fs::remove_all(dir);
}

TEST(TimeBreakdown, AGroupCountsForItsOutermostDimension) {
  EXPECT_STREQ(kCommDimNames[comm_dimension("tp")], "tp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("cp")], "cp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("cp.a2a")], "cp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("cp.p2p")], "cp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("tp-cp")], "cp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("cp-dp")], "dp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("dp")], "dp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("dp-pp")], "pp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("pp")], "pp");
  EXPECT_STREQ(kCommDimNames[comm_dimension("")], "other");
  EXPECT_STREQ(kCommDimNames[comm_dimension("bridge.fan_in")], "other");
  EXPECT_STREQ(kCommDimNames[comm_dimension("tpx")], "other");  // a whole token, not a prefix
}

TEST(TimeBreakdown, TheGroupsAddUpToEachRanksCommunicationAndTheRowsToTheStep) {
  const Output r = run_json("gpt-train-tp2-sp-pp2-interleaved-dgx-h100.yaml");
  const double makespan = r.j["virtual_time_us"].get<double>();
  ASSERT_EQ(r.j["ranks_detail"].size(), 8u);
  for (const auto& rank : r.j["ranks_detail"]) {
    double sum = 0;
    for (const auto& [g, us] : by_group(rank)) sum += us;
    EXPECT_NEAR(sum, rank["comm_us"].get<double>(), 1e-5) << rank["rank"];
    // tp=2 with sequence parallelism, dp=2 with the distributed optimizer, pp=2: all three wait
    const auto m = by_group(rank);
    EXPECT_GT(m.count("tp") ? m.at("tp") : 0.0, 0.0);
    EXPECT_GT(m.count("cp-dp") ? m.at("cp-dp") : 0.0, 0.0);
    EXPECT_GT(m.count("pp") ? m.at("pp") : 0.0, 0.0);
  }
  const auto& rows = r.j["time_breakdown"];
  ASSERT_EQ(rows.size(), 2u);  // one per pipeline stage
  for (int st = 0; st < 2; ++st) {
    const auto& row = rows[static_cast<std::size_t>(st)];
    EXPECT_EQ(row["pipeline_stage"].get<int>(), st);
    EXPECT_EQ(row["first_rank"].get<int>(), 4 * st);
    EXPECT_EQ(row["last_rank"].get<int>(), 4 * st + 3);
    double comm = 0, total = row["compute_us"].get<double>() + row["idle_us"].get<double>();
    for (const auto& [k, v] : row["exposed_comm"].items()) total += v.get<double>();
    // the stage's mean of each rank's comm, recomputed from ranks_detail
    for (int rk = 4 * st; rk < 4 * st + 4; ++rk)
      comm += r.j["ranks_detail"][static_cast<std::size_t>(rk)]["comm_us"].get<double>() / 4;
    double cols = 0;
    for (const auto& [k, v] : row["exposed_comm"].items()) cols += v.get<double>();
    EXPECT_NEAR(cols, comm, 1e-4);
    EXPECT_NEAR(total, makespan, 1e-3);  // no rank idles here: compute + comm is the step
  }
  EXPECT_THAT(r.out, HasSubstr("where the time goes"));
  EXPECT_THAT(r.out, HasSubstr("0-3 (stage 0)"));
}

TEST(TimeBreakdown, ThePipelineColumnHoldsAtLeastTheLoopsOwnReceiveWaits) {
  const Output r = run_json("train-pp2-1f1b-dgx-h100.yaml");
  // models::train measures each rank's time blocked in pipeline receives itself
  const auto& waits = r.j["model"]["pipeline_wait_us"];
  ASSERT_EQ(waits.size(), r.j["ranks_detail"].size());
  for (std::size_t rk = 0; rk < waits.size(); ++rk) {
    const auto m = by_group(r.j["ranks_detail"][rk]);
    EXPECT_GE((m.count("pp") ? m.at("pp") : 0.0) + 1e-6, waits[rk].get<double>()) << rk;
  }
}

TEST(TimeBreakdown, EachLayoutsCommunicationLandsInItsOwnColumn) {
  // a TP-only MLP: every wait is TP's
  const Output tp = run_json("tp-mlp-dgx-h100.yaml");
  const auto& t = tp.j["time_breakdown"][0]["exposed_comm"];
  EXPECT_GT(t["tp_us"].get<double>(), 0);
  EXPECT_EQ(
      t["cp_us"].get<double>() + t["dp_us"].get<double>() + t["pp_us"].get<double>() + t["other_us"].get<double>(), 0);
  // data parallelism alone: DP's
  const Output dp = run_json("quickstart.yaml");
  const auto& d = dp.j["time_breakdown"][0]["exposed_comm"];
  EXPECT_GT(d["dp_us"].get<double>(), 0);
  EXPECT_EQ(d["tp_us"].get<double>() + d["cp_us"].get<double>() + d["pp_us"].get<double>(), 0);
  // hierarchical CP attention (a2a inside, p2p across): CP's, on the a2a subgroup
  const Output cp = run_json("cp-attention-a2a-p2p-dgx-h100.yaml");
  const auto& c = cp.j["time_breakdown"][0]["exposed_comm"];
  EXPECT_GT(c["cp_us"].get<double>(), 0);
  EXPECT_EQ(c["tp_us"].get<double>() + c["dp_us"].get<double>() + c["pp_us"].get<double>(), 0);
  EXPECT_TRUE(by_group(cp.j["ranks_detail"][0]).count("cp.a2a"));
}

TEST(TimeBreakdown, TheReportDrawsAStackedBarPerPipelineStage) {
  const fs::path dir = fs::temp_directory_path() / ("ranksim_time_breakdown_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path html = dir / "report.html";
  const CliResult r =
      run({"run", scenario("gpt-train-tp2-sp-pp2-interleaved-dgx-h100.yaml"), "--report", html.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string page = slurp(html);
  const std::size_t at = page.find("<svg id=\"breakdown\"");
  ASSERT_NE(at, std::string::npos);
  const std::string svg = page.substr(at, page.find("</svg>", at) - at);
  EXPECT_THAT(svg, HasSubstr(">stage 0 (0-3)</text>"));
  EXPECT_THAT(svg, HasSubstr(">stage 1 (4-7)</text>"));
  // compute, TP, DP and PP wait on both stages; CP (cp=1), other and idle are empty
  std::size_t parts = 0;
  for (std::size_t p = svg.find("class=\"part\""); p != std::string::npos; p = svg.find("class=\"part\"", p + 1))
    ++parts;
  EXPECT_EQ(parts, 8u);
  EXPECT_THAT(svg, HasSubstr("stage 1 (4-7): PP "));
}

}  // namespace
}  // namespace ranksim::app

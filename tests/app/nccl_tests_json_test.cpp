// `ranksim calibrate` reading nccl-tests' JSON output (-J FILE.json, nccl-tests 2.17 and later):
// the fields it takes, checked against the values the file was written with and against the text
// table of the same run; calibrate end to end on one; and each malformed file's message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "app/calibrate.h"
#include "app/nccl_tests_input.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

struct Row {
  long long bytes;
  double us;
};

// A file as nccl-tests writes it (src/util.cu: version 3): `processes` processes, each driving
// `gpus` GPUs from one thread, `per_host` processes a host; the rows' out-of-place times, and
// in-place times 1% longer.
json nccl_json(const std::string& binary, int processes, int gpus, int per_host, const std::vector<Row>& rows,
               const std::vector<std::string>& env = {"PATH=/usr/bin"}) {
  json devices = json::array();
  for (int p = 0; p < processes; ++p)
    devices.push_back({{"rank", p * gpus},
                       {"group", 0},
                       {"pid", 4000 + p},
                       {"hostname", "cnode3-00" + std::to_string(p / per_host)},
                       {"device", p * gpus % 8},
                       {"device_hex", "0000:1b:00"},
                       {"device_info", "NVIDIA H100 80GB HBM3"}});
  json results = json::array();
  for (const Row& r : rows)
    results.push_back({{"size", r.bytes},
                       {"count", r.bytes / 4},
                       {"type", "float"},
                       {"redop", "sum"},
                       {"root", "    -1"},
                       {"out_of_place", {{"time", r.us}, {"alg_bw", 1.0}, {"bus_bw", 1.5}, {"nwrong", 0.0}}},
                       {"in_place", {{"time", r.us * 1.01}, {"alg_bw", 1.0}, {"bus_bw", 1.5}, {"nwrong", 0.0}}},
                       {"actual_iterations", 20},
                       {"experiment_name", ""}});
  return {{"version", 3},
          {"start_time", "2026-11-20 10:00:00"},
          {"args", {"/opt/nccl-tests/build/" + binary, "-b", "1K", "-e", "16M", "-J", "out.json"}},
          {"env", env},
          {"nccl_version", 22304},
          {"config",
           {{"nthreads", 1},
            {"ngpus", gpus},
            {"minimum_bytes", 1024},
            {"maximum_bytes", 16777216},
            {"step_factor", 2},
            {"warmup_iters", 5},
            {"iterations", 20},
            {"aggregated_iterations", 1},
            {"validation", 1},
            {"graph", 0},
            {"blocking_collectives", "false"},
            {"per_iter_timing", "false"},
            {"per_iter_skip", 0},
            {"parallel_init", "false"},
            {"devices", devices}}},
          {"results", results},
          {"out_of_bounds", {{"count", 0}, {"okay", "true"}}},
          {"average_bus_bandwidth", {{"bandwidth", 1.5}, {"okay", "unchecked"}}},
          {"end_time", "2026-11-20 10:01:00"}};
}

const std::vector<Row> kRows = {{0, 0.3}, {1024, 30.5}, {1048576, 60.2}, {16777216, 350.25}};

// `s` with the first `from` replaced by `to`.
std::string edit_text(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

MeasuredTable parsed(const json& j) { return parse_nccl_tests(j.dump(1), "x.json"); }

std::string error_of(const std::string& text) {
  try {
    parse_nccl_tests(text, "x.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(NcclTestsJson, ReadsTheCollectiveRanksNodesAndRows) {
  const MeasuredTable t = parsed(nccl_json("all_gather_perf", 16, 1, 8, kRows));
  EXPECT_EQ(t.path, "x.json");
  EXPECT_EQ(t.test, "all_gather_perf");
  EXPECT_EQ(t.op, "all_gather");
  EXPECT_EQ(t.ranks, 16);
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.gpus_per_thread, 1);
  EXPECT_EQ(t.algorithm, "");  // the environment did not set NCCL_ALGO
  EXPECT_EQ(t.protocol, "");
  // The size-0 row is left out; the out-of-place times, in seconds.
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(t.rows[0].seconds, 30.5e-6);
  EXPECT_EQ(t.rows[2].bytes, 16777216);
  EXPECT_DOUBLE_EQ(t.rows[2].seconds, 350.25e-6);
  EXPECT_THAT(t.about, ElementsAre("hardware: 16 ranks on 2 host(s), NVIDIA H100 80GB HBM3",
                                   "software: nccl-tests JSON output, NCCL 2.23.4, run at 2026-11-20 10:00:00"));
}

TEST(NcclTestsJson, RanksAreTheProcessesTimesTheGpusEachDrives) {
  // One process driving 8 GPUs (-g 8): its one entry in "devices".
  const MeasuredTable one = parsed(nccl_json("all_reduce_perf", 1, 8, 1, kRows));
  EXPECT_EQ(one.ranks, 8);
  EXPECT_EQ(one.nodes, 1);
  EXPECT_EQ(one.gpus_per_thread, 8);
  // Four processes of 4 GPUs, two a host.
  const MeasuredTable four = parsed(nccl_json("all_reduce_perf", 4, 4, 2, kRows));
  EXPECT_EQ(four.ranks, 16);
  EXPECT_EQ(four.nodes, 2);
  EXPECT_EQ(four.gpus_per_thread, 4);
  // Threads (-t) multiply as GPUs do.
  json threads = nccl_json("all_reduce_perf", 2, 1, 2, kRows);
  threads["config"]["nthreads"] = 4;
  EXPECT_EQ(parsed(threads).ranks, 8);
}

TEST(NcclTestsJson, ReadsNcclAlgoAndNcclProtoFromTheEnvironment) {
  const MeasuredTable ring =
      parsed(nccl_json("all_reduce_perf", 8, 1, 8, kRows, {"HOME=/root", "NCCL_ALGO=Ring", "NCCL_PROTO=Simple"}));
  EXPECT_EQ(ring.algorithm, "ring");
  EXPECT_EQ(ring.protocol, "Simple");
  // NVLSTree in ranksim's name; a list kept as written.
  EXPECT_EQ(parsed(nccl_json("all_reduce_perf", 8, 1, 8, kRows, {"NCCL_ALGO=NVLSTree"})).algorithm, "nvls_tree");
  const MeasuredTable list = parsed(nccl_json("all_reduce_perf", 8, 1, 8, kRows, {"NCCL_ALGO=^NVLS,Tree"}));
  EXPECT_EQ(list.algorithm, "^NVLS,Tree");
  // A variable whose name only starts the same is not NCCL_ALGO.
  EXPECT_EQ(parsed(nccl_json("all_reduce_perf", 8, 1, 8, kRows, {"NCCL_ALGORITHM=Tree"})).algorithm, "");
}

TEST(NcclTestsJson, TakesTheInPlaceTimeWhereARunHasNoOutOfPlaceOne) {
  json j = nccl_json("all_reduce_perf", 8, 1, 8, kRows);
  j["results"][1]["out_of_place"] = nullptr;  // nccl-tests' trace replay times in place only
  EXPECT_DOUBLE_EQ(parsed(j).rows[0].seconds, 30.5 * 1.01 * 1e-6);
}

// Beside each out-of-place time, the in-place one (what calibrate compares them by); none where a
// run timed in place only.
TEST(NcclTestsJson, KeepsTheInPlaceTimeBesideTheOutOfPlaceOne) {
  json j = nccl_json("all_reduce_perf", 8, 1, 8, kRows);
  EXPECT_DOUBLE_EQ(parsed(j).rows[0].in_place_seconds, 30.5 * 1.01 * 1e-6);
  EXPECT_DOUBLE_EQ(parsed(j).rows[2].in_place_seconds, 350.25 * 1.01 * 1e-6);
  j["results"][1]["out_of_place"] = nullptr;
  j["results"][2].erase("in_place");
  EXPECT_EQ(parsed(j).rows[0].in_place_seconds, 0);
  EXPECT_EQ(parsed(j).rows[1].in_place_seconds, 0);
}

TEST(NcclTestsJson, ReadsTheHostTimeOfARunWithCpuTime) {
  json j = nccl_json("all_reduce_perf", 8, 1, 8, kRows);
  for (json& r : j["results"]) {
    r["out_of_place"]["cpu_time"] = r["out_of_place"]["time"];
    r["out_of_place"].erase("time");
  }
  ASSERT_EQ(parsed(j).rows.size(), 3u);
  EXPECT_DOUBLE_EQ(parsed(j).rows[1].seconds, 60.2e-6);
}

// The same run as the text table nccl-tests prints and as its JSON file: the same table.
TEST(NcclTestsJson, AgreesWithTheTextTableOfTheSameRun) {
  const std::string path =
      std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/raw/h100sxm_1node4gpu_all_reduce_xxrjun.txt";
  const MeasuredTable text = read_nccl_tests(path);
  ASSERT_GT(text.rows.size(), 5u);
  std::vector<Row> rows;
  for (const MeasuredRow& r : text.rows) rows.push_back({static_cast<long long>(r.bytes), r.seconds * 1e6});
  const MeasuredTable j = parsed(nccl_json("all_reduce_perf", text.ranks, 1, text.ranks, rows));
  EXPECT_EQ(j.op, text.op);
  EXPECT_EQ(j.ranks, text.ranks);
  EXPECT_EQ(j.nodes, text.nodes);
  EXPECT_EQ(j.gpus_per_thread, text.gpus_per_thread);
  ASSERT_EQ(j.rows.size(), text.rows.size());
  for (size_t i = 0; i < j.rows.size(); ++i) {
    EXPECT_EQ(j.rows[i].bytes, text.rows[i].bytes);
    EXPECT_DOUBLE_EQ(j.rows[i].seconds, text.rows[i].seconds);
  }
}

// The first layout nccl-tests wrote (version 1, as in tiberiuiancu/Simulon's Snellius runs): one
// line, '/' escaped as "\/", the whole environment (shell functions with quotes and newlines among
// it), an "errors" list; the rows of the 4-node all_reduce (docs/data/nccl-tests/
// h100sxm_4node16gpu_all_reduce_snellius.csv), the env and devices cut short.
TEST(NcclTestsJson, ReadsTheFirstLayoutAsWritten) {
  const std::string text =
      R"({"version":1,"start_time":"2026-07-06 12:34:33","args":["\/gpfs\/home6\/u\/nccl-tests\/build\/all_reduce_perf_mpi","-b","8M","-e","8192M","-f","2","-n","20","-w","5","-g","1","-J","\/gpfs\/home6\/u\/results\/nccl_allreduce_4n4g_snellius.json"],)"
      R"("env":["SHELL=\/bin\/bash","NCCL_SOCKET_IFNAME=eno2np0","BASH_FUNC_ml%%=() {  eval \"$($LMOD_DIR\/ml_cmd \"$@\")\"\n}","NCCL_DEBUG=INFO","SLURM_JOB_NUM_NODES=4"],"nccl_version":22606,)"
      R"("config":{"nthreads":1,"ngpus":1,"minimum_bytes":8388608,"maximum_bytes":8589934592,"step_factor":2,"warmup_iters":5,"iterations":20,"aggregated_iterations":1,"validation":1,"graph":0,"blocking_collectives":"false","parallel_init":"false","devices":[)"
      R"({"rank":0,"group":0,"pid":4024751,"hostname":"gcn120","device":0,"device_hex":"0000:06:00","device_info":"NVIDIA H100"},)"
      R"({"rank":4,"group":0,"pid":2583619,"hostname":"gcn129","device":0,"device_hex":"0000:06:00","device_info":"NVIDIA H100"},)"
      R"({"rank":8,"group":0,"pid":2134910,"hostname":"gcn130","device":0,"device_hex":"0000:06:00","device_info":"NVIDIA H100"},)"
      R"({"rank":12,"group":0,"pid":140209,"hostname":"gcn131","device":0,"device_hex":"0000:06:00","device_info":"NVIDIA H100"}]},)"
      R"("results":[{"size":8388608,"count":2097152,"type":"float","redop":"sum","root":"    -1","out_of_place":{"time":238.799581,"alg_bw":35.128236,"bus_bw":65.865442,"nwrong":0.000000},"in_place":{"time":236.787313,"alg_bw":35.426763,"bus_bw":66.425181,"nwrong":0.000000},"actual_iterations":20,"experiment_name":""},)"
      R"({"size":8589934592,"count":2147483648,"type":"float","redop":"sum","root":"    -1","out_of_place":{"time":166638.487994,"alg_bw":51.548323,"bus_bw":96.653105,"nwrong":0.000000},"in_place":{"time":166702.102875,"alg_bw":51.528652,"bus_bw":96.616222,"nwrong":0.000000},"actual_iterations":20,"experiment_name":""}],)"
      R"("out_of_bounds":{"count":0,"okay":"true"},"average_bus_bandwidth":{"bandwidth":89.140348,"okay":"unchecked"},"errors":[""],"end_time":"2026-07-06 12:34:57"})";
  const MeasuredTable t = parse_nccl_tests(text, "x.json");
  EXPECT_EQ(t.test, "all_reduce_perf_mpi");
  EXPECT_EQ(t.op, "all_reduce");
  EXPECT_EQ(t.ranks, 4);  // the devices as cut here: one a host
  EXPECT_EQ(t.nodes, 4);
  EXPECT_EQ(t.algorithm, "");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(t.rows[0].seconds, 238.799581e-6);
  EXPECT_DOUBLE_EQ(t.rows[1].seconds, 166638.487994e-6);
  EXPECT_THAT(t.about, ElementsAre("hardware: 4 ranks on 4 host(s), NVIDIA H100",
                                   "software: nccl-tests JSON output, NCCL 2.26.6, run at 2026-07-06 12:34:33"));
}

TEST(NcclTestsJson, LeadingWhitespaceIsStillJson) {
  EXPECT_EQ(parse_nccl_tests("\n  " + nccl_json("all_reduce_perf", 8, 1, 8, kRows).dump(), "x.json").op, "all_reduce");
}

struct Malformed {
  std::string name;
  std::string text;
  std::string says;
};

void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }

std::vector<Malformed> malformed() {
  const json good = nccl_json("all_reduce_perf", 8, 1, 8, kRows);
  const auto with = [&](const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    return j.dump(1);
  };
  const std::string text = good.dump(1);
  return {
      {"Truncated", text.substr(0, text.size() / 2), "'x.json' is not JSON: [json.exception.parse_error.101]"},
      {"ARunSummary", "{\"scenario\": \"s\", \"ranks\": 8}",
       "x.json: it is JSON, but not nccl-tests' JSON output (all_reduce_perf -J FILE.json): it has no \"results\""},
      {"NoResults", with([](json& j) { j.erase("results"); }), "it has no \"results\" list"},
      {"ResultsNotAList", with([](json& j) { j["results"] = 3; }),
       "results must be a list of the measured sizes, got 3"},
      {"NoRows", with([](json& j) { j["results"] = json::array(); }), "no measurements found"},
      {"RowNotAnObject", with([](json& j) { j["results"][1] = "1024"; }), "results[1] must be an object"},
      {"RowWithoutSize", with([](json& j) { j["results"][1].erase("size"); }), "results[1] has no \"size\""},
      {"NegativeSize", with([](json& j) { j["results"][1]["size"] = -1024; }),
       "results[1].size must be a number of bytes, got -1024"},
      {"FractionalSize", with([](json& j) { j["results"][1]["size"] = 1024.5; }),
       "results[1].size must be a number of bytes, got 1024.5"},
      {"SizeAboveAPebibyte", with([](json& j) { j["results"][1]["size"] = 1LL << 51; }),
       "results[1]: the size '2251799813685248' is more than 1 PiB per rank"},
      {"NaNTime", with([](json& j) { j["results"][1]["out_of_place"]["time"] = "nan"; }),
       "results[1].out_of_place.time must be a number of microseconds, got \"nan\""},
      {"NegativeTime", with([](json& j) { j["results"][1]["out_of_place"]["time"] = -30.5; }),
       "results[1]: the time of size 1024 is -30.5 us; a measured time must be positive"},
      {"TimeOfAnAeon", with([](json& j) { j["results"][1]["out_of_place"]["time"] = 1e300; }),
       "a measured time lies between 0.001 us and 1e9 us"},
      {"NoTime", with([](json& j) { j["results"][1]["out_of_place"].erase("time"); }),
       "results[1].out_of_place has no \"time\""},
      {"NeitherPlacement", with([](json& j) {
         j["results"][1]["out_of_place"] = nullptr;
         j["results"][1].erase("in_place");
       }),
       "results[1] has no out-of-place or in-place time"},
      {"TimeBeyondADouble", edit_text(text, "30.5", "1e400"),
       "\"results.1.out_of_place.time\" is 1e400, beyond what a double holds"},
      {"KeyTwice", edit_text(text, "\"nccl_version\": 22304", "\"nccl_version\": 22304, \"nccl_version\": 22304"),
       "the key \"nccl_version\" is given twice in one object"},
      {"ArgsNotAList", with([](json& j) { j["args"] = "all_reduce_perf"; }),
       "args must be the command line, a list of strings"},
      {"UntimedCollective", with([](json& j) { j["args"][0] = "sendrecv_perf"; }),
       "collective test 'sendrecv_perf' is not one ranksim times"},
      {"ConfigNotAnObject", with([](json& j) { j["config"] = json::array(); }), "config must be an object"},
      {"GpusZero", with([](json& j) { j["config"]["ngpus"] = 0; }),
       "config.ngpus must be a whole number from 1 to 16777216, got 0"},
      {"DevicesEmpty", with([](json& j) { j["config"]["devices"] = json::array(); }),
       "config.devices must be a list of the processes' devices"},
      {"HostnameNotAString", with([](json& j) { j["config"]["devices"][2]["hostname"] = 7; }),
       "config.devices[2].hostname must be a string, got 7"},
      {"MoreRanksThanAnyRun", with([](json& j) { j["config"]["ngpus"] = 16777216; }),
       "config.devices lists 8 processes of 16777216 GPUs each, more than 16777216 ranks"},
      {"ThreadsTimesGpusBeyondAnInt", with([](json& j) {
         j["config"]["nthreads"] = 16777216;
         j["config"]["ngpus"] = 16777216;
       }),
       "config.devices lists 8 processes of 281474976710656 GPUs each"},
      {"EnvNotAList", with([](json& j) { j["env"] = "NCCL_ALGO=Ring"; }), "env must be a list of NAME=VALUE strings"},
      {"UnknownAlgorithm", with([](json& j) { j["env"].push_back("NCCL_ALGO=Warp"); }), "env[1], NCCL_ALGO=Warp: "},
      {"UnknownProtocol", with([](json& j) { j["env"].push_back("NCCL_PROTO=LL129"); }), "env[1], NCCL_PROTO=LL129: "},
      {"VersionNotACode", with([](json& j) { j["nccl_version"] = "2.23.4"; }),
       "nccl_version must be NCCL's version code (22304 for 2.23.4), got \"2.23.4\""},
  };
}

class NcclTestsJsonMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(NcclTestsJsonMalformed, SaysWhatIsWrong) { EXPECT_THAT(error_of(GetParam().text), HasSubstr(GetParam().says)); }

INSTANTIATE_TEST_SUITE_P(Files, NcclTestsJsonMalformed, ::testing::ValuesIn(malformed()),
                         [](const ::testing::TestParamInfo<Malformed>& p) { return p.param.name; });

// ---- calibrate end to end

fs::path scratch_file(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() /
                     ("ranksim_json_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

TEST(NcclTestsJson, CalibrateChecksAJsonFileAsItsTextTwin) {
  const std::string topo = std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  const std::string raw =
      std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/raw/h100sxm_1node4gpu_all_reduce_xxrjun.txt";
  const MeasuredTable text = read_nccl_tests(raw);
  std::vector<Row> rows;
  for (const MeasuredRow& r : text.rows) rows.push_back({static_cast<long long>(r.bytes), r.seconds * 1e6});
  const fs::path file = scratch_file("twin.json", nccl_json("all_reduce_perf", 4, 1, 4, rows).dump(1));
  const auto check = [&](const std::string& path) {
    CalibrateOptions o;
    o.topology = topo;
    o.files = {path};
    o.check_only = true;
    std::ostringstream printed;
    EXPECT_EQ(calibrate(o, printed), 0);
    // The table as printed, less its first lines (which name the file) and how far its in-place
    // times lie from the out-of-place ones (the JSON's are 1% longer, the text's as measured).
    const std::string p = printed.str();
    std::istringstream in(p.substr(p.find("size(B)")));
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("#   out-of-place and in-place", 0) != 0) out += line + "\n";
    return out;
  };
  const std::string from_json = check(file.string());
  EXPECT_THAT(from_json, HasSubstr("geometric-mean error"));
  EXPECT_EQ(from_json, check(raw));
  fs::remove(file);
}

}  // namespace
}  // namespace ranksim::app

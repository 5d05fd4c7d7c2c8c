// Scenario files: every shipped scenario runs; errors name file:line:column and suggest keys;
// checks decide the exit code; runs are byte-for-byte deterministic.
#include "app/scenario.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/bench.h"
#include "app/cli.h"
#include "app/cli_run.h"
#include "app/workloads.h"
#include "cp/context_parallel.h"
#include "cp/partition.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "sim/topology.h"
#include "sim/trace.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const std::string kRoot = RANKSIM_SOURCE_DIR;

// A scratch scenario next to the shipped topologies' relative path (../topologies/...).
// ctest runs tests in parallel processes: each process gets its own folder.
fs::path scratch_root() { return fs::temp_directory_path() / ("ranksim_scenario_test_" + std::to_string(::getpid())); }

struct TempScenario {
  fs::path dir = scratch_root() / "scenarios";
  fs::path path;
  explicit TempScenario(const std::string& text, const std::string& name = "s.yaml") {
    fs::create_directories(dir);
    fs::create_directories(dir.parent_path() / "topologies" / "profiles");
    for (const char* t : {"dgx-h100.yaml", "ring4.yaml", "h100-cluster.yaml", "profiles/h100-sxm.yaml"})
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

// The shipped scenarios, one test each (so that ctest spreads them over its jobs), sorted.
std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kRoot + "/scenarios"))
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Scenario, ThereAreShippedScenarios) { EXPECT_GE(shipped_scenarios().size(), 3u); }

class ShippedScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedScenario, RunsAndPasses) {
  const std::string path = kRoot + "/scenarios/" + GetParam() + ".yaml";
  std::ostringstream out;
  const Scenario sc = load_scenario(path);
  EXPECT_EQ(run_scenario(sc, {}, out), 0) << path << "\n" << out.str();
  EXPECT_THAT(out.str(), HasSubstr("virtual time"));
}

INSTANTIATE_TEST_SUITE_P(Every, ShippedScenario, ::testing::ValuesIn(shipped_scenarios()),
                         [](const auto& p) { return app::testing::param_name(p.param); });

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
  const Scenario big = load_scenario(kRoot + "/scenarios/tp-dp-cluster.yaml", {"topology.nodes=4", "parallel.dp=4"});
  EXPECT_EQ(big.ranks, 32);
  // topology_set.<key>, as the file names its topology overrides, does the same and wins over the
  // file's topology_set.
  const Scenario also =
      load_scenario(kRoot + "/scenarios/tp-dp-cluster.yaml", {"topology_set.nodes=4", "parallel.dp=4"});
  EXPECT_EQ(also.ranks, 32);
  EXPECT_EQ(also.topology->num_nodes(), 4);
}

TEST(Scenario, DpAutoIsWhatTheLayoutLeavesOfTheWorld) {
  const std::string llama = kRoot + "/scenarios/llama3-8b-train-dgx-h100.yaml";  // tp 2 x dp 4
  // with ranks: the rest of them
  const Scenario a = load_scenario(llama, {"parallel.dp=auto", "parallel.tp=4", "ranks=8"});
  EXPECT_EQ(a.ranks, 8);
  EXPECT_EQ(a.dp, 2);
  // without: every device of the topology (8 on a DGX), not the model's tp x cp x pp
  const Scenario b = load_scenario(llama, {"parallel.dp=auto", "parallel.tp=8"});
  EXPECT_EQ(b.ranks, 8);
  EXPECT_EQ(b.dp, 1);
  // a layout that does not divide the world is the usual error
  EXPECT_THAT(
      [&] {
        (void)load_scenario(llama, {"parallel.dp=auto", "parallel.tp=3"});
      },
      ThrowsMessage<ConfigError>(HasSubstr("does not divide the 8 ranks")));
}

TEST(Scenario, OverridesIndexListsLikeTopologyOverrides) {
  TempScenario s(std::string(kGood) + "checks: [{max_time: 1 s}]\n");
  const Scenario sc =
      load_scenario(s.path.string(), {"workload.steps.do.1.all_reduce.bytes=4 MiB",
                                      "workload.steps.do.1.all_reduce.group=tp", "checks.0.max_time=2 s"});
  ASSERT_EQ(sc.steps.size(), 2u);
  EXPECT_EQ(sc.steps[1].bytes, 4.0 * 1024 * 1024);
  EXPECT_EQ(sc.steps[1].group, "tp");
  ASSERT_EQ(sc.checks.size(), 1u);
  EXPECT_EQ(sc.checks[0].text, "virtual time <= 2 s");
  EXPECT_THAT(load_error(kGood, {"workload.steps.do.2.wait=1"}),
              HasSubstr("override 'workload.steps.do.2.wait=1':1:19: index 2 is out of range: "
                        "'workload.steps.do' has 2 elements"));
  EXPECT_THAT(load_error(kGood, {"workload.steps.do.0.all_reduce.bytes=1 MiB"}),
              HasSubstr("'workload.steps.do.0' has no entry 'all_reduce' (entries: compute)"));
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
              HasSubstr("override 'parallel.tp=two':1:13: parallel.tp must be an integer from 1 to 16777216 (2^24)"));
  EXPECT_THAT(load_error(kGood, {"topology=" + std::string(RANKSIM_SOURCE_DIR) + "/topologies"}),
              HasSubstr("/topologies' is a folder; name a topology YAML file"));
  // What used to load and then fail on every rank at run time, with no position.
  const std::string head = "name: t\ntopology: ../topologies/ring4.yaml\n";
  EXPECT_THAT(load_error(head + "workload: {steps: {do: [all_to_all: {bytes: 1 MiB, algorithm: tree}]}}\n"),
              HasSubstr(":3:63: collective all_to_all has no 'tree' algorithm; use one of: direct, ring"));
  EXPECT_THAT(load_error(head + "algorithm: tree\nworkload: {steps: {do: [all_to_all: {bytes: 1 MiB}]}}\n"),
              HasSubstr(":3:12: collective all_to_all has no 'tree' algorithm"));
  // NCCL_ALGO / NCCL_PROTO lists: malformed ones at their position.
  EXPECT_THAT(load_error(head + "algorithm: ring;tree\nworkload: {steps: {do: [wait: {}]}}\n"),
              HasSubstr(":3:12: algorithm: NCCL_ALGO=\"ring;tree\": entry 'tree' names no function"));
  EXPECT_THAT(load_error(head + "protocol: ^LL256\nworkload: {steps: {do: [wait: {}]}}\n"),
              HasSubstr(":3:11: protocol: NCCL_PROTO=\"^LL256\": unknown name 'LL256'"));
  EXPECT_THAT(load_error(head + "ranks: 1\nworkload: {steps: {do: [sendrecv: {bytes: 1 MiB}]}}\n"),
              HasSubstr("a sendrecv step on group 'world' needs at least 2 ranks in it (it has 1)"));
  EXPECT_THAT(load_error(head + "workload: {steps: {do: [compute: {flops: 1e300}]}}\n"),
              HasSubstr(":3:25: a kernel of 1e+300 FLOP and 0 bytes on node0.dev0 would take 2.5e+286 s, more than "
                        "the simulated clock holds"));
  EXPECT_THAT(load_error(kGood, {"parallel.tp=2000000000"}),
              HasSubstr("parallel.tp must be an integer from 1 to 16777216 (2^24), got '2000000000'"));
  EXPECT_THAT(load_error(kGood, {"topology.nodez=2"}), HasSubstr("nodez"));
}

// A scenario's algorithm and protocol take NCCL's lists: the run times its collectives as the
// same run with the one name they leave would (here, on one DGX H100, "^nvls,tree" leaves the ring
// to all_reduce; "^LL,LL128" Simple).
TEST(Scenario, AlgorithmAndProtocolTakeNcclsLists) {
  const std::string body =
      "name: t\ntopology: ../topologies/dgx-h100.yaml\n"
      "workload: {steps: {do: [all_reduce: {bytes: 1 GiB}, all_reduce: {bytes: 64 KiB}]}}\n";
  auto makespan = [&](const std::string& keys) {
    TempScenario s(body + keys);
    const Scenario sc = load_scenario(s.path.string());
    RunFlags flags;
    flags.quiet = true;
    return run_steps_workload(sc, flags, false).makespan;
  };
  EXPECT_EQ(makespan("algorithm: ^nvls,tree\nprotocol: ^LL,LL128\n"), makespan("algorithm: ring\nprotocol: Simple\n"));
  EXPECT_NE(makespan("algorithm: ^nvls,tree\n"), makespan(""));
}

// With --backend nccl the real NCCL takes the algorithm and protocol from NCCL_ALGO / NCCL_PROTO
// at init: a scenario's are set there, in NCCL's spellings; ranksim's own schedules, and a value
// the environment already sets otherwise, are refused.
TEST(Scenario, RealNcclGetsTheAlgorithmAndProtocolInItsEnvironment) {
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  set_nccl_environment("auto", "auto");
  EXPECT_EQ(std::getenv("NCCL_ALGO"), nullptr);
  EXPECT_EQ(std::getenv("NCCL_PROTO"), nullptr);
  set_nccl_environment("ring,tree;all_reduce:nvls_tree", "^LL128");
  EXPECT_STREQ(std::getenv("NCCL_ALGO"), "ring,tree;allreduce:nvlstree");
  EXPECT_STREQ(std::getenv("NCCL_PROTO"), "^LL128");
  set_nccl_environment("ring,tree;all_reduce:nvls_tree", "^LL128");  // the same again: fine
  try {
    set_nccl_environment("tree", "auto");
    ADD_FAILURE() << "a different NCCL_ALGO accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NCCL_ALGO is set in the environment to 'ring,tree;allreduce:nvlstree', but "
                                    "algorithm is 'tree' (NCCL_ALGO=tree for NCCL): unset one of them"));
  }
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  set_nccl_environment("nvls_tree", "Simple");
  EXPECT_STREQ(std::getenv("NCCL_ALGO"), "nvlstree");
  EXPECT_STREQ(std::getenv("NCCL_PROTO"), "Simple");
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  try {
    set_nccl_environment("hierarchical", "auto");
    ADD_FAILURE() << "hierarchical accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("algorithm 'hierarchical' is ranksim's own schedule, which NCCL has not"));
  }
  EXPECT_EQ(std::getenv("NCCL_ALGO"), nullptr);
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

// ---- cp_attention ---------------------------------------------------------------------------

struct StepRun {
  int code = -1;
  std::string out, json;
};

// Runs a scenario text (from the scratch folder, so ../topologies resolves), with its JSON.
StepRun run_text(const std::string& text, const std::vector<std::string>& sets = {}) {
  TempScenario s(text);
  StepRun r;
  RunFlags f;
  f.quiet = true;
  f.json = (s.dir / "out.json").string();
  std::ostringstream out;
  r.code = run_scenario(load_scenario(s.path.string(), sets), f, out);
  r.out = out.str();
  std::stringstream j;
  j << std::ifstream(f.json).rdbuf();
  r.json = j.str();
  return r;
}

TEST(Scenario, SummaryEscapesNamesAsJsonRequires) {
  const StepRun r = run_text(std::string("name: 'say \"hi\" \\ there'\n") + (kGood + 8));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.json, HasSubstr("\"scenario\": \"say \\\"hi\\\" \\\\ there\","));
}

std::string json_virtual_time(const std::string& json) {
  const std::string key = "\"virtual_time_us\": ";
  const size_t at = json.find(key);
  if (at == std::string::npos) return "(none)";
  return json.substr(at + key.size(), json.find(',', at) - at - key.size());
}

// The same attention run directly through cp/context_parallel.h on ring4, every rank in one CP
// group: the virtual time a cp_attention step must reproduce.
struct Direct {
  cp::CommType comm = cp::CommType::p2p;
  bool thd = false;
  int64_t batch = 1;
  std::vector<int64_t> lengths;  // bshd: {S}
  int64_t hq = 4, hkv = 4, d = 8;
  bool causal = true;
  int64_t window_left = -1, window_right = -1;
  int a2a = 2;
  bool backward = true;
  bool data = false;
};

std::string direct_virtual_time(const Direct& c, int cp) {
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  runtime::SpawnOptions so;
  so.topology = &topo;
  so.engine.trace = false;
  cp::SequenceLayout layout = cp::SequenceLayout::bshd(c.batch, c.lengths[0]);
  runtime::Shape lead{c.batch, c.lengths[0] / cp};
  if (c.thd) {
    std::vector<int64_t> cu{0};
    for (int64_t l : c.lengths) cu.push_back(cu.back() + l);
    const std::vector<int64_t> padded = cp::thd_padded_cu_seqlens(cu, cp);
    lead = {padded.back() / cp};
    layout = cp::SequenceLayout::thd(cu, padded);
  }
  cp::CpOptions opts;
  opts.comm_type = c.comm;
  opts.attention.causal = c.causal;
  opts.attention.window_left = c.window_left;
  opts.attention.window_right = c.window_right;
  const runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        auto input = [&](int64_t heads, uint64_t seed) {
          runtime::Shape shape = lead;
          shape.push_back(heads);
          shape.push_back(c.d);
          return c.data ? runtime::Tensor::uniform(shape, seed * 7 + static_cast<uint64_t>(rank), -1, 1)
                        : runtime::Tensor::shape_only(shape);
        };
        std::vector<int> all;
        for (int i = 0; i < cp; ++i) all.push_back(i);
        const runtime::ProcessGroup group = runtime::new_group(all);
        const cp::CpGroups groups = c.comm == cp::CommType::a2a_p2p
                                        ? cp::hierarchical_cp_groups(group, c.a2a, cp / c.a2a)
                                        : cp::CpGroups(group);
        const cp::CpForwardResult f =
            cp::attention_with_cp_forward(input(c.hq, 1), input(c.hkv, 2), input(c.hkv, 3), layout, groups, opts);
        if (c.backward) cp::attention_with_cp_backward(input(c.hq, 4), f.ctx);
      },
      cp, so);
  return sim::format_us(rep.makespan);
}

const char* kCpHead =
    "name: cp\n"
    "topology: ../topologies/ring4.yaml\n"
    "parallel: {cp: 4}\n"
    "data: shape_only\n"
    "workload:\n"
    "  steps:\n"
    "    do:\n";

TEST(Scenario, CpAttentionStepTimesExactlyLikeADirectRunForEveryCommType) {
  struct Case {
    const char* comm;
    cp::CommType type;
    const char* collective;  // a line the summary must show, or "" for the p2p ring
  };
  for (const Case& c :
       {Case{"p2p", cp::CommType::p2p, ""}, Case{"all_gather", cp::CommType::all_gather, "reduce_scatter"},
        Case{"a2a", cp::CommType::a2a, "all_to_all"}, Case{"a2a+p2p", cp::CommType::a2a_p2p, "all_to_all"}}) {
    SCOPED_TRACE(c.comm);
    const StepRun r = run_text(std::string(kCpHead) + "      - cp_attention: {comm: " + c.comm +
                               ", seq_len: 64, heads: 4, head_dim: 8, dtype: f32}\n");
    ASSERT_EQ(r.code, 0) << r.out;
    Direct d;
    d.comm = c.type;
    d.lengths = {64};
    EXPECT_EQ(json_virtual_time(r.json), direct_virtual_time(d, 4)) << r.out;
    EXPECT_NE(json_virtual_time(r.json), "0.000000");
    if (*c.collective)
      EXPECT_THAT(r.json, HasSubstr(std::string("\"op\": \"") + c.collective + "\""));
    else
      EXPECT_THAT(r.json, HasSubstr("\"collectives\": [\n  ]"));  // the ring is point-to-point only
  }
}

TEST(Scenario, CpAttentionStepTakesThdWindowsGqaAndForwardOnly) {
  {  // THD, causal with a sliding window, GQA, all_gather
    const StepRun r = run_text(std::string(kCpHead) +
                               "      - cp_attention: {comm: all_gather, format: thd, seq_len: [40, 7, 25], heads: 4, "
                               "kv_heads: 2, head_dim: 8, mask: causal, window: [5, 0], dtype: f32}\n");
    ASSERT_EQ(r.code, 0) << r.out;
    Direct d;
    d.comm = cp::CommType::all_gather;
    d.thd = true;
    d.lengths = {40, 7, 25};
    d.hkv = 2;
    d.window_left = 5;
    d.window_right = 0;
    EXPECT_EQ(json_virtual_time(r.json), direct_virtual_time(d, 4));
    d.window_left = -1;  // the window changes the time: the step did pass it on
    EXPECT_NE(json_virtual_time(r.json), direct_virtual_time(d, 4));
  }
  {  // THD padding (no causal mask) on the ring, forward only
    const StepRun r = run_text(std::string(kCpHead) +
                               "      - cp_attention: {format: thd, seq_len: [9, 30], heads: 4, head_dim: 8, "
                               "mask: padding, backward: false, dtype: f32}\n");
    ASSERT_EQ(r.code, 0) << r.out;
    Direct d;
    d.thd = true;
    d.lengths = {9, 30};
    d.causal = false;
    d.backward = false;
    EXPECT_EQ(json_virtual_time(r.json), direct_virtual_time(d, 4));
  }
  {  // BSHD without a mask, batch 2, a2a+p2p split [2, 2] by default
    const StepRun r = run_text(std::string(kCpHead) +
                               "      - cp_attention: {comm: a2a+p2p, batch: 2, seq_len: 32, heads: 4, head_dim: 8, "
                               "mask: no_mask, dtype: f32}\n");
    ASSERT_EQ(r.code, 0) << r.out;
    Direct d;
    d.comm = cp::CommType::a2a_p2p;
    d.batch = 2;
    d.lengths = {32};
    d.causal = false;
    EXPECT_EQ(json_virtual_time(r.json), direct_virtual_time(d, 4));
  }
}

TEST(Scenario, CpAttentionWithRealDataTimesLikeShapeOnly) {
  const std::string step = "      - cp_attention: {comm: p2p, seq_len: 32, heads: 2, head_dim: 8, dtype: f32}\n";
  const StepRun shape = run_text(std::string(kCpHead) + step);
  const StepRun real = run_text(std::string(kCpHead) + step, {"data=real"});
  ASSERT_EQ(real.code, 0) << real.out;
  EXPECT_THAT(real.out, HasSubstr("real data"));
  EXPECT_EQ(json_virtual_time(real.json), json_virtual_time(shape.json));
  Direct d;
  d.lengths = {32};
  d.hq = d.hkv = 2;
  d.data = true;
  EXPECT_EQ(json_virtual_time(real.json), direct_virtual_time(d, 4));
}

TEST(Scenario, CpAttentionCommTypeAndHierarchicalSizesDefaultFromTheLayout) {
  TempScenario s(
      "name: t\ntopology: ../topologies/dgx-h100.yaml\n"
      "parallel: {cp: 8, cp_comm: a2a+p2p, hierarchical_cp: [4, 2]}\n"
      "workload:\n  steps:\n    do:\n"
      "      - cp_attention: {seq_len: 64, heads: 8, head_dim: 8}\n"
      "      - cp_attention: {seq_len: 64, heads: 8, head_dim: 8, hierarchical: [2, 4]}\n"
      "      - cp_attention: {comm: a2a, seq_len: 64, heads: 8, head_dim: 8}\n");
  const Scenario sc = load_scenario(s.path.string());
  ASSERT_EQ(sc.steps.size(), 3u);
  EXPECT_EQ(sc.steps[0].cp_comm, "a2a+p2p");
  EXPECT_EQ(sc.steps[0].a2a_size, 4);
  EXPECT_EQ(sc.steps[0].p2p_size, 2);
  EXPECT_EQ(sc.steps[1].a2a_size, 2);
  EXPECT_EQ(sc.steps[1].p2p_size, 4);
  EXPECT_EQ(sc.steps[2].cp_comm, "a2a");
  EXPECT_EQ(sc.steps[0].kv_heads, 8);  // GQA off by default
  EXPECT_EQ(sc.steps[0].mask, "causal");
  EXPECT_EQ(sc.steps[0].dtype, "bf16");
  EXPECT_TRUE(sc.steps[0].backward);
  // The layout's comm type can be overridden like any key; a step's hierarchical sizes then no
  // longer apply.
  EXPECT_THAT(load_error("name: t\ntopology: ../topologies/dgx-h100.yaml\nparallel: {cp: 8, cp_comm: a2a+p2p}\n"
                         "workload: {steps: {do: [cp_attention: {seq_len: 64, heads: 8, head_dim: 8, "
                         "hierarchical: [2, 4]}]}}\n",
                         {"parallel.cp_comm=all_gather"}),
              HasSubstr("cp_attention.hierarchical applies to comm a2a+p2p only; this step's comm is all_gather"));
  // Without parallel.cp_comm the default is p2p; without hierarchical_cp a2a+p2p splits [2, cp/2].
  TempScenario u(
      "name: t\ntopology: ../topologies/dgx-h100.yaml\nparallel: {cp: 8}\n"
      "workload: {steps: {do: [cp_attention: {seq_len: 64, heads: 8, head_dim: 8}]}}\n");
  EXPECT_EQ(load_scenario(u.path.string()).steps[0].cp_comm, "p2p");
  TempScenario t(
      "name: t\ntopology: ../topologies/dgx-h100.yaml\nparallel: {cp: 8}\n"
      "workload: {steps: {do: [cp_attention: {comm: a2a+p2p, seq_len: 64, heads: 8, head_dim: 8}]}}\n");
  const Scenario split = load_scenario(t.path.string());
  EXPECT_EQ(split.steps[0].a2a_size, 2);
  EXPECT_EQ(split.steps[0].p2p_size, 4);
  EXPECT_EQ(load_scenario(t.path.string()).steps[0].cp_comm, "a2a+p2p");
}

TEST(Scenario, CpAttentionSplitsHeadsOverTp) {
  // tp=2 x cp=2 on ring4: each TP rank runs heads/2; a2a moves [S/cp, heads/tp, d] per rank.
  const StepRun r = run_text(
      "name: t\ntopology: ../topologies/ring4.yaml\nparallel: {tp: 2, cp: 2}\n"
      "workload: {steps: {do: [cp_attention: {comm: a2a, seq_len: 32, heads: 8, "
      "head_dim: 4, dtype: f32, backward: false}]}}\n");
  ASSERT_EQ(r.code, 0) << r.out;
  // Two all-to-alls in the forward (q, k, v packed or not: every one moves 16 x 4 x 4 x 4 bytes).
  EXPECT_THAT(r.json, HasSubstr("\"op\": \"all_to_all\", \"group_size\": 2, \"dtype\": \"f32\", \"bytes\": 1024"));
}

std::string cp_error(const std::string& parallel, const std::string& step) {
  return load_error("name: t\ntopology: ../topologies/dgx-h100.yaml\nparallel: " + parallel +
                    "\nworkload:\n  steps:\n    do:\n      - cp_attention: " + step + "\n");
}

TEST(Scenario, CpAttentionErrorsNameTheKeyAndTheNumbers) {
  // Heads over cp (a2a) and over the a2a size (a2a+p2p), and over tp.
  EXPECT_THAT(cp_error("{cp: 8}", "{comm: a2a, seq_len: 64, heads: 12, head_dim: 8}"),
              HasSubstr("s.yaml:7:55: cp_attention: comm a2a splits the heads over cp=8 ranks: heads 12 and "
                        "kv_heads 12 must both be multiples of 8"));
  EXPECT_THAT(cp_error("{cp: 8, cp_comm: a2a}", "{seq_len: 64, heads: 16, kv_heads: 4, head_dim: 8}"),
              HasSubstr("s.yaml:7:44: cp_attention: comm a2a splits the heads over cp=8 ranks: heads 16 and "
                        "kv_heads 4 must both be multiples of 8"));
  EXPECT_THAT(cp_error("{cp: 8}", "{comm: a2a+p2p, hierarchical: [4, 2], seq_len: 64, heads: 6, head_dim: 8}"),
              HasSubstr("s.yaml:7:81: cp_attention: comm a2a+p2p splits the heads over the a2a size 4: heads 6 "
                        "and kv_heads 6 must both be multiples of 4"));
  EXPECT_THAT(cp_error("{tp: 2, cp: 4}", "{comm: a2a, seq_len: 64, heads: 4, head_dim: 8}"),
              HasSubstr("heads 2 and kv_heads 2 per TP rank (heads / tp=2) must both be multiples of 4"));
  EXPECT_EQ(cp_error("{tp: 2, cp: 4}", "{comm: a2a, seq_len: 64, heads: 8, head_dim: 8}"), "no error");
  EXPECT_THAT(cp_error("{tp: 4, cp: 2}", "{seq_len: 64, heads: 6, head_dim: 8}"),
              HasSubstr("s.yaml:7:44: cp_attention: heads 6 and kv_heads 6 must both be divisible by tp=4"));
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 64, heads: 6, kv_heads: 4, head_dim: 8}"),
              HasSubstr("s.yaml:7:57: cp_attention: heads 6 is not a multiple of kv_heads 4"));
  // The sequence length and the hierarchical sizes.
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 1000, heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:7:33: cp_attention: seq_len 1000 is not a multiple of 2 x cp = 16"));
  EXPECT_THAT(cp_error("{cp: 8}", "{comm: a2a+p2p, hierarchical: [2, 2], seq_len: 64, heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:7:53: cp_attention.hierarchical [2, 2] multiplies to 4, not cp=8"));
  EXPECT_THAT(cp_error("{cp: 8, hierarchical_cp: [2, 2]}", "{comm: a2a+p2p, seq_len: 64, heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:3:36: parallel.hierarchical_cp [2, 2] multiplies to 4, not cp=8"));
  EXPECT_THAT(cp_error("{cp: 8}", "{comm: p2p, hierarchical: [2, 4], seq_len: 64, heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:7:49: cp_attention.hierarchical applies to comm a2a+p2p only; this step's comm "
                        "is p2p"));
  EXPECT_THAT(load_error("name: t\ntopology: ../topologies/ring4.yaml\nranks: 3\nparallel: {cp: 3}\n"
                         "workload: {steps: {do: [cp_attention: {comm: a2a+p2p, seq_len: 60, heads: 6, "
                         "head_dim: 8}]}}\n"),
              HasSubstr("s.yaml:5:46: cp_attention: comm a2a+p2p splits cp as [2, cp/2] by default, which needs an "
                        "even cp, got cp=3"));
  // Masks the format cannot take.
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 64, heads: 8, head_dim: 8, mask: padding}"),
              HasSubstr("s.yaml:7:66: cp_attention: format bshd has no padding tokens, so it takes mask causal or "
                        "no_mask; padding needs format: thd"));
  EXPECT_THAT(cp_error("{cp: 8}", "{format: thd, seq_len: [64, 30], heads: 8, head_dim: 8, mask: no_mask}"),
              HasSubstr("s.yaml:7:85: cp_attention: format thd always masks its padding, so it takes mask padding "
                        "or causal (causal with padding), not no_mask"));
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 64, heads: 8, head_dim: 8, window: [16, 4]}"),
              HasSubstr("s.yaml:7:73: cp_attention: a causal mask hides every key after the query, so the "
                        "window's right side must be 0 or -1, got 4"));
  // Keys: shapes of values, the format's own keys, typos, required keys.
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 64, heads: 8, head_dim: 8, window: [-2, 0]}"),
              HasSubstr("s.yaml:7:69: cp_attention.window left must be an integer of at least -1, got '-2'"));
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: [64, 32], heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:7:33: cp_attention.seq_len is one length S for format bshd"));
  EXPECT_THAT(cp_error("{cp: 8}", "{format: thd, batch: 2, seq_len: [64], heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:7:44: cp_attention.batch is for format bshd"));
  EXPECT_THAT(cp_error("{cp: 8}", "{comm: ring, seq_len: 64, heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:7:30: cp_attention.comm is 'ring'; expected one of p2p, all_gather, a2a, a2a+p2p"));
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 64, head: 8, head_dim: 8}"),
              HasSubstr("unknown key 'head' in a cp_attention step; did you mean 'heads'?"));
  EXPECT_THAT(cp_error("{cp: 8}", "{seq_len: 64, head_dim: 8}"), HasSubstr("a cp_attention step needs heads"));
  EXPECT_THAT(cp_error("{cp: 8, cp_comm: ulysses}", "{seq_len: 64, heads: 8, head_dim: 8}"),
              HasSubstr("s.yaml:3:28: parallel.cp_comm is 'ulysses'"));
}

TEST(Scenario, ShippedCpAttentionScenariosRunEachCommType) {
  struct Shipped {
    const char* file;
    const char* shows;  // a collective of that comm type, or the ring's absence of any
  };
  for (const Shipped& s :
       {Shipped{"cp-attention-p2p-dgx-h100.yaml", "\"collectives\": [\n  ]"},
        Shipped{"cp-attention-all-gather-dgx-h100.yaml", "\"op\": \"reduce_scatter\""},
        Shipped{"cp-attention-a2a-dgx-h100.yaml", "\"op\": \"all_to_all\", \"group_size\": 8"},
        Shipped{"cp-attention-a2a-p2p-dgx-h100.yaml", "\"op\": \"all_to_all\", \"group_size\": 2"}}) {
    SCOPED_TRACE(s.file);
    const fs::path dir = scratch_root() / "cp-shipped";
    fs::create_directories(dir);
    RunFlags f;
    f.quiet = true;
    f.json = (dir / "out.json").string();
    std::ostringstream out;
    const Scenario sc = load_scenario(kRoot + "/scenarios/" + s.file);
    EXPECT_EQ(sc.cp, 8);
    ASSERT_EQ(run_scenario(sc, f, out), 0) << out.str();
    std::stringstream j;
    j << std::ifstream(f.json).rdbuf();
    EXPECT_THAT(j.str(), HasSubstr(s.shows));
    EXPECT_THAT(j.str(), HasSubstr("\"passed\": true"));
    fs::remove_all(dir);
  }
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

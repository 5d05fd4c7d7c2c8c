// Fault injection in scenario files (docs/scenarios.md, "Faults"), end to end through `ranksim run`:
// each fault kind's exit code and report, byte-identical reruns, a straggler's and a degraded
// network's effect against closed forms built from the same run without faults, per-rank steps
// (`ranks:`), the loader's errors, `ranksim validate`, and the process backends' refusal.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/cli_run.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::run;
using testing::slurp;
using testing::topo;

// ctest runs tests in parallel processes: each process gets its own folder.
fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_faults_itest_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// Writes a scenario into the scratch folder; returns its path.
std::string write_scenario(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p) << text;
  return p.string();
}

// One `ranksim run FILE --json J`: the CLI's result and, when the run wrote it, the JSON summary
// (its bytes and parsed).
struct Outcome {
  CliResult r;
  std::string json_text;
  nlohmann::json j;
};

Outcome run_json(const std::string& file, const std::string& tag = "out") {
  const fs::path json = scratch() / (tag + ".json");
  fs::remove(json);
  Outcome out{run({"run", file, "--json", json.string()}), "", nullptr};
  if (fs::exists(json)) {
    out.json_text = slurp(json);
    out.j = nlohmann::json::parse(out.json_text);
  }
  return out;
}

double num(const nlohmann::json& j) { return j.get<double>(); }

// The collective line of `op` on `group` in the JSON summary.
const nlohmann::json& collective(const nlohmann::json& j, const std::string& op, const std::string& group) {
  for (const auto& c : j["collectives"])
    if (c["op"] == op && c.value("group", "") == group) return c;
  ADD_FAILURE() << "no " << op << " on " << group << " in " << j["collectives"].dump();
  static const nlohmann::json none = {{"time_us", 0.0}, {"calls", 0}};
  return none;
}

// ---- The scenarios.

// 4 ranks of one DGX H100, two repetitions of a 1e12-FLOP bf16 kernel (1.014 ms) and a 64 MiB
// all-reduce on the world (324.99 us): repetition 1's kernel runs from 1.338 ms to 2.352 ms.
std::string two_repetitions(const std::string& faults) {
  return "name: faults-dgx\n"
         "topology: " +
         topo("dgx-h100.yaml") +
         "\n"
         "ranks: 4\n"
         "workload:\n"
         "  steps:\n"
         "    repeat: 2\n"
         "    do:\n"
         "      - compute: {flops: 1e12, dtype: bf16}\n"
         "      - all_reduce: {bytes: 64 MiB, dtype: bf16}\n" +
         (faults.empty() ? "" : "faults:\n  - " + faults + "\n");
}

// tp=2 x dp=2 on one DGX H100: ranks 0 and 1 all-reduce 2 GiB on their TP group (till ~6 ms),
// while ranks 2 and 3 wait for them in the barrier from time 0.
std::string rank_3_waits_in_a_barrier(const std::string& faults) {
  return "name: faults-blocked\n"
         "topology: " +
         topo("dgx-h100.yaml") +
         "\n"
         "ranks: 4\n"
         "parallel: {tp: 2, dp: 2}\n"
         "workload:\n"
         "  steps:\n"
         "    do:\n"
         "      - all_reduce: {bytes: 2 GiB, dtype: bf16, group: tp, ranks: [0, 1]}\n"
         "      - barrier:\n"
         "faults:\n  - " +
         faults + "\n";
}

// Two DGX H100 nodes, tp=8 inside a node, dp=2 across: DP group r is [r, r + 8].
std::string two_nodes(const std::string& faults, const std::string& steps =
                                                     "      - all_reduce: {bytes: 32 MiB, dtype: bf16, group: tp}\n"
                                                     "      - all_reduce: {bytes: 1 GiB, dtype: bf16, group: dp}\n") {
  return "name: faults-cluster\n"
         "topology: " +
         topo("h100-cluster.yaml") +
         "\n"
         "topology_set: {nodes: 2}\n"
         "parallel: {tp: 8, dp: 2}\n"
         "workload:\n"
         "  steps:\n"
         "    do:\n" +
         steps + (faults.empty() ? "" : "faults:\n  - " + faults + "\n");
}

// ---- 1, 2: every fault kind's exit code and report; each runs byte for byte the same twice.

struct FaultCase {
  const char* name;
  std::string text;
  int code;
  std::vector<std::string> err;  // lines (or parts) standard error must hold
  std::vector<std::string> out;  // the same of standard output
};

// The blocked-rank lines of ranks 0-2 waiting in repetition `call`'s all-reduce for rank 3.
std::string waiting_for_3(const std::string& clock, int call) {
  std::string s;
  for (int r = 0; r < 3; ++r)
    s += "  rank " + std::to_string(r) + " (clock " + clock + "): all_reduce(bf16[33554432], op=SUM) on world, call #" +
         std::to_string(call) + ": waiting for rank 3 to join\n";
  return s;
}

// The error lines of `ranks`, each failing in its DP group [r % 8, r % 8 + 8] by `label`.
std::string network_failed(const std::vector<int>& ranks, const std::string& label) {
  std::string s;
  for (int r : ranks)
    s += "  rank " + std::to_string(r) + ": all_reduce on dp[" + std::to_string(r % 8) + ", " +
         std::to_string(r % 8 + 8) + "], call #0: " + label +
         " (the network links it needs failed at virtual time 0 s)\n";
  return s;
}

std::vector<FaultCase> fault_cases() {
  std::vector<int> all16;
  for (int r = 0; r < 16; ++r) all16.push_back(r);
  return {
      // Rank 3 fails inside repetition 1's kernel (cut at 2 ms); the others wait for it in the
      // all-reduce after theirs.
      {"rank_fails at a time, computing",
       two_repetitions("rank_fails: {rank: 3, at: 2 ms}"),
       1,
       {"ranksim: the run failed: 1 rank failed:\n"
        "  rank 3: faults[0] (rank_fails: rank 3): failed at virtual time 2 ms\n"
        "When the run stopped, 3 ranks were blocked:\n" +
        waiting_for_3("2.352 ms", 1)},
       {}},
      // Rank 3 fails while blocked in the barrier: at exactly 2 ms.
      {"rank_fails at a time, blocked",
       rank_3_waits_in_a_barrier("rank_fails: {rank: 3, at: 2 ms}"),
       1,
       {"ranksim: the run failed: 1 rank failed:\n"
        "  rank 3: faults[0] (rank_fails: rank 3): failed at virtual time 2 ms\n",
        "  rank 2 (clock 0 s): barrier(f32) on world, call #0: waiting for ranks 0, 1 to join\n"},
       {}},
      // Before step 1 of repetition 1: after two kernels and one all-reduce, 2.352 ms.
      {"rank_fails at a step",
       two_repetitions("rank_fails: {rank: 3, step: 1, iteration: 1}"),
       1,
       {"ranksim: the run failed: 1 rank failed:\n"
        "  rank 3: faults[0] (rank_fails: rank 3) before step 1 (all_reduce) of repetition 1, at virtual time "
        "2.352 ms: failed\n"
        "When the run stopped, 3 ranks were blocked:\n" +
        waiting_for_3("2.352 ms", 1)},
       {}},
      {"rank_stops at a time, computing",
       two_repetitions("rank_stops: {rank: 3, at: 2 ms}"),
       1,
       {": 4 of 4 ranks are blocked and nothing is left that could wake them:\n" + waiting_for_3("2.352 ms", 1) +
        "  rank 3 (clock 2 ms): faults[0] (rank_stops: rank 3): stopped at virtual time 2 ms\n"},
       {}},
      // Its report: ARankStoppedInACollectiveHoldsItsPeersThere.
      {"rank_stops at a time, blocked", rank_3_waits_in_a_barrier("rank_stops: {rank: 3, at: 2 ms}"), 1, {}, {}},
      {"rank_stops at a step",
       two_repetitions("rank_stops: {rank: 3, step: 1}"),
       1,
       {": 4 of 4 ranks are blocked and nothing is left that could wake them:\n" + waiting_for_3("1.014 ms", 0) +
        "  rank 3 (clock 1.014 ms): faults[0] (rank_stops: rank 3) before step 1 (all_reduce) of repetition 0, at "
        "virtual time 1.014 ms: stopped\n"},
       {}},
      {"straggler",
       two_repetitions("straggler: {rank: 1, slowdown: 3}"),
       0,
       {},
       {"faults injected (docs/scenarios.md, \"Faults\"):\n"
        "  faults[0] (straggler: rank 1): its kernels take 3x as long from 0 s\n"
        "  effect: virtual time 6.732 ms against 2.677 ms without the faults (+151.45%)\n"}},
      {"network_degrades, node",
       two_nodes("network_degrades: {node: 1, factor: 0.5}"),
       0,
       {},
       {"faults injected (docs/scenarios.md, \"Faults\"):\n"
        "  faults[0] (network_degrades: node 1): its network links run at 0.5 of their bandwidth from 0 s\n"
        "  effect: virtual time 43.57 ms against 21.92 ms without the faults (+98.76%)\n"}},
      {"network_degrades, rank",
       two_nodes("network_degrades: {rank: 3, factor: 0.5, at: 0 s}"),
       0,
       {},
       {"  faults[0] (network_degrades: rank 3's NIC): its network links run at 0.5 of their bandwidth from 0 s\n"
        "  effect: virtual time 43.57 ms against 21.92 ms without the faults (+98.76%)\n"}},
      // Node 1's links carry every DP group: all 16 ranks fail, each naming the fault.
      {"network_fails, node",
       two_nodes("network_fails: {node: 1, at: 0 s}"),
       1,
       {"ranksim: the run failed: 16 ranks failed:\n" + network_failed(all16, "faults[0] (network_fails: node 1)")},
       {}},
      // Rank 3's NIC: both members of DP group [3, 11] fail, and no one else.
      {"network_fails, rank",
       two_nodes("network_fails: {rank: 3, at: 0 s}"),
       1,
       {"ranksim: the run failed: 2 ranks failed:\n" +
        network_failed({3, 11}, "faults[0] (network_fails: rank 3's NIC)")},
       {}},
  };
}

TEST(Faults, EveryKindExitsAndReportsAsDocumented) {
  int i = 0;
  for (const FaultCase& c : fault_cases()) {
    SCOPED_TRACE(c.name);
    const Outcome r = run_json(write_scenario("kind" + std::to_string(i++) + ".yaml", c.text));
    EXPECT_EQ(r.r.code, c.code) << r.r.err;
    for (const std::string& s : c.err) EXPECT_THAT(r.r.err, HasSubstr(s));
    for (const std::string& s : c.out) EXPECT_THAT(r.r.out, HasSubstr(s));
    if (c.code == 0) {
      // The JSON summary lists the fault; no fatal fault writes a summary.
      ASSERT_TRUE(r.j.is_object());
      ASSERT_TRUE(r.j.contains("faults"));
      ASSERT_EQ(r.j["faults"]["injected"].size(), 1u);
      EXPECT_THAT(c.out[0], HasSubstr(r.j["faults"]["injected"][0].get<std::string>() + ": "));
      EXPECT_GT(num(r.j["virtual_time_us"]), num(r.j["faults"]["virtual_time_without_faults_us"]));
      EXPECT_EQ(r.r.err, "");
    } else {
      EXPECT_TRUE(r.json_text.empty());
      EXPECT_THAT(r.r.out, Not(HasSubstr("faults injected")));
    }
  }
}

TEST(Faults, EachFaultScenarioRunsByteForByteTheSameTwice) {
  int i = 0;
  for (const FaultCase& c : fault_cases()) {
    SCOPED_TRACE(c.name);
    const std::string file = write_scenario("twice" + std::to_string(i++) + ".yaml", c.text);
    const Outcome a = run_json(file, "twice"), b = run_json(file, "twice");  // the same "summary: FILE" line
    EXPECT_EQ(a.r.code, c.code);
    EXPECT_EQ(a.r.code, b.r.code);
    EXPECT_EQ(a.r.out, b.r.out);
    EXPECT_EQ(a.r.err, b.r.err);
    EXPECT_EQ(a.json_text, b.json_text);
    EXPECT_EQ(a.json_text.empty(), c.code != 0);
  }
}

// The line of the report that starts with `head`, or "".
std::string line_of(const std::string& text, const std::string& head) {
  const std::size_t at = text.find("\n" + head);
  if (at == std::string::npos) return "";
  return text.substr(at + 1, text.find('\n', at + 1) - at - 1);
}

// Rank 3 stops at 2 ms while it waits in the barrier for ranks 0 and 1 (busy in their TP
// all-reduce till ~6 ms): it never leaves the barrier, so the others block on it there, and it is
// reported as it was when it stopped.
TEST(Faults, ARankStoppedInACollectiveHoldsItsPeersThere) {
  const Outcome r =
      run_json(write_scenario("stopped.yaml", rank_3_waits_in_a_barrier("rank_stops: {rank: 3, at: 2 ms}")));
  EXPECT_EQ(r.r.code, 1);
  EXPECT_THAT(r.r.err, HasSubstr(": 4 of 4 ranks are blocked and nothing is left that could wake them:\n"));
  EXPECT_EQ(line_of(r.r.err, "  rank 3 "),
            "  rank 3 (clock 2 ms): faults[0] (rank_stops: rank 3): stopped at virtual time 2 ms; it was waiting in: "
            "barrier(f32) on world, call #0: rank 3 stopped inside it (an injected fault), so it never completes");
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_THAT(line_of(r.r.err, "  rank " + std::to_string(rank) + " (clock "),
                HasSubstr("): barrier(f32) on world, call #0: rank 3 stopped inside it (an injected fault), so it "
                          "never completes"))
        << "rank " << rank << " passed the barrier that rank 3 stopped in:\n"
        << r.r.err;
}

// A fault at a time after the run has ended changes nothing.
TEST(Faults, RankFaultsAfterTheRunsEndHaveNoEffect) {
  const Outcome clean = run_json(write_scenario("late0.yaml", two_repetitions("")));
  ASSERT_EQ(clean.r.code, 0) << clean.r.err;
  const double t0 = num(clean.j["virtual_time_us"]);
  for (const char* kind : {"rank_fails", "rank_stops"}) {
    SCOPED_TRACE(kind);
    const Outcome r =
        run_json(write_scenario("late1.yaml", two_repetitions(std::string(kind) + ": {rank: 3, at: 1 s}")));
    ASSERT_EQ(r.r.code, 0) << r.r.err;
    EXPECT_EQ(num(r.j["virtual_time_us"]), t0);
    EXPECT_EQ(num(r.j["faults"]["virtual_time_without_faults_us"]), t0);
    EXPECT_THAT(r.r.out,
                HasSubstr("  faults[0] (" + std::string(kind) + ": rank 3): " + (kind[5] == 'f' ? "fails" : "stops") +
                          " at 1 s (after the run ended: no effect)\n"
                          "  effect: virtual time 2.677 ms against 2.677 ms without the faults (+0.00%)\n"));
  }
  const Outcome n = run_json(write_scenario("late2.yaml", two_nodes("network_fails: {node: 0, at: 1 s}")));
  ASSERT_EQ(n.r.code, 0) << n.r.err;
  EXPECT_EQ(num(n.j["virtual_time_us"]), num(n.j["faults"]["virtual_time_without_faults_us"]));
}

// ---- 3: a straggler's effect against a closed form.

// 2 ranks: one bf16 kernel of 1e12 FLOP each, then a barrier. Rank 1 at slowdown s makes the
// makespan the fault-free one plus (s - 1) kernels.
std::string kernel_then_barrier(const std::string& faults) {
  return "name: straggler\n"
         "topology: " +
         topo("dgx-h100.yaml") +
         "\n"
         "ranks: 2\n"
         "workload:\n"
         "  steps:\n"
         "    do:\n"
         "      - compute: {flops: 1e12, dtype: bf16}\n"
         "      - barrier:\n" +
         (faults.empty() ? "" : "faults:\n  - " + faults + "\n");
}

TEST(Faults, AStragglersKernelsTakeSlowdownTimesAsLong) {
  const Outcome clean = run_json(write_scenario("s0.yaml", kernel_then_barrier("")), "s0");
  ASSERT_EQ(clean.r.code, 0) << clean.r.err;
  EXPECT_FALSE(clean.j.contains("faults"));
  const double t0 = num(clean.j["virtual_time_us"]);
  const double kernel = num(clean.j["ranks_detail"][1]["compute_us"]);
  ASSERT_GT(kernel, 500);  // ~1 ms on an H100
  ASSERT_GT(t0, kernel);
  EXPECT_EQ(num(clean.j["ranks_detail"][0]["compute_us"]), kernel);

  const Outcome slow =
      run_json(write_scenario("s1.yaml", kernel_then_barrier("straggler: {rank: 1, slowdown: 3}")), "s1");
  ASSERT_EQ(slow.r.code, 0) << slow.r.err;
  const auto& d = slow.j["ranks_detail"];
  EXPECT_EQ(num(d[0]["compute_us"]), kernel);              // rank 0 is not slowed
  EXPECT_NEAR(num(d[1]["compute_us"]), 3 * kernel, 1e-5);  // rank 1's kernel triples
  EXPECT_NEAR(num(slow.j["virtual_time_us"]), t0 + 2 * kernel, 1e-5);
  EXPECT_EQ(num(slow.j["faults"]["virtual_time_without_faults_us"]), t0);
  EXPECT_EQ(slow.j["faults"]["injected"], nlohmann::json::array({"faults[0] (straggler: rank 1)"}));
  // Rank 0 waits for rank 1 in the barrier: its communication grows by rank 1's extra time
  EXPECT_NEAR(num(d[0]["comm_us"]) - num(clean.j["ranks_detail"][0]["comm_us"]), 2 * kernel, 1e-5);
  char effect[64];
  std::snprintf(effect, sizeof effect, "(%+.2f%%)", (num(slow.j["virtual_time_us"]) / t0 - 1) * 100);
  EXPECT_THAT(slow.r.out, HasSubstr(std::string(" without the faults ") + effect + "\n"));

  // From a time after the run's end: no kernel is slowed.
  const Outcome late =
      run_json(write_scenario("s2.yaml", kernel_then_barrier("straggler: {rank: 1, slowdown: 3, from: 1 s}")), "s2");
  ASSERT_EQ(late.r.code, 0) << late.r.err;
  EXPECT_EQ(num(late.j["virtual_time_us"]), t0);
  EXPECT_EQ(num(late.j["faults"]["virtual_time_without_faults_us"]), t0);
  EXPECT_EQ(num(late.j["ranks_detail"][1]["compute_us"]), kernel);
  EXPECT_THAT(late.r.out, HasSubstr("  faults[0] (straggler: rank 1): its kernels take 3x as long from 1 s\n"
                                    "  effect: virtual time "));
  EXPECT_THAT(late.r.out, HasSubstr(" without the faults (+0.00%)\n"));
}

// ---- 4: a degraded network against the same run without it.

TEST(Faults, ADegradedNetworkSlowsOnlyTheCollectivesThatCrossIt) {
  const Outcome clean = run_json(write_scenario("n0.yaml", two_nodes("")), "n0");
  ASSERT_EQ(clean.r.code, 0) << clean.r.err;
  const double dp0 = num(collective(clean.j, "all_reduce", "dp")["time_us"]);
  const double tp0 = num(collective(clean.j, "all_reduce", "tp")["time_us"]);
  const double t0 = num(clean.j["virtual_time_us"]);

  // Node 1's links at half bandwidth: every DP group crosses them; a 1 GiB all-reduce is
  // bandwidth-bound, so its time nearly doubles (not quite: the latency part stays).
  const Outcome node = run_json(write_scenario("n1.yaml", two_nodes("network_degrades: {node: 1, factor: 0.5}")), "n1");
  ASSERT_EQ(node.r.code, 0) << node.r.err;
  const double dp_half = num(collective(node.j, "all_reduce", "dp")["time_us"]);
  EXPECT_GT(dp_half, 1.8 * dp0);
  EXPECT_LE(dp_half, 2.0 * dp0);
  EXPECT_EQ(num(collective(node.j, "all_reduce", "tp")["time_us"]), tp0);  // NVSwitch is not faulted
  EXPECT_NEAR(num(node.j["virtual_time_us"]), t0 + dp_half - dp0, 1e-5);
  EXPECT_EQ(num(node.j["faults"]["virtual_time_without_faults_us"]), t0);

  // Rank 3's NIC: only DP group [3, 11] slows, as much as under node 1's fault; the table's
  // time per call is the mean of the 8 groups' calls.
  const Outcome nic = run_json(write_scenario("n2.yaml", two_nodes("network_degrades: {rank: 3, factor: 0.5}")), "n2");
  ASSERT_EQ(nic.r.code, 0) << nic.r.err;
  EXPECT_EQ(collective(nic.j, "all_reduce", "dp")["calls"].get<int>(), 8);
  EXPECT_NEAR(num(collective(nic.j, "all_reduce", "dp")["time_us"]), (7 * dp0 + dp_half) / 8, 1e-3);
  EXPECT_NEAR(num(nic.j["virtual_time_us"]), num(node.j["virtual_time_us"]), 1e-5);

  // From a time after the run's end: nothing changes.
  const Outcome late =
      run_json(write_scenario("n3.yaml", two_nodes("network_degrades: {node: 1, factor: 0.5, at: 1 s}")), "n3");
  ASSERT_EQ(late.r.code, 0) << late.r.err;
  EXPECT_EQ(num(collective(late.j, "all_reduce", "dp")["time_us"]), dp0);
  EXPECT_EQ(num(late.j["virtual_time_us"]), t0);
  EXPECT_THAT(late.r.out, HasSubstr(" without the faults (+0.00%)\n"));

  // A TP-only workload never leaves a node: a degraded node's links change nothing.
  const std::string tp_only = "      - all_reduce: {bytes: 256 MiB, dtype: bf16, group: tp}\n";
  const Outcome tp_clean = run_json(write_scenario("n4.yaml", two_nodes("", tp_only)), "n4");
  const Outcome tp_degraded =
      run_json(write_scenario("n5.yaml", two_nodes("network_degrades: {node: 1, factor: 0.1}", tp_only)), "n5");
  ASSERT_EQ(tp_clean.r.code, 0) << tp_clean.r.err;
  ASSERT_EQ(tp_degraded.r.code, 0) << tp_degraded.r.err;
  EXPECT_EQ(num(collective(tp_degraded.j, "all_reduce", "tp")["time_us"]),
            num(collective(tp_clean.j, "all_reduce", "tp")["time_us"]));
  EXPECT_EQ(num(tp_degraded.j["virtual_time_us"]), num(tp_clean.j["virtual_time_us"]));
  EXPECT_EQ(num(tp_degraded.j["faults"]["virtual_time_without_faults_us"]), num(tp_clean.j["virtual_time_us"]));
}

// ---- 5: per-rank steps.

std::string four_ranks(const std::string& steps) {
  return "name: per-rank\n"
         "topology: " +
         topo("dgx-h100.yaml") +
         "\n"
         "ranks: 4\n"
         "workload:\n"
         "  steps:\n"
         "    do:\n" +
         steps;
}

TEST(Faults, AStepOnSomeRanksDeadlocksOrMismatchesAsABuggyProgramWould) {
  // Rank 3 never calls the world all-reduce: the others wait for it for good.
  const Outcome missing = run_json(
      write_scenario("p0.yaml", four_ranks("      - all_reduce: {bytes: 1 MiB, dtype: bf16, ranks: [0, 1, 2]}\n")));
  EXPECT_EQ(missing.r.code, 1);
  EXPECT_THAT(missing.r.err, HasSubstr(": 3 of 4 ranks are blocked and nothing is left that could wake them:\n"
                                       "  rank 0 (clock 0 s): all_reduce(bf16[524288], op=SUM) on world, call #0: "
                                       "waiting for rank 3 to join\n"
                                       "  rank 1 (clock 0 s): all_reduce(bf16[524288], op=SUM) on world, call #0: "
                                       "waiting for rank 3 to join\n"
                                       "  rank 2 (clock 0 s): all_reduce(bf16[524288], op=SUM) on world, call #0: "
                                       "waiting for rank 3 to join\n"));
  EXPECT_THAT(missing.r.err, Not(HasSubstr("  rank 3 (clock")));

  // Ranks 0, 1 and ranks 2, 3 call the world all-reduce with different sizes: both signatures.
  const Outcome mismatch =
      run_json(write_scenario("p1.yaml", four_ranks("      - all_reduce: {bytes: 1 MiB, dtype: bf16, "
                                                    "ranks: [0, 1]}\n"
                                                    "      - all_reduce: {bytes: 2 MiB, dtype: bf16, "
                                                    "ranks: [3, 2]}\n")));
  EXPECT_EQ(mismatch.r.code, 1);
  for (int r : {2, 3})
    EXPECT_THAT(mismatch.r.err,
                HasSubstr("  rank " + std::to_string(r) + ": collective mismatch on world at call #0: rank 0 called " +
                          "all_reduce(bf16[524288], op=SUM) but rank " + std::to_string(r) +
                          " called all_reduce(bf16[1048576], op=SUM) (different element counts (524288 vs 1048576))"));

  // A kernel on rank 1 only: rank 0 computes nothing and waits for rank 1 in the barrier.
  const Outcome one = run_json(write_scenario("p2.yaml", "name: one\ntopology: " + topo("dgx-h100.yaml") +
                                                             "\nranks: 2\nworkload:\n  steps:\n    do:\n"
                                                             "      - compute: {flops: 1e12, dtype: bf16, ranks: [1]}\n"
                                                             "      - barrier:\n"));
  ASSERT_EQ(one.r.code, 0) << one.r.err;
  const Outcome both = run_json(write_scenario("p3.yaml", kernel_then_barrier("")));
  ASSERT_EQ(both.r.code, 0) << both.r.err;
  const auto& d = one.j["ranks_detail"];
  EXPECT_EQ(num(d[0]["compute_us"]), 0);
  EXPECT_EQ(num(d[1]["compute_us"]), num(both.j["ranks_detail"][1]["compute_us"]));
  EXPECT_GT(num(d[1]["compute_us"]), 0);
  EXPECT_EQ(num(one.j["virtual_time_us"]), num(both.j["virtual_time_us"]));
  EXPECT_FALSE(one.j.contains("faults"));
}

// ---- Model workloads take faults at times too.

// The shipped 1F1B pipeline scenario (tp=2 x pp=2 x dp=2) with `faults`, its topology by full path.
std::string pipeline_with(const std::string& faults) {
  std::string text = slurp(testing::scenario("train-pp2-1f1b-dgx-h100.yaml"));
  const std::string rel = "../topologies/";
  text.replace(text.find(rel), rel.size(), std::string(RANKSIM_SOURCE_DIR) + "/topologies/");
  return text + "faults:\n" + faults;
}

TEST(Faults, AModelWorkloadTakesFaultsAtTimes) {
  const Outcome clean = run_json(write_scenario("m0.yaml", pipeline_with("  []\n")), "m0");
  ASSERT_EQ(clean.r.code, 0) << clean.r.err;
  EXPECT_FALSE(clean.j.contains("faults"));  // an empty list injects nothing
  const Outcome slow = run_json(write_scenario("m1.yaml", pipeline_with("  - straggler: {rank: 5, slowdown: 2}\n"
                                                                        "  - rank_fails: {rank: 1, at: 10 s}\n")),
                                "m1");
  ASSERT_EQ(slow.r.code, 0) << slow.r.err;
  EXPECT_EQ(slow.j["faults"]["injected"],
            nlohmann::json::array({"faults[0] (straggler: rank 5)", "faults[1] (rank_fails: rank 1)"}));
  EXPECT_EQ(num(slow.j["faults"]["virtual_time_without_faults_us"]), num(clean.j["virtual_time_us"]));
  EXPECT_GT(num(slow.j["virtual_time_us"]), num(clean.j["virtual_time_us"]));
  // Rank 5's kernels take twice as long; the run's other ranks' as long as without the fault.
  EXPECT_NEAR(num(slow.j["ranks_detail"][5]["compute_us"]), 2 * num(clean.j["ranks_detail"][5]["compute_us"]), 1e-3);
  EXPECT_EQ(num(slow.j["ranks_detail"][4]["compute_us"]), num(clean.j["ranks_detail"][4]["compute_us"]));
  EXPECT_THAT(slow.r.out, HasSubstr("  faults[0] (straggler: rank 5): its kernels take 2x as long from 0 s\n"
                                    "  faults[1] (rank_fails: rank 1): fails at 10 s (after the run ended: no effect)\n"
                                    "  effect: virtual time "));

  const Outcome stop =
      run_json(write_scenario("m2.yaml", pipeline_with("  - rank_stops: {rank: 5, at: 20 ms}\n")), "m2");
  EXPECT_EQ(stop.r.code, 1);
  EXPECT_THAT(stop.r.err, HasSubstr(": 8 of 8 ranks are blocked and nothing is left that could wake them:\n"));
  EXPECT_EQ(line_of(stop.r.err, "  rank 5 "),
            "  rank 5 (clock 20 ms): faults[0] (rank_stops: rank 5): stopped at virtual time 20 ms");
  EXPECT_THAT(line_of(stop.r.err, "  rank 4 "), HasSubstr("on tp[4, 5], call #"));
  EXPECT_THAT(line_of(stop.r.err, "  rank 4 "), HasSubstr(": waiting for rank 5 to join"));
}

// ---- 6: the loader's errors: the file, line:column, and what is wrong.

TEST(Faults, TheLoaderRefusesWhatCannotBeInjected) {
  const std::string dgx = two_repetitions("");  // faults: on line 10, the first entry on line 11
  const std::string cluster = two_nodes("");    // the same
  const std::string one_node = "name: e\ntopology: " + topo("h100-cluster.yaml") +
                               "\ntopology_set: {nodes: 2}\nranks: 8\nworkload:\n  steps:\n    do:\n"
                               "      - all_reduce: {bytes: 1 MiB, dtype: bf16}\n";
  const std::string model = "name: e\ntopology: " + topo("dgx-h100.yaml") +
                            "\nparallel: {tp: 2, dp: 4}\ndata: shape_only\n"
                            "model: {kind: transformer, dtype: bf16, vocab: 512, hidden: 256, heads: 4, head_dim: 64, "
                            "ffn: 1024, layers: 2}\nbatch: {rows: 4, seq_len: 64}\n";
  const std::string sweep = "name: e\ntopology: " + topo("dgx-h100.yaml") +
                            "\nworkload:\n  collectives: {op: all_reduce, sizes: \"8B:1MiB\", dtype: f32}\n";
  const std::string steps =
      "name: e\ntopology: " + topo("dgx-h100.yaml") + "\nranks: 4\nworkload:\n  steps:\n    do:\n";
  const struct {
    const char* name;
    std::string text;
    std::string says;  // after "FILE:"
  } cases[] = {
      {"unknown kind", dgx + "faults:\n  - rank_fail: {rank: 1, at: 1 ms}\n",
       "11:5: faults[0]: unknown fault 'rank_fail'; did you mean 'rank_fails'? (faults: rank_fails, rank_stops, "
       "straggler, network_degrades, network_fails)"},
      {"at and step", dgx + "faults:\n  - rank_fails: {rank: 1, at: 1 ms, step: 0}\n",
       "11:17: faults[0]: rank_fails needs exactly one of at (a virtual time, such as 2 ms) or step"},
      {"neither at nor step", dgx + "faults:\n  - rank_stops: {rank: 1}\n",
       "11:17: faults[0]: rank_stops needs exactly one of at (a virtual time, such as 2 ms) or step"},
      {"rank out of range", dgx + "faults:\n  - rank_fails: {rank: 4, at: 1 ms}\n",
       "11:24: faults[0].rank_fails.rank must be a rank of this run, 0 to 3, got 4"},
      {"straggler rank out of range", dgx + "faults:\n  - straggler: {rank: 7, slowdown: 2}\n",
       "11:23: faults[0].straggler.rank must be a rank of this run, 0 to 3, got 7"},
      {"node out of range", cluster + "faults:\n  - network_fails: {node: 2, at: 1 ms}\n",
       "11:27: faults[0].network_fails.node must be a node of this run, 0 to 1, got 2"},
      {"factor 0", cluster + "faults:\n  - network_degrades: {node: 1, factor: 0}\n",
       "11:41: faults[0].network_degrades.factor must be the links' remaining share of their bandwidth, above 0 and "
       "at most 1 (network_fails is a link that carries nothing), got 0"},
      {"factor 1.5", cluster + "faults:\n  - network_degrades: {node: 1, factor: 1.5}\n",
       "11:41: faults[0].network_degrades.factor must be the links' remaining share of their bandwidth, above 0 and "
       "at most 1 (network_fails is a link that carries nothing), got 1.5"},
      {"slowdown 0.5", dgx + "faults:\n  - straggler: {rank: 1, slowdown: 0.5}\n",
       "11:36: faults[0].straggler.slowdown must be a number from 1 to 1e6 (its kernels take that many times as "
       "long), got 0.5"},
      {"step on a model workload", model + "faults:\n  - rank_fails: {rank: 1, step: 0}\n",
       "8:33: faults[0].rank_fails.step counts the steps of a steps workload; this scenario has none: give at (a "
       "virtual time)"},
      {"step out of range", dgx + "faults:\n  - rank_stops: {rank: 1, step: 2}\n",
       "11:33: faults[0].rank_stops.step must index workload.steps.do, 0 to 1, got 2"},
      {"iteration past repeat", dgx + "faults:\n  - rank_stops: {rank: 1, step: 1, iteration: 2}\n",
       "11:47: faults[0].rank_stops.iteration must be a repetition of the steps, 0 to 1 (workload.steps.repeat is "
       "2), got 2"},
      {"iteration with at", dgx + "faults:\n  - rank_stops: {rank: 1, at: 1 ms, iteration: 0}\n",
       "11:48: faults[0].rank_stops.iteration goes with step, not with at"},
      {"network fault on one node", one_node + "faults:\n  - network_fails: {node: 0, at: 1 ms}\n",
       "10:5: faults[0]: this run's 8 ranks are on one node of topology 'h100-cluster', so no collective crosses the "
       "network; use more ranks or nodes (--set topology.nodes=N)"},
      {"faults on a sweep", sweep + "faults:\n  - straggler: {rank: 1, slowdown: 2}\n",
       "6:3: faults apply to steps and model workloads; a collectives sweep times each size alone"},
      {"faults not a list", dgx + "faults: {straggler: {rank: 1, slowdown: 2}}\n",
       "10:9: faults must be a list, e.g. [{straggler: {rank: 3, slowdown: 1.5}}]"},
      {"unknown key in a fault", dgx + "faults:\n  - straggler: {rank: 1, slowdown: 2, at: 1 ms}\n",
       "11:39: unknown key 'at' in a straggler fault (known keys: rank, slowdown, from)"},
      {"unknown key in a network fault", cluster + "faults:\n  - network_fails: {rank: 1, at: 1 ms, factor: 0.5}\n",
       "11:40: unknown key 'factor' in a network_fails fault (known keys: node, rank, at)"},
      {"duplicate rank in a step", steps + "      - all_reduce: {bytes: 1 MiB, dtype: bf16, ranks: [0, 1, 1]}\n",
       "7:63: ranks lists rank 1 twice"},
      {"step rank out of range", steps + "      - all_reduce: {bytes: 1 MiB, dtype: bf16, ranks: [0, 4]}\n",
       "7:60: ranks must be a rank of this run, 0 to 3, got 4"},
      {"step ranks not a list", steps + "      - compute: {flops: 1e9, ranks: 2}\n",
       "7:38: ranks must be a non-empty list of the ranks that run the step, such as [0, 2], got '2'"},
  };
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = write_scenario("bad" + std::to_string(i++) + ".yaml", c.text);
    const CliResult r = run({"run", file});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("ranksim: " + file + ":" + c.says));
    EXPECT_EQ(r.out, "");  // refused before the run's header
    const CliResult v = run({"validate", file});
    EXPECT_EQ(v.code, 2);
    EXPECT_THAT(v.err, HasSubstr(file + ":" + c.says));
  }
}

// ---- 7, 8: validate; the process backends.

TEST(Faults, ValidateAcceptsAScenarioWithFaults) {
  const std::string file = write_scenario("valid.yaml", two_repetitions("straggler: {rank: 1, slowdown: 1.5}\n"
                                                                        "  - rank_fails: {rank: 3, step: 1, "
                                                                        "iteration: 1}\n"
                                                                        "  - rank_stops: {rank: 2, at: 2 ms}"));
  const CliResult r = run({"validate", file});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(file + ": valid"));
  EXPECT_EQ(r.err, "");
  const CliResult n = run({"validate", write_scenario("valid2.yaml", two_nodes("network_degrades: {node: 1, "
                                                                               "factor: 0.5, at: 5 ms}\n"
                                                                               "  - network_fails: {rank: 12, "
                                                                               "at: 5 ms}"))});
  EXPECT_EQ(n.code, 0) << n.err;
}

TEST(Faults, TheMpiBackendRefusesFaultsAtTimes) {
  for (const std::string& fault :
       {std::string("straggler: {rank: 1, slowdown: 2}"), std::string("rank_fails: {rank: 1, at: 1 ms}")}) {
    SCOPED_TRACE(fault);
    const std::string file = write_scenario("mpi.yaml", kernel_then_barrier(fault));
    const CliResult r = run({"run", file, "--backend", "mpi"});
    if (r.err.find("the mpi backend is not available") != std::string::npos)
      GTEST_SKIP() << "built without the mpi backend (RANKSIM_WITH_MPI=OFF)";
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr("ranksim: injected faults at virtual times run on the sim backend only, not on mpi; "
                                 "run without --backend, or drop the faults\n"));
  }
}

}  // namespace
}  // namespace ranksim::app

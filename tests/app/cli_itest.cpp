// The ranksim command line end to end (in-process through run_cli): exit codes, the demo, the
// collectives benchmark with --check, and errors that name the input.
#include "app/cli.h"
#include "app/cli_run.h"

#include "app/bench.h"
#include "runtime/distributed/spawn.h"
#include "sim/engine.h"
#include "sim/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ranksim::app {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::run;
using Result = testing::CliResult;

using testing::topo;

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
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather",
                         "scatter", "sendrecv"}) {
    const Result r =
        run({"bench", "collectives", "-t", topo("ring4.yaml"), "--op", op, "--sizes", "64B:4KiB", "--check"});
    ASSERT_EQ(r.code, 0) << op << ": " << r.err << r.out;
    EXPECT_THAT(r.out, HasSubstr("all results correct")) << op;
    EXPECT_THAT(r.out, HasSubstr("#wrong")) << op;
    EXPECT_THAT(r.out, Not(HasSubstr("N/A"))) << op;
  }
}

// busbw = algbw x nccl-tests' factor for the collective (src/*.cu, *GetBw): 2(n-1)/n for
// all_reduce; (n-1)/n for all_gather, reduce_scatter, alltoall, gather and scatter; 1 for
// broadcast and reduce. 8 ranks; sizes large enough that the printed columns carry 4 digits.
TEST(Cli, BenchBusBandwidthIsNcclTestsFactorOfTheAlgorithmBandwidth) {
  const std::vector<std::pair<const char*, double>> factors = {
      {"all_reduce", 14.0 / 8}, {"all_gather", 7.0 / 8}, {"reduce_scatter", 7.0 / 8}, {"all_to_all", 7.0 / 8},
      {"gather", 7.0 / 8},      {"scatter", 7.0 / 8},    {"broadcast", 1.0},          {"reduce", 1.0}};
  for (const auto& [op, factor] : factors) {
    const Result r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--op", op, "--sizes", "256MiB"});
    ASSERT_EQ(r.code, 0) << op << ": " << r.err;
    std::istringstream lines(r.out);
    int rows = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
      std::istringstream f(line);
      std::string size, count, type, algo;
      double time_us = 0, algbw = 0, busbw = 0;
      ASSERT_TRUE(f >> size >> count >> type >> algo >> time_us >> algbw >> busbw) << line;
      EXPECT_NEAR(busbw / algbw, factor, 1e-3) << op << ": " << line;
      ++rows;
    }
    EXPECT_EQ(rows, 1) << op;
  }
}

namespace {
// The busbw and algorithm columns of the last row of a bench table.
std::pair<double, std::string> last_busbw(const std::string& out) {
  std::istringstream lines(out);
  std::string line, algo;
  double busbw = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
    std::istringstream f(line);
    std::string size, count, type;
    double time_us, algbw;
    f >> size >> count >> type >> algo >> time_us >> algbw >> busbw;
  }
  return {busbw, algo};
}
}  // namespace

namespace {
// The time column of every row of a bench table, by size.
std::map<std::string, double> times_us(const std::string& out) {
  std::map<std::string, double> t;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
    std::istringstream f(line);
    std::string size, count, type, algo;
    double us = 0;
    if (f >> size >> count >> type >> algo >> us) t[size] = us;
  }
  return t;
}
}  // namespace

// -g 8: as nccl-tests with one thread driving 8 GPUs prints it. Small calls take the thread's
// 8 x group_launch (4.683 us on dgx-h100.yaml); large ones the GPUs' time, as with one process each.
TEST(Cli, BenchShowsWhereTheTopologysTunerChose) {
  // AWS's tuner on 16 p5s (topologies/tuners/aws-p5.conf): tree LL128 up to 288 MiB, ring LL128
  // to 2 GiB. Without it NCCL's cost model chooses, and no row says tuner.
  const std::vector<std::string> args = {"bench", "collectives", "-t",      topo("aws-p5.yaml"),
                                         "--set", "nodes=16",    "--sizes", "256MiB:512MiB"};
  std::vector<std::string> with = args;
  with.insert(with.end(), {"--set", "collectives.tuner=tuners/aws-p5.conf"});
  const Result tuned = run(with);
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  EXPECT_THAT(tuned.out, HasSubstr("tree/LL128/16ch+tuner"));
  EXPECT_THAT(tuned.out, HasSubstr("ring/LL128/16ch+tuner"));
  const Result plain = run(args);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_THAT(plain.out, Not(HasSubstr("+tuner")));
}

TEST(Cli, BenchTimesOneThreadDrivingSeveralGpus) {
  const std::vector<std::string> args = {"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "8B:1GiB"};
  const Result each = run(args);
  std::vector<std::string> g8 = args;
  g8.insert(g8.end(), {"-g", "8"});
  const Result one = run(g8);
  ASSERT_EQ(each.code, 0) << each.err;
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("one thread drives 8 GPUs (nccl-tests -g 8): a call takes at least 8 x group_launch "
                                 "= 37.5 us"));
  const std::map<std::string, double> a = times_us(each.out), b = times_us(one.out);
  ASSERT_EQ(a.size(), 28u);
  ASSERT_EQ(b.size(), a.size());
  for (const auto& [size, us] : a) EXPECT_NEAR(b.at(size), std::max(us, 8 * 4.683), 0.01) << size;
  EXPECT_GT(a.at("1073741824"), 8 * 4.683);  // where the GPUs take longer, -g changes nothing
  const Result odd = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "-g", "3"});
  EXPECT_EQ(odd.code, 2);
  EXPECT_THAT(odd.err, HasSubstr("--gpus-per-thread 3 does not divide the 8 ranks"));
}

namespace {
// "size algorithm" of every row of a bench table.
std::vector<std::string> labels(const std::string& out) {
  std::vector<std::string> l;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
    std::istringstream f(line);
    std::string size, count, type, algo;
    if (f >> size >> count >> type >> algo) l.push_back(size + " " + algo);
  }
  return l;
}
}  // namespace

// --algo and --proto take NCCL_ALGO's and NCCL_PROTO's lists (sim/nccl_env.h). On one DGX H100,
// "^nvls" leaves ring and tree (the node has no CollNet, PAT or NVLS tree): the same choices as
// "Ring,Tree", and at 1 GiB the ring where NVLS was chosen.
TEST(Cli, BenchTakesNcclsAlgorithmAndProtocolLists) {
  const std::vector<std::string> args = {"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "64KiB:1GiB"};
  auto with = [&](const std::vector<std::string>& more) {
    std::vector<std::string> a = args;
    a.insert(a.end(), more.begin(), more.end());
    const Result r = run(a);
    EXPECT_EQ(r.code, 0) << r.err;
    return r;
  };
  const Result plain = with({}), no_nvls = with({"--algo", "^nvls"}), ring_tree = with({"--algo", "Ring,Tree"});
  EXPECT_EQ(times_us(no_nvls.out), times_us(ring_tree.out));
  EXPECT_EQ(labels(no_nvls.out), labels(ring_tree.out));
  EXPECT_EQ(labels(plain.out).back(), "1073741824 nvls/Simple/16ch");
  EXPECT_EQ(labels(no_nvls.out).back(), "1073741824 ring/Simple/16ch");
  // A list for another function leaves all_reduce NCCL's choice.
  EXPECT_EQ(times_us(with({"--algo", "allgather:ring"}).out), times_us(plain.out));
  // "^LL,LL128": Simple at every size; "allreduce:LL128" all_reduce on LL128 only.
  for (const std::string& l : labels(with({"--proto", "^LL,LL128"}).out)) EXPECT_THAT(l, HasSubstr("/Simple/"));
  for (const std::string& l : labels(with({"--proto", "allreduce:LL128"}).out)) EXPECT_THAT(l, HasSubstr("/LL128/"));
  // Malformed lists, and lists that leave the collective nothing, exit 2 naming the option.
  const std::pair<std::vector<std::string>, std::string> refused[] = {
      {{"--algo", "ring;tree"}, "--algo: NCCL_ALGO=\"ring;tree\": entry 'tree' names no function"},
      {{"--proto", "LL,LL129"}, "--proto: NCCL_PROTO=\"LL,LL129\": unknown name 'LL129'"},
      {{"--algo", "allreduce:pat,nvlstree"}, "as what NCCL_ALGO=allreduce:pat,nvlstree allows"}};
  for (const auto& [more, says] : refused) {
    std::vector<std::string> a = args;
    a.insert(a.end(), more.begin(), more.end());
    const Result bad = run(a);
    EXPECT_EQ(bad.code, 2) << says;
    EXPECT_THAT(bad.err, HasSubstr(says));
  }
}

TEST(Cli, BenchBusBandwidthApproachesTheLinkSpeedForLargeMessages) {
  // dgx-h100: 450 GB/s per GPU each way through NVSwitch. Timed as schedules on the network
  // graph, a 1 GiB ring all-reduce reaches close to it (bus bandwidth is defined to make this
  // comparison); timed as NCCL (the file's model), it reaches the fitted share of it,
  // fabric_efficiency 0.8157: 367 GB/s, less the call's latency (~69 us of ~5.2 ms: 1.3%).
  const Result sched = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1GiB", "--algo", "ring",
                            "--set", "collectives.model=schedule"});
  ASSERT_EQ(sched.code, 0) << sched.err;
  EXPECT_GT(last_busbw(sched.out).first, 400.0) << sched.out;
  EXPECT_LE(last_busbw(sched.out).first, 450.0) << sched.out;

  const Result nccl = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1GiB", "--algo", "ring"});
  ASSERT_EQ(nccl.code, 0) << nccl.err;
  const auto [busbw, algo] = last_busbw(nccl.out);
  EXPECT_GT(busbw, 0.98 * 450 * 0.8157) << nccl.out;
  EXPECT_LE(busbw, 450 * 0.8157) << nccl.out;
  EXPECT_EQ(algo, "ring/Simple/16ch") << nccl.out;
}

// `bench collectives ARGS` run shape-only and with --check: each run's rows as "size algorithm
// time_us" lines, both runs' exit codes checked.
void bench_rows_twice(const std::vector<std::string>& args, std::vector<std::string> (&rows)[2]) {
  for (int check = 0; check < 2; ++check) {
    std::vector<std::string> a = args;
    a.insert(a.begin(), {"bench", "collectives"});
    if (check) a.emplace_back("--check");
    const Result r = run(a);
    EXPECT_EQ(r.code, 0) << r.err;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#' || line.find("size") != std::string::npos) continue;
      std::istringstream f(line);
      std::string size, count, type, algo, time_us;
      f >> size >> count >> type >> algo >> time_us;
      if (!time_us.empty()) rows[check].push_back(size + " " + algo + " " + time_us);
    }
  }
}

// The documented contract of --check: the same collective times as shape-only (filling the
// inputs is not the collective's time).
TEST(Cli, BenchCheckTimesTheCollectivesAsShapeOnlyDoes) {
  for (const char* op :
       {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather", "scatter"}) {
    std::vector<std::string> rows[2];
    bench_rows_twice({"-t", topo("ring4.yaml"), "--op", op, "--sizes", "1KiB:1MiB"}, rows);
    EXPECT_FALSE(rows[0].empty()) << op;
    EXPECT_EQ(rows[0], rows[1]) << op;
  }
}

// Shape-only rings and hierarchical collectives are timed from steps made one at a time
// (runtime::LazySteps); with data, from the built schedule. Same times, on two nodes too.
TEST(Cli, ShapeOnlyRingsTimeAsTheirBuiltSchedulesDo) {
  for (const char* algo : {"ring", "hierarchical"}) {
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      std::vector<std::string> rows[2];
      bench_rows_twice({"-t", topo("h100-cluster.yaml"), "--set", "nodes=2", "--set", "collectives.model=schedule",
                        "--op", op, "--algo", algo, "--sizes", "1KiB:256KiB"},
                       rows);
      EXPECT_FALSE(rows[0].empty()) << algo << " " << op;
      EXPECT_EQ(rows[0], rows[1]) << algo << " " << op;
    }
  }
}

// On the nccl model a shape-only all_to_all of even splits is timed from its size alone (no n x
// n table of split sizes is built: at 16,384 ranks that table was 6 GB); with data, from the
// checked table. Same sizes and times.
TEST(Cli, ShapeOnlyEvenAllToAllTimesAsWithData) {
  std::vector<std::string> rows[2];
  bench_rows_twice({"-t", topo("h100-cluster.yaml"), "--set", "nodes=2", "--op", "all_to_all", "--sizes", "1KiB:1MiB"},
                   rows);
  EXPECT_EQ(rows[0].size(), 11u);
  EXPECT_EQ(rows[0], rows[1]);
}

// A long sweep reports as it goes: each row is handed over (and bench prints it) as soon as its
// size has run, after the size was announced; the rows are those the sweep returns, in order.
TEST(Cli, ASweepHandsOverEachRowAsItsSizeFinishes) {
  const sim::Topology t = sim::Topology::load_file(topo("ring4.yaml"));
  SweepRequest req;
  req.sizes = parse_size_sweep("1KiB:64KiB");
  std::vector<std::string> events;
  req.on_size = [&](std::size_t i, std::size_t total, int64_t bytes) {
    events.push_back("size " + std::to_string(i) + "/" + std::to_string(total) + " " + std::to_string(bytes));
  };
  std::vector<SweepRow> seen;
  const std::vector<SweepRow> rows = run_sweep(t, req, [&](const SweepRow& r) {
    seen.push_back(r);
    events.push_back("row " + std::to_string(r.bytes));
  });
  ASSERT_EQ(rows.size(), 7u);
  ASSERT_EQ(seen.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(seen[i].bytes, rows[i].bytes);
    EXPECT_EQ(seen[i].seconds, rows[i].seconds);
    EXPECT_EQ(events[2 * i], "size " + std::to_string(i) + "/7 " + std::to_string(1024 << i));
    EXPECT_EQ(events[2 * i + 1], "row " + std::to_string(1024 << i));
  }
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

// Running out of host memory is the machine's limit, said as such with exit 2 (issue #20: it was
// "internal error", exit 3). The child process gets a 2 GB address space and asks for 512 MiB per
// rank and their expected sums: more than 2 GB, though within the estimate's bound on any machine
// with 4 GiB available (the estimate refuses larger runs before they start: below).
[[noreturn, maybe_unused]] void run_out_of_memory() {  // unused under ASan (the test skips)
  rlimit limit{};
  limit.rlim_cur = limit.rlim_max = 2'000'000'000;
  setrlimit(RLIMIT_AS, &limit);
  const Result r =
      run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--ranks", "2", "--check", "--sizes", "512MiB"});
  std::cerr << r.err;
  std::exit(r.code);
}

TEST(Cli, OutOfHostMemoryExitsWithTwoAndSaysWhatToDo) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit and the sanitizer's shadow memory do not mix";
#else
  EXPECT_EXIT(run_out_of_memory(), ::testing::ExitedWithCode(2),
              "out of host memory( in rank [0-9]+)?: .*time it shape-only");
#endif
}

// A sweep to sizes no device holds (issue #20: `sizes: 8B:1PiB` ran, exit 0) is refused before it
// runs, from the command line and from a scenario; up to the device's 80 GiB it runs.
TEST(Cli, SizesBeyondTheDevicesMemoryAreRefused) {
  Result r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "8B:1PiB"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--sizes 8B:1PiB: 1 PiB per rank is more than the 80 GiB of device memory of h100-sxm"));
  EXPECT_EQ(r.out, "");
  r = run({"run", testing::scenario("allreduce-sweep-dgx-h100.yaml"), "--set", "workload.collectives.sizes=8B:128GiB"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("collectives.sizes: 128 GiB per rank is more than the 80 GiB"));
  r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "64GiB:64GiB"});
  EXPECT_EQ(r.code, 0) << r.err;
}

// Real data that the host cannot hold is refused before the run with an estimate, not killed part
// way: 8 ranks x 64 GiB in and out, and 4 bytes of expected sums per byte: 1.25 TiB (each rank's
// 64 GiB fits its 80 GiB device).
TEST(Cli, RealDataBeyondTheHostsMemoryIsRefusedBeforeTheRun) {
  if (host_memory_available() == 0 || host_memory_available() > (uint64_t{1} << 40))
    GTEST_SKIP() << "this machine's available memory is unknown or above 1 TiB";
  const Result r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--check", "--sizes", "64GiB"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--check on 8 ranks at 64 GiB needs about 1.25 TiB of host memory, more than the "));
  EXPECT_THAT(r.err, HasSubstr("time it shape-only"));
  EXPECT_EQ(r.out, "");
  // A scenario with real data: refused the same way, before its header is printed.
  const Result s = run({"run", testing::scenario("quickstart.yaml"), "--set", "data=real", "--set",
                        "workload.steps.do.2.all_reduce.bytes=64GiB"});
  EXPECT_EQ(s.code, 2) << s.err;
  EXPECT_THAT(s.err, HasSubstr("quickstart.yaml: data: real on 8 ranks at 64 GiB per rank needs about 1.25 TiB"));
}

// A forced direct schedule on the schedule timing model holds all n(n-1) transfers: at 65,536
// ranks, 4.3e9 of them (about 1.25 TiB) are refused before the run with what to use instead; the
// same ranks with the nccl model, or a ring, need no such memory.
TEST(Cli, ADirectScheduleBeyondTheHostsMemoryIsRefusedBeforeTheRun) {
  if (host_memory_available() == 0 || host_memory_available() > (uint64_t{1} << 40))
    GTEST_SKIP() << "this machine's available memory is unknown or above 1 TiB";
  const std::vector<std::string> big = {"bench", "collectives", "-t",      topo("h100-cluster.yaml"),
                                        "--set", "nodes=8192",  "--set",   "collectives.model=schedule",
                                        "--op",  "all_gather",  "--sizes", "1MiB:1MiB"};
  std::vector<std::string> args = big;
  args.insert(args.end(), {"--algo", "direct"});
  const Result r = run(args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--algo direct: the direct schedule of 65536 ranks moves all 4294901760 of its "
                               "transfers at once, and needs about 1.25 TiB of host memory, more than the "));
  EXPECT_THAT(r.err, HasSubstr("use another algorithm (ring, tree, hierarchical"));
  EXPECT_EQ(r.out, "");
  // A scenario that forces it: refused the same way, naming its file.
  const Result s =
      run({"run", testing::scenario("tp-dp-cluster.yaml"), "--set", "topology.nodes=8192", "--set",
           "topology.collectives.model=schedule", "--set", "parallel.dp=8192", "--set", "algorithm=direct"});
  EXPECT_EQ(s.code, 2) << s.err;
  EXPECT_THAT(s.err, HasSubstr("tp-dp-cluster.yaml: algorithm: direct: the direct schedule of 65536 ranks"));
}

// A run about to exhaust the host is stopped by its guard with an Error (exit 2 in the CLI), not
// killed: here with a limit of one byte, passed at the first check (after 64 Ki events).
TEST(Cli, AHostMemoryGuardStopsTheRunWithAClearError) {
  runtime::SpawnOptions so;
  so.guard = host_memory_guard(1);
  try {
    (void)runtime::spawn(
        [](int) {
          for (int i = 0; i < 100000; ++i) sim::this_rank::yield();
        },
        2, so);
    FAIL() << "expected the guard to stop the run";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("out of host memory: the run holds "));
    EXPECT_THAT(e.what(), HasSubstr("stopped before the system would kill it"));
  }
  // The default limit is far above what a small run holds.
  so.guard = host_memory_guard();
  EXPECT_NO_THROW((void)runtime::spawn(
      [](int) {
        for (int i = 0; i < 100000; ++i) sim::this_rank::yield();
      },
      2, so));
}

// Inputs a new user gets wrong: zero or negative rank counts, a folder where a file belongs, a
// missing --root. Each exits 2 naming the input, before anything runs.
TEST(Cli, NonsenseCountsAndFoldersAreRefused) {
  for (const std::string n : {"0", "-3"}) {
    Result r = run({"bench", "collectives", "-t", topo("ring4.yaml"), "--ranks", n});
    EXPECT_EQ(r.code, 2) << n;
    EXPECT_THAT(r.err, HasSubstr("--ranks")) << n;
    r = run({"demo", "-t", topo("ring4.yaml"), "--ranks", n});
    EXPECT_EQ(r.code, 2) << n;
    EXPECT_THAT(r.err, HasSubstr("--ranks")) << n;
  }
  const std::string folder = std::string(RANKSIM_SOURCE_DIR) + "/scenarios";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"run", folder},
                                               {"validate", folder},
                                               {"compare", folder, folder},
                                               {"topo", folder},
                                               {"demo", "-t", folder},
                                               {"bench", "collectives", "-t", folder}}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 2) << args[0];
    EXPECT_THAT(r.err, HasSubstr("is a folder; name a file")) << args[0];
  }
  const Result r = run({"list", "--root", "/no/such/folder"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("/no/such/folder"));
}

TEST(Cli, TopoPrintsWhatAFileHolds) {
  const Result r = run({"topo", topo("h100-cluster.yaml"), "--set", "nodes=16"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("h100-cluster"));
  EXPECT_THAT(r.out, HasSubstr("128"));
}

// An option given before the positionals takes one value: the words after it are the scenario,
// the topology or the tables, not more overrides.
TEST(Cli, AnOverrideBeforeThePositionalsTakesOneValue) {
  Result r = run({"topo", "--set", "nodes=16", topo("h100-cluster.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("128"));
  r = run(
      {"run", "--set", "workload.collectives.sizes=512MiB:1GiB", testing::scenario("allreduce-sweep-dgx-h100.yaml")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("allreduce-sweep-dgx-h100"));
  const std::string data = std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/";
  r = run({"calibrate", "--check", "-t", topo("dgx-h100.yaml"), "--ranks", "8", "--set", "nodes=1",
           data + "h100sxm_1node8gpu_all_gather_xxrjun.csv", data + "h100sxm_1node8gpu_reduce_scatter_xxrjun.csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("h100sxm_1node8gpu_all_gather_xxrjun.csv: ring"));
  EXPECT_THAT(r.out, HasSubstr("h100sxm_1node8gpu_reduce_scatter_xxrjun.csv: ring"));
}

}  // namespace
}  // namespace ranksim::app

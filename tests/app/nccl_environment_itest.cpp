// NCCL's tuning variables in the environment (app/nccl_environment.h): read as NCCL reads them,
// applied as the option or topology key that means the same, refused where the model has none.
// Each run under a variable is compared with the same run given the option or key instead.
#include "app/nccl_environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "app/cli_run.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::run;
using testing::topo;

NcclEnvironment read(const std::map<std::string, std::string>& vars) {
  return read_nccl_environment([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    (void)read(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sets variables for one test and restores the environment after it.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) {
      const char* had = std::getenv(k.c_str());
      saved_.emplace_back(k, had ? std::optional<std::string>(had) : std::nullopt);
      setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// The table's rows (the lines after the column header), without the header's comment lines.
std::vector<std::string> rows(const std::string& out) {
  std::vector<std::string> r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#' && line.find("size(B)") == std::string::npos) r.push_back(line);
  return r;
}

TEST(NcclEnvironment, NothingSetChangesNothing) {
  // Empty values are unset ones, as NCCL takes them.
  const NcclEnvironment env =
      read({{"NCCL_DEBUG", "INFO"}, {"NCCL_IB_HCA", "mlx5"}, {"NCCL_ALGO", ""}, {"NCCL_PAT_ENABLE", ""}});
  EXPECT_TRUE(env.empty());
  std::string algo = "auto", proto = "auto";
  std::vector<std::string> sets{"nodes=2"};
  apply_nccl_environment(env, algo, "--algo", proto, "--proto", sets, "collectives.");
  EXPECT_EQ(algo, "auto");
  EXPECT_EQ(proto, "auto");
  EXPECT_THAT(sets, ElementsAre("nodes=2"));
}

TEST(NcclEnvironment, ReadsNcclsNamesInAnyCaseAndKeepsALists) {
  EXPECT_EQ(read({{"NCCL_ALGO", "Ring"}}).algorithm, "ring");
  EXPECT_EQ(read({{"NCCL_ALGO", "NVLSTree"}}).algorithm, "nvls_tree");
  EXPECT_EQ(read({{"NCCL_ALGO", "CollnetDirect"}}).algorithm, "collnet");
  EXPECT_EQ(read({{"NCCL_ALGO", "^nvls,nvlstree"}}).algorithm, "^nvls,nvlstree");
  EXPECT_EQ(read({{"NCCL_PROTO", "LL128"}}).protocol, "LL128");
  const NcclEnvironment env = read({{"NCCL_ALGO", "Tree"}, {"NCCL_BUFFSIZE", "8388608"}});
  EXPECT_EQ(env.describe(), "NCCL_ALGO=Tree NCCL_BUFFSIZE=8388608");
}

TEST(NcclEnvironment, TheChoiceFillsAnAutoOptionAndRefusesADifferentOne) {
  const NcclEnvironment env = read({{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}});
  std::string algo = "auto", proto = "";
  apply_nccl_choice(env, algo, "--algo", proto, "--proto");
  EXPECT_EQ(algo, "ring");
  EXPECT_EQ(proto, "Simple");
  std::string same = "RING", p2 = "simple";
  apply_nccl_choice(env, same, "--algo", p2, "--proto");  // the same names: no conflict
  EXPECT_EQ(same, "RING");
  std::string other = "tree", p3 = "auto";
  try {
    apply_nccl_choice(env, other, "--algo", p3, "--proto");
    FAIL() << "a different --algo was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("NCCL_ALGO is set in the environment to 'Ring', but --algo is 'tree'"));
  }
}

TEST(NcclEnvironment, TuningVariablesBecomeTheTopologysKeys) {
  const NcclEnvironment env = read({{"NCCL_NVLS_ENABLE", "0"},
                                    {"NCCL_BUFFSIZE", "8388608"},
                                    {"NCCL_P2P_NET_CHUNKSIZE", "524288"},
                                    {"NCCL_NVLS_CHUNKSIZE", "131072"},
                                    {"NCCL_NVLSTREE_MAX_CHUNKSIZE", "65536"}});
  std::vector<std::string> sets{"nodes=4"};
  apply_nccl_sets(env, sets, "topology.collectives.");
  EXPECT_THAT(sets,
              ElementsAre("topology.collectives.nvls=false", "topology.collectives.buffer_size=8388608B",
                          "topology.collectives.p2p_chunk_size=524288B", "topology.collectives.nvls_chunk_size=131072B",
                          "topology.collectives.nvls_tree_max_chunk_size=65536B", "nodes=4"));
  EXPECT_TRUE(read({{"NCCL_NVLS_ENABLE", "1"}}).collectives.empty());  // as the hardware has it
}

TEST(NcclEnvironment, ChannelCountsInEitherNameBecomeTheClamps) {
  const NcclEnvironment env = read({{"NCCL_MIN_CTAS", "24"}, {"NCCL_MAX_NCHANNELS", "32"}});
  ASSERT_EQ(env.collectives.size(), 2u);
  EXPECT_EQ(env.collectives[0], (std::pair<std::string, std::string>{"min_channels", "24"}));
  EXPECT_EQ(env.collectives[1], (std::pair<std::string, std::string>{"max_channels", "32"}));
  // Both names set: the larger minimum and the smaller maximum, as NCCL takes them.
  const NcclEnvironment both = read(
      {{"NCCL_MIN_CTAS", "8"}, {"NCCL_MIN_NCHANNELS", "12"}, {"NCCL_MAX_CTAS", "32"}, {"NCCL_MAX_NCHANNELS", "20"}});
  ASSERT_EQ(both.collectives.size(), 2u);
  EXPECT_EQ(both.collectives[0].second, "12");
  EXPECT_EQ(both.collectives[1].second, "20");
  EXPECT_THAT(error_of({{"NCCL_MAX_CTAS", "65"}}), HasSubstr("NCCL_MAX_CTAS='65'"));
  EXPECT_THAT(error_of({{"NCCL_MIN_CTAS", "x"}}), HasSubstr("a channel count from 1 to 64"));
}

TEST(NcclEnvironment, ASetOfTheSameKeyIsAnError) {
  const NcclEnvironment env = read({{"NCCL_BUFFSIZE", "8388608"}});
  std::vector<std::string> sets{"collectives.buffer_size=4MiB"};
  try {
    apply_nccl_sets(env, sets, "collectives.");
    FAIL() << "both were accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--set collectives.buffer_size=4MiB"));
    EXPECT_THAT(e.what(), HasSubstr("NCCL_BUFFSIZE=8388608"));
  }
}

TEST(NcclEnvironment, MalformedValuesNameTheVariable) {
  EXPECT_THAT(error_of({{"NCCL_ALGO", "Rong"}}), HasSubstr("NCCL_ALGO in the environment"));
  EXPECT_THAT(error_of({{"NCCL_ALGO", "Rong"}}), HasSubstr("unknown name 'Rong'"));
  EXPECT_THAT(error_of({{"NCCL_PROTO", "LL64"}}), HasSubstr("NCCL_PROTO in the environment"));
  EXPECT_THAT(error_of({{"NCCL_NVLS_ENABLE", "yes"}}), HasSubstr("NCCL_NVLS_ENABLE='yes'"));
  EXPECT_THAT(error_of({{"NCCL_BUFFSIZE", "4M"}}), HasSubstr("NCCL_BUFFSIZE='4M'"));
  EXPECT_THAT(error_of({{"NCCL_BUFFSIZE", "0"}}), HasSubstr("above 0"));
  EXPECT_THAT(error_of({{"NCCL_P2P_NET_CHUNKSIZE", "-1"}}), HasSubstr("NCCL_P2P_NET_CHUNKSIZE='-1'"));
}

TEST(NcclEnvironment, VariablesTheModelHasNoKeyForAreRefusedWithWhatToDo) {
  EXPECT_THAT(error_of({{"NCCL_NTHREADS", "256"}}), HasSubstr("NCCL_NTHREADS=256 is set in the environment"));
  EXPECT_THAT(error_of({{"NCCL_COLLNET_ENABLE", "1"}}), HasSubstr("'^collnetdirect,collnetchain'"));
  EXPECT_THAT(error_of({{"NCCL_PAT_ENABLE", "0"}}), HasSubstr("--algo '^pat'"));
  EXPECT_THAT(error_of({{"NCCL_TUNER_CONFIG_FILE", "t.conf"}}), HasSubstr("collectives.tuner"));
}

TEST(NcclEnvironmentCli, BenchUnderNcclAlgoTimesAsTheAlgoOption) {
  const std::vector<std::string> args{"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1MiB:1GiB"};
  auto with = args;
  with.insert(with.end(), {"--algo", "ring"});
  const auto forced = run(with);
  ASSERT_EQ(forced.code, 0) << forced.err;
  const auto plain = run(args);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_NE(rows(plain.out), rows(forced.out)) << "the default choice is NVLS here: the test needs a difference";
  const ScopedEnv env(std::map<std::string, std::string>{{"NCCL_ALGO", "Ring"}});
  const auto r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(rows(r.out), rows(forced.out));
  EXPECT_THAT(r.out, HasSubstr("# NCCL's environment, read as NCCL reads it: NCCL_ALGO=Ring"));
  with.back() = "tree";
  const auto clash = run(with);
  EXPECT_EQ(clash.code, 2);
  EXPECT_THAT(clash.err, HasSubstr("NCCL_ALGO is set in the environment to 'Ring', but --algo is 'tree'"));
}

TEST(NcclEnvironmentCli, BenchUnderTuningVariablesTimesAsTheirKeys) {
  struct Case {
    std::vector<std::string> args, sets;
    std::map<std::string, std::string> vars;
  };
  const std::vector<Case> cases{
      // AWS p5's all_to_all: each peer's bytes cut into NCCL_P2P_NET_CHUNKSIZE messages.
      {{"bench", "collectives", "-t", topo("aws-p5.yaml"), "--op", "all_to_all", "--sizes", "1MiB:256MiB"},
       {"collectives.p2p_chunk_size=128KiB"},
       {{"NCCL_P2P_NET_CHUNKSIZE", "131072"}}},
      // #309's 8 DGX H100 nodes under NCCL_MIN_CTAS=24 (docs: its ctas24 table), and 8 channels at most.
      {{"bench", "collectives", "-t", topo("h100-cluster.yaml"), "--set", "nodes=8", "--sizes", "1MiB:1GiB"},
       {"collectives.channels=24"},
       {{"NCCL_MIN_CTAS", "24"}}},
      {{"bench", "collectives", "-t", topo("h100-cluster.yaml"), "--set", "nodes=8", "--sizes", "1MiB:1GiB"},
       {"collectives.channels=8"},
       {{"NCCL_MAX_NCHANNELS", "8"}}},
      // Two DGX H100s' all_reduce: NVLS trees off, and a larger Simple buffer.
      {{"bench", "collectives", "-t", topo("h100-cluster.yaml"), "--op", "all_reduce", "--sizes", "1MiB:1GiB"},
       {"collectives.nvls=false", "collectives.buffer_size=16MiB"},
       {{"NCCL_NVLS_ENABLE", "0"}, {"NCCL_BUFFSIZE", "16777216"}}},
  };
  for (const Case& c : cases) {
    auto with = c.args;
    for (const std::string& set : c.sets) with.insert(with.end(), {"--set", set});
    const auto keyed = run(with);
    ASSERT_EQ(keyed.code, 0) << keyed.err;
    ASSERT_NE(rows(run(c.args).out), rows(keyed.out)) << c.sets.front() << " must move the times for this test";
    const ScopedEnv env(c.vars);
    const auto r = run(c.args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(rows(r.out), rows(keyed.out)) << c.sets.front();
  }
}

TEST(NcclEnvironmentCli, RunUnderNcclAlgoTimesAsTheScenariosKey) {
  const auto keyed = run({"run", testing::scenario("quickstart.yaml"), "--set", "algorithm=ring"});
  const ScopedEnv env(std::map<std::string, std::string>{{"NCCL_ALGO", "Ring"}});
  const auto r = run({"run", testing::scenario("quickstart.yaml")});
  EXPECT_EQ(r.code, keyed.code) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ring/Simple/16ch"));
  // The same run, and the summary says where its algorithm came from.
  const std::string said = "  NCCL's environment, read as NCCL reads it: NCCL_ALGO=Ring\n";
  ASSERT_THAT(r.out, HasSubstr(said));
  std::string without = r.out;
  without.erase(without.find(said), said.size());
  EXPECT_EQ(without, keyed.out);
  const std::string json = (std::filesystem::temp_directory_path() / "ranksim_env_run_test.json").string();
  ASSERT_EQ(run({"run", testing::scenario("quickstart.yaml"), "--json", json}).code, keyed.code);
  const std::vector<std::string> vars = nlohmann::json::parse(testing::slurp(json)).at("nccl_environment");
  EXPECT_THAT(vars, ElementsAre("NCCL_ALGO=Ring"));
  std::filesystem::remove(json);
}

// nccl-tests' own command line pastes as it is: -n and -w are its iterations and warm-up calls
// (once ranksim's ranks), which leave each size's one-call time as it is and are said so.
TEST(NcclEnvironmentCli, NcclTestsIterationFlagsAreItsOwn) {
  const std::string json = (std::filesystem::temp_directory_path() / "ranksim_iters_test.json").string();
  const std::vector<std::string> args{
      "bench", "collectives", "-t", topo("h100-cluster.yaml"), "-b", "8", "-e", "8G", "-f", "2", "-g", "1"};
  const auto plain = run(args);
  ASSERT_EQ(plain.code, 0) << plain.err;
  auto pasted = args;
  pasted.insert(pasted.end(), {"-n", "20", "-w", "5", "-J", json});
  const auto r = run(pasted);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(rows(r.out).size(), rows(plain.out).size());  // 16 ranks still, every size
  EXPECT_THAT(r.out, HasSubstr("on 16 ranks"));
  EXPECT_THAT(r.out, HasSubstr("# nccl-tests -n 20 -w 5: ranksim times each size's call once"));
  const nlohmann::json written = nlohmann::json::parse(testing::slurp(json));
  const std::vector<std::string> written_args = written.at("args");
  ASSERT_GE(written_args.size(), 4u);
  EXPECT_THAT(std::vector<std::string>(written_args.end() - 4, written_args.end()), ElementsAre("-n", "20", "-w", "5"));
  std::filesystem::remove(json);
  EXPECT_EQ(run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "-n", "0"}).code, 2);
  EXPECT_EQ(run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "-w", "-1"}).code, 2);
  const auto ranks = run({"bench", "collectives", "-t", topo("h100-cluster.yaml"), "--ranks", "4", "--sizes", "1MiB"});
  ASSERT_EQ(ranks.code, 0) << ranks.err;
  EXPECT_THAT(ranks.out, HasSubstr("on 4 ranks"));
}

TEST(NcclEnvironmentCli, TheJsonKeepsTheVariablesRead) {
  const std::string json = (std::filesystem::temp_directory_path() / "ranksim_env_test.json").string();
  const ScopedEnv env(std::map<std::string, std::string>{{"NCCL_ALGO", "Ring"}, {"NCCL_BUFFSIZE", "8388608"}});
  const auto r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1MiB", "-J", json});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> written_env = nlohmann::json::parse(testing::slurp(json)).at("env");
  EXPECT_THAT(written_env, ElementsAre("NCCL_ALGO=ring", "NCCL_BUFFSIZE=8388608"));
  std::filesystem::remove(json);
}

TEST(NcclEnvironmentCli, DemoRefusesAChoiceItCannotTake) {
  const ScopedEnv env(std::map<std::string, std::string>{{"NCCL_PROTO", "LL"}});
  const auto r = run({"demo", "--topology", topo("dgx-h100.yaml")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("NCCL_PROTO=LL"));
}

TEST(NcclEnvironmentCli, ARefusedVariableStopsTheBenchBeforeAnyOutput) {
  const ScopedEnv env(std::map<std::string, std::string>{{"NCCL_PAT_ENABLE", "0"}});
  const auto r = run({"bench", "collectives", "-t", topo("dgx-h100.yaml"), "--sizes", "1MiB"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("NCCL_PAT_ENABLE=0 is set in the environment"));
}

}  // namespace
}  // namespace ranksim::app

// `ranksim run`'s outputs are refused before the run when they could not all be written or would
// destroy something (two outputs on one path, an output on an input, a trace a sweep never
// records, a missing folder), and written through a symbolic link without replacing it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/cli_run.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::run;
using Result = testing::CliResult;

using testing::scenario;

using testing::slurp;

class RunOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ranksim_outputs_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(RunOutputs, TwoOutputsOnOnePathAreRefusedBeforeTheRun) {
  const Result r = run({"run", scenario("quickstart.yaml"), "--json", at("x"), "--trace", at("x")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--trace and --json both name"));
  EXPECT_FALSE(fs::exists(at("x")));
  const Result r2 = run({"run", scenario("quickstart.yaml"), "--json", at("y"), "--report", dir_.string() + "/./y"});
  EXPECT_EQ(r2.code, 2);
  EXPECT_THAT(r2.err, HasSubstr("both name"));
}

TEST_F(RunOutputs, AnOutputOnAnInputIsRefused) {
  // A copy of the scenario, so that a failing check destroys nothing shipped.
  std::string text = slurp(scenario("quickstart.yaml"));
  const std::string rel = "../topologies/dgx-h100.yaml";
  ASSERT_NE(text.find(rel), std::string::npos);
  text.replace(text.find(rel), rel.size(), std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml");
  std::ofstream(at("q.yaml")) << text;
  const Result r = run({"run", at("q.yaml"), "--json", at("q.yaml")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("is the scenario, which the run reads"));
  EXPECT_EQ(slurp(at("q.yaml")), text);
}

TEST_F(RunOutputs, ASweepRefusesATraceItWouldNeverWrite) {
  const Result r =
      run({"run", scenario("allreduce-sweep-dgx-h100.yaml"), "--trace", at("t.json"), "--json", at("s.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("records no trace"));
  EXPECT_FALSE(fs::exists(at("s.json"))) << "nothing is written when the run is refused";
}

TEST_F(RunOutputs, AMissingFolderIsFoundBeforeTheRun) {
  const Result r = run({"run", scenario("quickstart.yaml"), "--json", at("missing/s.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("does not exist"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("virtual time"))) << "refused before the run";
  const Result d = run({"run", scenario("cp-validation-thd.yaml"), "--set", "dump=" + at("missing/d.safetensors")});
  EXPECT_EQ(d.code, 2);
  EXPECT_THAT(d.err, HasSubstr("dump '"));
  EXPECT_THAT(d.err, HasSubstr("does not exist"));
}

TEST_F(RunOutputs, ASymbolicLinkIsWrittenThrough) {
  std::ofstream(at("real.json")) << "old";
  fs::create_symlink(at("real.json"), at("link.json"));
  const Result r = run({"run", scenario("quickstart.yaml"), "--json", at("link.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(at("link.json"))));
  EXPECT_THAT(slurp(at("real.json")), HasSubstr("\"scenario\""));
}

}  // namespace
}  // namespace ranksim::app

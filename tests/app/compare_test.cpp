// `ranksim compare`: a run's --json summary against another of the same scenario, per rank and per
// collective, with the ratio measured / predicted; errors for files that cannot be compared.
#include "app/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/cli.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRoot = RANKSIM_SOURCE_DIR;

fs::path dir() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_compare_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

int cli(std::vector<std::string> args, std::string* out, std::string* err) {
  args.insert(args.begin(), "ranksim");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream o, e;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), o, e);
  *out = o.str();
  *err = e.str();
  return code;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// Every "time_us", "clock_us", "compute_us", "comm_us" and the total multiplied by k: a
// "measured" run that took k times as long everywhere. (No std::regex: GCC 12 warns inside it
// under the sanitizers.)
std::string scaled(const std::string& json, double k) {
  std::string out;
  std::size_t i = 0;
  while (i < json.size()) {
    const std::size_t q = json.find("_us\": ", i);
    if (q == std::string::npos) break;
    const std::size_t start = q + 6;
    std::size_t end = start;
    while (end < json.size() && (std::isdigit(static_cast<unsigned char>(json[end])) || json[end] == '.')) ++end;
    out += json.substr(i, start - i);
    if (end > start) {  // a number (pipeline_wait_us holds a list: left as it is)
      out += std::to_string(std::stod(json.substr(start, end - start)) * k);
    } else {
      out += json.substr(start, end - start);
    }
    i = end;
  }
  return out + json.substr(i);
}

TEST(Compare, RatiosPerRankAndPerCollective) {
  const fs::path d = dir();
  std::string out, err;
  ASSERT_EQ(cli({"run", kRoot + "/scenarios/multimodal-fan-in-dgx-h100.yaml", "--set", "train.steps=2", "--json",
                 (d / "p.json").string()},
                &out, &err),
            0)
      << err;
  const std::string predicted = read(d / "p.json");
  std::ofstream(d / "m.json") << scaled(predicted, 1.5);
  ASSERT_EQ(cli({"compare", (d / "p.json").string(), (d / "m.json").string()}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("compare: multimodal-fan-in-dgx-h100, 8 ranks"));
  EXPECT_THAT(out, HasSubstr("ratio 1.500"));
  EXPECT_THAT(out, HasSubstr("bridge.fan_in"));
  EXPECT_THAT(out, HasSubstr("bridge.cp_sum"));
  EXPECT_THAT(out, Not(HasSubstr("only in")));
  // every rank and every collective line carries the 1.5 ratio (rounded to 3 places)
  std::istringstream lines(out);
  int ratios = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("all_reduce") == 0 || line.find("all_gather") == 0) {
      EXPECT_THAT(line, HasSubstr(" 1.500  ")) << line;
      ++ratios;
    }
  }
  EXPECT_GT(ratios, 5);
  // a collective the measured run lacks is listed, not dropped
  std::string m = scaled(predicted, 2.0);
  // (in the collectives list: ranks_detail names groups too)
  const std::size_t at = m.find("\"group\": \"bridge.fan_in\"", m.find("\"collectives\""));
  ASSERT_NE(at, std::string::npos);
  m.replace(at, 24, "\"group\": \"bridge.other\"");
  std::ofstream(d / "m2.json") << m;
  ASSERT_EQ(cli({"compare", (d / "p.json").string(), (d / "m2.json").string()}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("only in the predicted run"));
  EXPECT_THAT(out, HasSubstr("only in the measured run"));
  EXPECT_THAT(out, HasSubstr("bridge.other"));
}

TEST(Compare, FilesThatCannotBeComparedAreErrors) {
  const fs::path d = dir();
  std::string out, err;
  ASSERT_EQ(cli({"run", kRoot + "/scenarios/quickstart.yaml", "--json", (d / "q.json").string()}, &out, &err), 0)
      << err;
  ASSERT_EQ(cli({"run", kRoot + "/scenarios/multimodal-fan-out-dgx-h100.yaml", "--set", "train.steps=1", "--json",
                 (d / "f.json").string()},
                &out, &err),
            0)
      << err;
  EXPECT_EQ(cli({"compare", (d / "q.json").string(), (d / "f.json").string()}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("compare two runs of the same scenario"));
  EXPECT_EQ(cli({"compare", (d / "q.json").string(), (d / "missing.json").string()}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("missing.json"));
  std::ofstream(d / "bad.json") << "{\"scenario\": [1, 2";
  EXPECT_EQ(cli({"compare", (d / "q.json").string(), (d / "bad.json").string()}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("is not JSON"));
  std::ofstream(d / "other.json") << "{\"name\": \"x\"}";
  EXPECT_EQ(cli({"compare", (d / "other.json").string(), (d / "q.json").string()}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("not a ranksim run summary"));
  fs::remove_all(d);
}

// Summaries that parse but cannot be a run's: each is refused, naming the field and where it is.
TEST(Compare, SummariesThatCannotBeARunsAreRefusedNamingTheField) {
  const fs::path d = dir();
  std::string out, err;
  ASSERT_EQ(cli({"run", kRoot + "/scenarios/quickstart.yaml", "--json", (d / "q.json").string()}, &out, &err), 0)
      << err;
  std::ifstream in(d / "q.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  const auto refused = [&](const std::string& what, const std::function<void(nlohmann::json&)>& edit,
                           const std::string& message) {
    nlohmann::json j = good;
    edit(j);
    std::ofstream(d / "bad.json") << j.dump();
    EXPECT_EQ(cli({"compare", (d / "q.json").string(), (d / "bad.json").string()}, &out, &err), 2) << what;
    EXPECT_THAT(err, HasSubstr(message)) << what;
  };
  refused(
      "fewer rows than ranks", [](nlohmann::json& j) { j["ranks_detail"].erase(0); },
      "has 7 rows in \"ranks_detail\" but \"ranks\" is 8");
  refused(
      "a negative time", [](nlohmann::json& j) { j["ranks_detail"][2]["comm_us"] = -1.0; },
      "ranks_detail[2].comm_us must be a time in microseconds (a number >= 0), got -1.0");
  refused(
      "a time as text", [](nlohmann::json& j) { j["virtual_time_us"] = "fast"; },
      "virtual_time_us must be a time in microseconds (a number >= 0), got \"fast\"");
  refused(
      "collectives not a list", [](nlohmann::json& j) { j["collectives"] = "x"; },
      "collectives must be a list, got \"x\"");
  refused(
      "zero calls", [](nlohmann::json& j) { j["collectives"][0]["calls"] = 0; },
      "collectives[0].calls must be an integer >= 1, got 0");
  refused(
      "zero ranks", [](nlohmann::json& j) { j["ranks"] = 0; }, "ranks must be an integer >= 1, got 0");
  fs::remove_all(d);
}

}  // namespace
}  // namespace ranksim::app

#include "sim/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/error.h"
#include "sim/io.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

TEST(Trace, FormatsMicrosecondsExactlyFromPicoseconds) {
  EXPECT_EQ(format_us(Time::ps(1)), "0.000001");
  EXPECT_EQ(format_us(Time::us(3) + Time::ps(250)), "3.000250");
  EXPECT_EQ(format_us(Time::s(2)), "2000000.000000");
  EXPECT_EQ(format_us(Time::zero() - Time::ns(1)), "-0.001000");
}

TEST(Trace, WritesChromeTraceJsonWithOneTrackPerRank) {
  Trace t;
  t.set_num_ranks(2);
  t.add({1, SpanKind::comm, Time::ns(1500), Time::us(4), "all_reduce \"tp\"", {{"bytes", "4096"}, {"group", "tp0"}}});
  t.add({0, SpanKind::compute, Time::zero(), Time::ns(1500), "matmul", {}});
  std::ostringstream os;
  t.write_chrome_json(os);
  const std::string json = os.str();
  EXPECT_THAT(json, HasSubstr("\"traceEvents\":["));
  EXPECT_THAT(json, HasSubstr("\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"rank 1\"}"));
  EXPECT_THAT(json, HasSubstr("{\"ph\":\"X\",\"pid\":0,\"tid\":1,\"cat\":\"comm\",\"name\":"
                              "\"all_reduce \\\"tp\\\"\",\"ts\":1.500000,\"dur\":2.500000,"
                              "\"args\":{\"bytes\":\"4096\",\"group\":\"tp0\"}}"));
  EXPECT_THAT(json, HasSubstr("\"cat\":\"compute\",\"name\":\"matmul\",\"ts\":0.000000,"
                              "\"dur\":1.500000}"));
  EXPECT_EQ(json.substr(json.size() - 4), "\n]}\n");
}

TEST(Trace, WritesCountersAsCounterEventsWithExactIntegers) {
  Trace t;
  t.set_num_ranks(1);
  t.add_counter({"memory rank 0 (bytes)", Time::ns(2500), {{"parameters", 6442450944.0}, {"activations", 0.0}}});
  t.add_counter({"memory rank 0 (bytes)", Time::us(3), {{"parameters", 9007199254740992.0}, {"activations", 12.0}}});
  std::ostringstream os;
  t.write_chrome_json(os);
  const std::string json = os.str();
  EXPECT_THAT(json, HasSubstr("{\"ph\":\"C\",\"pid\":0,\"name\":\"memory rank 0 (bytes)\",\"ts\":2.500000,"
                              "\"args\":{\"parameters\":6442450944,\"activations\":0}}"));
  EXPECT_THAT(json, HasSubstr("\"ts\":3.000000,\"args\":{\"parameters\":9007199254740992,\"activations\":12}}"));
  EXPECT_EQ(json.substr(json.size() - 4), "\n]}\n");
}

TEST(Trace, SaveIsAtomic) {
  const auto dir = std::filesystem::temp_directory_path() / "ranksim_trace_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "t.json").string();
  std::filesystem::remove(path);
  Trace t;
  t.add({0, SpanKind::wait, Time::zero(), Time::ns(1), "w", {}});
  t.save(path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_THAT(ss.str(), HasSubstr("\"cat\":\"wait\""));

  // A writer that fails half-way leaves the old file untouched and no temporary behind.
  EXPECT_THROW(write_file_atomically(path,
                                     [](std::ostream& out) {
                                       out << "partial";
                                       throw Error("writer failed");
                                     }),
               Error);
  std::ifstream again(path);
  std::stringstream ss2;
  ss2 << again.rdbuf();
  EXPECT_EQ(ss2.str(), ss.str());
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u);
  EXPECT_THROW(t.save((dir / "no-such-dir" / "t.json").string()), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ranksim::sim

// `ranksim run --report`: the HTML renders in a real browser (Debian's headless Chromium) with
// its summary, checks, timeline spans and busbw plot points.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "app/cli.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kRoot = RANKSIM_SOURCE_DIR;

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

const char* chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(c, X_OK) == 0) return c;
  return nullptr;
}

std::string browser(const std::string& args, const fs::path& profile) {
  return std::string(chromium()) +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
         "--disable-background-networking --disable-component-update --disable-sync "
         "--user-data-dir=" +
         profile.string() + " " + args + " 2>/dev/null";
}

fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_report_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

int run_report(const std::string& scenario, const fs::path& html) {
  const std::string s = kRoot + "/scenarios/" + scenario;
  const std::string h = html.string();
  const char* argv[] = {"ranksim", "run", s.c_str(), "--report", h.c_str()};
  std::ostringstream out, err;
  return run_cli(5, argv, out, err);
}

TEST(Report, StepsReportRendersWithTimelineAndChecks) {
  if (chromium() == nullptr) GTEST_SKIP() << "no chromium (scripts/setup.sh installs it)";
  const fs::path dir = scratch();
  const fs::path html = dir / "quickstart.html";
  ASSERT_EQ(run_report("quickstart.yaml", html), 0);
  const std::string dom = run_command(browser("--dump-dom file://" + html.string(), dir / "p1"));
  EXPECT_THAT(dom, HasSubstr("<h1>ranksim: quickstart</h1>"));
  EXPECT_THAT(dom, HasSubstr("id=\"timeline\""));
  EXPECT_THAT(dom, HasSubstr("class=\"span compute\""));
  EXPECT_THAT(dom, HasSubstr("class=\"span comm\""));
  EXPECT_THAT(dom, HasSubstr("<li class=\"pass\">pass: virtual time"));
  EXPECT_THAT(dom, HasSubstr("id=\"ranks\""));
  const fs::path png = dir / "quickstart.png";
  run_command(browser("--window-size=1100,900 --screenshot=" + png.string() + " file://" + html.string(), dir / "p2"));
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 10000u);  // a rendered page, not a blank one
  fs::remove_all(dir);
}

TEST(Report, SweepReportPlotsBusBandwidth) {
  if (chromium() == nullptr) GTEST_SKIP() << "no chromium (scripts/setup.sh installs it)";
  const fs::path dir = scratch();
  const fs::path html = dir / "sweep.html";
  ASSERT_EQ(run_report("allreduce-sweep-dgx-h100.yaml", html), 0);
  const std::string dom = run_command(browser("--dump-dom file://" + html.string(), dir / "p"));
  EXPECT_THAT(dom, HasSubstr("id=\"busbw\""));
  size_t points = 0;
  for (size_t at = dom.find("class=\"point\""); at != std::string::npos; at = dom.find("class=\"point\"", at + 1))
    ++points;
  EXPECT_EQ(points, 28u);  // 8 B .. 1 GiB, doubling
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ranksim::app

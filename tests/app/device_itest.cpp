// `ranksim run --device`: shipped scenarios with their ops on the emulated device write the same
// dump bytes and the same summary as on the CPU (the emulated device runs the GPU kernels in the
// CPU ops' order); a device that is not there is a clear error with no output written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/cli_run.h"
#include "app/devices.h"
#include "runtime/device/device.h"

namespace ranksim::app {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using testing::run;
using Result = testing::CliResult;

using testing::scenario;

using testing::slurp;

// The summary without the line that names the device.
std::string without_device(const std::string& json) {
  std::string out;
  std::istringstream in(json);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"device\"") == std::string::npos) out += line + "\n";
  }
  return out;
}

class DeviceRun : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(DeviceRun, EmulatedDeviceWritesTheCpuRunsBytes) {
  const std::vector<std::string> args = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("ranksim_device_itest_" + fs::path(args[0]).stem().string());
  fs::create_directories(dir);
  std::string dumps[2], summaries[2];
  const char* devices[2] = {"cpu", "emulated"};
  for (int i = 0; i < 2; ++i) {
    const fs::path dump = dir / (std::string(devices[i]) + ".safetensors"),
                   json = dir / (std::string(devices[i]) + ".json");
    std::vector<std::string> cmd = {"run",    scenario(args[0]), "--device", devices[i],
                                    "--json", json.string(),     "--set",    "dump=" + dump.string()};
    for (std::size_t j = 1; j < args.size(); ++j) cmd.insert(cmd.end(), {"--set", args[j]});
    const Result r = run(cmd);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    if (i == 1) {
      EXPECT_THAT(r.out, HasSubstr("ops compute on the emulated device"));
      EXPECT_THAT(r.out, HasSubstr("device emulated: "));
    }
    dumps[i] = slurp(dump);
    summaries[i] = slurp(json);
  }
  ASSERT_FALSE(dumps[0].empty());
  EXPECT_TRUE(dumps[0] == dumps[1]) << "the dumps differ";
  EXPECT_THAT(summaries[1], HasSubstr("\"device\": \"emulated\""));
  EXPECT_EQ(without_device(summaries[0]), without_device(summaries[1]));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, DeviceRun,
                         ::testing::Values(std::vector<std::string>{"cp-validation-bshd.yaml"},
                                           std::vector<std::string>{"cp-validation-thd.yaml"},
                                           std::vector<std::string>{"train-tp2-cp2-dp2-dgx-h100.yaml",
                                                                    "train.steps=2"}),
                         [](const auto& p) { return testing::param_name(p.param[0]); });

TEST(DeviceRunErrors, AGpuThatIsNotThereIsAClearErrorAndWritesNothing) {
  const fs::path dump = fs::temp_directory_path() / "ranksim_device_itest_nogpu.safetensors";
  fs::remove(dump);
  std::shared_ptr<runtime::Device> gpu;
  try {
    gpu = app::make_device("gpu");
  } catch (const std::exception&) {
  }
  if (gpu) GTEST_SKIP() << "this machine has a GPU (" << gpu->name() << ")";
  const Result r =
      run({"run", scenario("cp-validation-thd.yaml"), "--device", "gpu", "--set", "dump=" + dump.string()});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("--device gpu"));
  EXPECT_THAT(r.err, HasSubstr("--device cpu"));
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(fs::exists(dump));
}

TEST(DeviceRunErrors, AnUnknownDeviceIsRefused) {
  const Result r = run({"run", scenario("cp-validation-thd.yaml"), "--device", "tpu"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("--device"));
  EXPECT_THROW((void)app::make_device("tpu"), std::exception);
}

}  // namespace
}  // namespace ranksim::app

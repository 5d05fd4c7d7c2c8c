// `ranksim bench ops`: the kernel-profile sweep, run on the emulated device (the pipeline), and
// its refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "app/cli_run.h"
#include "app/devices.h"
#include "sim/compute.h"
#include "sim/error.h"
#include "sim/kernel_profile.h"
#include "sim/topology.h"

namespace ranksim::app::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("ranksim_bench_ops_" + std::to_string(::getpid()));
  fs::create_directories(d);
  fs::remove(d / name);
  return d / name;
}

TEST(BenchOps, TheEmulatedSweepWritesAProfileThatTopologiesUse) {
  const fs::path out = scratch("emulated.yaml");
  const CliResult r =
      run({"bench", "ops",       "--device", "emulated", "-t",   topo("dgx-h100.yaml"), "--m", "8,16",  "--n",
           "8",     "--k",       "8,32",     "--seq",    "8,16", "--head-dims",         "4,8", "--sms", "4",
           "-o",    out.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bench ops on emulated (4 SMs)"));
  EXPECT_THAT(r.out, HasSubstr("wrote " + out.string()));
  const sim::KernelProfile p = sim::load_kernel_profile(out.string());
  EXPECT_EQ(p.name, "emulated-bf16");
  EXPECT_EQ(p.sms, 4);
  const sim::KernelProfile::GemmGrid& g = p.gemm.at("bf16");
  EXPECT_EQ(g.m, (std::vector<double>{8, 16}));
  EXPECT_EQ(g.n, (std::vector<double>{8}));
  EXPECT_EQ(g.k, (std::vector<double>{8, 32}));
  ASSERT_EQ(g.flops.size(), 4u);
  for (double f : g.flops) EXPECT_GT(f, 0);
  // Forward and backward, causal and not, per head dim, each over both key lengths.
  ASSERT_EQ(p.attention.at("bf16").size(), 8u);
  for (const auto& c : p.attention.at("bf16")) {
    EXPECT_EQ(c.seq, (std::vector<double>{8, 16}));
    for (double f : c.flops) EXPECT_GT(f, 0);
  }
  EXPECT_GT(p.memory_efficiency, 0);
  EXPECT_LE(p.memory_efficiency, 1);

  // A topology pointed at it times a GEMM at a grid point by the measured rate.
  const sim::Topology t =
      sim::Topology::load_file(topo("dgx-h100.yaml"), {"device_kinds.h100-sxm.kernel_profile=" + out.string()});
  const sim::ComputeModel model(t);
  sim::KernelShape s;
  s.cls = sim::KernelClass::gemm;
  s.m = 16;
  s.n = 8;
  s.k = 32;
  const double flops = 2.0 * 16 * 8 * 32;
  const double measured = g.flops[(1 * 1 + 0) * 2 + 1];
  EXPECT_NEAR(model.time(0, "matmul", s, flops, 0, "bf16").time.seconds(), std::max(flops / measured, 3e-6), 1e-11);
}

TEST(BenchOps, WithoutAGpuItSaysSoAndWritesNothing) {
  try {
    (void)make_device("gpu");
    GTEST_SKIP() << "a GPU is present: the sweep would run on it";
  } catch (const Error&) {
  }
  const fs::path out = scratch("gpu.yaml");
  const CliResult r = run({"bench", "ops", "-t", topo("dgx-h100.yaml"), "-o", out.string()});
  EXPECT_EQ(r.code, 2);
  // Without a GPU, or in a build without the GPU backend (a sanitizer build): either way named.
  EXPECT_THAT(r.err, HasSubstr("--device gpu"));
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("needs a CUDA device"), HasSubstr("built without the GPU backend")));
  EXPECT_FALSE(fs::exists(out));
}

TEST(BenchOps, ABadGridIsRefusedBeforeAnythingRuns) {
  const fs::path out = scratch("bad.yaml");
  CliResult r =
      run({"bench", "ops", "--device", "emulated", "-t", topo("dgx-h100.yaml"), "--m", "32,16", "-o", out.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--m: values must be ascending, got 16 after 32"));
  EXPECT_FALSE(fs::exists(out));
  r = run({"bench", "ops", "--device", "tpu", "-t", topo("dgx-h100.yaml"), "-o", out.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--device must be gpu or emulated, got 'tpu'"));
}

}  // namespace
}  // namespace ranksim::app::testing

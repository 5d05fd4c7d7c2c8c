#include "app/topo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace ranksim::app {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string report(const std::string& file, const std::vector<std::string>& overrides = {}) {
  const sim::Topology t = sim::Topology::load_file(std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + file, overrides);
  std::ostringstream out;
  print_topology(t, out);
  return out.str();
}

// The table row of a link kind, spaces squeezed: "nic up 16 50 GB/s 630 ns device -> leaf".
std::string row(const std::string& text, const std::string& kind) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string squeezed;
    for (char c : line)
      if (c != ' ' || (!squeezed.empty() && squeezed.back() != ' ')) squeezed += c;
    if (squeezed.rfind(kind + " ", 0) == 0) return squeezed;
  }
  return "(no row '" + kind + "')";
}

TEST(PrintTopology, DgxH100) {
  const std::string r = report("dgx-h100.yaml");
  EXPECT_THAT(r, HasSubstr("topology dgx-h100 ("));
  EXPECT_THAT(r, HasSubstr("1 node x 8 devices = 8 devices; devices node0.gpu0 .. node0.gpu7"));
  EXPECT_THAT(r, HasSubstr("device kind h100-sxm: 8 devices (8 per node)"));
  EXPECT_THAT(r, HasSubstr("peak: f32 66.9 TFLOP/s, f64 66.9 TFLOP/s, tf32 494.7 TFLOP/s, "
                           "bf16 989.4 TFLOP/s, f16 989.4 TFLOP/s, fp8 1.979 PFLOP/s"));
  EXPECT_THAT(r, HasSubstr("memory 80 GiB at 3.35 TB/s, launch overhead 3 us"));
  EXPECT_THAT(r, HasSubstr("fabric: switch 'nvswitch', 450 GB/s per device and direction, "
                           "700 ns device to device"));
  EXPECT_THAT(r, HasSubstr("network: 400 Gb/s (50 GB/s) NIC per device, 500 ns at each NIC"));
  EXPECT_EQ(row(r, "nvswitch up"), "nvswitch up 8 450 GB/s 350 ns device -> node nvswitch");
  EXPECT_EQ(row(r, "nic down"), "nic down 8 50 GB/s 500 ns ib -> device");
  EXPECT_THAT(r, HasSubstr("searched all 56 ordered pairs"));
  EXPECT_THAT(r, HasSubstr("node0.gpu0 -> node0.gpu1: latency 700 ns, bottleneck 450 GB/s, "
                           "2 links\n    node0.gpu0 -> node0.nvswitch -> node0.gpu1\n"));
}

TEST(PrintTopology, ClusterOfTwoNodes) {
  const std::string r = report("h100-cluster.yaml");
  EXPECT_THAT(r, HasSubstr("2 nodes x 8 devices = 16 devices"));
  EXPECT_THAT(r, HasSubstr("leaf: 32 nodes per group, rail-optimized"));
  EXPECT_THAT(r, HasSubstr("spine: 4 leaf groups per group, 130 ns per switch"));
  EXPECT_THAT(r, HasSubstr("core: top (up to 64 spine groups), 130 ns per switch"));
  EXPECT_EQ(row(r, "nic up"), "nic up 16 50 GB/s 630 ns device -> leaf");
  EXPECT_EQ(row(r, "leaf-spine up"), "leaf-spine up 8 100 GB/s 130 ns leaf -> spine");
  // The slowest route changes rail, so it climbs to the spine.
  EXPECT_THAT(r, HasSubstr("node0.gpu0 -> node1.gpu1: latency 1.39 us, bottleneck 50 GB/s, "
                           "4 links\n    node0.gpu0 -> leaf0.rail0 -> spine0 -> leaf0.rail1 -> "
                           "node1.gpu1\n"));
}

TEST(PrintTopology, SixteenThousandGpusAreSummarised) {
  const std::string r = report("h100-cluster.yaml", {"nodes=2048"});
  EXPECT_THAT(r, HasSubstr("2048 nodes x 8 devices = 16384 devices; devices node0.gpu0 .. "
                           "node2047.gpu7 (ids 0-16383, node-major)"));
  EXPECT_THAT(r, HasSubstr("device kind h100-sxm: 16384 devices (8 per node)"));
  EXPECT_THAT(r, HasSubstr("one link each way): 66592\n"));
  EXPECT_EQ(row(r, "spine-core up"), "spine-core up 16 51.2 TB/s 130 ns spine -> core");
  EXPECT_THAT(r, HasSubstr("searched routes from and to the first and last node"));
  EXPECT_THAT(r, HasSubstr("latency 1.65 us, bottleneck 50 GB/s, 6 links"));
  EXPECT_THAT(r, Not(HasSubstr("node7.gpu3")));  // devices are not listed one by one
}

TEST(PrintTopology, PartialGroupsShowABandwidthRange) {
  // 40 nodes: SU 0 has 32 nodes per rail leaf, SU 1 only 8.
  const std::string r = report("h100-cluster.yaml", {"nodes=40"});
  EXPECT_EQ(row(r, "leaf-spine up"), "leaf-spine up 16 400 GB/s - 1.6 TB/s 130 ns leaf -> spine");
}

TEST(PrintTopology, OversubscriptionIsShown) {
  const std::string r = report("h100-cluster.yaml", {"network.levels.leaf.oversubscription=2"});
  EXPECT_THAT(r, HasSubstr("oversubscribed 2:1"));
  EXPECT_EQ(row(r, "leaf-spine up"), "leaf-spine up 8 50 GB/s 130 ns leaf -> spine");
}

TEST(PrintTopology, Ring4) {
  const std::string r = report("ring4.yaml");
  EXPECT_THAT(r, HasSubstr("fabric: ring 'ring', 4 full-duplex links per node"));
  EXPECT_THAT(r, HasSubstr("network: none"));
  EXPECT_EQ(row(r, "ring"), "ring 8 50 GB/s 1 us device -> device (ring)");
  EXPECT_THAT(r, HasSubstr("node0.dev0 -> node0.dev2: latency 2 us, bottleneck 50 GB/s, 2 links"));
}

TEST(PrintTopology, ASingleDeviceHasNoRoutes) {
  const sim::Topology t = sim::Topology::parse(R"(
name: solo
device_kinds:
  x: {peak_flops: {f32: 1 TFLOP/s}, memory_bandwidth: 100 GB/s, memory: 512 MiB}
node: {devices: 1, kind: x}
)",
                                               "solo.yaml");
  std::ostringstream out;
  print_topology(t, out);
  EXPECT_THAT(out.str(), HasSubstr("1 node x 1 device = 1 device; devices node0.dev0 (ids 0-0"));
  EXPECT_THAT(out.str(), HasSubstr("memory 512 MiB at 100 GB/s, launch overhead 0 s"));
  EXPECT_THAT(out.str(), HasSubstr("fabric: none"));
  EXPECT_THAT(out.str(), HasSubstr("slowest route: none (a single device)"));
}

}  // namespace
}  // namespace ranksim::app

#include "sim/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "sim/collective_model.h"
#include "sim/error.h"

namespace ranksim::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string shipped(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + name; }

std::vector<std::string> link_names(const Topology& t, const Route& r) {
  std::vector<std::string> out;
  for (int id : r.links) out.push_back(t.link_name(id));
  return out;
}

// A route is a chain of links from src to dst whose latency and bandwidth summarise it.
void expect_well_formed(const Topology& t, int src, int dst) {
  const Route r = t.route(src, dst);
  if (src == dst) {
    EXPECT_TRUE(r.links.empty());
    return;
  }
  ASSERT_FALSE(r.links.empty()) << src << " -> " << dst;
  EXPECT_EQ(t.link(r.links.front()).from, src);
  EXPECT_EQ(t.link(r.links.back()).to, dst);
  Time latency;
  double bw = INFINITY;
  for (size_t i = 0; i < r.links.size(); ++i) {
    const Link& l = t.link(r.links[i]);
    if (i > 0) {
      EXPECT_EQ(t.link(r.links[i - 1]).to, l.from);
    }
    latency += l.latency;
    bw = std::min(bw, l.bandwidth);
  }
  EXPECT_EQ(r.latency, latency);
  EXPECT_EQ(r.bandwidth, bw);
}

TEST(Topology, DgxH100HoldsTheDatasheetFigures) {
  const Topology t = Topology::load_file(shipped("dgx-h100.yaml"));
  EXPECT_EQ(t.name(), "dgx-h100");
  EXPECT_EQ(t.num_nodes(), 1);
  EXPECT_EQ(t.devices_per_node(), 8);
  EXPECT_EQ(t.num_devices(), 8);
  const DeviceKind& k = t.kind_of(5);
  EXPECT_EQ(k.name, "h100-sxm");
  EXPECT_DOUBLE_EQ(k.peak_flops.at("bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(k.peak_flops.at("fp8"), 1979e12);
  EXPECT_DOUBLE_EQ(k.peak_flops.at("tf32"), 494.7e12);
  EXPECT_DOUBLE_EQ(k.peak_flops.at("f32"), 66.9e12);
  EXPECT_DOUBLE_EQ(k.peak_flops.at("f64"), 66.9e12);
  EXPECT_DOUBLE_EQ(k.memory_bandwidth, 3.35e12);
  EXPECT_EQ(k.memory_bytes, 80ull << 30);
  EXPECT_EQ(k.launch_overhead, Time::us(3));
  EXPECT_EQ(t.device(5).name, "node0.gpu5");
  EXPECT_EQ(t.device(5).local_index, 5);
  EXPECT_TRUE(t.has_network());
  EXPECT_DOUBLE_EQ(t.network().nic_bandwidth, 50e9);  // 400 Gb/s
}

// Every collective of 2, 4 and 8 ranks inside one node, 8 B-16 GiB, is timed alike on `one` and
// `cluster` (the same algorithm, protocol and time).
void same_node_timing(const Topology& one, const Topology& cluster) {
  const CollectiveModel a(one), b(cluster);
  for (CollOp op :
       {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter, CollOp::all_to_all, CollOp::broadcast}) {
    for (int n : {2, 4, 8}) {
      for (double bytes = 8; bytes <= 16.0 * (1 << 30); bytes *= 16) {
        CollectiveShape s = first_devices_shape(one, op, n), t = first_devices_shape(cluster, op, n);
        ASSERT_EQ(t.nodes, 1);
        s.bytes = t.bytes = bytes;
        const CollectiveEstimate x = a.choose(s), y = b.choose(t);
        const std::string what = std::to_string(n) + " ranks, " + std::to_string(bytes) + " B";
        EXPECT_EQ(x.seconds, y.seconds) << what;
        EXPECT_EQ(x.algorithm, y.algorithm) << what;
        EXPECT_EQ(x.protocol, y.protocol) << what;
      }
    }
  }
  EXPECT_EQ(one.collectives().group_launch, cluster.collectives().group_launch);
}

TEST(Topology, TheClusterNodeIsTheDgxH100Node) {
  // h100-cluster.yaml's and aws-p5.yaml's nodes carry dgx-h100.yaml's collective constants (one
  // fit of them): a group inside one node, a tensor-parallel group say, is timed the same on
  // each file.
  for (const char* file : {"h100-cluster.yaml", "aws-p5.yaml"}) {
    SCOPED_TRACE(file);
    same_node_timing(Topology::load_file(shipped("dgx-h100.yaml")), Topology::load_file(shipped(file)));
  }
}

// A 4-GPU NVLink-mesh node's collective constants: h100-cluster.yaml's (`b`) without NVLS, the
// mesh's ring efficiency and the proxy's wait per step across nodes aside.
void expect_cluster_constants_but_the_mesh_and_the_wait(const CollectiveTiming& a, const CollectiveTiming& b) {
  EXPECT_FALSE(a.nvls);
  EXPECT_EQ(a.ring_loop_gap, b.ring_loop_gap);
  EXPECT_EQ(a.intra_latency, b.intra_latency);
  EXPECT_EQ(a.simple_latency, b.simple_latency);
  EXPECT_EQ(a.network_efficiency, b.network_efficiency);
  EXPECT_EQ(a.inter_latency, b.inter_latency);
  EXPECT_EQ(a.channel_network_bandwidth, b.channel_network_bandwidth);
  EXPECT_EQ(a.alltoall_efficiency, b.alltoall_efficiency);
  EXPECT_EQ(a.alltoall_network_efficiency, b.alltoall_network_efficiency);
  EXPECT_EQ(a.p2p_channel_network_bandwidth, b.p2p_channel_network_bandwidth);
  EXPECT_EQ(a.call_overhead, b.call_overhead);
  EXPECT_EQ(a.group_launch, b.group_launch);
}

TEST(Topology, TheJupiterNodeIsAMeshWithTheClustersCollectiveConstants) {
  const Topology j = Topology::load_file(shipped("jupiter-gh200.yaml"));
  const Topology h = Topology::load_file(shipped("h100-cluster.yaml"));
  EXPECT_EQ(j.devices_per_node(), 4);
  EXPECT_EQ(j.fabric().type, FabricType::mesh);
  EXPECT_EQ(j.fabric().links.size(), 6u);  // each pair once
  // No NVSwitch, no NVLS; the mesh's ring efficiency as fitted on Snellius's same mesh (less
  // than through an NVSwitch); otherwise h100-cluster.yaml's constants (none is fitted to JUPITER).
  const CollectiveTiming &a = j.collectives(), &b = h.collectives();
  expect_cluster_constants_but_the_mesh_and_the_wait(a, b);
  EXPECT_EQ(a.fabric_efficiency, Topology::load_file(shipped("snellius-h100.yaml")).collectives().fabric_efficiency);
  EXPECT_LT(a.fabric_efficiency, b.fabric_efficiency);
  EXPECT_EQ(a.net_overhead, b.net_overhead);
  EXPECT_EQ(a.ll_net_overhead, b.ll_net_overhead);
  // A tensor-parallel pair rings over its one pair of links (150 GB/s), four GPUs over three.
  const CollectiveModel m(j);
  for (const auto& [n, links] : {std::pair{2, 1}, std::pair{4, 3}}) {
    CollectiveShape s = first_devices_shape(j, CollOp::all_reduce, n);
    s.bytes = 16.0 * (1 << 30);
    const auto e = m.estimate(s, CollAlgo::ring, Protocol::simple);
    ASSERT_TRUE(e.has_value());
    EXPECT_DOUBLE_EQ(e->algbw, links * 150e9 * a.fabric_efficiency / (2.0 * (n - 1) / n)) << n << " GPUs";
  }
}

TEST(Topology, TheSnelliusNodeIsTheJupiterLayoutWithItsOwnProxyWait) {
  const Topology sn = Topology::load_file(shipped("snellius-h100.yaml"));
  const Topology j = Topology::load_file(shipped("jupiter-gh200.yaml"));
  const Topology h = Topology::load_file(shipped("h100-cluster.yaml"));
  EXPECT_EQ(sn.devices_per_node(), 4);
  EXPECT_EQ(sn.num_devices(), 8);
  EXPECT_EQ(sn.fabric().type, FabricType::mesh);
  EXPECT_EQ(sn.fabric().links.size(), 6u);
  EXPECT_EQ(sn.kind_of(0).memory_bytes, h.kind_of(0).memory_bytes);  // H100 SXM, not GH200
  EXPECT_EQ(sn.kind_of(0).memory_bandwidth, h.kind_of(0).memory_bandwidth);
  EXPECT_DOUBLE_EQ(sn.nics_per_node() * sn.network().nic_bandwidth, 4 * 25e9);  // 4 x NDR200
  const CollectiveTiming& a = sn.collectives();
  expect_cluster_constants_but_the_mesh_and_the_wait(a, h.collectives());
  // The wait fitted to the cluster's 2-node forced-ring all_reduce, and LL's by the cluster
  // file's rule (x 2.7 / 14, NCCL's LL and Simple network ring hops), not fitted.
  EXPECT_NEAR(a.net_overhead.seconds(), 1.459e-6, 1e-12);
  EXPECT_NEAR(a.ll_net_overhead.seconds(), a.net_overhead.seconds() * 2.7 / 14, 1e-10);
  EXPECT_NEAR(h.collectives().ll_net_overhead.seconds(), h.collectives().net_overhead.seconds() * 2.7 / 14, 1e-9);
  // Inside a node it times a group as JUPITER's node does (the same mesh and constants).
  const CollectiveModel ms(sn), mj(j);
  for (const int n : {2, 4}) {
    CollectiveShape s = first_devices_shape(sn, CollOp::all_gather, n);
    s.bytes = 64.0 * (1 << 20);
    EXPECT_EQ(ms.choose(s).seconds, mj.choose(s).seconds) << n << " GPUs";
  }
}

TEST(Topology, TheAwsP5NetworkIsEfa) {
  const Topology p5 = Topology::load_file(shipped("aws-p5.yaml"));
  EXPECT_EQ(p5.network().transport, Transport::efa);
  EXPECT_EQ(p5.num_devices(), 16);
  // As many bytes a node as its 32 x 100 Gb/s cards.
  EXPECT_DOUBLE_EQ(p5.nics_per_node() * p5.network().nic_bandwidth, 32 * 12.5e9);
}

TEST(Topology, NvswitchRouteIsUpAndDownThroughTheNodeSwitch) {
  const Topology t = Topology::load_file(shipped("dgx-h100.yaml"));
  const Route r = t.route(2, 6);
  EXPECT_THAT(link_names(t, r), ElementsAre("node0.gpu2 -> node0.nvswitch", "node0.nvswitch -> node0.gpu6"));
  EXPECT_EQ(r.latency, Time::ns(700));
  EXPECT_DOUBLE_EQ(r.bandwidth, 450e9);
}

TEST(Topology, LinksAreDirectional) {
  const Topology t = Topology::load_file(shipped("dgx-h100.yaml"));
  const Route there = t.route(1, 4);
  const Route back = t.route(4, 1);
  for (int a : there.links)
    for (int b : back.links) EXPECT_NE(a, b);
}

TEST(Topology, RouteToSelfIsEmpty) {
  const Topology t = Topology::load_file(shipped("ring4.yaml"));
  const Route r = t.route(2, 2);
  EXPECT_TRUE(r.links.empty());
  EXPECT_EQ(r.latency, Time::zero());
  EXPECT_TRUE(std::isinf(r.bandwidth));
}

TEST(Topology, Ring4TakesTheShortestWay) {
  const Topology t = Topology::load_file(shipped("ring4.yaml"));
  EXPECT_EQ(t.num_devices(), 4);
  EXPECT_FALSE(t.has_network());
  EXPECT_EQ(t.num_links(), 8);  // 4 cables, 2 directions
  EXPECT_THAT(link_names(t, t.route(0, 3)), ElementsAre("node0.dev0 -> node0.dev3"));
  EXPECT_THAT(link_names(t, t.route(3, 0)), ElementsAre("node0.dev3 -> node0.dev0"));
  // Two equal ways round: the one through the lower-numbered neighbour.
  EXPECT_THAT(link_names(t, t.route(0, 2)), ElementsAre("node0.dev0 -> node0.dev1", "node0.dev1 -> node0.dev2"));
  EXPECT_THAT(link_names(t, t.route(3, 1)), ElementsAre("node0.dev3 -> node0.dev0", "node0.dev0 -> node0.dev1"));
  const Route r = t.route(0, 2);
  EXPECT_EQ(r.latency, Time::us(2));
  EXPECT_DOUBLE_EQ(r.bandwidth, 50e9);
}

TEST(Topology, ClusterRoutesFollowRailsThroughTheFatTree) {
  const Topology t = Topology::load_file(shipped("h100-cluster.yaml"));
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.num_devices(), 16);
  EXPECT_TRUE(t.same_node(3, 7));
  EXPECT_FALSE(t.same_node(7, 8));
  // Same rail: NIC up to the rail's leaf and down again (500 + 130 + 500 ns).
  const Route same_rail = t.route(0, 8);
  EXPECT_THAT(link_names(t, same_rail), ElementsAre("node0.gpu0 -> leaf0.rail0", "leaf0.rail0 -> node1.gpu0"));
  EXPECT_EQ(same_rail.latency, Time::ns(1130));
  EXPECT_DOUBLE_EQ(same_rail.bandwidth, 50e9);
  // Another rail: the rails meet at the spine (two more switch traversals).
  const Route cross = t.route(0, 11);
  EXPECT_THAT(link_names(t, cross), ElementsAre("node0.gpu0 -> leaf0.rail0", "leaf0.rail0 -> spine0",
                                                "spine0 -> leaf0.rail3", "leaf0.rail3 -> node1.gpu3"));
  EXPECT_EQ(cross.latency, Time::ns(1390));
  // Inside a node the NVSwitch is used, never the NICs.
  EXPECT_EQ(t.route(8, 11).links.size(), 2u);
  EXPECT_EQ(t.route(8, 11).latency, Time::ns(700));
}

TEST(Topology, OneFileServesSixteenThousandGpus) {
  const Topology t = Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=2048"});
  EXPECT_EQ(t.num_nodes(), 2048);
  EXPECT_EQ(t.num_devices(), 16384);
  // Linear size: 2 NVSwitch + 2 NIC links per GPU, plus up/down pairs per leaf and spine group.
  EXPECT_EQ(t.num_links(), 4 * 16384 + 2 * (64 * 8) + 2 * 16);
  const Route far = t.route(0, 16383);
  EXPECT_THAT(link_names(t, far),
              ElementsAre("node0.gpu0 -> leaf0.rail0", "leaf0.rail0 -> spine0", "spine0 -> core0", "core0 -> spine15",
                          "spine15 -> leaf63.rail7", "leaf63.rail7 -> node2047.gpu7"));
  EXPECT_EQ(far.latency, Time::ns(500 + 130 * 5 + 500));
  // Node 100 is in SU 3, still in pod 0 (SUs 0-3): up to the spine only.
  EXPECT_EQ(t.route(0, 100 * 8).latency, Time::ns(1390));
  EXPECT_EQ(t.route(0, 128 * 8).latency, Time::ns(1650));  // pod 1
  for (int dst : {1, 8, 9, 255, 256, 1023, 1024, 5000, 16383}) expect_well_formed(t, 0, dst);
  for (int src : {16383, 7777, 300}) expect_well_formed(t, src, 5);
}

TEST(Topology, FatTreeUplinksCarryTheWholeGroupUnlessOversubscribed) {
  // 40 nodes: SU 0 is full (32 nodes), SU 1 holds 8.
  const Topology t = Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=40"});
  const Route full = t.route(0, 39 * 8 + 1);  // SU 0 rail 0 -> SU 1 rail 1
  ASSERT_EQ(full.links.size(), 4u);
  const Link& leaf0_up = t.link(full.links[1]);
  const Link& su1_down = t.link(full.links[2]);
  EXPECT_EQ(t.vertex_name(leaf0_up.from), "leaf0.rail0");
  EXPECT_DOUBLE_EQ(leaf0_up.bandwidth, 32 * 50e9);
  EXPECT_DOUBLE_EQ(su1_down.bandwidth, 8 * 50e9);
  EXPECT_TRUE(leaf0_up.non_blocking);
  EXPECT_TRUE(su1_down.non_blocking);
  EXPECT_FALSE(t.link(full.links[0]).non_blocking);  // the NIC

  const Topology over =
      Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=40", "network.levels.leaf.oversubscription=2"});
  const Link& up = over.link(over.route(0, 39 * 8 + 1).links[1]);
  EXPECT_DOUBLE_EQ(up.bandwidth, 16 * 50e9);
  EXPECT_FALSE(up.non_blocking);
}

TEST(Topology, OverridesChangeValuesBeforeValidation) {
  const Topology t = Topology::load_file(shipped("h100-cluster.yaml"),
                                         {"network.nic_bandwidth=200 Gb/s", "network.levels.leaf.latency=200 ns",
                                          "network.levels.2.latency = 1 us", "node.fabric.bandwidth=100 GB/s"});
  EXPECT_DOUBLE_EQ(t.route(0, 8).bandwidth, 25e9);
  EXPECT_EQ(t.route(0, 8).latency, Time::ns(1200));
  EXPECT_EQ(t.network().levels[2].latency, Time::us(1));
  EXPECT_DOUBLE_EQ(t.route(0, 1).bandwidth, 100e9);
  // A whole section can be replaced by a YAML value.
  const Topology mesh =
      Topology::load_file(shipped("ring4.yaml"), {"node.fabric={type: mesh, bandwidth: 10 GB/s, latency: 2 us}"});
  EXPECT_EQ(mesh.num_links(), 12);
  EXPECT_EQ(mesh.route(0, 2).links.size(), 1u);
}

TEST(Topology, NodesWithoutFabricTalkThroughTheirNics) {
  const std::string yaml = R"(
name: pcie-box
nodes: 2
device_kinds:
  card: {peak_flops: {f32: 10 TFLOP/s}, memory_bandwidth: 1 TB/s, memory: 16 GiB}
node: {devices: 2, kind: card}
network:
  nic_bandwidth: 100 Gb/s
  nic_latency: 1 us
  levels:
    - {name: tor, latency: 100 ns}
)";
  const Topology t = Topology::parse(yaml, "pcie-box.yaml");
  EXPECT_EQ(t.kind_of(0).launch_overhead, Time::zero());  // optional, default 0
  const Route r = t.route(0, 1);
  EXPECT_THAT(link_names(t, r), ElementsAre("node0.dev0 -> tor0", "tor0 -> node0.dev1"));
  EXPECT_EQ(r.latency, Time::ns(2100));
  EXPECT_DOUBLE_EQ(r.bandwidth, 12.5e9);
}

TEST(Topology, ExplicitLinksPreferLowLatencyOverFewHops) {
  const std::string yaml = R"(
name: lopsided
device_kinds:
  x: {peak_flops: {bf16: 1 TFLOP/s}, memory_bandwidth: 1 TB/s, memory: 1 GiB}
node:
  devices: 3
  kind: x
  fabric:
    type: links
    bandwidth: 10 GB/s     # default for the links below
    latency: 1 us
    links:
      - {between: [0, 2], latency: 5 us}
      - {between: [0, 1]}
      - {between: [1, 2], bandwidth: 20 GB/s}
)";
  const Topology t = Topology::parse(yaml, "lopsided.yaml");
  const Route r = t.route(0, 2);
  EXPECT_THAT(link_names(t, r), ElementsAre("node0.dev0 -> node0.dev1", "node0.dev1 -> node0.dev2"));
  EXPECT_EQ(r.latency, Time::us(2));
  EXPECT_DOUBLE_EQ(r.bandwidth, 10e9);
  EXPECT_DOUBLE_EQ(t.route(2, 1).bandwidth, 20e9);
}

TEST(Topology, ExplicitFabricsRepeatOnEveryNode) {
  const Topology t = Topology::load_file(shipped("ring4.yaml"),
                                         {"nodes=3",
                                          "network={nic_bandwidth: 100 Gb/s, nic_latency: 1 us, levels: [{name: sw, "
                                          "latency: 100 ns}]}"});
  EXPECT_EQ(t.num_devices(), 12);
  EXPECT_THAT(link_names(t, t.route(8, 10)), ElementsAre("node2.dev0 -> node2.dev1", "node2.dev1 -> node2.dev2"));
  EXPECT_EQ(t.route(3, 4).links.size(), 2u);  // node 0 -> node 1 through the switch
  for (int a = 0; a < 12; ++a)
    for (int b = 0; b < 12; ++b) expect_well_formed(t, a, b);
}

TEST(Topology, EveryPairIsRoutedOnTheShippedFiles) {
  for (const char* file : {"dgx-h100.yaml", "h100-cluster.yaml", "ring4.yaml"}) {
    const Topology t = Topology::load_file(shipped(file), {});
    for (int a = 0; a < t.num_devices(); ++a)
      for (int b = 0; b < t.num_devices(); ++b) {
        expect_well_formed(t, a, b);
        EXPECT_EQ(t.route(a, b).latency, t.route(b, a).latency) << file;
      }
  }
}

TEST(Topology, VertexNamesSayWhatTheVertexIs) {
  const Topology t = Topology::load_file(shipped("h100-cluster.yaml"));
  EXPECT_EQ(t.vertex_name(9), "node1.gpu1");
  EXPECT_EQ(t.vertex_name(16), "node0.nvswitch");
  EXPECT_EQ(t.vertex_name(17), "node1.nvswitch");
  EXPECT_EQ(t.vertex_name(18), "leaf0.rail0");
  EXPECT_EQ(t.vertex_name(25), "leaf0.rail7");
  EXPECT_EQ(t.vertex_name(26), "spine0");
  EXPECT_EQ(t.vertex_name(27), "core0");
  EXPECT_EQ(t.num_vertices(), 28);
}

TEST(Topology, LinkKindsGroupLinksForReports) {
  const Topology t = Topology::load_file(shipped("h100-cluster.yaml"));
  std::vector<std::string> kinds;
  for (int k = 0; k < t.num_link_kinds(); ++k) kinds.push_back(t.link_kind(k).name);
  EXPECT_THAT(kinds, ElementsAre("nvswitch up", "nvswitch down", "nic up", "nic down", "leaf-spine up",
                                 "leaf-spine down", "spine-core up", "spine-core down"));
  EXPECT_EQ(t.link_kind(t.link(t.route(0, 8).links[0]).kind).description, "device -> leaf");
}

TEST(Topology, MissingFileNamesThePath) {
  try {
    Topology::load_file("/no/such/dir/topo.yaml");
    FAIL() << "expected an error";
  } catch (const ConfigError&) {
    FAIL() << "a missing file is not a config error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/no/such/dir/topo.yaml"));
    EXPECT_THAT(e.what(), HasSubstr("No such file"));
  }
}

}  // namespace
}  // namespace ranksim::sim

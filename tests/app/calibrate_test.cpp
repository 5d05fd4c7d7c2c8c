// `ranksim calibrate`: constants recovered from tables the model itself generated, the command end
// to end on an nccl-tests text table, its refusals of malformed input (nothing written), and the
// reading of a real nccl-tests output.
#include "app/calibrate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "app/nccl_tests_input.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr double kKiB = 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// `nodes` nodes of 8 devices on a 100 GB/s switch; 50 Gb/s NICs (8 x 6.25 GB/s per node, the
// bottleneck of a ring across nodes). Launch overhead 3 us.
std::string topology_text(int nodes) {
  return "name: cal\n"
         "nodes: " +
         std::to_string(nodes) +
         "\n"
         "device_kinds:\n"
         "  gpu:\n"
         "    peak_flops: {bf16: 100 TFLOP/s}\n"
         "    memory_bandwidth: 1 TB/s\n"
         "    memory: 16 GiB\n"
         "    launch_overhead: 3 us\n"
         "node:\n"
         "  devices: 8\n"
         "  kind: gpu\n"
         "  fabric:\n"
         "    type: switch\n"
         "    bandwidth: 100 GB/s\n"
         "    latency: 1 us\n"
         "network:\n"
         "  nic_bandwidth: 50 Gb/s\n"
         "  nic_latency: 1 us\n"
         "  levels:\n"
         "    - {name: leaf, children: 4, latency: 100 ns}\n"
         "    - {name: spine, latency: 100 ns}\n";
}

// The constants the synthetic tables are generated with.
sim::CollectiveTiming truth(const sim::Topology& t) {
  sim::CollectiveTiming c = t.collectives();
  c.model = sim::CollectiveTimingModel::nccl;
  c.fabric_efficiency = 0.83;
  c.intra_latency = sim::Time::ns(2100);
  c.call_overhead = sim::Time::us(20);
  c.network_efficiency = 0.9;
  c.inter_latency = sim::Time::us(9);
  c.net_overhead = sim::Time::us(4);
  return c;
}

std::vector<double> sizes_1k_to_4g() {
  std::vector<double> out;
  for (double s = kKiB; s <= 4 * kGiB; s *= 2) out.push_back(s);
  return out;
}

FitCase synthetic_case(const sim::CollectiveModel& m, double launch, int nranks, int nodes,
                       std::optional<sim::CollAlgo> algorithm = sim::CollAlgo::ring,
                       sim::CollOp op = sim::CollOp::all_reduce) {
  FitCase c;
  c.name = std::to_string(nranks) + " ranks on " + std::to_string(nodes);
  c.shape.op = op;
  c.shape.nranks = nranks;
  c.shape.nodes = nodes;
  c.shape.ranks_per_node = nranks / nodes;
  c.algorithm = algorithm;
  for (double bytes : sizes_1k_to_4g()) c.rows.push_back({bytes, predict_row(m, c, bytes, launch), 0, {}});
  return c;
}

// Tables made by `real` on topology_text(4): 16 ranks on 2 nodes and 32 on 4.
std::vector<FitCase> across_nodes(const sim::Topology& t, const sim::CollectiveTiming& real,
                                  std::optional<sim::CollAlgo> algorithm = sim::CollAlgo::ring,
                                  sim::CollOp op = sim::CollOp::all_reduce) {
  const double launch = t.kind_of(0).launch_overhead.seconds();
  const sim::CollectiveModel m(t, real);
  return {synthetic_case(m, launch, 16, 2, algorithm, op), synthetic_case(m, launch, 32, 4, algorithm, op)};
}

// `real` with the constants a fit across nodes moves set far from it: where a fit starts.
sim::CollectiveTiming away_from(const sim::CollectiveTiming& real) {
  sim::CollectiveTiming start = real;
  start.fabric_efficiency = 0.6;
  start.network_efficiency = 0.6;
  start.intra_latency = sim::Time::us(5);
  start.inter_latency = sim::Time::us(5);
  start.call_overhead = sim::Time::us(1);
  start.net_overhead = sim::Time::us(1);
  return start;
}

void expect_within(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got, want, want * rel) << what;
}

// ---- recovery

TEST(CalibrateFit, RecoversTheConstantsTheTablesWereMadeWith) {
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  const double launch = t.kind_of(0).launch_overhead.seconds();
  EXPECT_DOUBLE_EQ(launch, 3e-6);
  const sim::CollectiveTiming real = truth(t);
  const sim::CollectiveModel m(t, real);
  std::vector<FitCase> cases;
  for (auto [nranks, nodes] : {std::pair{8, 1}, {4, 1}, {2, 1}, {16, 2}, {32, 4}})
    cases.push_back(synthetic_case(m, launch, nranks, nodes));
  // Rings across nodes are paced by net_overhead; a tree's network hops inform inter_latency.
  cases.push_back(synthetic_case(m, launch, 32, 4, sim::CollAlgo::tree));

  const sim::CollectiveTiming start = away_from(real);
  const FitResult fit = fit_collectives(t, start, cases);

  EXPECT_THAT(fit.fitted, UnorderedElementsAre("fabric_efficiency", "intra_latency", "network_efficiency",
                                               "inter_latency", "net_overhead", "call_overhead"));
  expect_within(fit.constants.fabric_efficiency, 0.83, 0.01, "fabric_efficiency");
  expect_within(fit.constants.network_efficiency, 0.9, 0.01, "network_efficiency");
  expect_within(fit.constants.intra_latency.seconds(), 2.1e-6, 0.01, "intra_latency");
  expect_within(fit.constants.inter_latency.seconds(), 9e-6, 0.01, "inter_latency");
  expect_within(fit.constants.call_overhead.seconds(), 20e-6, 0.01, "call_overhead");
  expect_within(fit.constants.net_overhead.seconds(), 4e-6, 0.01, "net_overhead");
  EXPECT_LT(fit.rms_log_error, 1e-3);
  // What is not fitted stays as it started.
  EXPECT_EQ(fit.constants.channels, start.channels);
  EXPECT_EQ(fit.constants.alltoall_efficiency, start.alltoall_efficiency);
  EXPECT_EQ(fit.constants.ll_max_bandwidth, start.ll_max_bandwidth);
}

TEST(CalibrateFit, OneNodeTablesDoNotFitTheNetwork) {
  const sim::Topology t = sim::Topology::parse(topology_text(1), "cal.yaml");
  const double launch = t.kind_of(0).launch_overhead.seconds();
  const sim::CollectiveModel m(t, truth(t));
  const std::vector<FitCase> cases = {synthetic_case(m, launch, 8, 1), synthetic_case(m, launch, 4, 1)};
  sim::CollectiveTiming start = truth(t);
  start.network_efficiency = 0.5;
  start.inter_latency = sim::Time::us(50);
  const FitResult fit = fit_collectives(t, start, cases);
  EXPECT_THAT(fit.fitted, UnorderedElementsAre("fabric_efficiency", "intra_latency", "call_overhead"));
  EXPECT_EQ(fit.constants.network_efficiency, 0.5);
  EXPECT_EQ(fit.constants.inter_latency, sim::Time::us(50));
}

TEST(CalibrateFit, RingsAcrossNodesDoNotFitTheHopLatency) {
  // A ring across nodes is paced by the proxy's waits (net_overhead), not by the network's hop
  // latency: ring tables alone leave inter_latency as it was, and asking for it is an error.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  const std::vector<FitCase> cases = across_nodes(t, truth(t));
  sim::CollectiveTiming start = truth(t);
  start.inter_latency = sim::Time::us(50);
  const FitResult fit = fit_collectives(t, start, cases);
  EXPECT_THAT(fit.fitted, UnorderedElementsAre("fabric_efficiency", "intra_latency", "network_efficiency",
                                               "net_overhead", "call_overhead"));
  EXPECT_EQ(fit.constants.inter_latency, sim::Time::us(50));
  try {
    fit_collectives(t, start, cases, {"inter_latency"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--fit inter_latency: the tables do not inform it"));
  }
}

TEST(CalibrateFit, AllToAllAcrossNodesFitsItsOwnShareOfTheNics) {
  // Tables made with all-to-all at 0.7 of the NICs (the rings' share 0.9): fitted from the rings'
  // share, it comes back; network_efficiency, which no all-to-all informs, is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.alltoall_network_efficiency = 0.7;
  const std::vector<FitCase> cases = across_nodes(t, real, std::nullopt, sim::CollOp::all_to_all);
  sim::CollectiveTiming start = real;
  start.alltoall_network_efficiency = 0;
  const FitResult fit = fit_collectives(t, start, cases, {"alltoall_network_efficiency"});
  expect_within(fit.constants.alltoall_network_efficiency, 0.7, 0.01, "alltoall_network_efficiency");
  EXPECT_EQ(fit.constants.network_efficiency, 0.9);
  const FitResult all = fit_collectives(t, start, cases);
  EXPECT_THAT(all.fitted, Not(testing::Contains("network_efficiency")));
  EXPECT_THAT(all.fitted, testing::Contains("alltoall_network_efficiency"));
}

TEST(CalibrateFit, PeerLatencyIsFittedWhenNamed) {
  // All-to-all tables made with each peer on another node costing 12 us (8 such peers on 2
  // nodes, 24 on 4): started unset, where it reads as 2.7 us x inter_latency / 14, the fit finds
  // it; not named, it is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.peer_latency = sim::Time::us(12);
  const std::vector<FitCase> cases = across_nodes(t, real, std::nullopt, sim::CollOp::all_to_all);
  sim::CollectiveTiming start = real;
  start.peer_latency = sim::Time::zero();
  EXPECT_DOUBLE_EQ(sim::peer_cost(start), 9e-6 * 2.7 / 14);
  const FitResult fit = fit_collectives(t, start, cases, {"peer_latency"});
  expect_within(fit.constants.peer_latency.seconds(), 12e-6, 0.01, "peer_latency");
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("peer_latency")));
}

TEST(CalibrateFit, ThePointToPointChannelRateIsFittedWhenNamed) {
  // Two ranks on two nodes (one peer across them, NCCL's one channel for a 6.25 GB/s NIC) at
  // 4 GB/s a channel, under the NIC's 5.6; and 16 and 32 ranks, whose many peers fill the NICs.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  const double launch = t.kind_of(0).launch_overhead.seconds();
  sim::CollectiveTiming real = truth(t);
  real.p2p_channel_network_bandwidth = 4e9;
  std::vector<FitCase> cases = across_nodes(t, real, std::nullopt, sim::CollOp::all_to_all);
  cases.push_back(synthetic_case(sim::CollectiveModel(t, real), launch, 2, 2, std::nullopt, sim::CollOp::all_to_all));
  sim::CollectiveTiming start = real;
  start.p2p_channel_network_bandwidth = 0;
  const FitResult fit = fit_collectives(t, start, cases, {"p2p_channel_network_bandwidth"});
  expect_within(fit.constants.p2p_channel_network_bandwidth, 4e9, 0.01, "p2p_channel_network_bandwidth");
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("p2p_channel_network_bandwidth")));
}

TEST(CalibrateFit, MessageLatencyIsFittedWhenNamed) {
  // All-to-all tables made with 512 KiB messages costing 3 us each, on top of 12 us a peer: from
  // peer_latency fitted alone and no message cost (started at 1 us), both come back to 1%; not
  // named, message_latency is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.peer_latency = sim::Time::us(12);
  real.message_latency = sim::Time::us(3);
  real.p2p_chunk_size = 512u << 10;
  real.buffer_size = 8u << 20;
  const std::vector<FitCase> cases = across_nodes(t, real, std::nullopt, sim::CollOp::all_to_all);
  sim::CollectiveTiming start = real;
  start.peer_latency = sim::Time::us(20);
  start.message_latency = sim::Time::zero();
  const FitResult fit = fit_collectives(t, start, cases, {"peer_latency", "message_latency"});
  expect_within(fit.constants.message_latency.seconds(), 3e-6, 0.01, "message_latency");
  expect_within(fit.constants.peer_latency.seconds(), 12e-6, 0.01, "peer_latency");
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("message_latency")));
}

TEST(CalibrateFit, LlNetOverheadIsFittedWhenNamed) {
  // Ring all_gather tables (2 and 4 nodes, 1 KiB-4 GiB, LL for the small calls) made with LL
  // steps waiting 0.8 us on the proxy where the others wait net_overhead's 4 us: started unset
  // (at net_overhead), the fit finds it to 1%; not named, it is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.ll_net_overhead = sim::Time::ns(800);
  const std::vector<FitCase> cases = across_nodes(t, real, sim::CollAlgo::ring, sim::CollOp::all_gather);
  sim::CollectiveTiming start = real;
  start.ll_net_overhead = sim::Time::zero();
  const FitResult fit = fit_collectives(t, start, cases, {"ll_net_overhead"});
  expect_within(fit.constants.ll_net_overhead.seconds(), 0.8e-6, 0.01, "ll_net_overhead");
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("ll_net_overhead")));
}

TEST(CalibrateFit, TheChannelsCapIsFittedWhenNamed) {
  // Tables made with 16 channels of at most 2 GB/s each through the NICs: 32 GB/s a node, less
  // than its 8 NICs' 50 GB/s. Started with no cap, the fit finds it; not named, it is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.channel_network_bandwidth = 2e9;
  const std::vector<FitCase> cases = across_nodes(t, real);
  sim::CollectiveTiming start = real;
  start.channel_network_bandwidth = 0;
  const FitResult fit = fit_collectives(t, start, cases, {"channel_network_bandwidth"});
  expect_within(fit.constants.channel_network_bandwidth, 2e9, 0.01, "channel_network_bandwidth");
  EXPECT_LT(fit.rms_log_error, 1e-3);
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("channel_network_bandwidth")));
}

TEST(CalibrateFit, TheSimpleBaseLatencyIsFittedWhenNamed) {
  // One node's tables whose small calls run LL or LL128 and whose large ones run Simple tell the
  // Simple protocol's base latency from the overhead every call pays.
  const sim::Topology t = sim::Topology::parse(topology_text(1), "cal.yaml");
  const double launch = t.kind_of(0).launch_overhead.seconds();
  sim::CollectiveTiming real = truth(t);
  real.simple_latency = sim::Time::us(25);
  real.call_overhead = sim::Time::us(4);
  const sim::CollectiveModel m(t, real);
  const std::vector<FitCase> cases = {synthetic_case(m, launch, 8, 1), synthetic_case(m, launch, 4, 1),
                                      synthetic_case(m, launch, 8, 1, sim::CollAlgo::ring, sim::CollOp::all_gather)};
  sim::CollectiveTiming start = truth(t);
  start.call_overhead = sim::Time::us(20);
  const std::vector<std::string> names = {"fabric_efficiency", "intra_latency", "call_overhead", "simple_latency"};
  const FitResult fit = fit_collectives(t, start, cases, names);
  EXPECT_THAT(fit.fitted, UnorderedElementsAreArray(names));
  expect_within(fit.constants.simple_latency.seconds(), 25e-6, 0.01, "simple_latency");
  expect_within(fit.constants.call_overhead.seconds(), 4e-6, 0.01, "call_overhead");
  expect_within(fit.constants.intra_latency.seconds(), 2.1e-6, 0.01, "intra_latency");
  expect_within(fit.constants.fabric_efficiency, 0.83, 0.01, "fabric_efficiency");
  // Unnamed, it stays where it started: a table from 32 MiB up cannot tell it from call_overhead.
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("simple_latency")));
  EXPECT_EQ(fit_collectives(t, start, cases).constants.simple_latency, start.simple_latency);
}

TEST(CalibrateFit, TheRingLoopGapIsFittedWhenNamed) {
  // All_reduce rings give fabric_efficiency; all_gather rings of 8 and of 4 ranks lose the gap in
  // different shares (7 / (7 + gap) and 3 / (3 + gap)), which tells it from fabric_efficiency.
  const sim::Topology t = sim::Topology::parse(topology_text(1), "cal.yaml");
  const double launch = t.kind_of(0).launch_overhead.seconds();
  sim::CollectiveTiming real = truth(t);
  real.ring_loop_gap = 0.3;
  const sim::CollectiveModel m(t, real);
  const sim::CollOp ag = sim::CollOp::all_gather;
  const std::vector<FitCase> cases = {synthetic_case(m, launch, 8, 1), synthetic_case(m, launch, 8, 1, {}, ag),
                                      synthetic_case(m, launch, 4, 1, {}, ag)};
  sim::CollectiveTiming start = truth(t);
  start.fabric_efficiency = 0.7;
  const std::vector<std::string> names = {"fabric_efficiency", "ring_loop_gap", "intra_latency", "call_overhead"};
  const FitResult fit = fit_collectives(t, start, cases, names);
  EXPECT_THAT(fit.fitted, UnorderedElementsAreArray(names));
  expect_within(fit.constants.ring_loop_gap, 0.3, 0.01, "ring_loop_gap");
  expect_within(fit.constants.fabric_efficiency, 0.83, 0.01, "fabric_efficiency");
  // Unnamed, it stays unset: most tables cannot tell it from fabric_efficiency.
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("ring_loop_gap")));
  EXPECT_EQ(fit_collectives(t, start, cases).constants.ring_loop_gap, 0.0);
  // All_reduce tables alone do not inform it.
  try {
    fit_collectives(t, start, {cases[0]}, {"ring_loop_gap"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--fit ring_loop_gap: the tables do not inform it"));
  }
}

TEST(CalibrateFit, NvlsTreeTablesFitTheirOwnShareOfTheFabric) {
  // Tables made on an NVLS node whose NVLS trees run at 0.45 of the fabric (NVLS alone at 0.5):
  // on two nodes the NVLS tree is NVLS-bound (100 GB/s x 0.45 / (1 + 1/8) = 40 GB/s, the NICs
  // 45) and beats a plain tree (0.5 x 0.92 x 83 = 38.2 GB/s: on two nodes the NICs allow it 90),
  // and so is the fit's start (44.4 GB/s). Fitted from nvls_efficiency, it comes back;
  // nvls_efficiency, which no table in one node informs, is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.nvls = true;
  real.nvls_efficiency = 0.5;
  real.nvls_tree_efficiency = 0.45;
  const std::vector<FitCase> cases = across_nodes(t, real, std::nullopt);
  sim::CollectiveTiming start = real;
  start.nvls_tree_efficiency = 0;
  const FitResult fit = fit_collectives(t, start, cases, {"nvls_tree_efficiency"});
  expect_within(fit.constants.nvls_tree_efficiency, 0.45, 0.01, "nvls_tree_efficiency");
  EXPECT_EQ(fit.constants.nvls_efficiency, 0.5);
  const FitResult all = fit_collectives(t, start, cases);
  EXPECT_THAT(all.fitted, testing::Contains("nvls_tree_efficiency"));
  EXPECT_THAT(all.fitted, Not(testing::Contains("nvls_efficiency")));
}

TEST(CalibrateFit, NvlsTreesOnMoreThanTwoNodesFitTheirOwnShareOfTheNicsWhenNamed) {
  // NVLS-tree tables (NCCL_ALGO=NVLSTree) made with the NVLS tree's network part at 0.6 of the
  // NICs' 100 GB/s a node: on 4 nodes it moves each byte twice, 30 GB/s of algorithm bandwidth,
  // below NVLS's 100 x 0.5 / (1 + 1/8) = 44 GB/s; on 2 nodes NVLS binds. Started at the rings'
  // share (network_efficiency 0.9), the fit finds it; not named, it is not fitted.
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.nvls = true;
  real.nvls_efficiency = 0.5;
  real.nvls_tree_network_efficiency = 0.6;
  const std::vector<FitCase> cases = across_nodes(t, real, sim::CollAlgo::nvls_tree);
  sim::CollectiveTiming start = real;
  start.nvls_tree_network_efficiency = 0;
  const FitResult fit = fit_collectives(t, start, cases, {"nvls_tree_network_efficiency"});
  expect_within(fit.constants.nvls_tree_network_efficiency, 0.6, 0.01, "nvls_tree_network_efficiency");
  EXPECT_THAT(fit_collectives(t, start, cases).fitted, Not(testing::Contains("nvls_tree_network_efficiency")));
}

// A case of all_gather forced to ring Simple on the 8 ranks of one node.
FitCase ring_all_gather_on_8() {
  FitCase c;
  c.shape.op = sim::CollOp::all_gather;
  c.shape.nranks = 8;
  c.shape.ranks_per_node = 8;
  c.algorithm = sim::CollAlgo::ring;
  c.protocol = sim::Protocol::simple;
  return c;
}

TEST(CalibrateFit, PredictRowIsLaunchPlusTheChoice) {
  const sim::Topology t = sim::Topology::parse(topology_text(1), "cal.yaml");
  const sim::CollectiveModel m(t, truth(t));
  FitCase c = ring_all_gather_on_8();
  // Ring all_gather Simple on 8 ranks at 1 GiB: 8.4 us + 7 hops of 2.1 us + 20 us overhead, and
  // the bus bandwidth 100 GB/s x 0.83 divided by 7/8.
  const double want = 3e-6 + 8.4e-6 + 7 * 2.1e-6 + 20e-6 + kGiB / (100e9 * 0.83 / (7.0 / 8));
  EXPECT_NEAR(predict_row(m, c, kGiB, 3e-6), want, want * 1e-12);
}

// One thread driving 8 GPUs (nccl-tests -g 8) issues a call no faster than 8 x group_launch: a
// row takes the longer of that and the GPUs' time.
TEST(CalibrateFit, OneThreadDrivingSeveralGpusTakesAtLeastItsIssueTime) {
  const sim::Topology t = sim::Topology::parse(topology_text(1), "cal.yaml");
  sim::CollectiveTiming k = truth(t);
  k.group_launch = sim::Time::us(6);
  const sim::CollectiveModel m(t, k);
  FitCase c = ring_all_gather_on_8();
  const double gpus = 3e-6 + 8.4e-6 + 7 * 2.1e-6 + 20e-6;  // 46.1 us, the GPUs' time at 1 KiB
  const double one = predict_row(m, c, 1024, 3e-6);
  // 1 KiB keeps one channel of 16: a sixteenth of the bus bandwidth.
  EXPECT_NEAR(one, gpus + 1024 / (100e9 * 0.83 / 16 / (7.0 / 8)), 1e-12);
  c.gpus_per_thread = 4;  // 24 us of issue: the GPUs' time is longer
  EXPECT_EQ(predict_row(m, c, 1024, 3e-6), one);
  c.gpus_per_thread = 8;  // 48 us: the thread's
  EXPECT_NEAR(predict_row(m, c, 1024, 3e-6), 48e-6, 1e-15);
  EXPECT_GT(predict_row(m, c, kGiB, 3e-6), 1e-3);  // large calls: the GPUs again
  EXPECT_EQ(predict_row(m, c, kGiB, 3e-6), as_measured(c, k,
                                                       3e-6 + m.choose(
                                                                   [&] {
                                                                     sim::CollectiveShape s = c.shape;
                                                                     s.bytes = kGiB;
                                                                     return s;
                                                                   }(),
                                                                   c.algorithm, c.protocol)
                                                                  .seconds));
}

TEST(CalibrateFit, RecoversTheIssueTimeOfATableDrivenByOneThread) {
  const sim::Topology t = sim::Topology::parse(topology_text(1), "cal.yaml");
  sim::CollectiveTiming real = truth(t);
  real.group_launch = sim::Time::us(9);  // a 72 us floor over the 46-us small calls
  const sim::CollectiveModel m(t, real);
  FitCase c = synthetic_case(m, 3e-6, 8, 1);
  c.gpus_per_thread = 8;
  for (MeasuredRow& r : c.rows) r.seconds = predict_row(m, c, r.bytes, 3e-6);
  ASSERT_EQ(c.rows.front().seconds, 72e-6);
  sim::CollectiveTiming start = real;
  start.group_launch = sim::Time::us(4);
  const FitResult fit = fit_collectives(t, start, {c}, {"group_launch"});
  expect_within(fit.constants.group_launch.seconds(), 9e-6, 0.01, "group_launch");
  // Without a table of several GPUs a thread, nothing informs it.
  FitCase per_process = c;
  per_process.gpus_per_thread = 1;
  EXPECT_THROW(fit_collectives(t, start, {per_process}, {"group_launch"}), Error);
}

// Leaving a table out of tables the model made: the others inform the same constants, so the
// refit predicts the one left out as the model made it; a constant only that table informs stays
// at the start and is named.
TEST(CalibrateFit, LeaveOneOutPredictsWhatTheOthersInformAndHoldsTheRest) {
  const sim::Topology t = sim::Topology::parse(topology_text(4), "cal.yaml");
  const double launch = t.kind_of(0).launch_overhead.seconds();
  const sim::CollectiveTiming real = truth(t);
  const sim::CollectiveModel m(t, real);
  std::vector<FitCase> cases;
  for (auto [nranks, nodes] : {std::pair{8, 1}, {4, 1}, {16, 2}, {32, 4}})
    cases.push_back(synthetic_case(m, launch, nranks, nodes));
  // Only the tree's network hops inform inter_latency.
  cases.push_back(synthetic_case(m, launch, 32, 4, sim::CollAlgo::tree));
  const sim::CollectiveTiming start = away_from(real);
  const FitResult all = fit_collectives(t, start, cases);
  const std::vector<LeftOut> loo = leave_one_out(t, start, cases, all);
  ASSERT_EQ(loo.size(), cases.size());
  for (size_t i = 0; i + 1 < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    EXPECT_TRUE(loo[i].held.empty());
    ASSERT_TRUE(loo[i].fitted.big && loo[i].left_out.big && loo[i].left_out.small);
    EXPECT_LT(*loo[i].fitted.big, 0.002);
    EXPECT_LT(*loo[i].left_out.big, 0.005);
    EXPECT_LT(*loo[i].left_out.small, 0.005);
  }
  // Without the tree, inter_latency is held at its start (5 us, not 9): the tree's small calls,
  // whose four network hops scale with it, are predicted more than 5% fast.
  const LeftOut& tree = loo.back();
  EXPECT_THAT(tree.held, UnorderedElementsAre("inter_latency"));
  ASSERT_TRUE(tree.left_out.small && tree.fitted.small);
  EXPECT_GT(*tree.left_out.small, 0.05);
  EXPECT_LT(*tree.fitted.small, 0.002);
  // Each error is what case_errors gives under the constants: the full fit's for `fitted`.
  EXPECT_EQ(*case_errors(t, all.constants, cases[0]).big, *loo[0].fitted.big);
  // One table cannot be left out of itself.
  EXPECT_THROW(leave_one_out(t, start, {cases[0]}, all), Error);
}

TEST(CalibrateFit, GeomeanError) {
  EXPECT_EQ(geomean_error({}), 0.0);
  // |ln 2| and |ln 1/2| average to ln 2: 100%.
  EXPECT_NEAR(geomean_error({{2, 1}, {1, 2}}), 1.0, 1e-12);
  EXPECT_NEAR(geomean_error({{1.1, 1}}), 0.1, 1e-12);
  EXPECT_EQ(geomean_error({{3, 3}, {5, 5}}), 0.0);
}

// ---- the command, on files

fs::path scratch() {
  const fs::path d = fs::temp_directory_path() / ("ranksim_calibrate_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream f(p, std::ios::binary);
  f << text;
  return p;
}

std::string read(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

struct Row {
  double bytes;
  double us;
};

std::string fmt_bytes(double bytes) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.0f", bytes);
  return buf;
}

std::string fmt_percent(double fraction) {
  char buf[120];
  std::snprintf(buf, sizeof buf, "#   out-of-place and in-place times apart, sizes >= 1 MiB: %.1f%%", fraction * 100);
  return buf;
}

std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string joined(const std::vector<std::string>& w, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to && i < w.size(); ++i) out += (out.empty() ? "" : " ") + w[i];
  return out;
}

// Two readings of the same table give the same rows: sizes and out-of-place times.
void expect_same_rows(const MeasuredTable& got, const MeasuredTable& want, const std::string& context = "") {
  ASSERT_EQ(got.rows.size(), want.rows.size()) << context;
  for (size_t i = 0; i < got.rows.size(); ++i) {
    EXPECT_EQ(got.rows[i].bytes, want.rows[i].bytes) << context;
    EXPECT_EQ(got.rows[i].seconds, want.rows[i].seconds) << context;
  }
}

// A time as nccl_text prints it and calibrate prints it back.
std::string fmt_us(double us) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.2f", us);
  return buf;
}

// nccl-tests' text table as all_reduce_perf (or `binary`) prints it: one "Rank" line per entry of
// `hosts` (rank i on hosts[i]), then the rows with their out-of-place and in-place columns.
std::string nccl_text(const std::string& binary, const std::vector<std::string>& hosts, const std::vector<Row>& rows) {
  std::ostringstream o;
  o << "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n"
    << "# Collective test starting: " << binary << "\n"
    << "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg "
       "iters: 1 validation: 1 graph: 0\n"
    << "#\n# Using devices\n";
  for (size_t i = 0; i < hosts.size(); ++i) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "#  Rank %2zu Group  0 Pid %6zu on %s device %2zu [0000:1b:00] NVIDIA H100 80GB HBM3\n", i,
                  4175036 + i, hosts[i].c_str(), i % 8);
    o << buf;
  }
  o << "#\n"
    << "#                                                              out-of-place                       in-place\n"
    << "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
       "busbw  #wrong\n"
    << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  "
       "(GB/s)\n";
  for (const Row& r : rows) {
    char buf[300];
    const double algbw = r.bytes / (r.us * 1e3);
    std::snprintf(buf, sizeof buf, "%12.0f %13.0f %9s %7s %7s %8.2f %7.2f %7.2f %7d %8.2f %7.2f %7.2f %7d\n", r.bytes,
                  r.bytes / 4, "float", "sum", "-1", r.us, algbw, algbw * 1.75, 0, r.us, algbw, algbw * 1.75, 0);
    o << buf;
  }
  o << "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 100.0\n#\n"
    << "# Collective test concluded: " << binary << "\n#\n";
  return o.str();
}

std::vector<std::string> hosts(int n, int per_host) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("cnode3-00" + std::to_string(i / per_host));
  return out;
}

// A measured-looking all_reduce on `nranks` ranks of one node: the model's times with truth's
// constants.
std::vector<Row> synthetic_rows(const sim::Topology& t, int nranks = 8) {
  const sim::CollectiveModel m(t, truth(t));
  FitCase c;
  c.shape.nranks = nranks;
  c.shape.ranks_per_node = nranks;
  std::vector<Row> rows;
  for (double bytes : sizes_1k_to_4g()) rows.push_back({bytes, predict_row(m, c, bytes, 3e-6) * 1e6});
  return rows;
}

class CalibrateCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    topo_ = write("topo_" + name() + ".yaml", topology_text(1)).string();
    out_ = (scratch() / ("out_" + name() + ".yaml")).string();
    fs::remove(out_);
  }
  void TearDown() override {
    fs::remove(topo_);
    fs::remove(out_);
    for (const std::string& t : tables_) fs::remove(t);
  }
  static std::string name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

  CalibrateOptions options(const std::vector<std::string>& files) const {
    CalibrateOptions o;
    o.topology = topo_;
    o.output = out_;
    o.files = files;
    return o;
  }
  // The options of `calibrate --check` on the files: compare only, no output.
  CalibrateOptions check_options(const std::vector<std::string>& files) const {
    CalibrateOptions o = options(files);
    o.check_only = true;
    o.output.clear();
    return o;
  }
  // A table file named after the test.
  std::string table(const std::string& text, const std::string& ext = ".txt") {
    tables_.push_back(write("table_" + name() + ext, text).string());
    return tables_.back();
  }
  // calibrate must refuse with a message holding `says`, and write nothing.
  void expect_refused(const CalibrateOptions& o, const std::string& says) const {
    std::ostringstream printed;
    try {
      calibrate(o, printed);
      ADD_FAILURE() << "expected an Error saying '" << says << "'; printed:\n" << printed.str();
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(says));
    }
    EXPECT_FALSE(fs::exists(out_)) << out_;
  }

  std::string topo_, out_;
  std::vector<std::string> tables_;
};

TEST_F(CalibrateCommand, FitsATextTableAndWritesALoadableTopology) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  EXPECT_EQ(t.collectives().model, sim::CollectiveTimingModel::schedule);
  const std::string file = table(nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t)));
  std::ostringstream printed;
  EXPECT_EQ(calibrate(options({file}), printed), 0);
  const std::string p = printed.str();
  EXPECT_THAT(p, HasSubstr("fitted constants:"));
  EXPECT_THAT(p, HasSubstr("measured(us)"));
  EXPECT_THAT(p, HasSubstr("model(us)"));
  EXPECT_THAT(p, HasSubstr("fitted(us)"));
  EXPECT_THAT(p, HasSubstr("8 ranks on 1 node(s)"));
  EXPECT_THAT(p, HasSubstr("# wrote " + out_));
  // One printed row per measured size: 1 KiB .. 4 GiB.
  EXPECT_THAT(p, HasSubstr("\n          1024 "));
  EXPECT_THAT(p, HasSubstr("\n    4294967296 "));

  ASSERT_TRUE(fs::exists(out_));
  const sim::Topology cal = sim::Topology::load_file(out_);
  EXPECT_EQ(cal.collectives().model, sim::CollectiveTimingModel::nccl);
  EXPECT_EQ(cal.num_devices(), 8);
  EXPECT_EQ(cal.name(), "cal");
  // The large sizes pin the bus bandwidth: the fabric efficiency the rows were made with.
  EXPECT_NEAR(cal.collectives().fabric_efficiency, 0.83, 0.83 * 0.01);
  EXPECT_THAT(read(out_), HasSubstr(file));
}

// A shipped topology names its kernel profile relative to its own folder: the calibrated file,
// written elsewhere, names it relative to its own, so it loads with the profile.
TEST_F(CalibrateCommand, AShippedTopologyCalibratedElsewhereKeepsItsKernelProfile) {
  CalibrateOptions o = options(
      {std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/h100sxm_1node8gpu_all_reduce_together_nonvls.csv"});
  o.topology = std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml";
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  const sim::Topology cal = sim::Topology::load_file(out_);
  ASSERT_NE(cal.kind(0).profile, nullptr);
  EXPECT_EQ(
      cal.kind(0).profile->name,
      sim::Topology::load_file(std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-h100.yaml").kind(0).profile->name);
}

// The per-node-count caps the fit does not touch are written as the topology had them, not left
// to the defaults (the A100 file's tree caps are Ampere's, the defaults Hopper's).
TEST_F(CalibrateCommand, TheWrittenTopologyKeepsItsPerNodeCountCaps) {
  CalibrateOptions o = options(
      {std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/a100sxm4_2node16gpu_all_reduce_alcf_sophia.csv"});
  o.topology = std::string(RANKSIM_SOURCE_DIR) + "/topologies/dgx-a100.yaml";
  o.sets = {"nodes=2"};
  o.fit = {"call_overhead"};
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  const sim::Topology before = sim::Topology::load_file(o.topology, {"nodes=2"});
  const sim::Topology after = sim::Topology::load_file(out_);
  const sim::CollectiveTiming& shipped = before.collectives();
  const sim::CollectiveTiming& cal = after.collectives();
  EXPECT_DOUBLE_EQ(shipped.tree_channel_bandwidth[1], 23.6e9);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(cal.tree_channel_bandwidth[i], shipped.tree_channel_bandwidth[i],
                1e-3 * shipped.tree_channel_bandwidth[i]);
    EXPECT_NEAR(cal.tree_ll128_channel_bandwidth[i], shipped.tree_ll128_channel_bandwidth[i],
                1e-3 * shipped.tree_ll128_channel_bandwidth[i]);
    EXPECT_NEAR(cal.ll_max_bandwidth[i], shipped.ll_max_bandwidth[i], 1e-3 * shipped.ll_max_bandwidth[i]);
  }
}

// NCCL's buffer and chunk sizes are written back where they differ from NCCL's defaults (AWS's
// p5: 8 MiB buffers, 512 KiB NVLS chunks), and left out where they do not.
TEST_F(CalibrateCommand, TheWrittenTopologyKeepsItsBufferSizes) {
  CalibrateOptions o =
      options({std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/h100sxm_2node16gpu_efa_all_reduce_awsome.csv"});
  o.topology = std::string(RANKSIM_SOURCE_DIR) + "/topologies/aws-p5.yaml";
  o.fit = {"call_overhead"};
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  const sim::CollectiveTiming cal = sim::Topology::load_file(out_).collectives();
  EXPECT_EQ(cal.buffer_size, 8u << 20);
  EXPECT_EQ(cal.nvls_chunk_size, 512u << 10);
  EXPECT_EQ(cal.nvls_tree_max_chunk_size, 512u << 10);
  EXPECT_EQ(cal.p2p_chunk_size, 512u << 10);
  EXPECT_EQ(cal.message_latency, sim::Topology::load_file(o.topology).collectives().message_latency);
  EXPECT_THAT(read(out_), HasSubstr("buffer_size: 8 MiB"));
  EXPECT_THAT(read(out_), HasSubstr("nvls_chunk_size: 512 KiB"));
  // A size no binary unit divides is written in bytes, so that it reads back exactly.
  o.sets = {"collectives.buffer_size=10000001B", "collectives.p2p_chunk_size=1536KiB"};
  ASSERT_EQ(calibrate(o, printed), 0);
  EXPECT_EQ(sim::Topology::load_file(out_).collectives().buffer_size, 10000001u);
  EXPECT_EQ(sim::Topology::load_file(out_).collectives().p2p_chunk_size, 1536u << 10);
  EXPECT_THAT(read(out_), HasSubstr("buffer_size: 10000001 B"));
  o.sets = {};
  o.topology = std::string(RANKSIM_SOURCE_DIR) + "/topologies/h100-cluster.yaml";
  o.sets = {"nodes=2"};
  ASSERT_EQ(calibrate(o, printed), 0);
  EXPECT_THAT(read(out_), Not(HasSubstr("buffer_size")));
  EXPECT_THAT(read(out_), Not(HasSubstr("chunk_size")));
  EXPECT_THAT(read(out_), Not(HasSubstr("message_latency")));
}

TEST_F(CalibrateCommand, CheckComparesAndWritesNothing) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::string file = table(nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t)));
  CalibrateOptions o = check_options({file});
  std::ostringstream printed;
  EXPECT_EQ(calibrate(o, printed), 0);
  EXPECT_THAT(printed.str(), HasSubstr("measured(us)"));
  EXPECT_THAT(printed.str(), Not(HasSubstr("fitted(us)")));
  EXPECT_FALSE(fs::exists(out_));
}

// --sizes keeps the rows within its range, in the comparison and in the fit.
TEST_F(CalibrateCommand, SizesComparesAndFitsOnlyTheRowsInTheRange) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::string file = table(nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t)));
  CalibrateOptions check = check_options({file});
  check.sizes = ":64KiB";
  std::ostringstream small;
  ASSERT_EQ(calibrate(check, small), 0);
  EXPECT_THAT(small.str(), HasSubstr("# rows of sizes :64KiB only"));
  EXPECT_THAT(small.str(), HasSubstr("\n          1024 "));
  EXPECT_THAT(small.str(), HasSubstr("\n         65536 "));
  EXPECT_THAT(small.str(), Not(HasSubstr("\n        131072 ")));
  EXPECT_THAT(small.str(), HasSubstr("sizes < 1 MiB"));
  EXPECT_THAT(small.str(), Not(HasSubstr("sizes >= 1 MiB")));

  CalibrateOptions fit = options({file});
  fit.sizes = "1MiB:4GiB";
  std::ostringstream big;
  ASSERT_EQ(calibrate(fit, big), 0);
  EXPECT_THAT(big.str(), HasSubstr("# rows of sizes 1MiB:4GiB only"));
  EXPECT_THAT(big.str(), Not(HasSubstr("\n        524288 ")));
  EXPECT_THAT(big.str(), HasSubstr("\n       1048576 "));
  EXPECT_THAT(big.str(), HasSubstr("\n    4294967296 "));
  EXPECT_THAT(big.str(), Not(HasSubstr("sizes < 1 MiB")));
  EXPECT_THAT(read(out_), HasSubstr("(their rows of sizes 1MiB:4GiB only)"));
  // The large sizes alone still pin the bus bandwidth the rows were made with.
  EXPECT_NEAR(sim::Topology::load_file(out_).collectives().fabric_efficiency, 0.83, 0.83 * 0.01);
}

TEST_F(CalibrateCommand, RefusesSizesThatAreNotARange) {
  const std::string file = table(nccl_text("all_reduce_perf", hosts(8, 8), {{1024, 30.5}, {1048576, 60.2}}));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"1MiB", "expected one ':' between the smallest and the largest size"},
      {"1MiB:2MiB:4MiB", "expected one ':'"},
      {":", "give a smallest or a largest size"},
      {"8GiB:1MiB", "the largest size is below the smallest"},
      {"1 parsec:", "--sizes '1 parsec:'"},
      {"2MiB:4MiB", "no row within --sizes 2MiB:4MiB (its sizes run from 1024 to 1048576 bytes)"},
  };
  for (const auto& [spec, says] : bad) {
    CalibrateOptions o = options({file});
    o.sizes = spec;
    expect_refused(o, says);
  }
}

const std::vector<Row> kRows = {{1024, 30.5}, {2048, 31.0}, {1048576, 60.2}};

TEST_F(CalibrateCommand, RefusesATextWithoutRows) {
  expect_refused(options({table("this is not\nan nccl-tests output\n")}), "no measurements found");
}

TEST_F(CalibrateCommand, RefusesANonNumericTime) {
  std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows);
  const std::string bad =
      "        2048           512     float     sum      -1     fast    0.07    0.12       0"
      "    31.00    0.07    0.12       0\n";
  text.insert(text.find("# Out of bounds"), bad);
  expect_refused(options({table(text)}), "the time 'fast' is not a number of microseconds");
}

TEST_F(CalibrateCommand, RefusesARowWithTooFewColumns) {
  std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows);
  text.insert(text.find("# Out of bounds"), "        4096          1024     float     sum      -1    31.50\n");
  expect_refused(options({table(text)}), "got 6 columns");
}

// The line of `text` that holds `what` (from 1).
int line_of(const std::string& text, const std::string& what) {
  const size_t at = text.find(what);
  return at == std::string::npos ? 0 : 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

// A job script's log: all_reduce_perf, all_gather_perf and sendrecv_perf one after another.
std::string three_tests(const std::vector<Row>& rows) {
  return nccl_text("all_reduce_perf", hosts(8, 8), rows) + "\n" + nccl_text("all_gather_perf", hosts(8, 8), rows) +
         "\n" + nccl_text("sendrecv_perf", hosts(8, 8), rows);
}

TEST_F(CalibrateCommand, TakesEveryTestOfALogAndSaysWhatItLeavesOut) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::vector<Row> rows = synthetic_rows(t);
  const std::string text = three_tests(rows);
  const std::string log = table(text);
  const int ag = line_of(text, "starting: all_gather_perf"), sr = line_of(text, "starting: sendrecv_perf");
  ASSERT_GT(ag, 1);
  std::ostringstream printed;
  ASSERT_EQ(calibrate(options({log}), printed), 0);
  const std::string p = printed.str();
  EXPECT_THAT(p, HasSubstr("fitted to 2 table(s)"));
  EXPECT_THAT(p, HasSubstr("# " + log + ":2 (all_reduce_perf): ring"));
  EXPECT_THAT(p, HasSubstr("# " + log + ":" + std::to_string(ag) + " (all_gather_perf): ring"));
  EXPECT_THAT(p, HasSubstr("# left out " + log + ":" + std::to_string(sr) +
                           " (sendrecv_perf): collective test 'sendrecv_perf' is not one ranksim times"));
  const std::string written = read(out_);
  EXPECT_THAT(written, HasSubstr(log + ":" + std::to_string(ag) + " (all_gather_perf)"));
  EXPECT_THAT(written, HasSubstr("hardware: 8 ranks on 1 host(s), NVIDIA H100 80GB HBM3"));
  EXPECT_THAT(written, HasSubstr("left out " + log + ":" + std::to_string(sr)));

  // Each test of the log reads as the same table in a file of its own.
  const std::string alone = table(nccl_text("all_gather_perf", hosts(8, 8), rows), ".ag.txt");
  CalibrateOptions both = check_options({log, alone});
  std::ostringstream checked;
  ASSERT_EQ(calibrate(both, checked), 0);
  const std::string c = checked.str();
  const std::string from_log = c.substr(c.find(log + ":" + std::to_string(ag)));
  const std::string from_file = c.substr(c.find(alone + ": ring"));
  auto table_of = [](const std::string& s) {
    return s.substr(s.find("size(B)"), s.find("#   geometric") - s.find("size(B)"));
  };
  EXPECT_EQ(table_of(from_log), table_of(from_file));
}

TEST_F(CalibrateCommand, OpTakesOneCollectivesTestsFromALog) {
  const std::string log = table(three_tests(kRows));
  CalibrateOptions o = check_options({log});
  o.op = "all_gather";
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  EXPECT_THAT(printed.str(), HasSubstr("(all_gather_perf): ring"));
  EXPECT_THAT(printed.str(), Not(HasSubstr("all_reduce_perf")));
  EXPECT_THAT(printed.str(), Not(HasSubstr("left out")));
  o.op = "broadcast";
  expect_refused(o,
                 log + ": none of its tests is broadcast (--op): it holds all_reduce_perf at line 2, all_gather_perf");
}

TEST_F(CalibrateCommand, RefusesATestOfALogThatPrintedNoRows) {
  const std::string failed = nccl_text("all_gather_perf", hosts(8, 8), {});
  const std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows) + failed;
  const std::string log = table(text);
  expect_refused(options({log}), log + ":" + std::to_string(line_of(text, "starting: all_gather_perf")) +
                                     " (all_gather_perf): the test printed no measurements (did it fail?); give --op");
}

TEST_F(CalibrateCommand, RefusesACollectiveItDoesNotTime) {
  expect_refused(options({table(nccl_text("sendrecv_perf", hosts(8, 8), kRows))}),
                 ":2: collective test 'sendrecv_perf' is not one ranksim times");
}

TEST_F(CalibrateCommand, RefusesALogOfTestsThatDoNotNameTheirCollective) {
  // The older header has no "Collective test starting" line: two runs cannot be told apart.
  auto unnamed = [](const std::string& binary) {
    const std::string t = nccl_text(binary, hosts(8, 8), kRows);
    return t.substr(t.find("# nThread"));
  };
  const std::string log = table(unnamed("all_reduce_perf") + unnamed("all_gather_perf"));
  CalibrateOptions o = options({log});
  o.op = "all_reduce";
  expect_refused(o, ":1 (unnamed test): the test's header does not name its collective");
}

TEST_F(CalibrateCommand, RefusesTwoCollectivesInOneCsv) {
  const std::string csv = "# op: all_reduce\n# op: all_gather\n# ranks: 8\nsize_bytes,time_us\n1024,30.5\n";
  expect_refused(options({table(csv, ".csv")}), "several collectives (all_reduce and all_gather)");
}

TEST_F(CalibrateCommand, RefusesRanksThatDisagreeWithTheFile) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.ranks = 4;
  expect_refused(o, "wrong rank count: the table ran on 8 ranks but --ranks is 4");
}

TEST_F(CalibrateCommand, RefusesMoreRanksThanTheTopologyHas) {
  expect_refused(options({table(nccl_text("all_reduce_perf", hosts(16, 8), kRows))}),
                 "the table ran on 16 ranks but topology 'cal' has 8 devices");
}

TEST_F(CalibrateCommand, RefusesMoreNodesThanTheTopologyHas) {
  // 8 ranks on two hosts, 4 on each; the topology has one node of 8 devices.
  expect_refused(options({table(nccl_text("all_reduce_perf", hosts(8, 4), kRows))}),
                 "the table ran 8 ranks on 2 node(s), but topology 'cal' has 1; add nodes with --set nodes=2");
}

TEST_F(CalibrateCommand, RefusesMoreRanksPerNodeThanTheTopologyHasDevices) {
  const std::string csv =
      "# op: all_reduce\n# ranks: 16\n# nodes: 1\nsize_bytes,time_us,algbw_GBps,busbw_GBps\n1024,30.5,0.03,0.06\n";
  CalibrateOptions o = options({table(csv, ".csv")});
  o.sets = {"nodes=2"};
  expect_refused(o, "the table ran 16 ranks on 1 node(s), 16 per node, but topology 'cal' has 8 devices per node");
}

TEST_F(CalibrateCommand, PlacesTheTablesRanksEvenlyOnItsNodes) {
  // One rank on each of 4 hosts (a ring through the network only), on a topology of 8-device
  // nodes: the shape is 4 nodes of one rank, not the first 4 devices of one node.
  const std::string file = table(nccl_text("all_reduce_perf", hosts(4, 1), kRows));
  CalibrateOptions o = check_options({file});
  o.sets = {"nodes=4"};
  std::ostringstream printed;
  EXPECT_EQ(calibrate(o, printed), 0);
  EXPECT_THAT(printed.str(), HasSubstr("4 ranks on 4 node(s)"));
  const std::string uneven =
      "# op: all_reduce\n# ranks: 8\n# nodes: 3\nsize_bytes,time_us,algbw_GBps,busbw_GBps\n1024,30.5,0.03,0.06\n";
  o = options({table(uneven, ".csv")});
  o.sets = {"nodes=4"};
  expect_refused(o, "the table ran 8 ranks on 3 node(s), not the same number on each node");
}

TEST_F(CalibrateCommand, CheckRefusesAnOutputOrConstantsToFit) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.check_only = true;
  expect_refused(o, "calibrate --check writes nothing; drop -o");
  o.output.clear();
  o.fit = {"call_overhead"};
  expect_refused(o, "calibrate --check fits nothing; drop --fit");
  o.fit.clear();
  o.leave_one_out = true;
  expect_refused(o, "drop --leave-one-out");
}

TEST_F(CalibrateCommand, LeaveOneOutNeedsTwoTables) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.leave_one_out = true;
  expect_refused(o, "--leave-one-out needs two or more tables");
}

// Runs the options with --leave-one-out; what it printed from its first line on (after the
// comparison), checked to be there.
std::string left_out_lines(CalibrateOptions o) {
  o.leave_one_out = true;
  std::ostringstream printed;
  EXPECT_EQ(calibrate(o, printed), 0);
  const std::string p = printed.str();
  const size_t at = p.find("# leave one out: each table predicted by the constants fitted to the others\n");
  EXPECT_NE(at, std::string::npos) << p;
  EXPECT_LT(p.find("measured(us)"), at);
  return at == std::string::npos ? "" : p.substr(at);
}

// End to end: each table's line, after the comparison, and the file written as without it.
TEST_F(CalibrateCommand, LeaveOneOutPrintsEachTableFittedAndLeftOut) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::string eight = table(nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t)));
  const std::string four = table(nccl_text("all_reduce_perf", hosts(4, 4), synthetic_rows(t, 4)), ".four.txt");
  const std::string lines = left_out_lines(options({eight, four}));
  EXPECT_THAT(lines, HasSubstr("# " + eight + ": sizes >= 1 MiB "));
  EXPECT_THAT(lines, HasSubstr("# " + four + ": sizes >= 1 MiB "));
  EXPECT_THAT(lines, HasSubstr(" left out; sizes < 1 MiB "));
  EXPECT_TRUE(fs::exists(out_));
}

// The tables of --leave-one-out are the tests: one log of two collectives' tests is two tables.
TEST_F(CalibrateCommand, LeaveOneOutTakesTheTestsOfOneLog) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::string log = table(three_tests(synthetic_rows(t)));
  const std::string lines = left_out_lines(options({log}));
  EXPECT_THAT(lines, HasSubstr("# " + log + ":2 (all_reduce_perf): sizes >= 1 MiB "));
  EXPECT_THAT(lines, HasSubstr(" (all_gather_perf): sizes >= 1 MiB "));
}

TEST_F(CalibrateCommand, RefusesACsvWithoutItsCollective) {
  const std::string csv = "# ranks: 8\n# nodes: 1\nsize_bytes,time_us,algbw_GBps,busbw_GBps\n1024,30.5,0.03,0.06\n";
  expect_refused(options({table(csv, ".csv")}), "the file does not name its collective; give it with --op");
}

TEST_F(CalibrateCommand, RefusesAnUnknownAlgorithm) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.algorithm = "fast";
  expect_refused(o, "algorithm 'fast' is not one of NCCL's");
}

TEST_F(CalibrateCommand, RefusesAnAlgorithmThatCannotServeTheCollective) {
  CalibrateOptions o = options({table(nccl_text("all_gather_perf", hosts(8, 8), kRows))});
  o.algorithm = "tree";
  expect_refused(o, "trees serve all_reduce only");
}

// --algo and --proto, and a CSV's `# algo:`, take NCCL_ALGO's and NCCL_PROTO's lists: the
// tables are then predicted by NCCL's choice among what the lists allow. On this one-node
// topology "^tree" leaves the ring (no NVLS, CollNet, PAT or NVLS tree on one node), so the
// predictions are --algo ring's.
TEST_F(CalibrateCommand, TakesNcclsLists) {
  const std::string file = table(nccl_text("all_reduce_perf", hosts(8, 8), kRows));
  // The rows and errors printed (a CSV has no in-place times to compare the out-of-place ones with).
  auto rows_part = [](const std::string& p) {
    std::istringstream in(p.substr(p.find("size(B)")));
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("#   out-of-place and in-place", 0) != 0) out += line + "\n";
    return out;
  };
  auto predicted = [&](const std::string& algo, const std::string& proto, const std::string& path) {
    CalibrateOptions o = check_options({path});
    o.algorithm = algo;
    o.protocol = proto;
    std::ostringstream printed;
    EXPECT_EQ(calibrate(o, printed), 0);
    return rows_part(printed.str());
  };
  const std::string ring = predicted("ring", "auto", file);
  EXPECT_EQ(predicted("^tree", "auto", file), ring);
  EXPECT_EQ(predicted("ring,tree;allreduce:ring", "auto", file), ring);
  const std::string simple = predicted("ring", "Simple", file);
  EXPECT_NE(simple, ring);
  EXPECT_EQ(predicted("^tree", "^LL,LL128", file), simple);
  // The same list in a CSV's header.
  const std::string csv = table(
      "# op: all_reduce\n# ranks: 8\n# algo: allreduce:^Tree\nsize_bytes,time_us\n1024,30.5\n2048,31.0\n1048576,60.2\n",
      ".csv");
  CalibrateOptions o = check_options({csv});
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  EXPECT_THAT(printed.str(), HasSubstr("NCCL's choice among what NCCL_ALGO=allreduce:^Tree allows"));
  EXPECT_EQ(rows_part(printed.str()), ring);
  // Malformed lists are refused, naming the file or the option.
  o = check_options({file});
  o.algorithm = "ring;tree";
  expect_refused(o, file + ": the runs' algorithm: NCCL_ALGO=\"ring;tree\": entry 'tree' names no function");
  o = check_options({file});
  o.protocol = "^LL,LL127";
  expect_refused(o, "--proto: NCCL_PROTO=\"^LL,LL127\": unknown name 'LL127'");
  const std::string bad =
      table("# op: all_reduce\n# ranks: 8\n# algo: allreduce:^Trea\nsize_bytes,time_us\n1024,30.5\n", ".bad.csv");
  expect_refused(check_options({bad}),
                 bad + ":3: '# algo: allreduce:^Trea': NCCL_ALGO=\"allreduce:^Trea\": unknown name 'Trea'");
}

// The protocol a log reports is the runs': --proto must agree with it.
TEST_F(CalibrateCommand, TakesTheProtocolTheLogReports) {
  std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows);
  text.insert(text.find("#                                                              out-of-place"),
              "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n");
  const std::string log = table(text);
  CalibrateOptions o = check_options({log});
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  CalibrateOptions simple = check_options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows), ".plain.txt")});
  simple.protocol = "Simple";
  std::ostringstream forced;
  ASSERT_EQ(calibrate(simple, forced), 0);
  auto rows = [](const std::string& p) { return p.substr(p.find("size(B)")); };
  EXPECT_EQ(rows(printed.str()), rows(forced.str()));
  o.protocol = "LL";
  expect_refused(o, log + ": the file says the runs set NCCL_PROTO=Simple but --proto says LL");
}

// A log with NCCL's tuning messages: rank 0's "N Bytes -> Algo A proto P" before the table, one a
// size in `ran` (NCCL's numbers: algorithm 1 ring, 0 tree, 4 NVLS; protocol 0 LL, 1 LL128, 2 Simple).
std::string with_tuning(std::string text, const std::vector<std::tuple<double, int, int>>& ran) {
  std::string lines;
  for (const auto& [bytes, algo, proto] : ran)
    lines += "cnode3-000:1:1 [0] NCCL INFO " + fmt_bytes(bytes) + " Bytes -> Algo " + std::to_string(algo) + " proto " +
             std::to_string(proto) + " time 1.000000\n";
  text.insert(text.find("#                                                              out-of-place"), lines);
  return text;
}

TEST_F(CalibrateCommand, PrintsNcclsOwnChoiceBesideTheModels) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::vector<Row> rows = synthetic_rows(t);
  // The model's choice at 1 KiB and 4 GiB (its LL and Simple rings), and NCCL's: a ring on LL at
  // 1 KiB, a tree on Simple at 4 GiB.
  std::ostringstream printed;
  ASSERT_EQ(calibrate(check_options({table(with_tuning(nccl_text("all_reduce_perf", hosts(8, 8), rows),
                                                       {{1024, 1, 0}, {4 * kGiB, 0, 2}}))}),
                      printed),
            0);
  const std::string p = printed.str();
  EXPECT_THAT(p, HasSubstr("  choice           nccl\n"));
  EXPECT_THAT(p, HasSubstr("ring/LL/1ch      ring/LL\n"));
  EXPECT_THAT(p, HasSubstr("ring/Simple/16ch tree/Simple\n"));
  EXPECT_THAT(p, HasSubstr("#   NCCL's own choice (its tuning messages) differs from the model's algorithm or "
                           "protocol at 1 of the 2 sizes it names\n"));
  // Without such messages, no column.
  std::ostringstream plain;
  ASSERT_EQ(calibrate(check_options({table(nccl_text("all_reduce_perf", hosts(8, 8), rows))}), plain), 0);
  EXPECT_THAT(plain.str(), Not(HasSubstr("nccl\n")));
  EXPECT_THAT(plain.str(), Not(HasSubstr("NCCL's own choice")));
}

// --nccl-choice times a row NCCL's messages name as NCCL ran it; the others as the model chooses.
TEST_F(CalibrateCommand, NcclChoiceTimesEachRowAsNcclRanIt) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const std::vector<Row> rows = synthetic_rows(t);
  CalibrateOptions o = check_options(
      {table(with_tuning(nccl_text("all_reduce_perf", hosts(8, 8), rows), {{4 * kGiB, 0, 2}, {1024, 1, 2}}))});
  o.nccl_choice = true;
  std::ostringstream printed;
  ASSERT_EQ(calibrate(o, printed), 0);
  sim::CollectiveTiming k = t.collectives();
  k.model = sim::CollectiveTimingModel::nccl;
  const sim::CollectiveModel m(t, k);
  sim::CollectiveShape s = sim::first_devices_shape(t, sim::CollOp::all_reduce, 8);
  auto row = [&](double bytes, sim::CollAlgo a, sim::Protocol p, const std::string& measured) {
    s.bytes = bytes;
    const std::optional<sim::CollectiveEstimate> e = m.estimate(s, a, p);
    EXPECT_TRUE(e.has_value());
    const double us = (3e-6 + e->seconds) * 1e6;
    char line[200];
    std::snprintf(line, sizeof line, "%14.0f %12s %12.2f", bytes, measured.c_str(), us);
    return std::string(line);
  };
  const std::string p = printed.str();
  EXPECT_THAT(p, HasSubstr(row(4 * kGiB, sim::CollAlgo::tree, sim::Protocol::simple, fmt_us(rows.back().us))));
  EXPECT_THAT(p, HasSubstr(row(1024, sim::CollAlgo::ring, sim::Protocol::simple, fmt_us(rows.front().us))));
  EXPECT_THAT(p, HasSubstr("tree/Simple/16ch tree/Simple\n"));
  EXPECT_THAT(p, HasSubstr("ring/Simple/1ch  ring/Simple\n"));
  // a row the messages do not name: the model's choice (an LL ring at 2 KiB)
  EXPECT_THAT(p, HasSubstr("  ring/LL/1ch\n"));
  EXPECT_THAT(p, HasSubstr("differs from the timed algorithm or protocol at 0 of the 2 sizes it names (timed as NCCL "
                           "ran them: --nccl-choice)"));
}

// The comparison says how far a file's out-of-place and in-place times lie apart.
TEST_F(CalibrateCommand, SaysHowFarTheOutOfPlaceAndInPlaceTimesLieApart) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  std::string text = nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t));
  // nccl_text prints each row's in-place time as its out-of-place one: 0% apart; then the 4 GiB
  // row's in place 10% longer, the only one of the 13 from 1 MiB up: exp(ln(1.1) / 13) - 1.
  std::ostringstream same;
  ASSERT_EQ(calibrate(check_options({table(text)}), same), 0);
  EXPECT_THAT(same.str(), HasSubstr("#   out-of-place and in-place times apart, sizes >= 1 MiB: 0.0% (13 sizes)\n"));
  EXPECT_THAT(same.str(), HasSubstr("#   out-of-place and in-place times apart, sizes < 1 MiB: 0.0% (10 sizes)\n"));
  const size_t row = text.find("\n  4294967296 ") + 1;
  const size_t end = text.find('\n', row);
  std::vector<std::string> w = split_words(text.substr(row, end - row));
  char in_place[40];
  std::snprintf(in_place, sizeof in_place, "%.2f", std::stod(w[5]) * 1.1);
  w[9] = in_place;
  text = text.substr(0, row) + joined(w, 0, w.size()) + text.substr(end);
  std::ostringstream apart;
  ASSERT_EQ(calibrate(check_options({table(text, ".log")}), apart), 0);
  EXPECT_THAT(apart.str(), HasSubstr(fmt_percent(std::exp(std::log(std::stod(in_place) / std::stod(w[5])) / 13) - 1) +
                                     " (13 sizes)\n"));
}

TEST_F(CalibrateCommand, NcclChoiceNeedsNcclsTuningMessages) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  CalibrateOptions o = check_options({table(nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t)))});
  o.nccl_choice = true;
  expect_refused(o, "--nccl-choice needs a log with NCCL's tuning messages");
}

TEST_F(CalibrateCommand, RefusesAnNcclChoiceTheTopologyCannotTime) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  CalibrateOptions o =
      options({table(with_tuning(nccl_text("all_reduce_perf", hosts(8, 8), synthetic_rows(t)), {{1048576, 4, 2}}))});
  o.nccl_choice = true;
  expect_refused(o, "NCCL ran its 1048576-byte calls as nvls/Simple, which the model cannot time on this topology: ");
}

// Rows NCCL ran on a Simple ring at every size (NCCL_PROTO=Simple in effect, but not said), on 8, 4
// and 2 ranks: fitted as NCCL ran them, the constants they were made with come back; fitted as the
// model would choose (LL and LL128 rings and trees below 8 MiB), the fit cannot follow them.
TEST_F(CalibrateCommand, FitsTheTimingOfWhatNcclRan) {
  const sim::Topology t = sim::Topology::load_file(topo_);
  const sim::CollectiveModel m(t, truth(t));
  std::vector<std::string> files;
  for (int n : {8, 4, 2}) {
    sim::CollectiveShape s = sim::first_devices_shape(t, sim::CollOp::all_reduce, n);
    std::vector<Row> rows;
    std::vector<std::tuple<double, int, int>> ran;
    for (double bytes : sizes_1k_to_4g()) {
      s.bytes = bytes;
      rows.push_back({bytes, (3e-6 + m.estimate(s, sim::CollAlgo::ring, sim::Protocol::simple)->seconds) * 1e6});
      ran.emplace_back(bytes, 1, 2);
    }
    files.push_back(write("table_" + name() + std::to_string(n) + ".txt",
                          with_tuning(nccl_text("all_reduce_perf", hosts(n, 8), rows), ran))
                        .string());
    tables_.push_back(files.back());
  }
  auto fitted = [&](bool as_nccl) {
    CalibrateOptions o = options(files);
    o.nccl_choice = as_nccl;
    o.fit = {"fabric_efficiency", "intra_latency", "call_overhead"};
    std::ostringstream printed;
    EXPECT_EQ(calibrate(o, printed), 0);
    const std::string p = printed.str();
    const size_t at = p.find("# rms log error ");
    EXPECT_NE(at, std::string::npos) << p;
    return std::pair{std::stod(p.substr(at + 16)), sim::Topology::load_file(out_).collectives()};
  };
  const auto [rms, k] = fitted(true);
  EXPECT_LT(rms, 1e-3);
  EXPECT_NEAR(k.fabric_efficiency, 0.83, 0.83 * 0.01);
  EXPECT_NEAR(k.intra_latency.seconds(), 2.1e-6, 2.1e-6 * 0.01);
  EXPECT_NEAR(k.call_overhead.seconds(), 20e-6, 20e-6 * 0.01);
  const auto [rms_model, k_model] = fitted(false);
  EXPECT_GT(rms_model, 0.01);
  EXPECT_GT(
      std::abs(k_model.intra_latency.seconds() / 2.1e-6 - 1) + std::abs(k_model.call_overhead.seconds() / 20e-6 - 1),
      0.05);
}

TEST_F(CalibrateCommand, RefusesAnUnknownProtocol) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.protocol = "fast";
  expect_refused(o, "unknown --proto 'fast'");
}

TEST_F(CalibrateCommand, RefusesAMissingFile) {
  expect_refused(options({(scratch() / "no_such_table.txt").string()}), "cannot read nccl-tests output");
}

TEST_F(CalibrateCommand, RefusesToRunWithoutAnOutput) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.output.clear();
  expect_refused(o, "calibrate needs -o");
}

TEST_F(CalibrateCommand, RefusesAnOutputInAMissingFolderBeforeFitting) {
  CalibrateOptions o = options({table(nccl_text("all_reduce_perf", hosts(8, 8), kRows))});
  o.output = (scratch() / "no_such_folder" / "out.yaml").string();
  std::ostringstream printed;
  try {
    calibrate(o, printed);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("-o '" + o.output + "': the folder '"));
    EXPECT_THAT(e.what(), HasSubstr("does not exist; create it first"));
  }
  EXPECT_EQ(printed.str(), "");  // nothing fitted or printed
}

TEST_F(CalibrateCommand, RefusesAnOutputOnOneOfItsInputs) {
  const std::string file = table(nccl_text("all_reduce_perf", hosts(8, 8), kRows));
  CalibrateOptions o = options({file});
  o.output = topo_;
  const std::string before = read(topo_);
  expect_refused(o, "is the topology, which the run reads: writing it would destroy the input");
  EXPECT_EQ(read(topo_), before);
  o.output = file;
  expect_refused(o, "is a measured table, which the run reads");
}

TEST_F(CalibrateCommand, RefusesToRunWithoutFiles) { expect_refused(options({}), "at least one nccl-tests output"); }

// ---- reading

TEST(NcclTestsInput, ReadsTheRealAllGatherOutput) {
  const std::string path =
      std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/raw/a100sxm4_2node8gpu_all_gather_alcf_polaris.txt";
  const MeasuredTable t = read_nccl_tests(path);
  EXPECT_EQ(t.path, path);
  // The older header names no collective ("Collective test starting" came with later versions):
  // calibrate then needs --op.
  EXPECT_EQ(t.op, "");
  EXPECT_EQ(t.ranks, 8);
  EXPECT_EQ(t.nodes, 2);
  // Five size-0 rows dropped; 128 B .. 1 GiB, doubling.
  ASSERT_EQ(t.rows.size(), 24u);
  EXPECT_EQ(t.rows.front().bytes, 128);
  EXPECT_NEAR(t.rows.front().seconds, 69.40e-6, 1e-15);
  EXPECT_EQ(t.rows.back().bytes, 1073741824);
  EXPECT_NEAR(t.rows.back().seconds, 25755e-6, 1e-12);
  for (size_t i = 1; i < t.rows.size(); ++i) EXPECT_EQ(t.rows[i].bytes, 2 * t.rows[i - 1].bytes);
}

TEST(NcclTestsInput, ItsCsvTwinAgrees) {
  const std::string dir = std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/";
  const MeasuredTable raw = read_nccl_tests(dir + "raw/a100sxm4_2node8gpu_all_gather_alcf_polaris.txt");
  const MeasuredTable csv = read_nccl_tests(dir + "a100sxm4_2node8gpu_all_gather_alcf_polaris.csv");
  EXPECT_EQ(csv.op, "all_gather");
  EXPECT_EQ(csv.ranks, 8);
  EXPECT_EQ(csv.nodes, 2);
  EXPECT_EQ(csv.algorithm, "auto");
  expect_same_rows(csv, raw);
}

// A log run with NCCL_DEBUG=INFO whose 2 MiB row NCCL's messages cut (ODISSEI's on Snellius) reads
// to the rows of its CSV twin, which joined the row's two pieces by hand.
TEST(NcclTestsInput, ARealLogWithACutRowAgreesWithItsCsvTwin) {
  const std::string dir = std::string(RANKSIM_SOURCE_DIR) + "/docs/data/nccl-tests/";
  const MeasuredTable raw = read_nccl_tests(dir + "raw/h100sxm_2node8gpu_all_reduce_odisseistress.txt");
  const MeasuredTable csv = read_nccl_tests(dir + "h100sxm_2node8gpu_all_reduce_odisseistress.csv");
  EXPECT_EQ(raw.op, "all_reduce");
  EXPECT_EQ(raw.ranks, 8);
  EXPECT_EQ(raw.nodes, 2);
  ASSERT_EQ(raw.rows.size(), 31u);
  expect_same_rows(csv, raw);
  EXPECT_EQ(raw.rows[18].bytes, 2097152);
  EXPECT_NEAR(raw.rows[18].seconds, 93.65e-6, 1e-15);
}

TEST(NcclTestsInput, NamesTheCollectiveOfANewerHeader) {
  const MeasuredTable t = parse_nccl_tests(nccl_text("alltoall_perf", hosts(16, 8), kRows), "x.txt");
  EXPECT_EQ(t.op, "all_to_all");
  EXPECT_EQ(t.ranks, 16);
  EXPECT_EQ(t.nodes, 2);
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[2].bytes, 1048576);
  EXPECT_NEAR(t.rows[2].seconds, 60.2e-6, 1e-15);
}

// nccl-tests built with MPI=1 NAME_SUFFIX=_mpi names its binaries all_gather_perf_mpi.
TEST(NcclTestsInput, NamesTheCollectiveOfABinaryWithASuffix) {
  EXPECT_EQ(parse_nccl_tests(nccl_text("all_gather_perf_mpi", hosts(8, 8), kRows), "x.txt").op, "all_gather");
  EXPECT_EQ(parse_nccl_tests(nccl_text("reduce_perf_mpi", hosts(8, 8), kRows), "x.txt").op, "reduce");
}

TEST(NcclTestsInput, SplitsALogIntoItsTests) {
  const std::string text =
      nccl_text("all_reduce_perf", hosts(16, 8), kRows) + nccl_text("alltoall_perf", hosts(8, 8), {kRows[0]});
  const std::vector<MeasuredTable> tests = parse_nccl_tests_log(text, "log.txt");
  ASSERT_EQ(tests.size(), 2u);
  EXPECT_EQ(tests[0].path, "log.txt:2 (all_reduce_perf)");
  EXPECT_EQ(tests[0].op, "all_reduce");
  EXPECT_EQ(tests[0].ranks, 16);
  EXPECT_EQ(tests[0].nodes, 2);
  EXPECT_EQ(tests[0].rows.size(), 3u);
  const int second = line_of(text, "starting: alltoall_perf");
  EXPECT_EQ(tests[1].line, second);
  EXPECT_EQ(tests[1].test, "alltoall_perf");
  EXPECT_EQ(tests[1].op, "all_to_all");
  EXPECT_EQ(tests[1].ranks, 8);
  EXPECT_EQ(tests[1].nodes, 1);
  ASSERT_EQ(tests[1].rows.size(), 1u);
  EXPECT_EQ(tests[1].rows[0].bytes, 1024);

  // The older header names no test: each run starts at its "nThread" line.
  std::string old = text;
  for (const char* gone : {"# nccl-tests version", "# Collective test starting"})
    for (size_t at; (at = old.find(gone)) != std::string::npos;) old.erase(at, old.find('\n', at) + 1 - at);
  const std::vector<MeasuredTable> unnamed = parse_nccl_tests_log(old, "old.txt");
  ASSERT_EQ(unnamed.size(), 2u);
  EXPECT_EQ(unnamed[0].line, 1);
  EXPECT_EQ(unnamed[1].line, line_of(old.substr(1), "# nThread"));  // the second one
  EXPECT_EQ(unnamed[0].op, "");
  EXPECT_EQ(unnamed[1].ranks, 8);
  EXPECT_EQ(unnamed[1].rows.size(), 1u);
}

TEST(NcclTestsInput, ReadsHowManyGpusAThreadDrove) {
  std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows);
  EXPECT_EQ(parse_nccl_tests(text, "x.txt").gpus_per_thread, 1);
  text.replace(text.find("nGpus 1"), 7, "nGpus 8");
  EXPECT_EQ(parse_nccl_tests(text, "x.txt").gpus_per_thread, 8);
  const std::string csv = "# op: all_reduce\n# ranks: 8\n# gpus_per_thread: 8\nsize_bytes,time_us\n1024,30.5\n";
  EXPECT_EQ(parse_nccl_tests(csv, "x.csv").gpus_per_thread, 8);
  for (const std::string& bad : {std::string("0"), std::string("eight")}) {
    try {
      (void)parse_nccl_tests("# op: all_reduce\n# gpus_per_thread: " + bad + "\nsize_bytes,time_us\n1024,30.5\n",
                             "x.csv");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("x.csv:2: '# gpus_per_thread: " + bad + "' must be a positive whole number"));
    }
  }
}

// A log run with NCCL_DEBUG=INFO says what NCCL_ALGO / NCCL_PROTO the runs set: every rank prints
// "NCCL INFO NCCL_ALGO set by environment to ..." as its communicator starts.
TEST(NcclTestsInput, ReadsTheAlgorithmAndProtocolNcclReports) {
  auto with_info = [](const std::string& lines) {
    std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows);
    text.insert(text.find("#                                                              out-of-place"), lines);
    return text;
  };
  const std::string info = "cnode3-000:4175036:4175036 [0] NCCL INFO ";
  MeasuredTable t = parse_nccl_tests(
      with_info(info + "NCCL_ALGO set by environment to Ring\n" + info + "NCCL_ALGO set by environment to Ring\n" +
                info + "NCCL_PROTO set by environment to ^LL128\n"),
      "x.txt");
  EXPECT_EQ(t.algorithm, "ring");
  EXPECT_EQ(t.protocol, "^LL128");
  t = parse_nccl_tests(with_info(info + "NCCL_ALGO set by environment to allreduce:tree,nvlstree\n"), "x.txt");
  EXPECT_EQ(t.algorithm, "allreduce:tree,nvlstree");
  EXPECT_EQ(t.protocol, "");
  EXPECT_EQ(parse_nccl_tests(nccl_text("all_reduce_perf", hosts(8, 8), kRows), "x.txt").protocol, "");
  auto refused = [&](const std::string& lines, const std::string& says) {
    try {
      (void)parse_nccl_tests(with_info(lines), "x.txt");
      ADD_FAILURE() << lines;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(says));
    }
  };
  refused(info + "NCCL_ALGO set by environment to Ring\n" + info + "NCCL_ALGO set by environment to Tree\n",
          "the log's ranks set NCCL_ALGO differently ('ring' and 'Tree')");
  refused(info + "NCCL_PROTO set by environment to LL129\n",
          "the log's NCCL_PROTO: NCCL_PROTO=\"LL129\": unknown name");
}

// With NCCL_DEBUG=INFO, NCCL's messages share the table's stream. nccl-tests prints a row's first
// columns before it runs the size, so a message NCCL prints during that run (its peers connected
// for a new algorithm, NCCL 2.22 on) starts in the middle of the row, glued to its root column,
// and the row's times follow on a line of their own after the messages (as in ODISSEI's Snellius
// logs). Such a row reads as the whole one does.
std::string cut_row(const std::string& text, const std::string& size, const std::string& messages,
                    const std::string& where = "out-of-place") {
  const size_t row = text.find("\n" + std::string(12 - size.size(), ' ') + size + " ") + 1;
  const size_t end = text.find('\n', row);
  const std::string whole = text.substr(row, end - row);
  // the row's columns: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
  const std::vector<std::string> w = split_words(whole);
  const size_t first = where == "out-of-place" ? 5 : 9;
  return text.substr(0, row) + "   " + joined(w, 0, first) + messages + "\n  " + joined(w, first, w.size()) +
         text.substr(end);
}

TEST(NcclTestsInput, ReadsARowThatNcclsMessagesCut) {
  const std::vector<Row> rows = {{1024, 30.5}, {2097152, 87.18}, {4194304, 137.6}};
  const std::string clean = nccl_text("all_reduce_perf_mpi", hosts(8, 4), rows);
  const MeasuredTable whole = parse_nccl_tests(clean, "x.txt");
  const std::string info =
      "cnode3-000:1904979:1905073 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] via NET/IB/2/GDRDMA";
  const std::string more =
      "\ncnode3-001:1793998:1794081 [0] NCCL INFO Channel 04/0 : 3[3] -> 4[0] [receive] via NET/IB/2/GDRDMA";
  auto same = [&](const std::string& text) { expect_same_rows(parse_nccl_tests(text, "x.txt"), whole, text); };
  same(cut_row(clean, "2097152", info + more + more));
  // between its out-of-place and in-place columns
  same(cut_row(clean, "2097152", info + more, "in-place"));
  // twice: the times cut again before the in-place ones
  {
    std::string text = cut_row(clean, "2097152", info + more);
    const std::string oop = "  87.18";
    const size_t newline = text.find("\n" + oop);
    ASSERT_NE(newline, std::string::npos) << text;
    const size_t at = newline + 1, end = text.find('\n', at);
    const std::vector<std::string> w = split_words(text.substr(at, end - at));
    same(text.substr(0, at) + joined(w, 0, 4) + info + more + "\n" + joined(w, 4, w.size()) + text.substr(end));
  }
  // NCCL's warnings carry a timestamp first; a host the Rank lines do not name is taken from its
  // first letter
  same(cut_row(clean, "2097152", "[2026-11-29 10:00:00] cnode3-000:1904979:1905073 [0] enqueue.cc:12 NCCL WARN x"));
  same(cut_row(clean, "2097152", "gpu-b17:1904979:1905073 [3] NCCL INFO Connected all rings"));
  // What such a message says of NCCL_ALGO is read as a whole line's is.
  EXPECT_EQ(parse_nccl_tests(
                cut_row(clean, "2097152", "cnode3-000:1:2 [0] NCCL INFO NCCL_ALGO set by environment to Ring"), "x.txt")
                .algorithm,
            "ring");
}

// A launcher may tag each line of a rank's output: Open MPI's --tag-output, MPICH's and Intel MPI's
// -prepend-rank, Slurm's srun --label. The tagged log reads as the untagged one, also where NCCL's
// tuning messages (NCCL_DEBUG_SUBSYS=TUNING, one a call) cut its rows, as in NVIDIA/nccl#1453's log.
TEST(NcclTestsInput, ReadsALogWhoseLinesALauncherTagged) {
  const std::vector<Row> rows = {{1024, 30.5}, {2097152, 87.18}, {4194304, 137.6}};
  const std::string clean = nccl_text("all_reduce_perf_mpi", hosts(8, 4), rows);
  const MeasuredTable whole = parse_nccl_tests(clean, "x.txt");
  auto tagged = [](const std::string& text, const std::string& tag) {
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out += tag + line + "\n";
    return out;
  };
  auto same = [&](const std::string& text) {
    const MeasuredTable t = parse_nccl_tests(text, "x.txt");
    EXPECT_EQ(t.op, "all_reduce");
    EXPECT_EQ(t.ranks, 8);
    EXPECT_EQ(t.nodes, 2);
    expect_same_rows(t, whole, text);
  };
  for (const std::string tag : {"[1,0]<stdout>:", "[0] ", "  0: ", "13: "}) same(tagged(clean, tag));
  const std::string tuning = "[0] cnode3-000:497888:497888 [0] NCCL INFO 2097152 Bytes -> Algo 1 proto 2 time 87.0";
  std::string cut = tagged(cut_row(clean, "2097152", ""), "[0] ");
  const size_t row = cut.find("2097152 524288");
  const size_t end = cut.find('\n', row);
  cut.insert(end, tuning + "\n" + tuning);
  same(cut);
  // A tag-like start that is not one stays: this is no row.
  EXPECT_EQ(parse_nccl_tests(clean + "[0]x 1 2 3\n", "x.txt").rows.size(), whole.rows.size());
}

TEST(NcclTestsInput, RefusesARowThatNcclsMessagesCutAndThatNeverEnds) {
  const std::vector<Row> rows = {{1024, 30.5}, {2097152, 87.18}, {4194304, 137.6}};
  const std::string clean = nccl_text("all_reduce_perf", hosts(8, 4), rows);
  const std::string info = "cnode3-000:1904979:1905073 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] via NET/IB/2";
  const std::string cut = cut_row(clean, "2097152", info);
  const size_t rest = cut.find("\n  87.18");
  ASSERT_NE(rest, std::string::npos) << cut;
  const std::string without = cut.substr(0, rest) + cut.substr(cut.find('\n', rest + 1));
  const int line = static_cast<int>(std::count(cut.begin(), cut.begin() + static_cast<long>(rest), '\n')) + 1;
  auto refused = [&](const std::string& text, const std::string& says) {
    try {
      (void)parse_nccl_tests(text, "x.txt");
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("x.txt:" + std::to_string(line) +
                                      ": this row of the table stops where a message "
                                      "of NCCL's (NCCL_DEBUG) starts, and the rest of it (time, algbw, busbw, #wrong) "
                                      "does not follow before " +
                                      says));
    }
  };
  // the next row comes first
  refused(without, "line " + std::to_string(line + 1));
  // the table's end
  const std::string last = cut_row(clean, "4194304", info);
  const size_t at = last.find("\n  137.60");
  ASSERT_NE(at, std::string::npos) << last;
  const int last_line = static_cast<int>(std::count(last.begin(), last.begin() + static_cast<long>(at), '\n')) + 1;
  try {
    (void)parse_nccl_tests(last.substr(0, at + 1) + last.substr(last.find('\n', at + 1) + 1), "x.txt");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.txt:" + std::to_string(last_line) + ": this row of the table stops"));
    EXPECT_THAT(e.what(), HasSubstr("before line " + std::to_string(last_line + 1)));
  }
  // the file's end
  try {
    (void)parse_nccl_tests(last.substr(0, at + 1), "x.txt");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.txt:" + std::to_string(last_line) + ": this row of the table stops"));
    EXPECT_THAT(e.what(), HasSubstr("before the end of the file"));
  }
}

// A log run with NCCL_DEBUG_SUBSYS=TUNING says what NCCL ran each call with: rank 0's "N Bytes ->
// Algo A proto P time T" (NCCL 2.21-2.25, NCCL's numbers) or "Func: N Bytes -> Algo NAME proto
// NAME channel{Lo..Hi}={lo..hi}" (2.26 on; all_gather's and reduce_scatter's bytes one rank's).
TEST(NcclTestsInput, ReadsNcclsOwnChoiceFromItsTuningMessages) {
  const std::vector<Row> rows = {{1024, 30.5}, {2097152, 87.18}, {4194304, 137.6}, {8388608, 200.0}};
  const std::string info = "cnode3-000:1904979:1904979 [0] NCCL INFO ";
  auto with = [&](const std::string& binary, const std::string& lines) {
    std::string text = nccl_text(binary, hosts(8, 4), rows);
    text.insert(text.find("#                                                              out-of-place"), lines);
    return text;
  };
  MeasuredTable t = parse_nccl_tests(
      cut_row(with("all_reduce_perf",
                   info + "1024 Bytes -> Algo 0 proto 0 time 12.500000\n" + info +
                       "1024 Bytes -> Algo 0 proto 0 time 12.500000\n" + info +
                       "2097152 Bytes -> Algo 1 proto 1 time 80.000000\n" + info +
                       "2097152 Bytes -> Algo 0 proto 1 time 79.000000\n" + info +
                       "8388608 Bytes -> Algo 9 proto 0 time 1.000000\n"),  // no algorithm ranksim knows
              "4194304", info + "AllReduce: 4194304 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..15}"),
      "x.txt");
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_THAT(t.rows[0].nccl, ElementsAre(NcclChoice{sim::CollAlgo::tree, sim::Protocol::ll, 0}));
  EXPECT_THAT(t.rows[1].nccl, ElementsAre(NcclChoice{sim::CollAlgo::ring, sim::Protocol::ll128, 0},
                                          NcclChoice{sim::CollAlgo::tree, sim::Protocol::ll128, 0}));
  EXPECT_THAT(t.rows[2].nccl, ElementsAre(NcclChoice{sim::CollAlgo::nvls_tree, sim::Protocol::simple, 16}));
  EXPECT_TRUE(t.rows[3].nccl.empty());
  // all_gather: the bytes of the form with channels (2.24 on) are a rank's (x 8 ranks), those of
  // 2.23's (with the function's name) and 2.20-2.22's the whole call's; names in any case
  t = parse_nccl_tests(
      with("all_gather_perf", info + "AllGather: 262144 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={2..5}\n" +
                                  info + "8388608 Bytes -> Algo 6 proto 2 time 90.000000\n" + info +
                                  "AllGather: 4194304 Bytes -> Algo 1 proto 0 time 70.000000\n" + info +
                                  "AllGather: 128 Bytes -> Algo NVLSTree proto Simple channel{Lo..Hi}={0..0}\n"),
      "x.txt");
  EXPECT_THAT(t.rows[0].nccl, ElementsAre(NcclChoice{sim::CollAlgo::nvls_tree, sim::Protocol::simple, 1}));
  EXPECT_THAT(t.rows[1].nccl, ElementsAre(NcclChoice{sim::CollAlgo::ring, sim::Protocol::ll128, 4}));
  EXPECT_THAT(t.rows[2].nccl, ElementsAre(NcclChoice{sim::CollAlgo::ring, sim::Protocol::ll, 0}));
  EXPECT_THAT(t.rows[3].nccl, ElementsAre(NcclChoice{sim::CollAlgo::pat, sim::Protocol::simple, 0}));
}

// A text row's in-place time: the fifth column from its out-of-place one, where the header names
// both groups; none in a layout of one group, or where the column is no positive number.
TEST(NcclTestsInput, KeepsTheInPlaceTimeOfATextRow) {
  const std::string head =
      "# Collective test starting: all_reduce_perf\n"
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x00] GPU\n"
      "#  Rank  1 Group  0 Pid 2 on h device  1 [0x00] GPU\n";
  MeasuredTable t = parse_nccl_tests(
      head +
          "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
          "busbw #wrong\n"
          "     1048576        262144     float     sum      -1    100.0   10.49   10.49      0    110.0    9.53    "
          "9.53      0\n"
          "     2097152        524288     float     sum      -1    200.0   10.49   10.49      0      N/A     N/A     "
          "N/A    N/A\n",
      "x.txt");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(t.rows[0].in_place_seconds, 110e-6);
  EXPECT_EQ(t.rows[1].in_place_seconds, 0);
  EXPECT_DOUBLE_EQ(t.rows[1].seconds, 200e-6);
  t = parse_nccl_tests(head +
                           "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
                           "     1048576        262144     float     sum      -1    100.0   10.49   10.49      0\n",
                       "x.txt");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(t.rows[0].seconds, 100e-6);
  EXPECT_EQ(t.rows[0].in_place_seconds, 0);
}

// The NCCL a log ran, as NCCL says it (NCCL_DEBUG=INFO, or VERSION's line of its own), joins the
// nccl-tests version in what the calibrated file says of the table.
TEST(NcclTestsInput, ReadsTheNcclVersionTheLogSays) {
  auto with = [](const std::string& line) {
    std::string text = nccl_text("all_reduce_perf", hosts(8, 8), kRows);
    text.insert(text.find("#                                                              out-of-place"), line);
    return parse_nccl_tests(text, "x.txt").about;
  };
  EXPECT_THAT(with("cnode3-000:1:1 [0] NCCL INFO NCCL version 2.22.3+cuda12.6\n"),
              Contains("software: nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902, NCCL "
                       "2.22.3+cuda12.6"));
  EXPECT_THAT(with("NCCL version 2.16.2+cuda11.6\n"), Contains(HasSubstr(", NCCL 2.16.2+cuda11.6")));
  EXPECT_THAT(with(""), Not(Contains(HasSubstr(", NCCL "))));
}

TEST(NcclTestsInput, ErrorsNameTheFileAndLine) {
  try {
    (void)parse_nccl_tests("# hello\n1024 256 float sum -1 0 0.1 0.1 0 1 1 1 0\n", "t.txt");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("t.txt:2: "));
    EXPECT_THAT(e.what(), HasSubstr("must be positive"));
  }
}

}  // namespace
}  // namespace ranksim::app

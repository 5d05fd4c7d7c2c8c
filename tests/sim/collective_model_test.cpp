// CollectiveModel against closed forms written out here: NCCL's ring, tree and protocol formulas
// on small switched topologies, selection as the least predicted time, channels, forcing and
// determinism.
#include "sim/collective_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/check.h"
#include "sim/error.h"
#include "sim/topology.h"
#include "sim/tuner_config.h"
#include "sim/units.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

constexpr double kUs = 1e-6;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kKiB = 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Fabric bandwidth, efficiency and hop latency of the one-node topology below.
constexpr double kB = 100e9;   // 100 GB/s
constexpr double kE = 0.75;    // fabric_efficiency
constexpr double kL = 2e-6;    // intra_latency: 2 us
constexpr double kBig = kGiB;  // every channel in use for every protocol

// One node of `devices` devices on a switch of 100 GB/s, with a `collectives` section.
std::string one_node(int devices, const std::string& collectives) {
  return "name: one\n"
         "device_kinds:\n"
         "  gpu:\n"
         "    peak_flops: {bf16: 100 TFLOP/s}\n"
         "    memory_bandwidth: 1 TB/s\n"
         "    memory: 16 GiB\n"
         "node:\n"
         "  devices: " +
         std::to_string(devices) +
         "\n"
         "  kind: gpu\n"
         "  fabric:\n"
         "    type: switch\n"
         "    bandwidth: 100 GB/s\n"
         "    latency: 1 us\n"
         "collectives:\n" +
         collectives;
}

const char* const kNcclSection =
    "  model: nccl\n"
    "  fabric_efficiency: 0.75\n"
    "  channels: 16\n"
    "  intra_latency: 2 us\n";

Topology dgx_like(const std::string& extra = "") {
  return Topology::parse(one_node(8, kNcclSection + extra), "one.yaml");
}

// `nodes` nodes of 8 devices on a 450 GB/s switch; 400 Gb/s (50 GB/s) NICs, `nics` per node.
Topology cluster(int nodes, int nics, double fabric_efficiency, const std::string& extra = "",
                 const std::string& nic = "400 Gb/s") {
  const std::string text =
      "name: two\n"
      "nodes: " +
      std::to_string(nodes) +
      "\n"
      "device_kinds:\n"
      "  gpu:\n"
      "    peak_flops: {bf16: 100 TFLOP/s}\n"
      "    memory_bandwidth: 1 TB/s\n"
      "    memory: 16 GiB\n"
      "node:\n"
      "  devices: 8\n"
      "  kind: gpu\n"
      "  fabric:\n"
      "    type: switch\n"
      "    bandwidth: 450 GB/s\n"
      "    latency: 1 us\n"
      "network:\n"
      "  nic_bandwidth: " +
      nic +
      "\n"
      "  nic_latency: 1 us\n"
      "  nics_per_node: " +
      std::to_string(nics) +
      "\n"
      "  levels:\n"
      "    - {name: leaf, children: 4, latency: 100 ns}\n"
      "    - {name: spine, latency: 100 ns}\n"
      "collectives:\n"
      "  model: nccl\n"
      "  fabric_efficiency: " +
      std::to_string(fabric_efficiency) +
      "\n"
      "  network_efficiency: 0.9\n"
      "  intra_latency: 4 us\n"
      "  inter_latency: 7 us\n"
      "  net_overhead: 2 us\n" +
      extra;
  return Topology::parse(text, "two.yaml");
}

CollectiveShape shape(CollOp op, double bytes, int nranks, int nodes = 1) {
  CollectiveShape s;
  s.op = op;
  s.bytes = bytes;
  s.nranks = nranks;
  s.nodes = nodes;
  s.ranks_per_node = nranks / nodes;
  return s;
}

CollectiveEstimate est(const CollectiveModel& m, const CollectiveShape& s, CollAlgo a, Protocol p) {
  std::string why;
  const auto e = m.estimate(s, a, p, &why);
  EXPECT_TRUE(e.has_value()) << to_string(a) << "/" << to_string(p) << ": " << why;
  return e.value_or(CollectiveEstimate{});
}

// |got - want| within a relative 1e-12: the model computes the same sums in another order.
void expect_close(double got, double want) { EXPECT_NEAR(got, want, std::abs(want) * 1e-12) << "want " << want; }

TEST(TopologyCollectives, TheSectionIsRead) {
  const Topology t = dgx_like();
  EXPECT_DOUBLE_EQ(t.fabric().bandwidth, kB);
  EXPECT_EQ(t.collectives().model, CollectiveTimingModel::nccl);
  EXPECT_EQ(t.collectives().channels, 16);
  EXPECT_DOUBLE_EQ(t.collectives().fabric_efficiency, kE);
  EXPECT_EQ(t.collectives().intra_latency, Time::us(2));
}

// ---- closed forms, one node of 8

TEST(CollectiveModelClosedForm, RingAllReduceSimple) {
  const CollectiveModel m(dgx_like());
  const CollectiveShape s = shape(CollOp::all_reduce, kBig, 8);
  const CollectiveEstimate e = est(m, s, CollAlgo::ring, Protocol::simple);
  const double algbw = kB * kE / (2.0 * 7 / 8);
  EXPECT_EQ(e.channels, 16);
  expect_close(e.latency, 8.4 * kUs + 14 * kL);
  expect_close(e.algbw, algbw);
  expect_close(e.seconds, 8.4 * kUs + 14 * kL + kBig / algbw);
}

TEST(CollectiveModelClosedForm, RingAllGatherSimple) {
  const CollectiveModel m(dgx_like());
  const CollectiveEstimate e = est(m, shape(CollOp::all_gather, kBig, 8), CollAlgo::ring, Protocol::simple);
  expect_close(e.seconds, 8.4 * kUs + 7 * kL + kBig / (kB * kE / (7.0 / 8)));
}

TEST(CollectiveModelClosedForm, ReduceScatterMatchesAllGather) {
  const CollectiveModel m(dgx_like());
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    const CollectiveEstimate ag = est(m, shape(CollOp::all_gather, 3e6, 8), CollAlgo::ring, p);
    const CollectiveEstimate rs = est(m, shape(CollOp::reduce_scatter, 3e6, 8), CollAlgo::ring, p);
    EXPECT_EQ(ag.seconds, rs.seconds) << to_string(p);
  }
}

TEST(CollectiveModelClosedForm, BroadcastHasBusFactorOne) {
  const CollectiveModel m(dgx_like());
  const CollectiveEstimate e = est(m, shape(CollOp::broadcast, kBig, 8), CollAlgo::ring, Protocol::simple);
  expect_close(e.algbw, kB * kE);
  expect_close(e.latency, 8.4 * kUs + 7 * kL);
}

TEST(CollectiveModelClosedForm, Ll128RunsAt092OfSimple) {
  const CollectiveModel m(dgx_like());
  for (CollOp op : {CollOp::all_reduce, CollOp::all_gather}) {
    const CollectiveShape s = shape(op, kBig, 8);
    const CollectiveEstimate simple = est(m, s, CollAlgo::ring, Protocol::simple);
    const CollectiveEstimate ll128 = est(m, s, CollAlgo::ring, Protocol::ll128);
    expect_close(ll128.algbw, 0.92 * simple.algbw);
    // NCCL's LL128 latencies: base 14 us, NVLink hop 1.9 us where Simple's is 3.4 us.
    const int hops = op == CollOp::all_reduce ? 14 : 7;
    expect_close(ll128.latency, 14 * kUs + hops * 1.9 / 3.4 * kL);
  }
}

TEST(CollectiveModelClosedForm, LlRunsAtHalfOfSimple) {
  const CollectiveModel m(dgx_like());
  const CollectiveShape s = shape(CollOp::all_reduce, kBig, 8);
  const CollectiveEstimate simple = est(m, s, CollAlgo::ring, Protocol::simple);
  const CollectiveEstimate ll = est(m, s, CollAlgo::ring, Protocol::ll);
  expect_close(ll.algbw, 0.5 * simple.algbw);
  // NCCL's LL latencies: base 6.6 us, NVLink hop 0.6 us where Simple's is 3.4 us.
  expect_close(ll.latency, 6.6 * kUs + 14 * 0.6 / 3.4 * kL);
}

TEST(CollectiveModelClosedForm, LlIsCappedAtLlMaxBandwidth) {
  // Half of 75 GB/s is 37.5 GB/s; the cap of 20 GB/s binds.
  const CollectiveModel m(dgx_like("  ll_max_bandwidth: 20 GB/s\n"));
  const CollectiveEstimate ll = est(m, shape(CollOp::all_reduce, kBig, 8), CollAlgo::ring, Protocol::ll);
  expect_close(ll.algbw, 20e9 / (2.0 * 7 / 8));
  // A cap above half the bus bandwidth does not bind.
  const CollectiveModel loose(dgx_like("  ll_max_bandwidth: 40 GB/s\n"));
  const CollectiveEstimate ll2 = est(loose, shape(CollOp::all_reduce, kBig, 8), CollAlgo::ring, Protocol::ll);
  expect_close(ll2.algbw, 0.5 * kB * kE / (2.0 * 7 / 8));
}

TEST(CollectiveModelClosedForm, TreeAllReduceSimple) {
  const CollectiveModel m(dgx_like());
  const CollectiveEstimate e = est(m, shape(CollOp::all_reduce, kBig, 8), CollAlgo::tree, Protocol::simple);
  expect_close(e.algbw, 0.5 * 0.92 * kB * kE);
  // A chain of 7 intra-node hops, up and down; NCCL's NVLink tree Simple hop is 4.0 us where the
  // ring's is 3.4 us.
  expect_close(e.latency, 8.4 * kUs + 2 * 7 * 4.0 / 3.4 * kL);
}

TEST(CollectiveModelClosedForm, CallOverheadAddsToEveryEstimate) {
  const CollectiveModel plain(dgx_like());
  const CollectiveModel slow(dgx_like("  call_overhead: 20 us\n"));
  const CollectiveShape s = shape(CollOp::all_reduce, 1e6, 8);
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    expect_close(est(slow, s, CollAlgo::ring, p).seconds, est(plain, s, CollAlgo::ring, p).seconds + 20 * kUs);
  }
}

TEST(CollectiveModelClosedForm, SimpleLatencyIsTheSimpleProtocolsBase) {
  // NCCL's 8.4 us by default; a topology's simple_latency replaces it for rings, trees and
  // point-to-point on Simple, and leaves LL's and LL128's bases as they are.
  const CollectiveModel plain(dgx_like());
  const CollectiveModel slow(dgx_like("  simple_latency: 30 us\n"));
  const CollectiveShape s = shape(CollOp::all_reduce, 1e6, 8);
  expect_close(est(plain, s, CollAlgo::ring, Protocol::simple).latency, 8.4 * kUs + 14 * kL);
  expect_close(est(slow, s, CollAlgo::ring, Protocol::simple).latency, 30 * kUs + 14 * kL);
  expect_close(est(slow, s, CollAlgo::tree, Protocol::simple).latency, 30 * kUs + 2 * 7 * 4.0 / 3.4 * kL);
  for (Protocol p : {Protocol::ll, Protocol::ll128}) {
    EXPECT_EQ(est(slow, s, CollAlgo::ring, p).latency, est(plain, s, CollAlgo::ring, p).latency);
    EXPECT_EQ(est(slow, s, CollAlgo::tree, p).latency, est(plain, s, CollAlgo::tree, p).latency);
  }
  const CollectiveShape a2a = shape(CollOp::all_to_all, 1e6, 8);
  expect_close(est(slow, a2a, CollAlgo::direct, Protocol::simple).latency,
               est(plain, a2a, CollAlgo::direct, Protocol::simple).latency + (30 - 8.4) * kUs);
  EXPECT_EQ(est(slow, a2a, CollAlgo::direct, Protocol::ll).latency,
            est(plain, a2a, CollAlgo::direct, Protocol::ll).latency);
  // NVLS has its own latency.
  const CollectiveModel nvls(dgx_like("  nvls: true\n")),
      slow_nvls(dgx_like("  nvls: true\n  simple_latency: 30 us\n"));
  EXPECT_EQ(est(slow_nvls, s, CollAlgo::nvls, Protocol::simple).latency,
            est(nvls, s, CollAlgo::nvls, Protocol::simple).latency);
}

TEST(CollectiveModelClosedForm, OneRankMovesNothing) {
  const CollectiveModel m(dgx_like());
  const CollectiveEstimate e = m.choose(shape(CollOp::all_reduce, 1e6, 1));
  EXPECT_EQ(e.algorithm, CollAlgo::ring);
  EXPECT_EQ(e.channels, 0);
  EXPECT_EQ(e.seconds, 0.0);
  EXPECT_FALSE(m.estimate(shape(CollOp::all_reduce, 1e6, 1), CollAlgo::tree, Protocol::simple));
}

// An all_gather or reduce_scatter ring of n ranks reaches (n - 1) / (n - 1 + ring_loop_gap) of an
// all_reduce ring's bus bandwidth over NVLink; all_reduce and broadcast keep fabric_efficiency's.
TEST(CollectiveModelClosedForm, TheRingLoopGapCostsAllGatherAndReduceScatterLoops) {
  const CollectiveModel m(dgx_like("  ring_loop_gap: 0.5\n"));
  for (int n : {2, 4, 8}) {
    for (CollOp op : {CollOp::all_gather, CollOp::reduce_scatter}) {
      const CollectiveEstimate e = est(m, shape(op, kBig, n), CollAlgo::ring, Protocol::simple);
      expect_close(e.algbw, kB * kE * (n - 1) / (n - 1 + 0.5) / ((n - 1.0) / n));
    }
    const CollectiveEstimate ar = est(m, shape(CollOp::all_reduce, kBig, n), CollAlgo::ring, Protocol::simple);
    expect_close(ar.algbw, kB * kE / (2.0 * (n - 1) / n));
  }
  expect_close(est(m, shape(CollOp::broadcast, kBig, 8), CollAlgo::ring, Protocol::simple).algbw, kB * kE);
  // Unset, nothing is lost.
  const CollectiveModel none(dgx_like());
  expect_close(est(none, shape(CollOp::all_gather, kBig, 8), CollAlgo::ring, Protocol::simple).algbw,
               kB * kE / (7.0 / 8));
}

// ---- a node of GPUs joined by links, not a switch

// One node of 4 devices whose fabric is `fabric` (a YAML mapping), with the NCCL section above.
Topology linked_node(const std::string& fabric) {
  std::string text = one_node(4, kNcclSection);
  const std::string sw = "  fabric:\n    type: switch\n    bandwidth: 100 GB/s\n    latency: 1 us\n";
  const size_t at = text.find(sw);
  RANKSIM_CHECK(at != std::string::npos, "the switch fabric of one_node()");
  text.replace(at, sw.size(), "  fabric: " + fabric + "\n");
  return Topology::parse(text, "linked.yaml");
}

// A ring's bus bandwidth inside a node is what each device can send to the group's others at once:
// on a mesh (as an HGX 4-GPU board), p of the 4 GPUs reach p - 1 links each; on a switch, every p
// gets the whole port.
TEST(CollectiveModelClosedForm, AMeshGivesAGroupOnlyTheLinksJoiningItsDevices) {
  constexpr double kLink = 50e9;
  const CollectiveModel mesh(linked_node("{type: mesh, bandwidth: 50 GB/s, latency: 1 us}"));
  const CollectiveModel sw(linked_node("{type: switch, bandwidth: 150 GB/s, latency: 1 us}"));
  for (int p = 2; p <= 4; ++p) {
    const double factor = 2.0 * (p - 1) / p;
    const CollectiveEstimate m = est(mesh, shape(CollOp::all_reduce, kBig, p), CollAlgo::ring, Protocol::simple);
    expect_close(m.algbw, (p - 1) * kLink * kE / factor);
    const CollectiveEstimate s = est(sw, shape(CollOp::all_reduce, kBig, p), CollAlgo::ring, Protocol::simple);
    expect_close(s.algbw, 3 * kLink * kE / factor);
  }
  // All-to-all's bytes for the node's other GPUs go over the same links.
  const CollectiveEstimate two = est(mesh, shape(CollOp::all_to_all, kBig, 2), CollAlgo::direct, Protocol::simple);
  const CollectiveEstimate four = est(mesh, shape(CollOp::all_to_all, kBig, 4), CollAlgo::direct, Protocol::simple);
  const double a2a = 0.80;  // alltoall_efficiency's default
  EXPECT_NEAR(two.seconds - two.latency, kBig / 2 / (kLink * a2a), 1e-9 * kBig / kLink);
  EXPECT_NEAR(four.seconds - four.latency, kBig * 3 / 4 / (3 * kLink * a2a), 1e-9 * kBig / kLink);
  // No NVSwitch, no NVLS.
  std::string why;
  EXPECT_FALSE(mesh.estimate(shape(CollOp::all_reduce, kBig, 4), CollAlgo::nvls, Protocol::simple, &why));
}

// On a ring of links (device i to i + 1), the group's least-linked device sets the pace: devices
// 0..2 of 4 have one link among them at either end, device 3 closes the ring for all four.
TEST(CollectiveModelClosedForm, ARingOfLinksGivesTheLeastLinkedDevicesShare) {
  constexpr double kLink = 50e9;
  const CollectiveModel ring(linked_node("{type: ring, bandwidth: 50 GB/s, latency: 1 us}"));
  const double links[] = {0, 0, 1, 1, 2};
  for (int p = 2; p <= 4; ++p) {
    const CollectiveEstimate e = est(ring, shape(CollOp::all_gather, kBig, p), CollAlgo::ring, Protocol::simple);
    expect_close(e.algbw, links[p] * kLink * kE / ((p - 1.0) / p));
  }
}

// ---- several nodes

TEST(CollectiveModelMultiNode, RingIsLimitedByTheNics) {
  // 4 NICs x 50 GB/s x 0.9 = 180 GB/s < 450 GB/s x 0.8 = 360 GB/s.
  const CollectiveModel m(cluster(2, 4, 0.8));
  const CollectiveEstimate e = est(m, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::ring, Protocol::simple);
  expect_close(e.algbw, 4 * 50e9 * 0.9 / (2.0 * 15 / 16));
  // 30 steps, 28 of them 4 us NVLink hops; the 2 between the nodes are paced by the proxy, as
  // every step is: each of the 30 steps of the first loop (16 channels x 16 ranks x 2 MiB chunks
  // = 512 MiB a loop) waits 2 us on it, the second loop's waits overlap its transfers, and the
  // 7 us network hop adds nothing.
  expect_close(e.latency, 8.4 * kUs + 28 * 4 * kUs + 30 * 2 * kUs);
}

TEST(CollectiveModelMultiNode, RingIsLimitedByTheFabric) {
  // 8 NICs x 50 GB/s x 0.9 = 360 GB/s > 450 GB/s x 0.7 = 315 GB/s.
  const CollectiveModel m(cluster(2, 8, 0.7));
  const CollectiveEstimate e = est(m, shape(CollOp::all_gather, kBig, 16, 2), CollAlgo::ring, Protocol::simple);
  expect_close(e.algbw, 450e9 * 0.7 / (15.0 / 16));
  expect_close(e.latency, 8.4 * kUs + 14 * 4 * kUs + 15 * 2 * kUs);
}

TEST(CollectiveModelMultiNode, TheRingsFirstLoopWaitsOnTheProxy) {
  // all_gather on 16 ranks of 2 nodes, Simple: a loop moves 16 channels x 16 ranks x 2 MiB =
  // 512 MiB. The first loop's 15 steps wait 2 us each; the further loops' waits overlap the
  // transfers (the connections' buffers hold their chunks while the proxy posts), so a call of
  // any size waits 15 x 2 us.
  const CollectiveModel m(cluster(2, 8, 0.7));
  auto latency = [&](double bytes) {
    return est(m, shape(CollOp::all_gather, bytes, 16, 2), CollAlgo::ring, Protocol::simple).latency;
  };
  const double fill = 8.4 * kUs + 14 * 4 * kUs;
  expect_close(latency(64 * kMiB), fill + 15 * 2 * kUs);
  expect_close(latency(512 * kMiB), fill + 15 * 2 * kUs);
  expect_close(latency(512 * kMiB + 1), fill + 15 * 2 * kUs);
  expect_close(latency(4 * kGiB), fill + 15 * 2 * kUs);
  // LL128 likewise: 1 GiB is 8 loops of 16 x 16 x 576,000 bytes, one loop's waits.
  const double ll128_fill = 14 * kUs + 14 * 4 * kUs * 1.9 / 3.4;
  expect_close(est(m, shape(CollOp::all_gather, 1 * kGiB, 16, 2), CollAlgo::ring, Protocol::ll128).latency,
               ll128_fill + 15 * 2 * kUs);
  // One rank a node: each step passes two proxies, its receive and its send.
  expect_close(est(m, shape(CollOp::all_gather, 4 * kGiB, 2, 2), CollAlgo::ring, Protocol::simple).latency,
               8.4 * kUs + 1 * 2 * 2 * kUs);
  // A broadcast is a chain: its loop moves one 512 KiB step per channel, which each rank forwards
  // once. 1 GiB is 128 loops, following each other down the chain: the first reaches its end in
  // 15 steps, each further one a step later, 142 waits in all (not 128 x 15). A reduce likewise.
  expect_close(est(m, shape(CollOp::broadcast, kGiB, 16, 2), CollAlgo::ring, Protocol::simple).latency,
               fill + (15 + 128 - 1) * 2 * kUs);
  expect_close(est(m, shape(CollOp::reduce, kGiB, 16, 2), CollAlgo::ring, Protocol::simple).latency,
               fill + (15 + 128 - 1) * 2 * kUs);
  // One loop: the chain's 15 steps.
  expect_close(est(m, shape(CollOp::broadcast, 4 * kMiB, 16, 2), CollAlgo::ring, Protocol::simple).latency,
               fill + 15 * 2 * kUs);
  // Inside one node no step waits on the proxy, and the hops are NVLink's.
  const CollectiveModel one(cluster(1, 8, 0.7));
  expect_close(est(one, shape(CollOp::all_gather, 4 * kGiB, 8), CollAlgo::ring, Protocol::simple).latency,
               8.4 * kUs + 7 * 4 * kUs);
}

TEST(CollectiveModelMultiNode, ALargerBufferMeansFewerChainAndTreeChunksAcrossNodes) {
  // NCCL_BUFFSIZE 8 MiB (AWS's on p5): a Simple step is 1 MiB, a ring chunk 4 MiB, a loop
  // 16 x 16 x 4 MiB = 1 GiB. A ring waits its first loop's 15 steps with either buffer; the
  // bandwidth, LL128 and one node do not move either.
  const CollectiveModel base(cluster(2, 8, 0.7));
  const CollectiveModel big(cluster(2, 8, 0.7, "  buffer_size: 8 MiB\n"));
  auto ring = [](const CollectiveModel& m, double bytes, Protocol p = Protocol::simple, int ranks = 16, int nodes = 2) {
    return est(m, shape(CollOp::all_gather, bytes, ranks, nodes), CollAlgo::ring, p);
  };
  const double fill = 8.4 * kUs + 14 * 4 * kUs;
  expect_close(ring(base, 4 * kGiB).latency, fill + 15 * 2 * kUs);
  expect_close(ring(big, 4 * kGiB).latency, fill + 15 * 2 * kUs);
  expect_close(ring(big, 4 * kGiB).algbw, ring(base, 4 * kGiB).algbw);
  expect_close(ring(big, kGiB, Protocol::ll128).latency, ring(base, kGiB, Protocol::ll128).latency);
  // A broadcast's loop is one 1 MiB step per channel: 1 GiB is 64 loops down its 15-step chain.
  expect_close(est(big, shape(CollOp::broadcast, kGiB, 16, 2), CollAlgo::ring, Protocol::simple).latency,
               fill + (15 + 64 - 1) * 2 * kUs);
  // A tree's chunk is a step too: 1 MiB, so 16 MiB (1 MiB a channel) is one chunk, not two.
  const double tree_fill = 8.4 * kUs + 2 * (7 * 4 * kUs * 4.0 / 3.4 + 1 * 7 * kUs);
  expect_close(est(big, shape(CollOp::all_reduce, 16 * kMiB, 16, 2), CollAlgo::tree, Protocol::simple).latency,
               tree_fill + 1 * 2 * kUs);
  expect_close(ring(big, 4 * kGiB, Protocol::simple, 8, 1).latency,
               ring(base, 4 * kGiB, Protocol::simple, 8, 1).latency);
}

TEST(CollectiveModelMultiNode, NvlsTreeChunksAreNcclsPerChannelAndHead) {
  // NVLS tree all_reduce on 8 ranks a node, 16 channels: 128 concurrent chunks (channels x
  // heads). NCCL's chunk: NCCL_NVLS_CHUNKSIZE (128 KiB), capped at 64 KiB from four nodes, cut to
  // 64 KiB below 4 x 128 chunks and to 32 KiB below 1 x 128. Each chunk waits 2 us until the
  // pipeline holds 8 a level (log2 nodes levels).
  const std::string nvls = "  nvls: true\n";
  auto waits = [&](const CollectiveModel& m, double bytes, int nodes) {
    const CollectiveEstimate e =
        est(m, shape(CollOp::all_reduce, bytes, 8 * nodes, nodes), CollAlgo::nvls_tree, Protocol::simple);
    const double fill = 25 * kUs + 2 * std::log2(nodes) * 20.9 * kUs * 7.0 / 14;
    return (e.latency - fill) / (2 * kUs);
  };
  const CollectiveModel two(cluster(2, 8, 0.8, nvls));
  EXPECT_NEAR(waits(two, 64 * kMiB, 2), 4, 1e-6);  // 128 KiB chunks: 64 MiB / (128 x 128 KiB)
  EXPECT_NEAR(waits(two, 8 * kMiB, 2), 1, 1e-6);   // below 4 x 128 x 128 KiB: 64 KiB, 1 chunk
  EXPECT_NEAR(waits(two, 1 * kGiB, 2), 8, 1e-6);   // 64 of them; one level holds 8
  const CollectiveModel four(cluster(4, 8, 0.8, nvls));
  EXPECT_NEAR(waits(four, 64 * kMiB, 4), 8, 1e-6);  // 64 KiB from four nodes: 8 chunks
  EXPECT_NEAR(waits(four, 1 * kGiB, 4), 16, 1e-6);  // 128 of them; two levels hold 16
  // AWS's 512 KiB chunks and cap: on four nodes 64 MiB is cut to 128 KiB (below 16 x 128 x
  // 256 KiB, not below 4 x 128 x 128 KiB): 4 chunks, where NCCL's defaults make 8.
  const std::string aws = nvls + "  nvls_chunk_size: 512 KiB\n  nvls_tree_max_chunk_size: 512 KiB\n";
  const CollectiveModel aws_four(cluster(4, 8, 0.8, aws));
  EXPECT_NEAR(waits(aws_four, 64 * kMiB, 4), 4, 1e-6);
  // On 32 nodes (5 levels: up to 40 in flight) 2 GiB keeps 512 KiB chunks: 32 of them, where
  // the defaults' 64 KiB chunks fill the pipeline (256, held to 40).
  EXPECT_NEAR(waits(CollectiveModel(cluster(32, 8, 0.8, aws)), 2 * kGiB, 32), 32, 1e-6);
  EXPECT_NEAR(waits(CollectiveModel(cluster(32, 8, 0.8, nvls)), 2 * kGiB, 32), 40, 1e-6);
  // Only NVLS trees move: a ring's chunks are the buffer's steps.
  const CollectiveShape ring = shape(CollOp::all_reduce, kGiB, 32, 4);
  expect_close(est(aws_four, ring, CollAlgo::ring, Protocol::simple).seconds,
               est(four, ring, CollAlgo::ring, Protocol::simple).seconds);
}

TEST(CollectiveModelMultiNode, LlStepsWaitTheirOwnTimeOnTheProxy) {
  // ll_net_overhead: what an LL step or chunk across nodes waits (unset: net_overhead, 2 us
  // here). Set to 0.5 us, an LL ring all_gather of 64 KiB on 16 ranks of 2 nodes (one loop of
  // 15 steps) waits 15 x 0.5 us instead of 15 x 2; a tree's LL chunks likewise; LL128 and Simple
  // keep net_overhead.
  const CollectiveModel base(cluster(2, 8, 0.7));
  const CollectiveModel ll(cluster(2, 8, 0.7, "  ll_net_overhead: 0.5 us\n"));
  auto lat = [](const CollectiveModel& m, CollOp op, CollAlgo a, Protocol p, double bytes) {
    return est(m, shape(op, bytes, 16, 2), a, p).latency;
  };
  expect_close(lat(base, CollOp::all_gather, CollAlgo::ring, Protocol::ll, 64 * 1024) -
                   lat(ll, CollOp::all_gather, CollAlgo::ring, Protocol::ll, 64 * 1024),
               15 * (2 - 0.5) * kUs);
  // A broadcast's chain: 15 waits for one loop, and one for each further loop (64 KiB on LL's
  // one channel here, 16 x 4 KiB a channel: two loops of 32 KiB steps).
  expect_close(lat(base, CollOp::broadcast, CollAlgo::ring, Protocol::ll, 32 * 1024) -
                   lat(ll, CollOp::broadcast, CollAlgo::ring, Protocol::ll, 32 * 1024),
               15 * (2 - 0.5) * kUs);
  expect_close(lat(base, CollOp::broadcast, CollAlgo::ring, Protocol::ll, 64 * 1024) -
                   lat(ll, CollOp::broadcast, CollAlgo::ring, Protocol::ll, 64 * 1024),
               16 * (2 - 0.5) * kUs);
  // A tree all_reduce of 16 KiB: one LL chunk a channel, one wait.
  expect_close(lat(base, CollOp::all_reduce, CollAlgo::tree, Protocol::ll, 16 * 1024) -
                   lat(ll, CollOp::all_reduce, CollAlgo::tree, Protocol::ll, 16 * 1024),
               1 * (2 - 0.5) * kUs);
  for (const Protocol p : {Protocol::ll128, Protocol::simple})
    expect_close(lat(ll, CollOp::all_gather, CollAlgo::ring, p, 64 * kMiB),
                 lat(base, CollOp::all_gather, CollAlgo::ring, p, 64 * kMiB));
}

TEST(CollectiveModelMultiNode, OneRankANodeWaitsTwiceAStep) {
  // One rank on each of 4 nodes: every step's chunk comes in through the network and goes out
  // through it, and both pass the rank's proxy: 3 steps x 2 waits x 2 us, and no NVLink hop.
  const CollectiveModel m(cluster(4, 8, 0.7));
  expect_close(est(m, shape(CollOp::all_gather, 64 * kMiB, 4, 4), CollAlgo::ring, Protocol::simple).latency,
               8.4 * kUs + 3 * 2 * 2 * kUs);
  // Two ranks a node: one wait a step, at the rank that receives from the network or the one
  // that sends to it; 7 steps, 4 of them NVLink hops.
  expect_close(est(m, shape(CollOp::all_gather, 64 * kMiB, 8, 4), CollAlgo::ring, Protocol::simple).latency,
               8.4 * kUs + 4 * 4 * kUs + 7 * 2 * kUs);
}

TEST(CollectiveModelMultiNode, TreeChunksWaitOnTheProxyUntilThePipelineFills) {
  // Tree all_reduce, Simple, 16 ranks on 2 nodes: depth 7 + 1 = 8. A channel's share goes in
  // 512 KiB chunks; each waits 2 us on the proxy until 64 (8 a level) fill the pipeline.
  const CollectiveModel m(cluster(2, 8, 0.8));
  auto latency = [&](double bytes, Protocol p = Protocol::simple) {
    return est(m, shape(CollOp::all_reduce, bytes, 16, 2), CollAlgo::tree, p).latency;
  };
  const double fill = 8.4 * kUs + 2 * (7 * 4 * kUs * 4.0 / 3.4 + 1 * 7 * kUs);
  // 16 MiB: 1 MiB a channel, 2 chunks.
  expect_close(latency(16 * kMiB), fill + 2 * 2 * kUs);
  // 1 GiB: 64 MiB a channel, 128 chunks; the waits stop at 64.
  expect_close(latency(kGiB), fill + 64 * 2 * kUs);
  // LL128 at 16 MiB: 576,000-byte chunks halved while a channel holds fewer than
  // 64 x (1 + 1 + 0.8) / 8 = 22.4 of them and larger than 128 KiB (down to 72,000 bytes: 14.6 ->
  // 15 chunks), then while fewer than 5.6 (already more).
  const double ll128_fill = 14 * kUs + 2 * (7 * 4 * kUs * 1.25 / 3.4 + 1 * 7 * kUs * 8.5 / 14);
  expect_close(latency(16 * kMiB, Protocol::ll128), ll128_fill + 15 * 2 * kUs);
}

TEST(CollectiveModelMultiNode, APeerOnAnotherNodeGetsNcclsChannelsPerNetworkPeer) {
  // At 9 GB/s a channel, one peer across nodes gets NCCL's channels per network peer: a 400 Gb/s
  // NIC (50 GB/s) ceil(50 / 14) = 4, 36 GB/s, under the NIC's 45; 200 Gb/s 2, 18 GB/s; 100 Gb/s
  // (12.5 GB/s) 1, 9 GB/s. Two ranks on two nodes each send S / 2 to the other.
  const std::string cap = "  p2p_channel_network_bandwidth: 9 GB/s\n";
  for (const auto& [nic, channels] : {std::pair{"400 Gb/s", 4}, std::pair{"200 Gb/s", 2}, std::pair{"100 Gb/s", 1}}) {
    const CollectiveModel m(cluster(2, 8, 0.8, cap, nic));
    const CollectiveEstimate e = est(m, shape(CollOp::all_to_all, kBig, 2, 2), CollAlgo::direct, Protocol::simple);
    expect_close(e.algbw, 2 * channels * 9e9);
    // Unset, the NIC bounds it.
    const CollectiveModel free(cluster(2, 8, 0.8, "", nic));
    const double line = units::parse_bandwidth(nic);
    expect_close(est(free, shape(CollOp::all_to_all, kBig, 2, 2), CollAlgo::direct, Protocol::simple).algbw,
                 2 * line * 0.9);
  }
  // With 8 peers on the other node, each of S / 16, the NIC is the bound again.
  const CollectiveModel m(cluster(2, 8, 0.8, cap));
  expect_close(est(m, shape(CollOp::all_to_all, kBig, 16, 2), CollAlgo::direct, Protocol::simple).algbw,
               50e9 * 0.9 / (8.0 / 16));
}

TEST(CollectiveModelMultiNode, AllToAllAcrossNodesRunsAtItsOwnShareOfTheNics) {
  // 16 ranks on 2 nodes of 8 NICs: a rank sends 8/16 of S through its NIC (50 GB/s) and 7/16 of
  // it over the fabric (450 GB/s x 0.8); the NIC bounds it. Unset, all-to-all's share of the NICs
  // is network_efficiency's (0.9); set, its own.
  const CollectiveShape s = shape(CollOp::all_to_all, kBig, 16, 2);
  const CollectiveModel same(cluster(2, 8, 0.8));
  expect_close(est(same, s, CollAlgo::direct, Protocol::simple).algbw, 50e9 * 0.9 / (8.0 / 16));
  const CollectiveModel own(cluster(2, 8, 0.8, "  alltoall_network_efficiency: 0.6\n"));
  const CollectiveEstimate e = est(own, s, CollAlgo::direct, Protocol::simple);
  expect_close(e.algbw, 50e9 * 0.6 / (8.0 / 16));
  // The rings keep network_efficiency.
  expect_close(est(own, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::ring, Protocol::simple).algbw,
               std::min(450e9 * 0.8, 8 * 50e9 * 0.9) / (2.0 * 15 / 16));
}

TEST(CollectiveModelMultiNode, AllToAllPaysPeerLatencyForEachPeerOnAnotherNode) {
  // 16 ranks on 2 nodes: each rank has 8 peers on the other node. Unset, each costs NCCL's
  // network ring LL hop scaled as inter_latency is (2.7 us x 7 / 14); set, peer_latency. Only
  // the latency moves, by 8 x the difference, and only for point-to-point calls.
  const CollectiveShape s = shape(CollOp::all_to_all, 1 * kMiB, 16, 2);
  const Topology unset_topology = cluster(2, 8, 0.8);
  EXPECT_DOUBLE_EQ(peer_cost(unset_topology.collectives()), 7e-6 * 2.7 / 14);
  const CollectiveModel unset(unset_topology);
  const CollectiveModel set(cluster(2, 8, 0.8, "  peer_latency: 10 us\n"));
  const CollectiveEstimate a = est(unset, s, CollAlgo::direct, Protocol::simple);
  const CollectiveEstimate b = est(set, s, CollAlgo::direct, Protocol::simple);
  expect_close(b.latency - a.latency, 8 * (10e-6 - 1.35e-6));
  expect_close(b.algbw, a.algbw);
  // Inside one node there are no such peers.
  const CollectiveShape node = shape(CollOp::all_to_all, 1 * kMiB, 8, 1);
  expect_close(est(set, node, CollAlgo::direct, Protocol::simple).latency,
               est(unset, node, CollAlgo::direct, Protocol::simple).latency);
  const CollectiveShape ring = shape(CollOp::all_reduce, 1 * kMiB, 16, 2);
  expect_close(est(set, ring, CollAlgo::ring, Protocol::simple).seconds,
               est(unset, ring, CollAlgo::ring, Protocol::simple).seconds);
}

TEST(CollectiveModelMultiNode, AllToAllPaysMessageLatencyForEachMessageToAnotherNode) {
  // 16 ranks on 2 nodes: 8 peers on the other node, each sent S / 16 in messages of
  // NCCL_P2P_NET_CHUNKSIZE (here 512 KiB, with an 8 MiB buffer), halved below 4 MiB a peer and
  // quartered below 512 KiB. Each costs 2 us: latency only, and only across nodes.
  const std::string aws = "  p2p_chunk_size: 512 KiB\n  buffer_size: 8 MiB\n";
  const CollectiveModel none(cluster(2, 8, 0.8, aws));
  const CollectiveModel paid(cluster(2, 8, 0.8, aws + "  message_latency: 2 us\n"));
  auto extra = [&](const CollectiveModel& m, double bytes, int ranks = 16, int nodes = 2) {
    const CollectiveShape s = shape(CollOp::all_to_all, bytes, ranks, nodes);
    return est(m, s, CollAlgo::direct, Protocol::simple).latency -
           est(none, s, CollAlgo::direct, Protocol::simple).latency;
  };
  expect_close(extra(paid, 128 * kMiB), 8 * 16 * 2e-6);  // 8 MiB a peer: 16 of 512 KiB
  expect_close(extra(paid, 16 * kMiB), 8 * 4 * 2e-6);    // 1 MiB: 4 of 256 KiB
  expect_close(extra(paid, 4 * kMiB), 8 * 2 * 2e-6);     // 256 KiB: 2 of 128 KiB
  expect_close(extra(paid, 1024), 8 * 1 * 2e-6);         // at least one message a peer
  expect_close(extra(paid, 8 * kMiB, 8, 1), 0);          // one node: no network messages
  const CollectiveShape s = shape(CollOp::all_to_all, 128 * kMiB, 16, 2);
  expect_close(est(paid, s, CollAlgo::direct, Protocol::simple).algbw,
               est(none, s, CollAlgo::direct, Protocol::simple).algbw);
  // NCCL's defaults: 128 KiB messages (8 MiB a peer: 64 of them); and a chunk larger than an
  // eighth of the buffer is cut to it (1 MiB with a 4 MiB buffer: 512 KiB, 16 messages).
  const CollectiveModel base(cluster(2, 8, 0.8, "  message_latency: 2 us\n"));
  const CollectiveModel base_none(cluster(2, 8, 0.8));
  auto base_extra = [&](const CollectiveModel& m) {
    return est(m, s, CollAlgo::direct, Protocol::simple).latency -
           est(base_none, s, CollAlgo::direct, Protocol::simple).latency;
  };
  expect_close(base_extra(base), 8 * 64 * 2e-6);
  expect_close(base_extra(CollectiveModel(cluster(2, 8, 0.8, "  message_latency: 2 us\n  p2p_chunk_size: 1 MiB\n"))),
               8 * 16 * 2e-6);
}

TEST(CollectiveModelMultiNode, ChannelsCapWhatTheNicsCarry) {
  // 16 channels of at most 20 GB/s each move 320 GB/s: less than 8 NICs x 50 GB/s, more than
  // 4 NICs' 200. The cap binds rings and trees (of more than two nodes: below); not all-to-all.
  const std::string cap = "  channel_network_bandwidth: 20 GB/s\n";
  const CollectiveModel eight(cluster(4, 8, 0.9, cap));
  expect_close(est(eight, shape(CollOp::all_gather, kBig, 16, 2), CollAlgo::ring, Protocol::simple).algbw,
               16 * 20e9 * 0.9 / (15.0 / 16));
  expect_close(est(eight, shape(CollOp::all_reduce, kBig, 32, 4), CollAlgo::tree, Protocol::simple).algbw,
               16 * 20e9 * 0.9 * 0.92 * 0.5);
  expect_close(est(eight, shape(CollOp::all_to_all, kBig, 16, 2), CollAlgo::direct, Protocol::simple).algbw,
               50e9 * 0.9 / (8.0 / 16));
  const CollectiveModel four(cluster(2, 4, 0.9, cap));
  expect_close(est(four, shape(CollOp::all_gather, kBig, 16, 2), CollAlgo::ring, Protocol::simple).algbw,
               4 * 50e9 * 0.9 / (15.0 / 16));
  // Inside one node the NICs carry nothing.
  const CollectiveModel one(cluster(1, 8, 0.9, cap));
  expect_close(est(one, shape(CollOp::all_gather, kBig, 8), CollAlgo::ring, Protocol::simple).algbw,
               450e9 * 0.9 / (7.0 / 8));
}

TEST(CollectiveModelMultiNode, NvlsTreesRunAtTheirOwnShareOfTheFabric) {
  // 8 GPUs a node on a 450 GB/s switch: NVLS moves S (1 + 1/8) on each link at 0.72 of it, 288 GB/s
  // of algorithm bandwidth; inside an NVLS tree at nvls_tree_efficiency when set. Between two
  // nodes the NICs carry S once (400 GB/s x 0.9); beyond two, twice (180 GB/s).
  const std::string nvls = "  nvls: true\n  nvls_efficiency: 0.72\n";
  const CollectiveModel same(cluster(4, 8, 0.9, nvls));
  expect_close(est(same, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::nvls_tree, Protocol::simple).algbw,
               450e9 * 0.72 / (1 + 1.0 / 8));
  expect_close(est(same, shape(CollOp::all_reduce, kBig, 32, 4), CollAlgo::nvls_tree, Protocol::simple).algbw,
               8 * 50e9 * 0.9 * 0.5);
  const CollectiveModel own(cluster(4, 8, 0.9, nvls + "  nvls_tree_efficiency: 0.54\n"));
  expect_close(est(own, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::nvls_tree, Protocol::simple).algbw,
               450e9 * 0.54 / (1 + 1.0 / 8));
  // NVLS inside one node keeps nvls_efficiency.
  expect_close(est(own, shape(CollOp::all_reduce, kBig, 8, 1), CollAlgo::nvls, Protocol::simple).algbw,
               450e9 * 0.72 / (1 + 1.0 / 8));
  // With its own share of the NICs (0.7 of the line rate, past a channel cap of 16 x 15 GB/s
  // that binds the rings): 400 GB/s x 0.7 x 0.5 = 140 GB/s beyond two nodes; the rings still
  // move 240 GB/s x 0.9 of bus bandwidth.
  const CollectiveModel net(
      cluster(4, 8, 0.9, nvls + "  nvls_tree_network_efficiency: 0.7\n  channel_network_bandwidth: 15 GB/s\n"));
  expect_close(est(net, shape(CollOp::all_reduce, kBig, 32, 4), CollAlgo::nvls_tree, Protocol::simple).algbw,
               8 * 50e9 * 0.7 * 0.5);
  expect_close(est(net, shape(CollOp::all_gather, kBig, 32, 4), CollAlgo::ring, Protocol::simple).algbw,
               16 * 15e9 * 0.9 / (31.0 / 32));
}

TEST(CollectiveModelMultiNode, ATwoNodeTreeSendsEachByteOnceThroughTheNics) {
  // 4 NICs x 50 GB/s x 0.9 = 180 GB/s a node; the fabric 450 GB/s x 0.8 = 360. Beyond two nodes
  // a tree's node sends 2S each way through its NICs, as a ring's does: bus bandwidth 180 x 0.92.
  // On two nodes each node roots one tree and is a leaf of the other, sending S: the NICs allow
  // 360, and the fabric binds. The per-channel caps are lifted here (next test).
  const std::string wide = "  tree_channel_bandwidth: 100 GB/s\n";
  const CollectiveModel m(cluster(4, 4, 0.8, wide));
  const CollectiveEstimate two = est(m, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::tree, Protocol::simple);
  expect_close(two.algbw, 0.5 * 0.92 * 360e9);
  const CollectiveEstimate four = est(m, shape(CollOp::all_reduce, kBig, 32, 4), CollAlgo::tree, Protocol::simple);
  expect_close(four.algbw, 0.5 * 0.92 * 180e9);
  // So on two nodes the tree beats the NIC-bound ring (180 / (30/16) = 96 GB/s), and is chosen.
  const CollectiveEstimate ring = est(m, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::ring, Protocol::simple);
  expect_close(ring.algbw, 180e9 / (2.0 * 15 / 16));
  const CollectiveEstimate chosen = m.choose(shape(CollOp::all_reduce, kBig, 16, 2));
  EXPECT_EQ(chosen.algorithm, CollAlgo::tree);
  EXPECT_EQ(chosen.seconds, two.seconds);
}

TEST(CollectiveModelMultiNode, ATreeChannelAcrossNodesIsCappedPerNic) {
  // NCCL's per-channel tree maxima, here 30, 20 and 10 GB/s (groups on 1, 2 and more nodes), 15
  // for LL128; a node's tree has one channel per NIC it uses. 8 NICs x 50 GB/s x 0.9 = 360 GB/s;
  // the fabric 405.
  const std::string caps =
      "  tree_channel_bandwidth: [30 GB/s, 20 GB/s, 10 GB/s]\n  tree_ll128_channel_bandwidth: 15 GB/s\n";
  const CollectiveModel m(cluster(4, 8, 0.9, caps));
  // Two nodes: 0.92 x min(405, 720) = 372.6 > 8 x 20 = 160.
  expect_close(est(m, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::tree, Protocol::simple).algbw, 0.5 * 160e9);
  // LL128: 160 x 120/128 = 150 > 8 x 15 = 120.
  expect_close(est(m, shape(CollOp::all_reduce, kBig, 16, 2), CollAlgo::tree, Protocol::ll128).algbw, 0.5 * 120e9);
  // Four nodes: 0.92 x 360 > 8 x 10; with 2 ranks a node (2 channels, 2 NICs): 0.92 x 90 > 2 x 10.
  expect_close(est(m, shape(CollOp::all_reduce, kBig, 32, 4), CollAlgo::tree, Protocol::simple).algbw, 0.5 * 80e9);
  expect_close(est(m, shape(CollOp::all_reduce, kBig, 8, 4), CollAlgo::tree, Protocol::simple).algbw, 0.5 * 20e9);
  // Small calls use fewer channels, each capped alike: 64 KiB of Simple fills 2 of 16.
  expect_close(est(m, shape(CollOp::all_reduce, 64 * kKiB, 16, 2), CollAlgo::tree, Protocol::simple).algbw,
               0.5 * 8 * 20e9 * 2 / 16);
  // Inside one node no NIC carries the tree: the fabric binds.
  expect_close(est(m, shape(CollOp::all_reduce, kBig, 8, 1), CollAlgo::tree, Protocol::simple).algbw,
               0.5 * 0.92 * 405e9);
}

TEST(CollectiveModelSelection, OnTwoNodesTheTreeWinsWhereItsChannelsOutrunTheNics) {
  // Ampere's caps (23.6 GB/s a channel on two nodes) and 8 NICs a node. With 400 Gb/s NICs a
  // tree channel moves less than its NIC: 8 x 23.6 = 188.8 GB/s of bus bandwidth, 94.4 of
  // algorithm bandwidth, below the NIC-bound ring's 360 / (30/16) = 192. With 100 Gb/s NICs the
  // ring gets 90 / (30/16) = 48 and the tree min(0.92 x 180, 188.8) / 2 = 82.8: the tree is chosen.
  const std::string ampere = "  tree_channel_bandwidth: [24 GB/s, 23.6 GB/s, 17.8 GB/s]\n";
  const CollectiveShape s = shape(CollOp::all_reduce, kBig, 16, 2);
  const CollectiveModel fast(cluster(2, 8, 0.9, ampere));
  expect_close(est(fast, s, CollAlgo::tree, Protocol::simple).algbw, 0.5 * 8 * 23.6e9);
  EXPECT_EQ(fast.choose(s).algorithm, CollAlgo::ring);
  const CollectiveModel slow(cluster(2, 8, 0.9, ampere, "100 Gb/s"));
  expect_close(est(slow, s, CollAlgo::ring, Protocol::simple).algbw, 8 * 12.5e9 * 0.9 / (2.0 * 15 / 16));
  expect_close(est(slow, s, CollAlgo::tree, Protocol::simple).algbw, 0.5 * 0.92 * 2 * 8 * 12.5e9 * 0.9);
  EXPECT_EQ(slow.choose(s).algorithm, CollAlgo::tree);
  // Fewer NICs than GPUs: 2 of 400 Gb/s a node. The tree has a channel per NIC: 2 x 23.6 =
  // 47.2 GB/s of bus bandwidth, 23.6 of algorithm bandwidth, against the ring's 90 / (30/16) = 48.
  const CollectiveModel two_nics(cluster(2, 2, 0.9, ampere));
  expect_close(est(two_nics, s, CollAlgo::tree, Protocol::simple).algbw, 0.5 * 2 * 23.6e9);
  EXPECT_EQ(two_nics.choose(s).algorithm, CollAlgo::ring);
}

TEST(CollectiveModelMultiNode, FewerRanksPerNodeUseFewerNics) {
  // 2 ranks per node on 4 nodes: min(2, 4 NICs) = 2 NICs: 2 x 50 GB/s x 0.9 = 90 GB/s.
  const CollectiveModel m(cluster(4, 4, 0.8));
  const CollectiveEstimate e = est(m, shape(CollOp::all_reduce, kBig, 8, 4), CollAlgo::ring, Protocol::simple);
  expect_close(e.algbw, 2 * 50e9 * 0.9 / (2.0 * 7 / 8));
}

TEST(CollectiveModelMultiNode, ADegradedNetworkScalesTheNicsOnly) {
  // An injected fault (network_factor): the NIC-bound ring at half the NICs' bandwidth, the
  // latency unchanged; the fabric-bound ring is unchanged until the NICs become its bottleneck.
  const CollectiveModel nic_bound(cluster(2, 4, 0.8));
  CollectiveShape s = shape(CollOp::all_reduce, kBig, 16, 2);
  const CollectiveEstimate full = est(nic_bound, s, CollAlgo::ring, Protocol::simple);
  s.network_factor = 0.5;
  const CollectiveEstimate half = est(nic_bound, s, CollAlgo::ring, Protocol::simple);
  expect_close(half.algbw, 4 * 50e9 * 0.9 * 0.5 / (2.0 * 15 / 16));
  EXPECT_EQ(half.latency, full.latency);
  expect_close(half.seconds - half.latency, 2 * (full.seconds - full.latency));

  const CollectiveModel fabric_bound(cluster(2, 8, 0.7));
  CollectiveShape g = shape(CollOp::all_gather, kBig, 16, 2);
  g.network_factor = 0.9;  // 360 x 0.9 = 324 GB/s > 315 GB/s: still the fabric's
  expect_close(est(fabric_bound, g, CollAlgo::ring, Protocol::simple).algbw, 450e9 * 0.7 / (15.0 / 16));
  g.network_factor = 0.5;  // 180 GB/s: now the NICs'
  expect_close(est(fabric_bound, g, CollAlgo::ring, Protocol::simple).algbw, 8 * 50e9 * 0.9 * 0.5 / (15.0 / 16));
}

// ---- selection

std::vector<double> sweep_sizes() {
  std::vector<double> out;
  for (double s = kKiB; s <= 8 * kGiB; s *= 2) {
    out.push_back(s);
    out.push_back(s * 1.5);
  }
  return out;
}

void expect_choice_is_least(const CollectiveModel& m, const CollectiveShape& s) {
  const std::vector<CollectiveEstimate> all = m.candidates(s);
  ASSERT_FALSE(all.empty());
  size_t best = 0;
  for (size_t i = 1; i < all.size(); ++i)
    if (all[i].seconds < all[best].seconds) best = i;
  const CollectiveEstimate c = m.choose(s);
  EXPECT_EQ(c.seconds, all[best].seconds) << s.bytes;
  EXPECT_EQ(c.algorithm, all[best].algorithm) << s.bytes;
  EXPECT_EQ(c.protocol, all[best].protocol) << s.bytes;
  for (const CollectiveEstimate& e : all) EXPECT_LE(c.seconds, e.seconds);
}

TEST(CollectiveModelSelection, ChooseIsTheLeastOfTheCandidatesAtEverySize) {
  const CollectiveModel one(dgx_like("  nvls: true\n"));
  const CollectiveModel two(cluster(2, 4, 0.8));
  for (CollOp op :
       {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter, CollOp::broadcast, CollOp::all_to_all}) {
    for (double bytes : sweep_sizes()) {
      expect_choice_is_least(one, shape(op, bytes, 8));
      expect_choice_is_least(two, shape(op, bytes, 16, 2));
    }
  }
}

TEST(CollectiveModelSelection, CandidatesOfAOneNodeAllReduce) {
  const CollectiveModel m(dgx_like());
  // ring and tree, each with LL, LL128 and Simple; no NVLS, CollNet (one node), PAT or direct.
  const std::vector<CollectiveEstimate> all = m.candidates(shape(CollOp::all_reduce, 1e6, 8));
  ASSERT_EQ(all.size(), 6u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].algorithm, i < 3 ? CollAlgo::ring : CollAlgo::tree);
    EXPECT_EQ(all[i].protocol, static_cast<Protocol>(i % 3));
  }
}

// The ring's protocols cross where their closed forms are equal (every channel in use at both
// crossings): LL below the first, LL128 between, Simple above the second.
TEST(CollectiveModelSelection, RingProtocolSwitchesWhereTheTimesCross) {
  const CollectiveModel m(dgx_like());
  const double factor = 2.0 * 7 / 8;
  const double bus = kB * kE;
  const double lat_ll = 6.6 * kUs + 14 * 0.6 / 3.4 * kL, bw_ll = 0.5 * bus / factor;
  const double lat_128 = 14 * kUs + 14 * 1.9 / 3.4 * kL, bw_128 = 0.92 * bus / factor;
  const double lat_simple = 8.4 * kUs + 14 * kL, bw_simple = bus / factor;
  const double ll_to_128 = (lat_128 - lat_ll) / (1 / bw_ll - 1 / bw_128);
  const double to_simple = (lat_simple - lat_128) / (1 / bw_128 - 1 / bw_simple);
  ASSERT_GT(ll_to_128, 16 * 5 * kKiB);  // both past their channel steps
  ASSERT_GT(to_simple, ll_to_128);
  auto chosen = [&](double bytes) { return m.choose(shape(CollOp::all_reduce, bytes, 8), CollAlgo::ring).protocol; };
  EXPECT_EQ(chosen(ll_to_128 * (1 - 1e-6)), Protocol::ll);
  EXPECT_EQ(chosen(ll_to_128 * (1 + 1e-6)), Protocol::ll128);
  EXPECT_EQ(chosen(to_simple * (1 - 1e-6)), Protocol::ll128);
  EXPECT_EQ(chosen(to_simple * (1 + 1e-6)), Protocol::simple);
  // Far from the crossings.
  EXPECT_EQ(chosen(kKiB), Protocol::ll);
  EXPECT_EQ(chosen(kGiB), Protocol::simple);
  // At the crossing the predicted times agree.
  const CollectiveShape at = shape(CollOp::all_reduce, ll_to_128, 8);
  EXPECT_NEAR(est(m, at, CollAlgo::ring, Protocol::ll).seconds, est(m, at, CollAlgo::ring, Protocol::ll128).seconds,
              1e-12);
}

// NCCL_ALGO / NCCL_PROTO lists (sim/nccl_env.h): the choice is the least of the candidates the
// lists allow, at every size, for every collective.
TEST(CollectiveModelSelection, ListsChooseTheLeastOfWhatTheyAllow) {
  const CollectiveModel one(dgx_like("  nvls: true\n"));
  const CollectiveModel two(cluster(2, 4, 0.8, "  nvls: true\n"));
  std::vector<NcclAllowed> lists(4);
  lists[0].set_algorithms("^nvls");
  lists[1].set_algorithms("ring,tree;allreduce:tree,nvlstree");
  lists[2].set_protocols("^LL128;allreduce:LL128,Simple");
  lists[3].set_algorithms("allreduce:ring,nvls,nvlstree");
  lists[3].set_protocols("Simple,LL");
  for (const NcclAllowed& a : lists) {
    for (CollOp op :
         {CollOp::all_reduce, CollOp::all_gather, CollOp::reduce_scatter, CollOp::broadcast, CollOp::all_to_all}) {
      for (double bytes : sweep_sizes()) {
        for (const auto& [m, s] : {std::pair{&one, shape(op, bytes, 8)}, std::pair{&two, shape(op, bytes, 16, 2)}}) {
          std::optional<CollectiveEstimate> best;
          for (const CollectiveEstimate& e : m->candidates(s))
            if (a.allows(op, e.algorithm, e.protocol) && (!best || e.seconds < best->seconds)) best = e;
          ASSERT_TRUE(best.has_value()) << a.describe();
          const CollectiveEstimate c = m->choose(s, a);
          EXPECT_EQ(c.algorithm, best->algorithm) << a.describe() << " " << bytes;
          EXPECT_EQ(c.protocol, best->protocol) << a.describe() << " " << bytes;
          EXPECT_EQ(c.seconds, best->seconds) << a.describe() << " " << bytes;
        }
      }
    }
  }
  // "^nvls" on one node at 1 GiB: what the ring gives, where NVLS was the choice.
  const CollectiveShape big = shape(CollOp::all_reduce, kGiB, 8);
  ASSERT_EQ(one.choose(big).algorithm, CollAlgo::nvls);
  EXPECT_EQ(one.choose(big, lists[0]).seconds, one.choose(big, CollAlgo::ring).seconds);
  // Unset lists choose as the model does alone.
  EXPECT_EQ(one.choose(big, NcclAllowed()).seconds, one.choose(big).seconds);
}

// Lists that leave a collective nothing that can serve it are refused, naming them and why (as
// NCCL 2.24 refuses them, with no fall back to the ring).
TEST(CollectiveModelSelection, ListsThatLeaveNothingAreNamed) {
  const CollectiveModel m(dgx_like());
  NcclAllowed pat;
  pat.set_algorithms("allreduce:pat");
  try {
    (void)m.choose(shape(CollOp::all_reduce, kMiB, 8), pat);
    FAIL() << "PAT all_reduce accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("as what NCCL_ALGO=allreduce:pat allows: PAT serves all_gather and reduce_scatter"));
  }
  EXPECT_EQ(m.choose(shape(CollOp::all_gather, kMiB, 8), pat).algorithm, CollAlgo::ring);  // others keep theirs
  NcclAllowed none;
  none.set_algorithms("ring");
  none.only(CollAlgo::tree);
  try {
    (void)m.choose(shape(CollOp::all_reduce, kMiB, 8), none);
    FAIL() << "an empty set accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("that leaves this collective no algorithm and protocol"));
  }
}

TEST(CollectiveModelSelection, ForcedProtocolIsKept) {
  const CollectiveModel m(dgx_like());
  const CollectiveEstimate e = m.choose(shape(CollOp::all_reduce, kGiB, 8), std::nullopt, Protocol::ll);
  EXPECT_EQ(e.protocol, Protocol::ll);
  const CollectiveEstimate r = m.choose(shape(CollOp::all_reduce, kKiB, 8), CollAlgo::ring, Protocol::simple);
  EXPECT_EQ(r.algorithm, CollAlgo::ring);
  EXPECT_EQ(r.protocol, Protocol::simple);
}

// ---- channels

// The header's contract: a large call uses every channel, each carrying a sixteenth of what 16
// move, so halving the channel count doubles a large call's bandwidth term.
// ---- a tuner plugin's config (sim/tuner_config.h)

// The cluster's constants with the given tuner config.
CollectiveModel tuned(const Topology& t, const std::string& config) {
  CollectiveTiming c = t.collectives();
  c.tuner = std::make_shared<const TunerConfig>(parse_tuner_config(config, "t.conf"));
  return CollectiveModel(t, c);
}

TEST(CollectiveModelTuner, TheFirstRuleThatAppliesChoosesAndTheCostModelTheRest) {
  // 16 ranks on 2 nodes. Up to 1 MiB the tuner says ring LL, above it tree Simple; all_gather
  // has no rule, nor has a group of another size, and the model's own fastest runs.
  const Topology t = cluster(2, 8, 0.8);
  const CollectiveModel plain(t);
  const CollectiveModel m = tuned(t,
                                  "allreduce,0,1048576,ring,ll,-1,2,16\n"
                                  "allreduce,0,1099511627776,tree,simple,-1,-1,16\n");
  const CollectiveShape at = shape(CollOp::all_reduce, kMiB, 16, 2);
  const CollectiveEstimate a = m.choose(at);
  EXPECT_EQ(a.algorithm, CollAlgo::ring);
  EXPECT_EQ(a.protocol, Protocol::ll);
  EXPECT_EQ(a.tuner_line, 1);
  EXPECT_EQ(a.seconds, est(plain, at, CollAlgo::ring, Protocol::ll).seconds);
  const CollectiveShape past = shape(CollOp::all_reduce, kMiB + 1, 16, 2);
  const CollectiveEstimate b = m.choose(past);
  EXPECT_EQ(b.algorithm, CollAlgo::tree);
  EXPECT_EQ(b.protocol, Protocol::simple);
  EXPECT_EQ(b.tuner_line, 2);
  EXPECT_EQ(b.seconds, est(plain, past, CollAlgo::tree, Protocol::simple).seconds);
  for (const CollectiveShape& s : {shape(CollOp::all_gather, kMiB, 16, 2), shape(CollOp::all_reduce, kMiB, 8, 1)}) {
    const CollectiveEstimate own = m.choose(s);
    EXPECT_EQ(own.tuner_line, 0);
    EXPECT_EQ(own.seconds, plain.choose(s).seconds);
    EXPECT_EQ(own.algorithm, plain.choose(s).algorithm);
  }
}

TEST(CollectiveModelTuner, APairThatCannotServeOrIsNotAllowedIsPassedOver) {
  // Line 1 asks a tree of all_gather (NCCL's trees serve all_reduce only), line 2 a rule for
  // two launches in one (never ranksim's); line 3 decides. Forcing NCCL_ALGO=ring passes over
  // the tree rules too: the model's fastest ring runs.
  const Topology t = cluster(2, 8, 0.8);
  const CollectiveModel plain(t);
  const CollectiveModel m = tuned(t,
                                  "allgather,0,1099511627776,tree,simple,-1,-1,-1\n"
                                  "allgather,0,1099511627776,ring,ll,-1,-1,-1,2\n"
                                  "allgather,0,1099511627776,ring,ll128,-1,-1,-1\n"
                                  "allreduce,0,1099511627776,tree,ll128,-1,-1,-1\n");
  const CollectiveShape ag = shape(CollOp::all_gather, 64 * kMiB, 16, 2);
  const CollectiveEstimate e = m.choose(ag);
  EXPECT_EQ(e.tuner_line, 3);
  EXPECT_EQ(e.algorithm, CollAlgo::ring);
  EXPECT_EQ(e.protocol, Protocol::ll128);
  const CollectiveShape ar = shape(CollOp::all_reduce, 64 * kMiB, 16, 2);
  EXPECT_EQ(m.choose(ar).algorithm, CollAlgo::tree);
  const CollectiveEstimate ring = m.choose(ar, CollAlgo::ring);
  EXPECT_EQ(ring.tuner_line, 0);
  EXPECT_EQ(ring.seconds, plain.choose(ar, CollAlgo::ring).seconds);
  const CollectiveEstimate simple = m.choose(ar, std::nullopt, Protocol::simple);
  EXPECT_EQ(simple.tuner_line, 0);
  EXPECT_EQ(simple.seconds, plain.choose(ar, std::nullopt, Protocol::simple).seconds);
}

// A rule whose pair the NCCL_ALGO / NCCL_PROTO lists exclude is passed over, as the forced names'
// are: the next rule that applies and is allowed decides.
TEST(CollectiveModelTuner, ARuleTheListsExcludeIsPassedOver) {
  const Topology t = cluster(2, 8, 0.8);
  const CollectiveModel m = tuned(t,
                                  "allreduce,0,1099511627776,tree,ll128,-1,-1,-1\n"
                                  "allreduce,0,1099511627776,ring,ll128,-1,-1,-1\n");
  const CollectiveShape ar = shape(CollOp::all_reduce, 64 * kMiB, 16, 2);
  EXPECT_EQ(m.choose(ar).tuner_line, 1);
  NcclAllowed no_tree;
  no_tree.set_algorithms("allreduce:^tree");
  const CollectiveEstimate e = m.choose(ar, no_tree);
  EXPECT_EQ(e.tuner_line, 2);
  EXPECT_EQ(e.algorithm, CollAlgo::ring);
  NcclAllowed simple;
  simple.set_protocols("Simple");
  const CollectiveEstimate f = m.choose(ar, simple);
  EXPECT_EQ(f.tuner_line, 0);
  EXPECT_EQ(f.seconds, m.choose(ar, std::nullopt, Protocol::simple).seconds);
}

TEST(CollectiveModelTuner, ARulesChannelsMoveTheBandwidthAsChannelsDo) {
  // One node: a ring of 4 channels moves 4/16 of what 16 move (0.75 of 100 GB/s), the latency
  // unchanged; -1 keeps the topology's 16.
  const Topology t = dgx_like();
  const CollectiveModel four = tuned(t, "allreduce,0,1099511627776,ring,simple,4,-1,-1\n");
  const CollectiveModel own = tuned(t, "allreduce,0,1099511627776,ring,simple,-1,-1,-1\n");
  const CollectiveShape s = shape(CollOp::all_reduce, kBig, 8);
  const CollectiveEstimate a = four.choose(s);
  const CollectiveEstimate b = own.choose(s);
  EXPECT_EQ(a.channels, 4);
  EXPECT_EQ(a.tuner_channels, 4);
  EXPECT_EQ(b.channels, 16);
  EXPECT_EQ(b.tuner_channels, 0);
  expect_close(a.algbw, kB * kE / (2.0 * 7 / 8) * 4 / 16);
  expect_close(b.algbw, kB * kE / (2.0 * 7 / 8));
  EXPECT_EQ(a.latency, b.latency);
  // estimate() with the same channel count gives the same call.
  EXPECT_EQ(est(CollectiveModel(t), s, CollAlgo::ring, Protocol::simple).seconds, b.seconds);
  EXPECT_EQ(CollectiveModel(t).estimate(s, CollAlgo::ring, Protocol::simple, nullptr, 4)->seconds, a.seconds);
}

TEST(CollectiveModelChannels, HalvingTheChannelsDoublesTheBandwidthTerm) {
  const CollectiveModel m16(dgx_like());
  const CollectiveModel m8(Topology::parse(one_node(8,
                                                    "  model: nccl\n"
                                                    "  fabric_efficiency: 0.75\n"
                                                    "  channels: 8\n"
                                                    "  intra_latency: 2 us\n"),
                                           "one8.yaml"));
  for (Protocol p : {Protocol::ll128, Protocol::simple}) {
    const CollectiveShape s = shape(CollOp::all_reduce, kBig, 8);
    const CollectiveEstimate a = est(m16, s, CollAlgo::ring, p);
    const CollectiveEstimate b = est(m8, s, CollAlgo::ring, p);
    EXPECT_EQ(a.channels, 16);
    EXPECT_EQ(b.channels, 8);
    EXPECT_EQ(a.latency, b.latency);
    expect_close((b.seconds - b.latency) / (a.seconds - a.latency), 2.0);
    const double proto = p == Protocol::simple ? 1.0 : 0.92;
    expect_close(b.algbw, kB * kE / (2.0 * 7 / 8) * proto * 8 / 16);
  }
}

// Over NVLink, channels beyond 16 (NCCL_MIN_CTAS) add bandwidth in proportion, up to the links'
// rate: 20 channels move 20/16 of 0.75 of it, 32 the whole of it. A small call uses as many
// channels as its size gives whatever the maximum, so its time does not depend on the maximum.
TEST(CollectiveModelChannels, MoreThanSixteenChannelsFillTheLinksAndSmallCallsAreUnchanged) {
  const Topology t = dgx_like();
  auto with_channels = [&](int c) {
    CollectiveTiming k = t.collectives();
    k.channels = c;
    return CollectiveModel(t, k);
  };
  const CollectiveModel m16(t), m20 = with_channels(20), m32 = with_channels(32), m8 = with_channels(8);
  EXPECT_EQ(m32.constants().channels, 32);
  const CollectiveShape big = shape(CollOp::all_reduce, kBig, 8);
  const double bus = 2.0 * 7 / 8;
  const CollectiveEstimate a = est(m16, big, CollAlgo::ring, Protocol::simple);
  const CollectiveEstimate b = est(m20, big, CollAlgo::ring, Protocol::simple);
  const CollectiveEstimate c = est(m32, big, CollAlgo::ring, Protocol::simple);
  EXPECT_EQ(b.channels, 20);
  EXPECT_EQ(c.channels, 32);
  expect_close(a.algbw, kB * kE / bus);
  expect_close(b.algbw, kB * kE * 20 / 16 / bus);
  expect_close(c.algbw, kB / bus);
  EXPECT_EQ(a.latency, c.latency);
  const CollectiveShape small = shape(CollOp::all_reduce, 100 * kKiB, 8);  // 3 channels of Simple
  const CollectiveEstimate s16 = est(m16, small, CollAlgo::ring, Protocol::simple);
  const CollectiveEstimate s8 = est(m8, small, CollAlgo::ring, Protocol::simple);
  const CollectiveEstimate s32 = est(m32, small, CollAlgo::ring, Protocol::simple);
  EXPECT_EQ(s16.channels, 3);
  EXPECT_EQ(s8.channels, 3);
  EXPECT_EQ(s32.channels, 3);
  expect_close(s8.algbw, kB * kE / bus * 3 / 16);
  EXPECT_EQ(s16.seconds, s8.seconds);
  EXPECT_EQ(s16.seconds, s32.seconds);
}

TEST(CollectiveModelChannels, SmallCallsUseFewerChannels) {
  const CollectiveModel m(dgx_like());
  const double full = kB * kE / (2.0 * 7 / 8);  // Simple's algbw on all 16 channels
  struct Row {
    Protocol p;
    double bytes;
    int channels;
  };
  // A channel per 32 KiB (Simple), 5 KiB (LL128), and on LL 4 KiB times the ranks (8 here: NCCL
  // multiplies its LL ring threshold by them); at least one, at most 16.
  for (const Row& r :
       {Row{Protocol::simple, 100 * kKiB, 3}, Row{Protocol::simple, 31 * kKiB, 1}, Row{Protocol::simple, 32 * kKiB, 1},
        Row{Protocol::simple, 64 * kKiB, 2}, Row{Protocol::simple, 512 * kKiB, 16},
        Row{Protocol::simple, 10000 * kKiB, 16}, Row{Protocol::ll, 80 * kKiB, 2}, Row{Protocol::ll, 10 * kKiB, 1},
        Row{Protocol::ll, 31 * kKiB, 1}, Row{Protocol::ll, 100 * kKiB, 3}, Row{Protocol::ll, 512 * kKiB, 16},
        Row{Protocol::ll128, 12 * kKiB, 2}, Row{Protocol::ll128, 15 * kKiB, 3}, Row{Protocol::ll128, 80 * kKiB, 16}}) {
    const CollectiveEstimate e = est(m, shape(CollOp::all_reduce, r.bytes, 8), CollAlgo::ring, r.p);
    EXPECT_EQ(e.channels, r.channels) << to_string(r.p) << " " << r.bytes;
    const double proto = r.p == Protocol::simple ? 1.0 : r.p == Protocol::ll128 ? 0.92 : 0.5;
    expect_close(e.algbw, full * proto * r.channels / 16);
  }
  // The rule is the ring's: a tree on LL takes a channel per 4 KiB, and so does a ring of 16
  // ranks per 64 KiB.
  EXPECT_EQ(est(m, shape(CollOp::all_reduce, 10 * kKiB, 8), CollAlgo::tree, Protocol::ll).channels, 2);
  const CollectiveModel two(cluster(2, 8, 0.7));
  EXPECT_EQ(est(two, shape(CollOp::all_gather, 127 * kKiB, 16, 2), CollAlgo::ring, Protocol::ll).channels, 1);
  EXPECT_EQ(est(two, shape(CollOp::all_gather, 128 * kKiB, 16, 2), CollAlgo::ring, Protocol::ll).channels, 2);
}

// ---- forcing and names

TEST(CollectiveModelForcing, TreeForAllGatherIsRefused) {
  const CollectiveModel m(dgx_like());
  try {
    (void)m.choose(shape(CollOp::all_gather, kGiB, 8), CollAlgo::tree);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("algorithm tree"));
    EXPECT_THAT(e.what(), HasSubstr("trees serve all_reduce only"));
  }
  std::string why;
  EXPECT_FALSE(m.estimate(shape(CollOp::all_gather, kGiB, 8), CollAlgo::tree, Protocol::simple, &why));
  EXPECT_THAT(why, HasSubstr("all_reduce only"));
}

TEST(CollectiveModelForcing, NvlsNeedsTheTopologyToSayNvls) {
  const CollectiveModel without(dgx_like());
  EXPECT_THROW(
      {
        try {
          (void)without.choose(shape(CollOp::all_reduce, kGiB, 8), CollAlgo::nvls);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("algorithm nvls"));
          EXPECT_THAT(e.what(), HasSubstr("collectives.nvls: true"));
          throw;
        }
      },
      Error);
  for (const CollectiveEstimate& e : without.candidates(shape(CollOp::all_reduce, kGiB, 8)))
    EXPECT_NE(e.algorithm, CollAlgo::nvls);

  const CollectiveModel with(dgx_like("  nvls: true\n  nvls_efficiency: 0.6\n"));
  const CollectiveEstimate e = with.choose(shape(CollOp::all_reduce, kGiB, 8), CollAlgo::nvls);
  EXPECT_EQ(e.algorithm, CollAlgo::nvls);
  EXPECT_EQ(e.protocol, Protocol::simple);
  // Each GPU's link carries S (1 + 1/8).
  expect_close(e.algbw, kB * 0.6 / (1 + 1.0 / 8));
  // On 4 GPUs, S (1 + 1/4): a ninth less than on 8.
  const CollectiveModel four(
      Topology::parse(one_node(4, std::string(kNcclSection) + "  nvls: true\n  nvls_efficiency: 0.6\n"), "four.yaml"));
  expect_close(four.choose(shape(CollOp::all_reduce, kGiB, 4), CollAlgo::nvls).algbw, kB * 0.6 / (1 + 1.0 / 4));
}

TEST(CollectiveModelForcing, ForcedProtocolThatCannotServeIsNamed) {
  const CollectiveModel with(dgx_like("  nvls: true\n"));
  try {
    (void)with.choose(shape(CollOp::all_reduce, kGiB, 8), CollAlgo::nvls, Protocol::ll);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("algorithm nvls with protocol LL"));
    EXPECT_THAT(e.what(), HasSubstr("Simple protocol only"));
  }
}

TEST(CollectiveModelNames, ParseProtocol) {
  EXPECT_EQ(parse_protocol("ll128"), Protocol::ll128);
  EXPECT_EQ(parse_protocol("LL128"), Protocol::ll128);
  EXPECT_EQ(parse_protocol("SIMPLE"), Protocol::simple);
  EXPECT_EQ(parse_protocol("Simple"), Protocol::simple);
  EXPECT_EQ(parse_protocol("ll"), Protocol::ll);
  EXPECT_EQ(parse_protocol("fast"), std::nullopt);
  EXPECT_EQ(parse_protocol(""), std::nullopt);
  EXPECT_EQ(parse_protocol("ll1280"), std::nullopt);
}

TEST(CollectiveModelNames, ToStringRoundTripsThroughParse) {
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) EXPECT_EQ(parse_protocol(to_string(p)), p);
  EXPECT_STREQ(to_string(CollAlgo::nvls_tree), "nvls_tree");
  EXPECT_STREQ(to_string(Protocol::ll128), "LL128");
}

// ---- determinism

TEST(CollectiveModelDeterminism, SameCallSameBits) {
  const CollectiveModel a(cluster(2, 4, 0.8));
  const CollectiveModel b(cluster(2, 4, 0.8));
  for (double bytes : sweep_sizes()) {
    const CollectiveShape s = shape(CollOp::all_reduce, bytes, 16, 2);
    const CollectiveEstimate x = a.choose(s), y = a.choose(s), z = b.choose(s);
    EXPECT_EQ(std::memcmp(&x.seconds, &y.seconds, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&x.seconds, &z.seconds, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&x.latency, &z.latency, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&x.algbw, &z.algbw, sizeof(double)), 0);
    EXPECT_EQ(x.algorithm, z.algorithm);
    EXPECT_EQ(x.protocol, z.protocol);
    EXPECT_EQ(x.channels, z.channels);
  }
}

}  // namespace
}  // namespace ranksim::sim

namespace ranksim::sim {
namespace {

// A group on more nodes than a leaf group holds crosses the leaf's uplinks: their
// oversubscription divides the NICs' bandwidth; a group within one leaf group is not slowed.
TEST(CollectiveModelNetwork, OversubscribedLevelsSlowOnlyGroupsThatCrossThem) {
  const std::string text =
      "name: over\nnodes: 8\n"
      "device_kinds: {g: {peak_flops: {f32: 100 TFLOP/s}, memory_bandwidth: 1 TB/s, memory: 1 GiB}}\n"
      "node: {devices: 8, kind: g, fabric: {type: switch, bandwidth: 400 GB/s, latency: 1 us}}\n"
      "network:\n  nic_bandwidth: 400 Gb/s\n  nic_latency: 1 us\n  levels:\n"
      "    - {name: leaf, children: 2, latency: 100 ns, oversubscription: 4}\n"
      "    - {name: spine, latency: 100 ns}\n"
      "collectives: {model: nccl, fabric_efficiency: 1, network_efficiency: 1}\n";
  const CollectiveModel m(Topology::parse(text, "over.yaml"));
  auto ring_bus = [&](int nodes) {
    const int n = 8 * nodes;
    const CollectiveEstimate e = est(m, shape(CollOp::all_reduce, kBig, n, nodes), CollAlgo::ring, Protocol::simple);
    return e.algbw * 2.0 * (n - 1) / n;
  };
  expect_close(ring_bus(2), 8 * 50e9);      // within one leaf group: the 8 NICs at 50 GB/s
  expect_close(ring_bus(4), 8 * 50e9 / 4);  // across leaf groups: their uplinks, 4x oversubscribed
}

}  // namespace
}  // namespace ranksim::sim

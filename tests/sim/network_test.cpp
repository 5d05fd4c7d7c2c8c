#include "sim/network.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "sim/error.h"

namespace ranksim::sim {
namespace {

constexpr uint64_t MB = 1'000'000;

std::string shipped(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + name; }

// ring4: links of 50 GB/s and 1 us; device memory 500 GB/s.
class Ring4 : public ::testing::Test {
 protected:
  Topology topo = Topology::load_file(shipped("ring4.yaml"));
  NetworkModel net{topo};
};

TEST_F(Ring4, AloneATransferCostsLatencyPlusBytesOverBandwidth) {
  const Transfer t{0, 1, 50 * MB, Time::us(10)};
  const std::vector<Time> done = net.complete({&t, 1});
  EXPECT_EQ(done[0], Time::us(10) + Time::ms(1) + Time::us(1));
  EXPECT_EQ(net.uncontended(0, 1, 50 * MB), Time::ms(1) + Time::us(1));
  // Two hops: the latencies add, the bandwidth is the bottleneck's.
  EXPECT_EQ(net.uncontended(0, 2, 50 * MB), Time::ms(1) + Time::us(2));
}

TEST_F(Ring4, TwoFlowsOnOneLinkGetHalfEach) {
  // 0->1 uses link 0->1; 0->2 goes 0->1->2 and shares link 0->1.
  const std::vector<Transfer> ts = {{0, 1, 50 * MB, Time::zero()}, {0, 2, 50 * MB, Time::zero()}};
  const std::vector<Time> done = net.complete(ts);
  EXPECT_EQ(done[0], Time::ms(2) + Time::us(1));
  EXPECT_EQ(done[1], Time::ms(2) + Time::us(2));
}

TEST_F(Ring4, AFlowThatStartsLaterSharesFromThenOn) {
  // A sends 50 MB alone in the first ms; from 1 ms both get 25 GB/s, B's 25 MB take 1 ms;
  // then A sends its last 25 MB alone at 50 GB/s in 0.5 ms.
  const std::vector<Transfer> ts = {{0, 1, 100 * MB, Time::zero()}, {0, 1, 25 * MB, Time::ms(1)}};
  const std::vector<Time> done = net.complete(ts);
  EXPECT_EQ(done[1], Time::ms(2) + Time::us(1));
  EXPECT_EQ(done[0], Time::us(2500) + Time::us(1));
}

TEST_F(Ring4, WhenTheSmallFlowFinishesTheBigOneSpeedsUp) {
  // 25 GB/s each until the 10 MB flow is done (0.4 ms); the 30 MB flow has 20 MB left, alone.
  const std::vector<Transfer> ts = {{0, 1, 10 * MB, Time::zero()}, {0, 1, 30 * MB, Time::zero()}};
  const std::vector<Time> done = net.complete(ts);
  EXPECT_EQ(done[0], Time::us(400) + Time::us(1));
  EXPECT_EQ(done[1], Time::us(800) + Time::us(1));
}

TEST_F(Ring4, FlowsOnDisjointLinksDoNotInteract) {
  // Opposite directions of one cable are separate links (full duplex), and so are other cables.
  const std::vector<Transfer> ts = {
      {0, 1, 50 * MB, Time::zero()}, {1, 0, 50 * MB, Time::zero()}, {2, 3, 50 * MB, Time::zero()}};
  for (Time t : net.complete(ts)) EXPECT_EQ(t, Time::ms(1) + Time::us(1));
}

TEST_F(Ring4, ACopyWithinADeviceReadsAndWritesMemory) {
  // 1 GB read + 1 GB written at 500 GB/s.
  const std::vector<Transfer> ts = {{2, 2, 1000 * MB, Time::us(5)}, {2, 3, 50 * MB, Time::us(5)}};
  const std::vector<Time> done = net.complete(ts);
  EXPECT_EQ(done[0], Time::us(5) + Time::ms(4));
  EXPECT_EQ(done[1], Time::us(5) + Time::ms(1) + Time::us(1));  // the copy does not share
  EXPECT_EQ(net.uncontended(2, 2, 1000 * MB), Time::ms(4));
}

TEST_F(Ring4, AnEmptyTransferCostsTheLatency) {
  const std::vector<Transfer> ts = {{0, 2, 0, Time::us(3)}, {0, 1, 50 * MB, Time::zero()}};
  const std::vector<Time> done = net.complete(ts);
  EXPECT_EQ(done[0], Time::us(5));
  EXPECT_EQ(done[1], Time::ms(1) + Time::us(1));  // an empty message takes no bandwidth
  EXPECT_TRUE(net.complete({}).empty());
}

TEST_F(Ring4, ATransferLongerThanTheClockIsAnError) {
  // 1 EB at 50 GB/s is 2e7 s, past the clock's range.
  const Transfer t{0, 1, 1'000'000'000'000'000'000ull, Time::zero()};
  EXPECT_THROW(net.complete({&t, 1}), Error);
  EXPECT_THROW(net.uncontended(0, 1, t.bytes), Error);
}

// The model keeps a pointer to its topology: building one from a temporary cannot compile.
static_assert(!std::is_constructible_v<NetworkModel, Topology&&>);

TEST(NetworkModel, MaxMinFairnessGivesLeftoverBandwidthToTheOthers) {
  // Link 0-1 is slow (10 GB/s), link 1-2 fast (100 GB/s). A (0->1) and B (0->2) split the slow
  // link, 5 GB/s each; C (1->2) takes what B leaves of the fast one, 95 GB/s, until B is done
  // at 1 ms, then all 100 GB/s: 95 MB + 95 MB in 1.95 ms.
  const Topology topo = Topology::parse(R"(
name: y
device_kinds:
  x: {peak_flops: {f32: 1 TFLOP/s}, memory_bandwidth: 1 TB/s, memory: 1 GiB}
node:
  devices: 3
  kind: x
  fabric:
    type: links
    latency: 1 us
    links:
      - {between: [0, 1], bandwidth: 10 GB/s}
      - {between: [1, 2], bandwidth: 100 GB/s}
)",
                                        "y.yaml");
  const NetworkModel net(topo);
  const std::vector<Transfer> ts = {
      {0, 1, 5 * MB, Time::zero()}, {0, 2, 5 * MB, Time::zero()}, {1, 2, 190 * MB, Time::zero()}};
  const std::vector<Time> done = net.complete(ts);
  EXPECT_EQ(done[0], Time::ms(1) + Time::us(1));
  EXPECT_EQ(done[1], Time::ms(1) + Time::us(2));
  EXPECT_EQ(done[2], Time::us(1950) + Time::us(1));
}

TEST(NetworkModel, TheNicIsSharedAndTheFatTreeIsNot) {
  const Topology topo = Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=3"});
  const NetworkModel net(topo);
  // GPU 0 of node 0 sends to GPU 0 of nodes 1 and 2: its NIC (50 GB/s) is split.
  const std::vector<Transfer> fan_out = {{0, 8, 50 * MB, Time::zero()}, {0, 16, 50 * MB, Time::zero()}};
  for (Time t : net.complete(fan_out)) EXPECT_EQ(t, Time::ms(2) + Time::ns(1130));
  // Every GPU of node 0 sends to another rail on node 1: all meet at the spine, which is
  // non-blocking, so each gets its whole NIC.
  std::vector<Transfer> cross;
  for (int g = 0; g < 8; ++g) cross.push_back({g, 8 + (g + 1) % 8, 50 * MB, Time::zero()});
  for (Time t : net.complete(cross)) EXPECT_EQ(t, Time::ms(1) + Time::ns(1390));
}

TEST(NetworkModel, AnOversubscribedUplinkIsShared) {
  // Rail 0's leaf holds 2 NICs (100 GB/s); at 4:1 its uplink carries 25 GB/s. Two flows leave
  // rail 0 for rail 1: 12.5 GB/s each.
  const Topology topo = Topology::load_file(shipped("h100-cluster.yaml"), {"network.levels.leaf.oversubscription=4"});
  const NetworkModel net(topo);
  const std::vector<Transfer> ts = {{0, 9, 50 * MB, Time::zero()}, {8, 1, 50 * MB, Time::zero()}};
  for (Time t : net.complete(ts)) EXPECT_EQ(t, Time::ms(4) + Time::ns(1390));
  EXPECT_EQ(net.uncontended(0, 9, 50 * MB), Time::ms(2) + Time::ns(1390));
}

TEST(NetworkModel, ARingStepOverSixteenThousandGpusIsThreeEvents) {
  const Topology topo = Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=2048"});
  const NetworkModel net(topo);
  const int n = topo.num_devices();
  std::vector<Transfer> ring;
  for (int i = 0; i < n; ++i) ring.push_back({i, (i + 1) % n, 10 * MB, Time::zero()});
  NetworkStats stats;
  const std::vector<Time> done = net.complete(ring, &stats);
  EXPECT_EQ(stats.events, 3u);   // all starts; the NVSwitch flows finish; the NIC flows finish
  EXPECT_EQ(stats.refills, 1u);  // one progressive filling for all of them
  EXPECT_EQ(stats.rate_changes, static_cast<uint64_t>(n));
  // Inside a node: NVSwitch. Between nodes: GPU 7 -> GPU 0 changes rail (spine), and between
  // pods (every 128 nodes) it crosses the core.
  const Time nvswitch = Time::from_seconds(10e6 / 450e9) + Time::ns(700);
  EXPECT_EQ(done[0], nvswitch);
  EXPECT_EQ(done[7], Time::us(200) + Time::ns(1390));
  EXPECT_EQ(done[127 * 8 + 7], Time::us(200) + Time::ns(1650));
  for (int i = 0; i < n; ++i) EXPECT_EQ(done[static_cast<size_t>(i)], net.uncontended(i, (i + 1) % n, 10 * MB));
}

// ---- An independent reference: global progressive filling recomputed from scratch at every
// event, in double seconds, over every link of every route (non-blocking links included).
std::vector<double> reference(const Topology& topo, const std::vector<Transfer>& ts) {
  struct F {
    std::vector<int> links;
    double start, latency, rem, rate = 0;
    bool started = false, finished = false;
  };
  std::vector<F> fs;
  std::vector<double> end(ts.size(), 0.0);
  for (const Transfer& t : ts) {
    const Route r = topo.route(t.src, t.dst);
    fs.push_back({r.links, t.start.seconds(), r.latency.seconds(), static_cast<double>(t.bytes)});
  }
  double now = 0;
  while (true) {
    // Rates of the active flows.
    std::vector<size_t> active;
    for (size_t i = 0; i < fs.size(); ++i)
      if (fs[i].started && !fs[i].finished) active.push_back(i);
    std::vector<bool> frozen(fs.size(), false);
    for (size_t left = active.size(); left > 0;) {
      double best = std::numeric_limits<double>::infinity();
      int best_link = -1;
      for (size_t i : active) {
        if (frozen[i]) continue;
        for (int l : fs[i].links) {
          double used = 0;
          int unfrozen = 0;
          for (size_t j : active) {
            if (std::find(fs[j].links.begin(), fs[j].links.end(), l) == fs[j].links.end()) continue;
            if (frozen[j])
              used += fs[j].rate;
            else
              ++unfrozen;
          }
          const double share = (topo.link(l).bandwidth - used) / unfrozen;
          if (share < best) best = share, best_link = l;
        }
      }
      for (size_t j : active) {
        if (frozen[j]) continue;
        if (std::find(fs[j].links.begin(), fs[j].links.end(), best_link) == fs[j].links.end()) continue;
        fs[j].rate = best;
        frozen[j] = true;
        --left;
      }
    }
    double next = std::numeric_limits<double>::infinity();
    for (const F& f : fs)
      if (!f.started) next = std::min(next, f.start);
    for (size_t i : active) next = std::min(next, now + fs[i].rem / fs[i].rate);
    if (std::isinf(next)) break;
    for (size_t i : active) {
      const double finish = now + fs[i].rem / fs[i].rate;
      fs[i].rem -= fs[i].rate * (next - now);
      if (finish <= next * (1 + 1e-12)) {
        fs[i].finished = true;
        end[i] = finish + fs[i].latency;
      }
    }
    now = next;
    for (F& f : fs)
      if (!f.started && f.start <= now) f.started = true;
  }
  return end;
}

struct Lcg {
  uint64_t s;
  uint64_t next(uint64_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (s >> 33) % n;
  }
};

// count random transfers of 1-64 MB starting at random multiples of `step` below steps * step:
// few distinct starts make many simultaneous starts and finishes, many make a long cascade.
void expect_matches_reference(const Topology& topo, uint64_t seed, int count, Time step = Time::us(250),
                              uint64_t steps = 4) {
  Lcg rng{seed};
  std::vector<Transfer> ts;
  for (int i = 0; i < count; ++i) {
    const int src = static_cast<int>(rng.next(static_cast<uint64_t>(topo.num_devices())));
    int dst = static_cast<int>(rng.next(static_cast<uint64_t>(topo.num_devices() - 1)));
    if (dst >= src) ++dst;
    const Time start = step * static_cast<int64_t>(rng.next(steps));
    ts.push_back({src, dst, (1 + rng.next(64)) * MB, start});
  }
  const NetworkModel net(topo);
  const std::vector<Time> got = net.complete(ts);
  const std::vector<double> want = reference(topo, ts);
  for (size_t i = 0; i < ts.size(); ++i)
    EXPECT_NEAR(got[i].seconds(), want[i], 1e-11) << "transfer " << i << " of seed " << seed;

  // The same transfers in reverse order give the same times.
  std::vector<Transfer> reversed(ts.rbegin(), ts.rend());
  const std::vector<Time> again = net.complete(reversed);
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(again[ts.size() - 1 - i], got[i]);
}

TEST(NetworkModel, MatchesAGlobalReferenceOnTheRing) {
  const Topology topo = Topology::load_file(shipped("ring4.yaml"));
  for (uint64_t seed = 1; seed <= 5; ++seed) expect_matches_reference(topo, seed, 12);
}

TEST(NetworkModel, MatchesAGlobalReferenceOnAFatTree) {
  const Topology topo = Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=4"});
  for (uint64_t seed = 1; seed <= 4; ++seed) expect_matches_reference(topo, seed, 40);
}

TEST(NetworkModel, MatchesAGlobalReferenceWithStaggeredStarts) {
  const Topology ring = Topology::load_file(shipped("ring4.yaml"));
  const Topology tree = Topology::load_file(shipped("h100-cluster.yaml"), {"nodes=6", "network.levels.leaf.children=2",
                                                                           "network.levels.leaf.oversubscription=4"});
  for (uint64_t seed = 11; seed <= 14; ++seed) {
    expect_matches_reference(ring, seed, 20, Time::us(1), 2000);
    expect_matches_reference(tree, seed, 60, Time::us(1), 2000);
  }
}

TEST(NetworkModel, MatchesAGlobalReferenceOnAMeshOfUnequalLinks) {
  const Topology topo = Topology::parse(R"(
name: uneven
device_kinds:
  x: {peak_flops: {f32: 1 TFLOP/s}, memory_bandwidth: 1 TB/s, memory: 1 GiB}
node:
  devices: 5
  kind: x
  fabric:
    type: links
    latency: 1 us
    links:
      - {between: [0, 1], bandwidth: 10 GB/s}
      - {between: [1, 2], bandwidth: 40 GB/s}
      - {between: [2, 3], bandwidth: 25 GB/s}
      - {between: [3, 4], bandwidth: 100 GB/s}
      - {between: [4, 0], bandwidth: 60 GB/s}
      - {between: [1, 3], bandwidth: 15 GB/s, latency: 3 us}
)",
                                        "uneven.yaml");
  for (uint64_t seed = 21; seed <= 26; ++seed) {
    expect_matches_reference(topo, seed, 30);
    expect_matches_reference(topo, seed, 30, Time::us(3), 1000);
  }
}

TEST(NetworkModel, MatchesAGlobalReferenceOnAnOversubscribedFatTree) {
  const Topology topo =
      Topology::load_file(shipped("h100-cluster.yaml"),
                          {"nodes=6", "network.levels.leaf.children=2", "network.levels.leaf.oversubscription=3",
                           "network.levels.spine.oversubscription=1.5"});
  for (uint64_t seed = 1; seed <= 4; ++seed) expect_matches_reference(topo, seed, 40);
}

}  // namespace
}  // namespace ranksim::sim

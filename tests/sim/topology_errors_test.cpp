// Malformed topologies: each must fail with a ConfigError that names the file, the 1-based line
// and column of the offending YAML node, what is wrong and what was expected.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "sim/collective_model.h"
#include "sim/error.h"
#include "sim/topology.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

// A valid single-node topology; cases edit it line by line (line numbers below are 1-based).
const std::vector<std::string> kBase = {
    "name: t",                              // 1
    "device_kinds:",                        // 2
    "  gpu:",                               // 3
    "    peak_flops: {bf16: 100 TFLOP/s}",  // 4
    "    memory_bandwidth: 1 TB/s",         // 5
    "    memory: 16 GiB",                   // 6
    "node:",                                // 7
    "  devices: 4",                         // 8
    "  kind: gpu",                          // 9
    "  fabric:",                            // 10
    "    type: switch",                     // 11
    "    bandwidth: 100 GB/s",              // 12
    "    latency: 1 us",                    // 13
};

// Appended to kBase for network cases: lines 14-22.
const std::vector<std::string> kNetwork = {
    "network:",                   // 14
    "  nic_bandwidth: 100 Gb/s",  // 15
    "  nic_latency: 1 us",        // 16
    "  levels:",                  // 17
    "    - name: leaf",           // 18
    "      children: 2",          // 19
    "      latency: 100 ns",      // 20
    "    - name: spine",          // 21
    "      latency: 100 ns",      // 22
};

struct Edit {
  int line;          // 1-based line of the text being edited
  const char* text;  // replacement (may hold several lines); nullptr deletes the line
};

std::string text_of(std::vector<std::string> lines, std::vector<Edit> edits,
                    const std::vector<std::string>& append = {}) {
  std::vector<const char*> replaced(lines.size(), "");
  std::vector<bool> touched(lines.size(), false), deleted(lines.size(), false);
  for (const Edit& e : edits) {
    touched[static_cast<size_t>(e.line - 1)] = true;
    if (e.text == nullptr)
      deleted[static_cast<size_t>(e.line - 1)] = true;
    else
      replaced[static_cast<size_t>(e.line - 1)] = e.text;
  }
  std::ostringstream out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (deleted[i]) continue;
    out << (touched[i] ? std::string(replaced[i]) : lines[i]) << "\n";
  }
  for (const std::string& a : append) out << a << "\n";
  return out.str();
}

std::string base(std::vector<Edit> edits, const std::vector<std::string>& append = {}) {
  return text_of(kBase, std::move(edits), append);
}

std::string with_network(std::vector<Edit> edits, const std::vector<std::string>& append = {}) {
  std::vector<std::string> lines = kBase;
  lines.insert(lines.end(), kNetwork.begin(), kNetwork.end());
  return text_of(lines, std::move(edits), append);
}

struct Case {
  const char* name;
  std::string yaml;
  std::vector<std::string> overrides;
  std::string file;  // where the error is reported: "bad.yaml" or "override '...'"
  int line, column;
  std::vector<std::string> says;  // substrings the message must contain
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TopologyErrors : public ::testing::TestWithParam<Case> {};

TEST_P(TopologyErrors, ReportsWhereAndWhat) {
  const Case& c = GetParam();
  try {
    Topology::parse(c.yaml, "bad.yaml", c.overrides);
    FAIL() << "expected a ConfigError for:\n" << c.yaml;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), c.file);
    EXPECT_EQ(e.line(), c.line) << e.what();
    EXPECT_EQ(e.column(), c.column) << e.what();
    const std::string prefix = c.file + ":" + std::to_string(c.line) + ":" + std::to_string(c.column) + ": ";
    EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    for (const std::string& s : c.says) EXPECT_THAT(e.what(), HasSubstr(s));
  }
}

TEST(TopologyErrorsBase, TheUneditedInputsAreValid) {
  EXPECT_EQ(Topology::parse(base({}), "ok.yaml").num_devices(), 4);
  EXPECT_EQ(Topology::parse(with_network({}, {"nodes: 3"}), "ok.yaml").num_devices(), 12);
}

const char* const kLinksFabric =
    "    type: links\n"           // 11
    "    bandwidth: 100 GB/s\n"   // 12
    "    latency: 1 us\n"         // 13
    "    links:\n"                // 14
    "      - {between: [0, 1]}";  // 15

std::vector<Case> cases() {
  return {
      // ---- YAML itself and the overall shape
      {"MalformedYaml",
       base({{12, "    bandwidth: [100 GB/s"}}),
       {},
       "bad.yaml",
       13,
       12,
       {"malformed YAML", "end of sequence flow not found"}},
      {"TabIndentation", base({{12, "\tbandwidth: 100 GB/s"}}), {}, "bad.yaml", 12, 1, {"malformed YAML", "tab"}},
      {"BandwidthBelowAUnitSlip",
       base({{12, "    bandwidth: 1e-300 B/s"}}),
       {},
       "bad.yaml",
       12,
       16,
       {"'node.fabric.bandwidth' must be at least 1 kB/s, got '1e-300 B/s'"}},
      {"FlopRateBelowAUnitSlip",
       base({{4, "    peak_flops: {bf16: 1 FLOP/s}"}}),
       {},
       "bad.yaml",
       4,
       24,
       {"must be at least 1 kFLOP/s, got '1 FLOP/s'"}},
      {"EmptyFile", "", {}, "bad.yaml", 1, 1, {"the topology is empty", "expected a mapping"}},
      {"TopLevelIsAList",
       "- name: t\n- nodes: 2\n",
       {},
       "bad.yaml",
       1,
       1,
       {"the topology must be a mapping", "got a list"}},
      // ---- keys
      {"UnknownTopLevelKey",
       base({}, {"nodess: 2"}),
       {},
       "bad.yaml",
       14,
       1,
       {"unknown key 'nodess' in the topology", "did you mean 'nodes'?", "known keys: name"}},
      {"UnknownFabricKey",
       base({{12, "    bandwith: 100 GB/s"}}),
       {},
       "bad.yaml",
       12,
       5,
       {"unknown key 'bandwith' in 'node.fabric'", "did you mean 'bandwidth'?"}},
      {"MissingField",
       base({{5, nullptr}}),
       {},
       "bad.yaml",
       4,
       5,
       {"'device_kinds.gpu' is missing the key 'memory_bandwidth'", "3.35 TB/s"}},
      {"MissingValue",
       base({{12, "    bandwidth:"}}),
       {},
       "bad.yaml",
       12,
       5,
       {"'node.fabric.bandwidth' has no value", "expected a bandwidth such as '450 GB/s'"}},
      {"DuplicateKey",
       base({{12, "    bandwidth: 100 GB/s\n    bandwidth: 200 GB/s"}}),
       {},
       "bad.yaml",
       13,
       5,
       {"duplicate key 'bandwidth' in 'node.fabric'", "first given on line 12"}},
      {"DuplicateDeviceKindName",
       base({{6, "    memory: 16 GiB\n  gpu: {memory: 8 GiB}"}}),
       {},
       "bad.yaml",
       7,
       3,
       {"duplicate key 'gpu' in 'device_kinds'", "first given on line 3"}},
      // ---- units and numbers
      {"MissingUnit",
       base({{12, "    bandwidth: 100"}}),
       {},
       "bad.yaml",
       12,
       16,
       {"'node.fabric.bandwidth'", "'100' has no unit", "GB/s", "Gb/s"}},
      {"SizeWhereBandwidthBelongs",
       base({{12, "    bandwidth: 100 GB"}}),
       {},
       "bad.yaml",
       12,
       16,
       {"'100 GB' is a size, not a bandwidth", "accepted units: B/s"}},
      {"UnknownUnit",
       base({{12, "    bandwidth: 100 GBps"}}),
       {},
       "bad.yaml",
       12,
       16,
       {"unknown bandwidth unit 'GBps'", "accepted units"}},
      {"NegativeBandwidth",
       base({{12, "    bandwidth: -100 GB/s"}}),
       {},
       "bad.yaml",
       12,
       16,
       {"bandwidth must be positive, got '-100 GB/s'"}},
      {"ZeroBandwidth", base({{12, "    bandwidth: 0 GB/s"}}), {}, "bad.yaml", 12, 16, {"bandwidth must be positive"}},
      {"NegativeLatency",
       base({{13, "    latency: -1 us"}}),
       {},
       "bad.yaml",
       13,
       14,
       {"'node.fabric.latency'", "duration must not be negative"}},
      {"RateWhereSizeBelongs",
       base({{6, "    memory: 16 GiB/s"}}),
       {},
       "bad.yaml",
       6,
       13,
       {"'device_kinds.gpu.memory'", "is a bandwidth, not a size"}},
      {"FractionalNodes",
       base({}, {"nodes: 2.5"}),
       {},
       "bad.yaml",
       14,
       8,
       {"'nodes' must be a whole number", "got '2.5'"}},
      {"ZeroNodes", base({}, {"nodes: 0"}), {}, "bad.yaml", 14, 8, {"'nodes' must be between 1 and", "got 0"}},
      // ---- wrong YAML types
      {"DeviceKindsIsAList",
       base({{2, "device_kinds: [gpu]"}, {3, nullptr}, {4, nullptr}, {5, nullptr}, {6, nullptr}}),
       {},
       "bad.yaml",
       2,
       15,
       {"'device_kinds' must be a mapping", "got a list"}},
      {"PeakFlopsIsAValue",
       base({{4, "    peak_flops: 100 TFLOP/s"}}),
       {},
       "bad.yaml",
       4,
       17,
       {"'device_kinds.gpu.peak_flops' must be a mapping from dtype to FLOP rate", "got '100 TFLOP/s'"}},
      {"UnknownDtype",
       base({{4, "    peak_flops: {bf61: 100 TFLOP/s}"}}),
       {},
       "bad.yaml",
       4,
       18,
       {"unknown key 'bf61'", "did you mean 'bf16'?", "f64, f32, tf32, bf16, f16, fp8"}},
      {"BadLabel",
       base({{9, "  kind: gpu\n  label: g/pu"}}),
       {},
       "bad.yaml",
       10,
       10,
       {"'node.label' must be letters, digits"}},
      // ---- references and structure
      {"UnknownDeviceKind",
       base({{9, "  kind: gpux"}}),
       {},
       "bad.yaml",
       9,
       9,
       {"unknown device kind 'gpux'", "did you mean 'gpu'?", "device_kinds defines: gpu"}},
      {"UnknownFabricType",
       base({{11, "    type: nvswitch"}}),
       {},
       "bad.yaml",
       11,
       11,
       {"unknown fabric type 'nvswitch'", "did you mean 'switch'?", "expected one of: switch, ring, mesh, links"}},
      {"LinksOnASwitch",
       base({{13, "    latency: 1 us\n    links: []"}}),
       {},
       "bad.yaml",
       14,
       5,
       {"'node.fabric.links' is only used with type: links"}},
      {"DisconnectedLinks",
       base({{11, kLinksFabric}, {12, nullptr}, {13, "      - {between: [2, 3]}"}}),
       {},
       "bad.yaml",
       15,
       7,
       {"device 0 cannot reach device 2", "2 disconnected groups ({0, 1} and {2, 3})"}},
      {"LinkToMissingDevice",
       base({{11, kLinksFabric}, {12, nullptr}, {13, "      - {between: [0, 4]}"}}),
       {},
       "bad.yaml",
       16,
       23,
       {"'node.fabric.links[1].between[1]' must be between 0 and 3", "local device index"}},
      {"LinkToItself",
       base({{11, kLinksFabric}, {12, nullptr}, {13, "      - {between: [1, 1]}"}}),
       {},
       "bad.yaml",
       16,
       19,
       {"links device 1 to itself"}},
      {"DuplicateLink",
       base({{11, kLinksFabric}, {12, nullptr}, {13, "      - {between: [1, 0]}"}}),
       {},
       "bad.yaml",
       16,
       19,
       {"duplicate link between devices 0 and 1", "first listed on line 15", "full duplex"}},
      {"RingOfOne",
       base({{8, "  devices: 1"}, {11, "    type: ring"}}),
       {},
       "bad.yaml",
       11,
       11,
       {"a ring needs at least 2 devices per node"}},
      {"NodesWithoutNetwork",
       base({}, {"nodes: 2"}),
       {},
       "bad.yaml",
       14,
       8,
       {"nodes is 2 but the topology has no 'network'", "could not reach each other"}},
      // ---- the network
      {"EmptyLevels",
       with_network({{17, "  levels: []"}, {18, nullptr}, {19, nullptr}, {20, nullptr}, {21, nullptr}, {22, nullptr}}),
       {},
       "bad.yaml",
       17,
       11,
       {"'network.levels' is empty"}},
      {"MissingChildren",
       with_network({{19, nullptr}}),
       {},
       "bad.yaml",
       18,
       7,
       {"'network.levels[0]' is missing the key 'children'", "nodes per leaf switch group"}},
      {"OversubscribedTop",
       with_network({}, {"      oversubscription: 2"}),
       {},
       "bad.yaml",
       23,
       7,
       {"the top level 'spine' has no uplinks, so it cannot be oversubscribed"}},
      {"DuplicateLevelName",
       with_network({{21, "    - name: leaf"}}),
       {},
       "bad.yaml",
       21,
       13,
       {"duplicate level name 'leaf'", "first used on line 18"}},
      {"NotABoolean",
       with_network({}, {"      rail_optimized: yes"}),
       {},
       "bad.yaml",
       23,
       23,
       {"'network.levels[1].rail_optimized' must be true or false, got 'yes'"}},
      {"RailsWithNothingAbove",
       base({}, {"network:", "  nic_bandwidth: 100 Gb/s", "  nic_latency: 1 us",
                 "  levels:", "    - {name: leaf, latency: 100 ns, rail_optimized: true}"}),
       {},
       "bad.yaml",
       18,
       53,
       {"needs a level above it to join the rails"}},
      {"TooManyNodesForTheTree",
       with_network({{22, "      latency: 100 ns\n      children: 1"}}, {"nodes: 3"}),
       {},
       "bad.yaml",
       24,
       8,
       {"nodes = 3 exceeds the capacity of the fat tree: 2 nodes (leaf 2 x spine 1)"}},
      // ---- overrides
      {"OverrideUnknownKey",
       with_network({}),
       {"network.nic_bandwdth=200 Gb/s"},
       "override 'network.nic_bandwdth=200 Gb/s'",
       1,
       9,
       {"unknown key 'nic_bandwdth' in 'network'", "did you mean 'nic_bandwidth'?"}},
      {"OverrideWithoutEquals", base({}), {"nodes"}, "override 'nodes'", 1, 1, {"expected key=value"}},
      {"OverrideBadValue",
       with_network({}),
       {"nodes=0"},
       "override 'nodes=0'",
       1,
       7,
       {"'nodes' must be between 1 and"}},
      {"OverrideBadUnit",
       with_network({}),
       {"network.levels.spine.latency=5 GB"},
       "override 'network.levels.spine.latency=5 GB'",
       1,
       30,
       {"'network.levels[1].latency'", "is a size, not a duration"}},
      {"OverrideUnknownLevel",
       with_network({}),
       {"network.levels.spin.latency=1 us"},
       "override 'network.levels.spin.latency=1 us'",
       1,
       16,
       {"has no element named 'spin'", "did you mean 'spine'?"}},
      {"OverrideCannotCreateListElements",
       base({}),
       {"node.fabric.links.0.between=[0, 1]"},
       "override 'node.fabric.links.0.between=[0, 1]'",
       1,
       13,
       {"cannot create list elements"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Malformed, TopologyErrors, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace ranksim::sim

// ---- the collectives section and the network keys of the nccl model
namespace ranksim::sim {
namespace {

std::vector<Case> collective_cases() {
  return {
      {"CollectivesUnknownModel",
       base({}, {"collectives:", "  model: foo"}),
       {},
       "bad.yaml",
       15,
       10,
       {"'collectives.model' must be nccl", "or schedule", "got 'foo'"}},
      {"CollectivesZeroChannels",
       base({}, {"collectives:", "  channels: 0"}),
       {},
       "bad.yaml",
       15,
       13,
       {"'collectives.channels' must be between 1 and 64"}},
      {"CollectivesTooManyChannels",
       base({}, {"collectives:", "  model: nccl", "  channels: 65"}),
       {},
       "bad.yaml",
       16,
       13,
       {"'collectives.channels' must be between 1 and 64", "got 65"}},
      {"CollectivesMinChannelsAboveMax",
       base({}, {"collectives:", "  model: nccl", "  min_channels: 24", "  max_channels: 8"}),
       {},
       "bad.yaml",
       16,
       17,
       {"'collectives.min_channels' (24) is above 'collectives.max_channels' (8)"}},
      {"CollectivesMaxChannelsZero",
       base({}, {"collectives:", "  max_channels: 0"}),
       {},
       "bad.yaml",
       15,
       17,
       {"'collectives.max_channels' must be between 1 and 64"}},
      {"CollectivesEfficiencyAboveOne",
       base({}, {"collectives:", "  fabric_efficiency: 1.5"}),
       {},
       "bad.yaml",
       15,
       22,
       {"'collectives.fabric_efficiency' must be at most 1", "got 1.5"}},
      {"CollectivesRingLoopGapNegative",
       base({}, {"collectives:", "  ring_loop_gap: -0.5"}),
       {},
       "bad.yaml",
       15,
       18,
       {"'collectives.ring_loop_gap' must be from 0 to 64", "got -0.5"}},
      {"CollectivesRingLoopGapNotANumber",
       base({}, {"collectives:", "  ring_loop_gap: half"}),
       {},
       "bad.yaml",
       15,
       18,
       {"'collectives.ring_loop_gap' must be a number", "'half'"}},
      {"CollectivesEfficiencyZero",
       base({}, {"collectives:", "  network_efficiency: 0"}),
       {},
       "bad.yaml",
       15,
       23,
       {"'collectives.network_efficiency' must be positive"}},
      {"CollectivesAllToAllNetworkEfficiencyAboveOne",
       base({}, {"collectives:", "  alltoall_network_efficiency: 1.2"}),
       {},
       "bad.yaml",
       15,
       32,
       {"'collectives.alltoall_network_efficiency' must be at most 1", "got 1.2"}},
      {"CollectivesNvlsOnARing",
       base({{11, "    type: ring"}}, {"collectives:", "  nvls: true"}),
       {},
       "bad.yaml",
       15,
       9,
       {"'collectives.nvls'", "NVLS reduces inside an NVSwitch", "node.fabric.type must be switch"}},
      {"CollectivesNvlsNotABoolean",
       base({}, {"collectives:", "  nvls: yes please"}),
       {},
       "bad.yaml",
       15,
       9,
       {"'collectives.nvls' must be true or false"}},
      {"CollectivesLatencyTooLong",
       base({}, {"collectives:", "  intra_latency: 1 s"}),
       {},
       "bad.yaml",
       15,
       18,
       {"'collectives.intra_latency' must be at most 100 ms per hop"}},
      {"CollectivesLatencyNotADuration",
       base({}, {"collectives:", "  call_overhead: 5 GB"}),
       {},
       "bad.yaml",
       15,
       18,
       {"'collectives.call_overhead'", "is a size, not a duration"}},
      {"CollectivesBufferTooSmall",
       base({}, {"collectives:", "  buffer_size: 4 KiB"}),
       {},
       "bad.yaml",
       15,
       16,
       {"'collectives.buffer_size' must be from 64 KiB to 1024 MiB", "NCCL_BUFFSIZE", "got '4 KiB'"}},
      {"CollectivesNvlsChunkTooLarge",
       base({}, {"collectives:", "  nvls_chunk_size: 1 GiB"}),
       {},
       "bad.yaml",
       15,
       20,
       {"'collectives.nvls_chunk_size' must be from 32 KiB to 64 MiB", "NCCL_NVLS_CHUNKSIZE"}},
      {"CollectivesP2pChunkTooSmall",
       base({}, {"collectives:", "  p2p_chunk_size: 1 KiB"}),
       {},
       "bad.yaml",
       15,
       19,
       {"'collectives.p2p_chunk_size' must be from 16 KiB to 64 MiB", "NCCL_P2P_NET_CHUNKSIZE"}},
      {"CollectivesNvlsTreeChunkNotASize",
       base({}, {"collectives:", "  nvls_tree_max_chunk_size: 5 us"}),
       {},
       "bad.yaml",
       15,
       29,
       {"'collectives.nvls_tree_max_chunk_size'", "not a size"}},
      {"CollectivesSimpleLatencyNegative",
       base({}, {"collectives:", "  simple_latency: -3 us"}),
       {},
       "bad.yaml",
       15,
       19,
       {"'collectives.simple_latency'"}},
      {"CollectivesUnknownKey",
       base({}, {"collectives:", "  chanels: 4"}),
       {},
       "bad.yaml",
       15,
       3,
       {"unknown key 'chanels'", "did you mean 'channels'?"}},
      {"NicsPerNodeNotDividingDevices",
       with_network({{16, "  nic_latency: 1 us\n  nics_per_node: 3"}}),
       {},
       "bad.yaml",
       17,
       18,
       {"'network.nics_per_node' = 3 does not divide node.devices = 4"}},
      {"NicsPerNodeAboveDevices",
       with_network({{16, "  nic_latency: 1 us\n  nics_per_node: 8"}}),
       {},
       "bad.yaml",
       17,
       18,
       {"'network.nics_per_node' must be between 1 and 4"}},
      {"TransportEthernet",
       with_network({{16, "  nic_latency: 1 us\n  transport: ethernet"}}),
       {},
       "bad.yaml",
       17,
       14,
       {"'network.transport' must be infiniband, roce or efa, got 'ethernet'"}},
      {"SharpNotABoolean",
       with_network({{16, "  nic_latency: 1 us\n  sharp: maybe"}}),
       {},
       "bad.yaml",
       17,
       10,
       {"'network.sharp' must be true or false"}},
      {"OverrideBadModel",
       base({}, {"collectives:", "  model: nccl"}),
       {"collectives.model=fast"},
       "override 'collectives.model=fast'",
       1,
       19,
       {"'collectives.model' must be nccl", "got 'fast'"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Collectives, TopologyErrors, ::testing::ValuesIn(collective_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return std::string(p.param.name); });

TEST(TopologyCollectivesSection, WithoutItTheModelIsSchedule) {
  const Topology t = Topology::parse(with_network({}, {"nodes: 2"}), "ok.yaml");
  const CollectiveTiming defaults;
  EXPECT_EQ(t.collectives().model, CollectiveTimingModel::schedule);
  EXPECT_EQ(t.collectives().channels, defaults.channels);
  EXPECT_EQ(t.collectives().fabric_efficiency, defaults.fabric_efficiency);
  EXPECT_EQ(t.collectives().intra_latency, defaults.intra_latency);
  // All-to-all's share of the NICs is the rings' unless set.
  EXPECT_EQ(t.collectives().alltoall_network_share(), defaults.network_efficiency);
  EXPECT_EQ(t.collectives().channel_network_bandwidth, 0.0);  // no cap
  EXPECT_EQ(t.collectives().nvls_tree_share(), defaults.nvls_efficiency);
  EXPECT_FALSE(t.collectives().nvls);
  // One NIC per device, InfiniBand, no SHARP.
  EXPECT_EQ(t.nics_per_node(), 4);
  EXPECT_EQ(t.network().nics_per_node, 0);
  EXPECT_EQ(t.network().transport, Transport::infiniband);
  EXPECT_FALSE(t.network().sharp);
}

TEST(TopologyCollectivesSection, EveryKeyIsRead) {
  const Topology t = Topology::parse(with_network({{16,
                                                    "  nic_latency: 1 us\n  nics_per_node: 2\n  transport: roce\n"
                                                    "  sharp: true"}},
                                                  {"nodes: 2",
                                                   "collectives:",
                                                   "  model: nccl",
                                                   "  channels: 8",
                                                   "  fabric_efficiency: 0.7",
                                                   "  ring_loop_gap: 0.25",
                                                   "  p2p_channel_network_bandwidth: 8 GB/s",
                                                   "  network_efficiency: 0.85",
                                                   "  alltoall_efficiency: 0.5",
                                                   "  alltoall_network_efficiency: 0.65",
                                                   "  channel_network_bandwidth: 20 GB/s",
                                                   "  nvls: true",
                                                   "  nvls_efficiency: 0.4",
                                                   "  nvls_tree_efficiency: 0.35",
                                                   "  nvls_tree_network_efficiency: 0.75",
                                                   "  ll_max_bandwidth: 100 GB/s",
                                                   "  intra_latency: 2 us",
                                                   "  inter_latency: 9 us",
                                                   "  peer_latency: 5 us",
                                                   "  sharp_latency: 11 us",
                                                   "  call_overhead: 20 us",
                                                   "  simple_latency: 12 us",
                                                   "  buffer_size: 8 MiB",
                                                   "  nvls_chunk_size: 512 KiB",
                                                   "  nvls_tree_max_chunk_size: 256 KiB",
                                                   "  p2p_chunk_size: 512 KiB",
                                                   "  ll_net_overhead: 700 ns",
                                                   "  message_latency: 2 us"}),
                                     "ok.yaml");
  const CollectiveTiming& c = t.collectives();
  EXPECT_EQ(c.model, CollectiveTimingModel::nccl);
  EXPECT_EQ(c.channels, 8);
  EXPECT_EQ(c.fabric_efficiency, 0.7);
  EXPECT_EQ(c.ring_loop_gap, 0.25);
  EXPECT_DOUBLE_EQ(c.p2p_channel_network_bandwidth, 8e9);
  EXPECT_EQ(c.network_efficiency, 0.85);
  EXPECT_EQ(c.alltoall_efficiency, 0.5);
  EXPECT_EQ(c.alltoall_network_efficiency, 0.65);
  EXPECT_EQ(c.alltoall_network_share(), 0.65);
  EXPECT_DOUBLE_EQ(c.channel_network_bandwidth, 20e9);
  EXPECT_EQ(c.nvls_tree_efficiency, 0.35);
  EXPECT_EQ(c.nvls_tree_share(), 0.35);
  EXPECT_EQ(c.nvls_tree_network_efficiency, 0.75);
  EXPECT_TRUE(c.nvls);
  EXPECT_EQ(c.nvls_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(c.ll_max_bandwidth[0], 100e9);
  EXPECT_DOUBLE_EQ(c.ll_max_bandwidth[2], 100e9);
  EXPECT_EQ(c.intra_latency, Time::us(2));
  EXPECT_EQ(c.inter_latency, Time::us(9));
  EXPECT_EQ(c.peer_latency, Time::us(5));
  EXPECT_DOUBLE_EQ(peer_cost(c), 5e-6);
  EXPECT_EQ(c.sharp_latency, Time::us(11));
  EXPECT_EQ(c.call_overhead, Time::us(20));
  EXPECT_EQ(c.simple_latency, Time::us(12));
  EXPECT_EQ(c.buffer_size, 8u << 20);
  EXPECT_EQ(c.nvls_chunk_size, 512u << 10);
  EXPECT_EQ(c.nvls_tree_max_chunk_size, 256u << 10);
  EXPECT_EQ(c.p2p_chunk_size, 512u << 10);
  EXPECT_EQ(c.ll_net_overhead, Time::ns(700));
  EXPECT_EQ(c.message_latency, Time::us(2));
  EXPECT_EQ(t.nics_per_node(), 2);
  EXPECT_EQ(t.network().transport, Transport::roce);
  EXPECT_TRUE(t.network().sharp);
  const Topology efa =
      Topology::parse(with_network({{16, "  nic_latency: 1 us\n  transport: efa"}}, {"nodes: 2"}), "efa.yaml");
  EXPECT_EQ(efa.network().transport, Transport::efa);
}

// Unset, the buffers are NCCL's defaults: NCCL_BUFFSIZE 4 MiB, NCCL_NVLS_CHUNKSIZE 128 KiB, and
// no NVLS-tree cap of its own (0: NCCL's rule).
TEST(TopologyCollectivesSection, BuffersDefaultToNcclsOwn) {
  const Topology t = Topology::parse(base({}, {"collectives:", "  model: nccl"}), "ok.yaml");
  EXPECT_EQ(t.collectives().buffer_size, 4u << 20);
  EXPECT_EQ(t.collectives().nvls_chunk_size, 128u << 10);
  EXPECT_EQ(t.collectives().nvls_tree_max_chunk_size, 0u);
  EXPECT_EQ(t.collectives().p2p_chunk_size, 128u << 10);
  EXPECT_EQ(t.collectives().message_latency, Time::zero());
  const Topology set =
      Topology::parse(base({}, {"collectives:", "  model: nccl"}), "ok.yaml", {"collectives.buffer_size=16MiB"});
  EXPECT_EQ(set.collectives().buffer_size, 16u << 20);
}

// NCCL_MIN_CTAS / NCCL_MAX_CTAS: the channel count clamped to them, whichever way it is set.
TEST(TopologyCollectivesSection, MinAndMaxChannelsClampTheCount) {
  auto channels = [](const std::vector<std::string>& lines, const std::vector<std::string>& sets = {}) {
    std::vector<std::string> c{"collectives:", "  model: nccl"};
    c.insert(c.end(), lines.begin(), lines.end());
    return Topology::parse(base({}, c), "ok.yaml", sets).collectives().channels;
  };
  EXPECT_EQ(channels({}), 16);
  EXPECT_EQ(channels({"  min_channels: 24"}), 24);
  EXPECT_EQ(channels({"  min_channels: 8"}), 16);  // already above the minimum
  EXPECT_EQ(channels({"  max_channels: 8"}), 8);
  EXPECT_EQ(channels({"  channels: 4", "  min_channels: 6", "  max_channels: 32"}), 6);
  EXPECT_EQ(channels({"  channels: 4"}, {"collectives.max_channels=2"}), 2);
}

TEST(TopologyCollectivesSection, AnOverrideSetsTheModel) {
  const Topology t = Topology::parse(base({}, {"collectives:", "  model: schedule"}), "ok.yaml",
                                     {"collectives.model=nccl", "collectives.channels=4"});
  EXPECT_EQ(t.collectives().model, CollectiveTimingModel::nccl);
  EXPECT_EQ(t.collectives().channels, 4);
}

// ll_max_bandwidth: one value for every node count, or three (1, 2, more nodes); a list of
// another length is an error at the list.
TEST(TopologyCollectivesSection, LlCapsPerNodeCount) {
  const Topology t = Topology::parse(
      base({}, {"collectives:", "  model: nccl", "  ll_max_bandwidth: [87.7 GB/s, 22.5 GB/s, 19 GB/s]"}), "ll.yaml");
  EXPECT_DOUBLE_EQ(t.collectives().ll_max_bandwidth[0], 87.7e9);
  EXPECT_DOUBLE_EQ(t.collectives().ll_max_bandwidth[1], 22.5e9);
  EXPECT_DOUBLE_EQ(t.collectives().ll_max_bandwidth[2], 19e9);
  try {
    (void)Topology::parse(base({}, {"collectives:", "  ll_max_bandwidth: [1 GB/s, 2 GB/s]"}), "ll2.yaml");
    FAIL() << "a list of two was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("must be one bandwidth or a list of three"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("ll2.yaml:"));
  }
}

// The trees' per-channel caps read the same way: Simple's and LL128's, each one value or three;
// a value that is not a bandwidth is refused at its position in the list.
TEST(TopologyCollectivesSection, TreeChannelCapsPerNodeCount) {
  const Topology t = Topology::parse(
      base({}, {"collectives:", "  model: nccl", "  tree_channel_bandwidth: [24 GB/s, 23.6 GB/s, 17.8 GB/s]",
                "  tree_ll128_channel_bandwidth: 20 GB/s"}),
      "tree.yaml");
  EXPECT_DOUBLE_EQ(t.collectives().tree_channel_bandwidth[0], 24e9);
  EXPECT_DOUBLE_EQ(t.collectives().tree_channel_bandwidth[1], 23.6e9);
  EXPECT_DOUBLE_EQ(t.collectives().tree_channel_bandwidth[2], 17.8e9);
  for (const double b : t.collectives().tree_ll128_channel_bandwidth) EXPECT_DOUBLE_EQ(b, 20e9);
  // Unset, NCCL's Hopper rows.
  const Topology hopper = Topology::parse(base({}, {"collectives:", "  model: nccl"}), "hopper.yaml");
  EXPECT_DOUBLE_EQ(hopper.collectives().tree_channel_bandwidth[1], 41.4e9);
  EXPECT_DOUBLE_EQ(hopper.collectives().tree_ll128_channel_bandwidth[2], 29e9);
  try {
    (void)Topology::parse(base({}, {"collectives:", "  tree_channel_bandwidth: [24 GB/s, fast, 17.8 GB/s]"}),
                          "tree2.yaml");
    FAIL() << "a list holding 'fast' was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("tree_channel_bandwidth[1]"));
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("tree2.yaml:"));
  }
  try {
    (void)Topology::parse(base({}, {"collectives:", "  tree_ll128_channel_bandwidth: [20 GB/s]"}), "tree1.yaml");
    FAIL() << "a list of one was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("'collectives.tree_ll128_channel_bandwidth' must be one "
                                                            "bandwidth or a list of three"));
  }
}

// A mesh's links grow as the square of its devices: the device limit is checked before any is
// made, so a 65,536-device mesh is refused at once (it used to run out of memory after 20 s).
TEST(TopologyFabricLimits, AHugeMeshIsRefusedBeforeItsLinksAreBuilt) {
  try {
    (void)Topology::parse(base({}), "mesh.yaml",
                          {"node.devices=65536", "node.fabric={type: mesh, bandwidth: 50 GB/s, latency: 1 us}"});
    FAIL() << "a 65,536-device mesh was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("explicit-link fabrics support at most 1024 devices"));
  }
}

}  // namespace
}  // namespace ranksim::sim

// Malformed inputs through the command line, in process (issue #20): topology YAML, scenario YAML
// with its --set overrides, safetensors weights and batches, nccl-tests tables for `calibrate` and
// JSON summaries for `compare`. Each case writes its files into a scratch folder of its own, runs
// one command and requires exit 2, a message that names the file (with line:column for YAML,
// :LINE: for nccl-tests tables where the error is on one line, the field for a summary) and says
// what is wrong, and no output file where one was asked for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "app/cli.h"
#include "app/cli_run.h"

namespace ranksim::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = testing::CliResult;

// ---- the valid inputs every case starts from ----------------------------------------------------

// t.yaml: one node of 4 devices. Lines are numbered for the positions the cases expect.
const char* const kTopology =
    "name: t\n"                                               // 1
    "device_kinds:\n"                                         // 2
    "  gpu:\n"                                                // 3
    "    peak_flops: {bf16: 100 TFLOP/s, f32: 50 TFLOP/s}\n"  // 4
    "    memory_bandwidth: 1 TB/s\n"                          // 5
    "    memory: 16 GiB\n"                                    // 6
    "node:\n"                                                 // 7
    "  devices: 4\n"                                          // 8
    "  kind: gpu\n"                                           // 9
    "  fabric:\n"                                             // 10
    "    type: switch\n"                                      // 11
    "    bandwidth: 100 GB/s\n"                               // 12
    "    latency: 1 us\n";                                    // 13

// s.yaml: a step scenario on t.yaml.
const char* const kScenario =
    "name: s\n"                                                    // 1
    "topology: t.yaml\n"                                           // 2
    "parallel: {tp: 2}\n"                                          // 3
    "workload:\n"                                                  // 4
    "  steps:\n"                                                   // 5
    "    repeat: 2\n"                                              // 6
    "    do:\n"                                                    // 7
    "      - compute: {gemm: [64, 64, 64], dtype: f32}\n"          // 8
    "      - all_reduce: {bytes: 1 MiB, dtype: f32, group: tp}\n"  // 9
    "checks:\n"                                                    // 10
    "  - max_time: 1 s\n";                                         // 11

// m.yaml: the reference transformer, tiny, loading w.safetensors (line 14) and b.safetensors
// (line 15).
std::string model_scenario(const std::string& format = "bshd", const std::string& mask = "causal") {
  return "name: m\n"                   // 1
         "topology: t.yaml\n"          // 2
         "parallel: {tp: 1, cp: 1}\n"  // 3
         "model:\n"                    // 4
         "  kind: transformer\n"       // 5
         "  dtype: fp32\n"             // 6
         "  format: " +
         format +
         "\n"  // 7
         "  mask: " +
         mask +
         "\n"                          // 8
         "  vocab: 16\n"               // 9
         "  hidden: 8\n"               // 10
         "  heads: 2\n"                // 11
         "  ffn: 16\n"                 // 12
         "  layers: 1\n"               // 13
         "  weights: w.safetensors\n"  // 14
         "batch: b.safetensors\n"      // 15
         "train: {steps: 1}\n";        // 16
}

// good.csv and good.txt: an all_reduce on the 8 devices of t8.yaml (t.yaml with 8 devices).
const char* const kCsv =
    "# op: all_reduce\n"                          // 1
    "# ranks: 8\n"                                // 2
    "# nodes: 1\n"                                // 3
    "size_bytes,time_us,algbw_GBps,busbw_GBps\n"  // 4
    "1024,30.5,0.03,0.06\n"                       // 5
    "1048576,60.2,17.42,30.48\n";                 // 6

std::string text_table(const std::string& binary = "all_reduce_perf", int ranks = 8) {
  std::string t =
      "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902\n"  // 1
      "# Collective test starting: " +
      binary + "\n";               // 2
  for (int r = 0; r < ranks; ++r)  // 3 .. 2 + ranks
    t += "#  Rank  " + std::to_string(r) + " Group  0 Pid " + std::to_string(1000 + r) + " on node" +
         std::to_string(1 + r / 8) + " device  " + std::to_string(r % 8) + " [0000:1b:00] NVIDIA H100 80GB HBM3\n";
  return t +
         "#\n"
         "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
         "busbw  #wrong\n"
         "        1024           256     float     sum      -1    30.50    0.03    0.06       0    30.40    0.03    "
         "0.06       0\n"  // 13 with 8 ranks
         "     1048576        262144     float     sum      -1    60.20   17.42   30.48       0    60.10   17.45   "
         "30.53       0\n"  // 14
         "# Avg bus bandwidth    : 15.27\n";
}

// good.json: the run of good.txt as nccl-tests -J writes it (src/util.cu), cut to what calibrate
// reads.
const char* const kNcclJson = R"({
  "version": 3,
  "args": ["/opt/nccl-tests/build/all_reduce_perf", "-b", "1K", "-e", "1M", "-J", "good.json"],
  "env": ["PATH=/usr/bin", "NCCL_ALGO=Ring"],
  "nccl_version": 22902,
  "config": {"nthreads": 1, "ngpus": 1, "devices": [
    {"rank": 0, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 1, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 2, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 3, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 4, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 5, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 6, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"},
    {"rank": 7, "hostname": "node1", "device_info": "NVIDIA H100 80GB HBM3"}]},
  "results": [
    {"size": 1024, "out_of_place": {"time": 30.5, "alg_bw": 0.03, "bus_bw": 0.06, "nwrong": 0}},
    {"size": 1048576, "out_of_place": {"time": 60.2, "alg_bw": 17.42, "bus_bw": 30.48, "nwrong": 0}}
  ]
})";

// p.json: a run summary as `ranksim run --json` writes it, cut to what `compare` reads.
const char* const kSummary = R"({
  "scenario": "s",
  "backend": "sim",
  "topology": "t",
  "ranks": 2,
  "layout": {"tp": 2, "cp": 1, "dp": 1, "pp": 1},
  "virtual_time_us": 25.0,
  "ranks_detail": [
    {"rank": 0, "clock_us": 25.0, "compute_us": 1.0, "comm_us": 24.0},
    {"rank": 1, "clock_us": 25.0, "compute_us": 1.0, "comm_us": 24.0}
  ],
  "collectives": [
    {"op": "all_reduce", "group_size": 2, "dtype": "f32", "bytes": 1048576, "algorithm": "ring", "calls": 4, "time_us": 12.5, "group": "tp"}
  ]
}
)";

// `text` with the first `from` replaced by `to`. An edit that does not apply gives a text no
// case expects, so the case fails and shows it.
std::string edit(const std::string& text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  if (at == std::string::npos) return "EDIT NOT APPLIED: '" + from + "'";
  std::string out = text;
  out.replace(at, from.size(), to);
  return out;
}

// ---- safetensors bytes --------------------------------------------------------------------------

struct StTensor {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string data;
};

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file with this header text (its length first) and these data bytes.
std::string raw_safetensors(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

std::string safetensors(const std::vector<StTensor>& tensors) {
  std::string header = "{";
  std::string data;
  for (const StTensor& t : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header +=
        "],\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + t.data.size()) + "]}";
    data += t.data;
  }
  return raw_safetensors(header + "}", data);
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}
std::string f32s(std::size_t n, float v) { return bytes_of(std::vector<float>(n, v)); }
std::string i64s(const std::vector<std::int64_t>& v) { return bytes_of(v); }
std::string i32s(const std::vector<std::int32_t>& v) { return bytes_of(v); }

std::size_t numel(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (const std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

// The parameters of m.yaml's model (vocab 16, hidden 8, heads 2, ffn 16, one layer).
const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& model_parameters() {
  static const std::vector<std::pair<std::string, std::vector<std::int64_t>>> p = {
      {"embedding.weight", {16, 8}}, {"layer.ln1.weight", {8}}, {"layer.ln1.bias", {8}},
      {"layer.qkv.weight", {24, 8}}, {"layer.qkv.bias", {24}},  {"layer.proj.weight", {8, 8}},
      {"layer.proj.bias", {8}},      {"layer.ln2.weight", {8}}, {"layer.ln2.bias", {8}},
      {"layer.fc1.weight", {16, 8}}, {"layer.fc1.bias", {16}},  {"layer.fc2.weight", {8, 16}},
      {"layer.fc2.bias", {8}},       {"final_ln.weight", {8}},  {"final_ln.bias", {8}},
      {"output.weight", {16, 8}},    {"output.bias", {16}}};
  return p;
}

// A checkpoint of m.yaml's model: every parameter 0.01, AdamW's moments 0, step 1; `change`
// edits it first.
template <typename Change>
std::string checkpoint(Change change) {
  std::vector<StTensor> t;
  for (const auto& [name, shape] : model_parameters()) t.push_back({name, "F32", shape, f32s(numel(shape), 0.01f)});
  for (const char* moment : {"optimizer.exp_avg.", "optimizer.exp_avg_sq."})
    for (const auto& [name, shape] : model_parameters())
      t.push_back({moment + name, "F32", shape, f32s(numel(shape), 0.0f)});
  t.push_back({"optimizer.step", "F32", {}, f32s(1, 1.0f)});
  change(t);
  return safetensors(t);
}
std::string checkpoint() {
  return checkpoint([](std::vector<StTensor>&) {});
}

StTensor* find(std::vector<StTensor>& t, const std::string& name) {
  for (StTensor& x : t)
    if (x.name == name) return &x;
  return nullptr;
}
// Element `i` of the f32 tensor `name` set to v.
auto set_f32(const std::string& name, std::size_t i, float v) {
  return [=](std::vector<StTensor>& t) {
    if (StTensor* x = find(t, name); x != nullptr && (i + 1) * 4 <= x->data.size())
      std::memcpy(x->data.data() + 4 * i, &v, 4);
  };
}
auto drop(const std::string& name) {
  return [=](std::vector<StTensor>& t) { std::erase_if(t, [&](const StTensor& x) { return x.name == name; }); };
}

const std::string kIds = i64s({1, 2, 3, 4});
const std::string kLabels = i64s({2, 3, 4, 5});

// b.safetensors: one row of four tokens (bshd).
std::string bshd_batch() {
  return safetensors({{"input_ids", "I64", {1, 4}, kIds}, {"labels", "I64", {1, 4}, kLabels}});
}
// One sequence of four tokens (thd) with these cu_seqlens.
std::string thd_batch(const StTensor& cu_seqlens) {
  return safetensors({{"input_ids", "I64", {4}, kIds}, {"labels", "I64", {4}, kLabels}, cu_seqlens});
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// ---- the cases ----------------------------------------------------------------------------------

struct File {
  std::string name;   // in the scratch folder; a name ending in '/' is a folder
  std::string bytes;  // the content
};

struct Case {
  std::string name;
  std::vector<File> files;        // written over the valid inputs of the same name
  std::vector<std::string> args;  // "{d}" stands for the scratch folder
  std::string where;              // in the message: the file, and line:column where it has them
  std::vector<std::string> says;  // also in the message: what is wrong
  std::string output;             // a file the command was asked to write, which must not appear
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// `topo t.yaml` on a topology text.
Case topology(const std::string& name, const std::string& yaml, const std::string& where, std::vector<std::string> says,
              std::vector<std::string> args = {"topo", "{d}/t.yaml"}, const std::string& output = "") {
  return {"Topology_" + name, {{"t.yaml", yaml}}, std::move(args), where, std::move(says), output};
}

// `run s.yaml --json out.json EXTRA...` on a scenario text.
Case scenario(const std::string& name, const std::string& yaml, const std::string& where, std::vector<std::string> says,
              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"run", "{d}/s.yaml", "--json", "{d}/out.json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return {"Scenario_" + name, {{"s.yaml", yaml}}, args, where, std::move(says), "out.json"};
}
// A --set override on the valid scenario: the error is at 1:COLUMN of the override.
Case override_case(const std::string& name, const std::string& set, int column, std::vector<std::string> says) {
  return scenario("Set_" + name, kScenario, "override '" + set + "':1:" + std::to_string(column) + ": ",
                  std::move(says), {"--set", set});
}

// `run m.yaml --json out.json` with these weights (m.yaml:14:12) or this batch (m.yaml:15:8).
Case weights(const std::string& name, const std::string& bytes, std::vector<std::string> says) {
  says.insert(says.begin(), "{d}/w.safetensors");
  return {"Safetensors_Weights" + name,
          {{"w.safetensors", bytes}},
          {"run", "{d}/m.yaml", "--json", "{d}/out.json"},
          "{d}/m.yaml:14:12: ",
          std::move(says),
          "out.json"};
}
Case batch(const std::string& name, const std::string& bytes, std::vector<std::string> says,
           const std::string& model = model_scenario()) {
  says.insert(says.begin(), "{d}/b.safetensors");
  return {"Safetensors_Batch" + name,
          {{"b.safetensors", bytes}, {"m.yaml", model}},
          {"run", "{d}/m.yaml", "--json", "{d}/out.json"},
          "{d}/m.yaml:15:8: ",
          std::move(says),
          "out.json"};
}
// A batch file whose header is broken: the reader's own message.
Case header(const std::string& name, const std::string& bytes, const std::string& says) {
  return batch("Header" + name, bytes, {"safetensors file '{d}/b.safetensors': ", says});
}

// `calibrate -t t8.yaml -o out.yaml FLAGS... FILE` on a table; line 0: the error is about the
// whole file.
Case table(const std::string& name, const std::string& file, const std::string& text, int line,
           std::vector<std::string> says, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args = {"calibrate", "-t", "{d}/t8.yaml", "-o", "{d}/out.yaml"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("{d}/" + file);
  return {
      "NcclTests_" + name, {{file, text}}, args, "{d}/" + file + (line > 0 ? ":" + std::to_string(line) : "") + ": ",
      std::move(says),     "out.yaml"};
}
Case csv(const std::string& name, const std::string& text, int line, std::vector<std::string> says,
         const std::vector<std::string>& flags = {}) {
  return table(name, "x.csv", text, line, std::move(says), flags);
}
Case nccl_json(const std::string& name, const std::string& text, std::vector<std::string> says,
               const std::vector<std::string>& flags = {}) {
  return table(name, "x.json", text, 0, std::move(says), flags);
}
Case txt(const std::string& name, const std::string& text, int line, std::vector<std::string> says,
         const std::vector<std::string>& flags = {}) {
  return table(name, "x.txt", text, line, std::move(says), flags);
}

// `compare p.json m.json` with m.json this text.
Case summary(const std::string& name, const std::string& json, std::vector<std::string> says) {
  return {"Summary_" + name,       {{"m.json", json}}, {"compare", "{d}/p.json", "{d}/m.json"},
          "compare: '{d}/m.json'", std::move(says),    ""};
}
std::string summary_with(const std::string& from, const std::string& to) { return edit(kSummary, from, to); }

std::string binary_garbage() {
  return std::string(
      "\x7f"
      "ELF\x02\x01\x01\x00\x00\x00\x00\x00\xff\xfe\x00\x01\x9c\x80",
      19);
}

// Ten lists of ten aliases of the previous list: 10^9 leaves in a few hundred bytes.
std::string billion_laughs() {
  std::string laughs = "[&a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]";
  for (char x = 'b'; x <= 'i'; ++x) {
    laughs += std::string(", &") + x + " [";
    for (int i = 0; i < 10; ++i) laughs += std::string(i ? ", *" : "*") + static_cast<char>(x - 1);
    laughs += "]";
  }
  return laughs + "]";
}

std::vector<Case> topology_cases() {
  const std::string t = kTopology;
  return {
      // yaml-cpp's own limit said "bad file" at the end of the line.
      topology("NestedTenThousandDeep", "name: " + std::string(10000, '[') + "\n",
               "{d}/t.yaml:1:", {"nested more than 256 deep"}),
      // YAML::Load read the first document and dropped the rest without a word.
      topology("TwoDocuments", t + "---\n" + t, "{d}/t.yaml:14:1: ", {"a second YAML document starts here"}),
      // yaml-cpp reads an unterminated quote to the end of the file as one value
      topology("UnterminatedQuote", edit(t, "name: t", "name: \"t"),
               "{d}/t.yaml:1:7: ", {"the quote that opens this value is never closed", "add the closing \""}),
      // 1e300 TFLOP/s is finite; scaled by its unit it overflows a double.
      topology("FlopRateOverflowingToInfinity", edit(t, "bf16: 100 TFLOP/s", "bf16: 1e300 TFLOP/s"),
               "{d}/t.yaml:4:24: ", {"'device_kinds.gpu.peak_flops.bf16'", "is too large"}),
      topology("BandwidthOverflowingToInfinity", edit(t, "bandwidth: 100 GB/s", "bandwidth: 1e300 TB/s"),
               "{d}/t.yaml:12:16: ", {"'node.fabric.bandwidth'", "is too large"}),
      // Refused before any link is made (it used to take 25 s and 12.8 GB, then run out of memory).
      topology("MeshOf65536Devices", edit(edit(t, "devices: 4", "devices: 65536"), "type: switch", "type: mesh"),
               "{d}/t.yaml:11:11: ", {"at most 1024 devices per node"}),
      topology("OnlyWhitespaceAndAComment", "   \n# nothing here\n", "{d}/t.yaml:1:1: ", {"the topology is empty"}),
      topology("BinaryGarbage", binary_garbage(), "{d}/t.yaml:1:10: ", {"malformed YAML: unknown escape character"}),
      topology("AScalarDocument", "hello\n",
               "{d}/t.yaml:1:1: ", {"the topology must be a mapping with the keys name", "got 'hello'"}),
      topology("TruncatedInsideAFlowMapping", t.substr(0, t.find("100 TFLOP/s") + 5),
               "{d}/t.yaml:", {"malformed YAML", "end of map flow not found"}),
      topology("TruncatedAfterTheDeviceCount", t.substr(0, t.find("  kind: gpu")),
               "{d}/t.yaml:8:3: ", {"'node' is missing the key 'kind'"}),
      topology("NegativeDevices", edit(t, "devices: 4", "devices: -4"),
               "{d}/t.yaml:8:12: ", {"'node.devices' must be between 1 and 65536", "got -4"}),
      topology("DevicesInExponentNotation", edit(t, "devices: 4", "devices: 1e9"),
               "{d}/t.yaml:8:12: ", {"'node.devices' must be a whole number", "got '1e9'"}),
      topology("DevicesNaN", edit(t, "devices: 4", "devices: .nan"),
               "{d}/t.yaml:8:12: ", {"'node.devices' must be a whole number", "got '.nan'"}),
      topology("DevicesAList", edit(t, "devices: 4", "devices: [4]"),
               "{d}/t.yaml:8:12: ", {"'node.devices' must be a whole number", "got a list"}),
      topology("DevicesAHundredMillion", edit(t, "devices: 4", "devices: 100000000"),
               "{d}/t.yaml:8:12: ", {"must be between 1 and 65536", "got 100000000"}),
      topology("BandwidthInfinite", edit(t, "bandwidth: 100 GB/s", "bandwidth: .inf GB/s"),
               "{d}/t.yaml:12:16: ", {"'node.fabric.bandwidth'", "'.inf GB/s' is not a bandwidth"}),
      topology("BandwidthNaN", edit(t, "bandwidth: 100 GB/s", "bandwidth: nan GB/s"),
               "{d}/t.yaml:12:16: ", {"'nan GB/s' is not a finite number"}),
      topology("BandwidthBeyondADouble", edit(t, "bandwidth: 100 GB/s", "bandwidth: 1e400 GB/s"),
               "{d}/t.yaml:12:16: ", {"'1e400 GB/s' is not a bandwidth"}),
      topology("LatencyNaN", edit(t, "latency: 1 us", "latency: nan us"),
               "{d}/t.yaml:13:14: ", {"'node.fabric.latency'", "'nan us' is not a finite number"}),
      topology("LatencyOfAGeologicalAge", edit(t, "latency: 1 us", "latency: 1e300 s"),
               "{d}/t.yaml:13:14: ", {"duration '1e300 s' is too long"}),
      topology("NegativeMemory", edit(t, "memory: 16 GiB", "memory: -16 GiB"),
               "{d}/t.yaml:6:13: ", {"'device_kinds.gpu.memory'", "size must be positive"}),
      topology("MemoryBeyond64Bits", edit(t, "memory: 16 GiB", "memory: 1e30 GiB"),
               "{d}/t.yaml:6:13: ", {"size '1e30 GiB' does not fit in 64 bits"}),
      topology("MemoryUnitTwice", edit(t, "memory: 16 GiB", "memory: 16 GiB GiB"),
               "{d}/t.yaml:6:13: ", {"unknown size unit 'GiB GiB'"}),
      topology("MemoryBandwidthBelowAUnitSlip", edit(t, "memory_bandwidth: 1 TB/s", "memory_bandwidth: 1e-300 TB/s"),
               "{d}/t.yaml:5:23: ", {"'device_kinds.gpu.memory_bandwidth' must be at least 1 kB/s"}),
      topology("FlopRateNotANumber", edit(t, "bf16: 100 TFLOP/s", "bf16: abc"),
               "{d}/t.yaml:4:24: ", {"'device_kinds.gpu.peak_flops.bf16'", "'abc' is not a FLOP rate"}),
      topology("NameAList", edit(t, "name: t", "name: [a, b]"),
               "{d}/t.yaml:1:7: ", {"'name' must be a name, got a list"}),
      topology("KindAList", edit(t, "kind: gpu", "kind: [gpu]"),
               "{d}/t.yaml:9:9: ", {"'node.kind' must be a name, got a list"}),
      topology("DeviceKindNullWithChildren", edit(t, "  gpu:", "  gpu: ~"),
               "{d}/t.yaml:4:15: ", {"malformed YAML: illegal map value"}),
      topology("NameGivenTwice", t + "name: u\n",
               "{d}/t.yaml:14:1: ", {"duplicate key 'name' in the topology (first given on line 1)"}),
      topology("UndefinedAlias", edit(t, "kind: gpu", "kind: *nope"),
               "{d}/t.yaml:9:9: ", {"the referenced anchor is not defined"}),
      topology("AnchoredSectionReusedUnderAnUnknownKey", edit(t, "  fabric:", "  fabric: &f") + "extra: *f\n",
               "{d}/t.yaml:14:1: ", {"unknown key 'extra' in the topology"}),
      topology("AListAsAKey", "? [a, b]\n: c\n" + t, "{d}/t.yaml:1:3: ", {"keys in the topology must be plain names"}),
      topology("LinkWithOneEnd", edit(t, "    type: switch\n", "    type: links\n    links:\n      - {between: [0]}\n"),
               "{d}/t.yaml:13:19: ", {"must be a list of two local device indices such as [0, 1], got a list"}),
      topology("LinkEndsAsText", edit(t, "    type: switch\n", "    type: links\n    links:\n      - {between: 0-1}\n"),
               "{d}/t.yaml:13:19: ", {"'node.fabric.links[0].between' must be a list of two", "got '0-1'"}),
      topology("NodesNotANumber", t + "nodes: many\n", "{d}/t.yaml:14:8: ", {"'nodes' must be a whole number"}),
      topology("NodesNegative", t + "nodes: -1\n", "{d}/t.yaml:14:8: ", {"'nodes' must be between 1 and"}),
      topology("MissingFile", t, "{d}/missing.yaml", {"cannot read topology YAML file"}, {"topo", "{d}/missing.yaml"}),
      // Overrides name themselves and the column in them.
      topology("OverrideDevicesNotANumber", t, "override 'node.devices=abc':1:14: ", {"must be a whole number"},
               {"topo", "{d}/t.yaml", "--set", "node.devices=abc"}),
      topology("OverrideUnknownFabricType", t, "override 'node.fabric.type=torus':1:18: ", {"'torus'"},
               {"topo", "{d}/t.yaml", "--set", "node.fabric.type=torus"}),
      topology("OverrideReplacesTheNodeWithoutItsKind", t, "override 'node={devices: 4}':1:6: ",
               {"'node' is missing the key 'kind'"}, {"topo", "{d}/t.yaml", "--set", "node={devices: 4}"}),
      topology("OverrideUnclosedFlow", t, "override 'node.fabric={type: switch':1:", {"malformed value"},
               {"topo", "{d}/t.yaml", "--set", "node.fabric={type: switch"}),
      // Every command that reads a topology says the same, and writes nothing.
      topology("ThroughAScenario", edit(t, "devices: 4", "devices: 0"),
               "{d}/t.yaml:8:12: ", {"'node.devices' must be between 1 and 65536"},
               {"run", "{d}/s.yaml", "--json", "{d}/out.json"}, "out.json"),
      topology("ThroughDemoWithATrace", edit(t, "latency: 1 us", "latency: nan us"), "{d}/t.yaml:13:14: ",
               {"not a finite number"}, {"demo", "-t", "{d}/t.yaml", "--trace", "{d}/trace.json"}, "trace.json"),
      topology("ThroughBench", edit(t, "bandwidth: 100 GB/s", "bandwidth: 100"),
               "{d}/t.yaml:12:16: ", {"'100' has no unit"}, {"bench", "collectives", "-t", "{d}/t.yaml"}),
      topology("ThroughCalibrate", edit(t, "memory: 16 GiB", "memory: 16 GiB/s"),
               "{d}/t.yaml:6:13: ", {"is a bandwidth, not a size"},
               {"calibrate", "-t", "{d}/t.yaml", "-o", "{d}/out.yaml", "{d}/good.csv"}, "out.yaml"),
      topology("AFolderToCalibrate", t, "'{d}' is a folder", {"name a file"},
               {"calibrate", "-t", "{d}", "-o", "{d}/out.yaml", "{d}/good.csv"}, "out.yaml"),
  };
}

std::vector<Case> scenario_cases() {
  const std::string s = kScenario;
  const std::string head = "name: s\ntopology: t.yaml\n";
  return {
      // Walked with its aliases expanded it took 24 GB before being killed: refused at 10,000 nodes.
      override_case("BillionLaughs", "description=" + billion_laughs(), 191,
                    {"aliases expand this value by more than 10000 nodes"}),
      scenario("NestedTenThousandDeep",
               edit(s, "name: s", "name: " + std::string(10000, '[') + std::string(10000, ']')),
               "{d}/s.yaml:1:", {"nested more than 256 deep"}),
      // A list inside a step is indexed (it used to become the mapping {0: 64, 1: -5, 2: 64}).
      override_case("GemmElement", "workload.steps.do.0.compute.gemm.1=-5", 36, {"gemm n must be an integer"}),
      scenario("Empty", "", "{d}/s.yaml:1:1: ", {"the scenario is empty"}),
      scenario("NameGivenTwice", s + "name: t\n",
               "{d}/s.yaml:12:1: ", {"duplicate key 'name'", "first given on line 1"}),
      scenario("TpGivenTwice", edit(s, "{tp: 2}", "{tp: 2, tp: 4}"), "{d}/s.yaml:3:19: ", {"duplicate key 'tp'"}),
      scenario("RanksMoreThanTheDevices", s + "ranks: 8\n", "{d}/s.yaml:12:8: ", {"topology 't' has 4"}),
      // The sweep's rule for steps: a buffer larger than a device (it used to run 5.6e6 virtual s).
      scenario("StepBytesBeyondTheDevicesMemory", edit(s, "bytes: 1 MiB", "bytes: 1000 PiB"),
               "{d}/s.yaml:9:29: ", {"more than the 16 GiB of device memory"}),
      // At the step's key, not at the next line (yaml-cpp's mark of a null).
      scenario("StepWithoutABody",
               edit(s, "      - all_reduce: {bytes: 1 MiB, dtype: f32, group: tp}", "      - all_reduce:"),
               "{d}/s.yaml:9:9: ", {"all_reduce step needs its settings"}),
      scenario("BinaryGarbage", binary_garbage(), "{d}/s.yaml:1:10: ", {"malformed YAML: unknown escape character"}),
      scenario("AList", "- name: s\n- topology: t.yaml\n", "{d}/s.yaml:1:1: ", {"a scenario file must be a mapping"}),
      scenario("TruncatedInsideAFlowSequence", s.substr(0, s.find("64, 64]")),
               "{d}/s.yaml:", {"malformed YAML", "end of sequence flow not found"}),
      scenario("RepeatZero", edit(s, "repeat: 2", "repeat: 0"),
               "{d}/s.yaml:6:13: ", {"steps.repeat must be an integer from 1 to 16777216 (2^24), got '0'"}),
      scenario("RepeatTwoBillion", edit(s, "repeat: 2", "repeat: 2000000000"),
               "{d}/s.yaml:6:13: ", {"from 1 to 16777216 (2^24), got '2000000000'"}),
      scenario("RepeatJustAboveTheLimit", edit(s, "repeat: 2", "repeat: 16777217"),
               "{d}/s.yaml:6:13: ", {"got '16777217'"}),
      scenario("RepeatNaN", edit(s, "repeat: 2", "repeat: .nan"), "{d}/s.yaml:6:13: ", {"got '.nan'"}),
      scenario("TpNegative", edit(s, "tp: 2", "tp: -2"),
               "{d}/s.yaml:3:16: ", {"parallel.tp must be an integer from 1 to 16777216 (2^24), got '-2'"}),
      scenario("TpFractional", edit(s, "tp: 2", "tp: 2.5"), "{d}/s.yaml:3:16: ", {"got '2.5'"}),
      scenario("TpAGoogol", edit(s, "tp: 2", "tp: 1e100"), "{d}/s.yaml:3:16: ", {"got '1e100'"}),
      scenario("BytesNegative", edit(s, "bytes: 1 MiB", "bytes: -1 MiB"),
               "{d}/s.yaml:9:29: ", {"all_reduce.bytes: size must be positive, got '-1 MiB'"}),
      scenario("BytesZero", edit(s, "bytes: 1 MiB", "bytes: 0 B"),
               "{d}/s.yaml:9:29: ", {"size must be positive, got '0 B'"}),
      scenario("BytesNaN", edit(s, "bytes: 1 MiB", "bytes: nan MiB"),
               "{d}/s.yaml:9:29: ", {"'nan MiB' is not a finite number"}),
      scenario("BytesInExbibytes", edit(s, "bytes: 1 MiB", "bytes: 1 EiB"),
               "{d}/s.yaml:9:29: ", {"unknown size unit 'EiB'"}),
      scenario("UnknownDtype", edit(s, "dtype: f32, group", "dtype: f33, group"),
               "{d}/s.yaml:9:43: ", {"all_reduce.dtype is 'f33'", "did you mean 'f32'?"}),
      scenario("UnknownGroup", edit(s, "group: tp", "group: pp2"),
               "{d}/s.yaml:9:55: ", {"all_reduce.group is 'pp2'", "did you mean 'pp'?"}),
      scenario("NegativeMaxTime", edit(s, "max_time: 1 s", "max_time: -1 s"),
               "{d}/s.yaml:11:15: ", {"max_time: duration must not be negative"}),
      scenario("MaxTimeOfThreeYears", edit(s, "max_time: 1 s", "max_time: 100000000 s"),
               "{d}/s.yaml:11:15: ", {"is too long (over 1e6 s)"}),
      scenario("GemmNegative", edit(s, "[64, 64, 64]", "[64, -64, 64]"),
               "{d}/s.yaml:8:30: ", {"gemm n must be an integer from 1 to 16777216 (2^24), got '-64'"}),
      scenario("GemmOfTwoSizes", edit(s, "[64, 64, 64]", "[64, 64]"),
               "{d}/s.yaml:8:25: ", {"compute.gemm must be [m, n, k]"}),
      scenario("GemmOfABillion", edit(s, "[64, 64, 64]", "[1e9, 1e9, 1e9]"),
               "{d}/s.yaml:8:26: ", {"gemm m must be an integer", "got '1e9'"}),
      scenario("FlopsInfinite", edit(s, "gemm: [64, 64, 64], dtype: f32", "flops: .inf"),
               "{d}/s.yaml:8:26: ", {"compute.flops must be a non-negative number, got '.inf'"}),
      scenario("FlopsNegative", edit(s, "gemm: [64, 64, 64], dtype: f32", "flops: -1"),
               "{d}/s.yaml:8:26: ", {"compute.flops must be a non-negative number, got '-1'"}),
      scenario("TopologyAFolder", edit(s, "topology: t.yaml", "topology: ."),
               "{d}/s.yaml:2:11: ", {"is a folder; name a topology YAML file"}),
      scenario("TopologyAList", edit(s, "topology: t.yaml", "topology: [t.yaml]"),
               "{d}/s.yaml:2:11: ", {"topology must be a single value, got a list"}),
      scenario("TopologyMissing", edit(s, "topology: t.yaml", "topology: missing.yaml"),
               "{d}/s.yaml:2:11: ", {"cannot read topology YAML file", "missing.yaml"}),
      scenario("NoSteps", head + "workload:\n  steps:\n    do: []\n",
               "{d}/s.yaml:5:5: ", {"workload.steps needs a non-empty list `do:` of steps"}),
      scenario("StepsAMapping", head + "workload:\n  steps:\n    do: {compute: {flops: 1}}\n",
               "{d}/s.yaml:5:5: ", {"workload.steps needs a non-empty list"}),
      scenario("StepOfTwoKinds",
               edit(s, "      - all_reduce: {bytes: 1 MiB, dtype: f32, group: tp}",
                    "      - {compute: {flops: 1e9}, all_reduce: {bytes: 1 MiB}}"),
               "{d}/s.yaml:9:9: ", {"a step must be a mapping with one key"}),
      scenario("WaitWithADuration", edit(s, "      - compute: {gemm: [64, 64, 64], dtype: f32}", "      - wait: -1 s"),
               "{d}/s.yaml:8:15: ", {"a wait step must be a mapping, got '-1 s'"}),
      scenario("UnknownCheck", edit(s, "  - max_time: 1 s", "  - busbw: {op: all_reduce, min: fast}"),
               "{d}/s.yaml:11:5: ", {"unknown key 'busbw' in a check"}),
      scenario("StepsAndASweep",
               edit(s, "workload:\n", "workload:\n  collectives: {op: all_reduce, sizes: 1KiB:2KiB}\n"),
               "{d}/s.yaml:5:3: ", {"workload must have exactly one of: collectives, steps"}),
      scenario("SweepSizesReversed", head + "workload:\n  collectives: {op: all_reduce, sizes: 1MiB:1KiB}\n",
               "{d}/s.yaml:4:40: ", {"the maximum is below the minimum"}),
      scenario("SweepSizesNotSizes", head + "workload:\n  collectives: {op: all_reduce, sizes: abc}\n",
               "{d}/s.yaml:4:40: ", {"'abc' is not a size"}),
      scenario("SweepOfBarriers", head + "workload:\n  collectives: {op: barrier, sizes: 1KiB:1MiB}\n",
               "{d}/s.yaml:4:21: ", {"collectives.op is 'barrier'"}),
      scenario("UnknownKeyInAStep", edit(s, "{gemm: [64, 64, 64]", "{gemmm: [64, 64, 64]"),
               "{d}/s.yaml:8:", {"unknown key 'gemmm'"}),
      scenario("UndefinedAlias", edit(s, "name: s", "name: *nope"),
               "{d}/s.yaml:1:7: ", {"the referenced anchor is not defined"}),
      // A billion laughs in the file: the reader looks at the value, never expands it.
      scenario("BillionLaughsInTheFile",
               edit(s, "name: s\n",
                    "name: s\ndescription: [&a [lol, lol, lol, lol, lol, lol, lol, lol, lol], "
                    "&b [*a, *a, *a, *a, *a, *a, *a, *a, *a], &c [*b, *b, *b, *b, *b, *b, *b, *b, *b], "
                    "&d [*c, *c, *c, *c, *c, *c, *c, *c, *c], &e [*d, *d, *d, *d, *d, *d, *d, *d, *d], "
                    "&f [*e, *e, *e, *e, *e, *e, *e, *e, *e], &g [*f, *f, *f, *f, *f, *f, *f, *f, *f], "
                    "&h [*g, *g, *g, *g, *g, *g, *g, *g, *g], &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]]\n"),
               "{d}/s.yaml:2:14: ", {"description must be a single value, got a list"}),
      scenario("RanksZero", s + "ranks: 0\n", "{d}/s.yaml:12:8: ", {"ranks must be an integer from 1"}),
      {"Scenario_MissingFile",
       {},
       {"run", "{d}/nope.yaml", "--json", "{d}/out.json"},
       "{d}/nope.yaml",
       {"cannot read"},
       "out.json"},
      // --set: the override is named, with the column in it.
      override_case("WithoutEquals", "parallel.tp", 1, {"expected key=value"}),
      override_case("WithoutKey", "=2", 1, {"expected key=value"}),
      override_case("EmptyKeyComponent", "parallel..tp=2", 10, {"empty key component in 'parallel..tp'"}),
      override_case("EmptyValue", "parallel.tp=", 13, {"parallel.tp must be a single value, got nothing"}),
      override_case("RepeatNotANumber", "workload.steps.repeat=abc", 23, {"steps.repeat must be an integer"}),
      // a topology override is quoted as typed, its column counted in what was typed
      override_case("TopologyNodesZero", "topology.nodes=0", 16, {"'nodes' must be between 1 and"}),
      // topology_set, the scenario file's key for topology overrides, reaches the topology too
      override_case("TopologySetNodesZero", "topology_set.nodes=0", 20, {"'nodes' must be between 1 and"}),
      override_case("UnknownTopLevelKey", "nosuch.key=1", 1, {"unknown key 'nosuch'"}),
      override_case("UnknownListElement", "workload.steps.do.x.wait=1", 19, {"has no element named 'x'"}),
      override_case("IndexBeyond64Bits", "workload.steps.do.99999999999999999999.wait=1", 19,
                    {"index 99999999999999999999 is out of range: 'workload.steps.do' has 2 elements"}),
      override_case("UnclosedFlowSequence", "name=[unclosed", 6, {"malformed value: end of sequence flow not found"}),
      override_case("UnclosedFlowMapping", "parallel={tp: 2", 10, {"malformed value: end of map flow not found"}),
      override_case("StepWithAnUnknownKey", "workload.steps.do.1.all_reduce={bytes: 1 MiB, extra: 1}", 47,
                    {"unknown key 'extra' in a all_reduce step"}),
      override_case("StepsAsANumber", "workload.steps=7", 16, {"workload.steps must be a mapping, got '7'"}),
      override_case("TpBeyondADouble", "parallel.tp=1e400", 13, {"got '1e400'"}),
      override_case("UndefinedAlias", "description=*x", 13, {"the referenced anchor is not defined"}),
      override_case("RanksNegative", "ranks=-3", 7, {"ranks must be an integer from 1 to 16777216 (2^24), got '-3'"}),
      override_case("TopologySetAList", "topology_set=[nodes=2]", 14, {"topology_set must be a mapping"}),
      override_case("MaxTimeNotADuration", "checks.0.max_time=fast", 19, {"'fast' is not a duration"}),
      override_case("NegativeBytes", "workload.steps.do.1.all_reduce.bytes=-1 MiB", 38, {"size must be positive"}),
      scenario("LayoutNotDividingTheRanks", s,
               "{d}/s.yaml:3:11: ", {"tp=3 x cp=1 x pp=1 = 3 does not divide the 4 ranks"}, {"--set", "parallel.tp=3"}),
  };
}

std::vector<Case> safetensors_cases() {
  const std::string entry = "{\"input_ids\":{\"dtype\":\"I64\",\"shape\":[1,4],\"data_offsets\":[0,32]}";
  return {
      // the header, given as the batch
      header("EmptyFile", "", "is truncated: 0 bytes, shorter than the 8-byte header length"),
      header("ATextFile", "hello, this is not a safetensors file\n", "exceeds the 30 bytes after it"),
      header("LengthOfTwoToThe63", le64(std::uint64_t{1} << 63) + "{}", "header length 9223372036854775808 exceeds"),
      header("LengthZero", le64(0), "header does not start with '{'"),
      header("Truncated", raw_safetensors(entry).substr(0, 40), "exceeds the 32 bytes after it"),
      header("AnArray", raw_safetensors("[]"), "header does not start with '{'"),
      header("NestedTooDeep", raw_safetensors("{\"a\":" + std::string(100, '[')), "nested more than 64 levels deep"),
      header("TrailingText", raw_safetensors(entry + "} and more", kIds + kLabels),
             "unexpected text after the JSON object"),
      header("Fp8", safetensors({{"input_ids", "F8_E4M3", {4}, std::string(4, '\0')}}),
             "has dtype 'F8_E4M3', which ranksim does not read"),
      header("ShapeTooLarge", safetensors({{"input_ids", "I64", {4294967296, 4294967296}, kIds}}),
             "tensor 'input_ids' has a shape too large to allocate"),
      header("NegativeShape", raw_safetensors(edit(entry, "[1,4]", "[1,-4]") + "}", kIds + kIds),
             "a shape entry must be a non-negative integer"),
      header("OffsetsPastTheData", raw_safetensors(entry + "}", kIds.substr(0, 8)),
             "data_offsets [0, 32] run past the 8 data bytes"),
      header("OneOffset", raw_safetensors(edit(entry, "[0,32]", "[0]") + "}", kIds),
             "data_offsets must be an array [begin, end]"),
      header("FieldTwice", raw_safetensors(edit(entry, "{\"dtype\"", "{\"dtype\":\"I64\",\"dtype\"") + "}", kIds),
             "has the field 'dtype' twice"),
      header("MetadataNested", raw_safetensors("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}"),
             "__metadata__ entry 'k' must be a string, not an object"),
      {"Safetensors_BatchAFolder",
       {{"sub/", ""}, {"m.yaml", edit(model_scenario(), "batch: b.safetensors", "batch: sub")}},
       {"run", "{d}/m.yaml", "--json", "{d}/out.json"},
       "{d}/m.yaml:15:8: ",
       {"safetensors file '{d}/sub': is not a regular file"},
       "out.json"},
      {"Safetensors_BatchMissing",
       {{"m.yaml", edit(model_scenario(), "batch: b.safetensors", "batch: nope.safetensors")}},
       {"validate", "{d}/m.yaml"},
       "{d}/m.yaml:15:8: ",
       {"safetensors file '{d}/nope.safetensors': cannot open: No such file or directory"},
       ""},
      {"Safetensors_WeightsAFolder",
       {{"sub/", ""}, {"m.yaml", edit(model_scenario(), "weights: w.safetensors", "weights: sub")}},
       {"validate", "{d}/m.yaml"},
       "{d}/m.yaml:14:12: ",
       {"safetensors file '{d}/sub': is not a regular file"},
       ""},
      // what the batch holds
      batch("TokenOutsideTheVocabulary",
            safetensors({{"input_ids", "I64", {1, 4}, i64s({1, 2, 3, 99})}, {"labels", "I64", {1, 4}, kLabels}}),
            {"input id 99 is outside the vocabulary [0, 16)"}),
      batch("NegativeToken",
            safetensors({{"input_ids", "I64", {1, 4}, i64s({1, -2, 3, 4})}, {"labels", "I64", {1, 4}, kLabels}}),
            {"input id -2 is outside the vocabulary"}),
      batch("FloatTokens",
            safetensors({{"input_ids", "F32", {1, 4}, f32s(4, 1.0f)}, {"labels", "I64", {1, 4}, kLabels}}),
            {"'input_ids' is f32[1, 4]; it must be int64 (or int32)"}),
      batch("WithoutLabels", safetensors({{"input_ids", "I64", {1, 4}, kIds}}), {"no 'labels' tensor"}),
      batch("LabelsOfAnotherShape", safetensors({{"input_ids", "I64", {1, 4}, kIds}, {"labels", "I64", {4}, kLabels}}),
            {"'labels' is i64[4]; format bshd needs [B, S]"}),
      batch("ThreeDimensional",
            safetensors({{"input_ids", "I64", {1, 2, 2}, kIds}, {"labels", "I64", {1, 2, 2}, kLabels}}),
            {"'input_ids' is i64[1, 2, 2]; format bshd needs [B, S]"}),
      batch("NoTokens", safetensors({{"input_ids", "I64", {1, 0}, ""}, {"labels", "I64", {1, 0}, ""}}),
            {"the batch has no tokens"}),
      batch("LabelNotTheIgnoreIndex",
            safetensors({{"input_ids", "I64", {1, 4}, kIds}, {"labels", "I64", {1, 4}, i64s({1, 2, 3, -5})}}),
            {"label -5 is outside [0, 16) and is not -100"}),
      batch("CuSeqlensInABshdBatch",
            safetensors({{"input_ids", "I64", {1, 4}, kIds},
                         {"labels", "I64", {1, 4}, kLabels},
                         {"cu_seqlens", "I32", {2}, i32s({0, 4})}}),
            {"'cu_seqlens' is for format thd"}),
      batch("ThdWithoutCuSeqlens", safetensors({{"input_ids", "I64", {4}, kIds}, {"labels", "I64", {4}, kLabels}}),
            {"format thd needs a 'cu_seqlens' tensor"}, model_scenario("thd", "padding")),
      batch("ThdCuSeqlensNotFromZero", thd_batch({"cu_seqlens", "I32", {2}, i32s({1, 4})}), {"must start at 0"},
            model_scenario("thd", "padding")),
      batch("ThdCuSeqlensDecreasing", thd_batch({"cu_seqlens", "I32", {4}, i32s({0, 3, 2, 4})}),
            {"decreases at index 2"}, model_scenario("thd", "padding")),
      batch("ThdCuSeqlensShortOfTheTokens", thd_batch({"cu_seqlens", "I32", {2}, i32s({0, 3})}),
            {"ends at 3 but input_ids has 4"}, model_scenario("thd", "padding")),
      batch("ThdCuSeqlensFloat", thd_batch({"cu_seqlens", "F32", {2}, f32s(2, 1.0f)}),
            {"'cu_seqlens' is f32[2]; it must be int32 or int64"}, model_scenario("thd", "padding")),
      // the weights
      weights("NaN", checkpoint(set_f32("layer.fc2.weight", 3, kNaN)),
              {"tensor 'layer.fc2.weight' holds NaN at element 3; weights must be finite"}),
      weights("Infinite", checkpoint(set_f32("embedding.weight", 5, kInf)),
              {"tensor 'embedding.weight' holds an infinity at element 5"}),
      weights("MissingATensor", checkpoint(drop("embedding.weight")), {"missing tensor 'embedding.weight'"}),
      weights("ATensorThatIsNoParameter", checkpoint([](std::vector<StTensor>& t) {
                t.push_back({"layer.extra", "F32", {2}, f32s(2, 0)});
              }),
              {"tensor 'layer.extra' is not a parameter of the reference transformer"}),
      weights("WrongShape", checkpoint([](std::vector<StTensor>& t) {
                find(t, "layer.fc1.bias")->shape = {4, 4};
              }),
              {"tensor 'layer.fc1.bias' is f32[4, 4], expected shape [16]"}),
      weights("Integers", checkpoint([](std::vector<StTensor>& t) {
                StTensor* b = find(t, "output.bias");
                b->dtype = "I32";
                b->data = i32s(std::vector<std::int32_t>(16, 1));
              }),
              {"tensor 'output.bias' is i32[16]; weights must be floating"}),
      weights("OptimizerStepNaN", checkpoint(set_f32("optimizer.step", 0, kNaN)),
              {"'optimizer.step' must hold one whole number of steps, 0 to 2^24, got nan"}),
      weights("OptimizerStepMinusFive", checkpoint(set_f32("optimizer.step", 0, -5)),
              {"'optimizer.step' must hold one whole number of steps", "got -5"}),
      weights("OptimizerStepTwoAndAHalf", checkpoint(set_f32("optimizer.step", 0, 2.5)), {"got 2.5"}),
      weights(
          "NegativeSecondMoment", checkpoint(set_f32("optimizer.exp_avg_sq.layer.qkv.weight", 7, -1)),
          {"'optimizer.exp_avg_sq.layer.qkv.weight' holds -1 at element 7; second moments must be finite and >= 0"}),
      weights("InfiniteFirstMoment", checkpoint(set_f32("optimizer.exp_avg.output.bias", 0, kInf)),
              {"'optimizer.exp_avg.output.bias' holds inf at element 0; must be finite"}),
      weights("OptimizerStateWithoutStep", checkpoint(drop("optimizer.step")),
              {"optimizer state without 'optimizer.step'"}),
      weights("OptimizerStateMissingAMoment", checkpoint(drop("optimizer.exp_avg.layer.ln2.bias")),
              {"missing 'optimizer.exp_avg.layer.ln2.bias'"}),
      weights("ATextFile", "weights\n", {"header length", "exceeds"}),
  };
}

std::vector<Case> nccl_tests_cases() {
  const std::string c = kCsv;
  const std::string t = text_table();
  const std::string row13 =
      "        1024           256     float     sum      -1    30.50    0.03    0.06       0    30.40    0.03    "
      "0.06       0\n";
  const auto time13 = [&](const std::string& time) { return edit(t, "30.50", time); };
  return {
      // Sizes and times a measurement cannot have (each used to be taken as written, exit 0).
      csv("SizeOfAHundredZettabytes", edit(c, "1024,30.5", "1e23,30.5"), 5, {"more than 1 PiB per rank"}),
      csv("FractionalSize", edit(c, "1024,30.5", "1024.5,30.5"), 5, {"not a whole number of bytes"}),
      csv("TimeOfAZeptosecond", edit(c, "1024,30.5", "1024,1e-300"), 5, {"lies between 0.001 us and 1e9 us"}),
      csv("TimeOfAnAeon", edit(c, "1024,30.5", "1024,1e300"), 5, {"lies between 0.001 us and 1e9 us"}),
      csv("RanksTwice", edit(c, "# ranks: 8\n", "# ranks: 8\n# ranks: 4\n"), 3,
          {"'# ranks: 4' contradicts '# ranks: 8' on line 2"}),
      csv("UnknownAlgorithm", edit(c, "# nodes: 1\n", "# nodes: 1\n# algo: warp\n"), 4,
          {"algorithm 'warp' is not one of NCCL's"}),
      // A table row with a negative size used to be skipped as a log line.
      txt("NegativeSizeRow",
          edit(t, "# Avg bus",
               "       -2048           512     float     sum      -1    30.00    0.03    "
               "0.06       0    30.00    0.03    0.06       0\n# Avg bus"),
          15, {"the size '-2048' is not a number of bytes"}),
      txt("EmptyFile", "", 0, {"no measurements found"}),
      txt("BinaryGarbage", binary_garbage(), 0, {"no measurements found"}),
      txt("OnlyTheHeader", t.substr(0, t.find(row13)), 0, {"no measurements found"}),
      txt("TruncatedInALine",
          t.substr(0, t.find("# Avg")) + "     2097152        524288     float     sum      -1    8", 15,
          {"needs size, count, type (redop, root), then time, algbw, busbw, #wrong out of place and in place; got 6 "
           "columns"}),
      txt("NegativeTime", time13("-30.50"), 13,
          {"the time of size 1024 is -30.50 us; a measured time must be positive"}),
      txt("ZeroTime", time13("0"), 13, {"a measured time must be positive"}),
      txt("InfiniteTime", time13("inf"), 13, {"the time 'inf' is not a number of microseconds"}),
      txt("TimeNotAvailable", time13("N/A"), 13, {"the time 'N/A' is not a number of microseconds"}),
      txt("TextNaNTime", time13("nan"), 13, {"the time 'nan' is not a number of microseconds"}),
      txt("UnknownCollective", text_table("sendrecv_perf"), 2, {"collective test 'sendrecv_perf' is not one ranksim"}),
      // A log of two tests whose second printed no rows (it failed).
      {"NcclTests_ALogsTestWithoutRows",
       {{"x.txt", t + text_table("all_gather_perf").substr(0, text_table().find("        1024"))}},
       {"calibrate", "-t", "{d}/t8.yaml", "-o", "{d}/out.yaml", "{d}/x.txt"},
       "{d}/x.txt:17 (all_gather_perf): ",
       {"the test printed no measurements (did it fail?); give --op to take one collective's tests"},
       "out.yaml"},
      txt("MoreRanksThanTheTopology", text_table("all_reduce_perf", 16), 0,
          {"the table ran on 16 ranks but topology 't' has 8 devices"}),
      txt("RanksDisagreeWithTheFlag", t, 0, {"wrong rank count: the table ran on 8 ranks but --ranks is 4"},
          {"--ranks", "4"}),
      txt("CollectiveDisagreesWithTheFlag", t, 0, {"the table is all_reduce_perf at line 2, not all_gather (--op)"},
          {"--op", "all_gather"}),
      csv("NegativeSize", edit(c, "1024,30.5", "-1024,30.5"), 5, {"the size '-1024' is not a number of bytes"}),
      csv("HexSize", edit(c, "1024,30.5", "0x400,30.5"), 5, {"the size '0x400' is not a number of bytes"}),
      csv("QuotedNumbers", edit(c, "1024,30.5", "\"1024\",\"30.5\""), 5, {"the size '\"1024\"' is not a number"}),
      csv("CsvNaNTime", edit(c, "1024,30.5", "1024,nan"), 5, {"the time 'nan' is not a number of microseconds"}),
      csv("TimeWithAUnit", edit(c, "1024,30.5", "1024,30.5us"), 5, {"the time '30.5us' is not a number"}),
      csv("EmptyTime", edit(c, "1024,30.5,0.03,0.06", "1024,,0.03,0.06"), 5, {"the time '' is not a number"}),
      csv("CsvNegativeTime", edit(c, "1024,30.5", "1024,-30.5"), 5, {"a measured time must be positive"}),
      csv("HeaderWithoutATimeColumn", edit(c, "size_bytes,time_us,", "bytes,latency,"), 4,
          {"the CSV header must name a size column (size_bytes or size) and a time column"}),
      csv("ShortRow", edit(c, "1024,30.5,0.03,0.06", "1024,30.5"), 5, {"the row has 2 cells; the header names 4"}),
      csv("Semicolons", "# op: all_reduce\n# ranks: 8\nsize_bytes;time_us\n1024;30.5\n", 0, {"no measurements found"}),
      csv("OnlySizeZero", edit(edit(c, "1024,30.5", "0,30.5"), "1048576,60.2", "0,60.2"), 0, {"no measurements found"}),
      csv("RanksZero", edit(c, "# ranks: 8", "# ranks: 0"), 2, {"'# ranks: 0' must be a positive whole number"}),
      csv("RanksNegative", edit(c, "# ranks: 8", "# ranks: -8"), 2, {"'# ranks: -8' must be a positive whole number"}),
      csv("RanksFractional", edit(c, "# ranks: 8", "# ranks: 8.0"), 2, {"'# ranks: 8.0' must be a positive whole"}),
      csv("RanksBeyond64Bits", edit(c, "# ranks: 8", "# ranks: 99999999999999999999"), 2,
          {"'# ranks: 99999999999999999999' must be a positive whole number (at most 16777216)"}),
      csv("RanksAboveTheLimit", edit(c, "# ranks: 8", "# ranks: 16777217"), 2, {"(at most 16777216)"}),
      csv("NodesNotANumber", edit(c, "# nodes: 1", "# nodes: abc"), 3, {"'# nodes: abc' must be a positive whole"}),
      csv("NodesZero", edit(c, "# nodes: 1", "# nodes: 0"), 3, {"'# nodes: 0' must be a positive whole number"}),
      csv("NodesDisagreeWithTheTopology", edit(c, "# nodes: 1", "# nodes: 3"), 0,
          {"the table ran 8 ranks on 3 node(s), not the same number on each node"}),
      csv("CsvUnknownCollective", edit(c, "# op: all_reduce", "# op: gather"), 1,
          {"'# op: gather' is not a collective ranksim times"}),
      csv("CsvTwoCollectives", edit(c, "# op: all_reduce\n", "# op: all_reduce\n# op: all_gather\n"), 2,
          {"several collectives (all_reduce and all_gather)"}),
      csv("CollectiveDisagreesWithItsTextHeader",
          edit(c, "# op: all_reduce\n", "# op: all_reduce\n# Collective test starting: alltoall_perf\n"), 2,
          {"several collectives (all_reduce and all_to_all)"}),
      csv("AlgorithmThatCannotServeTheCollective", edit(c, "# op: all_reduce\n", "# op: broadcast\n# algo: nvls\n"), 0,
          {"no NCCL algorithm can run this collective as algorithm nvls"}),
      csv("AlgorithmDisagreesWithTheFlag", edit(c, "# nodes: 1\n", "# nodes: 1\n# algo: ring\n"), 0,
          {"the file says the run used algorithm ring but --algo says tree"}, {"--algo", "tree"}),
      csv("WithoutItsCollective", edit(c, "# op: all_reduce\n", ""), 0, {"the file does not name its collective"}),
      csv("NoRowWithinTheSizes", c, 0, {"no row within --sizes 8GiB:", "its sizes run from 1024 to 1048576 bytes"},
          {"--sizes", "8GiB:"}),
      // nccl-tests' JSON output (-J).
      {"NcclTests_JsonTruncated",
       {{"x.json", std::string(kNcclJson).substr(0, std::string(kNcclJson).find("\"results\""))}},
       {"calibrate", "-t", "{d}/t8.yaml", "-o", "{d}/out.yaml", "{d}/x.json"},
       "'{d}/x.json' is not JSON: ",
       {"unexpected end of input"},
       "out.yaml"},
      nccl_json("JsonWithoutResults", "{\"version\": 3}", {"it is JSON, but not nccl-tests' JSON output"}),
      nccl_json("JsonNaNTime", edit(kNcclJson, "\"time\": 30.5", "\"time\": \"nan\""),
                {"results[0].out_of_place.time must be a number of microseconds, got \"nan\""}),
      nccl_json("JsonNegativeTime", edit(kNcclJson, "\"time\": 30.5", "\"time\": -30.5"),
                {"results[0]: the time of size 1024 is -30.5 us; a measured time must be positive"}),
      nccl_json("JsonRanksDisagreeWithTheFlag", kNcclJson,
                {"wrong rank count: the table ran on 8 ranks but --ranks is 4"}, {"--ranks", "4"}),
      nccl_json("JsonAlgorithmDisagreesWithTheFlag", kNcclJson,
                {"the file says the run used algorithm ring but --algo says tree"}, {"--algo", "tree"}),
      nccl_json("JsonUnknownAlgorithm", edit(kNcclJson, "NCCL_ALGO=Ring", "NCCL_ALGO=Warp"),
                {"env[1], NCCL_ALGO=Warp: "}),
      {"NcclTests_AFolder",
       {{"tables/", ""}},
       {"calibrate", "-t", "{d}/t8.yaml", "-o", "{d}/out.yaml", "{d}/tables"},
       "{d}/tables",
       {"is actually a directory"},
       "out.yaml"},
      {"NcclTests_Missing",
       {},
       {"calibrate", "-t", "{d}/t8.yaml", "-o", "{d}/out.yaml", "{d}/nope.csv"},
       "{d}/nope.csv",
       {"does not exist"},
       "out.yaml"},
  };
}

std::vector<Case> summary_cases() {
  const std::string s = kSummary;
  return {
      summary("RankNinetyNine", summary_with("{\"rank\": 1,", "{\"rank\": 99,"),
              {"ranks_detail[1].rank must be 1 (the rows are in rank order), got 99"}),
      summary("TotalTimeTwice",
              summary_with("\"virtual_time_us\": 25.0", "\"virtual_time_us\": 1, \"virtual_time_us\": 25.0"),
              {"the key \"virtual_time_us\" is given twice in one object"}),
      summary("TotalTimeBeyondADouble", summary_with("\"virtual_time_us\": 25.0", "\"virtual_time_us\": 1e400"),
              {"m.json':7:22: \"virtual_time_us\" is 1e400, beyond what a double holds"}),
      summary("RankClockBeyondADouble",
              summary_with("{\"rank\": 1, \"clock_us\": 25.0", "{\"rank\": 1, \"clock_us\": -2e999"),
              {"m.json':10:29: \"ranks_detail.1.clock_us\" is -2e999, beyond what a double holds"}),
      summary("TotalTimeZero", summary_with("\"virtual_time_us\": 25.0", "\"virtual_time_us\": 0"),
              {"virtual_time_us must be at least every rank's clock_us (ranks_detail[0].clock_us is 25), got 0"}),
      summary("EmptyFile", "", {"is not JSON", "line 1, column 1"}),
      summary("BinaryGarbage", binary_garbage(), {"is not JSON", "line 1, column 1"}),
      summary("Truncated", s.substr(0, s.find("\"ranks_detail\"")), {"is not JSON", "unexpected end of input"}),
      summary("TrailingComma", summary_with("\"group\": \"tp\"}", "\"group\": \"tp\"},"),
              {"is not JSON", "line 14, column 3"}),
      summary("AComment", "// a run\n" + s, {"is not JSON", "line 1, column 1"}),
      summary("InvalidUtf8", summary_with("\"scenario\": \"s\"", "\"scenario\": \"s\xff\""),
              {"is not JSON", "ill-formed UTF-8"}),
      summary("NaNLiteral", summary_with("\"virtual_time_us\": 25.0", "\"virtual_time_us\": NaN"),
              {"is not JSON", "line 7"}),
      summary("NestedAHundredThousandDeep", std::string(100000, '['), {"is not JSON"}),
      summary("AList", "[" + s + "]", {"has no \"scenario\"; it is not a ranksim run summary"}),
      summary("WithoutScenario", summary_with("\"scenario\": \"s\",", ""), {"has no \"scenario\""}),
      summary("ScenarioANumber", summary_with("\"scenario\": \"s\"", "\"scenario\": 5"),
              {"scenario must be a string, got 5"}),
      summary("RanksAsText", summary_with("\"ranks\": 2", "\"ranks\": \"2\""),
              {"ranks must be an integer >= 1, got \"2\""}),
      summary("RanksNegative", summary_with("\"ranks\": 2", "\"ranks\": -2"),
              {"ranks must be an integer >= 1, got -2"}),
      summary("RanksFractional", summary_with("\"ranks\": 2", "\"ranks\": 2.5"), {"ranks must be an integer >= 1"}),
      summary("RanksBeyond64Bits", summary_with("\"ranks\": 2", "\"ranks\": 99999999999999999999"),
              {"ranks must be an integer >= 1, got 1e+20"}),
      summary("TotalTimeNull", summary_with("\"virtual_time_us\": 25.0", "\"virtual_time_us\": null"),
              {"virtual_time_us must be a time in microseconds (a number >= 0), got null"}),
      summary("TotalTimeNegative", summary_with("\"virtual_time_us\": 25.0", "\"virtual_time_us\": -25.0"),
              {"virtual_time_us must be a time in microseconds", "got -25.0"}),
      summary("RankRowsAnObject", summary_with("\"ranks_detail\": [", "\"ranks_detail\": {\"x\": ["), {"is not JSON"}),
      summary("RankRowsNotAList", summary_with("\"ranks_detail\": [", "\"ranks_detail\": 7, \"unused\": ["),
              {"ranks_detail must be a list, got 7"}),
      summary("MoreRowsThanRanks",
              summary_with("{\"rank\": 1,",
                           "{\"rank\": 2, \"clock_us\": 1, \"compute_us\": 1, \"comm_us\": 0},\n "
                           "   {\"rank\": 1,"),
              {"has 3 rows in \"ranks_detail\" but \"ranks\" is 2"}),
      summary("ARowThatIsANumber",
              summary_with("{\"rank\": 1, \"clock_us\": 25.0, \"compute_us\": 1.0, \"comm_us\": 24.0}", "7"),
              {"has no \"clock_us\""}),
      summary("ARowWithoutItsClock", summary_with("\"rank\": 1, \"clock_us\": 25.0,", "\"rank\": 1,"),
              {"has no \"clock_us\""}),
      summary("ComputeTimeAsText", summary_with("\"compute_us\": 1.0", "\"compute_us\": \"1 us\""),
              {"ranks_detail[0].compute_us must be a time in microseconds", "got \"1 us\""}),
      summary("CollectiveWithoutItsOp", summary_with("\"op\": \"all_reduce\", ", ""), {"has no \"op\""}),
      summary("GroupSizeZero", summary_with("\"group_size\": 2", "\"group_size\": 0"),
              {"collectives[0].group_size must be an integer >= 1, got 0"}),
      summary("NegativeBytes", summary_with("\"bytes\": 1048576", "\"bytes\": -1"),
              {"collectives[0].bytes must be an integer >= 0, got -1"}),
      summary("DtypeANumber", summary_with("\"dtype\": \"f32\"", "\"dtype\": 32"),
              {"collectives[0].dtype must be a string, got 32"}),
      summary("CollectiveTimeAsText", summary_with("\"time_us\": 12.5", "\"time_us\": \"fast\""),
              {"collectives[0].time_us must be a time in microseconds", "got \"fast\""}),
      summary("GroupANumber", summary_with("\"group\": \"tp\"", "\"group\": 1"),
              {"collectives[0].group must be a string, got 1"}),
      summary("CallsFractional", summary_with("\"calls\": 4", "\"calls\": 1.5"),
              {"collectives[0].calls must be an integer >= 1, got 1.5"}),
      summary("TopologyAList", summary_with("\"topology\": \"t\"", "\"topology\": [\"t\"]"),
              {"topology must be a string, got [\"t\"]"}),
      summary("BackendNull", summary_with("\"backend\": \"sim\"", "\"backend\": null"),
              {"backend must be a string, got null"}),
      summary("CollectivesAnObject", summary_with("\"collectives\": [", "\"collectives\": {\"x\": 1}, \"unused\": ["),
              {"collectives must be a list, got {\"x\":1}"}),
      summary("OneRankWithTwoRows", summary_with("\"ranks\": 2", "\"ranks\": 1"),
              {"has 2 rows in \"ranks_detail\" but \"ranks\" is 1"}),
      {"Summary_ThePredictedOneBroken",
       {{"q.json", summary_with("\"calls\": 4", "\"calls\": -4")}},
       {"compare", "{d}/q.json", "{d}/p.json"},
       "compare: '{d}/q.json'",
       {"collectives[0].calls must be an integer >= 1, got -4"},
       ""},
      {"Summary_Missing",
       {},
       {"compare", "{d}/p.json", "{d}/nope.json"},
       "compare: cannot read '{d}/nope.json'",
       {"no such file"},
       ""},
  };
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (auto part : {topology_cases(), scenario_cases(), safetensors_cases(), nccl_tests_cases(), summary_cases()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

// ---- running a case -----------------------------------------------------------------------------

std::string with_dir(std::string s, const std::string& dir) {
  for (std::size_t at; (at = s.find("{d}")) != std::string::npos;) s.replace(at, 3, dir);
  return s;
}

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// A scratch folder with the valid inputs, then the case's files over them.
class Scratch {
 public:
  explicit Scratch(const std::string& name)
      : dir_(fs::temp_directory_path() / ("ranksim_malformed_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write(dir_ / "t.yaml", kTopology);
    write(dir_ / "t8.yaml", edit(kTopology, "devices: 4", "devices: 8"));
    write(dir_ / "s.yaml", kScenario);
    write(dir_ / "m.yaml", model_scenario());
    write(dir_ / "w.safetensors", checkpoint());
    write(dir_ / "b.safetensors", bshd_batch());
    write(dir_ / "good.csv", kCsv);
    write(dir_ / "good.txt", text_table());
    write(dir_ / "good.json", kNcclJson);
    write(dir_ / "p.json", kSummary);
  }
  ~Scratch() { fs::remove_all(dir_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void add(const File& f) const {
    if (!f.name.empty() && f.name.back() == '/')
      fs::create_directories(dir_ / f.name);
    else
      write(dir_ / f.name, f.bytes);
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

class MalformedInputs : public ::testing::TestWithParam<Case> {};

TEST_P(MalformedInputs, ExitTwoNamingTheFileAndWhatIsWrong) {
  const Case& c = GetParam();
  const Scratch scratch(c.name);
  for (const File& f : c.files) scratch.add(f);
  std::vector<std::string> args;
  for (const std::string& a : c.args) args.push_back(with_dir(a, scratch.dir()));
  const Result r = testing::run(args);
  EXPECT_EQ(r.code, 2) << "stderr:\n" << r.err << "stdout:\n" << r.out.substr(0, 2000);
  EXPECT_THAT(r.err, HasSubstr(with_dir(c.where, scratch.dir())));
  for (const std::string& s : c.says) EXPECT_THAT(r.err, HasSubstr(with_dir(s, scratch.dir())));
  if (!c.output.empty()) {
    EXPECT_FALSE(fs::exists(fs::path(scratch.dir()) / c.output)) << c.output << " was written";
  }
}

INSTANTIATE_TEST_SUITE_P(Cli, MalformedInputs, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

// The valid inputs the cases edit are accepted: a case fails only for its own edit.
TEST(MalformedInputsBase, TheUneditedInputsAreAccepted) {
  const Scratch scratch("base");
  const std::string d = scratch.dir();
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"topo", d + "/t.yaml"},
           {"run", d + "/s.yaml", "--json", d + "/out.json"},
           {"run", d + "/m.yaml"},
           {"calibrate", "-t", d + "/t8.yaml", "-o", d + "/out_csv.yaml", d + "/good.csv"},
           {"calibrate", "-t", d + "/t8.yaml", "-o", d + "/out_txt.yaml", d + "/good.txt"},
           {"calibrate", "-t", d + "/t8.yaml", "-o", d + "/out_json.yaml", d + "/good.json"},
           {"compare", d + "/p.json", d + "/p.json"}}) {
    const Result r = testing::run(args);
    EXPECT_EQ(r.code, 0) << args[0] << " " << args[1] << ":\n" << r.err;
  }
  EXPECT_TRUE(fs::exists(d + "/out.json"));
  EXPECT_TRUE(fs::exists(d + "/out_csv.yaml"));
  // a thd batch with its cu_seqlens loads too
  scratch.add({"m.yaml", model_scenario("thd", "padding")});
  scratch.add({"b.safetensors", thd_batch({"cu_seqlens", "I32", {2}, i32s({0, 4})})});
  const Result r = testing::run({"validate", d + "/m.yaml"});
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
}  // namespace ranksim::app

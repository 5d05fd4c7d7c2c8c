// Scenario files: `ranksim run SCENARIO.yaml` — a topology, a parallel layout, a workload, the
// checks to make and where outputs go, in one YAML file (every key: docs/scenarios.md).
//
// Loading validates everything before anything runs: an unknown key (with the closest known
// key suggested), a wrong type, a bad unit, a layout whose sizes do not fit the topology — each
// is a ConfigError naming file:line:column (or the --set override it came from) and what was
// expected. `--set a.b=value` overrides any key by its dotted path before validation (a list
// element by its index: workload.steps.do.1.all_reduce.bytes=4MiB, checks.0.max_time=2ms);
// `--set topology.<key>=value` (or `topology_set.<key>=value`) overrides a key of the topology file.
//
// Workloads (this version): `collectives` — an nccl-tests sweep of one collective; `steps` — a
// sequence of compute kernels and collectives over the layout's groups (tp, cp, dp, pp, dp_cp,
// tp_cp, world) and layers (tp_mlp over the tp group, cp_attention over the cp group), repeated.
// Runs are deterministic: the same file gives byte-identical JSON summaries and traces.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/model_workload.h"
#include "runtime/distributed/spawn_options.h"
#include "sim/time.h"
#include "sim/topology.h"

namespace ranksim::app {

struct ScenarioStep {
  enum class Kind { compute, collective, sendrecv, tp_mlp, cp_attention };
  Kind kind = Kind::compute;
  std::string name;  // compute: kernel name; collective: op name
  double flops = 0;  // compute
  double bytes = 0;  // compute: bytes moved; collective/sendrecv: message bytes per rank
  std::string dtype = "bf16";
  std::string group = "world";
  std::string algorithm = "auto";
  bool async = false;  // collective: overlap with the following steps until `wait`
  bool wait = false;   // a `wait` step: waits for every outstanding async collective
  // tp_mlp: Megatron's ParallelMLP over the tp group (tp/mlp.h), forward (+ backward).
  int64_t hidden = 0, ffn = 0, tokens = 0;
  bool sequence_parallel = false;
  bool backward = true;  // tp_mlp, cp_attention: run the backward too
  // cp_attention: TransformerEngine's context-parallel attention over the cp group
  // (cp/context_parallel.h), forward (+ backward). Every field is resolved at load time.
  std::string cp_comm;            // p2p, all_gather, a2a, a2a+p2p. Default: parallel.cp_comm
  std::string format = "bshd";    // bshd | thd
  int64_t batch = 1;              // bshd: batch rows
  std::vector<int64_t> seq_lens;  // bshd: {S}; thd: the real length of each packed sequence
  int64_t heads = 0;              // query heads of the whole attention (each TP rank: heads/tp)
  int64_t kv_heads = 0;           // GQA key/value heads. Default: heads
  int64_t head_dim = 0;
  std::string mask = "causal";                  // causal | no_mask (bshd) | padding (thd)
  int64_t window_left = -1, window_right = -1;  // sliding window; -1 = unbounded
  int a2a_size = 0, p2p_size = 0;               // a2a+p2p: [a, p]. Default: parallel.hierarchical_cp, else [2, cp/2]
  // `ranks: [0, 2]`: the ranks that run this step; empty: every rank.
  std::vector<int> ranks;
};

// One entry of `faults:` (docs/scenarios.md, "Faults"), injected deterministically.
struct ScenarioFault {
  enum class Kind { rank_fails, rank_stops, straggler, network_degrades, network_fails };
  Kind kind = Kind::rank_fails;
  std::string label;  // "faults[0] (rank_fails: rank 3)", for reports
  int rank = -1;      // rank_*, straggler; network_*: the rank whose NIC (-1: node's links)
  int node = -1;      // network_*: the node whose network links (-1: a rank's NIC)
  // When: a virtual time, or (rank_* in a steps workload) before step `step` of repetition
  // `iteration` (0-based). straggler: from `at`.
  std::optional<sim::Time> at;
  int step = -1, iteration = 0;
  double slowdown = 1;  // straggler: its kernels take this many times as long
  double factor = 0;    // network_degrades: the links' share of their bandwidth (network_fails: 0)
  bool fatal() const { return kind == Kind::rank_fails || kind == Kind::rank_stops || kind == Kind::network_fails; }
};

struct ScenarioCheck {
  enum class Kind { max_time, min_busbw };
  Kind kind = Kind::max_time;
  sim::Time time;    // max_time
  double busbw = 0;  // min_busbw, bytes/s
  std::string op;    // min_busbw: which collective (default: the sweep's)
  std::string text;  // as written, for the report
};

struct Scenario {
  std::string file;
  std::string name;
  std::string description;
  std::string topology_path;               // resolved against the scenario's folder
  std::vector<std::string> topology_sets;  // overrides of the topology file
  // The topology, loaded once (with topology_sets) when the scenario is loaded; runs share it.
  std::shared_ptr<const sim::Topology> topology;
  int ranks = 0;  // resolved: world size
  int tp = 1, cp = 1, pp = 1, dp = 1;
  std::string cp_comm = "p2p";       // parallel.cp_comm: p2p, all_gather, a2a, a2a+p2p
  std::vector<int> hierarchical_cp;  // parallel.hierarchical_cp: [a2a, p2p]; empty = [2, cp/2]
  std::string algorithm = "auto";
  std::string protocol = "auto";  // NCCL_PROTO for the nccl timing model: auto, LL, LL128, Simple
  // NCCL's variables the run read from the environment (app/nccl_environment.h), as set
  // ("NCCL_ALGO=Ring", ...); the summary and the JSON say them.
  std::vector<std::string> nccl_environment;
  bool real_data = false;
  // Workload: exactly one of these (model: the reference transformer, one forward + backward).
  std::optional<ModelWorkload> model;
  std::optional<std::string> sweep_op;
  std::vector<int64_t> sweep_sizes;
  std::string sweep_dtype = "f32";
  std::vector<ScenarioStep> steps;
  int repeat = 1;
  std::vector<ScenarioCheck> checks;
  // `memory_check: warn`: a rank whose memory peak exceeds its device's capacity is a warning,
  // not a failed run (sim backend; docs/compute.md).
  bool memory_warn_only = false;
  std::vector<ScenarioFault> faults;            // `faults:`
  std::string out_trace, out_json, out_report;  // `outputs:` (command-line flags win)
};

// Loads and validates. Throws ConfigError / Error.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets = {});
// The same for a document held in memory; `path` names it in errors, and relative paths in it
// (topology, batch, weights) are resolved against its folder.
Scenario load_scenario_text(const std::string& text, const std::string& path,
                            const std::vector<std::string>& sets = {});

struct RunFlags {
  std::string trace;   // overrides outputs.trace
  std::string json;    // overrides outputs.json
  std::string report;  // overrides outputs.report (self-contained HTML)
  bool quiet = false;
  // Where the ranks run: "sim", or "mpi" (one process per rank under mpirun -np <ranks>; times
  // are wall clock; docs/backends.md). Default: sim.
  std::string backend = "sim";
  // Where ops compute (runtime/device/device.h): "cpu", "gpu" or "emulated"; empty: gpu with the nccl
  // backend, else cpu. Results on "emulated" equal cpu's bit for bit; "gpu" matches to rounding.
  std::string device;
  // The nccl backend's collectives (runtime::gpu::nccl_collectives in a CUDA build). Default:
  // none, and --backend nccl is an Error saying the backend is not available.
  runtime::DeviceCollectivesFactory device_collectives;
  // Count each rank's device memory (runtime::SpawnOptions::count_memory). Not a command-line
  // option: off only to measure what counting costs (benches/memory_bench.cpp). Default: true.
  bool count_memory = true;
};

// Runs, prints the summary to out, writes the outputs. Returns 0 when every check passed, 1 when
// one failed.
int run_scenario(const Scenario& scenario, const RunFlags& flags, std::ostream& out);

// One line per shipped topology and scenario, for `ranksim list`.
void list_shipped(const std::string& root, std::ostream& out);

}  // namespace ranksim::app

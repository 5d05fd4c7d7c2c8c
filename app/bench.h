// `ranksim bench collectives`: an nccl-tests-style sweep of one collective over message sizes on
// a simulated fabric. Shape-only by default (timing without data, so thousands of ranks are
// cheap); --check moves real numbers and verifies every rank's result, like nccl-tests' -c.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "sim/collective_model.h"
#include "sim/topology.h"

namespace ranksim::app {

struct BenchOptions {
  std::string topology;           // path to a topology YAML file
  std::vector<std::string> sets;  // "key=value" overrides of the topology
  std::string op =
      "all_reduce";   // all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|reduce|gather|scatter|sendrecv
  int ranks = 0;      // 0: every device of the topology
  std::string sizes;  // MIN:MAX (doubling) or one size; "" for 8B:128MiB, or what the nccl-tests flags say
  // nccl-tests' own size flags, as it reads them (-b, -e, -i: bytes with an optional K, M or G,
  // binary; -f: the factor): "" / 0 when not given. Given, they replace --sizes: from -b (default
  // 32M) to -e (default 32M), times -f when it is above 1, else plus -i (default 1M).
  std::string min_bytes, max_bytes, step_bytes;
  int64_t step_factor = 0;
  // nccl-tests' -n and -w (0 / -1: not given). ranksim times each size's call once, alone; the
  // header says so when they are given, and -J writes them among nccl-tests' arguments.
  int iters = 0;
  int warmup_iters = -1;
  std::string output_file;         // -J: also write the sweep as nccl-tests' JSON (app/nccl_tests_output.h); "" none
  std::string algorithm = "auto";  // one name, or NCCL_ALGO's list syntax (sim::is_nccl_list)
  std::string protocol = "auto";   // NCCL_PROTO: auto, LL, LL128, Simple, or a list (nccl timing model only)
  std::string dtype = "f32";
  bool check = false;
  // Time the calls as nccl-tests -g G prints them: one thread driving G GPUs issues a call no
  // faster than G x the topology's collectives.group_launch (1: one process per GPU).
  int gpus_per_thread = 1;
  bool progress = false;  // which size runs, on a line of stderr redrawn in place (the CLI on a terminal)
};

// The --proto option (bench, calibrate, a scenario's protocol): nullopt for "auto", else NCCL's
// protocol name (any case). Throws ranksim::Error naming the choices otherwise.
std::optional<sim::Protocol> parse_protocol_option(const std::string& name);

// --algo and --proto (bench, calibrate, a scenario's algorithm and protocol) as NCCL_ALGO and
// NCCL_PROTO take them. One name keeps its meaning: that algorithm (ranksim's own schedules,
// direct and hierarchical, among them) or protocol forced. A list in NCCL's syntax (names with
// commas, `^` first to exclude them, `;function:list` entries: sim/nccl_env.h's is_nccl_list)
// restricts NCCL's choice instead, with the nccl timing model.
// The value's single name, or "auto" for a list (what the runtime's algorithm and the forced
// protocol take).
std::string single_name(const std::string& value);
// What the lists allow, with a single name beside them narrowing it; nullopt when neither value
// is a list. Throws ranksim::Error naming the option and the fault for a malformed list.
// The environment a run on real GPUs (--backend nccl) gives NCCL, which reads NCCL_ALGO and
// NCCL_PROTO at init: the scenario's algorithm and protocol, one name or a list, in NCCL's
// spellings (sim/nccl_env.h); "auto" sets nothing. Throws ranksim::Error for ranksim's own
// schedules (direct, hierarchical), which NCCL has not, and for a variable that the environment
// already sets to something else (the run would not do what one of them says).
void set_nccl_environment(const std::string& algorithm, const std::string& protocol);
std::optional<sim::NcclAllowed> nccl_lists(const std::string& algorithm, const std::string& protocol,
                                           const std::string& algo_option = "--algo",
                                           const std::string& proto_option = "--proto");

// The least time of a call when one thread drives `gpus_per_thread` GPUs (nccl-tests -g G): it
// launches each GPU's kernel in turn, G x the topology's group_launch; 0 for one GPU a thread.
// A call takes the longer of this and the GPUs' time (bench -g, calibrate's -g tables).
double one_thread_issue(const sim::CollectiveTiming& c, int gpus_per_thread);

// A sweep's sizes, in order, and how they grow: times step_factor when it is above 1, else plus
// step_bytes (what -J writes as nccl-tests' own flags).
struct SizeSweep {
  std::vector<int64_t> sizes;
  int64_t step_factor = 2;
  int64_t step_bytes = 0;
};
// The sweep nccl-tests would run for -b, -e, -f and -i (BenchOptions). Throws ranksim::Error
// naming the flag for a size it would not read, a maximum below the minimum, a sweep that never
// grows (-f above 1 from 0 bytes; -i 0), or more than 4,096 sizes.
SizeSweep nccl_tests_sweep(const std::string& min_bytes, const std::string& max_bytes, const std::string& step_bytes,
                           int64_t step_factor);

// Prints the table; returns 0, or 1 when --check found wrong elements. Throws ranksim::Error on
// bad options (unknown op, dtype or algorithm, more ranks than devices, malformed sizes).
int bench_collectives(const BenchOptions& options, std::ostream& out);

// Host memory this process can still take: /proc/meminfo's MemAvailable (else the physical
// memory); 0 when unknown.
uint64_t host_memory_available();
// Refuses (Error) a run whose estimated host memory, `need` bytes, exceeds what the machine has
// available, before it starts: `what` says what needs it ("--check on 1024 ranks at 1 GiB"),
// `advice` what to do instead (default: time it shape-only, fewer ranks or smaller sizes).
void check_host_memory(double need, const std::string& what, const std::string& advice = "");
// A forced direct schedule (every rank to every other at once) on the schedule timing model holds
// all n(n-1) of its transfers: refused before the run when they would not fit in host memory.
// Every other algorithm, and the nccl timing model, costs memory linear in the ranks.
void check_direct_schedule(const sim::Topology& topo, int nranks, const std::string& algorithm,
                           const std::string& what);
// The host memory a collective with real data needs: every rank's input and output of `bytes`,
// and the expected values --check computes once (a double per element: at most 4 bytes per byte).
double collective_host_bytes(int ranks, double bytes);
// A guard for long runs (runtime::SpawnOptions::guard): throws an Error saying the host is out of
// memory when the process's resident memory passes `limit` bytes, so that the run stops with exit
// 2 before the system kills it. Default limit: what the process held when the guard was made plus
// 95% of the memory then available.
std::function<void()> host_memory_guard(double limit = 0);

// The sweep itself, shared with scenario files: one spawn per size on the first `ranks` devices.
struct SweepRequest {
  std::string op = "all_reduce";
  int ranks = 0;
  std::vector<int64_t> sizes;
  std::string algorithm = "auto";
  std::string protocol = "auto";
  std::string dtype = "f32";
  bool check = false;
  // Called before each size is run (its index, the count, the size): a progress display.
  std::function<void(std::size_t index, std::size_t total, int64_t bytes)> on_size;
};
struct SweepRow {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string algorithm;
  double seconds = 0;
  double algbw = 0;  // bytes/s
  double busbw = 0;  // bytes/s
  int64_t wrong = -1;
};
// on_row (optional) is called with each row as soon as its size has run (bench prints as it goes).
std::vector<SweepRow> run_sweep(const sim::Topology& topology, const SweepRequest& request,
                                const std::function<void(const SweepRow&)>& on_row = {});
// "8B:8GiB" (doubling) or one size; throws Error naming the text.
std::vector<int64_t> parse_size_sweep(const std::string& spec);
// Throws Error when the largest size (a rank's buffer) is more than the device memory of any of
// the first `ranks` devices (a kind with no memory_bytes is not checked); `what` names the input.
void check_sizes_fit(const sim::Topology& topo, int ranks, const std::vector<int64_t>& sizes, const std::string& what);

}  // namespace ranksim::app

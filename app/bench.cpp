#include "app/bench.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "app/nccl_environment.h"
#include "app/nccl_table.h"
#include "app/nccl_tests_output.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/nccl_names.h"
#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/text.h"
#include "sim/topology.h"
#include "sim/units.h"

namespace ranksim::app {

namespace {

using runtime::CollectiveKind;
using runtime::Tensor;

// What a sweep times: a collective with a one-tensor buffer contract, or sendrecv (a ring of
// point-to-point pairs, timed like broadcast: busbw factor 1).
struct SweepOp {
  CollectiveKind kind;
  bool sendrecv;
};

}  // namespace

std::optional<sim::Protocol> parse_protocol_option(const std::string& name) {
  if (name == "auto") return std::nullopt;
  if (auto p = sim::parse_protocol(name)) return p;
  throw Error("unknown --proto '" + name + "': expected auto, LL, LL128 or Simple (as NCCL_PROTO)");
}

std::string single_name(const std::string& value) { return sim::is_nccl_list(value) ? "auto" : value; }

void set_nccl_environment(const std::string& algorithm, const std::string& protocol) {
  auto set = [](const char* variable, const std::string& key, const std::string& value, const std::string& nccl) {
    const char* had = std::getenv(variable);
    if (had && sim::ascii_lower(nccl) != sim::ascii_lower(had))  // NCCL reads its names in any case
      throw Error(std::string(variable) + " is set in the environment to '" + had + "', but " + key + " is '" + value +
                  "' (" + variable + "=" + nccl + " for NCCL): unset one of them");
    if (setenv(variable, nccl.c_str(), 1) != 0) throw Error(std::string("cannot set ") + variable + " for NCCL");
  };
  if (algorithm != "auto" && !algorithm.empty()) {
    if (!sim::is_nccl_list(algorithm) && !runtime::nccl_algorithm(runtime::parse_algorithm(algorithm)))
      throw Error("algorithm '" + algorithm +
                  "' is ranksim's own schedule, which NCCL has not: with --backend nccl use auto, one of NCCL's "
                  "algorithms (ring, tree, nvls, nvls_tree, collnet, pat) or a list as NCCL_ALGO takes it");
    set("NCCL_ALGO", "algorithm", algorithm,
        with_error_prefix("algorithm", [&] { return sim::nccl_algo_value(algorithm); }));
  }
  if (protocol != "auto" && !protocol.empty())
    set("NCCL_PROTO", "protocol", protocol,
        with_error_prefix("protocol", [&] { return sim::nccl_proto_value(protocol); }));
}

std::optional<sim::NcclAllowed> nccl_lists(const std::string& algorithm, const std::string& protocol,
                                           const std::string& algo_option, const std::string& proto_option) {
  if (!sim::is_nccl_list(algorithm) && !sim::is_nccl_list(protocol)) return std::nullopt;
  sim::NcclAllowed allowed;
  if (sim::is_nccl_list(algorithm)) {
    with_error_prefix(algo_option, [&] { allowed.set_algorithms(algorithm); });
  } else if (const std::optional<sim::CollAlgo> a =
                 algorithm.empty() ? std::nullopt : runtime::nccl_algorithm(runtime::parse_algorithm(algorithm))) {
    allowed.only(*a);
  }
  if (sim::is_nccl_list(protocol))
    with_error_prefix(proto_option, [&] { allowed.set_protocols(protocol); });
  else if (const std::optional<sim::Protocol> p = parse_protocol_option(protocol))
    allowed.only(*p);
  return allowed;
}

std::vector<int64_t> parse_size_sweep(const std::string& spec) {
  const auto colon = spec.find(':');
  try {
    if (colon == std::string::npos) return {static_cast<int64_t>(sim::units::parse_bytes(spec))};
    const auto lo = static_cast<int64_t>(sim::units::parse_bytes(spec.substr(0, colon)));
    const auto hi = static_cast<int64_t>(sim::units::parse_bytes(spec.substr(colon + 1)));
    if (hi < lo) throw Error("--sizes " + spec + ": the maximum is below the minimum");
    std::vector<int64_t> out;
    for (int64_t s = lo; s <= hi; s *= 2) out.push_back(s);
    return out;
  } catch (const sim::units::UnitError& e) {
    throw Error("--sizes '" + spec + "': " + e.what() + " (write MIN:MAX, e.g. 8B:8GiB)");
  }
}

namespace {
// Exact-sum input of rank r, element e.
double val(int r, int64_t e) { return (r + 1) + static_cast<double>(e % 5); }

SweepOp find_op(const std::string& name) {
  if (name == "sendrecv") return {CollectiveKind::broadcast, true};
  if (const auto kind = runtime::parse_collective_kind(name))
    if (*kind != CollectiveKind::barrier) return {*kind, false};
  throw Error("unknown --op '" + name +
              "': expected all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, gather, scatter or "
              "sendrecv");
}
// With the nccl model, an asked-for algorithm and protocol (or what NCCL_ALGO / NCCL_PROTO lists
// allow) must serve the collective at every size (the sim backend would otherwise leave the call
// to NCCL's choice, or refuse it mid-sweep): refused up front.
void check_nccl_choice(const sim::Topology& topo, const SweepOp& op, int n, const std::vector<int64_t>& sizes,
                       const std::string& algorithm, const std::string& protocol) {
  if (topo.collectives().model != sim::CollectiveTimingModel::nccl || op.sendrecv) return;
  const bool p2p = runtime::nccl_point_to_point(op.kind);
  const std::optional<sim::CollAlgo> forced =
      p2p ? std::nullopt : runtime::nccl_algorithm(runtime::parse_algorithm(single_name(algorithm)));
  const std::optional<sim::Protocol> proto = parse_protocol_option(single_name(protocol));
  const std::optional<sim::NcclAllowed> lists = nccl_lists(algorithm, protocol);
  if (!forced && !proto && !lists) return;
  sim::CollectiveShape s = sim::first_devices_shape(topo, runtime::nccl_op(op.kind), n);
  const sim::CollectiveModel model(topo);
  for (const int64_t size : sizes) {
    s.bytes = static_cast<double>(size);
    try {
      if (lists)
        (void)model.choose(s, *lists);
      else
        (void)model.choose(s, forced, proto);
    } catch (const Error& e) {
      throw Error("--algo " + algorithm + " --proto " + protocol + " on topology '" + topo.name() + "': " + e.what());
    }
  }
}

}  // namespace

void check_sizes_fit(const sim::Topology& topo, int ranks, const std::vector<int64_t>& sizes, const std::string& what) {
  if (sizes.empty()) return;
  const uint64_t largest = static_cast<uint64_t>(*std::max_element(sizes.begin(), sizes.end()));
  std::vector<bool> seen(static_cast<std::size_t>(topo.num_kinds()), false);
  for (int d = 0; d < ranks && d < topo.num_devices(); ++d) {
    const int k = topo.device(d).kind;
    if (seen[static_cast<std::size_t>(k)]) continue;
    seen[static_cast<std::size_t>(k)] = true;
    const sim::DeviceKind& kind = topo.kind(k);
    if (kind.memory_bytes > 0 && largest > kind.memory_bytes)
      throw Error(what + ": " + sim::units::format_bytes(largest) + " per rank is more than the " +
                  sim::units::format_bytes(kind.memory_bytes) + " of device memory of " + kind.name +
                  "; use sizes up to what a device holds");
  }
}

namespace {

// One line of stderr redrawn in place (a terminal's), or nothing when not enabled.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  void show(const std::string& text) const {
    if (!enabled_) return;
    std::fprintf(stderr, "\r%-79.79s", text.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void clear() const {
    if (!shown_) return;
    std::fprintf(stderr, "\r%79s\r", "");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  mutable bool shown_ = false;
};

}  // namespace

uint64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

void check_host_memory(double need, const std::string& what, const std::string& advice) {
  const uint64_t have = host_memory_available();
  if (have == 0 || need <= static_cast<double>(have)) return;
  throw Error(what + " needs about " + sim::units::format_bytes(static_cast<uint64_t>(std::min(need, 0x1p63))) +
              " of host memory, more than the " + sim::units::format_bytes(have) + " this machine has available; " +
              (advice.empty() ? "time it shape-only (no --check, data: shape_only), or use fewer ranks or smaller sizes"
                              : advice));
}

void check_direct_schedule(const sim::Topology& topo, int nranks, const std::string& algorithm,
                           const std::string& what) {
  if (algorithm != "direct" || topo.collectives().model != sim::CollectiveTimingModel::schedule) return;
  // Measured here: 230-300 bytes a transfer (its move, its flow on the network, its routes) at
  // 1,024-2,048 ranks; 320 leaves a margin.
  constexpr double kBytesPerTransfer = 320;
  const double transfers = static_cast<double>(nranks) * (nranks - 1);
  check_host_memory(transfers * kBytesPerTransfer,
                    what + ": the direct schedule of " + std::to_string(nranks) + " ranks moves all " +
                        std::to_string(static_cast<long long>(transfers)) + " of its transfers at once, and",
                    "use another algorithm (ring, tree, hierarchical; auto never picks direct above 64 ranks) "
                    "or the nccl timing model (collectives: {model: nccl} in the topology)");
}

namespace {
// The process's resident memory (/proc/self/statm), 0 when unknown.
double resident_bytes() {
  std::ifstream in("/proc/self/statm");
  double pages = 0, resident = 0;
  if (!(in >> pages >> resident)) return 0;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}
}  // namespace

std::function<void()> host_memory_guard(double limit) {
  if (limit <= 0) {
    const uint64_t available = host_memory_available();
    if (available == 0) return {};
    limit = resident_bytes() + 0.95 * static_cast<double>(available);
  }
  return [limit] {
    const double rss = resident_bytes();
    if (rss <= limit) return;
    throw Error("out of host memory: the run holds " + sim::units::format_bytes(static_cast<uint64_t>(rss)) +
                ", nearly all the memory this machine had available when it started (limit " +
                sim::units::format_bytes(static_cast<uint64_t>(limit)) +
                "), and was stopped before the system would kill it; time it with fewer ranks or a smaller "
                "layout, or shape-only (data: shape_only)");
  };
}

double collective_host_bytes(int ranks, double bytes) { return 2.0 * ranks * bytes + 4.0 * bytes; }

double one_thread_issue(const sim::CollectiveTiming& c, int gpus_per_thread) {
  return gpus_per_thread > 1 ? gpus_per_thread * c.group_launch.seconds() : 0.0;
}

namespace {
// A size as nccl-tests' -b, -e and -i read it (src/common.cu, parsesize): a number, then an
// optional K, M or G (binary), the bytes truncated to a whole number; ranksim's own forms
// ("8GiB") too.
int64_t nccl_tests_size(const std::string& text, const char* flag) {
  const std::string t(sim::trim(text));
  double value = 0;
  const char* end = t.data() + t.size();
  const auto [p, ec] = std::from_chars(t.data(), end, value);
  if (ec == std::errc() && p != t.data()) {
    std::string unit(sim::trim(std::string_view(p, static_cast<size_t>(end - p))));
    const double scale = unit.empty()                 ? 1.0
                         : unit == "K" || unit == "k" ? 1024.0
                         : unit == "M" || unit == "m" ? 1024.0 * 1024
                         : unit == "G" || unit == "g" ? 1024.0 * 1024 * 1024
                                                      : -1.0;
    if (scale > 0 && value >= 0 && value * scale < 0x1p62) return static_cast<int64_t>(value * scale);
  }
  try {
    return static_cast<int64_t>(sim::units::parse_bytes(t));
  } catch (const sim::units::UnitError&) {
    throw Error(std::string(flag) + " '" + text +
                "' is not a size: give bytes, with K, M or G as nccl-tests takes them (" + flag + " 8, " + flag +
                " 128M, " + flag + " 8G)");
  }
}
}  // namespace

SizeSweep nccl_tests_sweep(const std::string& min_bytes, const std::string& max_bytes, const std::string& step_bytes,
                           int64_t step_factor) {
  constexpr int64_t k32M = 32LL << 20;  // nccl-tests' defaults
  const int64_t lo = min_bytes.empty() ? k32M : nccl_tests_size(min_bytes, "-b");
  const int64_t hi = max_bytes.empty() ? k32M : nccl_tests_size(max_bytes, "-e");
  const int64_t step = step_bytes.empty() ? (1LL << 20) : nccl_tests_size(step_bytes, "-i");
  if (step_factor < 0) throw Error("-f " + std::to_string(step_factor) + ": the factor must be positive");
  if (hi < lo)
    throw Error("-e " + std::to_string(hi) + " is below -b " + std::to_string(lo) +
                " (bytes): the sweep runs from -b up to -e");
  const bool factor = step_factor > 1;
  if (factor && lo == 0 && hi > 0)
    throw Error("-b 0 with -f " + std::to_string(step_factor) + ": the sizes never grow");
  if (!factor && step == 0 && hi > lo) throw Error("-i 0: the sizes never grow (give -i BYTES or -f FACTOR)");
  SizeSweep sweep{{}, factor ? step_factor : 1, step};
  std::vector<int64_t>& out = sweep.sizes;
  constexpr size_t kMaxSizes = 4096;
  for (int64_t size = lo; size <= hi;) {
    out.push_back(size);
    if (out.size() > kMaxSizes)
      throw Error("-b " + std::to_string(lo) + " -e " + std::to_string(hi) + (factor ? " -f " : " -i ") +
                  std::to_string(factor ? step_factor : step) + " is more than 4096 sizes" +
                  (factor ? "" : " (without -f, nccl-tests steps by -i, 1M by default): add -f 2"));
    if (size == hi || (factor ? size > hi / step_factor : size > hi - step)) break;
    size = factor ? size * step_factor : size + step;
  }
  return sweep;
}

namespace {
// --dtype / -d: ranksim's names, or nccl-tests' (float, double, half, bfloat16, int32, int64) for
// the same types.
std::string bench_dtype(const std::string& name) {
  if (runtime::dtype_from_name(name)) return name;
  if (const std::optional<std::string> ours = dtype_of_nccl_tests_type(name)) return *ours;
  throw Error("unknown --dtype '" + name +
              "': expected f32, f64, bf16, f16, i64 or i32, or nccl-tests' names for them (float, double, bfloat16, "
              "half, int64, int32)");
}
}  // namespace

int bench_collectives(const BenchOptions& given, std::ostream& out) {
  // NCCL_ALGO, NCCL_PROTO and NCCL's chunk sizes in the environment, as nccl-tests runs under them.
  const NcclEnvironment env = read_nccl_environment();
  BenchOptions o = given;
  apply_nccl_environment(env, o.algorithm, "--algo", o.protocol, "--proto", o.sets, "collectives.");
  const sim::Topology topo = sim::Topology::load_file(o.topology, o.sets);
  SweepRequest req;
  req.op = o.op;
  req.ranks = o.ranks;
  const bool nccl_sizes = !o.min_bytes.empty() || !o.max_bytes.empty() || !o.step_bytes.empty() || o.step_factor != 0;
  SizeSweep sweep;
  std::string sizes_given;  // the option that gave the sizes, for messages
  if (nccl_sizes) {
    if (!o.sizes.empty())
      throw Error("--sizes " + o.sizes + " and nccl-tests' -b/-e/-f/-i both give the sizes: use one of them");
    sweep = nccl_tests_sweep(o.min_bytes, o.max_bytes, o.step_bytes, o.step_factor);
    sizes_given = "-b " + std::to_string(sweep.sizes.front()) + " -e " + std::to_string(sweep.sizes.back());
  } else {
    const std::string spec = o.sizes.empty() ? "8B:128MiB" : o.sizes;
    sweep.sizes = parse_size_sweep(spec);  // doubling
    sizes_given = "--sizes " + spec;
  }
  req.sizes = sweep.sizes;
  req.algorithm = o.algorithm;
  req.protocol = o.protocol;
  const std::string dtype = bench_dtype(o.dtype);
  req.dtype = dtype;
  req.check = o.check;
  const SweepOp op = find_op(o.op);
  const int n = o.ranks > 0 ? o.ranks : topo.num_devices();
  (void)runtime::parse_algorithm(single_name(o.algorithm));
  (void)parse_protocol_option(single_name(o.protocol));
  (void)nccl_lists(o.algorithm, o.protocol);
  if (n > topo.num_devices())
    throw Error("--ranks " + std::to_string(n) + " is more than the " + std::to_string(topo.num_devices()) +
                " devices of topology '" + topo.name() + "' (" + o.topology +
                "); use fewer ranks or more nodes (--set nodes=N)");
  if (o.gpus_per_thread < 1 || n % o.gpus_per_thread != 0)
    throw Error("--gpus-per-thread " + std::to_string(o.gpus_per_thread) + " does not divide the " + std::to_string(n) +
                " ranks; nccl-tests' -g G runs each thread on G of them");
  const double issue = one_thread_issue(topo.collectives(), o.gpus_per_thread);
  check_nccl_choice(topo, op, n, req.sizes, o.algorithm, o.protocol);
  check_sizes_fit(topo, n, req.sizes, sizes_given);
  if (!o.output_file.empty()) sim::check_output_paths({{"-J", o.output_file}}, {{"the topology", o.topology}});
  check_direct_schedule(topo, n, o.algorithm, "--algo direct");
  if (o.check) {
    const int64_t largest = *std::max_element(req.sizes.begin(), req.sizes.end());
    check_host_memory(
        collective_host_bytes(n, static_cast<double>(largest)),
        "--check on " + std::to_string(n) + " ranks at " + sim::units::format_bytes(static_cast<uint64_t>(largest)));
  }
  out << "# ranksim bench collectives: " << o.op << " on " << n << " ranks of " << topo.name() << " ("
      << topo.num_nodes() << (topo.num_nodes() == 1 ? " node" : " nodes") << "), dtype " << dtype << ", algorithm "
      << o.algorithm << (o.protocol == "auto" ? "" : ", protocol " + o.protocol) << ", collectives timed by the "
      << (topo.collectives().model == sim::CollectiveTimingModel::nccl ? "nccl model" : "schedule on the network")
      << ", " << (o.check ? "real data, results checked" : "shape-only (timing only)") << "\n";
  if (!env.empty()) out << "# NCCL's environment, read as NCCL reads it: " << env.describe() << "\n";
  if (o.iters > 0 || o.warmup_iters >= 0)
    out << "# nccl-tests" << (o.iters > 0 ? " -n " + std::to_string(o.iters) : "")
        << (o.warmup_iters >= 0 ? " -w " + std::to_string(o.warmup_iters) : "")
        << ": ranksim times each size's call once, alone, where nccl-tests prints the mean of back-to-back calls "
           "(docs/collective-timing.md says where they overlap)\n";
  if (issue > 0) {
    char us[32];
    std::snprintf(us, sizeof us, "%.1f", issue * 1e6);
    out << "# one thread drives " << o.gpus_per_thread << " GPUs (nccl-tests -g " << o.gpus_per_thread
        << "): a call takes at least " << o.gpus_per_thread << " x group_launch = " << us << " us\n";
  }
  print_table_header(out);
  out.flush();
  int64_t total_wrong = 0;
  std::vector<TableRow> rows;  // for -J
  // Rows are printed as their sizes finish, and on a terminal a line on stderr says which size
  // runs (a 1,024-rank sweep with --check takes minutes).
  const ProgressLine progress(o.progress);
  req.on_size = [&](std::size_t i, std::size_t total, int64_t bytes) {
    progress.show("bench: size " + std::to_string(i + 1) + " of " + std::to_string(total) + " (" +
                  sim::units::format_bytes(static_cast<uint64_t>(bytes)) + ") on " + std::to_string(n) + " ranks");
  };
  (void)run_sweep(topo, req, [&](const SweepRow& r) {
    progress.clear();
    TableRow row;
    row.bytes = r.bytes;
    row.count = r.count;
    row.dtype = dtype;
    row.algorithm = r.algorithm;
    row.seconds = std::max(r.seconds, issue);
    row.wrong = r.wrong;
    if (r.wrong > 0) total_wrong += r.wrong;
    print_table_row(out, row, op.kind, n);
    out.flush();
    rows.push_back(row);
  });
  progress.clear();
  if (!o.output_file.empty()) {
    NcclTestsRun run;
    run.op = o.op;
    run.dtype = dtype;
    run.ranks = n;
    run.gpus_per_thread = o.gpus_per_thread;
    run.min_bytes = sweep.sizes.front();
    run.max_bytes = sweep.sizes.back();
    run.step_factor = sweep.step_factor;
    run.step_bytes = sweep.step_bytes;
    run.algorithm = o.algorithm;
    run.protocol = o.protocol;
    run.check = o.check;
    run.topology_file = o.topology;
    run.iters = o.iters;
    run.warmup_iters = o.warmup_iters;
    for (const std::string& g : env.given)
      if (g.rfind("NCCL_ALGO=", 0) != 0 && g.rfind("NCCL_PROTO=", 0) != 0) run.environment.push_back(g);
    const std::string text = nccl_tests_json(topo, run, rows);
    sim::write_file_atomically(o.output_file, [&](std::ostream& f) { f << text; });
    out << "# wrote " << o.output_file << " (nccl-tests' JSON layout)\n";
  }
  if (o.check)
    out << "# "
        << (total_wrong == 0 ? "all results correct" : "WRONG RESULTS: " + std::to_string(total_wrong) + " elements")
        << "\n";
  return total_wrong == 0 ? 0 : 1;
}

std::vector<SweepRow> run_sweep(const sim::Topology& topo, const SweepRequest& o,
                                const std::function<void(const SweepRow&)>& on_row) {
  const SweepOp op = find_op(o.op);
  const auto dtype = runtime::dtype_from_name(o.dtype);
  if (!dtype) throw Error("unknown dtype '" + o.dtype + "': expected f32, f64, bf16, f16, i64 or i32");
  const runtime::Algorithm algo = runtime::parse_algorithm(single_name(o.algorithm));
  const std::optional<sim::Protocol> protocol = parse_protocol_option(single_name(o.protocol));
  const std::optional<sim::NcclAllowed> lists = nccl_lists(o.algorithm, o.protocol);
  const int n = o.ranks > 0 ? o.ranks : topo.num_devices();
  if (n > topo.num_devices())
    throw Error(std::to_string(n) + " ranks are more than the " + std::to_string(topo.num_devices()) +
                " devices of topology '" + topo.name() + "'");
  if (op.sendrecv && n < 2) throw Error("sendrecv needs at least 2 ranks");
  const size_t esize = runtime::dtype_size(*dtype);
  // nccl-tests' size is the whole buffer: of every rank's share for these (a rank's, gather's
  // root's, scatter's root's), of one tensor for the others.
  const bool per_rank_share = op.kind == CollectiveKind::all_gather || op.kind == CollectiveKind::reduce_scatter ||
                              op.kind == CollectiveKind::all_to_all || op.kind == CollectiveKind::gather ||
                              op.kind == CollectiveKind::scatter;
  std::vector<SweepRow> rows;
  const std::function<void()> guard = host_memory_guard();  // one limit for the whole sweep
  for (const int64_t size : o.sizes) {
    if (o.on_size) o.on_size(rows.size(), o.sizes.size(), size);
    // Elements per rank: the whole buffer, or one rank's share of it.
    int64_t count = size / static_cast<int64_t>(esize);
    if (per_rank_share) count /= n;
    count = std::max<int64_t>(count, 1);
    int64_t wrong = 0;
    runtime::SpawnOptions so;
    so.topology = &topo;
    so.protocol = protocol;
    so.nccl_allowed = lists;
    so.guard = guard;
    so.engine.trace = false;
    so.engine.stack.size = 64 * 1024;
    // The expected sums, once per size: checking is linear in the data (it re-summed every
    // rank's inputs for every element of every rank, count x ranks^2, before).
    std::vector<double> sums;
    if (o.check && (op.kind == CollectiveKind::all_reduce || op.kind == CollectiveKind::reduce_scatter ||
                    op.kind == CollectiveKind::reduce)) {
      const int64_t elems = op.kind == CollectiveKind::reduce_scatter ? count * n : count;
      sums.assign(static_cast<size_t>(elems), 0.0);
      for (int q = 0; q < n; ++q) {
        for (int64_t e = 0; e < elems; ++e) sums[static_cast<size_t>(e)] += val(q, e);
      }
    }
    auto make = [&](int64_t elems) {
      return o.check ? Tensor::zeros({elems}, *dtype) : Tensor::shape_only({elems}, *dtype);
    };
    const runtime::RunReport rep = runtime::spawn(
        [&](int r) {
          runtime::CollectiveOptions base;
          base.algorithm = algo;
          auto fill = [&](const Tensor& t, int who, int64_t offset) {
            if (!o.check) return;
            std::vector<double> v(static_cast<size_t>(t.numel()));
            for (size_t e = 0; e < v.size(); ++e) v[e] = val(who, static_cast<int64_t>(e) + offset);
            t.copy_(Tensor::from_vector(v, t.shape(), *dtype));
          };
          auto verify = [&](const Tensor& t, const std::function<double(int64_t)>& want) {
            if (!o.check) return;
            const auto got = t.to_vector<double>();
            for (size_t e = 0; e < got.size(); ++e)
              if (got[e] != want(static_cast<int64_t>(e))) ++wrong;
          };
          auto sum_at = [&](int64_t e) { return sums[static_cast<size_t>(e)]; };
          switch (op.kind) {
            case CollectiveKind::all_reduce: {
              Tensor t = make(count);
              fill(t, r, 0);
              runtime::AllreduceOptions ao;
              static_cast<runtime::CollectiveOptions&>(ao) = base;
              runtime::all_reduce(t, ao);
              verify(t, sum_at);
              break;
            }
            case CollectiveKind::all_gather: {
              Tensor in = make(count), outp = make(count * n);
              fill(in, r, r * count);
              runtime::AllgatherOptions ao;
              static_cast<runtime::CollectiveOptions&>(ao) = base;
              runtime::all_gather_into_tensor(outp, in, ao);
              verify(outp, [&](int64_t e) { return val(static_cast<int>(e / count), e); });
              break;
            }
            case CollectiveKind::reduce_scatter: {
              Tensor in = make(count * n), outp = make(count);
              fill(in, r, 0);
              runtime::ReduceScatterOptions ro;
              static_cast<runtime::CollectiveOptions&>(ro) = base;
              runtime::reduce_scatter_tensor(outp, in, ro);
              verify(outp, [&](int64_t e) { return sum_at(r * count + e); });
              break;
            }
            case CollectiveKind::all_to_all: {
              Tensor in = make(count * n), outp = make(count * n);
              fill(in, r, 0);
              runtime::AllToAllOptions ao;
              static_cast<runtime::CollectiveOptions&>(ao) = base;
              runtime::all_to_all_single(outp, in, ao);
              // Block j of the output came from rank j's block r.
              verify(outp, [&](int64_t e) { return val(static_cast<int>(e / count), r * count + e % count); });
              break;
            }
            case CollectiveKind::reduce: {  // to rank 0, as nccl-tests' root 0
              Tensor t = make(count);
              fill(t, r, 0);
              runtime::ReduceOptions ro;
              static_cast<runtime::CollectiveOptions&>(ro) = base;
              runtime::reduce(t, ro);
              if (r == 0) verify(t, sum_at);
              break;
            }
            case CollectiveKind::gather: {  // rank r's block to block r of rank 0's list
              Tensor in = make(count);
              fill(in, r, r * count);
              std::vector<Tensor> blocks;
              for (int j = 0; r == 0 && j < n; ++j) blocks.push_back(make(count));
              runtime::GatherOptions go;
              static_cast<runtime::CollectiveOptions&>(go) = base;
              runtime::gather(in, blocks, go);
              for (int j = 0; j < static_cast<int>(blocks.size()); ++j)
                verify(blocks[static_cast<size_t>(j)], [&](int64_t e) { return val(j, j * count + e); });
              break;
            }
            case CollectiveKind::scatter: {  // block r of rank 0's list to rank r
              Tensor outp = make(count);
              std::vector<Tensor> blocks;
              for (int j = 0; r == 0 && j < n; ++j) {
                blocks.push_back(make(count));
                fill(blocks.back(), 0, j * count);
              }
              runtime::ScatterOptions sc;
              static_cast<runtime::CollectiveOptions&>(sc) = base;
              runtime::scatter(outp, blocks, sc);
              verify(outp, [&](int64_t e) { return val(0, r * count + e); });
              break;
            }
            default: {
              if (op.sendrecv) {
                Tensor s = make(count), d = make(count);
                fill(s, r, 0);
                auto works = runtime::batch_isend_irecv(
                    {{runtime::P2POp::Kind::isend, s, (r + 1) % n}, {runtime::P2POp::Kind::irecv, d, (r + n - 1) % n}});
                for (auto& w : works) w.wait();
                verify(d, [&](int64_t e) { return val((r + n - 1) % n, e); });
              } else {
                Tensor t = make(count);
                if (r == 0) fill(t, 0, 0);
                runtime::BroadcastOptions bo;
                static_cast<runtime::CollectiveOptions&>(bo) = base;
                runtime::broadcast(t, bo);
                verify(t, [&](int64_t e) { return val(0, e); });
              }
            }
          }
        },
        n, so);
    SweepRow row;
    row.count = per_rank_share ? count * n : count;
    row.bytes = row.count * static_cast<int64_t>(esize);
    if (op.sendrecv) {
      row.seconds = rep.makespan.seconds();
      row.algorithm = "p2p";
    } else {
      // From the collective's own start (the latest post): with --check, filling the inputs
      // charges a copy first, which is no part of the collective's time.
      const auto& rec = rep.collectives.at(0);
      row.seconds = (rec.end - rec.start).seconds();
      row.algorithm = runtime::algorithm_label(rec);
    }
    row.algbw = row.seconds > 0 ? static_cast<double>(row.bytes) / row.seconds : 0.0;
    row.busbw = row.algbw * busbw_factor(op.kind, n);
    row.wrong = o.check ? wrong : -1;
    rows.push_back(row);
    if (on_row) on_row(row);
  }
  return rows;
}

}  // namespace ranksim::app

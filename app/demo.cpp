#include "app/demo.h"

#include <chrono>
#include <cstdio>
#include <ostream>

#include "app/nccl_environment.h"
#include "app/nccl_table.h"
#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/cost.h"
#include "sim/error.h"
#include "sim/topology.h"
#include "sim/units.h"

namespace ranksim::app {

int demo(const DemoOptions& given, std::ostream& out) {
  // NCCL's tuning variables as `ranksim bench collectives` reads them (app/nccl_environment.h); the
  // demo's all_reduce has no algorithm option, so NCCL_ALGO and NCCL_PROTO are refused.
  const NcclEnvironment env = read_nccl_environment();
  if (!env.algorithm.empty() || !env.protocol.empty())
    throw Error("ranksim demo times its all_reduce by NCCL's own choice, and " + env.describe() +
                " is set in the environment: unset NCCL_ALGO / NCCL_PROTO, or time the call with ranksim bench "
                "collectives --op all_reduce");
  DemoOptions o = given;
  apply_nccl_sets(env, o.sets, "collectives.");
  const sim::Topology topo = sim::Topology::load_file(o.topology, o.sets);
  const int n = o.ranks > 0 ? o.ranks : topo.num_devices();
  if (n > topo.num_devices())
    throw Error("--ranks " + std::to_string(n) + " is more than the " + std::to_string(topo.num_devices()) +
                " devices of '" + o.topology + "'");
  const double g = static_cast<double>(o.gemm);
  const int64_t grad_elems = o.grad_bytes / 2;

  out << "ranksim demo: " << n << " ranks on " << topo.name() << " (" << topo.num_nodes()
      << (topo.num_nodes() == 1 ? " node, " : " nodes, ") << topo.kind_of(0).name << ")\n"
      << "  each rank: bf16 GEMM " << o.gemm << "x" << o.gemm << "x" << o.gemm << ", then all_reduce of "
      << sim::units::format_bytes(static_cast<uint64_t>(grad_elems * 2))
      << " of bf16 gradients, then barrier (shape-only: timed, no data)\n\n";

  runtime::SpawnOptions so;
  so.topology = &topo;
  so.engine.trace = !o.trace.empty();
  so.engine.stack.size = 64 * 1024;
  const auto wall0 = std::chrono::steady_clock::now();
  runtime::RunReport rep = runtime::spawn(
      [&](int) {
        // A GEMM reads two g x g operands and writes one: 2 g^3 FLOP, 3 g^2 elements of 2 bytes.
        sim::KernelShape gemm;
        gemm.cls = sim::KernelClass::gemm;
        gemm.m = gemm.n = gemm.k = static_cast<int64_t>(g);
        runtime::charge({"gemm", 2 * g * g * g, 3 * g * g * 2, runtime::DType::bf16, gemm});
        runtime::Tensor grads = runtime::Tensor::shape_only({grad_elems}, runtime::DType::bf16);
        runtime::all_reduce(grads);
        runtime::barrier();
      },
      n, so);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  char buf[200];
  std::snprintf(buf, sizeof buf, "%6s %14s %14s %14s\n", "rank", "clock", "compute", "comm");
  out << buf;
  const int shown = n <= 16 ? n : 8;
  for (int r = 0; r < shown; ++r) {
    std::snprintf(buf, sizeof buf, "%6d %14s %14s %14s\n", r, rep.clocks[static_cast<size_t>(r)].str().c_str(),
                  rep.compute[static_cast<size_t>(r)].str().c_str(), rep.comm[static_cast<size_t>(r)].str().c_str());
    out << buf;
  }
  if (shown < n) out << "   ... (" << n - shown << " more ranks)\n";
  out << "\n";
  print_table_header(out);
  for (const auto& rec : rep.collectives) {
    TableRow row;
    row.bytes = rec.bytes;
    row.count = rec.count;
    row.dtype = rec.dtype;
    row.algorithm = runtime::algorithm_label(rec);
    row.seconds = (rec.end - rec.start).seconds();
    out << std::string(runtime::to_string(rec.kind)) << ":\n";
    print_table_row(out, row, rec.kind, rec.group_size);
  }
  out << "\nvirtual time " << rep.makespan << " (the step on " << topo.name() << "); simulated in "
      << sim::Time::from_seconds(wall) << " of wall time, " << rep.events << " events\n";
  if (!o.trace.empty()) {
    rep.trace.save(o.trace);
    out << "trace: " << o.trace << " (open in ui.perfetto.dev)\n";
  }
  return 0;
}

}  // namespace ranksim::app

// SPDX-License-Identifier: Apache-2.0
// A worker program as torch.multiprocessing.spawn would run it, on ranksim's simulated ranks:
// every rank posts an async ring exchange (isend to the next rank, irecv from the previous) and
// an async all_reduce of its "gradients", computes while they are in flight, then waits on both
// and checks what arrived. Usage: worker [TOPOLOGY.yaml]  (default: an ideal node of 4 devices).
// Prints each rank's virtual finish time; exits 0 when every check holds, 1 otherwise.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "sim/engine.h"
#include "sim/topology.h"

namespace rt = ranksim::runtime;

int main(int argc, char** argv) {
  constexpr int kRanks = 4;
  try {
    std::optional<ranksim::sim::Topology> topology;
    rt::SpawnOptions opts;
    if (argc > 1) {
      topology = ranksim::sim::Topology::load_file(argv[1]);
      opts.topology = &*topology;
    }
    std::vector<std::string> failures(kRanks);
    const rt::RunReport report = rt::spawn(
        [&](int rank) {
          const int n = rt::get_world_size();
          const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
          // Post the communication, then compute while it is in flight.
          rt::Tensor mine = rt::Tensor::full({4096}, rank);
          rt::Tensor from_prev = rt::Tensor::zeros({4096});
          rt::Tensor grads = rt::Tensor::full({1 << 16}, rank + 1);
          std::vector<rt::Work> ring = rt::batch_isend_irecv(
              {rt::P2POp(rt::P2POp::Kind::isend, mine, next), rt::P2POp(rt::P2POp::Kind::irecv, from_prev, prev)});
          rt::AllreduceOptions async;
          async.async_op = true;
          const rt::Work reduced = rt::all_reduce(grads, async);
          const rt::Tensor a = rt::Tensor::full({256, 256}, 0.5);
          const rt::Tensor local = rt::matmul(a, a);  // overlaps the transfers in virtual time
          for (const rt::Work& w : ring) w.wait();
          reduced.wait();
          // Checks: the previous rank's values arrived; the sum of rank + 1 over every rank.
          const double want_sum = n * (n + 1) / 2.0;
          std::string& err = failures[static_cast<std::size_t>(rank)];
          if (from_prev.at({100}) != prev) err += "ring: got " + std::to_string(from_prev.at({100})) + "; ";
          if (grads.at({12345}) != want_sum) err += "all_reduce: got " + std::to_string(grads.at({12345})) + "; ";
          if (local.at({0, 0}) != 64.0) err += "matmul: got " + std::to_string(local.at({0, 0})) + "; ";
        },
        kRanks, opts);
    bool ok = true;
    for (int r = 0; r < kRanks; ++r) {
      const auto& err = failures[static_cast<std::size_t>(r)];
      std::printf("rank %d finished at %.3f us%s%s\n", r, report.clocks[static_cast<std::size_t>(r)].microseconds(),
                  err.empty() ? "" : ": ", err.c_str());
      ok = ok && err.empty();
    }
    std::printf("worker: %s (%zu collectives, makespan %.3f us)\n", ok ? "ok" : "FAILED", report.collectives.size(),
                report.makespan.microseconds());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 1;
  }
}

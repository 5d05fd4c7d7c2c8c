// Running one program on both backends and comparing what each rank recorded, byte for byte.
// The sim run (every rank on fibers in this process) is the reference; the mpi run is this
// process's rank of the job started by mpirun. Every process runs the same tests in the same
// order, so failures are reported with EXPECT (never an early return between collectives).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::mpitest {

using Bytes = std::vector<unsigned char>;

inline Bytes bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  return Bytes(p, p + c.nbytes());
}
inline Bytes bytes_of(double v) {
  Bytes b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

// program(rank, out) appends what rank produced to out.
using Program = std::function<void(int rank, std::vector<Bytes>& out)>;

// Runs program on every rank of the job under `backend`; returns each rank's outputs (under
// mpi, only this process's rank has any).
inline std::vector<std::vector<Bytes>> run_on(BackendKind backend, const Program& program, SpawnOptions so = {}) {
  const int n = mpi::world_size();
  std::vector<std::vector<Bytes>> out(static_cast<size_t>(n));
  so.backend = backend;
  so.engine.trace = false;
  spawn([&](int rank) { program(rank, out[static_cast<size_t>(rank)]); }, n, so);
  return out;
}

// The program's outputs on this process's rank are the same bytes under mpi as under sim;
// returns how many were compared.
inline size_t expect_mpi_matches_sim(const Program& program, const SpawnOptions& so = {}) {
  const int me = mpi::world_rank();
  const auto want = run_on(BackendKind::sim, program, so);
  const auto got = run_on(BackendKind::mpi, program, so);
  const auto& w = want[static_cast<size_t>(me)];
  const auto& g = got[static_cast<size_t>(me)];
  EXPECT_EQ(g.size(), w.size()) << "rank " << me;
  for (size_t k = 0; k < w.size() && k < g.size(); ++k)
    EXPECT_TRUE(g[k] == w[k]) << "rank " << me << ": output #" << k << " differs (" << g[k].size()
                              << " bytes under mpi, " << w[k].size() << " under sim)";
  for (size_t r = 0; r < got.size(); ++r) {
    if (static_cast<int>(r) != me) {
      EXPECT_TRUE(got[r].empty()) << "an mpi process ran rank " << r << " besides its own " << me;
    }
  }
  return w.size();
}

}  // namespace ranksim::runtime::mpitest

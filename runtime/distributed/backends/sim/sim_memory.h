// SimMemory: the sim backend's MemoryLedger (runtime/tensor/memory.h). It keeps, per rank of one
// engine, the bytes its live storages hold by MemoryKind and the peak of their sum, with what the
// peak was made of, when it was reached and the last op the rank had run. Storages created outside
// a rank of this engine are not counted. After close() (the run's report was taken) releases are
// ignored: tensors may outlive the run.
//
// Not thread-safe: everything runs on the engine's thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/distributed/run_report.h"
#include "runtime/tensor/memory.h"
#include "sim/engine.h"

namespace ranksim::runtime {

class SimMemory final : public MemoryLedger {
 public:
  SimMemory(sim::Engine& engine, int nranks, std::vector<uint64_t> capacity);

  Entry acquire(std::size_t nbytes) override;
  void release(const Entry& e, std::size_t nbytes) noexcept override;
  void retag(Entry& e, std::size_t nbytes, MemoryKind to) override;
  MemoryKind push_kind(MemoryKind k) override;
  void pop_kind(MemoryKind previous) override;

  // The op the rank ran last (the sim backend's charge), named at its peak.
  void ran(int rank, const char* op) { last_op_[static_cast<size_t>(rank)] = op; }
  std::vector<MemoryUse> report() const { return use_; }
  void close() { closed_ = true; }

 private:
  int rank_of_caller() const;
  void update_peak(int rank);

  sim::Engine& engine_;
  std::vector<MemoryUse> use_;
  std::vector<std::array<uint64_t, kMemoryKinds>> live_;
  std::vector<MemoryKind> kind_;
  std::vector<const char*> last_op_;
  bool closed_ = false;
};

}  // namespace ranksim::runtime

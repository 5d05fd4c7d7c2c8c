// SimMemory: the sim backend's MemoryLedger (runtime/tensor/memory.h). It keeps, per rank of one
// engine, the bytes its live storages hold by MemoryKind and the peak of their sum, with what the
// peak was made of, when it was reached, the last op the rank had run and its phase, and for the
// first kMemoryTimelineRanks ranks the bytes over time (run_report.h's MemoryUse). Storages
// created outside a rank of this engine are not counted. After close() (the run's report was
// taken) releases are ignored: tensors may outlive the run.
//
// Not thread-safe: everything runs on the engine's thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
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
  int push_phase(std::string_view label) override;
  void pop_phase(int previous) override;
  std::array<uint64_t, kMemoryKinds> in_use() const override;

  // The op the rank ran last (the sim backend's charge), named at its peak.
  void ran(int rank, const char* op) { last_op_[static_cast<size_t>(rank)] = op; }
  std::vector<MemoryUse> report() const;
  void close() { closed_ = true; }

 private:
  // The bytes over time of one rank: the most held at the current instant, the instants gathered
  // into the next kept sample (stride of them), and the samples kept.
  struct Series {
    MemorySample now, group;
    uint64_t now_total = 0, group_total = 0;
    bool has_now = false;
    std::size_t in_group = 0, stride = 1;
    std::vector<MemorySample> kept;
    void add(const MemorySample& s, uint64_t total);  // a finished instant
    std::vector<MemorySample> samples() const;        // kept, then what is pending
  };

  int rank_of_caller() const;
  void changed(int rank);  // after the rank's live bytes changed

  sim::Engine& engine_;
  std::vector<MemoryUse> use_;
  std::vector<std::array<uint64_t, kMemoryKinds>> live_;
  std::vector<MemoryKind> kind_;
  std::vector<const char*> last_op_, peak_op_;  // string literals (OpCost::op)
  std::vector<int> phase_, peak_phase_;         // indices into phases_; -1: none
  std::vector<std::string> phases_;
  std::unordered_map<std::string, int> phase_index_;
  std::vector<Series> series_;  // the first kMemoryTimelineRanks ranks
  bool closed_ = false;
};

}  // namespace ranksim::runtime

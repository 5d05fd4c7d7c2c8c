// Device-memory accounting: every tensor storage a rank creates is reported, with its bytes and
// what it holds, to the calling thread's MemoryLedger, and reported again when the last tensor
// using it goes away. The sim backend installs a ledger that keeps each rank's bytes over
// virtual time and its peak (runtime/distributed/run_report.h); with none installed (the
// default) nothing is counted.
//
// Shape-only tensors are counted exactly like tensors with data (their shape times their dtype's
// size), without host memory: that is how a shape-only run of a real layout says whether it fits.
// Views share their storage and count nothing more.
//
// What a storage holds is its MemoryKind: the kind of the innermost MemoryScope on the rank that
// created it (activations when none), or the kind retag_memory gives it later (a gradient is an
// op's output until the parameter keeps it).
//
// What a rank is doing is its phase: the label of its innermost MemoryPhase ("layer 3 backward",
// "optimizer step"; empty when none). The ledger names the phase of each rank's peak.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace ranksim::runtime {

class Tensor;

enum class MemoryKind : std::uint8_t { parameters, gradients, optimizer, activations, buffers };
inline constexpr int kMemoryKinds = 5;
const char* memory_kind_name(MemoryKind k);  // "parameters", ..., "activations", "buffers"

class MemoryLedger {
 public:
  virtual ~MemoryLedger();
  // A storage of nbytes comes into being; what acquire returns comes back to release. owner < 0:
  // not counted (created outside a rank).
  struct Entry {
    int owner = -1;
    MemoryKind kind = MemoryKind::activations;
  };
  virtual Entry acquire(std::size_t nbytes) = 0;
  virtual void release(const Entry& e, std::size_t nbytes) noexcept = 0;
  // Moves nbytes of e from its kind to `to` (e.kind is updated).
  virtual void retag(Entry& e, std::size_t nbytes, MemoryKind to) = 0;
  // The calling rank's kind for new storages: push returns the previous one, pop restores it.
  virtual MemoryKind push_kind(MemoryKind k) = 0;
  virtual void pop_kind(MemoryKind previous) = 0;
  // The calling rank's phase: push returns a token for the previous one, pop restores it.
  virtual int push_phase(std::string_view label) = 0;
  virtual void pop_phase(int previous) = 0;
  // The bytes the calling rank's live storages hold, by kind (zeros for a caller not counted).
  virtual std::array<std::uint64_t, kMemoryKinds> in_use() const = 0;
};

// Installs ledger for the calling thread and returns the previous one (nullptr: none).
std::shared_ptr<MemoryLedger> set_memory_ledger(std::shared_ptr<MemoryLedger> ledger);
const std::shared_ptr<MemoryLedger>& memory_ledger();

// Storages the calling rank creates in this scope hold `kind`.
class MemoryScope {
 public:
  explicit MemoryScope(MemoryKind kind);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  std::shared_ptr<MemoryLedger> ledger_;
  MemoryKind previous_ = MemoryKind::activations;
};

// While it lives, the calling rank is in phase `label` (nested phases: the innermost counts).
class MemoryPhase {
 public:
  explicit MemoryPhase(std::string_view label);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  std::shared_ptr<MemoryLedger> ledger_;
  int previous_ = -1;
};

// The bytes the calling rank holds now, by kind (indexed by MemoryKind); zeros with no ledger.
std::array<std::uint64_t, kMemoryKinds> memory_in_use();

// t's storage now holds `kind` (counted there from now on). Nothing for an undefined tensor or one
// not counted.
void retag_memory(const Tensor& t, MemoryKind kind);

}  // namespace ranksim::runtime

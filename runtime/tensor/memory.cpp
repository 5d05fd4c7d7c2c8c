#include "runtime/tensor/memory.h"

#include <utility>

namespace ranksim::runtime {

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::parameters:
      return "parameters";
    case MemoryKind::gradients:
      return "gradients";
    case MemoryKind::optimizer:
      return "optimizer";
    case MemoryKind::activations:
      return "activations";
    case MemoryKind::buffers:
      return "buffers";
  }
  return "?";
}

MemoryLedger::~MemoryLedger() = default;

namespace {
thread_local std::shared_ptr<MemoryLedger> t_ledger;
}  // namespace

std::shared_ptr<MemoryLedger> set_memory_ledger(std::shared_ptr<MemoryLedger> ledger) {
  return std::exchange(t_ledger, std::move(ledger));
}

const std::shared_ptr<MemoryLedger>& memory_ledger() { return t_ledger; }

MemoryScope::MemoryScope(MemoryKind kind) : ledger_(t_ledger) {
  if (ledger_) previous_ = ledger_->push_kind(kind);
}

MemoryScope::~MemoryScope() {
  if (ledger_) ledger_->pop_kind(previous_);
}

MemoryPhase::MemoryPhase(std::string_view label) : ledger_(t_ledger) {
  if (ledger_) previous_ = ledger_->push_phase(label);
}

MemoryPhase::~MemoryPhase() {
  if (ledger_) ledger_->pop_phase(previous_);
}

std::array<std::uint64_t, kMemoryKinds> memory_in_use() {
  if (!t_ledger) return {};
  return t_ledger->in_use();
}

}  // namespace ranksim::runtime

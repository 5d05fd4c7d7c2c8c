#include "runtime/distributed/backends/sim/sim_memory.h"

#include <numeric>

namespace ranksim::runtime {

SimMemory::SimMemory(sim::Engine& engine, int nranks, std::vector<uint64_t> capacity)
    : engine_(engine),
      use_(static_cast<size_t>(nranks)),
      live_(static_cast<size_t>(nranks)),
      kind_(static_cast<size_t>(nranks), MemoryKind::activations),
      last_op_(static_cast<size_t>(nranks), nullptr) {
  for (size_t r = 0; r < use_.size() && r < capacity.size(); ++r) use_[r].capacity = capacity[r];
  for (auto& l : live_) l.fill(0);
}

int SimMemory::rank_of_caller() const {
  if (closed_ || sim::Engine::current() != &engine_ || !engine_.in_rank()) return -1;
  return engine_.rank();
}

MemoryLedger::Entry SimMemory::acquire(std::size_t nbytes) {
  const int r = rank_of_caller();
  if (r < 0) return {};
  const Entry e{r, kind_[static_cast<size_t>(r)]};
  live_[static_cast<size_t>(r)][static_cast<size_t>(e.kind)] += nbytes;
  update_peak(r);
  return e;
}

void SimMemory::release(const Entry& e, std::size_t nbytes) noexcept {
  if (closed_ || e.owner < 0) return;
  live_[static_cast<size_t>(e.owner)][static_cast<size_t>(e.kind)] -= nbytes;
}

void SimMemory::retag(Entry& e, std::size_t nbytes, MemoryKind to) {
  if (closed_ || e.owner < 0) return;
  auto& live = live_[static_cast<size_t>(e.owner)];
  live[static_cast<size_t>(e.kind)] -= nbytes;
  live[static_cast<size_t>(to)] += nbytes;
  e.kind = to;
}

MemoryKind SimMemory::push_kind(MemoryKind k) {
  const int r = rank_of_caller();
  if (r < 0) return MemoryKind::activations;
  const MemoryKind previous = kind_[static_cast<size_t>(r)];
  kind_[static_cast<size_t>(r)] = k;
  return previous;
}

void SimMemory::pop_kind(MemoryKind previous) {
  const int r = rank_of_caller();
  if (r >= 0) kind_[static_cast<size_t>(r)] = previous;
}

void SimMemory::update_peak(int rank) {
  const auto& live = live_[static_cast<size_t>(rank)];
  const uint64_t total = std::accumulate(live.begin(), live.end(), uint64_t{0});
  MemoryUse& u = use_[static_cast<size_t>(rank)];
  if (total <= u.peak) return;
  u.peak = total;
  u.at_peak = live;
  u.peak_time = engine_.now();
  const char* op = last_op_[static_cast<size_t>(rank)];
  u.after_op = op ? op : "";
}

}  // namespace ranksim::runtime

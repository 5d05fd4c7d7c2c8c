#include "runtime/distributed/backends/sim/sim_memory.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace ranksim::runtime {

namespace {
uint64_t total_of(const std::array<uint64_t, kMemoryKinds>& bytes) {
  return std::accumulate(bytes.begin(), bytes.end(), uint64_t{0});
}
}  // namespace

SimMemory::SimMemory(sim::Engine& engine, int nranks, std::vector<uint64_t> capacity)
    : engine_(engine),
      use_(static_cast<size_t>(nranks)),
      live_(static_cast<size_t>(nranks)),
      kind_(static_cast<size_t>(nranks), MemoryKind::activations),
      last_op_(static_cast<size_t>(nranks), nullptr),
      peak_op_(static_cast<size_t>(nranks), nullptr),
      phase_(static_cast<size_t>(nranks), -1),
      peak_phase_(static_cast<size_t>(nranks), -1),
      series_(static_cast<size_t>(std::min(nranks, kMemoryTimelineRanks))) {
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
  changed(r);
  return e;
}

void SimMemory::release(const Entry& e, std::size_t nbytes) noexcept {
  if (closed_ || e.owner < 0) return;
  live_[static_cast<size_t>(e.owner)][static_cast<size_t>(e.kind)] -= nbytes;
  // The timeline records the drop at the owner's clock: only when the owner itself releases (not
  // the engine tearing down fibers, nor another rank dropping a shared tensor).
  if (static_cast<size_t>(e.owner) < series_.size() && rank_of_caller() == e.owner) {
    // Recording can allocate; a release must not throw. Without the sample the line only misses
    // this drop.
    try {
      changed(e.owner);
    } catch (...) {  // NOLINT(bugprone-empty-catch): see above
    }
  }
}

void SimMemory::retag(Entry& e, std::size_t nbytes, MemoryKind to) {
  if (closed_ || e.owner < 0) return;
  auto& live = live_[static_cast<size_t>(e.owner)];
  live[static_cast<size_t>(e.kind)] -= nbytes;
  live[static_cast<size_t>(to)] += nbytes;
  e.kind = to;
  if (rank_of_caller() == e.owner) changed(e.owner);  // the total is unchanged: no new peak elsewhere
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

int SimMemory::push_phase(std::string_view label) {
  const int r = rank_of_caller();
  if (r < 0) return -1;
  auto [it, added] = phase_index_.try_emplace(std::string(label), static_cast<int>(phases_.size()));
  if (added) phases_.push_back(it->first);
  return std::exchange(phase_[static_cast<size_t>(r)], it->second);
}

void SimMemory::pop_phase(int previous) {
  const int r = rank_of_caller();
  if (r >= 0) phase_[static_cast<size_t>(r)] = previous;
}

std::array<uint64_t, kMemoryKinds> SimMemory::in_use() const {
  const int r = rank_of_caller();
  if (r < 0) return {};
  return live_[static_cast<size_t>(r)];
}

void SimMemory::changed(int rank) {
  const size_t r = static_cast<size_t>(rank);
  const auto& live = live_[r];
  const uint64_t total = total_of(live);
  const sim::Time now = engine_.now();
  if (r < series_.size()) {
    Series& s = series_[r];
    if (s.has_now && s.now.time == now) {
      if (total > s.now_total) {
        s.now.bytes = live;
        s.now_total = total;
      }
    } else {
      if (s.has_now) s.add(s.now, s.now_total);
      s.now = MemorySample{now, live};
      s.now_total = total;
      s.has_now = true;
    }
  }
  MemoryUse& u = use_[r];
  if (total <= u.peak) return;
  u.peak = total;
  u.at_peak = live;
  u.peak_time = now;
  peak_op_[r] = last_op_[r];  // a string literal: made a std::string once, in report()
  peak_phase_[r] = phase_[r];
}

void SimMemory::Series::add(const MemorySample& s, uint64_t total) {
  if (in_group == 0 || total > group_total) {
    group = s;
    group_total = total;
  }
  if (++in_group < stride) return;
  kept.push_back(group);
  in_group = 0;
  if (kept.size() + 2 < kMemoryTimelineSamples) return;  // room for the two pending
  // Full: keep the larger of each pair, and gather twice as many instants per sample from now on.
  for (size_t i = 0; i < kept.size() / 2; ++i) {
    const MemorySample& a = kept[2 * i];
    const MemorySample& b = kept[2 * i + 1];
    kept[i] = total_of(b.bytes) > total_of(a.bytes) ? b : a;
  }
  kept.resize(kept.size() / 2);
  stride *= 2;
}

std::vector<MemorySample> SimMemory::Series::samples() const {
  std::vector<MemorySample> out = kept;
  if (in_group > 0) out.push_back(group);
  if (has_now) out.push_back(now);
  return out;
}

std::vector<MemoryUse> SimMemory::report() const {
  std::vector<MemoryUse> out = use_;
  for (size_t r = 0; r < out.size(); ++r) {
    if (peak_op_[r] != nullptr) out[r].after_op = peak_op_[r];
    if (peak_phase_[r] >= 0) out[r].phase = phases_[static_cast<size_t>(peak_phase_[r])];
    if (r < series_.size()) out[r].timeline = series_[r].samples();
  }
  return out;
}

}  // namespace ranksim::runtime

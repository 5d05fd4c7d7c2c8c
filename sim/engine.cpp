#include "sim/engine.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <utility>

#include "sim/check.h"

namespace ranksim::sim {

namespace {
thread_local Engine* tls_engine = nullptr;
constexpr size_t kMaxListed = 64;  // ranks listed in one error message before summarising

void list_blocked(std::ostream& os, const std::vector<BlockedRank>& blocked) {
  for (size_t i = 0; i < blocked.size() && i < kMaxListed; ++i)
    os << "\n  rank " << blocked[i].rank << " (clock " << blocked[i].clock << "): " << blocked[i].reason;
  if (blocked.size() > kMaxListed) os << "\n  ... and " << blocked.size() - kMaxListed << " more";
}

std::string failure_message(const std::vector<RankError>& errors, const std::vector<BlockedRank>& waiting) {
  std::ostringstream os;
  os << errors.size() << (errors.size() == 1 ? " rank" : " ranks") << " failed:";
  for (size_t i = 0; i < errors.size() && i < kMaxListed; ++i)
    os << "\n  rank " << errors[i].rank << ": " << errors[i].message;
  if (errors.size() > kMaxListed) os << "\n  ... and " << errors.size() - kMaxListed << " more";
  if (!waiting.empty()) {
    os << "\nWhen the run stopped, " << waiting.size() << (waiting.size() == 1 ? " rank was" : " ranks were")
       << " blocked:";
    list_blocked(os, waiting);
  }
  return os.str();
}

std::string deadlock_message(Time at, int nranks, const std::vector<BlockedRank>& blocked) {
  std::ostringstream os;
  os << "deadlock at virtual time " << at << ": " << blocked.size() << " of " << nranks
     << " ranks are blocked and nothing is left that could wake them:";
  list_blocked(os, blocked);
  os << "\nCheck that every rank of a group calls the same collectives in the same order and that "
        "every recv has a matching send.";
  return os.str();
}
}  // namespace

RankFailure::RankFailure(std::vector<RankError> errors, std::vector<BlockedRank> waiting)
    : Error(failure_message(errors, waiting)), errors_(std::move(errors)), waiting_(std::move(waiting)) {}

DeadlockError::DeadlockError(Time at, int nranks, std::vector<BlockedRank> blocked)
    : Error(deadlock_message(at, nranks, blocked)), blocked_(std::move(blocked)) {}

Engine::Engine(EngineOptions options) : options_(options), stacks_(options.stack) {}

Engine::~Engine() {
  // run() always unwinds its ranks before returning or throwing; this is a last resort for an
  // engine destroyed while run() is still on the stack of an outer fiber that is being unwound.
  if (unfinished_ > 0) abort_unfinished();
}

Engine* Engine::current() { return tls_engine; }

void Engine::run(int nranks, std::function<void(int rank)> body) {
  if (ran_) throw Error("Engine::run called twice: an Engine runs once; create a new one per run");
  if (nranks < 1) throw Error("Engine::run needs at least one rank, got " + std::to_string(nranks));
  ran_ = true;
  body_ = std::move(body);
  ranks_.resize(static_cast<size_t>(nranks));
  unfinished_ = nranks;
  if (options_.trace) trace_.set_num_ranks(nranks);
  queue_.reserve(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    fibers_.emplace_back(stacks_, [this, r] { trampoline(r); });
    queue_.push(Time::zero(), static_cast<uint64_t>(r));
  }
  for (Fault& f : faults_) {
    RANKSIM_CHECK(f.rank >= 0 && f.rank < nranks, "injected fault for a rank outside the run");
    Rank& rk = ranks_[static_cast<size_t>(f.rank)];
    if (f.at >= rk.fault_at) continue;  // the earlier fault wins
    rk.fault_at = f.at;
    rk.fault_stop = f.stop;
    rk.fault_what = std::move(f.what);
    // A rank blocked when its fault's time comes: a failing one is woken then to throw; a
    // stopping one stays blocked, its reason now the fault. A rank woken for a later time runs
    // at the fault's time instead.
    call_at(f.at, [this, r = f.rank] {
      Rank& b = ranks_[static_cast<size_t>(r)];
      if (b.fault_fired) return;
      if (b.state == State::ready) {
        // Woken for later (a collective that completes after the fault): it runs now instead, to
        // fail or stop at the fault's time; the later event finds it failed or stopped and is dropped.
        queue_.push(queue_.now(), static_cast<uint64_t>(r));
        return;
      }
      if (b.state != State::blocked) return;
      if (b.fault_stop) {
        b.fault_fired = true;
        b.clock = max(b.clock, queue_.now());  // it stops now
        std::string why = b.fault_what + " at virtual time " + queue_.now().str();
        b.reason = [why = std::move(why), was = std::move(b.reason)] {
          return why + (was ? "; it was waiting in: " + was() : std::string());
        };
      } else {
        wake(r, queue_.now());
      }
    });
  }
  faults_.clear();

  Time fail_time;
  using Clock = std::chrono::steady_clock;
  Clock::time_point next_report =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(progress_every_));
  while (!queue_.empty()) {
    if (guard_ && (stats_.events & 0xFFFF) == 0 && stats_.events > 0) {
      try {
        guard_();
      } catch (...) {
        abort_unfinished();
        throw;
      }
    }
    if (progress_ && (stats_.events & 0xFFFF) == 0 && Clock::now() >= next_report) {
      progress_(Progress{stats_.events, num_ranks() - unfinished_, num_ranks(), queue_.now()});
      next_report =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(progress_every_));
    }
    if (!failures_.empty() && queue_.top().time > fail_time) break;
    const Event e = queue_.pop();
    ++stats_.events;
    if (e.payload & kCallbackBit) {
      const auto slot = static_cast<uint32_t>(e.payload & ~kCallbackBit);
      std::function<void()> fn = std::move(callbacks_[slot]);
      callbacks_[slot] = nullptr;
      free_callbacks_.push_back(slot);
      ++stats_.callbacks;
      try {
        fn();
      } catch (...) {
        abort_unfinished();
        throw;
      }
    } else {
      const auto r = static_cast<int>(e.payload);
      Rank& rk = ranks_[static_cast<size_t>(r)];
      if (rk.fault_fired && rk.state != State::ready) continue;  // superseded by its fault (inject_fault)
      RANKSIM_CHECK(rk.state == State::ready, "event for a rank that is not ready");
      rk.clock = max(rk.clock, e.time);
      const bool had_failures = !failures_.empty();
      resume_rank(r);
      if (!had_failures && !failures_.empty()) fail_time = e.time;
    }
  }

  if (!failures_.empty()) {
    std::vector<BlockedRank> waiting = blocked_ranks();
    abort_unfinished();
    std::vector<RankError> errors = std::move(failures_);
    std::stable_sort(errors.begin(), errors.end(),
                     [](const RankError& a, const RankError& b) { return a.rank < b.rank; });
    throw RankFailure(std::move(errors), std::move(waiting));
  }
  if (unfinished_ > 0) throw_deadlock();
}

void Engine::trampoline(int r) {
  Rank& rk = ranks_[static_cast<size_t>(r)];
  if (aborting_) {  // aborted before it ever ran
    rk.state = State::cancelled;
    --unfinished_;
    return;
  }
  try {
    body_(r);
    rk.state = State::finished;
  } catch (const RankCancelled&) {
    rk.state = State::cancelled;
  } catch (const boost::context::detail::forced_unwind&) {
    throw;  // boost::context's own unwinding must pass through
  } catch (const std::exception& ex) {
    rk.state = State::failed;
    failures_.push_back(RankError{r, ex.what(), std::current_exception()});
  } catch (...) {
    rk.state = State::failed;
    failures_.push_back(RankError{r, "unknown exception (not derived from std::exception)", std::current_exception()});
  }
  --unfinished_;
}

void Engine::resume_rank(int r) {
  Rank& rk = ranks_[static_cast<size_t>(r)];
  rk.state = State::running;
  current_ = r;
  Engine* const outer = tls_engine;
  tls_engine = this;
  ++stats_.resumes;
  fibers_[static_cast<size_t>(r)].resume();
  tls_engine = outer;
  current_ = -1;
}

void Engine::switch_out() {
  const int r = current_;
  fibers_[static_cast<size_t>(r)].suspend();
  // Resumed: resume_rank() has set current_ and the state again.
  if (aborting_) throw RankCancelled{};
  if (ranks_[static_cast<size_t>(r)].clock >= ranks_[static_cast<size_t>(r)].fault_at) check_fault();
}

void Engine::inject_fault(int rank, Time at, bool stop, std::string what) {
  RANKSIM_CHECK(!ran_, "Engine::inject_fault after run()");
  RANKSIM_CHECK(at >= Time::zero(), "injected fault at a negative time");
  faults_.push_back(Fault{rank, at, stop, std::move(what)});
}

void Engine::check_fault() {
  Rank& rk = ranks_[static_cast<size_t>(current_)];
  if (rk.clock < rk.fault_at) return;
  if (!rk.fault_stop) {
    if (rk.fault_fired) return;  // fails once (rank code that catches the error goes on)
    rk.fault_fired = true;
    throw InjectedFault(rk.fault_what + " at virtual time " + rk.clock.str());
  }
  if (!rk.fault_fired) {
    rk.fault_fired = true;
    std::string why = rk.fault_what + " at virtual time " + rk.clock.str();
    rk.reason = [why = std::move(why)] { return why; };
  }
  // Stopped: blocked for good; whatever wakes it finds it blocked again.
  for (;;) {
    rk.state = State::blocked;
    fibers_[static_cast<size_t>(current_)].suspend();
    if (aborting_) throw RankCancelled{};
  }
}

std::vector<BlockedRank> Engine::blocked_ranks() const {
  std::vector<BlockedRank> blocked;
  for (int r = 0; r < num_ranks(); ++r) {
    const Rank& rk = ranks_[static_cast<size_t>(r)];
    if (rk.state == State::blocked)
      blocked.push_back(BlockedRank{r, rk.clock, rk.reason ? rk.reason() : std::string()});
  }
  return blocked;
}

Time Engine::now() const {
  RANKSIM_CHECK(in_rank(), "Engine::now() outside a rank");
  return ranks_[static_cast<size_t>(current_)].clock;
}

void Engine::advance(Time dt) {
  RANKSIM_CHECK(in_rank(), "Engine::advance() outside a rank");
  RANKSIM_CHECK(dt >= Time::zero(), "advance by a negative time");
  Rank& rk = ranks_[static_cast<size_t>(current_)];
  rk.clock += dt;
  if (rk.clock >= rk.fault_at && !rk.fault_fired) {
    rk.clock = max(rk.fault_at, rk.clock - dt);  // the work is cut at the fault
    check_fault();
  }
}

void Engine::yield() {
  RANKSIM_CHECK(in_rank(), "Engine::yield() outside a rank");
  if (aborting_) throw RankCancelled{};
  Rank& rk = ranks_[static_cast<size_t>(current_)];
  if (rk.clock >= rk.fault_at) check_fault();
  rk.state = State::ready;
  queue_.push(rk.clock, static_cast<uint64_t>(current_));
  switch_out();
}

void Engine::sleep_until(Time t) {
  RANKSIM_CHECK(in_rank(), "Engine::sleep_until() outside a rank");
  Rank& rk = ranks_[static_cast<size_t>(current_)];
  if (rk.clock < rk.fault_at && t >= rk.fault_at && !rk.fault_fired) {  // the sleep is cut at the fault
    rk.clock = rk.fault_at;
    check_fault();
  }
  rk.clock = max(rk.clock, t);
  yield();
}

Time Engine::block(std::string reason) {
  return block(std::function<std::string()>([r = std::move(reason)] { return r; }));
}

Time Engine::block(std::function<std::string()> describe) {
  RANKSIM_CHECK(in_rank(), "Engine::block() outside a rank");
  if (aborting_) throw RankCancelled{};
  Rank& rk = ranks_[static_cast<size_t>(current_)];
  if (rk.clock >= rk.fault_at) check_fault();
  const Time since = rk.clock;
  rk.state = State::blocked;
  rk.reason = std::move(describe);
  switch_out();
  rk.reason = nullptr;
  return rk.clock - since;
}

void Engine::wake(int r, Time at) {
  RANKSIM_CHECK(r >= 0 && r < num_ranks(), "wake of a rank outside the run");
  Rank& rk = ranks_[static_cast<size_t>(r)];
  if (rk.state == State::failed || rk.state == State::cancelled) return;  // an injected fault ended it
  RANKSIM_CHECK(rk.state == State::blocked, "wake of a rank that is not blocked");
  rk.state = State::ready;
  queue_.push(max(at, queue_.now()), static_cast<uint64_t>(r));
}

void Engine::call_at(Time t, std::function<void()> fn) {
  uint32_t slot;
  if (!free_callbacks_.empty()) {
    slot = free_callbacks_.back();
    free_callbacks_.pop_back();
    callbacks_[slot] = std::move(fn);
  } else {
    slot = static_cast<uint32_t>(callbacks_.size());
    callbacks_.push_back(std::move(fn));
  }
  queue_.push(t, kCallbackBit | slot);
}

bool Engine::is_blocked(int r) const { return ranks_[static_cast<size_t>(r)].state == State::blocked; }

Time Engine::makespan() const {
  Time t;
  for (const Rank& rk : ranks_) t = max(t, rk.clock);
  return t;
}

void Engine::abort_unfinished() {
  aborting_ = true;
  for (int r = 0; r < num_ranks() && unfinished_ > 0; ++r) {
    const State s = ranks_[static_cast<size_t>(r)].state;
    if (s == State::ready || s == State::blocked) resume_rank(r);
  }
  queue_.clear();
  callbacks_.clear();
  free_callbacks_.clear();
}

void Engine::throw_deadlock() {
  std::vector<BlockedRank> blocked = blocked_ranks();
  Time at = queue_.now();  // when the last rank stopped moving
  for (const Rank& rk : ranks_) at = max(at, rk.clock);
  abort_unfinished();
  throw DeadlockError(at, num_ranks(), std::move(blocked));
}

namespace this_rank {

Engine& engine() {
  Engine* e = Engine::current();
  if (e == nullptr || !e->in_rank())
    throw Error("this_rank:: called outside a rank: call it from code run by Engine::run/spawn");
  return *e;
}
int rank() { return engine().rank(); }
int world_size() { return engine().num_ranks(); }
Time now() { return engine().now(); }
void yield() { engine().yield(); }
void sleep_for(Time d) {
  Engine& e = engine();
  e.sleep_until(e.now() + d);
}
void sleep_until(Time t) { engine().sleep_until(t); }

}  // namespace this_rank

}  // namespace ranksim::sim

// Engine: runs N ranks as cooperative fibers on one thread, on a discrete-event virtual clock.
//
// Each rank is a fiber with its own clock. Code in a rank advances its clock by computing
// (advance(), no switch) and gives up the CPU only at explicit points: yield(), sleep_until(),
// block(). The engine pops events in (time, sequence) order and resumes the rank each one names,
// so the interleaving is a pure function of the program: the same inputs give the same order of
// events, clocks and traces on every run and machine. Nothing here knows what a tensor or a
// collective is; the runtime builds those from two primitives: block() the current rank with a
// reason, and wake() a rank at a virtual time (from another rank or from a driver callback
// scheduled with call_at()).
//
// Clocks: a rank resumed by an event at time t continues at max(its clock, t); clocks never go
// backwards. A rank's clock may run ahead of the engine's current event time while it computes.
//
// Errors:
// - An exception thrown by rank code aborts the run. Events at the same virtual instant still
//   run (so ranks failing together are all reported), then every unfinished rank is unwound:
//   its pending yield()/block() throws RankCancelled, which rank code must not swallow. run()
//   then throws RankFailure listing every failed rank with its message.
//   RankFailure also lists the ranks that were blocked when the run stopped, with what they were
//   waiting for (as an NCCL watchdog names the collective each rank was stuck in).
// - When no event is pending and ranks are still blocked, the run is deadlocked: run() unwinds
//   them and throws DeadlockError listing each blocked rank, its clock and its block reason.
// - Injected faults (inject_fault): a rank fails (throws InjectedFault) or stops (blocks for
//   good) at a virtual time: at the first point where its clock reaches that time: inside
//   advance() (the clock is cut back to the fault's time), at yield/sleep/block, or, if the rank
//   is blocked then, at exactly that time (a failing rank is woken to throw; a stopping one stays
//   blocked, and is kept blocked should anything wake it later).
//
// Ownership: an Engine is an object owned by its run; two engines (even nested, one running
// inside a rank of the other) do not share state. this_rank:: functions talk to the engine that
// is running the calling fiber. An Engine runs once: construct a new one for another run.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/error.h"
#include "sim/event_queue.h"
#include "sim/fiber.h"
#include "sim/time.h"
#include "sim/trace.h"

namespace ranksim::sim {

struct EngineOptions {
  // Fiber stacks. Default: 256 KiB, guard pages in debug/asan builds.
  StackOptions stack;
  // Record trace spans (the runtime consults this before recording). Default: true.
  bool trace = true;
};

// One rank's failure inside RankFailure.
struct RankError {
  int rank;
  std::string message;
  std::exception_ptr exception;
};

struct BlockedRank {
  int rank;
  Time clock;
  std::string reason;
};

class RankFailure : public Error {
 public:
  explicit RankFailure(std::vector<RankError> errors, std::vector<BlockedRank> waiting = {});
  const std::vector<RankError>& errors() const { return errors_; }
  // The ranks that were blocked when the failure stopped the run, and what each waited for.
  const std::vector<BlockedRank>& waiting() const { return waiting_; }

 private:
  std::vector<RankError> errors_;
  std::vector<BlockedRank> waiting_;
};

// What a rank throws when an injected fault makes it fail (Engine::inject_fault).
class InjectedFault : public Error {
 public:
  using Error::Error;
};

class DeadlockError : public Error {
 public:
  DeadlockError(Time at, int nranks, std::vector<BlockedRank> blocked);
  const std::vector<BlockedRank>& blocked() const { return blocked_; }

 private:
  std::vector<BlockedRank> blocked_;
};

// Thrown inside a rank's pending yield()/block() when the run is aborted. Not an Error: rank
// code that catches (...) must rethrow it.
struct RankCancelled {};

struct EngineStats {
  uint64_t events = 0;     // events popped
  uint64_t resumes = 0;    // driver -> fiber switches
  uint64_t callbacks = 0;  // driver callbacks run
};

class Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs body(rank) for every rank in [0, nranks) until all return. REQUIRES: called once.
  // Throws RankFailure, DeadlockError, or (nranks < 1) Error.
  void run(int nranks, std::function<void(int rank)> body);

  // ---- For code running in a rank of this engine (REQUIRES: in_rank()).
  int rank() const { return current_; }
  Time now() const;
  // Moves the current rank's clock forward by dt (>= 0) without switching.
  void advance(Time dt);
  // Lets every event up to the current rank's clock run, then continues.
  void yield();
  // Continues at max(clock, t).
  void sleep_until(Time t);
  // Suspends the current rank until wake(); `reason` is shown in deadlock reports (say what the
  // rank waits for: op, group, call number, shape). Returns the time spent blocked.
  Time block(std::string reason);
  // The same, with the reason computed only if a deadlock report needs it (so it can say what
  // is still missing at that moment, and costs nothing otherwise).
  Time block(std::function<std::string()> describe);

  // A slot for the layer above (the runtime keeps its per-run world here). Default: nullptr.
  void set_context(void* context) { context_ = context; }
  void* context() const { return context_; }

  // Before run(): `rank` fails (throws InjectedFault(what + " at virtual time T")) or, with stop,
  // stops for good (blocked, reason `what`) once its clock reaches `at` (see Errors above). One
  // fault per rank; the earlier wins. REQUIRES: not yet running.
  void inject_fault(int rank, Time at, bool stop, std::string what);

  // ---- From a rank or a callback of this engine.
  // Resumes a blocked rank at virtual time max(at, current event time). A rank that has failed or
  // been cancelled (by an injected fault, say) is left as it is.
  // REQUIRES: is_blocked(rank), or the rank has failed.
  void wake(int rank, Time at);
  // Runs fn on the driver (not in a rank) when virtual time reaches t (>= current event time).
  void call_at(Time t, std::function<void()> fn);
  // Time of the event being processed.
  Time event_time() const { return queue_.now(); }

  // When an injected fault stops `rank` (inject_fault with stop), else Time::max(). Valid once
  // run() has begun.
  Time stop_time(int rank) const {
    const Rank& rk = ranks_[static_cast<size_t>(rank)];
    return rk.fault_stop ? rk.fault_at : Time::max();
  }
  bool in_rank() const { return current_ >= 0; }
  int num_ranks() const { return static_cast<int>(ranks_.size()); }
  Time clock(int rank) const { return ranks_[static_cast<size_t>(rank)].clock; }
  bool is_blocked(int rank) const;
  // Latest rank clock once the run has finished.
  Time makespan() const;
  const EngineStats& stats() const { return stats_; }

  // Progress reports for long runs: fn is called on the driver about every `every` of wall time
  // (checked every 64 Ki events) with the events so far, finished ranks and the current event
  // time. Display only: it cannot change what the run does. Default: none.
  struct Progress {
    uint64_t events;
    int finished;
    int ranks;
    Time now;
  };
  void set_progress(std::function<void(const Progress&)> fn, double every_seconds = 1.0) {
    progress_ = std::move(fn);
    progress_every_ = every_seconds;
  }
  // A check of the process's resources, called on the driver every 64 Ki events (a guard that
  // reads the resident memory, say). When it throws, the run stops: its ranks are unwound and
  // run() rethrows. Default: none.
  void set_guard(std::function<void()> check) { guard_ = std::move(check); }
  const EngineOptions& options() const { return options_; }
  const StackPool& stacks() const { return stacks_; }
  Trace& trace() { return trace_; }
  const Trace& trace() const { return trace_; }

  // The engine running the calling fiber, or nullptr outside any rank.
  static Engine* current();

 private:
  enum class State : uint8_t { ready, running, blocked, finished, failed, cancelled };
  struct Rank {
    Time clock;
    State state = State::ready;
    std::function<std::string()> reason;
    // An injected fault: its time (Time::max(): none), whether the rank stops (else fails), what.
    Time fault_at = Time::max();
    bool fault_stop = false;
    bool fault_fired = false;
    std::string fault_what;
  };
  static constexpr uint64_t kCallbackBit = uint64_t{1} << 63;

  void trampoline(int rank);
  void switch_out();  // current rank -> driver; throws RankCancelled when aborting
  void resume_rank(int rank);
  void abort_unfinished();
  // The current rank's fault, if its clock has reached it: throws InjectedFault or stops forever.
  void check_fault();
  [[noreturn]] void stop_forever();
  std::vector<BlockedRank> blocked_ranks() const;
  [[noreturn]] void throw_deadlock();

  EngineOptions options_;
  StackPool stacks_;
  EventQueue queue_;
  std::vector<Rank> ranks_;
  std::deque<Fiber> fibers_;
  std::vector<std::function<void()>> callbacks_;
  std::vector<uint32_t> free_callbacks_;
  std::function<void(int)> body_;
  std::vector<RankError> failures_;
  struct Fault {
    int rank;
    Time at;
    bool stop;
    std::string what;
  };
  std::vector<Fault> faults_;  // injected before run()
  Trace trace_;
  EngineStats stats_;
  int current_ = -1;
  int unfinished_ = 0;
  bool ran_ = false;
  bool aborting_ = false;
  void* context_ = nullptr;
  std::function<void(const Progress&)> progress_;
  std::function<void()> guard_;
  double progress_every_ = 1.0;
};

// The current rank's view of its engine, in the spirit of SimGrid's this_actor::.
// Each REQUIRES being called from inside a rank (else throws ranksim::Error).
namespace this_rank {
Engine& engine();
int rank();
int world_size();
Time now();
void yield();
void sleep_for(Time d);
void sleep_until(Time t);
}  // namespace this_rank

}  // namespace ranksim::sim

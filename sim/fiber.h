// Fiber and StackPool: the cooperative execution contexts that ranks run on.
//
// A Fiber runs a body on its own stack and switches to and from the driver (the thread's
// original stack) only at explicit points: the driver calls resume(), the body calls suspend().
// This is the one place where stacks are switched, so it is also the one place that tells
// AddressSanitizer about the switch (__sanitizer_start/finish_switch_fiber), as SimGrid's
// swapped contexts do; everything above it is sanitizer-agnostic.
//
// Stacks come from a StackPool: carved from large anonymous mappings (MAP_NORESERVE, so only the
// pages a fiber touches cost memory) and recycled when a fiber ends. With guard pages on (the
// default in debug and asan builds) each stack has an inaccessible page below it, so an overflow
// faults at once instead of corrupting a neighbour; each guard splits the mapping, and Linux
// limits mappings per process (vm.max_map_count, 65530 by default), so guard pages cap a run at
// about 32,000 live fibers — the pool says so in its error rather than failing obscurely.
//
// Thread rules: a Fiber and its pool belong to one thread. The body must not let an exception
// escape (the Engine catches everything in its rank trampoline).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <boost/context/fiber.hpp>

namespace ranksim::sim {

#ifdef RANKSIM_GUARD_PAGES_DEFAULT
inline constexpr bool kGuardPagesDefault = true;
#else
inline constexpr bool kGuardPagesDefault = false;
#endif

struct StackOptions {
  // Usable bytes per stack, rounded up to whole pages. Default: 256 KiB. Rank code that keeps
  // big arrays on the stack needs more; a million tiny ranks fit in 16 KiB.
  size_t size = 256 * 1024;
  // An inaccessible page below each stack. Default: on in debug and asan builds, off in release.
  bool guard_page = kGuardPagesDefault;
  // Measure how deep the fibers' stacks went (StackPool::high_water): each stack is filled with
  // a pattern when handed out and scanned when given back. It writes every page of every stack,
  // so it is for tests and diagnostics, not for runs of many ranks.
  bool measure = false;
};

class StackPool {
 public:
  explicit StackPool(StackOptions options = {});
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  // Throws ranksim::Error when the address space or the mapping limit is exhausted.
  boost::context::stack_context allocate();
  void deallocate(boost::context::stack_context& sctx) noexcept;

  size_t stack_size() const { return stack_bytes_; }
  size_t in_use() const { return in_use_; }
  size_t mapped_bytes() const { return mapped_bytes_; }
  // With StackOptions::measure: the most bytes any stack given back so far had written (from its
  // top down); 0 otherwise.
  size_t high_water() const { return high_water_; }

 private:
  void grow();

  StackOptions options_;
  size_t page_ = 0;
  size_t stack_bytes_ = 0;  // usable, page-rounded
  size_t slot_bytes_ = 0;   // usable + guard
  size_t slots_per_slab_ = 0;
  std::vector<std::pair<void*, size_t>> slabs_;
  std::vector<char*> free_tops_;  // highest address of each free stack
  size_t in_use_ = 0;
  size_t mapped_bytes_ = 0;
  size_t high_water_ = 0;
};

class Fiber {
 public:
  // Allocates the stack now; the body first runs at the first resume().
  Fiber(StackPool& pool, std::function<void()> body);
  ~Fiber();  // REQUIRES: the body has finished or never started.
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Driver side: runs the body until it calls suspend() or returns. REQUIRES: !finished().
  void resume();
  // Body side: returns control to the driver that resumed this fiber.
  void suspend();
  bool started() const { return started_; }
  bool finished() const { return finished_; }

 private:
  boost::context::fiber context_;  // this fiber while it is suspended
  boost::context::fiber caller_;   // the driver while this fiber runs
  std::function<void()> body_;
  bool started_ = false;
  bool finished_ = false;
  // AddressSanitizer bookkeeping (unused in other builds).
  void* fake_stack_ = nullptr;
  const void* stack_bottom_ = nullptr;
  size_t stack_size_ = 0;
  const void* caller_bottom_ = nullptr;
  size_t caller_size_ = 0;
};

}  // namespace ranksim::sim

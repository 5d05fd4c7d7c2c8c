// EventQueue: the pending events of a discrete-event run, ordered by (time, sequence number).
//
// The sequence number is assigned at push, so events at equal times pop in the order they were
// pushed (FIFO) and every run of the same program pops the same sequence. Time never goes
// backwards: pushing an event earlier than the last popped one is a programming error and is
// checked in every build. An event carries a 64-bit payload whose meaning belongs to the owner
// (the Engine uses it for "resume rank r" or "run callback k").
//
// Costs: events at the current time (a rank that yields without advancing its clock, the common
// case) go to a FIFO and cost O(1); later events go to a 4-ary heap, O(log n) push and pop. The
// two are merged by (time, sequence), so the order is exactly that of a single heap. Not
// thread-safe; one queue belongs to one Engine, driven by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/time.h"

namespace ranksim::sim {

struct Event {
  Time time;
  uint64_t seq = 0;
  uint64_t payload = 0;
};

class EventQueue {
 public:
  // REQUIRES: t >= now().
  void push(Time t, uint64_t payload);
  // REQUIRES: !empty(). Advances now() to the event's time.
  Event pop();
  // REQUIRES: !empty().
  const Event& top() const;
  bool empty() const { return heap_.empty() && fifo_head_ == fifo_.size(); }
  size_t size() const { return heap_.size() + (fifo_.size() - fifo_head_); }
  // Time of the last popped event (zero before the first pop).
  Time now() const { return now_; }
  void reserve(size_t n) { heap_.reserve(n); }
  void clear();

 private:
  static bool later(const Event& a, const Event& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  bool fifo_first() const;
  void sift_up(size_t i);
  void sift_down(size_t i);

  std::vector<Event> heap_;
  std::vector<Event> fifo_;  // events at now_, in push order; consumed from fifo_head_
  size_t fifo_head_ = 0;
  uint64_t next_seq_ = 0;
  Time now_;
};

}  // namespace ranksim::sim

#include "sim/event_queue.h"

#include <algorithm>

#include "sim/check.h"

namespace ranksim::sim {

void EventQueue::push(Time t, uint64_t payload) {
  RANKSIM_CHECK(t >= now_, "event scheduled in the past");
  const Event e{t, next_seq_++, payload};
  if (t == now_) {
    // Everything in the FIFO is at now_ and has a larger sequence than the heap's events at
    // now_ pushed earlier, so appending keeps (time, seq) order.
    fifo_.push_back(e);
    return;
  }
  heap_.push_back(e);
  sift_up(heap_.size() - 1);
}

// A 4-ary heap: half the depth of a binary heap, and a node's children share a cache line or
// two, which matters once a run holds hundreds of thousands of pending events.
void EventQueue::sift_up(size_t i) {
  const Event e = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 4;
    if (!later(heap_[parent], e)) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = e;
}

void EventQueue::sift_down(size_t i) {
  const size_t n = heap_.size();
  const Event e = heap_[i];
  for (;;) {
    const size_t first = 4 * i + 1;
    if (first >= n) break;
    size_t best = first;
    const size_t last = std::min(first + 4, n);
    for (size_t c = first + 1; c < last; ++c)
      if (later(heap_[best], heap_[c])) best = c;
    if (!later(e, heap_[best])) break;
    heap_[i] = heap_[best];
    i = best;
  }
  heap_[i] = e;
}

bool EventQueue::fifo_first() const {
  if (fifo_head_ == fifo_.size()) return false;
  if (heap_.empty()) return true;
  return later(heap_.front(), fifo_[fifo_head_]);
}

const Event& EventQueue::top() const {
  RANKSIM_CHECK(!empty(), "top of an empty event queue");
  return fifo_first() ? fifo_[fifo_head_] : heap_.front();
}

Event EventQueue::pop() {
  RANKSIM_CHECK(!empty(), "pop from an empty event queue");
  Event e;
  if (fifo_first()) {
    e = fifo_[fifo_head_++];
    if (fifo_head_ == fifo_.size()) {
      fifo_.clear();
      fifo_head_ = 0;
    } else if (fifo_head_ >= 4096 && fifo_head_ * 2 >= fifo_.size()) {
      // Ranks that keep yielding at one instant would grow the FIFO without bound; drop the
      // consumed half (amortised O(1) per pop).
      fifo_.erase(fifo_.begin(), fifo_.begin() + static_cast<std::ptrdiff_t>(fifo_head_));
      fifo_head_ = 0;
    }
  } else {
    e = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
  }
  RANKSIM_CHECK(e.time >= now_, "virtual time went backwards");
  if (e.time != now_) {
    // The FIFO only ever holds events at now_; time moving on means it was drained.
    RANKSIM_CHECK(fifo_head_ == fifo_.size(), "stale events left at an earlier time");
    now_ = e.time;
  }
  return e;
}

void EventQueue::clear() {
  heap_.clear();
  fifo_.clear();
  fifo_head_ = 0;
  next_seq_ = 0;
  now_ = Time::zero();
}

}  // namespace ranksim::sim

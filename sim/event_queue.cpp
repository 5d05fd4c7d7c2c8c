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
  std::push_heap(heap_.begin(), heap_.end(), later);
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
    std::pop_heap(heap_.begin(), heap_.end(), later);
    e = heap_.back();
    heap_.pop_back();
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

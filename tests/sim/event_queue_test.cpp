#include "sim/event_queue.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ranksim::sim {
namespace {

std::vector<uint64_t> drain(EventQueue& q) {
  std::vector<uint64_t> out;
  while (!q.empty()) out.push_back(q.pop().payload);
  return out;
}

TEST(EventQueue, PopsByTimeThenPushOrder) {
  EventQueue q;
  q.push(Time::ns(5), 1);
  q.push(Time::ns(2), 2);
  q.push(Time::ns(5), 3);
  q.push(Time::ns(2), 4);
  q.push(Time::ns(9), 5);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{2, 4, 1, 3, 5}));
  EXPECT_EQ(q.now(), Time::ns(9));
}

TEST(EventQueue, EventsAtNowQueueBehindEarlierEventsAtTheSameTime) {
  EventQueue q;
  q.push(Time::ns(3), 10);
  q.push(Time::ns(3), 11);
  EXPECT_EQ(q.pop().payload, 10u);  // now = 3 ns; 11 is still in the heap at 3 ns
  q.push(Time::ns(3), 12);          // goes to the FIFO, after 11
  q.push(Time::ns(4), 13);
  q.push(Time::ns(3), 14);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.top().payload, 11u);
  EXPECT_EQ(drain(q), (std::vector<uint64_t>{11, 12, 14, 13}));
}

TEST(EventQueue, MatchesAReferenceOrderOnPseudoRandomTraffic) {
  // Reference: a stable sort of everything pushed, by time. Pushes interleave with pops and
  // often land at the current time, exercising both the heap and the FIFO.
  EventQueue q;
  struct Rec {
    int64_t t;
    uint64_t seq;
  };
  std::vector<Rec> pushed;
  std::vector<uint64_t> popped;
  uint64_t x = 12345;
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  uint64_t seq = 0;
  for (int i = 0; i < 20000; ++i) {
    const int64_t base = q.now().picoseconds();
    const int64_t t = base + ((next() % 3 == 0) ? 0 : static_cast<int64_t>(next() % 50));
    q.push(Time::ps(t), seq);
    pushed.push_back({t, seq++});
    if (next() % 2 == 0) popped.push_back(q.pop().payload);
  }
  while (!q.empty()) popped.push_back(q.pop().payload);
  ASSERT_EQ(popped.size(), pushed.size());
  // Every pop must be the (time, seq)-smallest of what was pending: check the times of
  // consecutive pops never decrease and equal times keep push order.
  std::vector<int64_t> time_of(pushed.size());
  for (const Rec& r : pushed) time_of[r.seq] = r.t;
  for (size_t i = 1; i < popped.size(); ++i) {
    const int64_t a = time_of[popped[i - 1]], b = time_of[popped[i]];
    ASSERT_LE(a, b) << "at pop " << i;
    if (a == b) {
      ASSERT_LT(popped[i - 1], popped[i]) << "FIFO order broken at pop " << i;
    }
  }
}

TEST(EventQueueDeathTest, PushingIntoThePastIsCaught) {
  EventQueue q;
  q.push(Time::ns(10), 1);
  q.pop();
  EXPECT_DEATH(q.push(Time::ns(9), 2), "event scheduled in the past");
}

}  // namespace
}  // namespace ranksim::sim

#include "sim/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

struct Step {
  int rank;
  int64_t ps;
  bool operator==(const Step&) const = default;
};

TEST(Engine, RanksAtEqualTimesTakeTurnsInFifoOrder) {
  Engine engine;
  std::vector<int> order;
  engine.run(3, [&](int r) {
    for (int i = 0; i < 2; ++i) {
      order.push_back(r);
      this_rank::yield();
    }
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(engine.makespan(), Time::zero());
}

TEST(Engine, SleepOrdersRanksByVirtualTime) {
  Engine engine;
  std::vector<Step> log;
  engine.run(4, [&](int r) {
    this_rank::sleep_for(Time::ns(10 * (4 - r)));  // rank 3 wakes first
    log.push_back({r, this_rank::now().picoseconds()});
    this_rank::sleep_for(Time::ns(100));
    log.push_back({r, this_rank::now().picoseconds()});
  });
  EXPECT_EQ(log,
            (std::vector<Step>{
                {3, 10000}, {2, 20000}, {1, 30000}, {0, 40000}, {3, 110000}, {2, 120000}, {1, 130000}, {0, 140000}}));
  EXPECT_EQ(engine.makespan(), Time::ns(140));
  EXPECT_EQ(engine.clock(3), Time::ns(110));
}

TEST(Engine, AdvanceMovesOnlyTheCallersClockWithoutSwitching) {
  Engine engine;
  std::vector<int> order;
  engine.run(2, [&](int r) {
    engine.advance(Time::us(r == 0 ? 5 : 1));
    order.push_back(r);
    engine.advance(Time::us(1));
    order.push_back(r);
    this_rank::yield();  // now the clocks decide: rank 1 (2 us) runs before rank 0 (6 us)
    order.push_back(r);
  });
  EXPECT_EQ(order, (std::vector<int>{0, 0, 1, 1, 1, 0}));
  EXPECT_EQ(engine.clock(0), Time::us(6));
  EXPECT_EQ(engine.clock(1), Time::us(2));
}

TEST(Engine, BlockUntilAnotherRankWakesAtAVirtualTime) {
  Engine engine;
  Time blocked_for, woke_at;
  engine.run(2, [&](int r) {
    if (r == 0) {
      engine.advance(Time::us(1));
      blocked_for = engine.block("waiting for rank 1's signal");
      woke_at = this_rank::now();
    } else {
      engine.advance(Time::us(5));
      this_rank::yield();  // rank 0 is blocked by now
      EXPECT_TRUE(engine.is_blocked(0));
      engine.wake(0, this_rank::now() + Time::us(2));
    }
  });
  EXPECT_EQ(woke_at, Time::us(7));
  EXPECT_EQ(blocked_for, Time::us(6));
}

TEST(Engine, WakingEarlierThanTheRanksClockNeverMovesItBack) {
  Engine engine;
  Time woke_at;
  engine.run(2, [&](int r) {
    if (r == 0) {
      engine.advance(Time::us(10));
      engine.block("waiting");
      woke_at = this_rank::now();
    } else {
      this_rank::sleep_for(Time::us(1));  // rank 0 blocks (at clock 10 us) before this returns
      engine.wake(0, Time::us(3));
    }
  });
  EXPECT_EQ(woke_at, Time::us(10));
}

TEST(Engine, DriverCallbacksRunAtTheirTimeAndCanWakeRanks) {
  Engine engine;
  std::vector<std::string> log;
  engine.run(1, [&](int) {
    engine.call_at(Time::us(4), [&] {
      log.push_back("callback at " + engine.event_time().str());
      engine.wake(0, engine.event_time() + Time::ns(500));
    });
    engine.block("waiting for the callback");
    log.push_back("rank at " + this_rank::now().str());
  });
  EXPECT_EQ(log, (std::vector<std::string>{"callback at 4 us", "rank at 4.5 us"}));
  EXPECT_EQ(engine.stats().callbacks, 1u);
}

// The same program twice gives the same sequence of (rank, time) steps.
std::vector<Step> pseudo_random_program(int nranks) {
  Engine engine;
  std::vector<Step> log;
  engine.run(nranks, [&](int r) {
    uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(r + 1);
    for (int i = 0; i < 50; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      switch (x % 3) {
        case 0:
          this_rank::yield();
          break;
        case 1:
          this_rank::sleep_for(Time::ps(static_cast<int64_t>(x % 1000)));
          break;
        default:
          engine.advance(Time::ps(static_cast<int64_t>(x % 777)));
          break;
      }
      log.push_back({r, this_rank::now().picoseconds()});
    }
  });
  return log;
}

TEST(Engine, RunsAreDeterministic) {
  const auto a = pseudo_random_program(17);
  const auto b = pseudo_random_program(17);
  ASSERT_EQ(a.size(), 17u * 50u);
  EXPECT_EQ(a, b);
}

struct Guard {
  int* count;
  ~Guard() { ++*count; }
};

TEST(Engine, DeadlockListsEveryBlockedRankAndUnwindsThem) {
  Engine engine;
  int unwound = 0;
  try {
    engine.run(4, [&](int r) {
      Guard g{&unwound};
      engine.advance(Time::us(r));
      if (r == 1) engine.block("recv(src=3, group=world, call #0, shape [4, 4])");
      if (r == 3) engine.block("all_reduce(group=tp0, call #2, shape [8])");
    });
    FAIL() << "expected a deadlock";
  } catch (const DeadlockError& e) {
    ASSERT_EQ(e.blocked().size(), 2u);
    EXPECT_EQ(e.blocked()[0].rank, 1);
    EXPECT_EQ(e.blocked()[0].clock, Time::us(1));
    EXPECT_EQ(e.blocked()[1].rank, 3);
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("deadlock"));
    EXPECT_THAT(msg, HasSubstr("2 of 4 ranks are blocked"));
    EXPECT_THAT(msg, HasSubstr("rank 1 (clock 1 us): recv(src=3, group=world, call #0, shape [4, 4])"));
    EXPECT_THAT(msg, HasSubstr("rank 3 (clock 3 us): all_reduce(group=tp0, call #2, shape [8])"));
  }
  EXPECT_EQ(unwound, 4);  // two finished normally, two were unwound
}

TEST(Engine, AnExceptionInOneRankAbortsTheOthersAndNamesTheRank) {
  Engine engine;
  int unwound = 0;
  bool ran_past_failure = false;
  try {
    engine.run(4, [&](int r) {
      Guard g{&unwound};
      if (r == 2) throw std::runtime_error("shape mismatch in layer 3");
      engine.block("waiting forever");
      ran_past_failure = true;
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    ASSERT_EQ(e.errors().size(), 1u);
    EXPECT_EQ(e.errors()[0].rank, 2);
    EXPECT_EQ(e.errors()[0].message, "shape mismatch in layer 3");
    EXPECT_THAT(e.what(), HasSubstr("1 rank failed:\n  rank 2: shape mismatch in layer 3"));
    EXPECT_THROW(std::rethrow_exception(e.errors()[0].exception), std::runtime_error);
  }
  EXPECT_FALSE(ran_past_failure);
  EXPECT_EQ(unwound, 4);
}

TEST(Engine, RanksFailingAtTheSameInstantAreAllReportedLaterOnesNeverRun) {
  Engine engine;
  try {
    engine.run(5, [&](int r) {
      this_rank::sleep_for(Time::us(r >= 3 ? 9 : 1));
      if (r == 0 || r == 2) throw std::runtime_error("bad at 1 us on rank " + std::to_string(r));
      if (r == 4) throw std::runtime_error("rank 4 fails later and is never reached");
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    ASSERT_EQ(e.errors().size(), 2u);
    EXPECT_EQ(e.errors()[0].rank, 0);
    EXPECT_EQ(e.errors()[1].rank, 2);
    EXPECT_THAT(e.what(), HasSubstr("2 ranks failed"));
  }
}

TEST(Engine, AFailureListsTheRanksItLeftBlockedAndWhatTheyWaitedFor) {
  Engine engine;
  try {
    engine.run(3, [&](int r) {
      if (r == 1) engine.block("all_reduce on tp, call #4: waiting for rank 2 to join");
      if (r == 2) {
        this_rank::sleep_for(Time::us(3));
        throw std::runtime_error("lost");
      }
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    ASSERT_EQ(e.waiting().size(), 1u);
    EXPECT_EQ(e.waiting()[0].rank, 1);
    EXPECT_THAT(e.what(), HasSubstr("rank 2: lost\nWhen the run stopped, 1 rank was blocked:\n  rank 1 (clock 0 s): "
                                    "all_reduce on tp, call #4: waiting for rank 2 to join"));
  }
}

// A guard (a resource check) runs every 64 Ki events; when it throws, the run stops there: its
// ranks are unwound and run() rethrows the guard's error.
TEST(Engine, AGuardThatThrowsStopsTheRunAndUnwindsItsRanks) {
  Engine engine;
  int checks = 0, unwound = 0;
  engine.set_guard([&] {
    if (++checks == 2) throw Error("the host is full");
  });
  try {
    engine.run(2, [&](int) {
      Guard g{&unwound};
      for (int i = 0; i < 100000; ++i) this_rank::yield();
    });
    FAIL() << "expected the guard's error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the host is full");
  }
  EXPECT_EQ(checks, 2);
  EXPECT_EQ(unwound, 2);
  EXPECT_EQ(engine.stats().events, 2u * 65536u);
}

// Injected faults (Engine::inject_fault): the clock at which each fires, by what the rank is doing then.
TEST(EngineFaults, AFailureCutsAKernelAtItsTime) {
  Engine engine;
  engine.inject_fault(1, Time::us(7), false, "faults[0]");
  bool after = false;
  try {
    engine.run(2, [&](int r) {
      engine.advance(Time::us(5));
      engine.advance(Time::us(5));  // rank 1 fails inside this one, at 7 us
      after = after || r == 1;
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    ASSERT_EQ(e.errors().size(), 1u);
    EXPECT_EQ(e.errors()[0].rank, 1);
    EXPECT_EQ(e.errors()[0].message, "faults[0] at virtual time 7 us");
    EXPECT_THROW(std::rethrow_exception(e.errors()[0].exception), InjectedFault);
  }
  EXPECT_FALSE(after);
  EXPECT_EQ(engine.clock(1), Time::us(7));
  EXPECT_EQ(engine.clock(0), Time::us(10));  // rank 0 ran first and finished
}

TEST(EngineFaults, ABlockedRankFailsAtExactlyItsTime) {
  Engine engine;
  engine.inject_fault(0, Time::us(4), false, "faults[1]");
  try {
    engine.run(2, [&](int r) {
      if (r == 0) engine.block("recv from rank 1");  // never woken: the fault ends it at 4 us
      this_rank::sleep_for(Time::us(10));
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    ASSERT_EQ(e.errors().size(), 1u);
    EXPECT_EQ(e.errors()[0].message, "faults[1] at virtual time 4 us");
  }
  EXPECT_EQ(engine.clock(0), Time::us(4));
}

TEST(EngineFaults, ARankWokenForLaterFailsAtTheFaultsTimeAndItsLaterWakeIsDropped) {
  Engine engine;
  engine.inject_fault(0, Time::us(2), false, "faults[0]");
  try {
    engine.run(2, [&](int r) {
      if (r == 0) {
        engine.block("a collective that completes at 9 us");
        FAIL() << "rank 0 must not return from its block";
      } else {
        engine.wake(0, Time::us(9));  // rank 0 is now queued for 9 us, past its fault
        this_rank::sleep_for(Time::us(20));
      }
    });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    ASSERT_EQ(e.errors().size(), 1u);
    EXPECT_EQ(e.errors()[0].message, "faults[0] at virtual time 2 us");
  }
  EXPECT_EQ(engine.clock(0), Time::us(2));
}

TEST(EngineFaults, ASleepIsCutAtTheFault) {
  Engine engine;
  engine.inject_fault(0, Time::us(3), false, "f");
  EXPECT_THROW(engine.run(1, [&](int) { this_rank::sleep_for(Time::us(8)); }), RankFailure);
  EXPECT_EQ(engine.clock(0), Time::us(3));
}

TEST(EngineFaults, AStoppedRankDeadlocksItsPeersAndTheReportNamesTheFault) {
  Engine engine;
  engine.inject_fault(1, Time::us(2), true, "faults[0] (rank_stops: rank 1): stopped");
  try {
    engine.run(3, [&](int r) {
      engine.advance(Time::us(1));
      if (r == 1) {
        engine.advance(Time::us(5));  // stops at 2 us, inside this kernel
        FAIL() << "a stopped rank must not go on";
      }
      engine.block("all_reduce: waiting for rank 1 to join");
    });
    FAIL() << "expected a deadlock";
  } catch (const DeadlockError& e) {
    ASSERT_EQ(e.blocked().size(), 3u);
    EXPECT_EQ(e.blocked()[1].rank, 1);
    EXPECT_EQ(e.blocked()[1].clock, Time::us(2));
    EXPECT_EQ(e.blocked()[1].reason, "faults[0] (rank_stops: rank 1): stopped at virtual time 2 us");
    EXPECT_EQ(e.blocked()[0].reason, "all_reduce: waiting for rank 1 to join");
  }
}

TEST(EngineFaults, ARankBlockedWhenItStopsStaysBlockedEvenIfWokenAndSaysWhatItWaitedFor) {
  Engine engine;
  engine.inject_fault(0, Time::us(5), true, "stop");
  try {
    engine.run(2, [&](int r) {
      if (r == 0) {
        engine.block("recv from rank 1");
        FAIL() << "a stopped rank must not return from its block";
      }
      this_rank::sleep_for(Time::us(8));
      engine.wake(0, this_rank::now());  // after the fault: rank 0 stays stopped
      engine.block("barrier: waiting for rank 0");
    });
    FAIL() << "expected a deadlock";
  } catch (const DeadlockError& e) {
    ASSERT_EQ(e.blocked().size(), 2u);
    EXPECT_EQ(e.blocked()[0].reason, "stop at virtual time 5 us; it was waiting in: recv from rank 1");
    EXPECT_EQ(e.blocked()[0].clock, Time::us(8));
  }
}

TEST(EngineFaults, AFaultAfterTheRunEndsChangesNothingAndTheEarlierOfTwoWins) {
  Engine plain, late;
  auto body = [](int r) {
    this_rank::sleep_for(Time::us(1 + r));
    this_rank::yield();
  };
  plain.run(2, body);
  late.inject_fault(0, Time::ms(1), false, "late");
  late.run(2, body);
  EXPECT_EQ(late.clock(0), plain.clock(0));
  EXPECT_EQ(late.clock(1), plain.clock(1));
  Engine two;
  two.inject_fault(0, Time::us(9), true, "second");
  two.inject_fault(0, Time::us(4), false, "first");
  try {
    two.run(1, [&](int) { this_rank::sleep_for(Time::us(20)); });
    FAIL() << "expected RankFailure";
  } catch (const RankFailure& e) {
    EXPECT_EQ(e.errors()[0].message, "first at virtual time 4 us");
  }
}

TEST(Engine, CancellationReachesRanksThatCatchEverything) {
  // A rank that swallows the cancellation and blocks again is cancelled again at once.
  Engine engine;
  int attempts = 0;
  EXPECT_THROW(engine.run(2,
                          [&](int r) {
                            if (r == 0) throw std::logic_error("boom");
                            try {
                              engine.block("first");
                            } catch (...) {
                              ++attempts;
                            }
                            try {
                              engine.block("second");
                            } catch (...) {
                              ++attempts;
                            }
                          }),
               RankFailure);
  EXPECT_EQ(attempts, 2);
}

TEST(Engine, TwoEnginesDoNotInterfereEvenNested) {
  Engine outer;
  std::vector<std::string> log;
  outer.run(2, [&](int r) {
    this_rank::sleep_for(Time::us(1));
    if (r == 1) {
      Engine inner;
      inner.run(3, [&](int ir) {
        this_rank::sleep_for(Time::ns(10));
        log.push_back("inner " + std::to_string(this_rank::rank()) + "/" + std::to_string(this_rank::world_size()) +
                      " at " + this_rank::now().str());
        EXPECT_EQ(ir, this_rank::rank());
      });
      EXPECT_EQ(inner.makespan(), Time::ns(10));
    }
    log.push_back("outer " + std::to_string(this_rank::rank()) + "/" + std::to_string(this_rank::world_size()) +
                  " at " + this_rank::now().str());
  });
  EXPECT_EQ(log, (std::vector<std::string>{"outer 0/2 at 1 us", "inner 0/3 at 10 ns", "inner 1/3 at 10 ns",
                                           "inner 2/3 at 10 ns", "outer 1/2 at 1 us"}));
}

TEST(Engine, MisuseIsAClearError) {
  EXPECT_THROW(this_rank::rank(), Error);
  EXPECT_THROW(this_rank::now(), Error);
  Engine engine;
  EXPECT_THROW(engine.run(0, [](int) {}), Error);
  Engine once;
  once.run(1, [](int) {});
  EXPECT_THROW(once.run(1, [](int) {}), Error);
}

TEST(Engine, StacksHoldLargeFramesAndAreReused) {
  EngineOptions opt;
  opt.stack.size = 512 * 1024;
  Engine engine(opt);
  double total = 0;
  engine.run(8, [&](int r) {
    volatile char big[300 * 1024];
    for (size_t i = 0; i < sizeof big; i += 4096) big[i] = static_cast<char>(r);
    this_rank::yield();
    total += big[4096];
  });
  EXPECT_EQ(total, 0 + 1 + 2 + 3 + 4 + 5 + 6 + 7);
}

TEST(StackPool, RecyclesStacks) {
  StackPool pool(StackOptions{64 * 1024, false});
  auto a = pool.allocate();
  void* sp = a.sp;
  pool.deallocate(a);
  auto b = pool.allocate();
  EXPECT_EQ(b.sp, sp);
  EXPECT_EQ(b.size, 64u * 1024u);
  EXPECT_EQ(pool.in_use(), 1u);
  pool.deallocate(b);
}

TEST(StackPool, MeasuresHowDeepAFiberWent) {
  StackOptions o;
  o.size = 256 * 1024;
  o.measure = true;
  StackPool pool(o);
  {
    Fiber shallow(pool, [] {});
    shallow.resume();
  }
  const size_t base = pool.high_water();
  EXPECT_GT(base, 0u) << "boost::context's fiber record sits at the top";
  EXPECT_LT(base, 16u * 1024u);
  {
    Fiber deep(pool, [] {
      volatile char big[100 * 1024];
      for (size_t i = 0; i < sizeof big; i += 512) big[i] = 1;
      big[0] = 2;  // the lowest byte of the array: at least 100 KiB below the top
    });
    deep.resume();
  }
  EXPECT_GE(pool.high_water(), 100u * 1024u);
  EXPECT_LT(pool.high_water(), 100u * 1024u + 16u * 1024u);
  StackPool unmeasured(StackOptions{64 * 1024, false});
  {
    Fiber f(unmeasured, [] {});
    f.resume();
  }
  EXPECT_EQ(unmeasured.high_water(), 0u);
}

#ifndef RANKSIM_ASAN  // AddressSanitizer reports the overflow itself, differently.
// Recurses until `depth` runs out; called with a depth far beyond what 64 KiB can hold.
int recurse_deeply(volatile char* p, long depth) {
  volatile char frame[1024];
  frame[0] = p ? p[0] : 0;
  if (depth == 0) return frame[0];
  return recurse_deeply(frame, depth - 1) + frame[1];
}

void overflow_a_guarded_fiber() {
  EngineOptions opt;
  opt.stack = StackOptions{64 * 1024, true};
  Engine engine(opt);
  engine.run(1, [](int) { recurse_deeply(nullptr, 1L << 30); });
}

TEST(EngineDeathTest, GuardPageStopsAStackOverflow) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(overflow_a_guarded_fiber(), "");
}
#endif

}  // namespace
}  // namespace ranksim::sim

namespace ranksim::sim {
namespace {

TEST(Engine, ProgressIsReportedForLongRunsWithoutChangingThem) {
  std::vector<uint64_t> seen;
  Engine engine;
  engine.set_progress([&](const Engine::Progress& p) { seen.push_back(p.events); }, 0.0);
  engine.run(4, [](int) {
    for (int i = 0; i < 100000; ++i) this_rank::sleep_for(Time::ns(1));
  });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front() % 65536, 0u);
  EXPECT_EQ(engine.makespan(), Time::us(100));
}

}  // namespace
}  // namespace ranksim::sim

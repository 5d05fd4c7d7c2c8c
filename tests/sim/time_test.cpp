#include "sim/time.h"

#include <gtest/gtest.h>

namespace ranksim::sim {
namespace {

TEST(Time, UnitsAreExactPicoseconds) {
  EXPECT_EQ(Time::ns(1).picoseconds(), 1000);
  EXPECT_EQ(Time::us(3).picoseconds(), 3'000'000);
  EXPECT_EQ(Time::s(2).picoseconds(), 2'000'000'000'000);
  Time t;
  for (int i = 0; i < 1'000'000; ++i) t += Time::ns(1);
  EXPECT_EQ(t, Time::ms(1));  // no drift
}

TEST(Time, FromSecondsRoundsToNearestPicosecond) {
  EXPECT_EQ(Time::from_seconds(1.4e-12).picoseconds(), 1);
  EXPECT_EQ(Time::from_seconds(1.6e-12).picoseconds(), 2);
  EXPECT_EQ(Time::from_seconds(2.5e-6), Time::ns(2500));
}

TEST(Time, PrintsHumanUnits) {
  EXPECT_EQ(Time::zero().str(), "0 s");
  EXPECT_EQ(Time::ps(750).str(), "750 ps");
  EXPECT_EQ(Time::ps(1500).str(), "1.5 ns");
  EXPECT_EQ(Time::ns(12250).str(), "12.25 us");
  EXPECT_EQ(Time::ms(3).str(), "3 ms");
  EXPECT_EQ(Time::s(90).str(), "90 s");
  EXPECT_EQ((Time::zero() - Time::us(2)).str(), "-2 us");
}

TEST(Time, OrdersAndCombines) {
  EXPECT_LT(Time::ns(999), Time::us(1));
  EXPECT_EQ(max(Time::ns(3), Time::ns(5)), Time::ns(5));
  EXPECT_EQ(min(Time::ns(3), Time::ns(5)), Time::ns(3));
  EXPECT_EQ(Time::us(1) * 3 / 2, Time::ns(1500));
}

}  // namespace
}  // namespace ranksim::sim

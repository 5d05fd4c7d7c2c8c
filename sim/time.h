// Time: a point or a span of virtual time, as a signed count of picoseconds.
//
// Integer picoseconds keep the clock free of floating-point drift: adding a million 1 ns steps
// lands exactly on 1 ms, and the same program gives the same timestamps on every machine.
// int64 picoseconds cover about 106 days of virtual time, far beyond any training step.
// Conversions from floating-point seconds (bandwidth arithmetic) round to the nearest picosecond.
#pragma once

#include <cstdint>
#include <limits>
#include <ostream>
#include <string>

namespace ranksim::sim {

class Time {
 public:
  constexpr Time() = default;

  static constexpr Time ps(int64_t v) { return Time(v); }
  static constexpr Time ns(int64_t v) { return Time(v * 1000); }
  static constexpr Time us(int64_t v) { return Time(v * 1000'000); }
  static constexpr Time ms(int64_t v) { return Time(v * 1000'000'000); }
  static constexpr Time s(int64_t v) { return Time(v * 1000'000'000'000); }
  // Rounds to the nearest picosecond. REQUIRES: seconds is finite and representable.
  static Time from_seconds(double seconds);
  static constexpr Time zero() { return Time(0); }
  static constexpr Time max() { return Time(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t picoseconds() const { return ps_; }
  constexpr double seconds() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double microseconds() const { return static_cast<double>(ps_) * 1e-6; }

  constexpr Time operator+(Time o) const { return Time(ps_ + o.ps_); }
  constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
  constexpr Time operator*(int64_t k) const { return Time(ps_ * k); }
  constexpr Time operator/(int64_t k) const { return Time(ps_ / k); }
  constexpr Time& operator+=(Time o) {
    ps_ += o.ps_;
    return *this;
  }
  constexpr Time& operator-=(Time o) {
    ps_ -= o.ps_;
    return *this;
  }
  constexpr auto operator<=>(const Time&) const = default;

  // Human units with up to 4 significant decimals: "0 s", "750 ps", "1.5 ns", "12.25 us", "3 ms".
  std::string str() const;

 private:
  constexpr explicit Time(int64_t v) : ps_(v) {}
  int64_t ps_ = 0;
};

inline constexpr Time max(Time a, Time b) { return a < b ? b : a; }
inline constexpr Time min(Time a, Time b) { return a < b ? a : b; }
std::ostream& operator<<(std::ostream& os, Time t);

}  // namespace ranksim::sim

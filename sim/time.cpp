#include "sim/time.h"

#include <cassert>
#include <cmath>
#include <cstdio>

namespace ranksim::sim {

Time Time::from_seconds(double seconds) {
  assert(std::isfinite(seconds));
  const double ps = std::nearbyint(seconds * 1e12);
  assert(std::fabs(ps) < 9.2e18);
  return Time(static_cast<int64_t>(ps));
}

std::string Time::str() const {
  struct Unit {
    int64_t scale;
    const char* name;
  };
  static constexpr Unit units[] = {
      {1000'000'000'000, "s"}, {1000'000'000, "ms"}, {1000'000, "us"}, {1000, "ns"}, {1, "ps"}};
  if (ps_ == 0) return "0 s";
  const int64_t mag = ps_ < 0 ? -ps_ : ps_;
  for (const Unit& u : units) {
    if (mag >= u.scale || u.scale == 1) {
      char buf[48];
      const double v = static_cast<double>(ps_) / static_cast<double>(u.scale);
      std::snprintf(buf, sizeof buf, "%.4g %s", v, u.name);
      return buf;
    }
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, Time t) { return os << t.str(); }

}  // namespace ranksim::sim

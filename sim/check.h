// RANKSIM_CHECK: an always-on assertion for programming errors inside ranksim (an invariant of
// the simulator broken), active in release builds too because a simulator that goes on after its
// clock ran backwards produces silently wrong answers. User errors throw ranksim::Error instead.
#pragma once

namespace ranksim::detail {
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const char* msg);
}  // namespace ranksim::detail

#define RANKSIM_CHECK(cond, msg)                                         \
  do {                                                                   \
    if (!(cond)) [[unlikely]]                                            \
      ::ranksim::detail::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)

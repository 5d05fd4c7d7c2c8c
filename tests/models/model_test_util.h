// Small helpers shared by the model tests: an error's message, a trace span's argument, and
// sequences of collective names to compare a rank's timeline with.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "sim/trace.h"

namespace ranksim::models::testing {

// What fn throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// A span's argument by key ("" when absent).
inline std::string arg(const sim::Span& s, const std::string& key) {
  for (const auto& [k, v] : s.args)
    if (k == key) return v;
  return "";
}

// A list of names (collectives, sends, ...) in order; repeat(s, n) and a + b build expected ones.
using Seq = std::vector<std::string>;
inline Seq repeat(const Seq& s, int n) {
  Seq out;
  for (int i = 0; i < n; ++i) out.insert(out.end(), s.begin(), s.end());
  return out;
}
inline Seq operator+(Seq a, const Seq& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace ranksim::models::testing

// Helpers shared by the fuzz targets (fuzz/*_fuzz.cpp): the input as text, the `--set`
// overrides an input carries, and the one rule every target follows.
//
// The rule: a reader given any bytes either returns or throws ranksim::Error (sim/error.h), the
// exception the command line turns into "ranksim: <message>" and exit code 2 (app/cli.cpp). Every
// other outcome is a finding: another exception (the command line's "internal error", exit 3;
// std::bad_alloc included, since no input of a few kilobytes may ask a reader for gigabytes), a
// crash, a sanitizer report, a hang or a runaway allocation (libFuzzer's -timeout and
// -rss_limit_mb). So a target catches ranksim::Error alone and lets everything else escape.
//
// Overrides: a line of the input that starts with "#set " carries one `--set` override (the rest
// of the line, "key=value"). It is a YAML comment, so the same text stays a whole document and
// the shipped files are seeds as they are; the fuzzer finds the prefix through the targets'
// dictionaries (fuzz/dicts/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/error.h"

namespace ranksim::fuzz {

inline std::string as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The "#set key=value" lines of text, in order, without the prefix.
inline std::vector<std::string> set_lines(std::string_view text) {
  constexpr std::string_view kPrefix = "#set ";
  std::vector<std::string> sets;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (line.substr(0, kPrefix.size()) == kPrefix) sets.emplace_back(line.substr(kPrefix.size()));
    start = end + 1;
  }
  return sets;
}

// Runs read(); a ranksim::Error is the reader's clean refusal of a bad input, anything else
// propagates (see above).
template <class Read>
void refuse_cleanly(Read&& read) {
  try {
    read();
  } catch (const ranksim::Error&) {
  }
}

}  // namespace ranksim::fuzz

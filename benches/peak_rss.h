// Peak resident memory for benchmarks: reset the process's high-water mark (VmHWM) before a
// measurement through /proc/self/clear_refs, read it after. Linux only.
#pragma once

#include <fstream>
#include <string>

namespace ranksim::bench {

inline void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

inline double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

}  // namespace ranksim::bench

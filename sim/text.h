// Small text helpers shared by the readers of user input (topology units, YAML keys, tuner
// configs, nccl-tests tables). ASCII only: the inputs they serve name units, keys and NCCL's
// algorithms and protocols, never free text, so the C locale's classification is the right one.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace ranksim::sim {

// `s` without leading and trailing white space (std::isspace: space, tab, CR, LF, VT, FF).
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// `s` with its ASCII letters in lower case.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace ranksim::sim

// Typo suggestions for configuration errors: "unknown key 'bandwdith'; did you mean 'bandwidth'?"
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ranksim::sim {

// Optimal-string-alignment distance, case-insensitive: a swapped pair of letters ("bf61" for
// "bf16") counts as one edit, as typos usually are.
int edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to word, if near enough to be a plausible typo (at most max(2, |word|/3)
// edits); else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// "; did you mean 'x'?" for the closest candidate, or "" when none is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace ranksim::sim

// `ranksim compare PREDICTED.json MEASURED.json`: a predicted run (the sim backend's virtual
// times) and a measured one (the same scenario on real processes or GPUs, wall-clock times) side
// by side, from the `--json` summaries both write: the total time, each rank's time, compute and
// communication, and each collective line (matched by op, group size, dtype, bytes, algorithm and
// group description), with the ratio measured / predicted -- how a user checks the timing model
// against their own cluster.
#pragma once

#include <iosfwd>
#include <string>

namespace ranksim::app {

// Prints the comparison. Returns 0. Errors (ranksim::Error naming the file): a file that cannot
// be read, is not JSON, or is not a ranksim summary; two summaries of different scenarios or rank
// counts (they cannot be compared line by line).
int compare_summaries(const std::string& predicted, const std::string& measured, std::ostream& out);

}  // namespace ranksim::app

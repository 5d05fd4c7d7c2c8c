// `ranksim compare PREDICTED.json MEASURED.json`: a predicted run (the sim backend's virtual
// times) and a measured one (the same scenario on real processes or GPUs, wall-clock times) side
// by side, from the `--json` summaries both write: the total time, each rank's time, compute and
// communication, and each collective line (matched by op, group size, dtype, bytes, algorithm and
// group description), with the ratio measured / predicted -- how a user checks the timing model
// against their own cluster.
#pragma once

#include <iosfwd>
#include <string>
#include <tuple>
#include <vector>

namespace ranksim::app {

// One `--json` run summary (app/summary_json.h) as compare reads it: the fields it lines up, each
// checked for its type and range (times are finite and >= 0, counts are integers, one
// ranks_detail row per rank).
struct ComparedSummary {
  struct Rank {
    double clock_us = 0, compute_us = 0, comm_us = 0;
  };
  struct Collective {
    std::string op, dtype, algorithm, group;  // group: "" when the summary has none
    long long group_size = 0, bytes = 0, calls = 0;
    double time_us = 0;  // per call
    // What lines a collective up with its counterpart in the other summary.
    auto key() const { return std::tie(op, group_size, dtype, bytes, algorithm, group); }
  };
  std::string path, scenario, topology, backend;  // topology: "" when absent; backend: default "sim"
  long long ranks = 0;
  double total_us = 0;
  std::vector<Rank> ranks_detail;
  std::vector<Collective> collectives;
};

// Parses one summary's text; `path` names it in messages. Throws ranksim::Error naming the path
// when the text is not JSON or not a ranksim run summary.
ComparedSummary parse_compared_summary(const std::string& json_text, const std::string& path);

// Prints the comparison. Returns 0. Errors (ranksim::Error naming the file): a file that cannot
// be read, is not JSON, or is not a ranksim summary; two summaries of different scenarios or rank
// counts (they cannot be compared line by line).
int compare_summaries(const std::string& predicted, const std::string& measured, std::ostream& out);

}  // namespace ranksim::app

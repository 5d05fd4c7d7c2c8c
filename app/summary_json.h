// The `--json` summary of a run: what `ranksim compare` reads back, and what scripts consume.
//
// Written through nlohmann::json (strings escaped as JSON requires) in a fixed layout that keeps
// diffs of two summaries readable: one top-level key per line, one line per element of the
// top-level lists (ranks_detail, collectives, sweep, checks), everything else inline. Numbers keep
// a fixed notation per field (microseconds and bandwidths with 6 decimals, losses with 9
// significant digits, validation differences with 6), so that the same run gives the same bytes.
// Internal to app/.
#pragma once

#include <string>

#include "app/run_summary.h"
#include "app/scenario.h"

namespace ranksim::app {

// Writes the file whole or not at all. Throws ranksim::Error naming the path.
void write_json_summary(const std::string& path, const Scenario& sc, const std::string& topology_name,
                        const RunSummary& s);

}  // namespace ranksim::app

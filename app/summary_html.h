// The `--report` HTML of a run: the RunSummary as report_html.h's ReportData (tables in the text
// summary's units, the sweep's busbw curve, the trace's timeline), written as one file.
// Internal to app/.
#pragma once

#include <string>

#include "app/run_summary.h"
#include "app/scenario.h"
#include "sim/topology.h"

namespace ranksim::app {

// Writes the file whole or not at all. Throws ranksim::Error naming the path.
void write_run_report(const std::string& path, const Scenario& sc, const sim::Topology& topo, const RunSummary& s);

}  // namespace ranksim::app

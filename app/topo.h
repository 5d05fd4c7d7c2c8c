// `ranksim topo FILE`: prints what a topology holds, so that a user can check a file they wrote.
//
// The report lists the topology's name and source, its nodes and devices (summarised: a kind,
// how many per node, the id range), each device kind's peaks, memory and launch overhead, the
// intra-node fabric and the inter-node fat tree level by level, the links grouped by kind
// (directional: a full-duplex cable counts once per direction) with their counts, bandwidths and
// latencies in human units, and the slowest route: the device pair with the least bottleneck
// bandwidth, then the most latency, with its hops. Up to 512 devices every ordered pair is
// searched; beyond, the routes from and to every device of the first and the last node, which
// cover every kind of link and every level of the tree (the report says which search it did).
#pragma once

#include <iosfwd>

#include "sim/topology.h"

namespace ranksim::app {

void print_topology(const sim::Topology& topology, std::ostream& out);

}  // namespace ranksim::app

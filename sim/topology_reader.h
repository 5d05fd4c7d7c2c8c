// Reading a topology file: the YAML tree (overrides applied) to a TopologySpec
// (sim/topology_spec.h), every value checked. Topology::parse (sim/topology.h) reads a spec here,
// then lays out its vertices, links and routes; this file knows the format (docs/topology.md),
// topology.cpp the graph. The reader depends on the spec only, never on the Topology it feeds.
//
// Errors: each problem is a ConfigError at the offending node's file:line:column (or at the
// --set override that put it there), saying what is wrong and what was expected.
#pragma once

#include <string>
#include <vector>

#include "sim/topology_spec.h"
#include "sim/yaml_input.h"

namespace ranksim::sim {

// The known keys of a topology file, for validation and for --set.
const YamlSchema& topology_schema();
// How a topology's --set overrides behave (sim/yaml_input.h).
SetOptions topology_set_options();

// Validates root (a topology document, overrides applied) and returns what it describes.
// Throws ConfigError through positions.
TopologySpec read_topology(const YAML::Node& root, const YamlPositions& positions);

}  // namespace ranksim::sim

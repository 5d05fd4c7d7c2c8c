// Reading a scenario file's values, for the loaders in scenario_load.cpp (the document),
// scenario_steps.cpp (a steps workload's steps) and scenario_model.cpp (the model workload).
// Internal to app/.
//
// ScenarioReader turns YAML nodes into checked values; each problem is a ConfigError at the
// node's file:line:column, or at the --set override that put the node there (sim/yaml_input.h).
// Messages name the key as the user wrote it ("parallel.tp must be an integer from 1 to 16777216 (2^24), got
// 'two'") and, for a choice, list the allowed values with the closest one suggested.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "app/scenario.h"
#include "sim/units.h"
#include "sim/yaml_input.h"

namespace ranksim::app {

class ScenarioReader {
 public:
  explicit ScenarioReader(sim::YamlPositions& positions) : positions_(positions) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const { positions_.fail(at, what); }

  // map must be a mapping whose keys are all in known; where names it ("a tp_mlp step").
  void known_keys(const YAML::Node& map, const std::vector<std::string>& known, const std::string& where) const;

  std::string str(const YAML::Node& n, const std::string& what) const;
  int positive_int(const YAML::Node& n, const std::string& what) const;  // 1 .. 2^24
  // An integer >= min (window bounds take -1 for "unbounded").
  int64_t integer(const YAML::Node& n, const std::string& what, int64_t min) const;
  double number(const YAML::Node& n, const std::string& what) const;  // >= 0
  std::string one_of(const YAML::Node& n, const std::string& what, const std::vector<std::string>& allowed) const;
  // A value with units, parsed by one of sim/units.h's parsers.
  template <class Parse>
  auto unit(const YAML::Node& n, const std::string& what, Parse parse) const {
    const std::string s = str(n, what);
    try {
      return parse(s);
    } catch (const sim::units::UnitError& e) {
      fail(n, what + ": " + e.what());
    }
  }

 private:
  sim::YamlPositions& positions_;
};

// A mapping's entry by key, or an undefined node.
inline YAML::Node entry(const YAML::Node& map, const char* key) { return sim::map_entry(map, key); }

// The scenario document's known keys (shared by validation and by --set).
const sim::YamlSchema& scenario_schema();
// The known keys of one section of the document by its dotted path ("parallel",
// "train.optimizer"; "" for the top level). REQUIRES: the path names a section.
std::vector<std::string> section_keys(const std::string& dotted);

extern const std::vector<std::string> kCollectiveOps;  // the collectives a step can call
extern const std::vector<std::string> kDtypes;
extern const std::vector<std::string> kAlgorithms;

// Fails at `at` when collective `op` (a step's name) has no `algorithm` ("auto" always fits).
void check_collective_algorithm(const std::string& op, const std::string& algorithm, const YAML::Node& at,
                                const ScenarioReader& r);

// One entry of workload.steps.do; read_step checks its keys and values alone.
ScenarioStep read_step(const YAML::Node& n, const ScenarioReader& r);
// The rules a cp_attention step must meet under the scenario's layout (sc.tp, sc.cp, the
// parallel defaults in par); resolves its comm type and hierarchical sizes.
void check_cp_attention(ScenarioStep& st, const YAML::Node& body, const YAML::Node& par, const Scenario& sc,
                        const ScenarioReader& r);

// A step's `ranks:` list: distinct ranks of a run of `ranks`, sorted (scenario_faults.cpp).
std::vector<int> read_rank_list(const YAML::Node& n, int ranks, const ScenarioReader& r);
// One entry of `faults:`, checked against the loaded layout and steps; where: "faults[2]".
ScenarioFault read_fault(const YAML::Node& n, const std::string& where, const Scenario& sc, const ScenarioReader& r);

// The `model:` workload and its companions (batch, dump, validate, train, encoder), checked
// against the layout and its input files; folder: the scenario's folder (relative paths).
ModelWorkload read_model(const YAML::Node& root, const YAML::Node& n, const ScenarioReader& r, const Scenario& sc,
                         bool data_given, const std::filesystem::path& folder);

}  // namespace ranksim::app

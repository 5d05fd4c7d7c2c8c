// YAML input with positions: the one reader behind topology files and scenario files.
//
// Three pieces, shared by every YAML document ranksim reads:
// - parse_yaml: text to a tree; malformed YAML is a ConfigError at the file's line and column.
// - YamlPositions: where each node came from, so that a validation error names it as
//   file:line:column (1-based), or as `override 'key=value'`:1:column when a --set put it there.
// - apply_set: one `--set dotted.key=value` override, applied to the tree before validation and
//   checked against a YamlSchema (the document's known keys): unknown keys are errors with the
//   closest known key suggested; a list element is named by its index or by its `name` key
//   (`network.levels.spine.latency=200 ns`, `workload.steps.do.0.all_reduce.bytes=1 MiB`). An
//   override replaces or adds values; it never creates list elements.
//
// Nothing here knows topologies or scenarios: each document brings its schema and its own checks
// of the values. Errors are ConfigError (sim/error.h). Objects here are owned by one load and
// used on one thread.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ranksim::sim {

// The keys a document may hold, as a tree. A node is one of: a mapping with fixed keys (`keys`),
// a mapping whose keys the user names (`any_key`: every entry follows that schema; an override
// may only reach entries that exist), a list (`items`: every element follows that schema), or,
// below `open`, anything (keys there are checked by the document's validation, not by --set).
// A nullptr child is a plain value (or a list of plain values).
struct YamlSchema {
  std::vector<std::pair<std::string, const YamlSchema*>> keys;
  const YamlSchema* any_key = nullptr;
  const YamlSchema* items = nullptr;
  bool open = false;

  std::vector<std::string> key_names() const;  // in declaration order
  // True when k is a fixed key; *child is then its schema (nullptr: a plain value).
  bool has_key(std::string_view k, const YamlSchema** child) const;
};

// Where a document's nodes came from: the source (its marks), or an override string (nodes an
// override created or parsed carry no useful mark of their own, so they are registered here).
class YamlPositions {
 public:
  explicit YamlPositions(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  // Registers n and everything below it as coming from override `text` (named "override
  // 'text'"), whose value starts at 0-based column value_col.
  void add_override_tree(const YAML::Node& n, const std::string& text, std::size_t value_col);
  // Registers n alone, at 0-based column col of override `text`.
  void add_override_node(const YAML::Node& n, const std::string& text, std::size_t col);

  // Throws ConfigError for node `at`: the override it came from, else source:line:column (0:0
  // when the node has no mark).
  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const;

 private:
  struct Origin {
    YAML::Node node;
    std::string file;  // "override '...'"
    int column;        // 1-based, in the override string
  };
  std::string source_;
  std::vector<Origin> origins_;
};

// Parses YAML text. Throws ConfigError "malformed YAML: ..." at source:line:column, also for an
// alias inside the node it names (a cycle, which yaml-cpp accepts and no walk over the tree
// finishes), and for a quoted value whose closing quote never comes. Nesting is bounded at 256 levels.
YAML::Node parse_yaml(const std::string& text, const std::string& source);

// How one document's overrides behave where documents differ.
struct SetOptions {
  // How errors name the document: "this topology", "this scenario".
  std::string document;
  // The examples in the error for text without '=': "such as <example>".
  std::string example;
  // Whether `key=` (nothing after '=') sets the key to null. Default: false ("missing value").
  bool allow_empty_value = false;
  // Whether a plain value standing where a deeper key goes is replaced by a mapping (a scenario's
  // `batch: file` becomes `batch: {rows: 16}` under --set batch.rows=16). Default: false (an
  // error: the value is not a mapping).
  bool replace_plain_values = false;
  // Whether an unknown key's error names the mapping it is missing from ("unknown key 'x' in
  // 'network'") and lists the known keys as "(known keys: ...)"; else "unknown key 'x'" and
  // "(known keys here: ...)". Default: true.
  bool name_parent_of_unknown_key = true;
  // Prefixes the override may start with that name this document inside another one's overrides
  // (a scenario's `--set topology.nodes=4` or `--set topology_set.nodes=4` reaches the topology as
  // `nodes=4`): skipped before the key, while errors quote the override as typed and count columns
  // in it. Default: none.
  std::vector<std::string> document_prefixes;
};

// Applies one override "dotted.key=value" to root, checked against schema; registers the nodes
// it adds in positions. REQUIRES: root is a mapping. Throws ConfigError at the override's column.
// The value is parsed as parse_yaml does, and refused when its aliases add more than 10,000 nodes
// (registering walks it whole, and nested aliases grow exponentially: ten lists of ten aliases of
// the previous one are 10^10 nodes in a few hundred bytes).
void apply_set(YAML::Node& root, const std::string& text, const YamlSchema& schema, YamlPositions& positions,
               const SetOptions& options);

// Helpers for the documents' own checks.
// A mapping's entry by exact key (the first match), or an undefined node.
YAML::Node map_entry(const YAML::Node& map, std::string_view key);
// "a mapping", "a list", "'text'" or "nothing": what a node is, for "expected X, got Y".
std::string describe(const YAML::Node& n);
// "a, b, c".
std::string join(const std::vector<std::string>& items, const char* sep = ", ");

}  // namespace ranksim::sim

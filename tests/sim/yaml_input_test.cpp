// The shared YAML reader: errors at file:line:column or at an override's column, and --set
// against a schema (fixed keys, user-named entries, lists by index or name, open sections).
#include "sim/yaml_input.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "sim/error.h"

namespace ranksim::sim {
namespace {

using ::testing::HasSubstr;

// root: {name, size, kinds: {<any>: {speed}}, levels: [{name, latency}], notes: <open>}
struct Schema {
  YamlSchema kind, kinds, level, levels, open, root;
  Schema() {
    kind.keys = {{"speed", nullptr}};
    kinds.any_key = &kind;
    level.keys = {{"name", nullptr}, {"latency", nullptr}};
    levels.items = &level;
    open.open = true;
    root.keys = {{"name", nullptr}, {"size", nullptr}, {"kinds", &kinds}, {"levels", &levels}, {"notes", &open}};
  }
};

const char* const kDoc =
    "name: a\n"
    "size: 4\n"
    "kinds:\n"
    "  gpu: {speed: 1}\n"
    "levels:\n"
    "  - {name: leaf, latency: 1 us}\n"
    "  - {name: spine, latency: 2 us}\n"
    "notes:\n"
    "  - {x: {y: 1}}\n";

SetOptions options() {
  SetOptions o;
  o.document = "this file";
  o.example = "size=8";
  return o;
}

// The error of applying one override to kDoc.
ConfigError set_error(const std::string& text, const SetOptions& o = options()) {
  static const Schema schema;
  YAML::Node root = parse_yaml(kDoc, "doc.yaml");
  YamlPositions pos("doc.yaml");
  try {
    apply_set(root, text, schema.root, pos, o);
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << text;
  return ConfigError("", 0, 0, "");
}

TEST(YamlInput, MalformedYamlNamesLineAndColumn) {
  try {
    parse_yaml("a: 1\nb: [1, 2\n", "bad.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), "bad.yaml");
    EXPECT_EQ(e.line(), 3);
    EXPECT_THAT(e.what(), HasSubstr("malformed YAML"));
  }
}

TEST(YamlInput, FailNamesTheNodesPosition) {
  const YAML::Node root = parse_yaml(kDoc, "doc.yaml");
  const YamlPositions pos("doc.yaml");
  try {
    pos.fail(map_entry(map_entry(root, "kinds"), "gpu"), "bad kind");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "doc.yaml:4:8: bad kind");
  }
}

TEST(YamlInput, SetReplacesValuesAndReportsThemAtTheOverride) {
  const Schema schema;
  YAML::Node root = parse_yaml(kDoc, "doc.yaml");
  YamlPositions pos("doc.yaml");
  apply_set(root, "size=8", schema.root, pos, options());
  apply_set(root, "kinds.gpu.speed=3", schema.root, pos, options());
  EXPECT_EQ(map_entry(root, "size").Scalar(), "8");
  EXPECT_EQ(root["kinds"]["gpu"]["speed"].Scalar(), "3");
  try {
    pos.fail(map_entry(root, "size"), "too big");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "override 'size=8':1:6: too big");
  }
}

TEST(YamlInput, SetIndexesListsByIndexAndByName) {
  const Schema schema;
  YAML::Node root = parse_yaml(kDoc, "doc.yaml");
  YamlPositions pos("doc.yaml");
  apply_set(root, "levels.1.latency=5 us", schema.root, pos, options());
  apply_set(root, "levels.leaf.latency=7 us", schema.root, pos, options());
  apply_set(root, "notes.0.x.y=2", schema.root, pos, options());  // open: anything below
  EXPECT_EQ(root["levels"][1]["latency"].Scalar(), "5 us");
  EXPECT_EQ(root["levels"][0]["latency"].Scalar(), "7 us");
  EXPECT_EQ(root["notes"][0]["x"]["y"].Scalar(), "2");
}

TEST(YamlInput, SetErrorsNameTheOverrideAndColumn) {
  ConfigError e = set_error("sise=8");
  EXPECT_EQ(e.file(), "override 'sise=8'");
  EXPECT_EQ(e.column(), 1);
  EXPECT_THAT(e.what(), HasSubstr("unknown key 'sise' in the top level; did you mean 'size'?"));
  EXPECT_THAT(e.what(), HasSubstr("(known keys: name, size, kinds, levels, notes)"));

  SetOptions terse = options();
  terse.name_parent_of_unknown_key = false;
  EXPECT_THAT(set_error("kinds.gpu.sped=2", terse).what(),
              HasSubstr("override 'kinds.gpu.sped=2':1:11: unknown key 'sped'; did you mean 'speed'? (known keys "
                        "here: speed)"));

  EXPECT_THAT(set_error("levels.5.latency=1 us").what(),
              HasSubstr(":1:8: index 5 is out of range: 'levels' has 2 elements"));
  EXPECT_THAT(set_error("levels.spin.latency=1 us").what(),
              HasSubstr("'levels' has no element named 'spin'; did you mean 'spine'?"));
  EXPECT_THAT(set_error("kinds.tpu.speed=1").what(), HasSubstr("'kinds' has no entry 'tpu'"));
  EXPECT_THAT(set_error("name.first=x").what(), HasSubstr(":1:6: 'name' is a single value; it has no key 'first'"));
  EXPECT_THAT(set_error("size").what(), HasSubstr(":1:1: expected key=value, such as size=8"));
  EXPECT_THAT(set_error("size=").what(), HasSubstr("missing value after '='"));
  EXPECT_THAT(set_error("size=[1").what(), HasSubstr("malformed value"));
}

TEST(YamlInput, SetOptionsForEmptyValuesAndPlainValuesInTheWay) {
  const Schema schema;
  YAML::Node root = parse_yaml(kDoc, "doc.yaml");
  YamlPositions pos("doc.yaml");
  SetOptions o = options();
  o.allow_empty_value = true;
  o.replace_plain_values = true;
  apply_set(root, "size=", schema.root, pos, o);
  EXPECT_TRUE(map_entry(root, "size").IsNull());
  apply_set(root, "notes.0.x=3", schema.root, pos, o);
  apply_set(root, "notes.0.x.z=4", schema.root, pos, o);  // the plain 3 becomes {z: 4}
  EXPECT_EQ(root["notes"][0]["x"]["z"].Scalar(), "4");
}

}  // namespace
}  // namespace ranksim::sim

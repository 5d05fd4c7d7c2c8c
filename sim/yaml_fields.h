// Reading checked values out of a YAML document: the pieces shared by the documents that sim/
// reads (topologies, kernel profiles). A Field is one key of a mapping with its path
// ("node.fabric.bandwidth"); a MapView is a mapping checked against its schema (no unknown key,
// with a suggestion; no key twice); a Reader turns a field's scalar into a checked value (a
// number, a bandwidth, a duration...). Every error is a ConfigError at the node's file:line:column
// through the document's YamlPositions (sim/yaml_input.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/suggest.h"
#include "sim/time.h"
#include "sim/units.h"
#include "sim/yaml_input.h"

namespace ranksim::sim {

struct Field {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  std::string path;  // "node.fabric.bandwidth"
};

// A mapping checked against its schema: no unknown keys (with a suggestion), no key twice.
class MapView {
 public:
  // A mapping in the value of field f (a null value is reported at f's key).
  MapView(const YamlPositions& pos, const Field& f, const YamlSchema& schema, const std::string& expected)
      : MapView(pos, f.value, f.path, schema, expected, &f.key_node) {}
  // The document's root has the empty path and is named `document` in messages.
  MapView(const YamlPositions& pos, const YAML::Node& node, std::string path, const YamlSchema& schema,
          const std::string& expected, const YAML::Node* null_at = nullptr, std::string document = "the topology")
      : pos_(pos), node_(node), path_(std::move(path)), document_(std::move(document)) {
    const std::string where = path_.empty() ? document_ : "'" + path_ + "'";
    if (!node.IsMap())
      pos.fail(node.IsNull() && null_at != nullptr ? *null_at : node,
               where + " must be " + expected + ", got " + describe(node));
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar())
        pos.fail(it->first, "keys in " + where + " must be plain names, got " + describe(it->first));
      const std::string& key = it->first.Scalar();
      if (schema.any_key == nullptr) {
        const YamlSchema* child = nullptr;
        if (!schema.has_key(key, &child))
          pos.fail(it->first, "unknown key '" + key + "' in " + where + did_you_mean(key, schema.key_names()) +
                                  " (known keys: " + join(schema.key_names()) + ")");
      }
      for (const Field& f : fields_) {
        if (f.key == key) {
          const YAML::Mark m = f.key_node.Mark();
          pos.fail(it->first,
                   "duplicate key '" + key + "' in " + where +
                       (m.is_null() ? std::string() : " (first given on line " + std::to_string(m.line + 1) + ")"));
        }
      }
      fields_.push_back({key, it->first, it->second, path_.empty() ? key : path_ + "." + key});
    }
  }

  const Field* find(std::string_view key) const {
    for (const Field& f : fields_)
      if (f.key == key) return &f;
    return nullptr;
  }
  const Field& need(std::string_view key, const std::string& expected) const {
    if (const Field* f = find(key)) return *f;
    pos_.fail(node_, (path_.empty() ? document_ : "'" + path_ + "'") + " is missing the key '" + std::string(key) +
                         "' (" + expected + ")");
  }
  const std::vector<Field>& fields() const { return fields_; }
  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }

 private:
  const YamlPositions& pos_;
  YAML::Node node_;
  std::string path_;
  std::string document_;
  std::vector<Field> fields_;
};

class Reader {
 public:
  explicit Reader(const YamlPositions& pos) : pos_(pos) {}
  const YamlPositions& pos() const { return pos_; }

  const std::string& scalar(const Field& f, const std::string& expected) const {
    if (f.value.IsNull()) pos_.fail(f.key_node, "'" + f.path + "' has no value; expected " + expected);
    if (!f.value.IsScalar()) pos_.fail(f.value, "'" + f.path + "' must be " + expected + ", got " + describe(f.value));
    return f.value.Scalar();
  }
  std::string name(const Field& f) const {
    const std::string& s = scalar(f, "a name");
    if (s.empty()) pos_.fail(f.value, "'" + f.path + "' must not be empty");
    return s;
  }
  long long integer(const Field& f, long long lo, long long hi, const std::string& meaning) const {
    const std::string& s = scalar(f, "a whole number (" + meaning + ")");
    long long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == s.data() + s.size() && (v < lo || v > hi)))
      pos_.fail(f.value, "'" + f.path + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                             " (" + meaning + "), got " + s);
    if (ec != std::errc() || end != s.data() + s.size())
      pos_.fail(f.value, "'" + f.path + "' must be a whole number (" + meaning + "), got '" + s + "'");
    return v;
  }
  double number(const Field& f, const std::string& meaning) const {
    const std::string& s = scalar(f, "a number (" + meaning + ")");
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v))
      pos_.fail(f.value, "'" + f.path + "' must be a number (" + meaning + "), got '" + s + "'");
    return v;
  }
  double positive_number(const Field& f, const std::string& meaning) const {
    const double v = number(f, meaning);
    if (!(v > 0)) pos_.fail(f.value, "'" + f.path + "' must be positive (" + meaning + "), got " + f.value.Scalar());
    return v;
  }
  bool boolean(const Field& f) const {
    const std::string& s = scalar(f, "true or false");
    if (s == "true") return true;
    if (s == "false") return false;
    pos_.fail(f.value, "'" + f.path + "' must be true or false, got '" + s + "'");
  }
  // A bandwidth below 1 kB/s (or a FLOP rate below 1 kFLOP/s) is a unit slip, and would make any
  // transfer or kernel outlast the simulated clock: refused here, at its position.
  double bandwidth(const Field& f) const {
    const double v = with_units(f, "a bandwidth such as '450 GB/s'", units::parse_bandwidth);
    if (!(v >= 1e3)) pos_.fail(f.value, "'" + f.path + "' must be at least 1 kB/s, got '" + scalar(f, "") + "'");
    return v;
  }
  Time duration(const Field& f) const { return with_units(f, "a duration such as '2 us'", units::parse_duration); }
  uint64_t bytes(const Field& f) const { return with_units(f, "a size such as '80 GiB'", units::parse_bytes); }
  double flop_rate(const Field& f) const {
    const double v = with_units(f, "a FLOP rate such as '989.4 TFLOP/s'", units::parse_flop_rate);
    if (!(v >= 1e3)) pos_.fail(f.value, "'" + f.path + "' must be at least 1 kFLOP/s, got '" + scalar(f, "") + "'");
    return v;
  }

 private:
  template <class Parse>
  auto with_units(const Field& f, const std::string& expected, Parse parse) const
      -> decltype(parse(std::string_view())) {
    const std::string& s = scalar(f, expected);
    try {
      return parse(s);
    } catch (const units::UnitError& e) {
      pos_.fail(f.value, "'" + f.path + "': " + e.what());
    }
  }
  const YamlPositions& pos_;
};

}  // namespace ranksim::sim

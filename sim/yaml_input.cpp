#include "sim/yaml_input.h"

#include <algorithm>
#include <cctype>

#include "sim/error.h"
#include "sim/suggest.h"

namespace ranksim::sim {

std::vector<std::string> YamlSchema::key_names() const {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(k.first);
  return out;
}

bool YamlSchema::has_key(std::string_view k, const YamlSchema** child) const {
  for (const auto& [name, sub] : keys)
    if (name == k) {
      *child = sub;
      return true;
    }
  return false;
}

void YamlPositions::add_override_tree(const YAML::Node& n, const std::string& text, std::size_t value_col) {
  const YAML::Mark m = n.Mark();
  const std::size_t col = value_col + (!m.is_null() && m.line == 0 ? static_cast<std::size_t>(m.column) : 0);
  add_override_node(n, text, col);
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      add_override_tree(it->first, text, value_col);
      add_override_tree(it->second, text, value_col);
    }
  } else if (n.IsSequence()) {
    for (auto it = n.begin(); it != n.end(); ++it) add_override_tree(*it, text, value_col);
  }
}

void YamlPositions::add_override_node(const YAML::Node& n, const std::string& text, std::size_t col) {
  origins_.push_back({n, "override '" + text + "'", static_cast<int>(col) + 1});
}

void YamlPositions::fail(const YAML::Node& at, const std::string& what) const {
  for (const Origin& o : origins_)
    if (o.node.is(at)) throw ConfigError(o.file, 1, o.column, what);
  const YAML::Mark m = at.Mark();
  if (m.is_null()) throw ConfigError(source_, 0, 0, what);
  throw ConfigError(source_, m.line + 1, m.column + 1, what);
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source, e.mark.line + 1, e.mark.column + 1, "malformed YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source, 0, 0, std::string("malformed YAML: ") + e.what());
  }
}

YAML::Node map_entry(const YAML::Node& map, std::string_view key) {
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string trim_copy(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> map_keys(const YAML::Node& map) {
  std::vector<std::string> out;
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar()) out.push_back(it->first.Scalar());
  return out;
}

}  // namespace

void apply_set(YAML::Node& root, const std::string& text, const YamlSchema& schema, YamlPositions& positions,
               const SetOptions& options) {
  const std::string file = "override '" + text + "'";
  auto fail_at = [&file](std::size_t col0, const std::string& what) {
    throw ConfigError(file, 1, static_cast<int>(col0) + 1, what);
  };
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || trim_copy(std::string_view(text).substr(0, eq)).empty())
    fail_at(0, "expected key=value, such as " + options.example);

  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    fail_at(eq + 1 + static_cast<std::size_t>(std::max(0, e.mark.column)), "malformed value: " + e.msg);
  }
  if (value.IsNull() && !options.allow_empty_value) fail_at(eq + 1, "missing value after '='");

  // Split the key at dots, remembering where each component starts.
  std::vector<std::pair<std::string, std::size_t>> parts;
  for (std::size_t b = 0; b <= eq;) {
    std::size_t e = text.find('.', b);
    if (e == std::string::npos || e > eq) e = eq;
    std::string part = trim_copy(std::string_view(text).substr(b, e - b));
    if (part.empty()) fail_at(b, "empty key component in '" + text.substr(0, eq) + "'");
    parts.emplace_back(std::move(part), b);
    b = e + 1;
  }

  YAML::Node cur;
  cur.reset(root);
  const YamlSchema* sc = &schema;
  std::string path;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& [part, col] = parts[i];
    const bool last = i + 1 == parts.size();
    const std::string here = path.empty() ? "the top level" : "'" + path + "'";
    if (sc == nullptr) fail_at(col, here + " is a single value; it has no key '" + part + "'");

    if (sc->items != nullptr || (sc->open && cur.IsSequence())) {
      if (!cur.IsSequence())
        fail_at(col, here + " is not a list in " + options.document + ", so it has no element '" + part + "'");
      std::size_t index = cur.size();
      std::vector<std::string> names;
      for (std::size_t k = 0; k < cur.size(); ++k) {
        const YAML::Node name = cur[k].IsMap() ? map_entry(cur[k], "name") : YAML::Node();
        if (name.IsDefined() && name.IsScalar()) {
          names.push_back(name.Scalar());
          if (name.Scalar() == part && index == cur.size()) index = k;
        }
      }
      if (all_digits(part)) {
        index = part.size() > 6 ? cur.size() : std::stoul(part);
        if (index >= cur.size())
          fail_at(col,
                  "index " + part + " is out of range: " + here + " has " + std::to_string(cur.size()) + " elements");
      } else if (index == cur.size()) {
        fail_at(col, here + " has no element named '" + part + "'" + did_you_mean(part, names) +
                         " (elements: " + join(names) + "; an index such as 0 also works)");
      }
      path += (path.empty() ? "" : ".") + part;
      if (last) {
        cur[index] = value;
        positions.add_override_tree(value, text, eq + 1);
        return;
      }
      YAML::Node next = cur[index];
      cur.reset(next);
      sc = sc->open ? sc : sc->items;
      continue;
    }

    const YamlSchema* child = nullptr;
    if (sc->open) {
      child = sc;
    } else if (sc->any_key != nullptr) {
      const std::vector<std::string> keys = cur.IsMap() ? map_keys(cur) : std::vector<std::string>{};
      if (std::find(keys.begin(), keys.end(), part) == keys.end())
        fail_at(col, here + " has no entry '" + part + "'" + did_you_mean(part, keys) +
                         (keys.empty() ? std::string() : " (entries: " + join(keys) + ")"));
      child = sc->any_key;
    } else if (!sc->has_key(part, &child)) {
      const std::vector<std::string> known = sc->key_names();
      if (options.name_parent_of_unknown_key)
        fail_at(col, "unknown key '" + part + "' in " + here + did_you_mean(part, known) +
                         " (known keys: " + join(known) + ")");
      fail_at(col,
              "unknown key '" + part + "'" + did_you_mean(part, known) + " (known keys here: " + join(known) + ")");
    }
    if (!cur.IsMap() && !cur.IsNull())
      fail_at(col, here + " is " + describe(cur) + ", not a mapping, so it has no key '" + part + "'");
    path += (path.empty() ? "" : ".") + part;
    if (last) {
      cur[part] = value;
      positions.add_override_tree(value, text, eq + 1);
      return;
    }
    YAML::Node next = map_entry(cur, part);
    const bool replace = options.replace_plain_values && next.IsDefined() && !next.IsNull() && !next.IsMap() &&
                         !(child != nullptr && child->items != nullptr && next.IsSequence());
    if (!next.IsDefined() || next.IsNull() || replace) {
      if (child != nullptr && child->items != nullptr)
        fail_at(col, "'" + path + "' is not in " + options.document +
                         "; an override cannot create list elements (set the whole list instead)");
      YAML::Node created(YAML::NodeType::Map);
      cur[part] = created;
      positions.add_override_node(created, text, col);
      next.reset(created);
    }
    cur.reset(next);
    sc = child;  // nullptr: a plain value, which the next part reports
  }
}

}  // namespace ranksim::sim

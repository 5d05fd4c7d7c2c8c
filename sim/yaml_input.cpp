#include "sim/yaml_input.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "sim/error.h"
#include "sim/suggest.h"
#include "sim/text.h"

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

namespace {

// The nodes that aliases may add to an override's value (each alias counts the nodes of what it
// names), which apply_set walks whole.
constexpr std::uint64_t kMaxOverrideAliasNodes = 10000;

// Reads a document's events and throws YAML::ParserException at an alias that names a node it is
// inside (a cycle) or that brings the nodes added by aliases past max_alias_nodes.
// Also throws at a quoted scalar whose closing quote never comes: yaml-cpp reads it to the end of
// the text as one value, and the error would otherwise be a missing key far from the cause.
class AliasCheck : public YAML::EventHandler {
 public:
  AliasCheck(const std::string& text, std::uint64_t max_alias_nodes) : text_(text), max_alias_nodes_(max_alias_nodes) {}
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { leaf(anchor); }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor, const std::string&) override {
    if (tag == "!" && never_closed(mark)) {
      throw YAML::ParserException(mark, std::string("the quote that opens this value is never closed (YAML read the "
                                                    "rest of the text into it); add the closing ") +
                                            text_[static_cast<std::size_t>(mark.pos)]);
    }
    leaf(anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (std::any_of(open_.begin(), open_.end(), [&](const Open& o) { return o.anchor == anchor; })) {
      throw YAML::ParserException(mark,
                                  "this alias names a node that contains it (a cycle); ranksim reads "
                                  "trees only: write the value out");
    }
    const std::uint64_t n = anchor < sizes_.size() ? sizes_[anchor] : 1;
    alias_nodes_ += n;
    nodes_ += n;
    if (alias_nodes_ > max_alias_nodes_) {
      throw YAML::ParserException(mark, "aliases expand this value by more than " + std::to_string(max_alias_nodes_) +
                                            " nodes (aliases of nodes that hold aliases); write the values out");
    }
  }

 private:
  struct Open {
    YAML::anchor_t anchor;
    std::uint64_t nodes_before;
  };
  void leaf(YAML::anchor_t anchor) {
    ++nodes_;
    record(anchor, 1);
  }
  // yaml-cpp stops at 2,000 levels with "bad file"; ranksim's documents nest a few levels deep.
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (open_.size() >= kMaxDepth) {
      throw YAML::ParserException(mark, "lists and mappings nested more than " + std::to_string(kMaxDepth) +
                                            " deep; ranksim's files nest a few levels");
    }
    open_.push_back({anchor, nodes_++});
  }
  static constexpr std::size_t kMaxDepth = 256;
  void close() {
    const Open o = open_.back();
    open_.pop_back();
    record(o.anchor, nodes_ - o.nodes_before);
  }
  // Whether the quoted scalar starting at mark runs to the end of the text: in "..." a backslash
  // escapes the next character; in '...' a quote is written twice.
  bool never_closed(const YAML::Mark& mark) const {
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return false;
    const std::size_t open = static_cast<std::size_t>(mark.pos);
    const char q = text_[open];
    if (q != '"' && q != '\'') return false;
    for (std::size_t i = open + 1; i < text_.size(); ++i) {
      if (q == '"' && text_[i] == '\\') {
        ++i;
      } else if (text_[i] == q) {
        if (q == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;
        } else {
          return false;
        }
      }
    }
    return true;
  }
  void record(YAML::anchor_t anchor, std::uint64_t n) {
    if (anchor == 0) return;  // no anchor
    if (sizes_.size() <= anchor) sizes_.resize(anchor + 1, 1);
    sizes_[anchor] = n;
  }

  const std::string& text_;
  std::vector<Open> open_;            // the nodes being read, outermost first
  std::vector<std::uint64_t> sizes_;  // by anchor: the nodes of what it names, aliases expanded
  std::uint64_t nodes_ = 0;           // so far, aliases expanded
  std::uint64_t alias_nodes_ = 0;     // of which added by aliases
  std::uint64_t max_alias_nodes_;
};

// Notes where a document starts, and ignores the rest.
class DocumentStart : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { mark_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  const YAML::Mark& mark() const { return mark_; }

 private:
  YAML::Mark mark_ = YAML::Mark::null_mark();
};

// YAML::Load, after AliasCheck over the same document; a second document (after `---`) is an
// error (YAML::Load would read the first and drop the rest without a word).
YAML::Node load_checked(const std::string& text, std::uint64_t max_alias_nodes) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  AliasCheck check(text, max_alias_nodes);
  parser.HandleNextDocument(check);
  DocumentStart second;
  if (parser.HandleNextDocument(second)) {
    throw YAML::ParserException(second.mark(),
                                "a second YAML document starts here (after '---'); a file holds one document: "
                                "remove the second, or give it a file of its own");
  }
  return YAML::Load(text);
}

}  // namespace

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    // The documents' readers look at the values they expect and never expand an alias: only
    // cycles are refused (a billion laughs in a file is a list where a value should be).
    return load_checked(text, std::numeric_limits<std::uint64_t>::max());
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
  std::size_t key_start = 0;
  for (const std::string& prefix : options.document_prefixes)
    if (text.rfind(prefix, 0) == 0 && eq != std::string::npos && eq > prefix.size()) key_start = prefix.size();
  if (eq == std::string::npos || trim(std::string_view(text).substr(key_start, eq - key_start)).empty())
    fail_at(0, "expected key=value, such as " + options.example);

  YAML::Node value;
  try {
    value = load_checked(text.substr(eq + 1), kMaxOverrideAliasNodes);
  } catch (const YAML::Exception& e) {
    fail_at(eq + 1 + static_cast<std::size_t>(std::max(0, e.mark.column)), "malformed value: " + e.msg);
  }
  if (value.IsNull() && !options.allow_empty_value) fail_at(eq + 1, "missing value after '='");

  // Split the key at dots, remembering where each component starts.
  std::vector<std::pair<std::string, std::size_t>> parts;
  for (std::size_t b = key_start; b <= eq;) {
    std::size_t e = text.find('.', b);
    if (e == std::string::npos || e > eq) e = eq;
    std::string part(trim(std::string_view(text).substr(b, e - b)));
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
    // A list stays a list when the next part can index it (a list schema, or an open one: a
    // step's `gemm: [m, n, k]` takes --set ...compute.gemm.1=4096).
    const bool replace = options.replace_plain_values && next.IsDefined() && !next.IsNull() && !next.IsMap() &&
                         !(child != nullptr && (child->items != nullptr || child->open) && next.IsSequence());
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

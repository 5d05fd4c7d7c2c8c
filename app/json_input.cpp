#include "app/json_input.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::app {
namespace {

// A SAX pass that finds where a number too large for a double is and which field holds it:
// nlohmann's DOM parser reports that (out_of_range.406) with neither. Tracks the path of keys and
// indices to the value being read; parse_error records it and the token's 1-based line and column.
class OverflowFinder {
 public:
  explicit OverflowFinder(const std::string& text) : text_(text) {}
  using json = nlohmann::json;
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (!path_.empty()) path_.back().key = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception&) {
    const std::size_t start = std::min(text_.size(), position >= token.size() ? position - token.size() : 0);
    line_ = 1 + static_cast<int>(std::count(text_.begin(), text_.begin() + static_cast<std::ptrdiff_t>(start), '\n'));
    const std::size_t nl = text_.rfind('\n', start == 0 ? std::string::npos : start - 1);
    column_ = static_cast<int>(start - (nl == std::string::npos ? 0 : nl + 1)) + 1;
    token_ = token;
    // An enclosing list counted the element being read when it opened; the innermost one has not
    // counted the value that failed.
    for (std::size_t i = 0; i < path_.size(); ++i) {
      const Frame& f = path_[i];
      where_ += i == 0 ? "" : ".";
      where_ += f.array ? std::to_string(i + 1 == path_.size() ? f.index : f.index - 1) : f.key;
    }
    return false;
  }
  // "'m.json':3:24: \"ranks.0.clock_us\" is 1e400", after a failed parse.
  std::string where(const std::string& path) const {
    return "'" + path + "':" + std::to_string(line_) + ":" + std::to_string(column_) + ": " +
           (where_.empty() ? std::string("a value") : "\"" + where_ + "\"") + " is " + token_;
  }

 private:
  struct Frame {
    bool array;
    std::size_t index;  // in a list: the elements read so far
    std::string key;    // in an object: the last key read
  };
  bool value() {
    if (!path_.empty() && path_.back().array) ++path_.back().index;
    return true;
  }
  bool open(bool array) {
    value();
    path_.push_back({array, 0, {}});
    return true;
  }
  bool close() {
    path_.pop_back();
    return true;
  }
  const std::string& text_;
  std::vector<Frame> path_;
  std::string where_, token_;
  int line_ = 0, column_ = 0;
};

}  // namespace

std::string shown_json(const nlohmann::json& v) {
  if (!v.is_structured()) return v.dump();
  const bool flat = std::none_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_structured(); });
  if (flat && v.size() <= 8) return v.dump();
  const std::string n = std::to_string(v.size());
  if (v.is_array()) return "a list of " + n + (v.size() == 1 ? " item" : " items");
  return "an object of " + n + (v.size() == 1 ? " entry" : " entries");
}

nlohmann::json parse_json_strictly(const std::string& text, const std::string& path, const std::string& prefix,
                                   const std::string& what) {
  nlohmann::json root;
  // JSON leaves a key given twice in one object to the reader (nlohmann keeps the last): refused
  // here, as taking either silently would be a guess. Keys are tracked per open object.
  std::vector<std::set<std::string>> open_objects;
  std::string twice;
  const auto note_keys = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) open_objects.emplace_back();
    if (event == E::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == E::key && !open_objects.empty() && twice.empty() && parsed.is_string() &&
        !open_objects.back().insert(parsed.get<std::string>()).second)
      twice = parsed.get<std::string>();
    return true;
  };
  try {
    root = nlohmann::json::parse(text, note_keys);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(prefix + "'" + path + "' is not JSON: " + e.what());
  } catch (const nlohmann::json::out_of_range& e) {  // 406: a number beyond a double (1e400)
    OverflowFinder finder(text);
    nlohmann::json::sax_parse(text, &finder);
    throw Error(prefix + finder.where(path) + ", beyond what a double holds (about 1.8e308); " + what +
                " holds finite numbers");
  } catch (const nlohmann::json::exception& e) {
    throw Error(prefix + "'" + path + "' is not JSON ranksim can read: " + e.what());
  }
  if (!twice.empty())
    throw Error(prefix + "'" + path + "': the key \"" + twice + "\" is given twice in one object; " + what +
                " gives each key once");
  return root;
}

}  // namespace ranksim::app

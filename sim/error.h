// Error: the exception type of every user-facing failure in ranksim.
//
// A user error (malformed YAML, impossible parallel layout, mismatched collective, deadlock)
// is thrown as ranksim::Error or a subclass, with a message that names the input and says what
// to do. A programming error inside ranksim is an assertion, not an Error. Library code never
// calls exit(); the command line maps Error to exit code 2 (bad input) or 1 (a failed check).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace ranksim {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input in a configuration file: the message starts with "file:line:column: ".
class ConfigError : public Error {
 public:
  ConfigError(const std::string& file, int line, int column, const std::string& what)
      : Error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what),
        file_(file),
        line_(line),
        column_(column) {}
  const std::string& file() const { return file_; }
  int line() const { return line_; }      // 1-based; 0 when unknown
  int column() const { return column_; }  // 1-based; 0 when unknown

 private:
  std::string file_;
  int line_;
  int column_;
};

// `f()`, an Error it throws thrown again as an Error whose message starts "`prefix`: ", so that it
// names the option, variable or file the failing value came from.
template <class F>
auto with_error_prefix(const std::string& prefix, F&& f) -> decltype(std::forward<F>(f)()) {
  try {
    return std::forward<F>(f)();
  } catch (const Error& e) {
    throw Error(prefix + ": " + e.what());
  }
}

}  // namespace ranksim

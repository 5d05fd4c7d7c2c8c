// Helpers of the command-line tests (tests/app/*_itest.cpp): run `ranksim ARGS...` in process
// through run_cli and keep its exit code, standard output and standard error; the shipped files'
// paths; a file's bytes.
#pragma once

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"

namespace ranksim::app::testing {

struct CliResult {
  int code;
  std::string out, err;
};

inline CliResult run(std::vector<std::string> args) {
  args.insert(args.begin(), "ranksim");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

inline std::string scenario(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/scenarios/" + name; }

// A shipped file's name as a GoogleTest parameter name: its stem, other characters than letters
// and digits made '_' ("cp-validation-bshd.yaml" -> "cp_validation_bshd").
inline std::string param_name(const std::string& file) {
  std::string n = std::filesystem::path(file).stem().string();
  for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return n;
}
inline std::string topo(const std::string& name) { return std::string(RANKSIM_SOURCE_DIR) + "/topologies/" + name; }

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ranksim::app::testing

#include "app/cli.h"

#include <iostream>

#include <CLI/CLI.hpp>

#include "sim/error.h"

namespace ranksim::app {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App cli{"ranksim: simulate multi-rank parallel programs on a modelled fabric"};
  cli.require_subcommand(1);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e, out, err) == 0 ? 0 : 2;
  }
  return 0;
}

int main(int argc, char** argv) { return run_cli(argc, argv, std::cout, std::cerr); }

}  // namespace ranksim::app

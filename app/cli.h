// The ranksim command line: parses argv, dispatches to a subcommand, maps errors to exit codes.
//
// Exit codes: 0 success, 1 a check failed, 2 bad input (ranksim::Error), 3 internal error.
// Diagnostics go to stderr; results go to stdout.
#pragma once

#include <iosfwd>

namespace ranksim::app {

int main(int argc, char** argv);
// Same, with explicit streams (tests call this).
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace ranksim::app

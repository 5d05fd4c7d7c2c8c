// `ranksim bench collectives`: an nccl-tests-style sweep of one collective over message sizes on
// a simulated fabric. Shape-only by default (timing without data, so thousands of ranks are
// cheap); --check moves real numbers and verifies every rank's result, like nccl-tests' -c.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ranksim::app {

struct BenchOptions {
  std::string topology;            // path to a topology YAML file
  std::vector<std::string> sets;   // "key=value" overrides of the topology
  std::string op = "all_reduce";   // all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|sendrecv
  int ranks = 0;                   // 0: every device of the topology
  std::string sizes = "8B:128MiB"; // MIN:MAX (doubling) or one size
  std::string algorithm = "auto";
  std::string dtype = "f32";
  bool check = false;
};

// Prints the table; returns 0, or 1 when --check found wrong elements. Throws ranksim::Error on
// bad options (unknown op, dtype or algorithm, more ranks than devices, malformed sizes).
int bench_collectives(const BenchOptions& options, std::ostream& out);

}  // namespace ranksim::app

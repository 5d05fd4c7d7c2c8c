// Reading measured nccl-tests results: the input of `ranksim calibrate` (docs/collective-timing.md).
//
// Two layouts are read:
// - the text table that all_reduce_perf and its siblings print: `#` header lines (the
//   "Collective test starting: X_perf" line names the collective; the "Rank i ... on HOST device"
//   lines give the rank count, and their distinct hosts the node count), then one row per size:
//   size, count, type, redop, root, then the out-of-place time (us), algbw, busbw, #wrong and the
//   in-place columns. Lines that are neither (NCCL INFO logs interleaved with the table) are
//   skipped; a line that starts with a size but does not have these columns is an error.
// - CSV: `#` lines of the form `# key: value` (op, ranks, nodes, algo, source, hardware, ... as in
//   docs/data/nccl-tests/), then a header row naming the columns, of which the size (`size_bytes`
//   or `size`) and the out-of-place time in microseconds (`time_us` or the first `time`) are read.
// Rows of size 0 are left out (nccl-tests prints them for its empty first sizes).
//
// Errors (ranksim::Error, naming the file and line): an unreadable file, a row that is not a
// number where one is needed, a non-positive time, several collectives in one file, a table
// without rows.
#pragma once

#include <string>
#include <vector>

namespace ranksim::app {

struct MeasuredRow {
  double bytes = 0;    // nccl-tests' size
  double seconds = 0;  // out-of-place time
};

struct MeasuredTable {
  std::string path;                // as given
  std::string op;                  // all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce; "" unknown
  int ranks = 0;                   // 0: not stated
  int nodes = 0;                   // 0: not stated
  std::string algorithm;           // the forced NCCL_ALGO in ranksim's names ("ring", ...), "auto", or "" unknown
  std::vector<std::string> about;  // the `# source:` and `# hardware:` lines, for the calibrated file's comment
  std::vector<MeasuredRow> rows;
};

// Parses text read from `path` (used in messages). Throws ranksim::Error.
MeasuredTable parse_nccl_tests(const std::string& text, const std::string& path);
// Reads and parses a file. Throws ranksim::Error naming the path when it cannot be read.
MeasuredTable read_nccl_tests(const std::string& path);

}  // namespace ranksim::app

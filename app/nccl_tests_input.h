// Reading measured nccl-tests results: the input of `ranksim calibrate` (docs/collective-timing.md).
//
// Three layouts are read:
// - the text table that all_reduce_perf and its siblings print: `#` header lines (the
//   "Collective test starting: X_perf" line names the collective; the "Rank i ... on HOST device"
//   lines give the rank count, and their distinct hosts the node count), then one row per size:
//   size, count, type, redop, root, then the out-of-place time (us), algbw, busbw, #wrong and the
//   in-place columns. Older versions leave out root or redop, so the time is found from the row's
//   end: as many columns before it as the header's names put after its first "time". Lines that are neither (NCCL INFO
//   logs interleaved with the table) are skipped; a line that starts with a size but does not have these columns is an
//   error. A message of NCCL's can start in the middle of a row (NCCL_DEBUG=INFO: nccl-tests prints a row's first
//   columns before it runs the size); the row's rest, a later line of numbers alone, is joined to its start, and a row
//   whose rest does not come before the next row, `#` line or the file's end is an error. A launcher's tag before each
//   line (Open MPI's --tag-output "[1,0]<stdout>:", -prepend-rank's "[0] ", srun --label's "0: ") is dropped. A log of
//   several tests run one after another (a job script's output) holds one table per test: each starts at its
//   "Collective test starting" line, or, in the older header that has none, at its "nThread ... nGpus ..." line.
// - CSV: `#` lines of the form `# key: value` (op, ranks, nodes, algo, gpus_per_thread, source,
//   hardware, ... as in docs/data/nccl-tests/), then a header row naming the columns, of which the size (`size_bytes`
//   or `size`) and the out-of-place time in microseconds (`time_us` or the first `time`) are read.
//   One table per file.
// - JSON: the file nccl-tests 2.17 and later write with -J FILE.json (a file whose first character
//   is '{'). One test: its collective from the binary that "args" starts with, its ranks from
//   "config" ("devices", one entry a process, times "nthreads" x "ngpus"), its nodes from their
//   distinct hosts, NCCL_ALGO and NCCL_PROTO from "env" (the writing process's environment), and
//   each "results" entry's size and out-of-place time ("time", or "cpu_time" with -C 1; the
//   in-place time when the out-of-place one is null). A key given twice, a field of the wrong
//   kind, or a file without "results" is an error naming the field.
// Rows of size 0 are left out (nccl-tests prints them for its empty first sizes).
// A text log's NCCL tuning messages (NcclChoice) give each row NCCL's choice for its size: the
// message's bytes are the call's (all_gather's and reduce_scatter's one rank's in the form with
// channels, 2.24 on, which the message's "AllGather:" or "ReduceScatter:" says: times the ranks,
// as nccl-tests' size).
//
// Errors (ranksim::Error, naming the file and line): an unreadable file, a row that is not a
// number where one is needed, a non-positive time, two collectives in one CSV, a table without
// rows; and, where a log's tests are taken (select_tests), a test of a collective ranksim does not
// time, a test that printed no rows, or no test of the collective asked for.
#pragma once

#include <string>
#include <vector>

#include "sim/collective_shape.h"

namespace ranksim::app {

// What NCCL ran a call with, as its tuning messages say (a log run with NCCL_DEBUG=INFO and
// NCCL_DEBUG_SUBSYS=TUNING, or ALL): rank 0 prints, for every call, "N Bytes -> Algo A proto P
// time T" (NCCL 2.20-2.22: A and P NCCL's numbers; 2.23 with "Func: " first) or "Func: N Bytes ->
// Algo NAME proto NAME channel{Lo..Hi}={lo..hi}" (2.24 on: names, and the channels the call ran on).
struct NcclChoice {
  sim::CollAlgo algorithm = sim::CollAlgo::ring;  // NCCL's CollNet direct and chain both collnet
  sim::Protocol protocol = sim::Protocol::simple;
  int channels = 0;  // 0: not said (before 2.24)
  bool operator==(const NcclChoice&) const = default;
};

struct MeasuredRow {
  double bytes = 0;    // nccl-tests' size
  double seconds = 0;  // out-of-place time
  // The same size's in-place time where the file gives one (text tables and JSON; not CSV), else
  // 0: how far two runs of the same calls lie apart.
  double in_place_seconds = 0;
  // NCCL's choices for calls of this size, as its tuning messages say: none when the log has no
  // such message for it, several when its calls of this size did not all run alike.
  std::vector<NcclChoice> nccl;
};

struct MeasuredTable {
  std::string path;         // as given; one test of a log of several: "FILE:LINE (X_perf)"
  std::string test;         // the nccl-tests binary its header names ("all_gather_perf"); "" none
  int line = 0;             // the line its test starts at (1 for a file of one table)
  std::string op;           // all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce; "" unknown
  int ranks = 0;            // 0: not stated
  int nodes = 0;            // 0: not stated
  int gpus_per_thread = 1;  // GPUs one thread drove (nccl-tests -g; "nGpus" in the header)
  // The forced NCCL_ALGO in ranksim's names ("ring", ...), "auto", "" unknown, or a list in
  // NCCL_ALGO's syntax as written ("^nvls", "allreduce:tree,ring": sim/nccl_env.h).
  std::string algorithm;
  // The NCCL_PROTO the runs set, as NCCL printed it ("NCCL_PROTO set by environment to ..." with
  // NCCL_DEBUG=INFO); "" when the file does not say.
  std::string protocol;
  std::vector<std::string> about;  // the `# source:` and `# hardware:` lines, for the calibrated file's comment
  std::vector<MeasuredRow> rows;
};

// Every test of text read from `path` (used in messages), in order; a test may have no rows, or
// name a collective ranksim does not time (op ""): select_tests decides. Throws ranksim::Error.
std::vector<MeasuredTable> parse_nccl_tests_log(const std::string& text, const std::string& path);
// Reads and parses a file. Throws ranksim::Error naming the path when it cannot be read.
std::vector<MeasuredTable> read_nccl_tests_log(const std::string& path);

// The tests of a file that are to be used: every one, or, when `op` (ranksim's name) is given,
// those of that collective. In a log of several, a test of a collective ranksim does not time
// (sendrecv_perf) is left out, and said so in `left_out`, when that is given. Throws
// ranksim::Error, naming the test, for a test (among those asked for) of a collective ranksim does
// not time (and not left out) or without rows, for a log of several tests one of which does not
// name its collective, and when no test is of `op`.
std::vector<MeasuredTable> select_tests(std::vector<MeasuredTable> tests, const std::string& op,
                                        const std::string& path, std::vector<std::string>* left_out = nullptr);

// A file of one table: parse_nccl_tests_log, every test taken, and exactly one there.
MeasuredTable parse_nccl_tests(const std::string& text, const std::string& path);
MeasuredTable read_nccl_tests(const std::string& path);

}  // namespace ranksim::app

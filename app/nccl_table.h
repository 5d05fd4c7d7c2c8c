// Reporting in the layout of nccl-tests: size, count, type, time, algbw, busbw.
//
// algbw = size / time. busbw scales algbw by the fraction of the data each rank must move, so
// that a collective running at the hardware's link speed reports that speed whatever n is:
// 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for
// broadcast, reduce and point-to-point (nccl-tests' PERFORMANCE.md).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "runtime/distributed/schedule.h"

namespace ranksim::app {

double busbw_factor(runtime::CollectiveKind kind, int nranks);

struct TableRow {
  int64_t bytes = 0;
  int64_t count = 0;
  std::string dtype;
  std::string algorithm;
  double seconds = 0;
  int64_t wrong = -1;  // -1: not checked
};

void print_table_header(std::ostream& out);
void print_table_row(std::ostream& out, const TableRow& row, runtime::CollectiveKind kind, int nranks);

}  // namespace ranksim::app

#include "app/nccl_table.h"

#include <cstdio>
#include <ostream>

#include "runtime/distributed/nccl_names.h"

namespace ranksim::app {

double busbw_factor(runtime::CollectiveKind kind, int n) {
  // The model's factor; a barrier moves no bytes (the model times it as an all_reduce).
  if (kind == runtime::CollectiveKind::barrier) return 1.0;
  return sim::bus_factor(runtime::nccl_op(kind), n);
}

void print_table_header(std::ostream& out) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%14s %13s %5s %22s %12s %12s %12s %7s\n", "size(B)", "count", "type", "algorithm",
                "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  out << buf;
}

void print_table_row(std::ostream& out, const TableRow& r, runtime::CollectiveKind kind, int n) {
  const double algbw = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e9 : 0.0;
  const double busbw = algbw * busbw_factor(kind, n);
  char wrong[24];
  if (r.wrong < 0)
    std::snprintf(wrong, sizeof wrong, "N/A");
  else
    std::snprintf(wrong, sizeof wrong, "%lld", static_cast<long long>(r.wrong));
  char buf[200];
  std::snprintf(buf, sizeof buf, "%14lld %13lld %5s %22s %12.2f %12.2f %12.2f %7s\n", static_cast<long long>(r.bytes),
                static_cast<long long>(r.count), r.dtype.c_str(), r.algorithm.c_str(), r.seconds * 1e6, algbw, busbw,
                wrong);
  out << buf;
}

}  // namespace ranksim::app

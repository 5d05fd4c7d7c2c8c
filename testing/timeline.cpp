#include "testing/timeline.h"

#include <map>
#include <sstream>

#include "sim/error.h"
#include "sim/trace.h"

namespace ranksim::testing {

namespace {

std::string describe(const IssuedCollective& c) {
  std::ostringstream os;
  os << c.kind << " on " << c.group << " (" << c.group_size << " ranks, " << c.bytes << " bytes " << c.dtype
     << ", call " << c.call << ")";
  return os.str();
}

std::string describe(const ExpectedCollective& e) {
  std::ostringstream os;
  os << (e.kind.empty() ? "any collective" : e.kind);
  if (!e.group.empty()) os << " on " << e.group;
  if (e.group_size > 0) os << ", " << e.group_size << " ranks";
  if (e.bytes >= 0) os << ", " << e.bytes << " bytes";
  return os.str();
}

bool matches(const ExpectedCollective& e, const IssuedCollective& c) {
  return (e.kind.empty() || e.kind == c.kind) && (e.group.empty() || e.group == c.group) &&
         (e.group_size <= 0 || e.group_size == c.group_size) && (e.bytes < 0 || e.bytes == c.bytes);
}

std::string listing(const std::vector<IssuedCollective>& issued) {
  std::ostringstream os;
  os << "it issued " << issued.size() << ":";
  for (std::size_t i = 0; i < issued.size(); ++i) os << "\n  #" << i << " " << describe(issued[i]);
  return os.str();
}

std::string time_str(sim::Time t) { return sim::format_us(t) + " us"; }

}  // namespace

std::vector<IssuedCollective> collectives_of(const runtime::RunReport& report, int rank) {
  if (report.trace.empty() && !report.collectives.empty()) {
    throw Error("collectives_of: the run recorded no trace; keep SpawnOptions::engine.trace on");
  }
  std::map<std::string, int> sizes;
  for (const runtime::CollectiveRecord& rec : report.collectives) sizes[rec.group] = rec.group_size;
  std::vector<IssuedCollective> out;
  for (const sim::Span& span : report.trace.spans()) {
    if (span.rank != rank || span.kind != sim::SpanKind::comm) continue;
    IssuedCollective c;
    bool has_group = false;
    for (const auto& [key, value] : span.args) {
      if (key == "group") {
        c.group = value;
        has_group = true;
      } else if (key == "call") {
        c.call = std::stoull(value);
      } else if (key == "bytes") {
        c.bytes = std::stoll(value);
      } else if (key == "dtype") {
        c.dtype = value;
      }
    }
    if (!has_group) continue;  // a send or receive
    c.kind = span.name;
    const auto it = sizes.find(c.group);
    c.group_size = it == sizes.end() ? 0 : it->second;
    c.start = span.start;
    c.end = span.end;
    out.push_back(std::move(c));
  }
  return out;
}

::testing::AssertionResult issued_collectives(const runtime::RunReport& report, int rank,
                                              const std::vector<ExpectedCollective>& expected) {
  const std::vector<IssuedCollective> issued = collectives_of(report, rank);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (i >= issued.size()) {
      return ::testing::AssertionFailure() << "rank " << rank << ": collective #" << i << " should be "
                                           << describe(expected[i]) << ", but " << listing(issued);
    }
    if (!matches(expected[i], issued[i])) {
      return ::testing::AssertionFailure() << "rank " << rank << ": collective #" << i << " is " << describe(issued[i])
                                           << ", expected " << describe(expected[i]) << "; " << listing(issued);
    }
  }
  if (issued.size() != expected.size()) {
    return ::testing::AssertionFailure() << "rank " << rank << ": expected " << expected.size() << " collectives, "
                                         << listing(issued);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult issued_count(const runtime::RunReport& report, int rank, std::string_view kind, int count) {
  const std::vector<IssuedCollective> issued = collectives_of(report, rank);
  int n = 0;
  for (const IssuedCollective& c : issued) n += (kind.empty() || c.kind == kind) ? 1 : 0;
  if (n == count) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank " << rank << " issued " << n << " "
                                       << (kind.empty() ? std::string("collectives") : std::string(kind))
                                       << ", expected " << count << "; " << listing(issued);
}

::testing::AssertionResult clock_within(const runtime::RunReport& report, int rank, sim::Time lo, sim::Time hi) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= report.clocks.size()) {
    return ::testing::AssertionFailure() << "rank " << rank << " is not in the run (" << report.clocks.size()
                                         << " ranks)";
  }
  const sim::Time t = report.clocks[static_cast<std::size_t>(rank)];
  if (lo <= t && t <= hi) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "rank " << rank << "'s clock is " << time_str(t) << ", expected within ["
                                       << time_str(lo) << ", " << time_str(hi) << "]";
}

::testing::AssertionResult makespan_within(const runtime::RunReport& report, sim::Time lo, sim::Time hi) {
  const sim::Time t = report.makespan;
  if (lo <= t && t <= hi) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the makespan is " << time_str(t) << ", expected within [" << time_str(lo)
                                       << ", " << time_str(hi) << "]";
}

}  // namespace ranksim::testing

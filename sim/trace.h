// Trace: what each rank did on the virtual timeline, as spans, written as Chrome trace JSON.
//
// A span is [start, end) on one rank's track with a category (compute, communication, waiting),
// a name and optional key/value arguments (bytes, group, peer...). The JSON opens in Perfetto
// (ui.perfetto.dev) or chrome://tracing: one process "ranksim", one thread track per rank,
// timestamps in microseconds written exactly from integer picoseconds (six decimals), so two
// runs of the same program produce byte-identical files.
//
// Counters are values over time on a named track of the same process (Perfetto draws one track
// per name, its values stacked): the run's device memory per rank, by kind, for example.
//
// Spans are kept in the order they were recorded; the engine records deterministically, so the
// order is part of the run's determinism. A Trace belongs to one run.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "sim/time.h"

namespace ranksim::sim {

enum class SpanKind : uint8_t { compute, comm, wait, other };
const char* to_string(SpanKind k);

struct Span {
  int rank = 0;
  SpanKind kind = SpanKind::other;
  Time start;
  Time end;
  std::string name;
  std::vector<std::pair<std::string, std::string>> args;
};

// The values of a counter track at one time; each holds until the track's next Counter.
struct Counter {
  std::string track;
  Time time;
  std::vector<std::pair<std::string, double>> values;
};

class Trace {
 public:
  // REQUIRES: end >= start.
  void add(Span span);
  const std::vector<Span>& spans() const { return spans_; }
  void add_counter(Counter c) { counters_.push_back(std::move(c)); }
  const std::vector<Counter>& counters() const { return counters_; }
  bool empty() const { return spans_.empty(); }
  void clear() { spans_.clear(); }
  // Names the rank tracks: ranks [0, nranks) appear as "rank N" even when they recorded nothing.
  void set_num_ranks(int n) { num_ranks_ = n; }

  void write_chrome_json(std::ostream& out) const;
  // Writes the JSON whole or not at all. Throws ranksim::Error naming the path.
  void save(const std::string& path) const;

 private:
  std::vector<Span> spans_;
  std::vector<Counter> counters_;
  int num_ranks_ = 0;
};

// Microseconds with six decimals from integer picoseconds: exact, locale-free.
std::string format_us(Time t);

}  // namespace ranksim::sim

#include "sim/trace.h"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "sim/check.h"
#include "sim/io.h"

namespace ranksim::sim {

const char* to_string(SpanKind k) {
  switch (k) {
    case SpanKind::compute:
      return "compute";
    case SpanKind::comm:
      return "comm";
    case SpanKind::wait:
      return "wait";
    case SpanKind::other:
      return "other";
  }
  return "other";
}

void Trace::add(Span span) {
  RANKSIM_CHECK(span.end >= span.start, "trace span ends before it starts");
  num_ranks_ = std::max(num_ranks_, span.rank + 1);
  spans_.push_back(std::move(span));
}

std::string format_us(Time t) {
  int64_t ps = t.picoseconds();
  const bool neg = ps < 0;
  if (neg) ps = -ps;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%lld.%06lld", neg ? "-" : "", static_cast<long long>(ps / 1000000),
                static_cast<long long>(ps % 1000000));
  return buf;
}

namespace {
void write_json_string(std::ostream& out, const std::string& s) {
  out << '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out << "\\\"";
        break;
      case '\\':
        out << "\\\\";
        break;
      case '\n':
        out << "\\n";
        break;
      case '\t':
        out << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out << buf;
        } else {
          out << c;
        }
    }
  }
  out << '"';
}
}  // namespace

void Trace::write_chrome_json(std::ostream& out) const {
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out << "{\"ph\":\"M\",\"pid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"ranksim\"}}";
  for (int r = 0; r < num_ranks_; ++r) {
    out << ",\n{\"ph\":\"M\",\"pid\":0,\"tid\":" << r << ",\"name\":\"thread_name\",\"args\":{\"name\":\"rank " << r
        << "\"}}";
    out << ",\n{\"ph\":\"M\",\"pid\":0,\"tid\":" << r
        << ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" << r << "}}";
  }
  for (const Span& s : spans_) {
    out << ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":" << s.rank << ",\"cat\":\"" << to_string(s.kind) << "\",\"name\":";
    write_json_string(out, s.name);
    out << ",\"ts\":" << format_us(s.start) << ",\"dur\":" << format_us(s.end - s.start);
    if (!s.args.empty()) {
      out << ",\"args\":{";
      for (size_t i = 0; i < s.args.size(); ++i) {
        if (i) out << ',';
        write_json_string(out, s.args[i].first);
        out << ':';
        write_json_string(out, s.args[i].second);
      }
      out << '}';
    }
    out << '}';
  }
  for (const Counter& c : counters_) {
    out << ",\n{\"ph\":\"C\",\"pid\":0,\"name\":";
    write_json_string(out, c.track);
    out << ",\"ts\":" << format_us(c.time) << ",\"args\":{";
    for (size_t i = 0; i < c.values.size(); ++i) {
      if (i) out << ',';
      write_json_string(out, c.values[i].first);
      char buf[32];
      std::snprintf(buf, sizeof buf, ":%.17g", c.values[i].second);  // exact for integers below 2^53
      out << buf;
    }
    out << "}}";
  }
  out << "\n]}\n";
}

void Trace::save(const std::string& path) const {
  write_file_atomically(path, [this](std::ostream& out) { write_chrome_json(out); });
}

}  // namespace ranksim::sim

#include "app/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "sim/io.h"
#include "sim/units.h"

namespace ranksim::app {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// Timeline: one lane per rank (at most 64 lanes drawn), compute blue, communication orange,
// waiting grey; x from 0 to the makespan.
void timeline(std::ostream& o, const ReportData& d) {
  if (d.trace == nullptr || d.trace->empty() || d.makespan <= sim::Time::zero()) return;
  const int lanes = std::min(d.nranks, 64);
  const double width = 960, lane_h = 14, left = 60, top = 20;
  const double height = top + lanes * lane_h + 30;
  const double span = d.makespan.seconds();
  o << "<h2>Timeline</h2>\n<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20
    << "\" height=\"" << height << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  for (int r = 0; r < lanes; ++r)
    o << "<text x=\"4\" y=\"" << num(top + r * lane_h + 10) << "\">rank " << r << "</text>\n";
  // Communication on described groups (new_group's group_desc, e.g. a bridge's) gets a colour of
  // its own per description, in first-seen order, and a legend entry.
  static const char* const kNamed[] = {"#e45756", "#54a24b", "#b279a2", "#9d755d", "#72b7b2"};
  std::vector<std::string> named;
  auto group_of = [](const sim::Span& s) {
    for (const auto& [k, v] : s.args)
      if (k == "group") return runtime::group_desc_of(v);
    return std::string();
  };
  for (const sim::Span& s : d.trace->spans()) {
    if (s.rank >= lanes || s.end <= s.start) continue;
    const std::string desc = s.kind == sim::SpanKind::comm ? group_of(s) : std::string();
    std::size_t slot = 0;
    if (!desc.empty()) {
      slot = static_cast<std::size_t>(std::find(named.begin(), named.end(), desc) - named.begin());
      if (slot == named.size()) named.push_back(desc);
    }
    const char* color = !desc.empty()                      ? kNamed[slot % std::size(kNamed)]
                        : s.kind == sim::SpanKind::compute ? "#4c78a8"
                        : s.kind == sim::SpanKind::comm    ? "#f58518"
                                                           : "#bab0ac";
    const double x = left + width * s.start.seconds() / span;
    const double w = std::max(0.5, width * (s.end - s.start).seconds() / span);
    // Compute in the upper half of a lane, communication in the lower half: async collectives
    // overlap compute, and both stay visible.
    const double half = (lane_h - 2) / 2;
    const double y = top + s.rank * lane_h + 1 + (s.kind == sim::SpanKind::compute ? 0 : half);
    o << "<rect class=\"span " << sim::to_string(s.kind) << "\" x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\""
      << num(w) << "\" height=\"" << num(half) << "\" fill=\"" << color << "\"><title>" << html_escape(s.name)
      << (desc.empty() ? "" : " on " + html_escape(desc)) << " " << html_escape(s.start.str()) << " - "
      << html_escape(s.end.str()) << "</title></rect>\n";
  }
  const double axis_y = top + lanes * lane_h + 12;
  for (int t = 0; t <= 4; ++t) {
    const double x = left + width * t / 4;
    o << "<text x=\"" << num(x) << "\" y=\"" << num(axis_y) << "\" text-anchor=\"middle\">"
      << html_escape(sim::Time::from_seconds(span * t / 4).str()) << "</text>\n";
  }
  o << "</svg>\n<p class=\"legend\"><span style=\"color:#4c78a8\">&#9632;</span> compute "
       "<span style=\"color:#f58518\">&#9632;</span> communication";
  for (std::size_t i = 0; i < named.size(); ++i)
    o << " <span style=\"color:" << kNamed[i % std::size(kNamed)] << "\">&#9632;</span> " << html_escape(named[i]);
  o << "</p>\n";
}

// Where the time goes: a horizontal bar per group of ranks, stacked by part, x from 0 to the
// longest bar.
void breakdown_plot(std::ostream& o, const ReportData& d) {
  if (d.breakdown.empty()) return;
  static const char* const kColors[] = {"#4c78a8", "#e45756", "#54a24b", "#b279a2",
                                        "#9d755d", "#72b7b2", "#bab0ac", "#f58518"};
  const double w = 720, bar_h = 18, gap = 6, left = 130, top = 10;
  double longest = 0;
  for (const auto& b : d.breakdown) {
    double t = 0;
    for (double s : b.seconds) t += s;
    longest = std::max(longest, t);
  }
  if (longest <= 0) return;
  const double height = top + static_cast<double>(d.breakdown.size()) * (bar_h + gap) + 24;
  o << "<h2>Where the time goes</h2>\n<svg id=\"breakdown\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << left + w + 20 << "\" height=\"" << height << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  for (std::size_t i = 0; i < d.breakdown.size(); ++i) {
    const auto& b = d.breakdown[i];
    const double y = top + static_cast<double>(i) * (bar_h + gap);
    o << "<text x=\"4\" y=\"" << num(y + bar_h - 5) << "\">" << html_escape(b.label) << "</text>\n";
    double x = left;
    for (std::size_t p = 0; p < b.seconds.size() && p < d.breakdown_parts.size(); ++p) {
      const double bw = w * b.seconds[p] / longest;
      if (bw <= 0) continue;
      o << "<rect class=\"part\" x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(bw) << "\" height=\""
        << num(bar_h) << "\" fill=\"" << kColors[p % std::size(kColors)] << "\"><title>"
        << html_escape(b.label + ": " + d.breakdown_parts[p] + " " + sim::Time::from_seconds(b.seconds[p]).str())
        << "</title></rect>\n";
      x += bw;
    }
  }
  const double axis_y = top + static_cast<double>(d.breakdown.size()) * (bar_h + gap) + 12;
  for (int t = 0; t <= 4; ++t)
    o << "<text x=\"" << num(left + w * t / 4) << "\" y=\"" << num(axis_y) << "\" text-anchor=\"middle\">"
      << html_escape(sim::Time::from_seconds(longest * t / 4).str()) << "</text>\n";
  o << "</svg>\n<p class=\"legend\">";
  for (std::size_t p = 0; p < d.breakdown_parts.size(); ++p)
    o << (p ? " " : "") << "<span style=\"color:" << kColors[p % std::size(kColors)] << "\">&#9632;</span> "
      << html_escape(d.breakdown_parts[p]);
  o << " (mean per rank; communication is what the ranks waited for)</p>\n";
}

// busbw against size, log2 x axis.
void sweep_plot(std::ostream& o, const ReportData& d) {
  if (d.sweep.size() < 2) return;
  const double w = 720, h = 320, left = 60, bottom = 40, top = 20;
  double ymax = 0;
  for (const auto& p : d.sweep) ymax = std::max(ymax, p.busbw_gbps);
  ymax = ymax <= 0 ? 1 : ymax * 1.1;
  const double x0 = std::log2(static_cast<double>(std::max<int64_t>(1, d.sweep.front().bytes)));
  const double x1 = std::log2(static_cast<double>(std::max<int64_t>(2, d.sweep.back().bytes)));
  auto X = [&](int64_t b) {
    return left + w * (std::log2(static_cast<double>(std::max<int64_t>(1, b))) - x0) / std::max(1.0, x1 - x0);
  };
  auto Y = [&](double v) { return top + h - h * v / ymax; };
  o << "<h2>" << html_escape(d.sweep_op)
    << " bus bandwidth</h2>\n<svg id=\"busbw\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + w + 20
    << "\" height=\"" << top + h + bottom << "\" font-family=\"sans-serif\" font-size=\"10\">\n"
    << "<line x1=\"" << left << "\" y1=\"" << top + h << "\" x2=\"" << left + w << "\" y2=\"" << top + h
    << "\" stroke=\"black\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + h
    << "\" stroke=\"black\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = ymax * t / 4;
    o << "<text x=\"" << left - 4 << "\" y=\"" << num(Y(v) + 3) << "\" text-anchor=\"end\">" << num(v) << "</text>\n";
  }
  o << "<text x=\"10\" y=\"" << top - 6
    << "\">busbw (GB/s)</text>\n<polyline fill=\"none\" stroke=\"#4c78a8\" stroke-width=\"2\" points=\"";
  for (const auto& p : d.sweep) o << num(X(p.bytes)) << ',' << num(Y(p.busbw_gbps)) << ' ';
  o << "\"/>\n";
  for (size_t i = 0; i < d.sweep.size(); ++i) {
    const auto& p = d.sweep[i];
    o << "<circle class=\"point\" cx=\"" << num(X(p.bytes)) << "\" cy=\"" << num(Y(p.busbw_gbps))
      << "\" r=\"3\" fill=\"#4c78a8\"><title>"
      << html_escape(sim::units::format_bytes(static_cast<uint64_t>(std::max<int64_t>(1, p.bytes)))) << ": "
      << num(p.busbw_gbps) << " GB/s</title></circle>\n";
    if (i % 3 == 0 || i + 1 == d.sweep.size())
      o << "<text x=\"" << num(X(p.bytes)) << "\" y=\"" << top + h + 14 << "\" text-anchor=\"middle\">"
        << html_escape(sim::units::format_bytes(static_cast<uint64_t>(std::max<int64_t>(1, p.bytes)))) << "</text>\n";
  }
  o << "<text x=\"" << left + w / 2 << "\" y=\"" << top + h + 32
    << "\" text-anchor=\"middle\">message size</text>\n</svg>\n";
}

// Device memory over virtual time: the rank with the largest peak stacked by kind, up to seven
// more ranks as lines of their totals, and the device's capacity when it is in view. A sample's
// bytes hold until the next sample (the last one's until the makespan).
void memory_plot(std::ostream& o, const ReportData& d) {
  if (d.memory_series.empty() || d.makespan <= sim::Time::zero()) return;
  const auto top_it = std::max_element(d.memory_series.begin(), d.memory_series.end(),
                                       [](const auto& a, const auto& b) { return a.peak < b.peak; });
  const ReportData::MemorySeries& top = *top_it;
  if (top.peak == 0 || top.samples.empty()) return;
  const double w = 960, h = 260, left = 60, bottom = 30, head = 20;
  const bool show_capacity = top.capacity > 0 && top.capacity <= 2 * top.peak;
  const double ymax = 1.05 * static_cast<double>(show_capacity ? std::max(top.peak, top.capacity) : top.peak);
  const double span = d.makespan.seconds();
  auto X = [&](sim::Time t) { return left + w * std::clamp(t.seconds() / span, 0.0, 1.0); };
  auto Y = [&](double bytes) { return head + h - h * bytes / ymax; };
  auto end_of = [&](const std::vector<runtime::MemorySample>& s, size_t i) {
    return i + 1 < s.size() ? s[i + 1].time : std::max(d.makespan, s[i].time);
  };
  o << "<h2>Device memory</h2>\n<svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + w + 20
    << "\" height=\"" << head + h + bottom << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  // The top rank, one band per kind: its top edge is the running sum up to that kind, stepped.
  static const char* const kKindColor[runtime::kMemoryKinds] = {"#4c78a8", "#f58518", "#e45756", "#72b7b2", "#b279a2"};
  for (int k = runtime::kMemoryKinds - 1; k >= 0; --k) {  // tallest first, each drawn over by the next
    o << "<polygon class=\"memory-kind\" fill=\"" << kKindColor[k] << "\" points=\"" << num(X(top.samples.front().time))
      << ',' << num(Y(0)) << ' ';
    for (size_t i = 0; i < top.samples.size(); ++i) {
      double upto = 0;
      for (int j = 0; j <= k; ++j) upto += static_cast<double>(top.samples[i].bytes[static_cast<size_t>(j)]);
      o << num(X(top.samples[i].time)) << ',' << num(Y(upto)) << ' ' << num(X(end_of(top.samples, i))) << ','
        << num(Y(upto)) << ' ';
    }
    o << num(X(end_of(top.samples, top.samples.size() - 1))) << ',' << num(Y(0)) << "\"><title>rank " << top.rank << ' '
      << runtime::memory_kind_name(static_cast<runtime::MemoryKind>(k)) << "</title></polygon>\n";
  }
  int others = 0;
  for (const auto& s : d.memory_series) {
    if (&s == &top || s.samples.empty() || others == 7) continue;
    ++others;
    o << "<polyline class=\"memory-rank\" fill=\"none\" stroke=\"#555\" stroke-width=\"1\" points=\"";
    for (size_t i = 0; i < s.samples.size(); ++i) {
      double total = 0;
      for (uint64_t b : s.samples[i].bytes) total += static_cast<double>(b);
      o << num(X(s.samples[i].time)) << ',' << num(Y(total)) << ' ' << num(X(end_of(s.samples, i))) << ','
        << num(Y(total)) << ' ';
    }
    o << "\"><title>rank " << s.rank << " total</title></polyline>\n";
  }
  if (show_capacity) {
    const double y = Y(static_cast<double>(top.capacity));
    o << "<line id=\"memory-capacity\" x1=\"" << left << "\" y1=\"" << num(y) << "\" x2=\"" << left + w << "\" y2=\""
      << num(y) << "\" stroke=\"#c22\" stroke-dasharray=\"6,3\"><title>capacity "
      << html_escape(sim::units::format_bytes(top.capacity)) << "</title></line>\n";
  }
  o << "<line x1=\"" << left << "\" y1=\"" << head + h << "\" x2=\"" << left + w << "\" y2=\"" << head + h
    << "\" stroke=\"black\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = ymax * t / 4;
    o << "<text x=\"" << left - 4 << "\" y=\"" << num(Y(v) + 3) << "\" text-anchor=\"end\">"
      << html_escape(sim::units::format_bytes(static_cast<uint64_t>(v))) << "</text>\n";
    o << "<text x=\"" << num(left + w * t / 4) << "\" y=\"" << head + h + 14 << "\" text-anchor=\"middle\">"
      << html_escape(sim::Time::from_seconds(span * t / 4).str()) << "</text>\n";
  }
  o << "</svg>\n<p class=\"legend\">rank " << top.rank << " (the largest peak, "
    << html_escape(sim::units::format_bytes(top.peak)) << "):";
  for (int k = 0; k < runtime::kMemoryKinds; ++k)
    o << " <span style=\"color:" << kKindColor[k] << "\">&#9632;</span> "
      << runtime::memory_kind_name(static_cast<runtime::MemoryKind>(k));
  if (others > 0) o << "; grey lines: the totals of " << others << " other rank" << (others > 1 ? "s" : "");
  if (show_capacity) o << "; dashed: the device's capacity";
  o << "</p>\n";
}

}  // namespace

void write_html_report(const std::string& path, const ReportData& d) {
  sim::write_file_atomically(path, [&](std::ostream& o) {
    o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << html_escape(d.title)
      << "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}"
         ".pass{color:#2a7}.fail{color:#c22;font-weight:bold}</style></head><body>\n"
      << "<h1>" << html_escape(d.title) << "</h1>\n<p id=\"subtitle\">" << html_escape(d.subtitle) << "</p>\n"
      << "<p id=\"virtual-time\">virtual time: <b>" << html_escape(d.makespan.str()) << "</b></p>\n";
    if (!d.checks.empty()) {
      o << "<h2>Checks</h2>\n<ul id=\"checks\">\n";
      for (const auto& c : d.checks)
        o << "<li class=\"" << (c.passed ? "pass" : "fail") << "\">" << (c.passed ? "pass" : "FAIL") << ": "
          << html_escape(c.text) << " (measured " << html_escape(c.measured) << ")</li>\n";
      o << "</ul>\n";
    }
    if (!d.ranks.empty()) {
      o << "<h2>Ranks</h2>\n<table "
           "id=\"ranks\"><tr><th>rank</th><th>time</th><th>compute</th><th>comm</th><th>idle</th></tr>\n";
      for (const auto& r : d.ranks) {
        const sim::Time idle = d.makespan - r.compute - r.comm;
        o << "<tr><td>" << r.rank << "</td><td>" << html_escape(d.makespan.str()) << "</td><td>"
          << html_escape(r.compute.str()) << "</td><td>" << html_escape(r.comm.str()) << "</td><td>"
          << html_escape((idle > sim::Time::zero() ? idle : sim::Time::zero()).str()) << "</td></tr>\n";
      }
      o << "</table>\n";
    }
    breakdown_plot(o, d);
    auto table = [&](const char* title, const char* id, const std::vector<std::string>& header,
                     const std::vector<ReportData::Row>& rows) {
      o << "<h2>" << title << "</h2>\n<table id=\"" << id << "\"><tr>";
      for (const auto& h : header) o << "<th>" << html_escape(h) << "</th>";
      o << "</tr>\n";
      for (const auto& row : rows) {
        o << "<tr>";
        for (const auto& c : row.cells) o << "<td>" << html_escape(c) << "</td>";
        o << "</tr>\n";
      }
      o << "</table>\n";
    };
    if (!d.compute.empty()) {
      table("Compute by kernel class", "compute", d.compute_header, d.compute);
      for (const auto& n : d.compute_notes) o << "<p class=\"note\">" << html_escape(n) << "</p>\n";
    }
    if (!d.memory.empty()) table("Device memory at each rank's peak", "memory-peaks", d.memory_header, d.memory);
    memory_plot(o, d);
    if (!d.collectives.empty()) table("Collectives", "collectives", d.collective_header, d.collectives);
    sweep_plot(o, d);
    timeline(o, d);
    o << "</body></html>\n";
  });
}

}  // namespace ranksim::app

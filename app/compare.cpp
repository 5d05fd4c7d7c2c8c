#include "app/compare.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "app/json_input.h"
#include "sim/error.h"

namespace ranksim::app {
namespace {

using RankLine = ComparedSummary::Rank;
using CollLine = ComparedSummary::Collective;
using Summary = ComparedSummary;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ratio(double measured, double predicted) {
  return predicted > 0 ? fmt("%.3f", measured / predicted) : std::string("-");
}

// The `--json` summary of a run (summary_json.h).
Summary load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("compare: cannot read '" + path + "': no such file, or not readable");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_compared_summary(text.str(), path);
}

}  // namespace

ComparedSummary parse_compared_summary(const std::string& json_text, const std::string& path) {
  const nlohmann::json root = parse_json_strictly(json_text, path, "compare: ", "a run summary");
  auto need = [&](const nlohmann::json& n, const char* key) -> const nlohmann::json& {
    if (!n.is_object() || !n.contains(key)) {
      throw Error("compare: '" + path + "' has no \"" + key +
                  "\"; it is not a ranksim run summary (write one with ranksim run --json FILE)");
    }
    return n.at(key);
  };
  // Each field is checked for its type and range, and named in the message with where it is.
  auto bad = [&](const std::string& where, const std::string& want, const nlohmann::json& got) {
    throw Error("compare: '" + path + "': " + where + " must be " + want + ", got " + shown_json(got) +
                "; is it a ranksim run summary (ranksim run --json FILE)?");
  };
  auto text = [&](const nlohmann::json& n, const char* key, const std::string& where) {
    const nlohmann::json& v = need(n, key);
    if (!v.is_string()) bad(where + key, "a string", v);
    return v.get<std::string>();
  };
  auto text_or = [&](const nlohmann::json& n, const char* key, const char* otherwise, const std::string& where) {
    return n.contains(key) ? text(n, key, where) : std::string(otherwise);
  };
  auto time_us = [&](const nlohmann::json& n, const char* key, const std::string& where) {
    const nlohmann::json& v = need(n, key);
    if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>())) {
      bad(where + key, "a time in microseconds (a number >= 0)", v);
    }
    return v.get<double>();
  };
  auto count = [&](const nlohmann::json& n, const char* key, const std::string& where, long long min) {
    const nlohmann::json& v = need(n, key);
    if (!v.is_number_integer() || v.get<long long>() < min) {
      bad(where + key, "an integer >= " + std::to_string(min), v);
    }
    return v.get<long long>();
  };
  auto list = [&](const nlohmann::json& n, const char* key) -> const nlohmann::json& {
    const nlohmann::json& v = need(n, key);
    if (!v.is_array()) bad(key, "a list", v);
    return v;
  };
  Summary s;
  s.path = path;
  s.scenario = text(root, "scenario", "");
  s.topology = text_or(root, "topology", "", "");
  s.backend = text_or(root, "backend", "sim", "");
  s.ranks = count(root, "ranks", "", 1);
  s.total_us = time_us(root, "virtual_time_us", "");
  const nlohmann::json& rows = list(root, "ranks_detail");
  if (static_cast<long long>(rows.size()) != s.ranks) {
    throw Error("compare: '" + path + "' has " + std::to_string(rows.size()) +
                " rows in \"ranks_detail\" but \"ranks\" is " + std::to_string(s.ranks) +
                "; a run summary has one row per rank");
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string where = "ranks_detail[" + std::to_string(i) + "].";
    const nlohmann::json& r = rows[i];
    if (r.is_object() && r.contains("rank") &&
        !(r["rank"].is_number_integer() && r["rank"].get<long long>() == static_cast<long long>(i)))
      bad(where + "rank", std::to_string(i) + " (the rows are in rank order)", r["rank"]);
    s.ranks_detail.push_back(
        {time_us(r, "clock_us", where), time_us(r, "compute_us", where), time_us(r, "comm_us", where)});
    // The run's time is its last rank's: no rank's clock is later.
    if (s.ranks_detail.back().clock_us > s.total_us * (1 + 1e-9) + 1e-6)
      bad("virtual_time_us",
          "at least every rank's clock_us (" + where + "clock_us is " + fmt("%g", s.ranks_detail.back().clock_us) + ")",
          root["virtual_time_us"]);
  }
  const nlohmann::json& colls = list(root, "collectives");
  for (std::size_t i = 0; i < colls.size(); ++i) {
    const std::string where = "collectives[" + std::to_string(i) + "].";
    const nlohmann::json& c = colls[i];
    CollLine l;
    l.op = text(c, "op", where);
    l.group_size = count(c, "group_size", where, 1);
    l.dtype = text(c, "dtype", where);
    l.bytes = count(c, "bytes", where, 0);
    l.algorithm = text(c, "algorithm", where);
    l.calls = count(c, "calls", where, 1);
    l.time_us = time_us(c, "time_us", where);
    l.group = text_or(c, "group", "", where);
    s.collectives.push_back(l);
  }
  return s;
}

int compare_summaries(const std::string& predicted_path, const std::string& measured_path, std::ostream& out) {
  const Summary p = load(predicted_path), m = load(measured_path);
  if (p.scenario != m.scenario || p.ranks != m.ranks) {
    throw Error("compare: '" + p.path + "' is scenario '" + p.scenario + "' on " + std::to_string(p.ranks) +
                " ranks but '" + m.path + "' is '" + m.scenario + "' on " + std::to_string(m.ranks) +
                "; compare two runs of the same scenario and layout");
  }
  out << "compare: " << p.scenario << ", " << p.ranks << " ranks\n"
      << "  predicted: " << p.path << " (" << p.backend << (p.topology.empty() ? "" : ", topology " + p.topology)
      << ")\n"
      << "  measured:  " << m.path << " (" << m.backend << (m.topology.empty() ? "" : ", topology " + m.topology)
      << ")\n"
      << "  ratio = measured / predicted\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "total time  %14.3f us predicted  %14.3f us measured  ratio %s\n\n", p.total_us,
                m.total_us, ratio(m.total_us, p.total_us).c_str());
  out << buf;

  std::snprintf(buf, sizeof buf, "%6s %14s %14s %7s %14s %14s %7s %14s %14s %7s\n", "rank", "time(us)", "measured",
                "ratio", "compute(us)", "measured", "ratio", "comm(us)", "measured", "ratio");
  out << buf;
  for (std::size_t r = 0; r < p.ranks_detail.size() && r < m.ranks_detail.size(); ++r) {
    const RankLine &a = p.ranks_detail[r], &b = m.ranks_detail[r];
    std::snprintf(buf, sizeof buf, "%6zu %14.3f %14.3f %7s %14.3f %14.3f %7s %14.3f %14.3f %7s\n", r, a.clock_us,
                  b.clock_us, ratio(b.clock_us, a.clock_us).c_str(), a.compute_us, b.compute_us,
                  ratio(b.compute_us, a.compute_us).c_str(), a.comm_us, b.comm_us, ratio(b.comm_us, a.comm_us).c_str());
    out << buf;
  }

  out << "\n";
  std::snprintf(buf, sizeof buf, "%-15s %6s %6s %14s %13s %8s %14s %14s %7s  %s\n", "collective", "ranks", "type",
                "size(B)", "algorithm", "calls", "time(us)", "measured", "ratio", "group");
  out << buf;
  std::map<decltype(CollLine{}.key()), const CollLine*> measured;
  for (const CollLine& l : m.collectives) measured[l.key()] = &l;
  std::vector<const CollLine*> only_predicted;
  std::map<decltype(CollLine{}.key()), bool> seen;
  for (const CollLine& l : p.collectives) {
    const auto it = measured.find(l.key());
    if (it == measured.end()) {
      only_predicted.push_back(&l);
      continue;
    }
    seen[l.key()] = true;
    const CollLine& b = *it->second;
    std::snprintf(buf, sizeof buf, "%-15s %6lld %6s %14lld %13s %8lld %14.3f %14.3f %7s  %s\n", l.op.c_str(),
                  l.group_size, l.dtype.c_str(), l.bytes, l.algorithm.c_str(), l.calls, l.time_us, b.time_us,
                  ratio(b.time_us, l.time_us).c_str(), l.group.empty() ? "-" : l.group.c_str());
    out << buf;
    if (b.calls != l.calls) {
      out << "    calls differ: " << l.calls << " predicted, " << b.calls << " measured\n";
    }
  }
  auto list = [&](const char* title, const std::vector<const CollLine*>& lines) {
    if (lines.empty()) return;
    out << "\n" << title << ":\n";
    for (const CollLine* l : lines) {
      std::snprintf(buf, sizeof buf, "  %-15s %6lld %6s %14lld %13s %8lld %14.3f  %s\n", l->op.c_str(), l->group_size,
                    l->dtype.c_str(), l->bytes, l->algorithm.c_str(), l->calls, l->time_us,
                    l->group.empty() ? "-" : l->group.c_str());
      out << buf;
    }
  };
  std::vector<const CollLine*> only_measured;
  for (const CollLine& l : m.collectives)
    if (!seen.count(l.key())) only_measured.push_back(&l);
  list("only in the predicted run", only_predicted);
  list("only in the measured run", only_measured);
  return 0;
}

}  // namespace ranksim::app

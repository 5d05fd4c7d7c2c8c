#include "app/compare.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "sim/error.h"

namespace ranksim::app {
namespace {

struct RankLine {
  double clock_us = 0, compute_us = 0, comm_us = 0;
};

struct CollLine {
  std::string op, dtype, algorithm, group;
  long long group_size = 0, bytes = 0, calls = 0;
  double time_us = 0;  // per call
  auto key() const { return std::tie(op, group_size, dtype, bytes, algorithm, group); }
};

struct Summary {
  std::string path, scenario, topology, backend;
  long long ranks = 0;
  double total_us = 0;
  std::vector<RankLine> ranks_detail;
  std::vector<CollLine> collectives;
};

// The `--json` summary of a run (summary_json.h).
Summary load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("compare: cannot read '" + path + "': no such file, or not readable");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error("compare: '" + path + "' is not JSON: " + e.what());
  }
  auto need = [&](const nlohmann::json& n, const char* key) -> const nlohmann::json& {
    if (!n.is_object() || !n.contains(key)) {
      throw Error("compare: '" + path + "' has no \"" + key +
                  "\"; it is not a ranksim run summary (write one with ranksim run --json FILE)");
    }
    return n.at(key);
  };
  auto text_or = [](const nlohmann::json& n, const char* key, const char* otherwise) {
    return n.contains(key) ? n.at(key).get<std::string>() : std::string(otherwise);
  };
  Summary s;
  s.path = path;
  try {
    s.scenario = need(root, "scenario").get<std::string>();
    s.topology = text_or(root, "topology", "");
    s.backend = text_or(root, "backend", "sim");
    s.ranks = need(root, "ranks").get<long long>();
    s.total_us = need(root, "virtual_time_us").get<double>();
    for (const nlohmann::json& r : need(root, "ranks_detail")) {
      s.ranks_detail.push_back(
          {need(r, "clock_us").get<double>(), need(r, "compute_us").get<double>(), need(r, "comm_us").get<double>()});
    }
    for (const nlohmann::json& c : need(root, "collectives")) {
      CollLine l;
      l.op = need(c, "op").get<std::string>();
      l.group_size = need(c, "group_size").get<long long>();
      l.dtype = need(c, "dtype").get<std::string>();
      l.bytes = need(c, "bytes").get<long long>();
      l.algorithm = need(c, "algorithm").get<std::string>();
      l.calls = need(c, "calls").get<long long>();
      l.time_us = need(c, "time_us").get<double>();
      l.group = text_or(c, "group", "");
      s.collectives.push_back(l);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("compare: '" + path + "' has a field of the wrong type (" + e.what() +
                "); is it a ranksim run summary?");
  }
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ratio(double measured, double predicted) {
  return predicted > 0 ? fmt("%.3f", measured / predicted) : std::string("-");
}

}  // namespace

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

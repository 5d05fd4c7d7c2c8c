#include "app/layout_sweep.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "app/megatron_args.h"
#include "app/nccl_environment.h"
#include "app/report_html.h"
#include "app/scenario.h"
#include "app/workloads.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/units.h"

namespace ranksim::app {

namespace {

namespace fs = std::filesystem;
using Grid = std::vector<std::pair<std::string, std::vector<std::string>>>;

// "parallel.tp=2 parallel.pp=4"
std::string describe(const Grid& grid, const SweepLayout& l) {
  std::string t;
  for (std::size_t k = 0; k < grid.size(); ++k) t += (k ? " " : "") + grid[k].first + "=" + l.values[k];
  return t;
}

// Each layout under NCCL's tuning variables, as `ranksim run` reads them (app/nccl_environment.h).
Scenario load(const SweepOptions& o, const std::vector<std::string>& given) {
  const NcclEnvironment env = read_nccl_environment();
  std::vector<std::string> sets = given;
  apply_nccl_sets(env, sets, "topology.collectives.");
  Scenario sc = o.megatron_args.empty() ? load_scenario(o.scenario, sets)
                                        : load_megatron_scenario(o.megatron_args, o.topology, sets);
  apply_nccl_choice(env, sc.algorithm, "the scenario's algorithm", sc.protocol, "the scenario's protocol");
  sc.nccl_environment = env.given;
  return sc;
}

// Runs one layout (shape-only, quietly) and fills its figures.
void time_layout(const Scenario& sc, SweepLayout& l) {
  RunFlags flags;
  flags.quiet = true;
  RunSummary s;
  run_model_workload(sc, flags, false, s);
  s.makespan = s.report.makespan;
  l.tp = sc.tp;
  l.cp = sc.cp;
  l.pp = sc.pp;
  l.dp = sc.dp;
  l.virtual_stages = sc.model->train->virtual_stages;
  if (const std::optional<Throughput> t = training_throughput(sc, s)) {
    l.iteration_s = t->iteration_s;
    l.tokens_per_s_per_gpu = t->tokens_per_s_per_gpu;
    l.tflops_per_gpu = t->tflops_per_gpu;
    l.mfu = t->mfu;
  } else {
    l.iteration_s = s.makespan.seconds() / sc.model->train->steps;
  }
  l.capacity_bytes = std::numeric_limits<std::uint64_t>::max();
  for (const runtime::MemoryUse& m : s.report.memory) {
    l.peak_bytes = std::max(l.peak_bytes, m.peak);
    if (m.capacity > 0) {
      l.capacity_bytes = std::min(l.capacity_bytes, m.capacity);
      l.fits = l.fits && m.peak <= m.capacity;
    }
  }
  if (l.capacity_bytes == std::numeric_limits<std::uint64_t>::max()) l.capacity_bytes = 0;
  const std::vector<TimeBreakdown> rows = time_breakdown(sc, s);
  for (const TimeBreakdown& r : rows) {
    const double share = static_cast<double>(r.last_rank - r.first_rank + 1) / sc.ranks;
    l.compute_s += r.compute_s * share;
    for (int d = 0; d < kCommDims; ++d)
      l.exposed_s[static_cast<std::size_t>(d)] += r.exposed_s[static_cast<std::size_t>(d)] * share;
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string g(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void write_csv(const std::string& path, const Grid& grid, const std::vector<SweepLayout>& rows) {
  sim::write_file_atomically(path, [&](std::ostream& o) {
    for (const auto& [key, values] : grid) o << csv_field(key) << ",";
    o << "valid,tp,cp,pp,dp,virtual_stages,iteration_s,tokens_per_s_per_gpu,tflops_per_gpu,mfu,peak_memory_bytes,"
         "capacity_bytes,fits_memory,compute_s";
    for (const char* d : kCommDimNames) o << ",exposed_" << d << "_s";
    o << ",error\n";
    for (const SweepLayout& l : rows) {
      for (const std::string& v : l.values) o << csv_field(v) << ",";
      if (!l.error.empty()) {
        o << "false,,,,,,,,,,,,,";
        for (int d = 0; d < kCommDims; ++d) o << ",";
        o << "," << csv_field(l.error) << "\n";
        continue;
      }
      o << "true," << l.tp << "," << l.cp << "," << l.pp << "," << l.dp << "," << l.virtual_stages << ","
        << g(l.iteration_s) << "," << g(l.tokens_per_s_per_gpu) << "," << g(l.tflops_per_gpu) << "," << g(l.mfu) << ","
        << l.peak_bytes << "," << l.capacity_bytes << "," << (l.fits ? "true" : "false") << "," << g(l.compute_s);
      for (double x : l.exposed_s) o << "," << g(x);
      o << ",\n";
    }
  });
}

void write_json(const std::string& path, const std::string& name, const Grid& grid,
                const std::vector<SweepLayout>& rows) {
  nlohmann::ordered_json j;
  j["scenario"] = name;
  nlohmann::ordered_json keys = nlohmann::ordered_json::object();
  for (const auto& [key, values] : grid) keys[key] = values;
  j["grid"] = keys;
  nlohmann::ordered_json layouts = nlohmann::ordered_json::array();
  for (const SweepLayout& l : rows) {
    nlohmann::ordered_json e;
    nlohmann::ordered_json values = nlohmann::ordered_json::object();
    for (std::size_t k = 0; k < grid.size(); ++k) values[grid[k].first] = l.values[k];
    e["values"] = values;
    e["valid"] = l.error.empty();
    if (!l.error.empty()) {
      e["error"] = l.error;
    } else {
      e["layout"] = {{"tp", l.tp}, {"cp", l.cp}, {"pp", l.pp}, {"dp", l.dp}, {"virtual_stages", l.virtual_stages}};
      e["iteration_time_s"] = l.iteration_s;
      e["tokens_per_s_per_gpu"] = l.tokens_per_s_per_gpu;
      e["tflops_per_gpu"] = l.tflops_per_gpu;
      e["mfu"] = l.mfu;
      e["peak_memory_bytes"] = l.peak_bytes;
      e["capacity_bytes"] = l.capacity_bytes;
      e["fits_memory"] = l.fits;
      e["compute_s"] = l.compute_s;
      nlohmann::ordered_json exposed = nlohmann::ordered_json::object();
      for (int d = 0; d < kCommDims; ++d) exposed[kCommDimNames[d]] = l.exposed_s[static_cast<std::size_t>(d)];
      e["exposed_comm_s"] = exposed;
    }
    layouts.push_back(e);
  }
  j["layouts"] = layouts;
  sim::write_file_atomically(path, [&](std::ostream& o) { o << j.dump(2) << "\n"; });
}

// One horizontal bar chart of the valid layouts (best first): value(l) with its label.
void bar_chart(std::ostream& o, const std::string& id, const std::string& title,
               const std::vector<const SweepLayout*>& rows, const std::vector<std::string>& labels,
               double (*value)(const SweepLayout&), std::string (*text)(const SweepLayout&)) {
  double top = 0;
  for (const SweepLayout* l : rows) top = std::max(top, value(*l));
  if (top <= 0) return;
  const double w = 560, bar = 16, gap = 4, left = 220;
  const double h = static_cast<double>(rows.size()) * (bar + gap) + 10;
  o << "<h2>" << html_escape(title) << "</h2>\n<svg id=\"" << id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << left + w + 120 << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const SweepLayout& l = *rows[i];
    const double y = 4 + static_cast<double>(i) * (bar + gap);
    const double bw = w * value(l) / top;
    char geom[160];
    std::snprintf(geom, sizeof geom, "x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"", left, y, bw, bar);
    o << "<text x=\"4\" y=\"" << y + bar - 4 << "\">" << html_escape(labels[i]) << "</text>\n<rect class=\"bar\" "
      << geom << " fill=\"" << (l.fits ? "#4c78a8" : "#e45756") << "\"><title>"
      << html_escape(labels[i] + ": " + text(l)) << "</title></rect>\n<text x=\"" << left + bw + 4 << "\" y=\""
      << y + bar - 4 << "\">" << html_escape(text(l)) << "</text>\n";
  }
  o << "</svg>\n";
}

void write_report(const std::string& path, const std::string& name, const Grid& grid,
                  const std::vector<SweepLayout>& rows) {
  std::vector<const SweepLayout*> valid;
  std::vector<std::string> labels;
  for (const SweepLayout& l : rows) {
    if (!l.error.empty()) continue;
    valid.push_back(&l);
    labels.push_back(describe(grid, l));
  }
  sim::write_file_atomically(path, [&](std::ostream& o) {
    o << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ranksim sweep: " << html_escape(name)
      << "</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}</style></head><body>\n"
      << "<h1>ranksim sweep: " << html_escape(name) << "</h1>\n<p>" << valid.size() << " valid layouts of "
      << rows.size() << ", best first (predicted iteration time; red: over the device's memory)</p>\n";
    bar_chart(
        o, "iteration-time", "Predicted iteration time", valid, labels,
        [](const SweepLayout& l) { return l.iteration_s; },
        [](const SweepLayout& l) { return sim::Time::from_seconds(l.iteration_s).str(); });
    bar_chart(
        o, "tflops", "Model TFLOP/s per GPU", valid, labels, [](const SweepLayout& l) { return l.tflops_per_gpu; },
        [](const SweepLayout& l) {
          return fmt("%.1f", l.tflops_per_gpu) + " (MFU " + fmt("%.1f%%", 100 * l.mfu) + ")";
        });
    bar_chart(
        o, "peak-memory", "Peak device memory per GPU", valid, labels,
        [](const SweepLayout& l) { return static_cast<double>(l.peak_bytes); },
        [](const SweepLayout& l) {
          return sim::units::format_bytes(l.peak_bytes) + " of " + sim::units::format_bytes(l.capacity_bytes);
        });
    o << "<h2>Layouts</h2>\n<table id=\"layouts\"><tr>";
    for (const auto& [key, values] : grid) o << "<th>" << html_escape(key) << "</th>";
    o << "<th>iteration</th><th>tokens/s/GPU</th><th>TFLOP/s/GPU</th><th>MFU</th><th>peak memory</th><th>fits</th>"
         "<th>why not</th></tr>\n";
    for (const SweepLayout& l : rows) {
      o << "<tr>";
      for (const std::string& v : l.values) o << "<td>" << html_escape(v) << "</td>";
      if (l.error.empty()) {
        o << "<td>" << html_escape(sim::Time::from_seconds(l.iteration_s).str()) << "</td><td>"
          << fmt("%.0f", l.tokens_per_s_per_gpu) << "</td><td>" << fmt("%.1f", l.tflops_per_gpu) << "</td><td>"
          << fmt("%.1f%%", 100 * l.mfu) << "</td><td>" << html_escape(sim::units::format_bytes(l.peak_bytes))
          << "</td><td>" << (l.fits ? "yes" : "no") << "</td><td></td>";
      } else {
        o << "<td colspan=\"6\"></td><td style=\"text-align:left\">" << html_escape(l.error) << "</td>";
      }
      o << "</tr>\n";
    }
    o << "</table>\n</body></html>\n";
  });
}

}  // namespace

Grid parse_sweep_grid(const std::vector<std::string>& items) {
  Grid grid;
  std::size_t layouts = 1;
  for (const std::string& item : items) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw Error("--grid '" + item + "': expected KEY=V1,V2,... (a scenario key by its dotted path), e.g. " +
                  "parallel.tp=2,4,8");
    const std::string key = item.substr(0, eq);
    std::vector<std::string> values;
    std::stringstream in(item.substr(eq + 1));
    for (std::string v; std::getline(in, v, ',');) {
      if (v.empty()) throw Error("--grid '" + item + "': an empty value; separate values by single commas");
      if (std::find(values.begin(), values.end(), v) != values.end())
        throw Error("--grid '" + item + "': the value '" + v + "' is listed twice");
      values.push_back(v);
    }
    if (item.back() == ',') throw Error("--grid '" + item + "': an empty value; separate values by single commas");
    for (const auto& [k, vs] : grid)
      if (k == key) throw Error("--grid: the key '" + key + "' is given twice; list all its values in one --grid item");
    layouts *= values.size();
    if (layouts > kMaxSweepLayouts)
      throw Error("--grid: more than " + std::to_string(kMaxSweepLayouts) +
                  " layouts; sweep fewer values, or split the grid into several sweeps");
    grid.emplace_back(key, std::move(values));
  }
  if (grid.empty()) throw Error("ranksim sweep: give at least one --grid KEY=V1,V2,...");
  return grid;
}

int sweep_layouts(const SweepOptions& o, std::ostream& out, std::ostream& err) {
  const Grid grid = parse_sweep_grid(o.grid);
  std::vector<sim::NamedPath> outs;
  for (const auto& [flag, path] :
       {sim::NamedPath{"--csv", o.csv}, sim::NamedPath{"--json", o.json}, sim::NamedPath{"--report", o.report}})
    if (!path.empty()) outs.push_back({flag, path});
  sim::check_output_paths(outs, {{"the scenario", o.scenario}, {"the topology", o.topology}});
  // Shape-only: timing does not depend on the numbers.
  std::vector<std::string> base_sets = o.sets;
  base_sets.emplace_back("data=shape_only");
  const Scenario base = load(o, base_sets);
  if (!base.model || !base.model->train)
    throw Error((o.megatron_args.empty() ? o.scenario : std::string("--megatron-args")) +
                ": ranksim sweep times training steps; the scenario needs model: and train: sections");
  // Keep the base's world unless the grid changes it.
  const bool world_in_grid = std::any_of(grid.begin(), grid.end(), [](const auto& kv) {
    return kv.first == "ranks" || kv.first == "parallel.dp" || kv.first.rfind("topology", 0) == 0;
  });
  if (!world_in_grid && o.megatron_args.empty()) {
    base_sets.push_back("ranks=" + std::to_string(base.ranks));
    base_sets.emplace_back("parallel.dp=auto");
  }

  std::size_t total = 1;
  for (const auto& kv : grid) total *= kv.second.size();
  std::vector<SweepLayout> rows;
  rows.reserve(total);
  for (std::size_t i = 0; i < total; ++i) {
    SweepLayout l;
    std::vector<std::string> sets = base_sets;
    std::size_t rest = i;
    std::vector<std::size_t> index(grid.size());
    for (std::size_t k = grid.size(); k-- > 0;) {  // the last key varies fastest
      index[k] = rest % grid[k].second.size();
      rest /= grid[k].second.size();
    }
    for (std::size_t k = 0; k < grid.size(); ++k) {
      l.values.push_back(grid[k].second[index[k]]);
      sets.push_back(grid[k].first + "=" + l.values.back());
    }
    try {
      const Scenario sc = load(o, sets);
      time_layout(sc, l);
    } catch (const sim::RankFailure& e) {
      l.error = e.what();
    } catch (const Error& e) {
      l.error = e.what();
    }
    const std::string what =
        describe(grid, l) + ": " +
        (l.error.empty() ? sim::Time::from_seconds(l.iteration_s).str() + " per iteration" : std::string("invalid"));
    if (o.progress_bar) {
      const int width = 30, done = static_cast<int>(width * (i + 1) / total);
      err << "\r[" << std::string(static_cast<std::size_t>(done), '#')
          << std::string(static_cast<std::size_t>(width - done), '.') << "] " << i + 1 << "/" << total << " "
          << what.substr(0, 60) << "\x1b[K" << std::flush;
    } else {
      err << "sweep: " << i + 1 << "/" << total << " " << what << "\n";
    }
    rows.push_back(std::move(l));
  }
  if (o.progress_bar) err << "\n";

  // Best first: layouts that fit by iteration time, then those over memory, then the invalid.
  std::stable_sort(rows.begin(), rows.end(), [](const SweepLayout& a, const SweepLayout& b) {
    const auto rank = [](const SweepLayout& l) { return l.error.empty() ? (l.fits ? 0 : 1) : 2; };
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return rank(a) < 2 && a.iteration_s < b.iteration_s;
  });
  const std::size_t valid = static_cast<std::size_t>(
      std::count_if(rows.begin(), rows.end(), [](const SweepLayout& l) { return l.error.empty(); }));
  const std::string name = base.name;
  out << "sweep of " << name << ": " << total << " layouts, " << valid << " valid, best first (shape-only)\n";
  char buf[320];
  std::string header = "  #";
  for (const auto& [key, values] : grid) header += "  " + key;
  out << header << "   tp cp pp dp vp   iteration  tokens/s/GPU  TFLOP/s/GPU    MFU   peak memory  fits\n";
  int n = 0;
  for (const SweepLayout& l : rows) {
    if (!l.error.empty()) continue;
    std::string line = fmt("%3.0f", ++n);
    for (std::size_t k = 0; k < grid.size(); ++k) {
      std::string v = l.values[k];
      if (v.size() < grid[k].first.size()) v.resize(grid[k].first.size(), ' ');
      line += "  " + v;
    }
    std::snprintf(buf, sizeof buf, "  %3d%3d%3d%3d%3d %11s %13.0f %12.1f %5.1f%% %13s  %s\n", l.tp, l.cp, l.pp, l.dp,
                  l.virtual_stages, sim::Time::from_seconds(l.iteration_s).str().c_str(), l.tokens_per_s_per_gpu,
                  l.tflops_per_gpu, 100 * l.mfu, sim::units::format_bytes(l.peak_bytes).c_str(),
                  l.fits ? "yes" : "no (over the device's memory)");
    out << line << buf;
  }
  if (valid < total) {
    out << "invalid layouts:\n";
    for (const SweepLayout& l : rows)
      if (!l.error.empty()) out << "  " << describe(grid, l) << ": " << l.error << "\n";
  }
  // The outputs appear together or not at all (sim::OutputGroup).
  std::ostringstream written;
  sim::OutputGroup outputs;
  if (!o.csv.empty()) {
    write_csv(o.csv, grid, rows);
    written << "csv: " << o.csv << "\n";
  }
  if (!o.json.empty()) {
    write_json(o.json, name, grid, rows);
    written << "json: " << o.json << "\n";
  }
  if (!o.report.empty()) {
    write_report(o.report, name, grid, rows);
    written << "report: " << o.report << "\n";
  }
  outputs.commit_all();
  out << written.str();
  return valid == 0 ? 2 : 0;
}

}  // namespace ranksim::app

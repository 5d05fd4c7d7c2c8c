#include "app/run_summary.h"

#include <algorithm>
#include <cstdio>

#include "app/nccl_table.h"
#include "runtime/distributed/distributed.h"
#include "sim/units.h"

namespace ranksim::app {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

runtime::CollectiveKind CollectiveLine::kind() const {
  return runtime::parse_collective_kind(op).value_or(runtime::CollectiveKind::broadcast);
}

std::vector<CollectiveLine> group_collectives(const runtime::RunReport& report) {
  std::vector<CollectiveLine> lines;
  for (const auto& rec : report.collectives) {
    const std::string op = runtime::to_string(rec.kind);
    const std::string algo = runtime::algorithm_label(rec);
    const std::string desc = runtime::group_desc_of(rec.group);
    auto it = std::find_if(lines.begin(), lines.end(), [&](const CollectiveLine& l) {
      return l.op == op && l.group_size == rec.group_size && l.dtype == rec.dtype && l.bytes == rec.bytes &&
             l.algorithm == algo && l.desc == desc;
    });
    if (it == lines.end()) {
      lines.push_back({op, rec.dtype, algo, desc, rec.group_size, rec.bytes, 0, 0.0});
      it = lines.end() - 1;
    }
    ++it->calls;
    it->seconds += (rec.end - rec.start).seconds();
  }
  return lines;
}

void evaluate_checks(const Scenario& sc, RunSummary& s) {
  s.checks.clear();
  if (s.validation) {
    const models::ValidationReport& v = *s.validation;
    const models::ValidationThresholds& t = v.thresholds;
    s.checks.push_back(
        {"validation logits: >= " + fmt("%g", 100 * t.logits_share) + "% within " + fmt("%g", t.logits_atol),
         v.logits_ok, fmt("%.2f%%", 100 * v.logits_share)});
    s.checks.push_back(
        {"validation loss: relative difference <= " + fmt("%g", t.loss_rel), v.loss_ok, fmt("%.3g", v.loss_rel)});
    s.checks.push_back({"validation gradients: norm difference <= " + fmt("%g", t.grad_norm_diff) +
                            ", >= " + fmt("%g", 100 * t.acceptable_share) + "% acceptable",
                        v.grads_ok,
                        fmt("%.3g", v.grad_max_norm_diff) + ", " + fmt("%.0f%%", 100 * v.acceptable_share)});
  }
  for (size_t r = 0; r < s.report.memory.size(); ++r) {
    const runtime::MemoryUse& m = s.report.memory[r];
    if (m.capacity == 0 || m.peak <= m.capacity) continue;
    s.checks.push_back({memory_overflow(static_cast<int>(r), m) +
                            (sc.memory_warn_only ? " (memory_check: warn)" : "; set memory_check: warn to run anyway"),
                        sc.memory_warn_only, sim::units::format_bytes(m.peak)});
    break;  // the first rank that does not fit; every rank is in the memory table
  }
  for (const ScenarioCheck& ck : sc.checks) {
    if (ck.kind == ScenarioCheck::Kind::max_time) {
      s.checks.push_back({ck.text, s.makespan <= ck.time, s.makespan.str()});
      continue;
    }
    double busbw = -1;
    if (!s.sweep.empty() && sc.sweep_op == ck.op) busbw = s.sweep.back().busbw;
    for (const CollectiveLine& l : s.lines)
      if (l.op == ck.op)
        busbw =
            std::max(busbw, static_cast<double>(l.bytes) / l.seconds_per_call() * busbw_factor(l.kind(), l.group_size));
    s.checks.push_back(
        {ck.text, busbw >= ck.busbw, busbw < 0 ? "no " + ck.op + " in this run" : sim::units::format_bandwidth(busbw)});
  }
  s.passed = std::none_of(s.sweep.begin(), s.sweep.end(), [](const SweepRow& r) { return r.wrong > 0; }) &&
             std::all_of(s.checks.begin(), s.checks.end(), [](const CheckResult& c) { return c.passed; });
}

std::string memory_peak_when(const runtime::MemoryUse& m) {
  const std::string after = m.after_op.empty() ? std::string() : "after " + m.after_op + " at " + m.peak_time.str();
  if (m.phase.empty()) return after.empty() ? "-" : after;
  return "in " + m.phase + (after.empty() ? "" : " (" + after + ")");
}

std::string memory_overflow(int rank, const runtime::MemoryUse& m) {
  // Largest first, as a reader looks for what to cut.
  std::vector<std::pair<uint64_t, const char*>> parts;
  for (int k = 0; k < runtime::kMemoryKinds; ++k)
    parts.emplace_back(m.at_peak[static_cast<size_t>(k)],
                       runtime::memory_kind_name(static_cast<runtime::MemoryKind>(k)));
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text = "rank " + std::to_string(rank) + " needs " +
                     fmt("%.1f GiB", static_cast<double>(m.peak) / (1ull << 30)) + " of " +
                     fmt("%.1f GiB", static_cast<double>(m.capacity) / (1ull << 30)) +
                     (m.phase.empty() && m.after_op.empty() ? std::string() : " " + memory_peak_when(m)) + ":";
  for (size_t i = 0; i < parts.size(); ++i)
    text += std::string(i ? "," : "") + " " + parts[i].second + " " +
            fmt("%.1f", static_cast<double>(parts[i].first) / (1ull << 30));
  return text;
}

double model_flops(const models::TransformerConfig& c, const std::vector<std::int64_t>& lengths, bool causal) {
  const double l = static_cast<double>(c.layers), h = static_cast<double>(c.hidden);
  const double a = static_cast<double>(c.heads), g = static_cast<double>(c.query_groups());
  const double r = a * static_cast<double>(c.head_dim) / h;
  const double mlp = static_cast<double>(c.ffn) / h * (c.activation == models::Activation::swiglu ? 1.5 : 1.0);
  const double logit = static_cast<double>(c.vocab) / (2 * l * h);
  double tokens = 0, squares = 0;
  for (std::int64_t len : lengths) {
    tokens += static_cast<double>(len);
    squares += static_cast<double>(len) * static_cast<double>(len);
  }
  const double score = (causal ? 0.5 : 1.0) * r * squares / h;
  return 12 * l * h * h * (tokens * ((1 + g / a) * r + mlp + logit) + score);
}

std::optional<Throughput> training_throughput(const Scenario& sc, const RunSummary& s) {
  if (!sc.model || !sc.model->train || sc.model->encoder || sc.model->lengths.empty()) return std::nullopt;
  const ModelWorkload& m = *sc.model;
  const double seconds = s.makespan.seconds();
  if (!(seconds > 0) || m.train->steps < 1) return std::nullopt;
  Throughput t;
  t.iteration_s = seconds / m.train->steps;
  for (std::int64_t len : m.lengths) t.tokens_per_step += static_cast<double>(len);
  t.model_flops_per_step = model_flops(m.config, m.lengths, m.attention.mask == models::Mask::causal);
  const double gpus = static_cast<double>(sc.ranks);
  t.tokens_per_s_per_gpu = t.tokens_per_step / t.iteration_s / gpus;
  t.tflops_per_gpu = t.model_flops_per_step / t.iteration_s / gpus / 1e12;
  t.peak_dtype = m.config.fp8 ? "fp8" : runtime::dtype_name(m.config.dtype);
  if (sc.topology && sc.topology->num_devices() > 0) {
    const auto& peaks = sc.topology->kind_of(0).peak_flops;
    const auto it = peaks.find(t.peak_dtype);
    if (it != peaks.end() && it->second > 0) {
      t.peak_tflops = it->second / 1e12;
      t.mfu = t.tflops_per_gpu / t.peak_tflops;
    }
  }
  return t;
}

ComputeRates compute_rates(const runtime::ComputeBreakdown& c, sim::Time makespan) {
  const double seconds = makespan.seconds();
  if (!(seconds > 0)) return {};
  return {c.flops / seconds / 1e12, c.peak_seconds / seconds};
}

int comm_dimension(const std::string& group_desc) {
  std::vector<std::string> tokens;
  for (std::size_t b = 0; b <= group_desc.size();) {
    const std::size_t e = std::min(group_desc.find_first_of("-.", b), group_desc.size());
    tokens.push_back(group_desc.substr(b, e - b));
    b = e + 1;
  }
  for (const int d : {3, 2, 1, 0})  // pp, dp, cp, tp: the outermost first
    if (std::find(tokens.begin(), tokens.end(), kCommDimNames[d]) != tokens.end()) return d;
  return 4;
}

std::vector<TimeBreakdown> time_breakdown(const Scenario& sc, const RunSummary& s) {
  const runtime::RunReport& rep = s.report;
  std::vector<TimeBreakdown> rows;
  if (rep.comm_by_group.size() != rep.comm.size() || rep.comm.empty()) return rows;
  const int ranks = static_cast<int>(rep.comm.size());
  const int stages = sc.pp > 1 && ranks % sc.pp == 0 ? sc.pp : 1;
  const int per = ranks / stages;
  for (int st = 0; st < stages; ++st) {
    TimeBreakdown row;
    row.first_rank = st * per;
    row.last_rank = (st + 1) * per - 1;
    row.stage = stages > 1 ? st : -1;
    for (int r = row.first_rank; r <= row.last_rank; ++r) {
      const auto i = static_cast<std::size_t>(r);
      row.compute_s += rep.compute[i].seconds();
      row.idle_s += std::max(0.0, (s.makespan - rep.compute[i] - rep.comm[i]).seconds());
      std::array<double, kCommDims> exposed{}, busy{};
      for (const auto& [desc, t] : rep.comm_by_group[i])
        exposed[static_cast<std::size_t>(comm_dimension(desc))] += t.seconds();
      if (i < rep.comm_busy_by_group.size())
        for (const auto& [desc, t] : rep.comm_busy_by_group[i])
          busy[static_cast<std::size_t>(comm_dimension(desc))] += t.seconds();
      for (std::size_t d = 0; d < exposed.size(); ++d) {
        row.exposed_s[d] += exposed[d];
        row.overlapped_s[d] += std::max(0.0, busy[d] - exposed[d]);
      }
    }
    row.compute_s /= per;
    row.idle_s /= per;
    for (double& x : row.exposed_s) x /= per;
    for (double& x : row.overlapped_s) x /= per;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace ranksim::app

#include "app/summary_text.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "app/nccl_table.h"
#include "sim/units.h"
#include "sim/yaml_input.h"

namespace ranksim::app {

void print_run_header(std::ostream& out, const Scenario& sc, const sim::Topology& topo, const runtime::Device* device) {
  out << "ranksim run: " << sc.name << " — " << sc.ranks << " ranks on " << topo.name() << " (" << topo.num_nodes()
      << (topo.num_nodes() == 1 ? " node" : " nodes") << "), layout tp=" << sc.tp << " cp=" << sc.cp << " dp=" << sc.dp
      << " pp=" << sc.pp << ", " << (sc.real_data ? "real data" : "shape-only") << "\n";
  if (!sc.description.empty()) out << "  " << sc.description << "\n";
  if (device) out << "  ops compute on the " << device->name() << " device\n";
  if (!sc.nccl_environment.empty())
    out << "  NCCL's environment, read as NCCL reads it: " << sim::join(sc.nccl_environment, " ") << "\n";
  out << "\n";
}

void print_sweep_table(std::ostream& out, const Scenario& sc, const std::vector<SweepRow>& sweep) {
  out << *sc.sweep_op << " sweep (" << sc.sweep_dtype << "):\n";
  print_table_header(out);
  const runtime::CollectiveKind kind =
      runtime::parse_collective_kind(*sc.sweep_op).value_or(runtime::CollectiveKind::broadcast);  // sendrecv: 1
  for (const SweepRow& r : sweep) {
    TableRow row{r.bytes, r.count, sc.sweep_dtype, r.algorithm, r.seconds, r.wrong};
    print_table_row(out, row, kind, sc.ranks);
  }
}

namespace {
// Calls row(r) for the ranks a per-rank table shows, of `available` rows (every rank of a run of
// up to 16, else the first 8), then says how many of the run's `ranks` it left out.
void for_shown_ranks(std::ostream& out, int ranks, size_t available, const std::function<void(int)>& row) {
  const int shown = ranks <= 16 ? ranks : 8;
  const int rows = std::min(ranks, static_cast<int>(available));
  for (int r = 0; r < rows && r < shown; ++r) row(r);
  if (rows > shown) out << "   ... (" << ranks - shown << " more ranks)\n";
}
}  // namespace

void print_rank_table(std::ostream& out, const Scenario& sc, const RunSummary& s) {
  const runtime::RunReport& rep = s.report;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%6s %12s %12s %12s %12s\n", "rank", "time", "compute", "comm", "idle");
  out << buf;
  for_shown_ranks(out, sc.ranks, static_cast<size_t>(sc.ranks), [&](int r) {
    const sim::Time idle = s.makespan - rep.compute[static_cast<size_t>(r)] - rep.comm[static_cast<size_t>(r)];
    std::snprintf(buf, sizeof buf, "%6d %12s %12s %12s %12s\n", r, s.makespan.str().c_str(),
                  rep.compute[static_cast<size_t>(r)].str().c_str(), rep.comm[static_cast<size_t>(r)].str().c_str(),
                  (idle > sim::Time::zero() ? idle : sim::Time::zero()).str().c_str());
    out << buf;
  });
  print_breakdown_table(out, sc, s);
  print_compute_table(out, sc, s);
  print_memory_table(out, sc, s);
}

void print_breakdown_table(std::ostream& out, const Scenario& sc, const RunSummary& s) {
  const std::vector<TimeBreakdown> rows = time_breakdown(sc, s);
  const bool any = std::any_of(rows.begin(), rows.end(), [](const TimeBreakdown& r) {
    return std::any_of(r.exposed_s.begin(), r.exposed_s.end(), [](double x) { return x > 0; });
  });
  if (!any) return;
  out << "\nwhere the time goes: exposed communication by parallelism, mean per rank (docs/scenarios.md):\n";
  char buf[240];
  std::snprintf(buf, sizeof buf, "%-18s %11s %11s %11s %11s %11s %11s %11s\n", "ranks", "compute", "TP", "CP", "DP",
                "PP", "other", "idle");
  out << buf;
  const auto t = [](double x) { return sim::Time::from_seconds(x).str(); };
  for (const TimeBreakdown& r : rows) {
    const std::string who = std::to_string(r.first_rank) + "-" + std::to_string(r.last_rank) +
                            (r.stage >= 0 ? " (stage " + std::to_string(r.stage) + ")" : std::string());
    std::snprintf(buf, sizeof buf, "%-18s %11s %11s %11s %11s %11s %11s %11s\n", who.c_str(), t(r.compute_s).c_str(),
                  t(r.exposed_s[0]).c_str(), t(r.exposed_s[1]).c_str(), t(r.exposed_s[2]).c_str(),
                  t(r.exposed_s[3]).c_str(), t(r.exposed_s[4]).c_str(), t(r.idle_s).c_str());
    out << buf;
  }
  if (sc.pp > 1)
    out << "  PP: the pipeline bubble and the activation transfers (time blocked in stage-to-stage receives)\n";
  const bool overlapped = std::any_of(rows.begin(), rows.end(), [](const TimeBreakdown& r) {
    return std::any_of(r.overlapped_s.begin(), r.overlapped_s.end(), [](double x) { return x > 0; });
  });
  if (!overlapped) return;
  out << "overlapped communication (in flight while the rank worked, not in the columns above), mean per rank:\n";
  for (const TimeBreakdown& r : rows) {
    const std::string who = std::to_string(r.first_rank) + "-" + std::to_string(r.last_rank) +
                            (r.stage >= 0 ? " (stage " + std::to_string(r.stage) + ")" : std::string());
    std::snprintf(buf, sizeof buf, "%-18s %11s %11s %11s %11s %11s %11s\n", who.c_str(), "",
                  t(r.overlapped_s[0]).c_str(), t(r.overlapped_s[1]).c_str(), t(r.overlapped_s[2]).c_str(),
                  t(r.overlapped_s[3]).c_str(), t(r.overlapped_s[4]).c_str());
    out << buf;
  }
}

void print_memory_table(std::ostream& out, const Scenario& sc, const RunSummary& s) {
  const std::vector<runtime::MemoryUse>& mem = s.report.memory;
  if (mem.empty()) return;
  out << "\ndevice memory at each rank's peak (docs/compute.md):\n";
  char buf[240];
  std::snprintf(buf, sizeof buf, "%6s %11s %11s %11s %11s %11s %11s %11s  %s\n", "rank", "peak", "capacity",
                "parameters", "gradients", "optimizer", "activations", "buffers", "when");
  out << buf;
  auto bytes = [](uint64_t b) { return sim::units::format_bytes(b); };
  for_shown_ranks(out, sc.ranks, mem.size(), [&](int r) {
    const runtime::MemoryUse& m = mem[static_cast<size_t>(r)];
    std::snprintf(buf, sizeof buf, "%6d %11s %11s %11s %11s %11s %11s %11s  ", r, bytes(m.peak).c_str(),
                  bytes(m.capacity).c_str(), bytes(m.at_peak[0]).c_str(), bytes(m.at_peak[1]).c_str(),
                  bytes(m.at_peak[2]).c_str(), bytes(m.at_peak[3]).c_str(), bytes(m.at_peak[4]).c_str());
    out << buf << memory_peak_when(m) << '\n';
  });
}

void print_compute_table(std::ostream& out, const Scenario& sc, const RunSummary& s) {
  const runtime::RunReport& rep = s.report;
  if (rep.compute_detail.empty()) return;
  char buf[200];
  out << "\ncompute by kernel class (docs/compute.md):\n";
  std::snprintf(buf, sizeof buf, "%6s %12s %12s %12s %12s %10s %7s\n", "rank", "gemm", "attention", "memory-bound",
                "other", "TFLOP/s", "MFU");
  out << buf;
  for_shown_ranks(out, sc.ranks, rep.compute_detail.size(), [&](int r) {
    const runtime::ComputeBreakdown& c = rep.compute_detail[static_cast<size_t>(r)];
    const ComputeRates rates = compute_rates(c, s.makespan);
    std::snprintf(buf, sizeof buf, "%6d %12s %12s %12s %12s %10.1f %6.1f%%\n", r, c.time[0].str().c_str(),
                  c.time[1].str().c_str(), c.time[2].str().c_str(), c.time[3].str().c_str(), rates.tflops,
                  100 * rates.mfu);
    out << buf;
  });
  for (const std::string& m : rep.compute_models) out << "  timed by " << m << "\n";
  for (const auto& [note, kernels] : rep.compute_notes) out << "  note: " << note << ": " << kernels << " kernels\n";
}

void print_collectives_table(std::ostream& out, const RunSummary& s) {
  const bool described =
      std::any_of(s.lines.begin(), s.lines.end(), [](const CollectiveLine& l) { return !l.desc.empty(); });
  char buf[200];
  out << "\n";
  std::snprintf(buf, sizeof buf, "%-15s %6s %6s %14s %13s %8s %12s %12s %12s", "collective", "ranks", "type", "size(B)",
                "algorithm", "calls", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  out << buf << (described ? "  group\n" : "\n");
  for (const CollectiveLine& l : s.lines) {
    const double per_call = l.seconds_per_call();
    const double algbw = per_call > 0 ? static_cast<double>(l.bytes) / per_call / 1e9 : 0;
    std::snprintf(buf, sizeof buf, "%-15s %6d %6s %14lld %13s %8lld %12.2f %12.2f %12.2f", l.op.c_str(), l.group_size,
                  l.dtype.c_str(), static_cast<long long>(l.bytes), l.algorithm.c_str(),
                  static_cast<long long>(l.calls), per_call * 1e6, algbw, algbw * busbw_factor(l.kind(), l.group_size));
    out << buf << (described ? "  " + (l.desc.empty() ? std::string("-") : l.desc) + "\n" : std::string("\n"));
  }
}

// Uneven pipeline stages' blocks, e.g. "stages 3-4-4-1"; with virtual stages, the model chunks'
// (pp x v of them), e.g. "chunks 1-2x62-1".
std::string stage_split(std::int64_t layers, int pp, const TrainSettings& t) {
  const int n = pp * t.virtual_stages;
  auto count = [&](int r) {
    return models::stage_layers(layers, models::Stage{r, n, t.first_stage_layers, t.last_stage_layers}, "pipeline")
        .count;
  };
  if (t.virtual_stages > 1)
    return "chunks " + std::to_string(count(0)) + "-" + std::to_string(count(1)) + "x" + std::to_string(n - 2) + "-" +
           std::to_string(count(n - 1));
  std::string out = "stages";
  for (int r = 0; r < pp; ++r) out += (r == 0 ? " " : "-") + std::to_string(count(r));
  return out;
}

void print_model_section(std::ostream& out, const Scenario& sc, const RunSummary& s) {
  const ModelWorkload& m = *sc.model;
  const models::TransformerConfig& c = m.config;
  const bool ln = c.norm == models::Norm::layernorm;
  out << "\nmodel: decoder (" << (ln ? "LayerNorm" : "RMSNorm") << ", "
      << (c.activation == models::Activation::swiglu ? "SwiGLU" : "GELU") << ", "
      << (c.positions == models::Positions::rope ? "RoPE" : "learned positions") << ", "
      << (c.bias ? "biases" : "no biases") << "), vocab " << c.vocab
      << (m.tokenizer_vocab > 0 && m.tokenizer_vocab != c.vocab
              ? " (" + std::to_string(m.tokenizer_vocab) + " padded to a multiple of " +
                    std::to_string(m.vocab_divisible_by) + " x tp)"
              : std::string())
      << (sc.tp > 1 ? (c.vocab % sc.tp == 0 ? " vocab-parallel"
                                            : " replicated over TP (tp does not divide it; Megatron pads it: set "
                                              "model.make_vocab_size_divisible_by)")
                    : "")
      << ", hidden " << c.hidden << ", " << c.heads << " heads of " << c.head_dim;
  if (!c.fused_qkv()) out << " (" << c.query_groups() << " KV heads)";
  out << ", ffn " << c.ffn << ", " << runtime::dtype_name(c.dtype) << (c.fp8 ? " with FP8 GEMMs (timing only)" : "")
      << ", " << (m.attention.format == cp::Format::thd ? "thd" : "bshd") << " " << models::mask_name(m.attention.mask);
  if (m.attention.window_left >= 0 || m.attention.window_right >= 0)
    out << " window [" << m.attention.window_left << ", " << m.attention.window_right << "]";
  out << ", cp_comm " << sc.cp_comm << "\n";
  std::vector<std::string> options;
  if (c.sequence_parallel) options.emplace_back("sequence parallelism");
  if (c.tp_comm_overlap) options.emplace_back("TP communication overlap");
  if (c.recompute == models::Recompute::selective) options.emplace_back("selective recomputation");
  if (c.recompute == models::Recompute::full) {
    options.emplace_back("full recomputation (" +
                         std::string(c.recompute_method == models::RecomputeMethod::block ? "block" : "uniform") +
                         ", " + std::to_string(c.recompute_num_layers) + ")");
  }
  if (!options.empty()) {
    out << "  options:";
    for (std::size_t i = 0; i < options.size(); ++i) out << (i ? ", " : " ") << options[i];
    out << "\n";
  }
  if (m.encoder) {
    const EncoderSettings& e = *m.encoder;
    std::string order;
    for (const auto& d : m.order) order += (order.empty() ? "" : "-") + d;
    const char* mode = e.dp > sc.dp ? "fan-in" : e.dp < sc.dp ? "fan-out" : "identity";
    out << "  encoder: 2-layer MLP " << e.config.features << " -> " << e.config.ffn << " -> " << c.hidden
        << " at tp=" << e.tp << " dp=" << e.dp << ", bridged (" << mode << ") into the transformer's " << order
        << " grid; its outputs replace the embeddings\n";
    out << "  training: " << m.train->steps << " steps, adamw lr " << fmt("%g", m.train->optimizer.lr)
        << ", weight decay " << fmt("%g", m.train->optimizer.weight_decay) << "\n";
  } else if (m.train) {
    const TrainSettings& t = *m.train;
    out << "  training: " << t.steps << " steps, " << t.micro_batches << " micro-batches per DP rank, adamw lr "
        << fmt("%g", t.optimizer.lr) << ", weight decay " << fmt("%g", t.optimizer.weight_decay)
        << (t.clip_grad_norm ? ", clip " + fmt("%g", *t.clip_grad_norm) : std::string()) << ", zero " << t.zero
        << (sc.dp * sc.cp > 1 || t.zero != 0
                ? (t.bucket_size == std::numeric_limits<std::int64_t>::max()
                       ? ", gradients reduced in one bucket after backward"
                   : t.bucket_size > 0 ? ", gradient buckets of " + fmt("%.4g", static_cast<double>(t.bucket_size)) +
                                             " elements overlapped with backward"
                                       : std::string(", a gradient bucket per block overlapped with backward"))
                : std::string())
        << ", layers " << c.layers << " over pp=" << sc.pp
        << (t.first_stage_layers >= 0 || t.last_stage_layers >= 0 ? " (" + stage_split(c.layers, sc.pp, t) + ")"
                                                                  : std::string())
        << (t.virtual_stages > 1 ? " x " + std::to_string(t.virtual_stages) + " virtual stages (interleaved 1F1B)"
                                 : std::string())
        << "\n";
  }
  if (const std::optional<Throughput> t = training_throughput(sc, s)) {
    out << "  throughput (Megatron's model FLOPs, docs/models.md): iteration "
        << sim::Time::from_seconds(t->iteration_s).str() << ", " << fmt("%.0f", t->tokens_per_s_per_gpu)
        << " tokens/s/GPU, " << fmt("%.1f", t->tflops_per_gpu) << " model TFLOP/s/GPU";
    if (t->peak_tflops > 0)
      out << ", MFU " << fmt("%.1f", 100 * t->mfu) << "% of " << t->peak_dtype << " " << fmt("%.0f", t->peak_tflops)
          << " TFLOP/s";
    out << "\n";
  }
  if (m.train && sc.pp > 1) {
    const auto [lo, hi] = std::minmax_element(s.pipeline_wait.begin(), s.pipeline_wait.end());
    out << "  pipeline: time blocked in stage-to-stage receives (the 1F1B bubble plus activation transfers, "
           "counted in comm above): "
        << sim::Time::from_seconds(*lo).str() << " to " << sim::Time::from_seconds(*hi).str() << " per rank\n";
    // Megatron's schedule analysis (Narayanan et al. 2021): the bubble is (pp - 1) / (v m) of the
    // ideal step time with equal stages and free transfers
    const double v = m.train->virtual_stages, mb = m.train->micro_batches;
    out << "  pipeline: the schedule's ideal bubble (pp - 1) / (v m) = " << fmt("%.1f", 100.0 * (sc.pp - 1) / (v * mb))
        << "% of the ideal step (v = " << m.train->virtual_stages << " chunks, m = " << m.train->micro_batches
        << " micro-batches)\n";
  }
  if (m.shape_only) {
    out << "  shape-only: timing only, no numbers\n";
  } else if (m.train) {
    out << "  step    loss";
    if (m.train->clip_grad_norm) out << "   grad norm";
    out << "\n";
    for (std::size_t i = 0; i < s.train_result.losses.size(); ++i) {
      out << fmt("  %4.0f", static_cast<double>(i + 1)) << fmt("  %.6f", s.train_result.losses[i]);
      if (m.train->clip_grad_norm) out << fmt("  %10.6f", s.train_result.grad_norms[i]);
      out << "\n";
    }
  } else {
    out << "  loss " << fmt("%.6f", s.model_dump.loss) << " over " << s.model_dump.tokens << " labelled tokens\n";
  }
  if (s.validation) {
    out << "\n";
    models::print_validation(*s.validation, baseline_name(m),
                             "tp=" + std::to_string(sc.tp) + " cp=" + std::to_string(sc.cp) + " " + sc.cp_comm, out);
  }
}

void print_totals(std::ostream& out, const RunSummary& s, bool wall_time, runtime::Device* device) {
  out << (wall_time ? "\nwall time: " : "\nvirtual time: ") << s.makespan << "\n";
  if (device) {
    const runtime::DeviceStats& ds = device->stats();
    out << "device " << device->name() << ": " << ds.ops << " ops (" << ds.kernels << " kernels, " << ds.gemms
        << " GEMMs); " << ds.uploads << " uploads (" << sim::units::format_bytes(static_cast<uint64_t>(ds.upload_bytes))
        << "), " << ds.downloads << " downloads (" << sim::units::format_bytes(static_cast<uint64_t>(ds.download_bytes))
        << ")\n";
  }
  if (!s.checks.empty()) out << "checks:\n";
  for (const CheckResult& c : s.checks)
    out << "  [" << (c.passed ? "pass" : "FAIL") << "] " << c.text << " (measured " << c.measured << ")\n";
}

void print_faults(std::ostream& out, const Scenario& sc, const RunSummary& s) {
  if (sc.faults.empty()) return;
  out << "faults injected (docs/scenarios.md, \"Faults\"):\n";
  for (const ScenarioFault& f : sc.faults) {
    out << "  " << f.label << ": ";
    const sim::Time from = f.at.value_or(sim::Time::zero());
    switch (f.kind) {
      case ScenarioFault::Kind::straggler:
        out << "its kernels take " << fmt("%g", f.slowdown) << "x as long from " << from;
        break;
      case ScenarioFault::Kind::network_degrades:
        out << "its network links run at " << fmt("%g", f.factor) << " of their bandwidth from " << from;
        break;
      case ScenarioFault::Kind::network_fails:
        out << "its network links fail at " << from << " (no collective crossing them ran after that)";
        break;
      default:
        out << (f.kind == ScenarioFault::Kind::rank_fails ? "fails " : "stops ")
            << (f.at ? "at " + f.at->str()
                     : "before step " + std::to_string(f.step) + " of repetition " + std::to_string(f.iteration));
        if (s.without_faults) out << " (after the run ended: no effect)";
    }
    out << "\n";
  }
  if (s.without_faults && s.without_faults->picoseconds() > 0) {
    const double ratio = s.makespan.seconds() / s.without_faults->seconds();
    out << "  effect: virtual time " << s.makespan << " against " << *s.without_faults << " without the faults ("
        << fmt("%+.2f%%", (ratio - 1) * 100) << ")\n";
  }
}

}  // namespace ranksim::app

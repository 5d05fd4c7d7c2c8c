#include "models/run.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cp/context_parallel.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/safetensors.h"
#include "sim/error.h"
#include "tp/parallel_state.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;

namespace {

// Each DP rank's logits [R_d, vocab] (or [B/dp, S, vocab]) concatenated in DP order: padded to
// the largest R_d for one all-gather (THD shares differ in tokens), then trimmed.
Tensor gather_over_dp(const Tensor& mine, const TransformerRunSpec& spec, const runtime::ProcessGroup& dp) {
  const std::int64_t vocab = spec.config.vocab;
  std::vector<std::int64_t> rows;
  for (int d = 0; d < spec.dp; ++d) rows.push_back(dp_slice(spec.batch, spec.dp, d).input_ids.numel());
  const std::int64_t most = *std::max_element(rows.begin(), rows.end());
  const Tensor flat = mine.reshape({mine.numel() / vocab, vocab});
  Tensor padded = Tensor::zeros({most, vocab}, DType::f32);
  if (flat.size(0) > 0) padded.narrow(0, 0, flat.size(0)).copy_(flat);
  Tensor all = Tensor::zeros({most * spec.dp, vocab}, DType::f32);
  runtime::AllgatherOptions o;
  o.group = dp;
  runtime::all_gather_into_tensor(all, padded, o).wait();
  std::vector<Tensor> parts;
  for (int d = 0; d < spec.dp; ++d) parts.push_back(all.narrow(0, d * most, rows[static_cast<std::size_t>(d)]));
  Tensor out = runtime::cat(parts, 0);
  if (spec.batch.format == cp::Format::bshd)
    out = out.reshape({spec.batch.input_ids.size(0), spec.batch.input_ids.size(1), vocab});
  return out;
}

}  // namespace

TransformerDump transformer_step(const TransformerRunSpec& spec) {
  const int world = runtime::get_world_size();
  const int layout = spec.tp * spec.cp * spec.dp;
  if (spec.tp < 1 || spec.cp < 1 || spec.dp < 1 || layout != world) {
    throw Error("reference transformer: tp=" + std::to_string(spec.tp) + " x cp=" + std::to_string(spec.cp) +
                " x dp=" + std::to_string(spec.dp) + " = " + std::to_string(layout) + " ranks, but the run has " +
                std::to_string(world));
  }
  const tp::ParallelState ps = tp::initialize_model_parallel(spec.tp, 1, spec.cp);
  TransformerGroups groups;
  groups.tp = ps.tp().group;
  groups.cp = transformer_cp_groups(ps.cp().group, spec.attention);
  if (spec.dp > 1) groups.loss = ps.dp_cp().group;
  Transformer model(spec.config, spec.weights, groups, spec.attention);
  const Batch mine = dp_slice(spec.batch, spec.dp, ps.dp().rank);
  const LocalBatch local = shard_batch(mine, spec.cp, ps.cp().rank);
  const StepResult step = model.forward_backward(local);
  model.reduce_gradients(ps.dp_cp().group);
  TransformerDump dump;
  dump.loss = step.loss;
  dump.tokens = step.tokens;
  if (!step.logits.has_data()) return dump;  // a timing run: nothing to gather
  dump.logits = gather_logits(model.full_logits(step.logits), local, groups.cp.cp);
  if (spec.dp > 1) dump.logits = gather_over_dp(dump.logits, spec, ps.dp().group);
  for (auto& [name, p] : model.named_parameters()) {
    dump.grads.emplace_back(name, p->full_grad(groups.tp).to(DType::f32));
  }
  return dump;
}

TransformerDump run_transformer(const TransformerRunSpec& spec, const runtime::SpawnOptions& options,
                                runtime::RunReport* report) {
  check_batch(spec.batch, spec.config, spec.cp, "batch");
  dp_slice(spec.batch, spec.dp, 0);  // a dp that does not divide the batch, before any rank runs
  TransformerDump result;
  runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        TransformerDump d = transformer_step(spec);
        if (rank == 0) result = std::move(d);
      },
      spec.tp * spec.cp * spec.dp, options);
  if (report) *report = std::move(rep);
  return result;
}

void write_dump(const std::string& path, const TransformerDump& dump) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("logits", dump.logits.to(DType::f32));
  tensors.emplace_back("loss", Tensor::full({}, dump.loss, DType::f32));
  for (const auto& [name, g] : dump.grads) tensors.emplace_back("grad/" + name, g.to(DType::f32));
  runtime::save_safetensors(path, tensors, {{"format", "ranksim reference transformer dump"}});
}

}  // namespace ranksim::models

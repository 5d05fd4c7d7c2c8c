#include "models/run.h"

#include <string>
#include <utility>

#include "cp/context_parallel.h"
#include "runtime/distributed.h"
#include "runtime/safetensors.h"
#include "sim/error.h"
#include "tp/parallel_state.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;

namespace {

cp::CpGroups cp_groups(const runtime::ProcessGroup& cp, const AttentionSetup& a) {
  if (a.comm != cp::CommType::a2a_p2p) return cp::CpGroups(cp);
  if (a.a2a_size == 0 && a.p2p_size == 0) {
    if (cp.size() % 2 != 0) {
      throw Error("a2a+p2p: the default hierarchical sizes [2, cp/2] need an even cp, got cp=" +
                  std::to_string(cp.size()) + " (set the sizes explicitly)");
    }
    return cp::hierarchical_cp_groups(cp);
  }
  if (a.a2a_size * a.p2p_size != cp.size()) {
    throw Error("a2a+p2p: hierarchical sizes [" + std::to_string(a.a2a_size) + ", " +
                std::to_string(a.p2p_size) + "] multiply to " +
                std::to_string(a.a2a_size * a.p2p_size) + ", not cp=" + std::to_string(cp.size()));
  }
  return cp::hierarchical_cp_groups(cp, a.a2a_size, a.p2p_size);
}

}  // namespace

TransformerDump transformer_step(const TransformerRunSpec& spec) {
  const int world = runtime::get_world_size();
  if (spec.tp < 1 || spec.cp < 1 || spec.tp * spec.cp != world) {
    throw Error("reference transformer: tp=" + std::to_string(spec.tp) + " x cp=" +
                std::to_string(spec.cp) + " = " + std::to_string(spec.tp * spec.cp) +
                " ranks, but the run has " + std::to_string(world));
  }
  const tp::ParallelState ps = tp::initialize_model_parallel(spec.tp, 1, spec.cp);
  TransformerGroups groups;
  groups.tp = ps.tp().group;
  groups.cp = cp_groups(ps.cp().group, spec.attention);
  Transformer model(spec.config, spec.weights, groups, spec.attention);
  const LocalBatch local = shard_batch(spec.batch, spec.cp, ps.cp().rank);
  const StepResult step = model.forward_backward(local);
  model.reduce_gradients(groups.cp.cp);
  TransformerDump dump;
  dump.loss = step.loss;
  dump.tokens = step.tokens;
  dump.logits = gather_logits(step.logits, local, groups.cp.cp);
  for (auto& [name, p] : model.named_parameters()) {
    dump.grads.emplace_back(name, p->full_grad(groups.tp).to(DType::f32));
  }
  return dump;
}

TransformerDump run_transformer(const TransformerRunSpec& spec, const runtime::SpawnOptions& options,
                                runtime::RunReport* report) {
  check_batch(spec.batch, spec.config, spec.cp, "batch");
  TransformerDump result;
  runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        TransformerDump d = transformer_step(spec);
        if (rank == 0) result = std::move(d);
      },
      spec.tp * spec.cp, options);
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

#include "models/multimodal.h"

#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "cp/partition.h"
#include "models/bridge.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/layers.h"
#include "tp/rank_grid.h"

namespace ranksim::models {
namespace {

using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;

std::string str(i64 v) { return std::to_string(v); }

// The encoder: fc1 column-parallel, tanh GELU, fc2 row-parallel, over the encoder's TP group.
class Encoder {
 public:
  // Parameters and activations in dtype (the language model's).
  Encoder(const Weights& w, const runtime::ProcessGroup& tp, DType dtype)
      : fc1_(w.at("encoder.fc1.weight"), tp, column_options(dtype), w.at("encoder.fc1.bias")),
        fc2_(w.at("encoder.fc2.weight"), tp, row_options(dtype), w.at("encoder.fc2.bias")) {}

  struct Context {
    tp::LinearContext fc1, fc2;
    Tensor pre;  // fc1's output
  };

  // x [rows, seq, features] -> [rows, seq, hidden], identical on every TP rank.
  Tensor forward(const Tensor& x, Context& ctx) const {
    ctx.pre = fc1_.forward(x, ctx.fc1).output;
    return fc2_.forward(runtime::gelu(ctx.pre), ctx.fc2).output;
  }
  void backward(const Tensor& dy, const Context& ctx) {
    const Tensor da = fc2_.backward(dy, ctx.fc2);
    fc1_.backward(runtime::gelu_backward(da, ctx.pre), ctx.fc1);
  }
  std::vector<std::pair<std::string, tp::Parameter*>> named_parameters() {
    return {{"encoder.fc1.weight", &fc1_.weight()},
            {"encoder.fc1.bias", &fc1_.bias()},
            {"encoder.fc2.weight", &fc2_.weight()},
            {"encoder.fc2.bias", &fc2_.bias()}};
  }

 private:
  static tp::ColumnParallelLinearOptions column_options(DType dtype) {
    tp::ColumnParallelLinearOptions o;
    o.dtype = dtype;
    return o;
  }
  static tp::RowParallelLinearOptions row_options(DType dtype) {
    tp::RowParallelLinearOptions o;
    o.input_is_parallel = true;
    o.dtype = dtype;
    return o;
  }
  tp::ColumnParallelLinear fc1_;
  tp::RowParallelLinear fc2_;
};

std::vector<std::pair<std::string, runtime::Shape>> encoder_shapes(const TransformerConfig& c, const EncoderConfig& e) {
  return {{"encoder.fc1.weight", {e.ffn, e.features}},
          {"encoder.fc1.bias", {e.ffn}},
          {"encoder.fc2.weight", {c.hidden, e.ffn}},
          {"encoder.fc2.bias", {c.hidden}}};
}

// Rows [index * n / parts, (index + 1) * n / parts) of dim 0.
Tensor rows_slice(const Tensor& x, i64 parts, i64 index) {
  const i64 n = x.size(0) / parts;
  return x.narrow(0, index * n, n).contiguous();
}

// The runs of consecutive values in rows: (first row, first position, length).
struct Run {
  i64 row, pos, len;
};
std::vector<Run> runs_of(const std::vector<i64>& rows) {
  std::vector<Run> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!out.empty() && rows[i] == out.back().row + out.back().len) {
      ++out.back().len;
    } else {
      out.push_back({rows[i], static_cast<i64>(i), 1});
    }
  }
  return out;
}

// The local rows' gradient put back at their global rows of a zero [total, hidden] tensor.
Tensor scatter_rows(const Tensor& local, const std::vector<i64>& rows, i64 total) {
  const runtime::Shape shape{total, local.size(1)};
  if (!local.has_data()) {
    runtime::charge({"copy", 0.0, 2.0 * static_cast<double>(local.nbytes()), local.dtype()});
    return Tensor::shape_only(shape, local.dtype());
  }
  Tensor out = Tensor::zeros(shape, local.dtype());
  for (const Run& r : runs_of(rows)) out.narrow(0, r.row, r.len).copy_(local.narrow(0, r.pos, r.len));
  return out;
}

std::string order_str(const std::vector<std::string>& order) {
  std::string s;
  for (const auto& d : order) s += (s.empty() ? "" : "-") + d;
  return s;
}

tp::RankGrid lm_grid(const MultimodalSpec& spec, int world) {
  std::set<std::string> names(spec.order.begin(), spec.order.end());
  if (spec.order.size() != 3 || names != std::set<std::string>{"tp", "cp", "dp"}) {
    throw Error("multimodal: the language model's dimension order '" + order_str(spec.order) +
                "' must be a permutation of tp, cp and dp");
  }
  std::vector<tp::GridDim> dims;
  for (const auto& d : spec.order) dims.push_back({d, d == "tp" ? spec.tp : d == "cp" ? spec.cp : spec.dp});
  return tp::RankGrid(dims, world);
}

}  // namespace

std::vector<std::pair<std::string, runtime::Shape>> multimodal_parameter_shapes(const TransformerConfig& config,
                                                                                const EncoderConfig& encoder) {
  auto out = encoder_shapes(config, encoder);
  for (auto& [name, shape] : parameter_shapes(config)) {
    if (name != "embedding.weight") out.emplace_back(name, shape);
  }
  return out;
}

Weights seeded_multimodal_weights(const TransformerConfig& config, const EncoderConfig& encoder, std::uint64_t seed) {
  if (encoder.features < 1 || encoder.ffn < 1) {
    throw Error("multimodal: encoder features " + str(encoder.features) + " and ffn " + str(encoder.ffn) +
                " must be >= 1");
  }
  Weights w = seeded_weights(config, seed);
  w.erase("embedding.weight");
  std::uint64_t index = 1000;  // streams after the transformer's
  for (const auto& [name, shape] : encoder_shapes(config, encoder)) {
    const double bound =
        1.0 / std::sqrt(static_cast<double>(name.rfind("encoder.fc1", 0) == 0 ? encoder.features : encoder.ffn));
    w[name] = Tensor::uniform(shape, runtime::random_bits(seed, ++index), -bound, bound);
  }
  return w;
}

MultimodalBatch synthetic_multimodal_batch(const TransformerConfig& config, const EncoderConfig& encoder, i64 rows,
                                           i64 seq_len, std::uint64_t seed) {
  if (rows < 1 || seq_len < 1) {
    throw Error("multimodal batch: rows " + str(rows) + " and seq_len " + str(seq_len) + " must be >= 1");
  }
  MultimodalBatch b;
  b.tokens =
      synthetic_batch(cp::Format::bshd, config.vocab, std::vector<i64>(static_cast<std::size_t>(rows), seq_len), seed);
  const Tensor codebook = Tensor::randn({config.vocab, encoder.features}, runtime::random_bits(seed, 1));
  const Tensor noise = Tensor::randn({rows, seq_len, encoder.features}, runtime::random_bits(seed, 2), 0.0, 0.1);
  const std::vector<i64> ids = b.tokens.input_ids.to_vector<i64>();
  std::vector<float> f = noise.to_vector<float>();
  const std::vector<float> code = codebook.to_vector<float>();
  const auto nf = static_cast<std::size_t>(encoder.features);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    for (std::size_t k = 0; k < nf; ++k) f[t * nf + k] += code[static_cast<std::size_t>(ids[t]) * nf + k];
  }
  b.features = Tensor::from_vector(f, {rows, seq_len, encoder.features}, DType::f32);
  return b;
}

void check_multimodal(const MultimodalSpec& spec, int world) {
  const int src_world = spec.src_tp * spec.src_dp, dst_world = spec.tp * spec.cp * spec.dp;
  if (spec.src_tp < 1 || spec.src_dp < 1 || spec.tp < 1 || spec.cp < 1 || spec.dp < 1) {
    throw Error("multimodal: every parallel size must be >= 1 (encoder tp=" + str(spec.src_tp) +
                " dp=" + str(spec.src_dp) + ", language model tp=" + str(spec.tp) + " cp=" + str(spec.cp) +
                " dp=" + str(spec.dp) + ")");
  }
  if (src_world != dst_world || src_world != world) {
    throw Error("multimodal: the encoder's grid tp=" + str(spec.src_tp) + " x dp=" + str(spec.src_dp) + " = " +
                str(src_world) + " ranks and the language model's tp=" + str(spec.tp) + " x cp=" + str(spec.cp) +
                " x dp=" + str(spec.dp) + " = " + str(dst_world) + " ranks must both cover the run's " + str(world) +
                " ranks");
  }
  if (spec.attention.format != cp::Format::bshd) {
    throw Error("multimodal: the bridge is batch-major ([batch, seq, hidden]); use format bshd");
  }
  check_config(spec.config);
  check_attention(spec.attention);
  check_adamw(spec.optimizer);
  if (spec.steps < 1) throw Error("multimodal: steps " + str(spec.steps) + " must be >= 1");
  if (spec.encoder.ffn % spec.src_tp != 0) {
    throw Error("multimodal: encoder ffn " + str(spec.encoder.ffn) +
                " is not divisible by the encoder's tp=" + str(spec.src_tp));
  }
  const Batch& t = spec.batch.tokens;
  if (t.format != cp::Format::bshd || t.input_ids.dim() != 2) {
    throw Error("multimodal: the batch must be BSHD, input_ids [rows, seq_len]");
  }
  check_batch(t, spec.config, spec.cp, "the multimodal batch");
  const i64 rows = t.input_ids.size(0), seq = t.input_ids.size(1);
  const runtime::Shape want{rows, seq, spec.encoder.features};
  if (!spec.batch.features.defined() || spec.batch.features.shape() != want) {
    throw Error("multimodal: features are " + (spec.batch.features.defined() ? spec.batch.features.str() : "missing") +
                ", expected f32 " + runtime::shape_str(want));
  }
  for (int parts : {spec.src_dp, spec.dp}) {
    if (rows % parts != 0) {
      throw Error("multimodal: the batch's " + str(rows) + " rows do not split over dp=" + str(parts) +
                  (parts == spec.src_dp ? " (the encoder's)" : " (the language model's)") +
                  "; use a row count divisible by both DP sizes");
    }
  }
  for (const auto& [name, shape] : multimodal_parameter_shapes(spec.config, spec.encoder)) {
    const auto it = spec.weights.find(name);
    if (it == spec.weights.end()) throw Error("multimodal: weight '" + name + "' is missing");
    if (it->second.shape() != shape) {
      throw Error("multimodal: weight '" + name + "' is " + it->second.str() + ", expected shape " +
                  runtime::shape_str(shape));
    }
  }
  // the bridge's own rules (source cp, dp before cp, dp multiples), checked without a run
  tp::RankGrid src({{"tp", spec.src_tp}, {"dp", spec.src_dp}}, world);
  tp::RankGrid dst = lm_grid(spec, world);
  ColocatedBridge check(src, dst);
}

TrainResult train_multimodal(const MultimodalSpec& spec) {
  const int world = runtime::get_world_size();
  check_multimodal(spec, world);
  const int rank = runtime::get_rank();
  GridSet grids(world);
  tp::RankGrid& src = grids.add("encoder", tp::RankGrid({{"tp", spec.src_tp}, {"dp", spec.src_dp}}, world));
  tp::RankGrid& dst = grids.add("language_model", lm_grid(spec, world));
  const runtime::ProcessGroup enc_tp = src.create_group({"tp"});
  const runtime::ProcessGroup enc_dp = src.create_group({"dp"});
  TransformerGroups groups;
  groups.tp = dst.create_group({"tp"});
  const runtime::ProcessGroup cp = dst.create_group({"cp"});
  const runtime::ProcessGroup dp_cp = dst.create_group({"cp", "dp"});
  groups.loss = dp_cp;
  ColocatedBridge bridge(src, dst);
  bridge.create_groups();
  groups.cp = transformer_cp_groups(cp, spec.attention);

  const int s = src.coord(rank, "dp"), d = dst.coord(rank, "dp"), c = dst.coord(rank, "cp");
  Encoder encoder(spec.weights, enc_tp, spec.config.dtype);
  Stage stage;
  stage.external_embeddings = true;
  Transformer model(spec.config, spec.weights, groups, spec.attention, stage);
  const Tensor features = rows_slice(spec.batch.features, spec.src_dp, s).to(spec.config.dtype);
  const Batch mine = dp_slice(spec.batch.tokens, spec.dp, d);
  const LocalBatch local = shard_batch(mine, spec.cp, c);
  const i64 rows = mine.input_ids.size(0), seq = mine.input_ids.size(1), hidden = spec.config.hidden;

  auto enc_params = encoder.named_parameters();
  auto lm_params = model.named_parameters();
  AdamW enc_opt(enc_params, AdamW::Groups{enc_tp, runtime::new_group({rank}), enc_dp}, spec.optimizer, false);
  AdamW lm_opt(lm_params, AdamW::Groups{groups.tp, runtime::new_group({rank}), dp_cp}, spec.optimizer, false);

  TrainResult result;
  for (int step = 0; step < spec.steps; ++step) {
    for (auto& [name, p] : enc_params) p->zero_grad();
    model.zero_grad();
    // forward: encoder, bridge, this CP rank's rows, the language model
    Encoder::Context ectx;
    const Tensor h = encoder.forward(features, ectx);
    const Tensor full = bridge.forward(h).reshape({rows * seq, hidden});
    const Tensor x = cp::index_select(full, 0, local.global_rows);
    TransformerContext ctx;
    const Tensor logits = model.stage_forward(local, x, ctx);
    // the loss over every labelled token of the global batch (DP x CP)
    GroupLoss loss = group_cross_entropy(logits, local.labels, dp_cp, model.vocab_group());
    result.losses.push_back(loss.loss);
    // backward: the language model, its input gradient back to full rows, the bridge, the encoder
    const Tensor dx = model.stage_backward(std::move(loss.dlogits), local, ctx);
    const Tensor dfull = scatter_rows(dx, local.global_rows, rows * seq).reshape({rows, seq, hidden});
    encoder.backward(bridge.backward(dfull), ectx);
    // gradients summed over the replicas of each model, then one update each
    for (auto& [name, p] : enc_params) {
      if (enc_dp.size() > 1 && p->grad.defined()) {
        runtime::AllreduceOptions g;
        g.group = enc_dp;
        runtime::all_reduce(p->grad, g).wait();
      }
    }
    model.reduce_gradients(dp_cp);
    enc_opt.step(std::nullopt);
    lm_opt.step(std::nullopt);
  }
  if (!spec.batch.features.has_data()) return result;
  std::map<std::string, Tensor> full, grads;
  for (const auto& [name, p] : enc_params) {
    full[name] = p->full_value(enc_tp).to(DType::f32);
    grads[name] = p->full_grad(enc_tp).to(DType::f32);
  }
  for (const auto& [name, p] : lm_params) {
    full[name] = p->full_value(groups.tp).to(DType::f32);
    grads[name] = p->full_grad(groups.tp).to(DType::f32);
  }
  for (const auto& [name, shape] : multimodal_parameter_shapes(spec.config, spec.encoder)) {
    result.params.emplace_back(name, full.at(name));
    result.grads.emplace_back(name, grads.at(name));
  }
  return result;
}

TrainResult run_multimodal(const MultimodalSpec& spec, const runtime::SpawnOptions& options,
                           runtime::RunReport* report) {
  const int world = spec.src_tp * spec.src_dp;
  check_multimodal(spec, world);
  std::vector<TrainResult> results(static_cast<std::size_t>(world));
  runtime::RunReport r = runtime::spawn(
      [&](int rank) { results[static_cast<std::size_t>(rank)] = train_multimodal(spec); }, world, options);
  if (report != nullptr) *report = std::move(r);
  return results[0];
}

}  // namespace ranksim::models

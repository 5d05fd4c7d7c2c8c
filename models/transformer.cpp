#include "models/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "cp/attention.h"
#include "cp/partition.h"
#include "models/rope.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "sim/suggest.h"
#include "tp/comm_overlap.h"
#include "tp/mappings.h"
#include "tp/sharding.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;
using i64 = std::int64_t;

namespace {

std::string str(i64 v) { return std::to_string(v); }

// The contract order: (name, shape, fan_in for the uniform init; 0 = LayerNorm, -1 = embedding).
struct ParamSpec {
  std::string name;
  Shape shape;
  i64 fan_in;
};

// The block parameters' short names, shapes and fan-ins, in the contract's order.
std::vector<ParamSpec> block_specs(const TransformerConfig& c) {
  const i64 h = c.hidden, f = c.ffn, q = c.heads * c.head_dim, kv = c.query_groups() * c.head_dim;
  const bool ln = c.norm == Norm::layernorm;
  std::vector<ParamSpec> out;
  auto linear = [&](const char* name, i64 rows, i64 in) {
    out.push_back({std::string(name) + ".weight", {rows, in}, in});
    if (c.bias) out.push_back({std::string(name) + ".bias", {rows}, in});
  };
  auto norm = [&](const char* name) {
    out.push_back({std::string(name) + ".weight", {h}, 0});
    if (ln) out.push_back({std::string(name) + ".bias", {h}, 0});
  };
  norm("ln1");
  if (c.fused_qkv()) {
    linear("qkv", 3 * q, h);
  } else {
    linear("q", q, h);
    linear("k", kv, h);
    linear("v", kv, h);
  }
  linear("proj", h, q);
  norm("ln2");
  linear("fc1", c.activation == Activation::swiglu ? 2 * f : f, h);
  linear("fc2", h, f);
  return out;
}

std::vector<ParamSpec> param_specs(const TransformerConfig& c) {
  const i64 h = c.hidden, v = c.vocab;
  std::vector<ParamSpec> out = {{"embedding.weight", {v, h}, -1}};
  if (c.positions == Positions::learned) out.push_back({"position_embedding.weight", {c.max_positions, h}, -1});
  for (i64 l = 0; l < c.layers; ++l) {
    for (ParamSpec s : block_specs(c)) {
      s.name = block_parameter_name(c, l, s.name);
      out.push_back(std::move(s));
    }
  }
  out.push_back({"final_ln.weight", {h}, 0});
  if (c.norm == Norm::layernorm) out.push_back({"final_ln.bias", {h}, 0});
  out.push_back({"output.weight", {v, h}, h});
  if (c.bias) out.push_back({"output.bias", {v}, h});
  return out;
}

// FSDP: the released values of a unit's parameters, all-gathered from their slices. The gathers
// are started together; finish() waits for them and installs the values. A unit whose
// parameters are not released (or without an FSDP group) gathers nothing.
class UnitGather {
 public:
  UnitGather() = default;
  UnitGather(const std::vector<tp::Parameter*>& params, const std::optional<runtime::ProcessGroup>& g) {
    if (!g) return;
    const runtime::MemoryScope parameters(runtime::MemoryKind::parameters);
    runtime::AllgatherOptions o;
    o.group = *g;
    o.async_op = true;
    for (tp::Parameter* p : params) {
      if (p->value.defined() || !p->dp_slice.defined()) continue;
      const i64 per = p->dp_slice.numel();
      Tensor all = p->dp_slice.has_data() ? Tensor::zeros({per * g->size()}, p->dp_slice.dtype())
                                          : Tensor::shape_only({per * g->size()}, p->dp_slice.dtype());
      works_.push_back(runtime::all_gather_into_tensor(all, p->dp_slice, o));
      pending_.emplace_back(p, std::move(all));
    }
  }
  void finish() {
    for (runtime::Work& w : works_) w.wait();
    for (auto& [p, all] : pending_) {
      i64 numel = 1;
      for (i64 d : p->value_shape) numel *= d;
      p->value = all.narrow(0, 0, numel).reshape(p->value_shape);
      runtime::retag_memory(p->value, runtime::MemoryKind::parameters);
    }
    works_.clear();
    pending_.clear();
  }

 private:
  std::vector<runtime::Work> works_;
  std::vector<std::pair<tp::Parameter*, Tensor>> pending_;
};

// FSDP: the unit's gathered values released again (their slices stay).
void release_unit(const std::vector<tp::Parameter*>& params) {
  for (tp::Parameter* p : params) {
    if (p->dp_slice.defined()) p->value = Tensor();
  }
}

// Sequence parallelism: the local token rows padded with zero rows to a multiple of tp, and
// those rows dropped again.
i64 sp_rows(i64 n, i64 tp) { return (n + tp - 1) / tp * tp; }

Tensor pad_rows(const Tensor& x, i64 rows) {
  if (x.size(0) == rows) return x;
  Shape extra = x.shape();
  extra[0] = rows - x.size(0);
  const Tensor zeros = x.has_data() ? Tensor::zeros(extra, x.dtype()) : Tensor::shape_only(extra, x.dtype());
  return runtime::cat({x, zeros}, 0);
}

Tensor first_rows(const Tensor& x, i64 rows) { return x.size(0) == rows ? x : x.narrow(0, 0, rows).contiguous(); }

// The learned table's row of each local token: its position in its sequence. Padding tokens
// (negative segment) read row 0; their rows get no gradient. Error for a real token at or beyond
// max_positions.
Tensor position_ids(const LocalBatch& b, i64 max_positions) {
  std::vector<i64> ids(b.tokens().position.size(), 0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (b.tokens().segment[i] < 0) continue;
    const i64 pos = b.tokens().position[i];
    if (pos >= max_positions) {
      throw Error("Transformer: a token at position " + str(pos) + " needs a learned position table of more than " +
                  str(max_positions) + " rows; raise max_positions to the longest sequence or shorten the batch");
    }
    ids[i] = pos;
  }
  return Tensor::from_vector(ids, {static_cast<i64>(ids.size())}, DType::i64);
}

bool is_embedding(const std::string& name) { return name == "embedding.weight" || name == "position_embedding.weight"; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const Tensor& weight(const Weights& w, const std::string& name) {
  const auto it = w.find(name);
  if (it == w.end() || !it->second.defined()) {
    throw Error("Transformer: the weights have no '" + name + "'");
  }
  return it->second;
}

tp::Parameter replicated(const Weights& w, const std::string& name, DType dtype) {
  tp::Parameter p;
  const Tensor& master = weight(w, name);
  p.value = master.to(dtype);
  // Every rank's device holds its own copy: to() of the same dtype shares the master's storage,
  // which (made outside the run) no rank would count.
  if (p.value.shares_storage(master)) p.value = master.clone();
  runtime::retag_memory(p.value, runtime::MemoryKind::parameters);
  return p;
}

// Rank g.rank()'s block of rows of a master ([out, ...] split along dim 0 over g), or all of them
// with split false (partition_dim -1).
tp::Parameter row_shard(const Weights& w, const std::string& name, DType dtype, const runtime::ProcessGroup& g,
                        bool split) {
  tp::Parameter p;
  p.value = tp::shard_of(weight(w, name), 0, split ? g.size() : 1, split ? g.rank() : 0, 1, dtype);
  runtime::retag_memory(p.value, runtime::MemoryKind::parameters);
  p.partition_dim = split ? 0 : -1;
  return p;
}

// Validated before any member is built, so errors name the model's own sizes.
const TransformerConfig& checked(const TransformerConfig& c, const Weights& w, const TransformerGroups& g,
                                 const AttentionSetup& a, const Stage& st) {
  check_config(c);
  check_attention(a);
  const int tp = g.tp.size();
  if (c.heads % tp != 0) {
    throw Error("Transformer: " + str(c.heads) + " attention heads are not divisible by tp=" + str(tp) +
                " (each TP rank holds whole heads)");
  }
  const i64 kv = c.query_groups();
  if (kv % tp != 0 && tp % kv != 0) {
    throw Error("Transformer: " + str(kv) + " key/value heads and tp=" + str(tp) +
                " do not divide one another (each TP rank holds whole query groups, or tp/kv_heads ranks share one)");
  }
  if (c.ffn % tp != 0) {
    throw Error("Transformer: ffn " + str(c.ffn) + " is not divisible by tp=" + str(tp));
  }
  if (st.size < 1 || st.rank < 0 || st.rank >= st.size) {
    throw Error("Transformer: stage " + str(st.rank) + " of " + str(st.size));
  }
  const StageLayers split = stage_layers(c.layers, st, "Transformer");
  // Ulysses (a2a, and the a2a level of a2a+p2p) splits the local query and key/value heads
  const i64 cp = g.cp.cp.size();
  const i64 a2a = a.comm == cp::CommType::a2a ? cp : a.comm == cp::CommType::a2a_p2p && cp > 1 ? g.cp.a2a.size() : 1;
  const i64 local_q = c.heads / tp, local_kv = kv >= tp ? kv / tp : 1;
  if (a2a > 1 && (local_q % a2a != 0 || local_kv % a2a != 0)) {
    throw Error("Transformer: a2a splits the heads over " + str(a2a) + " CP ranks, but each TP rank has " +
                str(local_q) + " query and " + str(local_kv) +
                " key/value heads; use a CP comm type without a2a (p2p, all_gather), or more heads");
  }
  const i64 per = split.count, first = split.first;
  for (const ParamSpec& s : param_specs(c)) {
    // only this stage's parameters are read (a stage loads nothing else)
    const bool embedding = is_embedding(s.name);
    const bool head = s.name.rfind("final_ln.", 0) == 0 || s.name.rfind("output.", 0) == 0;
    if (embedding && (!st.first() || st.external_embeddings)) continue;
    if (head && !st.last()) continue;
    if (!embedding && !head) {
      bool mine = false;
      for (i64 l = first; l < first + per; ++l) mine = mine || s.name.rfind(block_parameter_name(c, l, ""), 0) == 0;
      if (!mine) continue;
    }
    const Tensor& t = weight(w, s.name);
    if (t.shape() != s.shape) {
      throw Error("Transformer: weight '" + s.name + "' is " + t.str() + ", expected shape " +
                  runtime::shape_str(s.shape));
    }
  }
  return c;
}

tp::ColumnParallelLinearOptions qkv_options(const TransformerConfig& c) {
  tp::ColumnParallelLinearOptions o;
  o.bias = c.bias;
  o.stride = 3;  // q, k and v blocks: rank r takes the same heads of each
  o.sequence_parallel = c.sequence_parallel;
  o.comm_overlap = c.tp_comm_overlap;
  o.dtype = c.dtype;
  return o;
}

tp::RowParallelLinearOptions proj_options(const TransformerConfig& c) {
  tp::RowParallelLinearOptions o;
  o.bias = c.bias;
  o.input_is_parallel = true;
  o.sequence_parallel = c.sequence_parallel;
  o.comm_overlap = c.tp_comm_overlap;
  o.dtype = c.dtype;
  return o;
}

tp::ParallelMLPOptions mlp_options(const TransformerConfig& c) {
  tp::ParallelMLPOptions o;
  o.bias = c.bias;
  o.swiglu = c.activation == Activation::swiglu;
  o.sequence_parallel = c.sequence_parallel;
  o.comm_overlap = c.tp_comm_overlap;
  o.dtype = c.dtype;
  return o;
}

NormResult norm_forward(Norm kind, const Tensor& x, const tp::Parameter& w, const tp::Parameter& b, double eps) {
  if (kind == Norm::rmsnorm) {
    runtime::RmsNormResult r = runtime::rms_norm(x, w.value, eps);
    return {std::move(r.y), Tensor(), std::move(r.rstd)};
  }
  runtime::LayerNormResult r = runtime::layer_norm(x, w.value, b.value, eps);
  return {std::move(r.y), std::move(r.mean), std::move(r.rstd)};
}

// Accumulates the norm's parameter gradients and returns dx.
Tensor norm_backward(Norm kind, const Tensor& dy, const Tensor& x, tp::Parameter& w, tp::Parameter& b,
                     const NormResult& r) {
  if (kind == Norm::rmsnorm) {
    runtime::RmsNormGrads g = runtime::rms_norm_backward(dy, x, w.value, r.rstd);
    w.accumulate(g.dweight);
    return std::move(g.dx);
  }
  runtime::LayerNormGrads g = runtime::layer_norm_backward(dy, x, w.value, r.mean, r.rstd);
  w.accumulate(g.dweight);
  b.accumulate(g.dbias);
  return std::move(g.dx);
}

// The gradient of a bias added over dy's rows, as a tensor of its own.
Tensor bias_grad(const Tensor& dy, i64 n) {
  Tensor db = runtime::add_backward(dy, {n}).db;
  return db.shares_storage(dy) ? db.clone() : db;
}

cp::AttentionOptions attention_options(const AttentionSetup& a) {
  cp::AttentionOptions o;
  o.causal = a.mask == Mask::causal;
  o.window_left = a.window_left;
  o.window_right = a.window_right;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string block_parameter_name(const TransformerConfig& c, i64 layer, const std::string& name) {
  return c.layers == 1 ? "layer." + name : "layers." + str(layer) + "." + name;
}

void check_config(const TransformerConfig& c) {
  auto positive = [](const char* what, i64 v) {
    if (v < 1) throw Error(std::string("Transformer: ") + what + " must be >= 1, got " + str(v));
  };
  positive("vocab", c.vocab);
  positive("hidden", c.hidden);
  positive("heads", c.heads);
  positive("head_dim", c.head_dim);
  positive("ffn", c.ffn);
  positive("layers", c.layers);
  if (c.kv_heads < 0 || (c.kv_heads > 0 && c.heads % c.kv_heads != 0)) {
    throw Error("Transformer: kv_heads " + str(c.kv_heads) + " must divide heads " + str(c.heads) +
                " (grouped-query attention shares each key/value head among heads/kv_heads query heads)");
  }
  if (c.positions == Positions::rope && c.head_dim % 2 != 0) {
    throw Error("Transformer: head_dim " + str(c.head_dim) + " must be even (rotate-half RoPE)");
  }
  if (c.positions == Positions::learned && c.max_positions < 1) {
    throw Error("Transformer: learned positions need max_positions >= 1 (the rows of the position table), got " +
                str(c.max_positions));
  }
  if (c.positions == Positions::rope && c.max_positions != 0) {
    throw Error("Transformer: max_positions " + str(c.max_positions) +
                " is for learned positions; RoPE has no position table (leave it 0)");
  }
  if (!runtime::is_floating(c.dtype) || c.dtype == DType::f64) {
    throw Error(std::string("Transformer: dtype must be f32, bf16 or f16, got ") + runtime::dtype_name(c.dtype));
  }
  if (c.fp8 && c.dtype == DType::f32) {
    throw Error("Transformer: fp8 GEMMs need a 16-bit dtype (bf16 or f16) for the activations around them");
  }
  if (c.recompute_num_layers < 1) {
    throw Error("Transformer: recompute_num_layers must be >= 1, got " + str(c.recompute_num_layers));
  }
  if (c.tp_comm_overlap && !c.sequence_parallel) {
    throw Error(
        "Transformer: tp_comm_overlap pipelines sequence parallelism's all-gathers and reduce-scatters with "
        "the GEMMs: it needs sequence_parallel");
  }
  if (!(c.layer_norm_eps > 0)) throw Error("Transformer: layer_norm_eps must be > 0");
  if (!(c.rope_base > 1)) throw Error("Transformer: rope_base must be > 1");
}

TransformerConfig gpt_config(i64 vocab, i64 hidden, i64 heads, i64 ffn, i64 layers, i64 max_positions) {
  TransformerConfig c;
  c.vocab = vocab;
  c.hidden = hidden;
  c.heads = heads;
  c.head_dim = heads > 0 ? hidden / heads : 0;
  c.ffn = ffn;
  c.layers = layers;
  c.norm = Norm::layernorm;
  c.activation = Activation::gelu;
  c.bias = true;
  c.positions = Positions::learned;
  c.max_positions = max_positions;
  return c;
}

TransformerConfig llama_config(i64 vocab, i64 hidden, i64 heads, i64 kv_heads, i64 ffn, i64 layers) {
  TransformerConfig c;
  c.vocab = vocab;
  c.hidden = hidden;
  c.heads = heads;
  c.head_dim = heads > 0 ? hidden / heads : 0;
  c.kv_heads = kv_heads;
  c.ffn = ffn;
  c.layers = layers;
  c.norm = Norm::rmsnorm;
  c.activation = Activation::swiglu;
  c.bias = false;
  c.positions = Positions::rope;
  return c;
}

std::vector<std::pair<std::string, Shape>> parameter_shapes(const TransformerConfig& c) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const ParamSpec& s : param_specs(c)) out.emplace_back(s.name, s.shape);
  return out;
}

Weights seeded_weights(const TransformerConfig& c, std::uint64_t seed) {
  check_config(c);
  Weights w;
  std::uint64_t index = 0;
  for (const ParamSpec& s : param_specs(c)) {
    // One stream per parameter, from its place in the contract order.
    const std::uint64_t pseed = runtime::random_bits(seed, ++index);
    if (s.fan_in < 0) {
      w[s.name] = Tensor::randn(s.shape, pseed, 0.0, 1.0);
    } else if (s.fan_in == 0) {
      const bool is_weight = ends_with(s.name, ".weight");
      w[s.name] = Tensor::uniform(s.shape, pseed, is_weight ? 0.9 : -0.1, is_weight ? 1.1 : 0.1);
    } else {
      const double bound = 1.0 / std::sqrt(static_cast<double>(s.fan_in));
      w[s.name] = Tensor::uniform(s.shape, pseed, -bound, bound);
    }
  }
  return w;
}

Weights shape_only_weights(const TransformerConfig& c) {
  check_config(c);
  Weights w;
  for (const ParamSpec& s : param_specs(c)) w[s.name] = Tensor::shape_only(s.shape, DType::f32);
  return w;
}

Weights checked_weights(const runtime::SafetensorsFile& file, const TransformerConfig& c) {
  check_config(c);
  const std::vector<ParamSpec> specs = param_specs(c);
  std::vector<std::string> names;
  for (const ParamSpec& s : specs) names.push_back(s.name);
  for (const auto& [name, t] : file.tensors) {
    if (name.rfind("optimizer.", 0) == 0) continue;  // a training checkpoint's optimizer state
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw Error(file.path + ": tensor '" + name + "' is not a parameter of the reference transformer" +
                  sim::did_you_mean(name, names) + " (docs/models.md lists the names)");
    }
  }
  Weights w;
  for (const ParamSpec& s : specs) {
    if (!file.contains(s.name)) {
      throw Error(file.path + ": missing tensor '" + s.name + "' (expected shape " + runtime::shape_str(s.shape) + ")");
    }
    const Tensor& t = file.at(s.name);
    if (!runtime::is_floating(t.dtype())) {
      throw Error(file.path + ": tensor '" + s.name + "' is " + t.str() + "; weights must be floating");
    }
    if (t.shape() != s.shape) {
      throw Error(file.path + ": tensor '" + s.name + "' is " + t.str() + ", expected shape " +
                  runtime::shape_str(s.shape) + " for vocab " + str(c.vocab) + ", hidden " + str(c.hidden) + ", ffn " +
                  str(c.ffn));
    }
    w[s.name] = t.to(DType::f32);
    // A NaN or infinite weight makes every loss NaN (null in the summary): refused by name.
    const std::vector<float> v = w[s.name].to_vector<float>();
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        throw Error(file.path + ": tensor '" + s.name + "' holds " + (std::isnan(v[i]) ? "NaN" : "an infinity") +
                    " at element " + std::to_string(i) + "; weights must be finite");
      }
    }
  }
  return w;
}

const char* mask_name(Mask m) {
  switch (m) {
    case Mask::causal:
      return "causal";
    case Mask::padding:
      return "padding";
    case Mask::no_mask:
      return "no_mask";
  }
  return "?";
}

Mask parse_mask(const std::string& name) {
  if (name == "causal") return Mask::causal;
  if (name == "padding") return Mask::padding;
  if (name == "no_mask") return Mask::no_mask;
  throw Error("unknown mask '" + name + "' (masks: causal, padding, no_mask)");
}

void check_attention(const AttentionSetup& a) {
  if (a.format == cp::Format::bshd && a.mask == Mask::padding) {
    throw Error(
        "mask 'padding' needs format thd: BSHD rows carry no padding here (use causal or "
        "no_mask; TransformerEngine does not support BSHD + padding with CP either)");
  }
  if (a.format == cp::Format::thd && a.mask == Mask::no_mask) {
    throw Error(
        "format thd takes mask 'padding' (attention inside each sequence) or 'causal', "
        "not 'no_mask', which would let packed sequences see each other");
  }
  if (a.window_left < -1 || a.window_right < -1) {
    throw Error("window [" + str(a.window_left) + ", " + str(a.window_right) +
                "]: each side must be >= 0, or -1 for unbounded");
  }
  if (a.mask == Mask::causal && a.window_right > 0) {
    throw Error("window [" + str(a.window_left) + ", " + str(a.window_right) +
                "]: a causal mask takes a right window of 0 (or -1)");
  }
  if (a.a2a_size < 0 || a.p2p_size < 0) throw Error("hierarchical CP sizes must be >= 1");
}

// ---------------------------------------------------------------------------------------------

void check_batch(const Batch& b, const TransformerConfig& c, i64 cp, const std::string& source) {
  const std::string who = source + ": ";
  const bool thd = b.format == cp::Format::thd;
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"input_ids", &b.input_ids}, {"labels", &b.labels}}) {
    if (!t->defined()) throw Error(who + "no '" + name + "' tensor");
    if (t->dtype() != DType::i64 && t->dtype() != DType::i32) {
      throw Error(who + "'" + name + "' is " + t->str() + "; it must be int64 (or int32)");
    }
    if (t->dim() != (thd ? 1 : 2)) {
      throw Error(who + "'" + name + "' is " + t->str() + "; format " + (thd ? "thd" : "bshd") + " needs " +
                  (thd ? "[T]" : "[B, S]"));
    }
    if (!t->has_data()) throw Error(who + "'" + name + "' has no data");
  }
  if (b.input_ids.shape() != b.labels.shape()) {
    throw Error(who + "input_ids " + b.input_ids.str() + " and labels " + b.labels.str() + " must have the same shape");
  }
  if (b.input_ids.numel() == 0) throw Error(who + "the batch has no tokens");
  // Read in place when the ids are contiguous int64 (every rank of a run checks the whole global
  // batch: no copies of it); otherwise converted first.
  const auto each = [](const Tensor& t, const auto& check) {
    if (t.dtype() == DType::i64 && t.is_contiguous()) {
      const i64* p = t.read_data<i64>();
      for (i64 i = 0, n = t.numel(); i < n; ++i) check(p[i]);
    } else {
      for (i64 v : t.to(DType::i64).to_vector<i64>()) check(v);
    }
  };
  each(b.input_ids, [&](i64 id) {
    if (id < 0 || id >= c.vocab) {
      throw Error(who + "input id " + str(id) + " is outside the vocabulary [0, " + str(c.vocab) + ")");
    }
  });
  each(b.labels, [&](i64 l) {
    if (l != kIgnoreIndex && (l < 0 || l >= c.vocab)) {
      throw Error(who + "label " + str(l) + " is outside [0, " + str(c.vocab) + ") and is not -100");
    }
  });
  if (thd) {
    const auto& cu = b.cu_seqlens;
    if (cu.size() < 2) throw Error(who + "format thd needs cu_seqlens (at least [0, T])");
    if (cu.front() != 0) throw Error(who + "cu_seqlens " + runtime::shape_str(cu) + " must start at 0");
    for (std::size_t i = 1; i < cu.size(); ++i) {
      if (cu[i] < cu[i - 1]) {
        throw Error(who + "cu_seqlens " + runtime::shape_str(cu) + " decreases at index " + str(static_cast<i64>(i)) +
                    " (cumulative lengths never decrease)");
      }
    }
    if (cu.back() != b.input_ids.size(0)) {
      throw Error(who + "cu_seqlens " + runtime::shape_str(cu) + " ends at " + str(cu.back()) + " but input_ids has " +
                  str(b.input_ids.size(0)) + " tokens");
    }
  } else {
    if (!b.cu_seqlens.empty()) throw Error(who + "cu_seqlens is for format thd; a bshd batch has none");
    if (cp > 1 && b.input_ids.size(1) % (2 * cp) != 0) {
      throw Error(who + "sequence length " + str(b.input_ids.size(1)) + " is not a multiple of 2*cp = " + str(2 * cp) +
                  " (DualChunkSwap splits each row into 2*cp chunks)");
    }
  }
  if (c.positions == Positions::learned) {
    i64 longest = thd ? 0 : b.input_ids.size(1);
    for (std::size_t i = 1; thd && i < b.cu_seqlens.size(); ++i) {
      longest = std::max(longest, b.cu_seqlens[i] - b.cu_seqlens[i - 1]);
    }
    if (longest > c.max_positions) {
      throw Error(who + "a sequence of " + str(longest) + " tokens is longer than the learned position table (" +
                  str(c.max_positions) + " rows); raise max_positions or shorten the sequences");
    }
  }
}

cp::CpGroups transformer_cp_groups(const runtime::ProcessGroup& cp, const AttentionSetup& a) {
  // at cp = 1 attention runs the block kernel on the whole sequence: no subgroups
  if (a.comm != cp::CommType::a2a_p2p || cp.size() == 1) return cp::CpGroups(cp);
  if (a.a2a_size == 0 && a.p2p_size == 0) {
    if (cp.size() % 2 != 0) {
      throw Error("a2a+p2p: the default hierarchical sizes [2, cp/2] need an even cp, got cp=" +
                  std::to_string(cp.size()) + " (set the sizes explicitly)");
    }
    return cp::hierarchical_cp_groups(cp);
  }
  if (a.a2a_size * a.p2p_size != cp.size()) {
    throw Error("a2a+p2p: hierarchical sizes [" + std::to_string(a.a2a_size) + ", " + std::to_string(a.p2p_size) +
                "] multiply to " + std::to_string(a.a2a_size * a.p2p_size) + ", not cp=" + std::to_string(cp.size()));
  }
  return cp::hierarchical_cp_groups(cp, a.a2a_size, a.p2p_size);
}

// ---------------------------------------------------------------------------------------------

// Grouped-query attention's input projection: q, k and v as three column-parallel weights that
// share one input and one reduction of its gradient (Megatron's fused linear_qkv, with the
// groups' rows kept in separate tensors). Rank r holds the q rows of heads [r*heads/tp,
// (r+1)*heads/tp). With kv_heads >= tp it holds kv_heads/tp whole key/value heads; with
// kv_heads < tp every rank keeps k and v whole (kv_heads * head_dim rows) and uses the rows of
// its own group, r * kv_heads / tp, so its gradient covers those rows only (flagged
// sequence_parallel: summed over TP by reduce_tp_partial_gradients).
struct GroupedQKV {
  runtime::ProcessGroup tp;
  tp::Parameter q_w, q_b, k_w, k_b, v_w, v_b;
  bool bias = true;
  bool sp = false;                // sequence parallelism: the input is this rank's share of the rows
  bool overlap = false;           // tp_comm_overlap: the gather pipelined with the three GEMMs
  bool kv_whole = false;          // kv_heads < tp
  i64 kv_first = 0, kv_rows = 0;  // this rank's rows of k and v

  GroupedQKV(const TransformerConfig& c, const Weights& w, const runtime::ProcessGroup& g, i64 i)
      : tp(g), bias(c.bias), sp(c.sequence_parallel), overlap(c.tp_comm_overlap) {
    const int p = g.size(), r = g.rank();
    const i64 kv = c.query_groups();
    kv_whole = kv < p;
    auto column = [&](const char* name, bool split) {
      tp::Parameter out = row_shard(w, block_parameter_name(c, i, name), c.dtype, g, split);
      out.sequence_parallel = !split && p > 1;  // whole k / v under TP: a partial gradient
      return out;
    };
    q_w = column("q.weight", true);
    k_w = column("k.weight", !kv_whole);
    v_w = column("v.weight", !kv_whole);
    if (bias) {
      q_b = column("q.bias", true);
      k_b = column("k.bias", !kv_whole);
      v_b = column("v.bias", !kv_whole);
    }
    kv_rows = kv_whole ? c.head_dim : kv / p * c.head_dim;
    kv_first = kv_whole ? static_cast<i64>(r) * kv / p * c.head_dim : 0;
  }

  // This rank's rows of a k or v parameter (all of them unless kept whole).
  Tensor mine(const tp::Parameter& t) const { return kv_whole ? t.value.narrow(0, kv_first, kv_rows) : t.value; }

  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& b) const {
    const Tensor y = runtime::matmul(x, weight, false, true);
    return bias ? runtime::add(y, b) : y;
  }

  // x [n, hidden] ([n/tp, hidden] with sequence parallelism, all-gathered first) -> q [n, heads/tp
  // * d], k and v [n, kv rows here]
  std::vector<Tensor> forward(const Tensor& x) const {
    auto gemms = [&](const Tensor& total) {
      return std::vector<Tensor>{linear(total, q_w.value, q_b.value),
                                 linear(total, mine(k_w), bias ? mine(k_b) : Tensor()),
                                 linear(total, mine(v_w), bias ? mine(v_b) : Tensor())};
    };
    if (sp && overlap) return tp::all_gather_matmul(x, gemms, tp).outputs;
    return gemms(sp ? tp::all_gather_dim0(x, tp, false).tensor : x);
  }

  // A gradient of this rank's rows, at the parameter's full shape when it is kept whole.
  Tensor full_rows(const Tensor& g, const tp::Parameter& p) const {
    if (!kv_whole) return g;
    if (!g.has_data()) return Tensor::shape_only(p.value.shape(), g.dtype());
    const i64 rows = p.value.size(0);
    Shape before = p.value.shape(), after = p.value.shape();
    before[0] = kv_first;
    after[0] = rows - kv_first - kv_rows;
    return runtime::cat({Tensor::zeros(before, g.dtype()), g, Tensor::zeros(after, g.dtype())}, 0);
  }

  // Megatron's column-parallel order: dX from the three weights, its all-reduce started, the
  // weight gradients computed while it runs.
  // With sequence parallelism the input is all-gathered again (Megatron keeps only the local
  // share) and dX is reduce-scattered.
  Tensor backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& local_x) {
    tp::CommResult total{local_x, runtime::Work()};
    if (sp) total = tp::all_gather_dim0(local_x, tp, true);
    Tensor dx = runtime::matmul(dq, q_w.value);
    dx = runtime::add(dx, runtime::matmul(dk, mine(k_w)));
    dx = runtime::add(dx, runtime::matmul(dv, mine(v_w)));
    tp::CommResult reduced{Tensor(), runtime::Work()};
    if (sp) {
      total.wait();
      reduced = tp::reduce_scatter_dim0(dx, tp, true);
    } else {
      reduced = tp::all_reduce_tp(dx, tp, true);
    }
    dx = Tensor();
    const Tensor& x = total.tensor;
    q_w.accumulate(runtime::matmul(dq, x, true, false));
    k_w.accumulate(full_rows(runtime::matmul(dk, x, true, false), k_w));
    v_w.accumulate(full_rows(runtime::matmul(dv, x, true, false), v_w));
    if (bias) {
      q_b.accumulate(bias_grad(dq, dq.size(-1)));
      k_b.accumulate(full_rows(bias_grad(dk, dk.size(-1)), k_b));
      v_b.accumulate(full_rows(bias_grad(dv, dv.size(-1)), v_b));
    }
    reduced.wait();
    return reduced.tensor;
  }
};

struct Transformer::Block {
  i64 index = 0;
  Norm norm_kind = Norm::layernorm;
  tp::Parameter ln1_w, ln1_b, ln2_w, ln2_b;
  std::optional<tp::ColumnParallelLinear> qkv;  // multi-head attention: fused q|k|v
  std::optional<GroupedQKV> gqa;                // grouped-query attention
  tp::RowParallelLinear proj;
  tp::ParallelMLP mlp;

  static tp::Parameter maybe(const TransformerConfig& c, const Weights& w, i64 i, const char* name, bool present) {
    return present ? replicated(w, block_parameter_name(c, i, name), c.dtype) : tp::Parameter{};
  }
  static Tensor optional_weight(const TransformerConfig& c, const Weights& w, i64 i, const char* name) {
    return c.bias ? weight(w, block_parameter_name(c, i, name)) : Tensor();
  }

  Block(const TransformerConfig& c, const Weights& w, const runtime::ProcessGroup& tp, i64 i)
      : index(i),
        norm_kind(c.norm),
        ln1_w(replicated(w, block_parameter_name(c, i, "ln1.weight"), c.dtype)),
        ln1_b(maybe(c, w, i, "ln1.bias", c.norm == Norm::layernorm)),
        ln2_w(replicated(w, block_parameter_name(c, i, "ln2.weight"), c.dtype)),
        ln2_b(maybe(c, w, i, "ln2.bias", c.norm == Norm::layernorm)),
        proj(weight(w, block_parameter_name(c, i, "proj.weight")), tp, proj_options(c),
             optional_weight(c, w, i, "proj.bias")),
        mlp(weight(w, block_parameter_name(c, i, "fc1.weight")), weight(w, block_parameter_name(c, i, "fc2.weight")),
            tp, mlp_options(c), optional_weight(c, w, i, "fc1.bias"), optional_weight(c, w, i, "fc2.bias")) {
    // Under sequence parallelism each rank's norm gradients cover its share of the tokens only.
    for (tp::Parameter* p : {&ln1_w, &ln1_b, &ln2_w, &ln2_b}) p->sequence_parallel = c.sequence_parallel;
    if (c.fused_qkv()) {
      qkv.emplace(weight(w, block_parameter_name(c, i, "qkv.weight")), tp, qkv_options(c),
                  optional_weight(c, w, i, "qkv.bias"));
    } else {
      gqa.emplace(c, w, tp, i);
    }
  }

  std::vector<std::pair<std::string, tp::Parameter*>> params(const TransformerConfig& c) {
    std::vector<std::pair<std::string, tp::Parameter*>> out;
    auto add = [&](const char* name, tp::Parameter* p) { out.emplace_back(block_parameter_name(c, index, name), p); };
    const bool ln = norm_kind == Norm::layernorm;
    add("ln1.weight", &ln1_w);
    if (ln) add("ln1.bias", &ln1_b);
    if (qkv) {
      add("qkv.weight", &qkv->weight());
      if (c.bias) add("qkv.bias", &qkv->bias());
    } else {
      add("q.weight", &gqa->q_w);
      if (c.bias) add("q.bias", &gqa->q_b);
      add("k.weight", &gqa->k_w);
      if (c.bias) add("k.bias", &gqa->k_b);
      add("v.weight", &gqa->v_w);
      if (c.bias) add("v.bias", &gqa->v_b);
    }
    add("proj.weight", &proj.weight());
    if (c.bias) add("proj.bias", &proj.bias());
    add("ln2.weight", &ln2_w);
    if (ln) add("ln2.bias", &ln2_b);
    add("fc1.weight", &mlp.fc1().weight());
    if (c.bias) add("fc1.bias", &mlp.fc1().bias());
    add("fc2.weight", &mlp.fc2().weight());
    if (c.bias) add("fc2.bias", &mlp.fc2().bias());
    return out;
  }

  // Local heads: query heads and key/value heads on this TP rank.
  static std::pair<i64, i64> local_heads(const TransformerConfig& c, const TransformerGroups& g) {
    const i64 tp = g.tp.size(), kv = c.query_groups();
    return {c.heads / tp, kv >= tp ? kv / tp : 1};
  }

  Tensor forward(const Tensor& x, const LocalBatch& b, const TransformerConfig& c, const TransformerGroups& g,
                 const AttentionSetup& a, BlockContext& ctx) const {
    const i64 n = b.ids.size(0);
    const auto [heads, kvh] = local_heads(c, g);
    const i64 hl = heads * c.head_dim;
    const i64 cp = g.cp.cp.size();
    const i64 padded = c.sequence_parallel ? sp_rows(n, g.tp.size()) : n;
    ctx.x_in = x;
    ctx.ln1 = norm_forward(norm_kind, x, ln1_w, ln1_b, c.layer_norm_eps);
    std::vector<Tensor> parts;
    if (qkv) {
      parts = runtime::split(qkv->forward(ctx.ln1.y, ctx.qkv).output, {hl, hl, hl}, 1);  // q | k | v of local heads
    } else {
      ctx.qkv.input = ctx.ln1.y;
      parts = gqa->forward(ctx.ln1.y);
    }
    for (Tensor& t : parts) t = first_rows(t, n);  // sequence parallelism: the padding rows dropped
    const Shape q_shape{n, heads, c.head_dim}, kv_shape{n, kvh, c.head_dim};
    const bool rotate = c.positions == Positions::rope;
    const Tensor q =
        rotate ? rope(parts[0].reshape(q_shape), b.tokens().position, c.rope_base) : parts[0].reshape(q_shape);
    const Tensor k =
        rotate ? rope(parts[1].reshape(kv_shape), b.tokens().position, c.rope_base) : parts[1].reshape(kv_shape);
    const Tensor v = parts[2].reshape(kv_shape);
    parts.clear();
    Tensor attn;
    if (cp == 1) {
      ctx.q = q;
      ctx.k = k;
      ctx.v = v;
    } else {
      Shape ql = q_shape, kl = kv_shape;
      if (b.layout.format == cp::Format::bshd) {
        ql = {b.layout.batch, b.layout.seq_len / cp, heads, c.head_dim};
        kl = {b.layout.batch, b.layout.seq_len / cp, kvh, c.head_dim};
      }
      ctx.q = q.reshape(ql);
      ctx.k = k.reshape(kl);
      ctx.v = v.reshape(kl);
    }
    attn = attention_core(b, g, a, ctx);
    if (c.recompute == Recompute::selective) {
      // only q, k and v are kept: backward runs the core again
      ctx.attention = cp::AttentionResult{};
      ctx.cp_ctx = cp::CpContext{};
    } else if (cp > 1) {
      ctx.q = ctx.k = ctx.v = Tensor();  // the CP context keeps them
    }
    const Tensor p = proj.forward(pad_rows(attn.reshape({n, hl}), padded), ctx.proj).output;
    ctx.x_mid = runtime::add(x, p);
    ctx.ln2 = norm_forward(norm_kind, ctx.x_mid, ln2_w, ln2_b, c.layer_norm_eps);
    return runtime::add(ctx.x_mid, mlp.forward(ctx.ln2.y, ctx.mlp));
  }

  // The attention core on ctx.q, ctx.k and ctx.v (local shapes): fills ctx.attention (cp = 1) or
  // ctx.cp_ctx and returns the output.
  static Tensor attention_core(const LocalBatch& b, const TransformerGroups& g, const AttentionSetup& a,
                               BlockContext& ctx) {
    const cp::AttentionOptions opts = attention_options(a);
    if (g.cp.cp.size() == 1) {
      ctx.attention = cp::attention_forward(ctx.q, ctx.k, ctx.v, b.tokens(), b.tokens(), opts);
      return ctx.attention.out;
    }
    cp::CpOptions co;
    co.comm_type = a.comm;
    co.attention = opts;
    cp::CpForwardResult r = cp::attention_with_cp_forward(ctx.q, ctx.k, ctx.v, b.layout, g.cp, co);
    ctx.cp_ctx = std::move(r.ctx);
    return r.out;
  }

  // Frees what ctx kept, and its own temporaries, as soon as nothing later needs them (as autograd
  // frees a node's saved tensors and consumed gradients): the memory a rank holds during backward
  // is what PyTorch's would hold.
  Tensor backward(Tensor dy, const LocalBatch& b, const TransformerConfig& c, const TransformerGroups& g,
                  const AttentionSetup& a, BlockContext& ctx) {
    const i64 n = b.ids.size(0);
    const auto [heads, kvh] = local_heads(c, g);
    const i64 hl = heads * c.head_dim, kvl = kvh * c.head_dim;
    const i64 cp = g.cp.cp.size();
    const i64 padded = c.sequence_parallel ? sp_rows(n, g.tp.size()) : n;
    // y = x_mid + mlp(ln2(x_mid))
    Tensor dmid;
    {
      Tensor dln2 = mlp.backward(dy, ctx.mlp);
      ctx.mlp = tp::MLPContext{};
      const Tensor dx2 = norm_backward(norm_kind, dln2, ctx.x_mid, ln2_w, ln2_b, ctx.ln2);
      dln2 = Tensor();
      ctx.ln2 = NormResult{};
      ctx.x_mid = Tensor();
      dmid = runtime::add(dy, dx2);
    }
    dy = Tensor();
    // x_mid = x + proj(attention(...))
    Tensor dln1;
    {
      Tensor dattn = first_rows(proj.backward(dmid, ctx.proj), n);  // [n, hl]
      ctx.proj = tp::LinearContext{};
      const Shape q_shape{n, heads, c.head_dim}, kv_shape{n, kvh, c.head_dim};
      if (c.recompute == Recompute::selective) {
        attention_core(b, g, a, ctx);                  // the core's forward again (its output is not needed)
        if (cp > 1) ctx.q = ctx.k = ctx.v = Tensor();  // the CP context keeps them
      }
      Tensor dq, dk, dv;
      if (cp == 1) {
        const cp::AttentionGrads gr =
            cp::attention_backward(dattn.reshape(q_shape), ctx.q, ctx.k, ctx.v, ctx.attention.out, ctx.attention.lse,
                                   b.tokens(), b.tokens(), attention_options(a));
        dq = gr.dq;
        dk = gr.dk;
        dv = gr.dv;
      } else {
        const cp::CpGrads gr = cp::attention_with_cp_backward(dattn.reshape(ctx.cp_ctx.q_shape), ctx.cp_ctx);
        dq = gr.dq.reshape(q_shape);
        dk = gr.dk.reshape(kv_shape);
        dv = gr.dv.reshape(kv_shape);
      }
      dattn = Tensor();
      ctx.q = ctx.k = ctx.v = Tensor();
      ctx.attention = cp::AttentionResult{};
      ctx.cp_ctx = cp::CpContext{};
      if (c.positions == Positions::rope) {
        dq = rope_backward(dq, b.tokens().position, c.rope_base);
        dk = rope_backward(dk, b.tokens().position, c.rope_base);
      }
      if (qkv) {
        Tensor dqkv =
            pad_rows(runtime::cat({dq.reshape({n, hl}), dk.reshape({n, hl}), dv.reshape({n, hl})}, 1), padded);
        dq = dk = dv = Tensor();
        dln1 = qkv->backward(dqkv, ctx.qkv);
      } else {
        dln1 = gqa->backward(pad_rows(dq.reshape({n, hl}), padded), pad_rows(dk.reshape({n, kvl}), padded),
                             pad_rows(dv.reshape({n, kvl}), padded), ctx.qkv.input);
      }
    }
    ctx.qkv = tp::LinearContext{};
    const Tensor dx1 = norm_backward(norm_kind, dln1, ctx.x_in, ln1_w, ln1_b, ctx.ln1);
    dln1 = Tensor();
    ctx = BlockContext{};
    return runtime::add(dmid, dx1);
  }
};

StageLayers stage_layers(i64 layers, const Stage& st, const std::string& who) {
  const i64 n = st.size, f = st.first_stage_layers, l = st.last_stage_layers;
  if (f < -1 || l < -1) throw Error(who + ": the first and last stages' layer counts must be >= 0");
  if (f < 0 && l < 0) {
    if (layers % n != 0) {
      throw Error(who + ": " + str(layers) + " layers cannot be split evenly over pp=" + str(n) +
                  " stages; use a pp that divides the layer count, or uneven first/last stages");
    }
    return {st.rank * (layers / n), layers / n};
  }
  if (n < 2) throw Error(who + ": uneven first/last pipeline stages need pp >= 2");
  const i64 fixed = std::max<i64>(f, 0) + std::max<i64>(l, 0);
  const i64 rest_stages = n - (f >= 0 ? 1 : 0) - (l >= 0 ? 1 : 0);
  const i64 rest = layers - fixed;
  const std::string counts = "first stage " + (f >= 0 ? str(f) : std::string("even")) + ", last stage " +
                             (l >= 0 ? str(l) : std::string("even"));
  if (rest < 0 || (rest_stages == 0 && rest != 0) || (rest_stages > 0 && rest % rest_stages != 0)) {
    throw Error(who + ": " + str(layers) + " layers cannot be split over pp=" + str(n) + " stages with " + counts +
                " layers: the other " + str(rest_stages) + " stages must share the remaining " + str(rest) +
                " layers evenly");
  }
  const i64 middle = rest_stages > 0 ? rest / rest_stages : 0;
  auto count = [&](i64 r) { return r == 0 && f >= 0 ? f : r == n - 1 && l >= 0 ? l : middle; };
  i64 first = 0;
  for (i64 r = 0; r < st.rank; ++r) first += count(r);
  return {first, count(st.rank)};
}

Transformer::Transformer(const TransformerConfig& config, const Weights& w, TransformerGroups groups,
                         const AttentionSetup& attention, Stage stage)
    : config_(checked(config, w, groups, attention, stage)),
      groups_(std::move(groups)),
      attention_(attention),
      stage_(stage) {
  const StageLayers mine = stage_layers(config_.layers, stage_, "Transformer");
  const i64 per = mine.count;
  first_layer_ = mine.first;
  const int tp = groups_.tp.size();
  vocab_parallel_ = tp > 1 && config_.vocab % tp == 0;
  // rows [r V/tp, (r+1) V/tp) of the embedding and output tables (Megatron's VocabParallelEmbedding
  // and the output layer's ColumnParallelLinear), or the whole tables
  auto vocab_table = [&](const std::string& name) {
    return vocab_parallel_ ? row_shard(w, name, config_.dtype, groups_.tp, true) : replicated(w, name, config_.dtype);
  };
  if (has_embedding()) {
    embedding_ = vocab_table("embedding.weight");
    if (config_.positions == Positions::learned) {
      position_embedding_ = replicated(w, "position_embedding.weight", config_.dtype);
    }
  }
  for (i64 l = first_layer_; l < first_layer_ + per; ++l)
    blocks_.push_back(std::make_unique<Block>(config_, w, groups_.tp, l));
  if (stage_.last()) {
    lnf_w_ = replicated(w, "final_ln.weight", config_.dtype);
    if (config_.norm == Norm::layernorm) lnf_b_ = replicated(w, "final_ln.bias", config_.dtype);
    lnf_w_.sequence_parallel = lnf_b_.sequence_parallel = config_.sequence_parallel;
    out_w_ = vocab_table("output.weight");
    if (config_.bias) out_b_ = vocab_table("output.bias");
  }
}

Transformer::~Transformer() = default;
Transformer::Transformer(Transformer&&) noexcept = default;
Transformer& Transformer::operator=(Transformer&&) noexcept = default;

std::vector<std::pair<std::string, tp::Parameter*>> Transformer::named_parameters() {
  std::vector<std::pair<std::string, tp::Parameter*>> out;
  if (has_embedding()) {
    out.emplace_back("embedding.weight", &embedding_);
    if (config_.positions == Positions::learned) out.emplace_back("position_embedding.weight", &position_embedding_);
  }
  for (auto& b : blocks_) {
    for (auto& p : b->params(config_)) out.push_back(p);
  }
  if (stage_.last()) {
    out.emplace_back("final_ln.weight", &lnf_w_);
    if (config_.norm == Norm::layernorm) out.emplace_back("final_ln.bias", &lnf_b_);
    out.emplace_back("output.weight", &out_w_);
    if (config_.bias) out.emplace_back("output.bias", &out_b_);
  }
  return out;
}

std::vector<std::pair<std::string, tp::Parameter*>> Transformer::block_parameters(i64 i) {
  if (i < first_layer_ || i >= first_layer_ + num_layers()) {
    throw Error("Transformer: layer " + str(i) + " is not on pipeline stage " + str(stage_.rank));
  }
  return blocks_[static_cast<std::size_t>(i - first_layer_)]->params(config_);
}

void Transformer::gather_parameters() {
  std::vector<tp::Parameter*> all;
  for (auto& [name, p] : named_parameters()) all.push_back(p);
  UnitGather(all, groups_.fsdp).finish();
}

void Transformer::zero_grad() {
  for (auto& [name, p] : named_parameters()) p->zero_grad();
}

void Transformer::reduce_gradients(const runtime::ProcessGroup& g) {
  if (g.size() <= 1) return;
  runtime::AllreduceOptions o;
  o.group = g;
  for (auto& [name, p] : named_parameters()) {
    if (p->grad.defined()) runtime::all_reduce(p->grad, o).wait();
  }
}

std::vector<Transformer::RecomputeGroup> Transformer::recompute_groups() const {
  std::vector<RecomputeGroup> out;
  const std::size_t n = blocks_.size();
  const bool full = config_.recompute == Recompute::full;
  const auto per = static_cast<std::size_t>(config_.recompute_num_layers);
  if (full && config_.recompute_method == RecomputeMethod::uniform) {
    for (std::size_t i = 0; i < n; i += per) out.push_back({i, std::min(n, i + per), true});
  } else {
    for (std::size_t i = 0; i < n; ++i) out.push_back({i, i + 1, full && i < per});
  }
  return out;
}

std::vector<tp::Parameter*> Transformer::block_unit(std::size_t i) const {
  std::vector<tp::Parameter*> out;
  for (auto& [name, p] : blocks_[i]->params(config_)) out.push_back(p);
  return out;
}

// The units' parameters are members of a const model: gathering installs a cached copy of what
// their slices hold, which changes no number.
std::vector<tp::Parameter*> Transformer::embedding_unit() const {
  if (!has_embedding()) return {};
  auto* self = const_cast<Transformer*>(this);
  std::vector<tp::Parameter*> out{&self->embedding_};
  if (config_.positions == Positions::learned) out.push_back(&self->position_embedding_);
  return out;
}

std::vector<tp::Parameter*> Transformer::head_unit() const {
  if (!stage_.last()) return {};
  std::vector<tp::Parameter*> out;
  for (auto& [name, p] : const_cast<Transformer*>(this)->named_parameters()) {
    if (name.rfind("final_ln.", 0) == 0 || name.rfind("output.", 0) == 0) out.push_back(p);
  }
  return out;
}

Shape Transformer::hidden_shape(const LocalBatch& b) const {
  const i64 rows = b.ids.numel(), tp = groups_.tp.size();
  return {config_.sequence_parallel ? sp_rows(rows, tp) / tp : rows, config_.hidden};
}

void Transformer::reduce_tp_partial_gradients(const std::vector<std::pair<std::string, tp::Parameter*>>& params) {
  if (groups_.tp.size() <= 1) return;
  std::vector<tp::Parameter*> partial;
  for (const auto& [name, p] : params) {
    if (p->sequence_parallel) partial.push_back(p);
  }
  if (!partial.empty()) tp::allreduce_sequence_parallel_grads(partial, groups_.tp);
}

Tensor Transformer::stage_forward(const LocalBatch& b, const Tensor& input, TransformerContext& ctx) const {
  const i64 cp = groups_.cp.cp.size();
  if (cp != b.cp) {
    throw Error("Transformer: the batch was sharded for cp=" + str(b.cp) + " but the CP group has " + str(cp) +
                " ranks");
  }
  Tensor x;
  if (has_embedding()) {
    const runtime::MemoryPhase phase("embedding forward");
    UnitGather(embedding_unit(), groups_.fsdp).finish();
    if (vocab_parallel_) {
      // each TP rank looks up the ids of its vocabulary rows; the partial rows are summed over TP
      // (exact: every row has one non-zero term), reduce-scattered straight into the
      // sequence-parallel region when nothing is added to them first (Megatron-Core's
      // reduce_scatter_embeddings)
      x = tp::vocab_parallel_lookup(b.ids, embedding_.value, config_.vocab, groups_.tp, ctx.embedding);
      if (sp_embedding_scatter()) {
        x = tp::reduce_scatter_to_sp(pad_rows(x, sp_rows(b.ids.numel(), groups_.tp.size())), groups_.tp);
      } else {
        x = tp::reduce_from_tp(x, groups_.tp);
      }
    } else {
      x = runtime::embedding(b.ids, embedding_.value);
    }
    if (config_.positions == Positions::learned) {
      x = runtime::add(x, runtime::embedding(position_ids(b, config_.max_positions), position_embedding_.value));
    }
    release_unit(embedding_unit());
  } else {
    x = input;
  }
  if (!x.defined()) {
    throw Error(stage_.first() ? "Transformer: external_embeddings is set but no input embeddings were given"
                               : "Transformer: a stage after the first needs the previous stage's output");
  }
  const i64 rows = b.ids.numel();
  const bool sp = config_.sequence_parallel;
  if (x.dtype() != config_.dtype) {
    throw Error("Transformer: the stage input is " + x.str() + " but the model computes in " +
                runtime::dtype_name(config_.dtype) + "; convert it with to()");
  }
  const bool scattered = has_embedding() && sp_embedding_scatter();  // already this rank's share
  const i64 want = stage_.first() && !scattered ? rows : hidden_shape(b)[0];
  if (x.dim() != 2 || x.size(0) != want || x.size(1) != config_.hidden) {
    throw Error("Transformer: the stage input is " + x.str() + ", expected [" + str(want) + ", " + str(config_.hidden) +
                (sp && !stage_.first() ? "] (this TP rank's share of the local tokens x hidden)"
                                       : "] (the batch's local tokens x hidden)"));
  }
  if (sp && stage_.first() && !scattered) {
    // into the sequence-parallel region: this rank's share of the (padded) rows
    x = tp::scatter_to_sp(pad_rows(x, sp_rows(rows, groups_.tp.size())), groups_.tp);
  }
  ctx.blocks.assign(blocks_.size(), BlockContext{});
  // FSDP: block i + 1's parameters are gathered while block i runs
  UnitGather next = blocks_.empty() ? UnitGather() : UnitGather(block_unit(0), groups_.fsdp);
  for (const RecomputeGroup& group : recompute_groups()) {
    const Tensor group_input = x;
    for (std::size_t i = group.first; i < group.last; ++i) {
      const runtime::MemoryPhase phase("layer " + str(blocks_[i]->index) + " forward");
      next.finish();
      if (i + 1 < blocks_.size()) next = UnitGather(block_unit(i + 1), groups_.fsdp);
      std::optional<runtime::GemmPrecisionScope> fp8;
      if (config_.fp8) fp8.emplace(runtime::GemmPrecision::fp8);
      BlockContext dropped;  // a recomputed block keeps nothing
      x = blocks_[i]->forward(x, b, config_, groups_, attention_, group.recompute ? dropped : ctx.blocks[i]);
      release_unit(block_unit(i));
    }
    if (group.recompute) ctx.blocks[group.first].x_in = group_input;  // the checkpoint
  }
  if (!stage_.last()) return x;
  const runtime::MemoryPhase phase("output layer forward");
  UnitGather(head_unit(), groups_.fsdp).finish();
  ctx.x_last = x;
  ctx.lnf = norm_forward(config_.norm, x, lnf_w_, lnf_b_, config_.layer_norm_eps);
  // out of the sequence-parallel region: every rank's rows, for the output layer every TP rank holds
  // (whole, or its vocabulary rows: then the logits are this rank's columns, [N, vocab / tp])
  const Tensor y = sp ? first_rows(tp::gather_from_sp(ctx.lnf.y, groups_.tp), rows) : ctx.lnf.y;
  Tensor logits = runtime::matmul(y, out_w_.value, false, true);
  if (config_.bias) logits = runtime::add(logits, out_b_.value);
  release_unit(head_unit());
  return logits;
}

Tensor Transformer::stage_backward(Tensor dout, const LocalBatch& b, TransformerContext& ctx,
                                   const std::function<void(i64)>& after_block) {
  Tensor dx = std::move(dout);
  const bool sp = config_.sequence_parallel;
  const i64 rows = b.ids.numel(), padded = sp ? sp_rows(rows, groups_.tp.size()) : rows;
  if (stage_.last()) {
    const runtime::MemoryPhase phase("output layer backward");
    UnitGather(head_unit(), groups_.fsdp).finish();
    // logits = lnf.y W^T + b; what forward kept for it is freed once used (see Block::backward)
    if (config_.bias) out_b_.accumulate(runtime::add_backward(dx, out_b_.value.shape()).db);
    // with sequence parallelism the output layer's input is gathered again (only the share was kept)
    const Tensor y = sp ? first_rows(tp::gather_from_sp(ctx.lnf.y, groups_.tp), rows) : ctx.lnf.y;
    runtime::MatmulGrads og = runtime::matmul_backward(dx, y, out_w_.value, false, true);
    dx = Tensor();
    out_w_.accumulate(og.db);
    og.db = Tensor();
    if (vocab_parallel_) {
      // each TP rank's vocabulary columns gave a partial input gradient: summed over TP (into
      // each rank's share of the rows with sequence parallelism)
      og.da = sp ? tp::gather_from_sp_backward(pad_rows(og.da, padded), groups_.tp, true)
                 : tp::copy_to_tp_backward(og.da, groups_.tp);
    } else if (sp) {
      // every TP rank computed the same full gradient: each keeps its share
      og.da = tp::gather_from_sp_backward(pad_rows(og.da, padded), groups_.tp, false);
    }
    Tensor dfinal = norm_backward(config_.norm, og.da, ctx.x_last, lnf_w_, lnf_b_, ctx.lnf);
    og = runtime::MatmulGrads{};
    ctx.x_last = Tensor();
    ctx.lnf = NormResult{};
    dx = std::move(dfinal);
    release_unit(head_unit());
  }
  const std::vector<RecomputeGroup> groups = recompute_groups();
  // FSDP: each group's parameters are gathered before its backward (and recompute); the next
  // group's while this one runs
  auto group_unit = [&](const RecomputeGroup& g) {
    std::vector<tp::Parameter*> out;
    for (std::size_t i = g.first; i < g.last; ++i) {
      for (tp::Parameter* p : block_unit(i)) out.push_back(p);
    }
    return out;
  };
  UnitGather next = groups.empty() ? UnitGather() : UnitGather(group_unit(groups.back()), groups_.fsdp);
  for (auto group = groups.rbegin(); group != groups.rend(); ++group) {
    next.finish();
    if (std::next(group) != groups.rend()) next = UnitGather(group_unit(*std::next(group)), groups_.fsdp);
    if (group->recompute) {
      // the group's forward again from its checkpointed input, keeping what backward needs
      Tensor x = std::move(ctx.blocks[group->first].x_in);
      for (std::size_t i = group->first; i < group->last; ++i) {
        const runtime::MemoryPhase phase("layer " + str(blocks_[i]->index) + " recompute");
        std::optional<runtime::GemmPrecisionScope> fp8;
        if (config_.fp8) fp8.emplace(runtime::GemmPrecision::fp8);
        x = blocks_[i]->forward(x, b, config_, groups_, attention_, ctx.blocks[i]);
      }
    }
    for (std::size_t i = group->last; i-- > group->first;) {
      {
        const runtime::MemoryPhase phase("layer " + str(blocks_[i]->index) + " backward");
        std::optional<runtime::GemmPrecisionScope> fp8;
        if (config_.fp8) fp8.emplace(runtime::GemmPrecision::fp8);
        dx = blocks_[i]->backward(std::move(dx), b, config_, groups_, attention_, ctx.blocks[i]);
      }
      release_unit(block_unit(i));
      if (after_block) after_block(blocks_[i]->index);
    }
  }
  if (!stage_.first()) return dx;
  if (sp) {
    dx = has_embedding() && sp_embedding_scatter() ? tp::reduce_scatter_to_sp_backward(dx, groups_.tp)
                                                   : tp::scatter_to_sp_backward(dx, groups_.tp);
    dx = first_rows(dx, rows);
  }
  if (!has_embedding()) return dx;
  const runtime::MemoryPhase phase("embedding backward");
  // (the embedding's backward reads no weight: nothing to gather)
  if (config_.positions == Positions::learned) {
    position_embedding_.accumulate(
        runtime::embedding_backward(dx, position_ids(b, config_.max_positions), config_.max_positions));
  }
  if (vocab_parallel_) {
    // the gradient of every row reaches every TP rank (the forward's sum); each keeps its rows
    // (dx is ours: the gathered gradient, or the one the caller moved in)
    embedding_.accumulate(tp::vocab_parallel_lookup_backward(dx.contiguous(), ctx.embedding,
                                                             config_.vocab / groups_.tp.size(), groups_.tp.size()));
    ctx.embedding = tp::EmbeddingContext{};
    return Tensor();
  }
  embedding_.accumulate(runtime::embedding_backward(dx, b.ids, config_.vocab));
  return Tensor();
}

StepResult Transformer::forward_backward(const LocalBatch& b) {
  if (stage_.size != 1) throw Error("Transformer::forward_backward runs a single-stage model; use stage_forward");
  TransformerContext ctx;
  const Tensor logits = stage_forward(b, Tensor(), ctx);
  GroupLoss gl;
  {
    const runtime::MemoryPhase phase("loss");
    gl = group_cross_entropy(logits, b.labels, groups_.loss ? *groups_.loss : groups_.cp.cp, vocab_group());
  }
  StepResult result;
  result.tokens = gl.tokens;
  result.loss = gl.loss;
  result.logits = logits.to(DType::f32);
  stage_backward(std::move(gl.dlogits), b, ctx);
  reduce_tp_partial_gradients(named_parameters());
  return result;
}

Tensor Transformer::full_logits(const Tensor& logits) const {
  return vocab_parallel_ ? tp::gather_from_tp(logits, groups_.tp) : logits;
}

Tensor gather_logits(const Tensor& local, const LocalBatch& b, const runtime::ProcessGroup& cp) {
  const i64 n = local.size(0), vocab = local.size(1);
  Tensor all = local.to(DType::f32).contiguous();
  std::vector<i64> rows = b.global_rows;
  if (b.cp > 1) {
    Tensor out = Tensor::zeros({b.cp * n, vocab}, DType::f32);
    runtime::AllgatherOptions o;
    o.group = cp;
    runtime::all_gather_into_tensor(out, all, o).wait();
    all = out;
    const cp::CpLayout layout(b.layout, b.cp);
    rows.clear();
    for (i64 r = 0; r < b.cp; ++r) {
      const std::vector<i64>& rr = layout.rows_of(r);
      rows.insert(rows.end(), rr.begin(), rr.end());
    }
  }
  // position in `all` of each padded global row
  std::vector<i64> where(static_cast<std::size_t>(b.padded_rows), -1);
  for (std::size_t i = 0; i < rows.size(); ++i) where[static_cast<std::size_t>(rows[i])] = static_cast<i64>(i);
  std::vector<i64> pick;
  pick.reserve(b.real_rows.size());
  for (i64 r : b.real_rows) pick.push_back(where[static_cast<std::size_t>(r)]);
  Tensor real = cp::index_select(all, 0, pick);
  if (b.layout.format == cp::Format::bshd) real = real.reshape({b.layout.batch, b.layout.seq_len, vocab});
  return real;
}

}  // namespace ranksim::models

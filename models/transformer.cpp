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
  const i64 h = c.hidden, f = c.ffn;
  return {
      {"ln1.weight", {h}, 0},     {"ln1.bias", {h}, 0},  {"qkv.weight", {3 * h, h}, h}, {"qkv.bias", {3 * h}, h},
      {"proj.weight", {h, h}, h}, {"proj.bias", {h}, h}, {"ln2.weight", {h}, 0},        {"ln2.bias", {h}, 0},
      {"fc1.weight", {f, h}, h},  {"fc1.bias", {f}, h},  {"fc2.weight", {h, f}, f},     {"fc2.bias", {h}, f},
  };
}

std::vector<ParamSpec> param_specs(const TransformerConfig& c) {
  const i64 h = c.hidden, v = c.vocab;
  std::vector<ParamSpec> out = {{"embedding.weight", {v, h}, -1}};
  for (i64 l = 0; l < c.layers; ++l) {
    for (ParamSpec s : block_specs(c)) {
      s.name = block_parameter_name(c, l, s.name);
      out.push_back(std::move(s));
    }
  }
  out.push_back({"final_ln.weight", {h}, 0});
  out.push_back({"final_ln.bias", {h}, 0});
  out.push_back({"output.weight", {v, h}, h});
  out.push_back({"output.bias", {v}, h});
  return out;
}

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
  if (c.ffn % tp != 0) {
    throw Error("Transformer: ffn " + str(c.ffn) + " is not divisible by tp=" + str(tp));
  }
  if (st.size < 1 || st.rank < 0 || st.rank >= st.size) {
    throw Error("Transformer: stage " + str(st.rank) + " of " + str(st.size));
  }
  if (c.layers % st.size != 0) {
    throw Error("Transformer: " + str(c.layers) + " layers cannot be split evenly over pp=" + str(st.size) +
                " stages; use a pp that divides the layer count");
  }
  const i64 per = c.layers / st.size, first = st.rank * per;
  for (const ParamSpec& s : param_specs(c)) {
    // only this stage's parameters are read (a stage loads nothing else)
    const bool embedding = s.name == "embedding.weight";
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

tp::ColumnParallelLinearOptions qkv_options(DType dtype) {
  tp::ColumnParallelLinearOptions o;
  o.stride = 3;  // q, k and v blocks: rank r takes the same heads of each
  o.dtype = dtype;
  return o;
}

tp::RowParallelLinearOptions proj_options(DType dtype) {
  tp::RowParallelLinearOptions o;
  o.input_is_parallel = true;
  o.dtype = dtype;
  return o;
}

tp::ParallelMLPOptions mlp_options(DType dtype) {
  tp::ParallelMLPOptions o;
  o.dtype = dtype;
  return o;
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
  if (c.heads * c.head_dim != c.hidden) {
    throw Error("Transformer: hidden " + str(c.hidden) + " must equal heads * head_dim = " + str(c.heads) + " * " +
                str(c.head_dim) + " = " + str(c.heads * c.head_dim));
  }
  if (c.head_dim % 2 != 0) {
    throw Error("Transformer: head_dim " + str(c.head_dim) + " must be even (rotate-half RoPE)");
  }
  if (!runtime::is_floating(c.dtype) || c.dtype == DType::f64) {
    throw Error(std::string("Transformer: dtype must be f32, bf16 or f16, got ") + runtime::dtype_name(c.dtype));
  }
  if (c.fp8 && c.dtype == DType::f32) {
    throw Error("Transformer: fp8 GEMMs need a 16-bit dtype (bf16 or f16) for the activations around them");
  }
  if (!(c.layer_norm_eps > 0)) throw Error("Transformer: layer_norm_eps must be > 0");
  if (!(c.rope_base > 1)) throw Error("Transformer: rope_base must be > 1");
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
  for (i64 id : b.input_ids.to(DType::i64).to_vector<i64>()) {
    if (id < 0 || id >= c.vocab) {
      throw Error(who + "input id " + str(id) + " is outside the vocabulary [0, " + str(c.vocab) + ")");
    }
  }
  for (i64 l : b.labels.to(DType::i64).to_vector<i64>()) {
    if (l != kIgnoreIndex && (l < 0 || l >= c.vocab)) {
      throw Error(who + "label " + str(l) + " is outside [0, " + str(c.vocab) + ") and is not -100");
    }
  }
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

struct Transformer::Block {
  i64 index = 0;
  tp::Parameter ln1_w, ln1_b, ln2_w, ln2_b;
  tp::ColumnParallelLinear qkv;
  tp::RowParallelLinear proj;
  tp::ParallelMLP mlp;

  Block(const TransformerConfig& c, const Weights& w, const runtime::ProcessGroup& tp, i64 i)
      : index(i),
        ln1_w(replicated(w, block_parameter_name(c, i, "ln1.weight"), c.dtype)),
        ln1_b(replicated(w, block_parameter_name(c, i, "ln1.bias"), c.dtype)),
        ln2_w(replicated(w, block_parameter_name(c, i, "ln2.weight"), c.dtype)),
        ln2_b(replicated(w, block_parameter_name(c, i, "ln2.bias"), c.dtype)),
        qkv(weight(w, block_parameter_name(c, i, "qkv.weight")), tp, qkv_options(c.dtype),
            weight(w, block_parameter_name(c, i, "qkv.bias"))),
        proj(weight(w, block_parameter_name(c, i, "proj.weight")), tp, proj_options(c.dtype),
             weight(w, block_parameter_name(c, i, "proj.bias"))),
        mlp(weight(w, block_parameter_name(c, i, "fc1.weight")), weight(w, block_parameter_name(c, i, "fc2.weight")),
            tp, mlp_options(c.dtype), weight(w, block_parameter_name(c, i, "fc1.bias")),
            weight(w, block_parameter_name(c, i, "fc2.bias"))) {}

  std::vector<std::pair<std::string, tp::Parameter*>> params(const TransformerConfig& c) {
    auto n = [&](const char* s) { return block_parameter_name(c, index, s); };
    return {{n("ln1.weight"), &ln1_w},
            {n("ln1.bias"), &ln1_b},
            {n("qkv.weight"), &qkv.weight()},
            {n("qkv.bias"), &qkv.bias()},
            {n("proj.weight"), &proj.weight()},
            {n("proj.bias"), &proj.bias()},
            {n("ln2.weight"), &ln2_w},
            {n("ln2.bias"), &ln2_b},
            {n("fc1.weight"), &mlp.fc1().weight()},
            {n("fc1.bias"), &mlp.fc1().bias()},
            {n("fc2.weight"), &mlp.fc2().weight()},
            {n("fc2.bias"), &mlp.fc2().bias()}};
  }

  Tensor forward(const Tensor& x, const LocalBatch& b, const TransformerConfig& c, const TransformerGroups& g,
                 const AttentionSetup& a, BlockContext& ctx) const {
    const i64 n = b.ids.size(0);
    const i64 heads = c.heads / g.tp.size(), hl = heads * c.head_dim;
    const i64 cp = g.cp.cp.size();
    ctx.x_in = x;
    ctx.ln1 = runtime::layer_norm(x, ln1_w.value, ln1_b.value, c.layer_norm_eps);
    const Tensor qkv_out = qkv.forward(ctx.ln1.y, ctx.qkv).output;  // [n, 3 hl]: q | k | v of local heads
    const std::vector<Tensor> parts = runtime::split(qkv_out, {hl, hl, hl}, 1);
    const Shape head_shape{n, heads, c.head_dim};
    const Tensor q = rope(parts[0].reshape(head_shape), b.tokens.position, c.rope_base);
    const Tensor k = rope(parts[1].reshape(head_shape), b.tokens.position, c.rope_base);
    const Tensor v = parts[2].reshape(head_shape);
    const cp::AttentionOptions opts = attention_options(a);
    Tensor attn;
    if (cp == 1) {
      ctx.q = q;
      ctx.k = k;
      ctx.v = v;
      ctx.attention = cp::attention_forward(q, k, v, b.tokens, b.tokens, opts);
      attn = ctx.attention.out;
    } else {
      Shape local = head_shape;
      if (b.layout.format == cp::Format::bshd) local = {b.layout.batch, b.layout.seq_len / cp, heads, c.head_dim};
      cp::CpOptions co;
      co.comm_type = a.comm;
      co.attention = opts;
      cp::CpForwardResult r =
          cp::attention_with_cp_forward(q.reshape(local), k.reshape(local), v.reshape(local), b.layout, g.cp, co);
      ctx.cp_ctx = std::move(r.ctx);
      attn = r.out;
    }
    const Tensor p = proj.forward(attn.reshape({n, hl}), ctx.proj).output;
    ctx.x_mid = runtime::add(x, p);
    ctx.ln2 = runtime::layer_norm(ctx.x_mid, ln2_w.value, ln2_b.value, c.layer_norm_eps);
    return runtime::add(ctx.x_mid, mlp.forward(ctx.ln2.y, ctx.mlp));
  }

  // Frees what ctx kept, and its own temporaries, as soon as nothing later needs them (as autograd
  // frees a node's saved tensors and consumed gradients): the memory a rank holds during backward
  // is what PyTorch's would hold.
  Tensor backward(Tensor dy, const LocalBatch& b, const TransformerConfig& c, const TransformerGroups& g,
                  const AttentionSetup& a, BlockContext& ctx) {
    const i64 n = b.ids.size(0);
    const i64 heads = c.heads / g.tp.size(), hl = heads * c.head_dim;
    const i64 cp = g.cp.cp.size();
    // y = x_mid + mlp(ln2(x_mid))
    Tensor dmid;
    {
      Tensor dln2 = mlp.backward(dy, ctx.mlp);
      ctx.mlp = tp::MLPContext{};
      runtime::LayerNormGrads g2 =
          runtime::layer_norm_backward(dln2, ctx.x_mid, ln2_w.value, ctx.ln2.mean, ctx.ln2.rstd);
      dln2 = Tensor();
      ctx.ln2 = runtime::LayerNormResult{};
      ctx.x_mid = Tensor();
      ln2_w.accumulate(g2.dweight);
      ln2_b.accumulate(g2.dbias);
      dmid = runtime::add(dy, g2.dx);
    }
    dy = Tensor();
    // x_mid = x + proj(attention(...))
    Tensor dqkv;
    {
      Tensor dattn = proj.backward(dmid, ctx.proj);  // [n, hl]
      ctx.proj = tp::LinearContext{};
      const Shape head_shape{n, heads, c.head_dim};
      Tensor dq, dk, dv;
      if (cp == 1) {
        const cp::AttentionGrads gr =
            cp::attention_backward(dattn.reshape(head_shape), ctx.q, ctx.k, ctx.v, ctx.attention.out, ctx.attention.lse,
                                   b.tokens, b.tokens, attention_options(a));
        dq = gr.dq;
        dk = gr.dk;
        dv = gr.dv;
      } else {
        const cp::CpGrads gr = cp::attention_with_cp_backward(dattn.reshape(ctx.cp_ctx.q_shape), ctx.cp_ctx);
        dq = gr.dq.reshape(head_shape);
        dk = gr.dk.reshape(head_shape);
        dv = gr.dv.reshape(head_shape);
      }
      dattn = Tensor();
      ctx.q = ctx.k = ctx.v = Tensor();
      ctx.attention = cp::AttentionResult{};
      ctx.cp_ctx = cp::CpContext{};
      dq = rope_backward(dq, b.tokens.position, c.rope_base);
      dk = rope_backward(dk, b.tokens.position, c.rope_base);
      dqkv = runtime::cat({dq.reshape({n, hl}), dk.reshape({n, hl}), dv.reshape({n, hl})}, 1);
    }
    Tensor dln1 = qkv.backward(dqkv, ctx.qkv);
    dqkv = Tensor();
    ctx.qkv = tp::LinearContext{};
    const runtime::LayerNormGrads g1 =
        runtime::layer_norm_backward(dln1, ctx.x_in, ln1_w.value, ctx.ln1.mean, ctx.ln1.rstd);
    dln1 = Tensor();
    ctx = BlockContext{};
    ln1_w.accumulate(g1.dweight);
    ln1_b.accumulate(g1.dbias);
    return runtime::add(dmid, g1.dx);
  }
};

Transformer::Transformer(const TransformerConfig& config, const Weights& w, TransformerGroups groups,
                         const AttentionSetup& attention, Stage stage)
    : config_(checked(config, w, groups, attention, stage)),
      groups_(std::move(groups)),
      attention_(attention),
      stage_(stage) {
  const i64 per = config_.layers / stage_.size;
  first_layer_ = stage_.rank * per;
  if (has_embedding()) embedding_ = replicated(w, "embedding.weight", config_.dtype);
  for (i64 l = first_layer_; l < first_layer_ + per; ++l)
    blocks_.push_back(std::make_unique<Block>(config_, w, groups_.tp, l));
  if (stage_.last()) {
    lnf_w_ = replicated(w, "final_ln.weight", config_.dtype);
    lnf_b_ = replicated(w, "final_ln.bias", config_.dtype);
    out_w_ = replicated(w, "output.weight", config_.dtype);
    out_b_ = replicated(w, "output.bias", config_.dtype);
  }
}

Transformer::~Transformer() = default;
Transformer::Transformer(Transformer&&) noexcept = default;
Transformer& Transformer::operator=(Transformer&&) noexcept = default;

std::vector<std::pair<std::string, tp::Parameter*>> Transformer::named_parameters() {
  std::vector<std::pair<std::string, tp::Parameter*>> out;
  if (has_embedding()) out.emplace_back("embedding.weight", &embedding_);
  for (auto& b : blocks_) {
    for (auto& p : b->params(config_)) out.push_back(p);
  }
  if (stage_.last()) {
    out.emplace_back("final_ln.weight", &lnf_w_);
    out.emplace_back("final_ln.bias", &lnf_b_);
    out.emplace_back("output.weight", &out_w_);
    out.emplace_back("output.bias", &out_b_);
  }
  return out;
}

std::vector<std::pair<std::string, tp::Parameter*>> Transformer::block_parameters(i64 i) {
  if (i < first_layer_ || i >= first_layer_ + num_layers()) {
    throw Error("Transformer: layer " + str(i) + " is not on pipeline stage " + str(stage_.rank));
  }
  return blocks_[static_cast<std::size_t>(i - first_layer_)]->params(config_);
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

Tensor Transformer::stage_forward(const LocalBatch& b, const Tensor& input, TransformerContext& ctx) const {
  const i64 cp = groups_.cp.cp.size();
  if (cp != b.cp) {
    throw Error("Transformer: the batch was sharded for cp=" + str(b.cp) + " but the CP group has " + str(cp) +
                " ranks");
  }
  Tensor x;
  if (has_embedding()) {
    const runtime::MemoryPhase phase("embedding forward");
    x = runtime::embedding(b.ids, embedding_.value);
  } else {
    x = input;
  }
  if (!x.defined()) {
    throw Error(stage_.first() ? "Transformer: external_embeddings is set but no input embeddings were given"
                               : "Transformer: a stage after the first needs the previous stage's output");
  }
  const i64 rows = b.ids.numel();
  if (x.dtype() != config_.dtype) {
    throw Error("Transformer: the stage input is " + x.str() + " but the model computes in " +
                runtime::dtype_name(config_.dtype) + "; convert it with to()");
  }
  if (x.dim() != 2 || x.size(0) != rows || x.size(1) != config_.hidden) {
    throw Error("Transformer: the stage input is " + x.str() + ", expected [" + str(rows) + ", " + str(config_.hidden) +
                "] (the batch's local tokens x hidden)");
  }
  ctx.blocks.assign(blocks_.size(), BlockContext{});
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const runtime::MemoryPhase phase("layer " + str(blocks_[i]->index) + " forward");
    std::optional<runtime::GemmPrecisionScope> fp8;
    if (config_.fp8) fp8.emplace(runtime::GemmPrecision::fp8);
    x = blocks_[i]->forward(x, b, config_, groups_, attention_, ctx.blocks[i]);
  }
  if (!stage_.last()) return x;
  const runtime::MemoryPhase phase("output layer forward");
  ctx.x_last = x;
  ctx.lnf = runtime::layer_norm(x, lnf_w_.value, lnf_b_.value, config_.layer_norm_eps);
  return runtime::add(runtime::matmul(ctx.lnf.y, out_w_.value, false, true), out_b_.value);
}

Tensor Transformer::stage_backward(Tensor dout, const LocalBatch& b, TransformerContext& ctx,
                                   const std::function<void(i64)>& after_block) {
  Tensor dx = std::move(dout);
  if (stage_.last()) {
    const runtime::MemoryPhase phase("output layer backward");
    // logits = lnf.y W^T + b; what forward kept for it is freed once used (see Block::backward)
    out_b_.accumulate(runtime::add_backward(dx, out_b_.value.shape()).db);
    runtime::MatmulGrads og = runtime::matmul_backward(dx, ctx.lnf.y, out_w_.value, false, true);
    dx = Tensor();
    out_w_.accumulate(og.db);
    og.db = Tensor();
    const runtime::LayerNormGrads fg =
        runtime::layer_norm_backward(og.da, ctx.x_last, lnf_w_.value, ctx.lnf.mean, ctx.lnf.rstd);
    og = runtime::MatmulGrads{};
    ctx.x_last = Tensor();
    ctx.lnf = runtime::LayerNormResult{};
    lnf_w_.accumulate(fg.dweight);
    lnf_b_.accumulate(fg.dbias);
    dx = fg.dx;
  }
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    {
      const runtime::MemoryPhase phase("layer " + str(blocks_[i]->index) + " backward");
      std::optional<runtime::GemmPrecisionScope> fp8;
      if (config_.fp8) fp8.emplace(runtime::GemmPrecision::fp8);
      dx = blocks_[i]->backward(std::move(dx), b, config_, groups_, attention_, ctx.blocks[i]);
    }
    if (after_block) after_block(blocks_[i]->index);
  }
  if (!has_embedding()) return dx;
  const runtime::MemoryPhase phase("embedding backward");
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
    gl = group_cross_entropy(logits, b.labels, groups_.loss ? *groups_.loss : groups_.cp.cp);
  }
  StepResult result;
  result.tokens = gl.tokens;
  result.loss = gl.loss;
  result.logits = logits.to(DType::f32);
  stage_backward(std::move(gl.dlogits), b, ctx);
  return result;
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

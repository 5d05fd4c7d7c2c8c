#include "tp/attention.h"

#include <cmath>
#include <limits>
#include <string>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/sharding.h"

namespace ranksim::tp {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;

namespace {

ParallelAttentionConfig normalized(ParallelAttentionConfig c, int p) {
  const std::string who = "ParallelAttention: ";
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.num_query_groups < 0 || c.kv_channels < 0) {
    throw Error(who + "hidden_size and num_attention_heads must be positive");
  }
  if (c.num_query_groups == 0) c.num_query_groups = c.num_attention_heads;
  if (c.kv_channels == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      throw Error(who + "hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                  std::to_string(c.num_attention_heads) + "; set kv_channels");
    }
    c.kv_channels = c.hidden_size / c.num_attention_heads;
  }
  if (c.num_attention_heads % c.num_query_groups != 0) {
    throw Error(who + "num_attention_heads " + std::to_string(c.num_attention_heads) +
                " is not divisible by num_query_groups " + std::to_string(c.num_query_groups));
  }
  if (c.num_attention_heads % p != 0) {
    throw Error(who + "num_attention_heads " + std::to_string(c.num_attention_heads) +
                " is not divisible by the tensor-parallel size " + std::to_string(p));
  }
  if (c.num_query_groups % p != 0) {
    throw Error(who + "num_query_groups " + std::to_string(c.num_query_groups) +
                " is not divisible by the tensor-parallel size " + std::to_string(p) +
                " (each rank needs whole KV groups)");
  }
  return c;
}

ColumnParallelLinearOptions qkv_options(const ParallelAttentionConfig& c) {
  ColumnParallelLinearOptions o;
  o.bias = c.bias;
  o.sequence_parallel = c.sequence_parallel;
  o.dtype = c.dtype;
  return o;
}

RowParallelLinearOptions proj_options(const ParallelAttentionConfig& c) {
  RowParallelLinearOptions o;
  o.bias = c.bias;
  o.input_is_parallel = true;
  o.sequence_parallel = c.sequence_parallel;
  o.dtype = c.dtype;
  return o;
}

const Tensor& checked(const char* what, const Tensor& t, const Shape& shape) {
  if (!t.defined() || t.shape() != shape) {
    throw Error(std::string("ParallelAttention: the ") + what + " must be " + runtime::shape_str(shape) + ", got " +
                (t.defined() ? t.str() : "undefined"));
  }
  return t;
}

template <class T>
void mask_rows(T* data, std::int64_t batches, std::int64_t rows, std::int64_t s, T minus_inf) {
  for (std::int64_t bg = 0; bg < batches; ++bg) {
    for (std::int64_t rr = 0; rr < rows; ++rr) {
      T* row = data + (bg * rows + rr) * s;
      for (std::int64_t j = rr % s + 1; j < s; ++j) row[j] = minus_inf;
    }
  }
}

// Sets the scores of keys after each query to -inf. scores: fresh, contiguous
// [b, groups, q_per_group * s, s]; row rr holds query position rr % s.
void apply_causal_mask(const Tensor& scores) {
  runtime::charge({"causal_mask", 0.0, 2.0 * static_cast<double>(scores.nbytes()), scores.dtype()});
  if (!scores.has_data()) return;
  const std::int64_t s = scores.size(-1), rows = scores.size(-2);
  const std::int64_t batches = scores.numel() / (rows * s);
  const float inf = std::numeric_limits<float>::infinity();
  switch (scores.dtype()) {
    case DType::f32:
      mask_rows(scores.data<float>(), batches, rows, s, -inf);
      break;
    case DType::f64:
      mask_rows(scores.data<double>(), batches, rows, s, -std::numeric_limits<double>::infinity());
      break;
    case DType::bf16:
      mask_rows(scores.data<runtime::BFloat16>(), batches, rows, s, runtime::BFloat16::from_float(-inf));
      break;
    case DType::f16:
      mask_rows(scores.data<runtime::Half>(), batches, rows, s, runtime::Half::from_float(-inf));
      break;
    default:
      throw Error("ParallelAttention: scores must be floating, got " + scores.str());
  }
}

}  // namespace

Tensor interleave_qkv(const Tensor& wq, const Tensor& wk, const Tensor& wv, int np, int ng) {
  if (np <= 0 || ng <= 0 || np % ng != 0) {
    throw Error("interleave_qkv: num_attention_heads " + std::to_string(np) +
                " is not a multiple of num_query_groups " + std::to_string(ng));
  }
  if (!wq.defined() || !wk.defined() || !wv.defined() || wk.shape() != wv.shape() || wq.dim() != wk.dim() ||
      wq.size(0) % np != 0 || wk.size(0) % ng != 0 || wq.size(0) / np != wk.size(0) / ng) {
    throw Error("interleave_qkv: query [np*hn, ...], key and value [ng*hn, ...] do not fit np=" + std::to_string(np) +
                ", ng=" + std::to_string(ng));
  }
  const std::int64_t hn = wk.size(0) / ng, qpg = np / ng;
  std::vector<Tensor> pieces;
  for (std::int64_t g = 0; g < ng; ++g) {
    pieces.push_back(wq.narrow(0, g * qpg * hn, qpg * hn));
    pieces.push_back(wk.narrow(0, g * hn, hn));
    pieces.push_back(wv.narrow(0, g * hn, hn));
  }
  return runtime::cat(pieces, 0);
}

ParallelAttention::ParallelAttention(const ParallelAttentionConfig& config, const Tensor& qkv_weight,
                                     const Tensor& proj_weight, runtime::ProcessGroup tp, const Tensor& qkv_bias,
                                     const Tensor& proj_bias)
    : cfg_(normalized(config, tp.size())),
      groups_local_(cfg_.num_query_groups / tp.size()),
      q_per_group_(cfg_.num_attention_heads / cfg_.num_query_groups),
      qkv_(checked("QKV weight", qkv_weight,
                   {cfg_.num_query_groups * (q_per_group_ + 2) * cfg_.kv_channels, cfg_.hidden_size}),
           tp, qkv_options(cfg_), qkv_bias),
      proj_(checked("projection weight", proj_weight, {cfg_.hidden_size, cfg_.num_attention_heads * cfg_.kv_channels}),
            tp, proj_options(cfg_), proj_bias) {}

ParallelAttention ParallelAttention::seeded(const ParallelAttentionConfig& config, std::uint64_t seed,
                                            runtime::ProcessGroup tp, double init_std) {
  const ParallelAttentionConfig c = normalized(config, tp.size());
  const std::int64_t qkv_rows = c.num_query_groups * (c.num_attention_heads / c.num_query_groups + 2) * c.kv_channels;
  return ParallelAttention(c, master_normal({qkv_rows, c.hidden_size}, seed, init_std),
                           master_normal({c.hidden_size, c.num_attention_heads * c.kv_channels}, seed + 1, init_std),
                           std::move(tp));
}

Tensor ParallelAttention::forward(const Tensor& x, AttentionContext& ctx) const {
  if (!x.defined() || x.dim() != 3) {
    throw Error("ParallelAttention::forward: x must be [s, b, h], got " +
                (x.defined() ? x.str() : std::string("undefined")));
  }
  const Tensor mixed = qkv_.forward(x, ctx.qkv).output;  // [s, b, groups * (qpg + 2) * hn]
  const std::int64_t s = mixed.size(0), b = mixed.size(1), hn = cfg_.kv_channels;
  const std::int64_t G = groups_local_, Q = q_per_group_;
  ctx.s = s;
  ctx.b = b;
  const Tensor m5 = mixed.view({s, b, G, Q + 2, hn});
  // [s, b, G, n, hn] -> [b, G, n, s, hn]: each group's heads become consecutive row blocks.
  auto heads_first = [&](std::int64_t start, std::int64_t n) {
    return m5.narrow(3, start, n).permute({1, 2, 3, 0, 4}).contiguous().view({b, G, n * s, hn});
  };
  ctx.q = heads_first(0, Q);
  ctx.k = heads_first(Q, 1);
  ctx.v = heads_first(Q + 1, 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hn));
  const Tensor scores = runtime::scale(runtime::matmul(ctx.q, ctx.k, false, true), scale);
  if (cfg_.causal) apply_causal_mask(scores);
  ctx.probs = runtime::softmax(scores);
  const Tensor context = runtime::matmul(ctx.probs, ctx.v)
                             .view({b, G, Q, s, hn})
                             .permute({3, 0, 1, 2, 4})
                             .contiguous()
                             .view({s, b, G * Q * hn});
  return proj_.forward(context, ctx.proj).output;
}

Tensor ParallelAttention::backward(const Tensor& dy, const AttentionContext& ctx, Tensor* dqkv) {
  const std::int64_t s = ctx.s, b = ctx.b, hn = cfg_.kv_channels;
  const std::int64_t G = groups_local_, Q = q_per_group_;
  const Tensor dcontext =
      proj_.backward(dy, ctx.proj).view({s, b, G, Q, hn}).permute({1, 2, 3, 0, 4}).contiguous().view({b, G, Q * s, hn});
  const runtime::MatmulGrads pv = runtime::matmul_backward(dcontext, ctx.probs, ctx.v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hn));
  const Tensor dscores = runtime::scale_backward(runtime::softmax_backward(pv.da, ctx.probs), scale);
  const runtime::MatmulGrads qk = runtime::matmul_backward(dscores, ctx.q, ctx.k, false, true);
  // Back to [s, b, G, n, hn] and interleave per group as the fused layout.
  auto seq_first = [&](const Tensor& t, std::int64_t n) { return t.view({b, G, n, s, hn}).permute({3, 0, 1, 2, 4}); };
  const Tensor dmixed =
      runtime::cat({seq_first(qk.da, Q), seq_first(qk.db, 1), seq_first(pv.db, 1)}, 3).view({s, b, G * (Q + 2) * hn});
  if (dqkv != nullptr) *dqkv = dmixed;
  return qkv_.backward(dmixed, ctx.qkv);
}

std::vector<std::pair<std::string, Parameter*>> ParallelAttention::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out = {{"qkv.weight", &qkv_.weight()}};
  if (qkv_.has_bias()) out.emplace_back("qkv.bias", &qkv_.bias());
  out.emplace_back("proj.weight", &proj_.weight());
  if (proj_.has_bias()) out.emplace_back("proj.bias", &proj_.bias());
  return out;
}

}  // namespace ranksim::tp

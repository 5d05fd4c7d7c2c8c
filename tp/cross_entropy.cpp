#include "tp/cross_entropy.h"

#include <cmath>
#include <string>

#include "runtime/cost.h"
#include "sim/error.h"

namespace ranksim::tp {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;

namespace {

void all_reduce(const Tensor& t, const runtime::ProcessGroup& g, runtime::ReduceOp op) {
  if (g.size() == 1) return;
  runtime::AllreduceOptions o;
  o.group = g;
  o.op = op;
  runtime::all_reduce(t, o);
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    const runtime::ProcessGroup& tp, CrossEntropyContext& ctx) {
  const std::string who = "vocab_parallel_cross_entropy";
  if (!logits.defined() || logits.dim() < 1 || !runtime::is_floating(logits.dtype())) {
    throw Error(who + ": logits must be a floating tensor [..., V/p]");
  }
  const Shape row_shape(logits.shape().begin(), logits.shape().end() - 1);
  if (!targets.defined() || (targets.dtype() != DType::i64 && targets.dtype() != DType::i32) ||
      targets.shape() != row_shape) {
    throw Error(who + ": targets must be i64 or i32 of shape " + runtime::shape_str(row_shape) +
                " for logits " + logits.str() + ", got " +
                (targets.defined() ? targets.str() : "undefined"));
  }
  const int p = tp.size();
  const std::int64_t vp = logits.size(-1), vocab = vp * p, start = tp.rank() * vp;
  const std::int64_t n = runtime::shape_numel(row_shape);
  ctx.logits_dtype = logits.dtype();
  const Tensor x = logits.to(DType::f32).contiguous();
  const bool data = x.has_data() && targets.has_data();
  const Tensor m = data ? Tensor::zeros(row_shape) : Tensor::shape_only(row_shape);
  const Tensor pred = data ? Tensor::zeros(row_shape) : Tensor::shape_only(row_shape);
  const Tensor se = data ? Tensor::zeros(row_shape) : Tensor::shape_only(row_shape);
  const Tensor loss = data ? Tensor::zeros(row_shape) : Tensor::shape_only(row_shape);
  ctx.softmax = data ? Tensor::zeros(x.shape()) : Tensor::shape_only(x.shape());
  const double bytes = 2.0 * static_cast<double>(x.nbytes());
  const double elems = static_cast<double>(x.numel());
  if (!data) {
    ctx.local_target.clear();
    for (runtime::ReduceOp op : {runtime::ReduceOp::MAX, runtime::ReduceOp::SUM,
                                 runtime::ReduceOp::SUM}) {
      runtime::charge({"vocab_parallel_cross_entropy", 2.0 * elems, bytes, DType::f32});
      all_reduce(m, tp, op);
    }
    return loss;
  }
  const float* xs = x.data<float>();
  float* mx = m.data<float>();
  float* pr = pred.data<float>();
  float* s = se.data<float>();
  float* ls = loss.data<float>();
  float* sm = ctx.softmax.data<float>();
  const std::vector<std::int64_t> tg = targets.to_vector<std::int64_t>();

  for (std::int64_t i = 0; i < n; ++i) {
    float v = -INFINITY;
    for (std::int64_t j = 0; j < vp; ++j) v = std::fmax(v, xs[i * vp + j]);
    mx[i] = v;
  }
  runtime::charge({"vocab_parallel_cross_entropy_max", elems, bytes / 2, DType::f32});
  all_reduce(m, tp, runtime::ReduceOp::MAX);

  ctx.local_target.assign(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = tg[static_cast<std::size_t>(i)];
    if (t < 0 || t >= vocab) {
      throw Error(who + ": target " + std::to_string(t) + " of row " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    const bool owned = t >= start && t < start + vp;
    if (owned) ctx.local_target[static_cast<std::size_t>(i)] = t - start;
    pr[i] = owned ? xs[i * vp + (t - start)] - mx[i] : 0.0f;
  }
  all_reduce(pred, tp, runtime::ReduceOp::SUM);

  for (std::int64_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (std::int64_t j = 0; j < vp; ++j) {
      const float e = std::exp(xs[i * vp + j] - mx[i]);
      sm[i * vp + j] = e;
      sum += e;
    }
    s[i] = sum;
  }
  runtime::charge({"vocab_parallel_cross_entropy_exp", 3.0 * elems, bytes, DType::f32});
  all_reduce(se, tp, runtime::ReduceOp::SUM);

  for (std::int64_t i = 0; i < n; ++i) {
    ls[i] = std::log(s[i]) - pr[i];
    for (std::int64_t j = 0; j < vp; ++j) sm[i * vp + j] = sm[i * vp + j] / s[i];
  }
  runtime::charge({"vocab_parallel_cross_entropy_softmax", elems, bytes, DType::f32});
  return loss;
}

Tensor vocab_parallel_cross_entropy_backward(const Tensor& dloss, const CrossEntropyContext& ctx) {
  const std::string who = "vocab_parallel_cross_entropy_backward";
  if (!ctx.softmax.defined()) throw Error(who + ": the context holds no forward");
  const Shape row_shape(ctx.softmax.shape().begin(), ctx.softmax.shape().end() - 1);
  if (!dloss.defined() || !runtime::is_floating(dloss.dtype()) || dloss.shape() != row_shape) {
    throw Error(who + ": dloss must be floating of shape " + runtime::shape_str(row_shape));
  }
  const double bytes = 2.0 * static_cast<double>(ctx.softmax.nbytes());
  runtime::charge({"vocab_parallel_cross_entropy_backward", 2.0 * static_cast<double>(
                                                                     ctx.softmax.numel()),
                   bytes, DType::f32});
  if (!ctx.softmax.has_data() || !dloss.has_data()) {
    return Tensor::shape_only(ctx.softmax.shape(), ctx.logits_dtype);
  }
  const std::int64_t vp = ctx.softmax.size(-1);
  const std::int64_t n = runtime::shape_numel(row_shape);
  const Tensor grad = Tensor::zeros(ctx.softmax.shape());
  const float* sm = ctx.softmax.data<float>();
  float* g = grad.data<float>();
  const std::vector<float> dl = dloss.to_vector<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = ctx.local_target[static_cast<std::size_t>(i)];
    const float d = dl[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < vp; ++j) {
      const float v = j == t ? sm[i * vp + j] - 1.0f : sm[i * vp + j];
      g[i * vp + j] = v * d;
    }
  }
  return grad.to(ctx.logits_dtype);
}

}  // namespace ranksim::tp

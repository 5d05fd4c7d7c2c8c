#include "tp/cross_entropy.h"

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"
#include "sim/error.h"
#include "tp/cross_entropy_kernels.h"

namespace ranksim::tp {

using runtime::DType;
using runtime::Shape;
using runtime::Tensor;

namespace {

// --- the device path: the steps between the all-reduces as kernels ---------------------------

using runtime::Device;
using runtime::launch;
using In = runtime::DeviceInput;
using Ids = runtime::DeviceIndices;
using Out = runtime::DeviceOutput;
using i64 = std::int64_t;
namespace k = kernels;

Shape row_shape_of(const Tensor& x) { return Shape(x.shape().begin(), x.shape().end() - 1); }

Tensor vocab_max(Device& dev, const Tensor& x) {
  In X(dev, x);
  Out M(dev, row_shape_of(x), DType::f32);
  launch(dev, k::VocabMaxKernel{X.get(), M.as<float>(), x.dtype(), x.size(-1)}, M.t.numel());
  return M.t;
}

Tensor vocab_pred(Device& dev, const Tensor& x, const Tensor& m, const Tensor& local) {
  In X(dev, x), M(dev, m);
  Ids L(dev, local);
  Out P(dev, m.shape(), DType::f32);
  launch(dev, k::VocabPredKernel{X.get(), M.as<float>(), L.get(), P.as<float>(), x.dtype(), x.size(-1)}, m.numel());
  return P.t;
}

std::pair<Tensor, Tensor> vocab_exp(Device& dev, const Tensor& x, const Tensor& m) {
  In X(dev, x), M(dev, m);
  Out E(dev, x.shape(), DType::f32), S(dev, m.shape(), DType::f32);
  launch(dev, k::VocabExpKernel{X.get(), M.as<float>(), E.as<float>(), S.as<float>(), x.dtype(), x.size(-1)},
         m.numel());
  return {E.t, S.t};
}

std::pair<Tensor, Tensor> vocab_softmax(Device& dev, const Tensor& e, const Tensor& se, const Tensor& pred) {
  In E(dev, e), S(dev, se), P(dev, pred);
  Out Sm(dev, e.shape(), DType::f32), Loss(dev, se.shape(), DType::f32);
  const i64 cols = e.size(-1);
  launch(dev,
         k::VocabSoftmaxKernel{E.as<float>(), S.as<float>(), P.as<float>(), Sm.as<float>(), Loss.as<float>(), cols},
         se.numel() * (cols > 0 ? cols : 1));
  return {Sm.t, Loss.t};
}

Tensor vocab_backward(Device& dev, const Tensor& softmax, const Tensor& local, const Tensor& dloss, DType dx_dtype) {
  In Sm(dev, softmax), D(dev, dloss);
  Ids L(dev, local);
  Out DX(dev, softmax.shape(), dx_dtype);
  const i64 cols = softmax.size(-1);
  if (cols > 0) {
    launch(dev, k::VocabBackwardKernel{Sm.as<float>(), L.get(), D.get(), dloss.dtype(), DX.ptr, dx_dtype, cols},
           softmax.numel());
  }
  return DX.t;
}

void all_reduce(const Tensor& t, const runtime::ProcessGroup& g, runtime::ReduceOp op) {
  if (g.size() == 1) return;
  runtime::AllreduceOptions o;
  o.group = g;
  o.op = op;
  runtime::all_reduce(t, o);
}

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const runtime::ProcessGroup& tp,
                                    CrossEntropyContext& ctx) {
  const std::string who = "vocab_parallel_cross_entropy";
  if (!logits.defined() || logits.dim() < 1 || !runtime::is_floating(logits.dtype())) {
    throw Error(who + ": logits must be a floating tensor [..., V/p]");
  }
  const Shape row_shape(logits.shape().begin(), logits.shape().end() - 1);
  if (!targets.defined() || (targets.dtype() != DType::i64 && targets.dtype() != DType::i32) ||
      targets.shape() != row_shape) {
    throw Error(who + ": targets must be i64 or i32 of shape " + runtime::shape_str(row_shape) + " for logits " +
                logits.str() + ", got " + (targets.defined() ? targets.str() : "undefined"));
  }
  const int p = tp.size();
  const std::int64_t vp = logits.size(-1), vocab = vp * p, start = tp.rank() * vp;
  const std::int64_t n = runtime::shape_numel(row_shape);
  ctx.logits_dtype = logits.dtype();
  const Tensor x = logits.to(DType::f32).contiguous();
  const bool data = x.has_data() && targets.has_data();
  const double bytes = 2.0 * static_cast<double>(x.nbytes());
  const double elems = static_cast<double>(x.numel());
  if (!data) {
    ctx.local_target.clear();
    ctx.softmax = Tensor::shape_only(x.shape());
    for (runtime::ReduceOp op : {runtime::ReduceOp::MAX, runtime::ReduceOp::SUM, runtime::ReduceOp::SUM}) {
      runtime::charge({"vocab_parallel_cross_entropy", 2.0 * elems, bytes, DType::f32});
      all_reduce(Tensor::shape_only(row_shape), tp, op);
    }
    return Tensor::shape_only(row_shape);
  }
  // On a compute device the four steps between the all-reduces run as device kernels
  // (tp/cross_entropy_kernels.h), in this loop's order; the collectives and charges are the same.
  runtime::Device* dev = runtime::device_for({&x, &targets});

  Tensor m;
  if (dev) {
    m = vocab_max(*dev, x);
  } else {
    m = Tensor::zeros(row_shape);
    const float* xs = x.data<float>();
    float* mx = m.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      float v = -INFINITY;
      for (std::int64_t j = 0; j < vp; ++j) v = std::fmax(v, xs[i * vp + j]);
      mx[i] = v;
    }
  }
  runtime::charge({"vocab_parallel_cross_entropy_max", elems, bytes / 2, DType::f32});
  all_reduce(m, tp, runtime::ReduceOp::MAX);

  const std::vector<std::int64_t> tg = targets.to_vector<std::int64_t>();
  ctx.local_target.assign(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = tg[static_cast<std::size_t>(i)];
    if (t < 0 || t >= vocab) {
      throw Error(who + ": target " + std::to_string(t) + " of row " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    if (t >= start && t < start + vp) ctx.local_target[static_cast<std::size_t>(i)] = t - start;
  }
  Tensor pred, e, se;
  if (dev) {
    pred = vocab_pred(*dev, x, m, Tensor::from_vector(ctx.local_target, row_shape));
  } else {
    pred = Tensor::zeros(row_shape);
    const float* xs = x.data<float>();
    const float* mx = m.data<float>();
    float* pr = pred.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t t = ctx.local_target[static_cast<std::size_t>(i)];
      pr[i] = t >= 0 ? xs[i * vp + t] - mx[i] : 0.0f;
    }
  }
  all_reduce(pred, tp, runtime::ReduceOp::SUM);

  if (dev) {
    std::tie(e, se) = vocab_exp(*dev, x, m);
  } else {
    e = Tensor::zeros(x.shape());
    se = Tensor::zeros(row_shape);
    const float* xs = x.data<float>();
    const float* mx = m.data<float>();
    float* ex = e.data<float>();
    float* s = se.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (std::int64_t j = 0; j < vp; ++j) {
        const float v = std::exp(xs[i * vp + j] - mx[i]);
        ex[i * vp + j] = v;
        sum += v;
      }
      s[i] = sum;
    }
  }
  runtime::charge({"vocab_parallel_cross_entropy_exp", 3.0 * elems, bytes, DType::f32});
  all_reduce(se, tp, runtime::ReduceOp::SUM);

  Tensor loss;
  if (dev) {
    std::tie(ctx.softmax, loss) = vocab_softmax(*dev, e, se, pred);
  } else {
    loss = Tensor::zeros(row_shape);
    ctx.softmax = e;  // normalised in place
    const float* s = se.data<float>();
    const float* pr = pred.data<float>();
    float* ls = loss.data<float>();
    float* sm = ctx.softmax.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      ls[i] = std::log(s[i]) - pr[i];
      for (std::int64_t j = 0; j < vp; ++j) sm[i * vp + j] = sm[i * vp + j] / s[i];
    }
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
  runtime::charge(
      {"vocab_parallel_cross_entropy_backward", 2.0 * static_cast<double>(ctx.softmax.numel()), bytes, DType::f32});
  if (!ctx.softmax.has_data() || !dloss.has_data()) {
    return Tensor::shape_only(ctx.softmax.shape(), ctx.logits_dtype);
  }
  const std::int64_t vp = ctx.softmax.size(-1);
  const std::int64_t n = runtime::shape_numel(row_shape);
  if (runtime::Device* dev = runtime::device_for({&ctx.softmax, &dloss})) {
    const Tensor local = Tensor::from_vector(ctx.local_target, row_shape);
    return vocab_backward(*dev, ctx.softmax, local, dloss, DType::f32).to(ctx.logits_dtype);
  }
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

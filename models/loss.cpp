#include "models/loss.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "models/loss_kernels.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"
#include "sim/error.h"
#include "tp/cross_entropy.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;

namespace {

using runtime::Device;
using runtime::launch;
using In = runtime::DeviceInput;
using Ids = runtime::DeviceIndices;
using Out = runtime::DeviceOutput;
namespace k = kernels;

// Each row's loss (f64, 0 where ignored) and dx, on a compute device.
struct LossRows {
  Tensor row_loss, dx;
};

LossRows loss_sum_rows(Device& dev, const Tensor& x, const Tensor& labels, std::int64_t ignore_index, double inv,
                       DType dx_dtype) {
  In X(dev, x);
  Ids Lb(dev, labels);
  const i64 rows = x.size(0), cols = x.size(1);
  Out Row(dev, {rows}, DType::f64), DX(dev, x.shape(), dx_dtype);
  launch(dev,
         k::LossSumRowKernel{X.get(), x.dtype(), Lb.get(), Row.as<double>(), DX.ptr, dx_dtype, cols, ignore_index, inv},
         rows);
  return {Row.t, DX.t};
}

// The labels as int64 values; none for shape-only labels (a shape-only training step's): they
// count no token, and the loss is NaN anyway.
std::vector<i64> label_values(const Tensor& labels_t) {
  return labels_t.has_data() ? labels_t.to(DType::i64).to_vector<i64>() : std::vector<i64>();
}

// The vocab-parallel loss: ignored rows take target 0 for the shared reduction and are dropped
// from the sum and the gradient.
LossSum vocab_parallel_sum(const Tensor& logits, const Tensor& labels_t, double total_tokens,
                           const runtime::ProcessGroup& tp) {
  const std::vector<i64> labels = label_values(labels_t);
  LossSum r;
  std::vector<i64> targets(labels.size(), 0);
  std::vector<float> dloss(labels.size(), 0.0f);
  const double inv = total_tokens > 0 ? 1.0 / total_tokens : 0.0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == kIgnoreIndex) continue;
    ++r.tokens;
    targets[i] = labels[i];
    dloss[i] = static_cast<float>(inv);
  }
  const i64 rows = logits.size(0);
  tp::CrossEntropyContext ctx;
  const Tensor t = labels_t.has_data() ? Tensor::from_vector(targets, {rows}) : Tensor::shape_only({rows}, DType::i64);
  const Tensor loss = tp::vocab_parallel_cross_entropy(logits, t, tp, ctx);
  const Tensor d = loss.has_data() ? Tensor::from_vector(dloss, {rows}) : Tensor::shape_only({rows}, DType::f32);
  r.dlogits = tp::vocab_parallel_cross_entropy_backward(d, ctx);
  if (!loss.has_data()) {
    r.sum = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  const std::vector<float> per_token = loss.to_vector<float>();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != kIgnoreIndex) r.sum += static_cast<double>(per_token[i]);
  }
  return r;
}

}  // namespace

LossSum cross_entropy_sum(const Tensor& logits, const Tensor& labels_t, double total_tokens,
                          const runtime::ProcessGroup* vocab_tp) {
  if (logits.has_data() && !labels_t.has_data())
    throw Error("cross-entropy: labels " + labels_t.str() + " hold no numbers for logits " + logits.str() +
                " that do; give labels with data");
  if (vocab_tp && vocab_tp->size() > 1) return vocab_parallel_sum(logits, labels_t, total_tokens, *vocab_tp);
  const i64 n = logits.size(0), vocab = logits.size(1);
  const std::vector<i64> labels = label_values(labels_t);
  const Tensor lf = logits.to(DType::f32);
  LossSum r;
  for (i64 l : labels) r.tokens += l != kIgnoreIndex ? 1 : 0;
  runtime::charge(
      {"cross_entropy", 4.0 * static_cast<double>(lf.numel()), static_cast<double>(lf.nbytes()), DType::f32});
  runtime::charge({"cross_entropy_backward", 3.0 * static_cast<double>(lf.numel()),
                   2.0 * static_cast<double>(lf.nbytes()), DType::f32});
  if (!lf.has_data()) {
    r.sum = std::numeric_limits<double>::quiet_NaN();
    r.dlogits = Tensor::shape_only(logits.shape(), logits.dtype());
    return r;
  }
  for (std::size_t row = 0; row < labels.size(); ++row) {
    const i64 label = labels[row];
    if (label != kIgnoreIndex && (label < 0 || label >= vocab)) {
      throw Error("cross-entropy: label " + std::to_string(label) + " of token row " + std::to_string(row) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) + "); labels are token ids or " +
                  std::to_string(kIgnoreIndex) + " (ignored)");
    }
  }
  const double inv = total_tokens > 0 ? 1.0 / total_tokens : 0.0;
  if (runtime::Device* dev = runtime::device_for({&lf, &labels_t})) {
    // The same f64 row loop as device kernels; the row losses are added here, in row order.
    const LossRows rows = loss_sum_rows(*dev, lf, labels_t, kIgnoreIndex, inv, DType::f32);
    const std::vector<double> row_loss = rows.row_loss.to_vector<double>();
    for (std::size_t row = 0; row < labels.size(); ++row) {
      if (labels[row] != kIgnoreIndex) r.sum += row_loss[row];
    }
    r.dlogits = rows.dx.to(logits.dtype());
    return r;
  }
  Tensor d = Tensor::zeros(lf.shape(), DType::f32);
  float* dp = d.data<float>();
  const float* x = lf.data<float>();
  for (i64 row = 0; row < n; ++row) {
    const i64 label = labels[static_cast<std::size_t>(row)];
    if (label == kIgnoreIndex) continue;
    const float* xr = x + row * vocab;
    double m = -std::numeric_limits<double>::infinity();
    for (i64 j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(xr[j]));
    double z = 0;
    for (i64 j = 0; j < vocab; ++j) z += std::exp(static_cast<double>(xr[j]) - m);
    const double lse = m + std::log(z);
    r.sum += lse - static_cast<double>(xr[label]);
    for (i64 j = 0; j < vocab; ++j) {
      const double p = std::exp(static_cast<double>(xr[j]) - lse);
      dp[row * vocab + j] = static_cast<float>((p - (j == label ? 1.0 : 0.0)) * inv);
    }
  }
  r.dlogits = d.to(logits.dtype());
  return r;
}

GroupLoss group_cross_entropy(const Tensor& logits, const Tensor& labels, const runtime::ProcessGroup& group,
                              const runtime::ProcessGroup* vocab_tp) {
  // The labelled tokens of the whole group first: each row's gradient is divided by that global
  // count, and the loss is the mean over every labelled token.
  i64 local_tokens = 0;
  for (i64 l : labels.to_vector<i64>()) local_tokens += l != kIgnoreIndex ? 1 : 0;
  Tensor count = Tensor::from_vector(std::vector<double>{static_cast<double>(local_tokens)}, {1}, DType::f64);
  runtime::AllreduceOptions o;
  o.group = group;
  if (group.size() > 1) runtime::all_reduce(count, o).wait();
  const double total = count.to_vector<double>()[0];
  LossSum ls = cross_entropy_sum(logits, labels, total, vocab_tp);
  Tensor sum = Tensor::from_vector(std::vector<double>{ls.sum}, {1}, DType::f64);
  if (group.size() > 1) runtime::all_reduce(sum, o).wait();
  GroupLoss r;
  r.tokens = static_cast<i64>(total);
  r.loss =
      logits.has_data() && total > 0 ? sum.to_vector<double>()[0] / total : std::numeric_limits<double>::quiet_NaN();
  r.dlogits = std::move(ls.dlogits);
  return r;
}

}  // namespace ranksim::models

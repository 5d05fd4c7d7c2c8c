// The shape ops of runtime/tensor/ops.h: cat (a copy) and split (views), each the other's backward.
#include "runtime/tensor/ops.h"

#include <string>
#include <vector>

#include "runtime/device/kernel.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops_common.h"

namespace ranksim::runtime {

using namespace ops_common;  // ops_common.h: the argument checks and dtype plumbing of every op

// --- cat / split ----------------------------------------------------------------------------

namespace {

i64 wrap(const char* op, const Tensor& t, i64 dim) {
  if (dim < -t.dim() || dim >= t.dim()) {
    fail(op, "dimension " + std::to_string(dim) + " is out of range for " + t.str());
  }
  return dim < 0 ? dim + t.dim() : dim;
}

Tensor cat_impl(const char* op, const std::vector<Tensor>& xs, i64 dim) {
  if (xs.empty()) fail(op, "needs at least one tensor");
  for (const Tensor& x : xs) require_defined(op, x, "input");
  const Tensor& first = xs[0];
  const i64 d = wrap(op, first, dim);
  Shape out_shape = first.shape();
  out_shape[static_cast<std::size_t>(d)] = 0;
  bool data = true;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.dtype() != first.dtype() || x.dim() != first.dim()) {
      fail(op, "input " + std::to_string(i) + " " + x.str() + " differs in dtype or rank from " + first.str());
    }
    Shape s = x.shape();
    s[static_cast<std::size_t>(d)] = 0;
    if (s != out_shape) {
      fail(op, "input " + std::to_string(i) + " " + x.str() + " differs from " + first.str() + " outside dimension " +
                   std::to_string(d));
    }
    data = data && x.has_data();
  }
  i64 total = 0;
  for (const Tensor& x : xs) total += x.size(d);
  out_shape[static_cast<std::size_t>(d)] = total;
  Device* dev = nullptr;
  if (data && is_floating(first.dtype()) && first.dim() <= kernels::kMaxDims) {
    std::vector<const Tensor*> inputs;
    for (const Tensor& x : xs) inputs.push_back(&x);
    dev = device_for(inputs);
  }
  for (const Tensor& x : xs) {
    if (!dev) x.wait_pending();
  }
  Tensor out;
  if (dev) {
    out = device_ops::cat(*dev, xs, d, out_shape);
  } else if (!data) {
    out = Tensor::shape_only(out_shape, first.dtype());
  } else {
    out = Tensor::zeros(out_shape, first.dtype());
    ScopedCostSink quiet(nullptr);  // the pieces' copies are this op's, charged once below
    i64 offset = 0;
    for (const Tensor& x : xs) {
      out.narrow(d, offset, x.size(d)).copy_(x);
      offset += x.size(d);
    }
  }
  charge({op, 0.0, 2.0 * bytes(out), first.dtype()});
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim) { return cat_impl("cat", xs, dim); }

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  const char* op = "split";
  require_defined(op, x, "x");
  const i64 d = wrap(op, x, dim);
  i64 total = 0;
  for (i64 s : sizes) {
    if (s < 0) fail(op, "negative piece size " + std::to_string(s));
    total += s;
  }
  if (total != x.size(d)) {
    fail(op, "piece sizes sum to " + std::to_string(total) + " but dimension " + std::to_string(d) + " of " + x.str() +
                 " has " + std::to_string(x.size(d)));
  }
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  i64 offset = 0;
  for (i64 s : sizes) {
    pieces.push_back(x.narrow(d, offset, s));
    offset += s;
  }
  return pieces;
}

std::vector<Tensor> cat_backward(const Tensor& dy, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  return split(dy, sizes, dim);
}

Tensor split_backward(const std::vector<Tensor>& dys, std::int64_t dim) { return cat_impl("split_backward", dys, dim); }

}  // namespace ranksim::runtime

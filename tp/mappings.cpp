#include "tp/mappings.h"

#include <cstdint>
#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::tp {

using runtime::ProcessGroup;
using runtime::Shape;
using runtime::Tensor;

namespace {

void require_dim(const Tensor& x, const char* who) {
  if (!x.defined()) throw Error(std::string(who) + ": the tensor is undefined");
  if (x.dim() < 1) throw Error(std::string(who) + ": " + x.str() + " needs at least one dim");
}

std::int64_t piece(const Tensor& x, int dim, int p, const char* who) {
  const std::int64_t n = x.size(dim);
  if (n % p != 0) {
    throw Error(std::string(who) + ": dimension " + std::to_string(dim) + " of " + x.str() + " (" + std::to_string(n) +
                ") is not divisible by the tensor-parallel size " + std::to_string(p));
  }
  return n / p;
}

}  // namespace

Tensor split_along(const Tensor& x, const ProcessGroup& g, int dim, const char* who) {
  require_dim(x, who);
  const int p = g.size();
  if (p == 1) return x;
  const int d = dim < 0 ? static_cast<int>(x.dim()) + dim : dim;
  const std::int64_t n = piece(x, d, p, who);
  return x.narrow(d, g.rank() * n, n).contiguous();
}

CommResult all_reduce_tp(const Tensor& x, const ProcessGroup& g, bool async_op) {
  if (g.size() == 1) return {x, runtime::Work()};
  runtime::AllreduceOptions o;
  o.group = g;
  o.async_op = async_op;
  runtime::Work w = runtime::all_reduce(x, o);
  return {x, w};
}

CommResult all_gather_dim0(const Tensor& x, const ProcessGroup& g, bool async_op) {
  require_dim(x, "all_gather_dim0");
  const int p = g.size();
  if (p == 1) return {x, runtime::Work()};
  const Tensor in = x.contiguous();
  Shape shape = in.shape();
  shape[0] *= p;
  Tensor out = in.has_data() ? Tensor::zeros(shape, in.dtype()) : Tensor::shape_only(shape, in.dtype());
  runtime::AllgatherOptions o;
  o.group = g;
  o.async_op = async_op;
  runtime::Work w = runtime::all_gather_into_tensor(out, in, o);
  return {out, w};
}

CommResult reduce_scatter_dim0(const Tensor& x, const ProcessGroup& g, bool async_op) {
  require_dim(x, "reduce_scatter_dim0");
  const int p = g.size();
  if (p == 1) return {x, runtime::Work()};
  const Tensor in = x.contiguous();
  Shape shape = in.shape();
  shape[0] = piece(in, 0, p, "reduce_scatter_dim0");
  Tensor out = in.has_data() ? Tensor::zeros(shape, in.dtype()) : Tensor::shape_only(shape, in.dtype());
  runtime::ReduceScatterOptions o;
  o.group = g;
  o.async_op = async_op;
  runtime::Work w = runtime::reduce_scatter_tensor(out, in, o);
  return {out, w};
}

Tensor all_gather_last_dim(const Tensor& x, const ProcessGroup& g) {
  require_dim(x, "all_gather_last_dim");
  const int p = g.size();
  if (p == 1) return x;
  // Gather [p, ..., n] along dim 0, then move the rank dim next to the last one.
  const Tensor in = x.contiguous();
  Shape stacked = {1};
  for (std::int64_t d : in.shape()) stacked.push_back(d);
  const Tensor gathered = all_gather_dim0(in.view(stacked), g, false).tensor;
  const auto k = static_cast<std::int64_t>(in.dim());
  std::vector<std::int64_t> order;
  for (std::int64_t i = 1; i < k; ++i) order.push_back(i);
  order.push_back(0);
  order.push_back(k);
  Shape out = in.shape();
  out.back() *= p;
  return gathered.permute(order).contiguous().view(out);
}

Tensor copy_to_tp(const Tensor& x, const ProcessGroup&) { return x; }

Tensor copy_to_tp_backward(const Tensor& dy, const ProcessGroup& g) {
  return all_reduce_tp(dy.contiguous(), g, false).tensor;
}

Tensor reduce_from_tp(const Tensor& x, const ProcessGroup& g) { return all_reduce_tp(x.contiguous(), g, false).tensor; }

Tensor reduce_from_tp_backward(const Tensor& dy, const ProcessGroup&) { return dy; }

Tensor scatter_to_tp(const Tensor& x, const ProcessGroup& g) { return split_along(x, g, -1, "scatter_to_tp"); }

Tensor scatter_to_tp_backward(const Tensor& dy, const ProcessGroup& g) { return all_gather_last_dim(dy, g); }

Tensor gather_from_tp(const Tensor& x, const ProcessGroup& g) { return all_gather_last_dim(x, g); }

Tensor gather_from_tp_backward(const Tensor& dy, const ProcessGroup& g) {
  return split_along(dy, g, -1, "gather_from_tp_backward");
}

Tensor scatter_to_sp(const Tensor& x, const ProcessGroup& g) { return split_along(x, g, 0, "scatter_to_sp"); }

Tensor scatter_to_sp_backward(const Tensor& dy, const ProcessGroup& g) { return all_gather_dim0(dy, g, false).tensor; }

Tensor gather_from_sp(const Tensor& x, const ProcessGroup& g) { return all_gather_dim0(x, g, false).tensor; }

Tensor gather_from_sp_backward(const Tensor& dy, const ProcessGroup& g, bool tensor_parallel_output_grad) {
  if (tensor_parallel_output_grad) return reduce_scatter_dim0(dy, g, false).tensor;
  return split_along(dy, g, 0, "gather_from_sp_backward");
}

Tensor reduce_scatter_to_sp(const Tensor& x, const ProcessGroup& g) { return reduce_scatter_dim0(x, g, false).tensor; }

Tensor reduce_scatter_to_sp_backward(const Tensor& dy, const ProcessGroup& g) {
  return all_gather_dim0(dy, g, false).tensor;
}

}  // namespace ranksim::tp

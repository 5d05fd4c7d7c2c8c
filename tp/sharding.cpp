#include "tp/sharding.h"

#include <string>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/mappings.h"

namespace ranksim::tp {

using runtime::Tensor;

namespace {

int wrap_dim(const Tensor& t, int dim, const char* who) {
  const int d = dim < 0 ? static_cast<int>(t.dim()) + dim : dim;
  if (d < 0 || d >= t.dim()) {
    throw Error(std::string(who) + ": dimension " + std::to_string(dim) + " is out of range for " + t.str());
  }
  return d;
}

}  // namespace

Tensor shard_of(const Tensor& master, int dim, int p, int r, int stride, runtime::DType dtype) {
  const char* who = "shard_of";
  if (!master.defined()) throw Error("shard_of: the master tensor is undefined");
  const int d = wrap_dim(master, dim, who);
  if (p < 1 || r < 0 || r >= p || stride < 1) {
    throw Error("shard_of: rank " + std::to_string(r) + " of " + std::to_string(p) + " with stride " +
                std::to_string(stride) + " is not a valid partition");
  }
  const std::int64_t n = master.size(d);
  if (n % (static_cast<std::int64_t>(p) * stride) != 0) {
    throw Error("shard_of: dimension " + std::to_string(d) + " of " + master.str() + " (" + std::to_string(n) +
                ") is not divisible by tp size " + std::to_string(p) + " x stride " + std::to_string(stride));
  }
  // Initialisation runs on the host before training: it costs no device time.
  runtime::ScopedCostSink quiet(nullptr);
  const std::int64_t piece = n / (static_cast<std::int64_t>(p) * stride);
  std::vector<Tensor> pieces;
  for (int j = 0; j < stride; ++j) {
    pieces.push_back(master.narrow(d, (static_cast<std::int64_t>(j) * p + r) * piece, piece));
  }
  Tensor joined = pieces.size() == 1 ? pieces[0].clone() : runtime::cat(pieces, d);
  return joined.to(dtype);
}

Tensor gather_full(const Tensor& shard, int dim, const runtime::ProcessGroup& g, int stride) {
  const char* who = "gather_full";
  if (!shard.defined()) throw Error("gather_full: the shard is undefined");
  const int d = wrap_dim(shard, dim, who);
  const int p = g.size();
  if (p == 1) return shard;
  if (stride < 1 || shard.size(d) % stride != 0) {
    throw Error("gather_full: dimension " + std::to_string(d) + " of " + shard.str() + " is not divisible by stride " +
                std::to_string(stride));
  }
  runtime::Shape stacked = {1};
  for (std::int64_t n : shard.shape()) stacked.push_back(n);
  const Tensor gathered = all_gather_dim0(shard.contiguous().view(stacked), g, false).tensor;
  const std::int64_t piece = shard.size(d) / stride;
  std::vector<Tensor> pieces;
  for (int i = 0; i < p * stride; ++i) {
    pieces.push_back(gathered.select(0, i % p).narrow(d, (i / p) * piece, piece));
  }
  return runtime::cat(pieces, d);
}

Tensor master_normal(const runtime::Shape& shape, std::uint64_t seed, double stddev) {
  return Tensor::randn(shape, seed, 0.0, stddev, runtime::DType::f32);
}

void Parameter::accumulate(const Tensor& g) {
  // a released FSDP value (dp_slice kept) is checked against its shape and the slice's dtype
  const bool released = !value.defined() && dp_slice.defined();
  const runtime::Shape& shape = released ? value_shape : value.shape();
  const runtime::DType dtype = released ? dp_slice.dtype() : value.dtype();
  if (g.shape() != shape || g.dtype() != dtype) {
    throw Error("Parameter::accumulate: gradient " + g.str() + " does not match the parameter " + value.str());
  }
  grad = grad.defined() ? runtime::add(grad, g) : g;
  runtime::retag_memory(grad, runtime::MemoryKind::gradients);
}

Tensor Parameter::full_value(const runtime::ProcessGroup& g) const {
  if (partition_dim < 0) return value;
  return gather_full(value, partition_dim, g, partition_stride);
}

Tensor Parameter::full_grad(const runtime::ProcessGroup& g) const {
  if (!grad.defined()) throw Error("Parameter::full_grad: no gradient yet (run a backward first)");
  if (partition_dim < 0) return grad;
  return gather_full(grad, partition_dim, g, partition_stride);
}

}  // namespace ranksim::tp

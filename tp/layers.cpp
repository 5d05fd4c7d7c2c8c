#include "tp/layers.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/comm_overlap.h"
#include "tp/mappings.h"

namespace ranksim::tp {

using runtime::Shape;
using runtime::Tensor;

namespace {

void require_master(const char* who, const Tensor& w, std::int64_t dims) {
  if (!w.defined() || w.dim() != dims || !runtime::is_floating(w.dtype())) {
    throw Error(std::string(who) + ": the master weight must be a floating " + std::to_string(dims) +
                "-d tensor, got " + (w.defined() ? w.str() : "undefined"));
  }
}

void require_divisible(const char* who, const char* what, std::int64_t n, int p) {
  if (n % p != 0) {
    throw Error(std::string(who) + ": " + what + " " + std::to_string(n) +
                " is not divisible by the tensor-parallel size " + std::to_string(p));
  }
}

// A column-parallel bias is split like the weight's rows, with the same partition stride (a fused
// QKV master of stride 3 gives each rank the biases of its own q, k and v rows).
Parameter make_bias(const char* who, const Tensor& master_bias, std::int64_t out, int dim, int p, int r,
                    runtime::DType dtype, int stride = 1) {
  Parameter b;
  b.partition_dim = dim;
  b.partition_stride = dim < 0 ? 1 : stride;
  if (!master_bias.defined()) {
    b.value = Tensor::zeros({dim < 0 ? out : out / p}, dtype);
    runtime::retag_memory(b.value, runtime::MemoryKind::parameters);
    return b;
  }
  if (master_bias.shape() != Shape{out}) {
    throw Error(std::string(who) + ": the master bias " + master_bias.str() + " must have shape [" +
                std::to_string(out) + "]");
  }
  b.value = dim < 0 ? shard_of(master_bias, 0, 1, 0, 1, dtype) : shard_of(master_bias, 0, p, r, stride, dtype);
  runtime::retag_memory(b.value, runtime::MemoryKind::parameters);
  return b;
}

void require_input(const char* who, const Tensor& x, std::int64_t features, runtime::DType dtype) {
  if (!x.defined() || x.dim() < 1 || x.size(-1) != features) {
    throw Error(std::string(who) + ": input " + (x.defined() ? x.str() : "undefined") + " must have " +
                std::to_string(features) + " features in its last dim");
  }
  if (x.dtype() != dtype) {
    throw Error(std::string(who) + ": input " + x.str() + " must have the layer's dtype " + runtime::dtype_name(dtype));
  }
}

Tensor rows(const Tensor& t) { return t.reshape({-1, t.size(-1)}); }

// The gradient of a bias added over t's leading dims, as a tensor of its own.
Tensor bias_grad(const Tensor& dy, std::int64_t n) {
  Tensor db = runtime::add_backward(dy, {n}).db;
  return db.shares_storage(dy) ? db.clone() : db;
}

}  // namespace

// --- ColumnParallelLinear ----------------------------------------------------------------------

ColumnParallelLinear::ColumnParallelLinear(const Tensor& master_weight, runtime::ProcessGroup tp,
                                           const ColumnParallelLinearOptions& opts, const Tensor& master_bias)
    : tp_(std::move(tp)), p_(tp_.size()), opts_(opts) {
  const char* who = "ColumnParallelLinear";
  require_master(who, master_weight, 2);
  out_ = master_weight.size(0);
  in_ = master_weight.size(1);
  require_divisible(who, "output size", out_, p_);
  if (opts_.sequence_parallel && opts_.gather_output) {
    throw Error("ColumnParallelLinear: gather_output cannot be combined with sequence_parallel");
  }
  if (opts_.comm_overlap && !opts_.sequence_parallel) {
    throw Error(
        "ColumnParallelLinear: comm_overlap pipelines the sequence-parallel all-gather; it needs "
        "sequence_parallel");
  }
  const int r = tp_.rank();
  weight_.value = shard_of(master_weight, 0, p_, r, opts_.stride, opts_.dtype);
  runtime::retag_memory(weight_.value, runtime::MemoryKind::parameters);
  weight_.partition_dim = 0;
  weight_.partition_stride = opts_.stride;
  if (opts_.bias) bias_ = make_bias(who, master_bias, out_, 0, p_, r, opts_.dtype, opts_.stride);
}

LinearOutput ColumnParallelLinear::forward(const Tensor& x, LinearContext& ctx) const {
  require_input("ColumnParallelLinear::forward", x, in_, opts_.dtype);
  ctx.input = x;
  Tensor y;
  if (opts_.comm_overlap) {
    y = all_gather_matmul(
            x,
            [&](const Tensor& rows) { return std::vector<Tensor>{runtime::matmul(rows, weight_.value, false, true)}; },
            tp_)
            .outputs.front();
  } else {
    const Tensor total = opts_.sequence_parallel ? all_gather_dim0(x, tp_, false).tensor : copy_to_tp(x, tp_);
    y = runtime::matmul(total, weight_.value, false, true);
  }
  LinearOutput out;
  if (opts_.bias) {
    if (opts_.skip_bias_add) {
      out.bias = bias_.value;
    } else {
      y = runtime::add(y, bias_.value);
    }
  }
  out.output = opts_.gather_output ? gather_from_tp(y, tp_) : y;
  return out;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy_in, const LinearContext& ctx, const Tensor& dbias) {
  const Tensor dy = opts_.gather_output ? gather_from_tp_backward(dy_in, tp_) : dy_in;
  // Megatron's order: start the input all-gather (SP), compute dX, start dX's reduction, and
  // compute the weight gradient while it runs.
  CommResult total{ctx.input, runtime::Work()};
  if (opts_.sequence_parallel) total = all_gather_dim0(ctx.input, tp_, true);
  Tensor dx = runtime::matmul(dy, weight_.value);
  CommResult reduced{dx, runtime::Work()};
  if (opts_.sequence_parallel) {
    total.wait();
    reduced = reduce_scatter_dim0(dx, tp_, true);
  } else {
    reduced = all_reduce_tp(dx, tp_, true);  // copy_to_tp's backward
  }
  weight_.accumulate(runtime::matmul(rows(dy), rows(total.tensor), true, false));
  if (opts_.bias) {
    if (!opts_.skip_bias_add) {
      bias_.accumulate(bias_grad(dy, out_ / p_));
    } else if (dbias.defined()) {
      bias_.accumulate(dbias);
    }
  }
  reduced.wait();
  return reduced.tensor;
}

// --- RowParallelLinear -------------------------------------------------------------------------

RowParallelLinear::RowParallelLinear(const Tensor& master_weight, runtime::ProcessGroup tp,
                                     const RowParallelLinearOptions& opts, const Tensor& master_bias)
    : tp_(std::move(tp)), p_(tp_.size()), opts_(opts) {
  const char* who = "RowParallelLinear";
  require_master(who, master_weight, 2);
  out_ = master_weight.size(0);
  in_ = master_weight.size(1);
  require_divisible(who, "input size", in_, p_);
  if (opts_.sequence_parallel && !opts_.input_is_parallel) {
    throw Error("RowParallelLinear: sequence_parallel requires input_is_parallel");
  }
  if (opts_.comm_overlap && !opts_.sequence_parallel) {
    throw Error(
        "RowParallelLinear: comm_overlap pipelines the sequence-parallel reduce-scatter; it needs "
        "sequence_parallel");
  }
  weight_.value = shard_of(master_weight, 1, p_, tp_.rank(), opts_.stride, opts_.dtype);
  runtime::retag_memory(weight_.value, runtime::MemoryKind::parameters);
  weight_.partition_dim = 1;
  weight_.partition_stride = opts_.stride;
  if (opts_.bias) {
    bias_ = make_bias(who, master_bias, out_, -1, p_, tp_.rank(), opts_.dtype);
    bias_.sequence_parallel = opts_.sequence_parallel;
  }
}

LinearOutput RowParallelLinear::forward(const Tensor& x, LinearContext& ctx) const {
  const char* who = "RowParallelLinear::forward";
  Tensor xp = x;
  if (!opts_.input_is_parallel) {
    require_input(who, x, in_, opts_.dtype);
    xp = scatter_to_tp(x, tp_);
  }
  require_input(who, xp, in_ / p_, opts_.dtype);
  ctx.input = xp;
  Tensor y;
  if (opts_.comm_overlap) {
    y = matmul_reduce_scatter(
        xp, [&](const Tensor& rows) { return runtime::matmul(rows, weight_.value, false, true); }, tp_);
  } else {
    const Tensor partial = runtime::matmul(xp, weight_.value, false, true);
    y = opts_.sequence_parallel ? reduce_scatter_to_sp(partial, tp_) : reduce_from_tp(partial, tp_);
  }
  LinearOutput out;
  if (opts_.bias) {
    if (opts_.skip_bias_add) {
      out.bias = bias_.value;
    } else {
      y = runtime::add(y, bias_.value);
    }
  }
  out.output = y;
  return out;
}

Tensor RowParallelLinear::backward(const Tensor& dy, const LinearContext& ctx, const Tensor& dbias) {
  Tensor dy_total, dx;
  if (opts_.comm_overlap) {
    // dY's all-gather pipelined with the dgrad GEMM; the gathered dY is kept for the wgrad GEMM
    GatherMatmul g = all_gather_matmul(
        dy, [&](const Tensor& rows) { return std::vector<Tensor>{runtime::matmul(rows, weight_.value)}; }, tp_, true);
    dx = std::move(g.outputs.front());
    dy_total = std::move(g.total);
  } else {
    dy_total = opts_.sequence_parallel ? reduce_scatter_to_sp_backward(dy, tp_) : reduce_from_tp_backward(dy, tp_);
    dx = runtime::matmul(dy_total, weight_.value);
  }
  weight_.accumulate(runtime::matmul(rows(dy_total), rows(ctx.input), true, false));
  if (opts_.bias) {
    if (!opts_.skip_bias_add) {
      bias_.accumulate(bias_grad(dy, out_));
    } else if (dbias.defined()) {
      bias_.accumulate(dbias);
    }
  }
  return opts_.input_is_parallel ? dx : scatter_to_tp_backward(dx, tp_);
}

// --- VocabParallelEmbedding --------------------------------------------------------------------

VocabParallelEmbedding::VocabParallelEmbedding(const Tensor& master_weight, runtime::ProcessGroup tp,
                                               const VocabParallelEmbeddingOptions& opts)
    : tp_(std::move(tp)), p_(tp_.size()), opts_(opts) {
  const char* who = "VocabParallelEmbedding";
  require_master(who, master_weight, 2);
  vocab_ = master_weight.size(0);
  hidden_ = master_weight.size(1);
  if (vocab_ % p_ != 0) {
    throw Error(std::string(who) + ": vocabulary size " + std::to_string(vocab_) +
                " is not divisible by the tensor-parallel size " + std::to_string(p_) +
                "; pad the vocabulary to a multiple of tp (Megatron pads to a multiple of "
                "make_vocab_size_divisible_by x tp)");
  }
  start_ = tp_.rank() * (vocab_ / p_);
  weight_.value = shard_of(master_weight, 0, p_, tp_.rank(), 1, opts_.dtype);
  runtime::retag_memory(weight_.value, runtime::MemoryKind::parameters);
  weight_.partition_dim = 0;
}

namespace {

// Zeroes the rows of t ([n, H] rows, contiguous, owned) where mask is set. All dtypes have
// all-zero bits for +0.
void zero_masked_rows(const Tensor& t, const std::vector<std::uint8_t>& mask, const char* op) {
  const auto row_bytes = static_cast<std::size_t>(t.size(-1)) * runtime::dtype_size(t.dtype());
  if (t.has_data()) {
    auto* base = static_cast<std::byte*>(t.raw_data());
    for (std::size_t i = 0; i < mask.size(); ++i) {
      if (mask[i]) std::memset(base + i * row_bytes, 0, row_bytes);
    }
  }
  runtime::charge({op, 0.0, 2.0 * static_cast<double>(t.nbytes()), t.dtype()});
}

}  // namespace

Tensor vocab_parallel_lookup(const Tensor& ids, const Tensor& shard, std::int64_t vocab,
                             const runtime::ProcessGroup& tp, EmbeddingContext& ctx) {
  const char* who = "VocabParallelEmbedding::forward";
  if (!ids.defined() || (ids.dtype() != runtime::DType::i64 && ids.dtype() != runtime::DType::i32)) {
    throw Error(std::string(who) + ": ids must be an i64 or i32 tensor");
  }
  const std::int64_t rows = vocab / tp.size(), start = tp.rank() * rows, end = start + rows;
  if (ids.has_data()) {
    std::vector<std::int64_t> v = ids.to_vector<std::int64_t>();
    ctx.masked.assign(v.size(), 0);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0 || v[i] >= vocab) {
        throw Error(std::string(who) + ": id " + std::to_string(v[i]) + " at position " + std::to_string(i) +
                    " is outside the vocabulary of " + std::to_string(vocab));
      }
      const bool owned = v[i] >= start && v[i] < end;
      ctx.masked[i] = owned ? 0 : 1;
      v[i] = owned ? v[i] - start : 0;
    }
    ctx.local_ids = Tensor::from_vector(v, ids.shape());
  } else {
    ctx.masked.clear();
    ctx.local_ids = Tensor::shape_only(ids.shape(), runtime::DType::i64);
  }
  Tensor partial = runtime::embedding(ctx.local_ids, shard);
  if (tp.size() > 1) zero_masked_rows(partial, ctx.masked, "embedding_mask");
  return partial;
}

Tensor vocab_parallel_lookup_backward(const Tensor& dy, const EmbeddingContext& ctx, std::int64_t shard_rows,
                                      int tp_size) {
  if (tp_size > 1) zero_masked_rows(dy, ctx.masked, "embedding_mask_backward");
  return runtime::embedding_backward(dy, ctx.local_ids, shard_rows);
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, EmbeddingContext& ctx) const {
  Tensor partial = vocab_parallel_lookup(ids, weight_.value, vocab_, tp_, ctx);
  return opts_.sequence_parallel ? reduce_scatter_to_sp(partial, tp_) : reduce_from_tp(partial, tp_);
}

void VocabParallelEmbedding::backward(const Tensor& dy, const EmbeddingContext& ctx) {
  // the gathered gradient is ours to modify; the caller's dy is not
  const Tensor full = p_ == 1 ? dy : opts_.sequence_parallel ? reduce_scatter_to_sp_backward(dy, tp_) : dy.clone();
  weight_.accumulate(vocab_parallel_lookup_backward(full, ctx, vocab_ / p_, p_));
}

void allreduce_sequence_parallel_grads(const std::vector<Parameter*>& params, const runtime::ProcessGroup& tp) {
  for (Parameter* p : params) {
    if (p == nullptr || !p->sequence_parallel || !p->grad.defined()) continue;
    p->grad = all_reduce_tp(p->grad.contiguous(), tp, false).tensor;
  }
}

}  // namespace ranksim::tp

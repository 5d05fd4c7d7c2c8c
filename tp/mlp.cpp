#include "tp/mlp.h"

#include <string>

#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/sharding.h"

namespace ranksim::tp {

using runtime::Tensor;

namespace {

// Checked before the linears are built so the message names the MLP's own sizes.
const Tensor& checked_fc1(const Tensor& fc1, const Tensor& fc2, const runtime::ProcessGroup& tp,
                          const ParallelMLPOptions& o) {
  const std::int64_t gates = o.swiglu ? 2 : 1;
  if (!fc1.defined() || !fc2.defined() || fc1.dim() != 2 || fc2.dim() != 2 || fc1.size(0) != gates * fc2.size(1) ||
      fc1.size(1) != fc2.size(0)) {
    throw Error(std::string("ParallelMLP: fc1 must be ") + (o.swiglu ? "[2*ffn, h]" : "[ffn, h]") +
                " and fc2 [h, ffn], got " + (fc1.defined() ? fc1.str() : std::string("undefined")) + " and " +
                (fc2.defined() ? fc2.str() : std::string("undefined")));
  }
  if (fc2.size(1) % tp.size() != 0) {
    throw Error("ParallelMLP: ffn_hidden_size " + std::to_string(fc2.size(1)) +
                " is not divisible by the tensor-parallel size " + std::to_string(tp.size()));
  }
  return fc1;
}

ColumnParallelLinearOptions fc1_options(const ParallelMLPOptions& o) {
  ColumnParallelLinearOptions c;
  c.bias = o.bias;
  c.sequence_parallel = o.sequence_parallel;
  c.stride = o.swiglu ? 2 : 1;  // the gate and up blocks are split alike
  c.comm_overlap = o.comm_overlap;
  c.dtype = o.dtype;
  return c;
}

RowParallelLinearOptions fc2_options(const ParallelMLPOptions& o) {
  RowParallelLinearOptions r;
  r.bias = o.bias;
  r.input_is_parallel = true;
  r.sequence_parallel = o.sequence_parallel;
  r.comm_overlap = o.comm_overlap;
  r.dtype = o.dtype;
  return r;
}

}  // namespace

ParallelMLP::ParallelMLP(const Tensor& fc1_weight, const Tensor& fc2_weight, runtime::ProcessGroup tp,
                         const ParallelMLPOptions& opts, const Tensor& fc1_bias, const Tensor& fc2_bias)
    : swiglu_(opts.swiglu),
      fc1_(checked_fc1(fc1_weight, fc2_weight, tp, opts), tp, fc1_options(opts), fc1_bias),
      fc2_(fc2_weight, tp, fc2_options(opts), fc2_bias) {}

ParallelMLP ParallelMLP::seeded(std::int64_t hidden, std::int64_t ffn, std::uint64_t seed, runtime::ProcessGroup tp,
                                const ParallelMLPOptions& opts, double init_std, double fc2_std) {
  return ParallelMLP(master_normal({opts.swiglu ? 2 * ffn : ffn, hidden}, seed, init_std),
                     master_normal({hidden, ffn}, seed + 1, fc2_std), std::move(tp), opts);
}

Tensor ParallelMLP::forward(const Tensor& x, MLPContext& ctx) const {
  ctx.pre_activation = fc1_.forward(x, ctx.fc1).output;
  const Tensor h = swiglu_ ? runtime::swiglu(ctx.pre_activation) : runtime::gelu(ctx.pre_activation);
  return fc2_.forward(h, ctx.fc2).output;
}

Tensor ParallelMLP::backward(const Tensor& dy, const MLPContext& ctx) {
  const Tensor dh = fc2_.backward(dy, ctx.fc2);
  const Tensor dpre =
      swiglu_ ? runtime::swiglu_backward(dh, ctx.pre_activation) : runtime::gelu_backward(dh, ctx.pre_activation);
  return fc1_.backward(dpre, ctx.fc1);
}

std::vector<std::pair<std::string, Parameter*>> ParallelMLP::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out = {{"fc1.weight", &fc1_.weight()}};
  if (fc1_.has_bias()) out.emplace_back("fc1.bias", &fc1_.bias());
  out.emplace_back("fc2.weight", &fc2_.weight());
  if (fc2_.has_bias()) out.emplace_back("fc2.bias", &fc2_.bias());
  return out;
}

}  // namespace ranksim::tp

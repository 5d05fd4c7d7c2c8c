// ParallelMLP: Megatron's tensor-parallel MLP, h -> ffn -> h, with explicit backward.
//
//   fc1: ColumnParallelLinear [ffn, h] (each rank computes ffn/p of the hidden units)
//   tanh-approximated GELU on the local units (no communication); or, with swiglu, fc1 is the
//        fused gate/up layer [2*ffn, h] (rows: gate, then up) split with partition stride 2, so
//        rank r holds its gate rows and the matching up rows, and fc2 reads silu(gate) * up
//        (Megatron's gated_linear_unit with F.silu)
//   fc2: RowParallelLinear [h, ffn], input_is_parallel (one all-reduce, or a reduce-scatter
//        along dim 0 with sequence parallelism)
// Forward costs one all-reduce (SP: one all-gather + one reduce-scatter); backward one
// all-reduce of dX overlapped with fc1's weight-gradient GEMM (SP: all-gather + reduce-scatter).
//
// Weights come from full fp32 master tensors split by tp/sharding.h's rule, so every TP size
// starts from the same numbers; biases default to zero. Collective over the TP group, like the
// layers it is made of. Errors: ffn not divisible by p (named as ffn_hidden_size).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/layers.h"

namespace ranksim::tp {

struct ParallelMLPOptions {
  bool bias = true;                            // Default: true (both linears)
  bool sequence_parallel = false;              // Default: false
  bool swiglu = false;                         // SwiGLU instead of GELU (fc1 [2*ffn, h]). Default: false
  bool comm_overlap = false;                   // both linears' (tp/layers.h). Default: false
  runtime::DType dtype = runtime::DType::f32;  // parameters and activations. Default: f32
};

struct MLPContext {
  LinearContext fc1, fc2;
  runtime::Tensor pre_activation;  // fc1's output (with bias), [..., ffn/p] ([..., 2*ffn/p] with swiglu)
};

class ParallelMLP {
 public:
  // fc1_weight [ffn, h] ([2*ffn, h] with swiglu), fc2_weight [h, ffn]; biases [ffn] ([2*ffn])
  // and [h], or undefined (zeros).
  ParallelMLP(const runtime::Tensor& fc1_weight, const runtime::Tensor& fc2_weight, runtime::ProcessGroup tp,
              const ParallelMLPOptions& opts = {}, const runtime::Tensor& fc1_bias = {},
              const runtime::Tensor& fc2_bias = {});
  // Seeded masters: fc1 = normal(0, init_std) with seed, fc2 with seed + 1 (Megatron's
  // init_method_normal; pass output_layer_init_method's std as fc2_std).
  static ParallelMLP seeded(std::int64_t hidden, std::int64_t ffn, std::uint64_t seed, runtime::ProcessGroup tp,
                            const ParallelMLPOptions& opts = {}, double init_std = 0.02, double fc2_std = 0.02);

  // x: [..., h] ([s/p, ..., h] with sequence parallelism); output likewise.
  runtime::Tensor forward(const runtime::Tensor& x, MLPContext& ctx) const;
  // Returns dx; accumulates the four parameter gradients.
  runtime::Tensor backward(const runtime::Tensor& dy, const MLPContext& ctx);

  ColumnParallelLinear& fc1() { return fc1_; }
  RowParallelLinear& fc2() { return fc2_; }
  const ColumnParallelLinear& fc1() const { return fc1_; }
  const RowParallelLinear& fc2() const { return fc2_; }
  // "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias" (biases only when enabled).
  std::vector<std::pair<std::string, Parameter*>> named_parameters();

 private:
  bool swiglu_ = false;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace ranksim::tp

// Rotary position embedding (RoPE), rotate-half form, with its backward.
//
// For a head of size d (even) and a token at position p, with half = d/2 and
// theta_i = p * base^(-2i/d) for i in [0, half):
//   y[i]        = x[i] cos(theta_i) - x[i + half] sin(theta_i)
//   y[i + half] = x[i + half] cos(theta_i) + x[i] sin(theta_i)
// (x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1], as GPT-NeoX, Llama and
// TransformerEngine's non-interleaved RoPE). The backward is the inverse rotation of dy.
// Angles and their sines and cosines are computed in double and rounded to float (double for f64
// tensors); the products are computed in float (double) and rounded once to the tensor's dtype.
//
// Positions are per token and explicit, so a CP rank passes the global positions of its local
// tokens (cp/partition.h) and gets the same numbers as the single-rank run.
// Shape-only inputs give shape-only outputs and are charged the same ("rope", 6 flops per element).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ranksim::models {

// x: [tokens, heads, d], floating, d even; positions: one per token, >= 0.
// Errors (ranksim::Error naming the sizes) otherwise; a negative position only when x holds data
// (a shape-only result does not depend on the positions, and is not worth a pass over them).
runtime::Tensor rope(const runtime::Tensor& x, const std::vector<std::int64_t>& positions, double base = 10000.0);
// The gradient of x given dy (x's shape).
runtime::Tensor rope_backward(const runtime::Tensor& dy, const std::vector<std::int64_t>& positions,
                              double base = 10000.0);

}  // namespace ranksim::models

// Deterministic inputs for tests: seeded random tensors, and exact-sum tensors whose sums come out
// with the same bits in any order.
//
// Seeded: element i of a tensor depends only on (seed, i) (runtime::Tensor::uniform / randn), so
// every rank that builds the same tensor from the same seed holds the same bits, on every
// machine; a rank takes its shard by slicing the full tensor. seed_for names seeds.
//
// Exact-sum: small integers stored as floats. A sum of n of them stays an integer below 2^24 in
// magnitude (f32's exact range) while n * max(|low|, |high|) < 2^24, and a dot product of two
// such vectors while n * max^2 < 2^24, so every reduction order (ring, tree, any TP split) gives
// the same bits: compare bitwise even across ranks' sums. For bf16 and f16 the exact range is
// 2^8 and 2^11.
//
// Example:
//   Tensor x = seeded_normal({8, 16}, seed_for("x"));        // same bits on every rank
//   Tensor w = exact_sum_ints({32, 16}, seed_for("w"));      // integers in [-3, 3]
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/tensor/tensor.h"

namespace ranksim::testing {

// Normal(mean, stddev) values. REQUIRES: a floating dtype.
runtime::Tensor seeded_normal(const runtime::Shape& shape, std::uint64_t seed,
                              runtime::DType dtype = runtime::DType::f32, double mean = 0.0, double stddev = 1.0);
// Uniform in [low, high). REQUIRES: a floating dtype, low < high.
runtime::Tensor seeded_uniform(const runtime::Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0,
                               runtime::DType dtype = runtime::DType::f32);
// Integers drawn uniformly from [low, high], in dtype. REQUIRES: low <= high.
runtime::Tensor exact_sum_ints(const runtime::Shape& shape, std::uint64_t seed, int low = -3, int high = 3,
                               runtime::DType dtype = runtime::DType::f32);
// A seed from a name and an index (FNV-1a, 64 bit): seed_for("w", layer). The same on every
// machine and run.
std::uint64_t seed_for(std::string_view name, std::uint64_t index = 0);

}  // namespace ranksim::testing

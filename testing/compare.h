// Comparing tensors in tests: bit for bit, or within a stated tolerance, naming the first element
// that differs (rank, tensor, index, both values).
//
// Bitwise means the same value after an exact widening to double, so +0 and -0 differ and two
// NaNs are equal; f32, f64, bf16, f16 and integers below 2^53 widen exactly. Within a tolerance,
// element i passes when |actual - expected| <= abs + rel * |expected| (both NaN passes; one NaN
// fails). Shapes and dtypes must match exactly; a difference there is reported instead of an
// element. Tensors are read on the host (their data must be readable: not shape-only).
//
// Example:
//   EXPECT_TRUE(ranksim::testing::tensors_match(expected, actual));                      // bitwise
//   EXPECT_TRUE(ranksim::testing::tensors_match(expected, actual, Tolerance::within(1e-6, 1e-5)));
//   // on failure: rank 1, tensor "y", index 5 (at [1, 1]): expected 3, got 4 (|diff| 1 > 0)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/tensor/tensor.h"

namespace ranksim::testing {

struct Tolerance {
  double abs = 0.0;     // Default: 0
  double rel = 0.0;     // Default: 0
  bool bitwise = true;  // Default: true; within() turns it off

  static Tolerance exact() { return {}; }
  // REQUIRES: abs >= 0, rel >= 0.
  static Tolerance within(double abs, double rel = 0.0) { return {abs, rel, false}; }
  std::string describe() const;  // "bitwise", "abs 1e-06 + rel 1e-05"
};

// The first difference between two tensors.
struct Mismatch {
  int rank = -1;       // -1 when the comparison was not of a rank's output
  std::string tensor;  // the name given to the comparison
  // Flat row-major index of the first differing element and its coordinates; -1 and empty when
  // the shapes or dtypes differ (then `what` says how).
  std::int64_t index = -1;
  std::vector<std::int64_t> coords;
  double expected = 0.0;
  double actual = 0.0;
  std::string what;  // set for a shape or dtype difference, empty otherwise
  // One line naming everything above, with values printed to round-trip (17 digits).
  std::string describe(const Tolerance& tol) const;
};

// The first element where `actual` differs from `expected` beyond `tol`; nullopt when none.
// rank and name only label the result.
std::optional<Mismatch> first_mismatch(const runtime::Tensor& expected, const runtime::Tensor& actual,
                                       const Tolerance& tol = {}, int rank = -1, const std::string& name = "");

// As first_mismatch, as a GoogleTest assertion result (use with EXPECT_TRUE / ASSERT_TRUE).
::testing::AssertionResult tensors_match(const runtime::Tensor& expected, const runtime::Tensor& actual,
                                         const Tolerance& tol = {}, int rank = -1, const std::string& name = "");

}  // namespace ranksim::testing

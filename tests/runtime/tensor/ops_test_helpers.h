// What the tests of runtime/tensor/ops.h (tests/runtime/tensor/ops_*_test.cpp) share: the
// tolerances of their float64 references, the element-by-element comparison, central finite
// differences, and a cost sink that records every charge.
//
// Tolerances come from first-order rounding-error analysis with u the unit roundoff of the
// arithmetic (2^-24 for f32 and for bf16/f16 inputs, which compute in f32; 2^-53 for f64) plus, for
// bf16 outputs, the final rounding (at most 2^-8 relative). The references themselves are computed
// in double from the exact input values, so their own error (about 2^-53 relative) is negligible
// next to the f32 bounds; where an f64 op is checked too, the same bound in 2^-53 is added for it. The backward
// references use formulations different from the ops' (full Jacobians, sums written per element), and each backward is
// also checked against central finite differences in f64.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::ops_testing {

inline constexpr double kU32 = 0x1p-24;   // unit roundoff of f32 arithmetic
inline constexpr double kU64 = 0x1p-53;   // unit roundoff of f64 arithmetic (the references' own)
inline constexpr double kUBf16 = 0x1p-8;  // relative rounding error bound of a bf16 result
inline constexpr double kGeluC = 0.7978845608028654;
inline constexpr double kGeluA = 0.044715;

inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

inline double gamma(double n) { return n * kU32 / (1 - n * kU32); }

// The unit roundoff of an op's arithmetic on inputs of dtype (f64 computes in double, the others in f32).
inline double unit_roundoff(DType dtype) { return dtype == DType::f64 ? kU64 : kU32; }

// Compares element by element; reports the worst violation with its index.
inline void expect_within(const std::vector<double>& got, const std::vector<double>& ref,
                          const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  ASSERT_EQ(tol.size(), ref.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - ref[i]), tol[i])
        << what << " element " << i << ": got " << got[i] << ", want " << ref[i];
  }
}

struct RecordingSink : CostSink {
  std::vector<OpCost> charges;
  void charge(const OpCost& c) override { charges.push_back(c); }
};

// Central differences of a scalar function of x (f64), element by element.
inline std::vector<double> numeric_grad(const std::function<double(const Tensor&)>& f, const Tensor& x) {
  const double h = 1e-5;
  std::vector<double> g(static_cast<std::size_t>(x.numel()));
  const std::vector<double> base = vals(x);
  for (std::size_t i = 0; i < g.size(); ++i) {
    std::vector<double> p = base, m = base;
    p[i] += h;
    m[i] -= h;
    g[i] = (f(Tensor::from_vector(p, x.shape())) - f(Tensor::from_vector(m, x.shape()))) / (2 * h);
  }
  return g;
}

// Sum of w * y: a scalar loss whose gradient with respect to y is w.
inline double dot(const Tensor& w, const Tensor& y) {
  const std::vector<double> a = vals(w), b = vals(y);
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// FD gradients in f64 agree with the analytic ones to ~1e-10 (h^2 truncation and eps/h rounding
// on O(1) values); 1e-7 leaves room and still catches any wrong formula.
inline void expect_matches_fd(const std::vector<double>& analytic, const std::vector<double>& fd,
                              const std::string& what) {
  std::vector<double> tol(fd.size());
  for (std::size_t i = 0; i < fd.size(); ++i) tol[i] = 1e-7 * (1 + std::fabs(fd[i]));
  expect_within(analytic, fd, tol, what);
}

}  // namespace ranksim::runtime::ops_testing

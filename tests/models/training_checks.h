// Comparisons of two training runs (models/train.h) shared by the training tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/train.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models::testing {

inline double max_abs(const runtime::Tensor& t) {
  double m = 0;
  for (double x : t.to(runtime::DType::f64).to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// Two layouts of the same training: losses within 1e-5 relative, and every weight within
// 2e-5 * steps * lr + 1e-6 of its largest magnitude (rounding differences that Adam's
// normalisation carries at most about lr per step).
inline void expect_close_training(const TrainResult& got, const TrainResult& want, double lr, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (std::size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << what << " step " << i;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  const double steps = static_cast<double>(got.losses.size());
  for (std::size_t i = 0; i < got.params.size(); ++i) {
    ASSERT_EQ(got.params[i].first, want.params[i].first);
    const std::vector<double> a = got.params[i].second.to(runtime::DType::f64).to_vector<double>();
    const std::vector<double> b = want.params[i].second.to(runtime::DType::f64).to_vector<double>();
    double worst = 0;
    for (std::size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
    EXPECT_LE(worst, 2e-5 * steps * lr + 1e-6 * max_abs(want.params[i].second)) << what << ": " << got.params[i].first;
  }
}

// The same bits: losses, gradient norms and weights, and the optimizer state when asked.
inline void expect_bit_identical(const TrainResult& got, const TrainResult& want, const std::string& what,
                                 bool optimizer_state = false) {
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.grad_norms, want.grad_norms) << what;
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (std::size_t i = 0; i < got.params.size(); ++i) {
    ASSERT_EQ(got.params[i].first, want.params[i].first) << what;
    EXPECT_TRUE(runtime::bitwise_equal(got.params[i].second, want.params[i].second))
        << what << ": " << got.params[i].first;
  }
  if (!optimizer_state) return;
  ASSERT_EQ(got.optimizer_state.size(), want.optimizer_state.size()) << what;
  for (const auto& [key, t] : want.optimizer_state) {
    ASSERT_TRUE(got.optimizer_state.count(key)) << what << ": " << key;
    EXPECT_TRUE(runtime::bitwise_equal(got.optimizer_state.at(key), t)) << what << ": " << key;
  }
}

}  // namespace ranksim::models::testing

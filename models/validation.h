// The CP=1 vs CP=N validation framework's metrics (spec section D, bionemo's CP test): a run's
// dump against a baseline's, side by side.
//
//  - logits: the share of elements with |a - b| < logits_atol (bionemo: 2e-2, pass at >= 85%),
//    and the largest difference;
//  - loss: |loss - loss_baseline| / |loss_baseline| (pass at <= 5%);
//  - gradients, per parameter: the L2 norms of both gradients and their difference
//    d = | ||g|| - ||g_baseline|| | (pass when the largest d <= 0.05), the relative difference
//    d / ||g_baseline||, and a category: excellent (d < 1e-6 or rel < 1e-3), good (d < 1e-5 or
//    rel < 1e-2), acceptable (d < 1e-4 or rel < 5e-2), else poor; pass when >= 80% of the
//    parameters are at least acceptable. The largest elementwise difference is reported too.
// fp32 runs use much tighter defaults (ValidationThresholds::for_dtype).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "models/run.h"
#include "runtime/device/dtype.h"

namespace ranksim::models {

struct ValidationThresholds {
  double logits_atol = 2e-2;       // an element "matches" when |a - b| < logits_atol
  double logits_share = 0.85;      // pass when at least this share matches
  double loss_rel = 0.05;          // pass when the relative loss difference is at most this
  double grad_norm_diff = 0.05;    // pass when every | ||g|| - ||g_ref|| | is at most this
  double acceptable_share = 0.80;  // pass when at least this share of parameters is acceptable
  // bionemo's thresholds for bf16/fp16; for f32: logits 1e-4 (100%), loss 1e-5, gradient norms
  // 1e-4 (100% acceptable).
  static ValidationThresholds for_dtype(runtime::DType dtype);
};

enum class GradCategory { excellent, good, acceptable, poor };
const char* category_name(GradCategory c);

struct GradComparison {
  std::string name;
  double baseline_norm = 0, norm = 0;
  double norm_diff = 0;     // | ||g|| - ||g_ref|| |
  double rel_diff = 0;      // norm_diff / ||g_ref|| (0 when both are 0)
  double max_abs_diff = 0;  // largest elementwise |g - g_ref|
  GradCategory category = GradCategory::poor;
};

struct ValidationReport {
  ValidationThresholds thresholds;
  std::int64_t logits_count = 0;
  double logits_share = 0, logits_max_diff = 0;
  double loss_baseline = 0, loss = 0, loss_rel = 0;
  std::vector<GradComparison> grads;
  double acceptable_share = 0, grad_max_norm_diff = 0;
  bool logits_ok = false, loss_ok = false, grads_ok = false;
  bool ok() const { return logits_ok && loss_ok && grads_ok; }
};

// Errors (ranksim::Error) when the dumps do not describe the same problem: logits shapes,
// parameter names or gradient shapes that differ.
ValidationReport compare_dumps(const TransformerDump& baseline, const TransformerDump& run,
                               const ValidationThresholds& thresholds);

// A readable table: the three checks with their numbers, then one line per parameter.
void print_validation(const ValidationReport& report, const std::string& baseline_name, const std::string& run_name,
                      std::ostream& out);

}  // namespace ranksim::models

#include "models/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "sim/error.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;

namespace {

std::string num(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double l2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

}  // namespace

ValidationThresholds ValidationThresholds::for_dtype(DType dtype) {
  ValidationThresholds t;
  if (dtype == DType::f32 || dtype == DType::f64) {
    t.logits_atol = 1e-4;
    t.logits_share = 1.0;
    t.loss_rel = 1e-5;
    t.grad_norm_diff = 1e-4;
    t.acceptable_share = 1.0;
  }
  return t;
}

const char* category_name(GradCategory c) {
  switch (c) {
    case GradCategory::excellent:
      return "excellent";
    case GradCategory::good:
      return "good";
    case GradCategory::acceptable:
      return "acceptable";
    case GradCategory::poor:
      return "poor";
  }
  return "?";
}

ValidationReport compare_dumps(const TransformerDump& base, const TransformerDump& run,
                               const ValidationThresholds& th) {
  ValidationReport r;
  r.thresholds = th;
  if (base.logits.shape() != run.logits.shape()) {
    throw Error("validation: logits " + run.logits.str() + " and baseline logits " + base.logits.str() +
                " differ in shape");
  }
  const std::vector<double> a = run.logits.to(DType::f64).to_vector<double>();
  const std::vector<double> b = base.logits.to(DType::f64).to_vector<double>();
  std::int64_t match = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (d < th.logits_atol) ++match;
    // NaN never matches and always counts as the largest difference
    r.logits_max_diff = std::isnan(d) ? d : std::max(r.logits_max_diff, d);
  }
  r.logits_count = static_cast<std::int64_t>(a.size());
  r.logits_share = a.empty() ? 1.0 : static_cast<double>(match) / static_cast<double>(a.size());
  r.logits_ok = r.logits_share >= th.logits_share;

  r.loss_baseline = base.loss;
  r.loss = run.loss;
  r.loss_rel = std::abs(run.loss - base.loss) / std::abs(base.loss);
  r.loss_ok = r.loss_rel <= th.loss_rel;  // false for NaN

  if (base.grads.size() != run.grads.size()) {
    throw Error("validation: " + std::to_string(run.grads.size()) + " gradients against the baseline's " +
                std::to_string(base.grads.size()));
  }
  std::int64_t acceptable = 0;
  bool all_finite = true;
  for (std::size_t p = 0; p < base.grads.size(); ++p) {
    const auto& [name, gb] = base.grads[p];
    const auto& [run_name, gr] = run.grads[p];
    if (name != run_name || gb.shape() != gr.shape()) {
      throw Error("validation: gradient '" + run_name + "' " + gr.str() + " does not match the baseline's '" + name +
                  "' " + gb.str());
    }
    const std::vector<double> x = gr.to(DType::f64).to_vector<double>();
    const std::vector<double> y = gb.to(DType::f64).to_vector<double>();
    GradComparison c;
    c.name = name;
    c.norm = l2(x);
    c.baseline_norm = l2(y);
    c.norm_diff = std::abs(c.norm - c.baseline_norm);
    c.rel_diff = c.baseline_norm > 0 ? c.norm_diff / c.baseline_norm : (c.norm_diff > 0 ? INFINITY : 0.0);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = std::abs(x[i] - y[i]);
      c.max_abs_diff = std::isnan(d) ? d : std::max(c.max_abs_diff, d);
    }
    if (!std::isfinite(c.norm) || !std::isfinite(c.max_abs_diff)) all_finite = false;
    const double d = c.norm_diff, rel = c.rel_diff;
    c.category = (d < 1e-6 || rel < 1e-3)   ? GradCategory::excellent
                 : (d < 1e-5 || rel < 1e-2) ? GradCategory::good
                 : (d < 1e-4 || rel < 5e-2) ? GradCategory::acceptable
                                            : GradCategory::poor;
    if (!std::isfinite(c.norm)) c.category = GradCategory::poor;
    if (c.category != GradCategory::poor) ++acceptable;
    r.grad_max_norm_diff = std::isnan(d) ? d : std::max(r.grad_max_norm_diff, d);
    r.grads.push_back(c);
  }
  r.acceptable_share = r.grads.empty() ? 1.0 : static_cast<double>(acceptable) / static_cast<double>(r.grads.size());
  r.grads_ok = all_finite && r.grad_max_norm_diff <= th.grad_norm_diff && r.acceptable_share >= th.acceptable_share;
  return r;
}

void print_validation(const ValidationReport& r, const std::string& base_name, const std::string& run_name,
                      std::ostream& out) {
  const ValidationThresholds& t = r.thresholds;
  auto mark = [](bool ok) { return ok ? "PASS" : "FAIL"; };
  out << "validation: " << run_name << " against " << base_name << "\n";
  out << "  " << mark(r.logits_ok) << "  logits: " << num("%.2f", 100 * r.logits_share) << "% of " << r.logits_count
      << " within " << num("%g", t.logits_atol) << " (need >= " << num("%g", 100 * t.logits_share) << "%), max |diff| "
      << num("%.3g", r.logits_max_diff) << "\n";
  out << "  " << mark(r.loss_ok) << "  loss: " << num("%.6f", r.loss) << " vs " << num("%.6f", r.loss_baseline)
      << ", relative difference " << num("%.3g", r.loss_rel) << " (need <= " << num("%g", t.loss_rel) << ")\n";
  out << "  " << mark(r.grads_ok) << "  gradients: max norm difference " << num("%.3g", r.grad_max_norm_diff)
      << " (need <= " << num("%g", t.grad_norm_diff) << "), " << num("%.0f", 100 * r.acceptable_share)
      << "% acceptable (need >= " << num("%g", 100 * t.acceptable_share) << "%)\n";
  std::size_t width = 9;
  for (const GradComparison& c : r.grads) width = std::max(width, c.name.size());
  out << "    " << std::string("parameter") << std::string(width - 9, ' ')
      << "   baseline ||g||        ||g||   norm diff    rel diff  max |diff|  category\n";
  for (const GradComparison& c : r.grads) {
    out << "    " << c.name << std::string(width - c.name.size(), ' ') << num("%17.6g", c.baseline_norm)
        << num("%13.6g", c.norm) << num("%12.3g", c.norm_diff) << num("%12.3g", c.rel_diff)
        << num("%12.3g", c.max_abs_diff) << "  " << category_name(c.category) << "\n";
  }
}

}  // namespace ranksim::models

#include "testing/compare.h"

#include <bit>
#include <cmath>
#include <sstream>

#include "runtime/device/dtype.h"

namespace ranksim::testing {

namespace {

std::string shape_str(const runtime::Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

bool same(double e, double a, const Tolerance& tol) {
  if (tol.bitwise) return std::bit_cast<std::uint64_t>(e) == std::bit_cast<std::uint64_t>(a);
  if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a);
  if (e == a) return true;  // equal infinities
  return std::fabs(a - e) <= tol.abs + tol.rel * std::fabs(e);
}

}  // namespace

std::string Tolerance::describe() const {
  if (bitwise) return "bitwise";
  return "abs " + num(abs) + " + rel " + num(rel);
}

std::string Mismatch::describe(const Tolerance& tol) const {
  std::ostringstream os;
  if (rank >= 0) os << "rank " << rank << ", ";
  os << "tensor \"" << tensor << "\"";
  if (!what.empty()) {
    os << ": " << what;
    return os.str();
  }
  os << ", index " << index;
  if (coords.size() > 1) os << " (at " << shape_str(coords) << ")";
  os << ": expected " << num(expected) << ", got " << num(actual);
  if (tol.bitwise) {
    os << " (bitwise)";
  } else {
    os << " (|diff| " << num(std::fabs(actual - expected)) << " > " << num(tol.abs + tol.rel * std::fabs(expected))
       << ", " << tol.describe() << ")";
  }
  return os.str();
}

std::optional<Mismatch> first_mismatch(const runtime::Tensor& expected, const runtime::Tensor& actual,
                                       const Tolerance& tol, int rank, const std::string& name) {
  Mismatch m;
  m.rank = rank;
  m.tensor = name;
  if (expected.shape() != actual.shape()) {
    m.what = "shape " + shape_str(actual.shape()) + ", expected " + shape_str(expected.shape());
    return m;
  }
  if (expected.dtype() != actual.dtype()) {
    m.what = std::string("dtype ") + runtime::dtype_name(actual.dtype()) + ", expected " +
             runtime::dtype_name(expected.dtype());
    return m;
  }
  const std::vector<double> e = expected.to_vector<double>();
  const std::vector<double> a = actual.to_vector<double>();
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (same(e[i], a[i], tol)) continue;
    m.index = static_cast<std::int64_t>(i);
    m.expected = e[i];
    m.actual = a[i];
    std::int64_t rest = m.index;
    m.coords.assign(expected.shape().size(), 0);
    for (std::size_t d = expected.shape().size(); d-- > 0;) {
      m.coords[d] = rest % expected.shape()[d];
      rest /= expected.shape()[d];
    }
    return m;
  }
  return std::nullopt;
}

::testing::AssertionResult tensors_match(const runtime::Tensor& expected, const runtime::Tensor& actual,
                                         const Tolerance& tol, int rank, const std::string& name) {
  if (const auto m = first_mismatch(expected, actual, tol, rank, name)) {
    return ::testing::AssertionFailure() << m->describe(tol);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ranksim::testing

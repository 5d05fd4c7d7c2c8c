#include "cp/comm_types.h"

#include <limits>

#include "cp/partition.h"

namespace ranksim::cp::detail {

using i64 = std::int64_t;

Tensor zeros(const Shape& shape, DType dtype, bool data) {
  return data ? Tensor::zeros(shape, dtype) : Tensor::shape_only(shape, dtype);
}

Tensor minus_inf(const Shape& shape, DType dtype, bool data) {
  return data ? Tensor::full(shape, -std::numeric_limits<double>::infinity(), dtype) : Tensor::shape_only(shape, dtype);
}

DType accumulate_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& rows) {
  bool run = !rows.empty();
  for (std::size_t i = 1; run && i < rows.size(); ++i) run = rows[i] == rows[i - 1] + 1;
  if (run) return x.narrow(0, rows[0], static_cast<i64>(rows.size()));
  return index_select(x, 0, rows);
}

std::vector<std::int64_t> reorder(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to,
                                  std::int64_t global_rows) {
  std::vector<i64> where(static_cast<std::size_t>(global_rows), -1);
  for (std::size_t i = 0; i < from.size(); ++i) {
    where[static_cast<std::size_t>(from[i])] = static_cast<i64>(i);
  }
  std::vector<i64> out(to.size());
  for (std::size_t t = 0; t < to.size(); ++t) out[t] = where[static_cast<std::size_t>(to[t])];
  return out;
}

std::vector<std::int64_t> delivered_rows(const CpLayout& lay, std::int64_t first, std::int64_t count) {
  std::vector<i64> out;
  out.reserve(static_cast<std::size_t>(count * lay.local_rows()));
  for (i64 j = first; j < first + count; ++j) {
    const std::vector<i64>& rows = lay.rows_of(j);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

}  // namespace ranksim::cp::detail

#include "runtime/tensor/strided_copy.h"

namespace ranksim::runtime::strided {

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

namespace {

// Walks two same-shaped strided layouts together, calling fn(offset_a, offset_b, count, step_a,
// step_b) for each innermost row (offsets and steps in elements).
template <class Fn>
void for_each_row(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& sa, std::int64_t off_a,
                  const std::vector<std::int64_t>& sb, std::int64_t off_b, Fn&& fn) {
  // The shape is a tensor's, already checked (sizes >= 0, numel below 2^63) when it was made.
  std::int64_t numel = 1;
  for (std::int64_t s : shape) numel *= s;
  if (numel == 0) return;
  const std::size_t nd = shape.size();
  if (nd == 0) {
    fn(off_a, off_b, std::int64_t{1}, std::int64_t{1}, std::int64_t{1});
    return;
  }
  const std::int64_t inner = shape[nd - 1];
  std::vector<std::int64_t> idx(nd, 0);
  const std::int64_t rows = numel / inner;
  for (std::int64_t r = 0; r < rows; ++r) {
    fn(off_a, off_b, inner, sa[nd - 1], sb[nd - 1]);
    for (std::size_t d = nd - 1; d-- > 0;) {
      ++idx[d];
      off_a += sa[d];
      off_b += sb[d];
      if (idx[d] < shape[d]) break;
      off_a -= sa[d] * shape[d];
      off_b -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
}

template <class T>
void strided_copy_same(const std::byte* src, std::int64_t so, std::int64_t ss, std::byte* dst, std::int64_t d_o,
                       std::int64_t ds, std::int64_t n) {
  const T* s = reinterpret_cast<const T*>(src) + so;
  T* d = reinterpret_cast<T*>(dst) + d_o;
  for (std::int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
}

}  // namespace

void convert(const std::byte* src, DType sdt, const std::vector<std::int64_t>& shape,
             const std::vector<std::int64_t>& sst, std::int64_t soff, std::byte* dst, DType ddt,
             const std::vector<std::int64_t>& dst_strides, std::int64_t doff) {
  const std::size_t ssz = dtype_size(sdt);
  const std::size_t dsz = dtype_size(ddt);
  for_each_row(shape, sst, soff, dst_strides, doff,
               [&](std::int64_t so, std::int64_t d_o, std::int64_t n, std::int64_t ss, std::int64_t ds) {
                 if ((ss == 1 || n == 1) && (ds == 1 || n == 1)) {
                   convert_elements(src + so * static_cast<std::int64_t>(ssz), sdt,
                                    dst + d_o * static_cast<std::int64_t>(dsz), ddt, static_cast<std::size_t>(n));
                 } else if (sdt == ddt && ssz == 2) {
                   strided_copy_same<std::uint16_t>(src, so, ss, dst, d_o, ds, n);
                 } else if (sdt == ddt && ssz == 4) {
                   strided_copy_same<std::uint32_t>(src, so, ss, dst, d_o, ds, n);
                 } else if (sdt == ddt && ssz == 8) {
                   strided_copy_same<std::uint64_t>(src, so, ss, dst, d_o, ds, n);
                 } else {
                   for (std::int64_t i = 0; i < n; ++i) {
                     convert_elements(src + (so + i * ss) * static_cast<std::int64_t>(ssz), sdt,
                                      dst + (d_o + i * ds) * static_cast<std::int64_t>(dsz), ddt, 1);
                   }
                 }
               });
}

}  // namespace ranksim::runtime::strided

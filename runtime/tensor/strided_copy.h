// Walks over strided layouts of raw element bytes (internal to runtime/tensor): the loops under
// Tensor's element access (runtime/tensor/tensor.cpp) and its host copies
// (runtime/tensor/tensor_copy.cpp). Shapes and strides count elements, as in Tensor.
//
// convert moves each element once, converting by the rules of convert_elements
// (runtime/device/dtype.h); it does no other arithmetic, so a copy has exactly the bits a
// one-element conversion gives. The source and destination must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/device/dtype.h"

namespace ranksim::runtime::strided {

// The row-major strides of a contiguous tensor of this shape.
std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape);

// Copies a strided source layout (element offset soff) into a strided destination layout of the
// same shape (element offset doff), converting from sdt to ddt.
void convert(const std::byte* src, DType sdt, const std::vector<std::int64_t>& shape,
             const std::vector<std::int64_t>& src_strides, std::int64_t soff, std::byte* dst, DType ddt,
             const std::vector<std::int64_t>& dst_strides, std::int64_t doff);

}  // namespace ranksim::runtime::strided

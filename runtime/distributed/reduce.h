// Elementwise reduction kernels for collectives: dst[k] = op(dst[k], src[k]) for every dtype and
// ReduceOp, and the final AVG division.
//
// bf16 and f16 elements are widened to fp32, combined, and rounded back to nearest even at every
// step, as NCCL's reductions of 16-bit types do on each hop; the result therefore depends on the
// reduction order, which the collective schedule fixes. Integer SUM/PROD wrap modulo 2^bits
// (computed in unsigned arithmetic, no undefined behaviour); integer AVG truncates toward zero.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device/dtype.h"

namespace ranksim::runtime {

enum class ReduceOp : uint8_t { SUM, AVG, MAX, MIN, PROD };
const char* to_string(ReduceOp op);

using ReduceKernel = void (*)(std::byte* dst, const std::byte* src, int64_t count);

// The kernel combining elements of `dtype` with `op` (AVG combines as SUM; divide afterwards).
ReduceKernel reduce_kernel(DType dtype, ReduceOp op);

// data[k] /= divisor for count elements (the last step of AVG).
void divide_elements(std::byte* data, DType dtype, int64_t count, int64_t divisor);

}  // namespace ranksim::runtime

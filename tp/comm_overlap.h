// Tensor-parallel communication overlapped with the GEMMs next to it: Megatron-LM's
// --tp-comm-overlap (TransformerEngine's userbuffers), which needs sequence parallelism.
//
// The sequence-parallel all-gather before a column-parallel GEMM, and the reduce-scatter after a
// row-parallel one, are cut into k chunks along the sequence (dim 0), so that the collective on
// one chunk runs while the GEMM of another computes:
//
//   all_gather_matmul:       AG(chunk 0); for c: start AG(chunk c+1), wait AG(c), GEMM(c)
//   matmul_reduce_scatter:   for c: GEMM(c), start RS(c); wait all
//
// Chunk c of a rank's [S, ...] rows is rows [c S/k, (c+1) S/k); gathered over the p ranks it is
// the rows j S + c S/k + i of the full [p S, ...] tensor. TransformerEngine exchanges the chunks
// rank to rank around a ring; here each chunk is one collective of the group, so it is timed by
// the same collective model as the unsplit one, at 1/k of the size.
//
// The numbers are the unsplit ones bit for bit: every GEMM output row depends only on its own
// input row (runtime::matmul sums each element over k in one fixed order), and each chunk's
// reduce-scatter sums every element over the ranks in the same order as the whole one.
//
// k = min(p, chunks) reduced to the largest count that divides S (1: no overlap, one collective).
// Putting the chunks in place is not charged: TransformerEngine's GEMMs read and write their
// chunks in the layer's buffers, so only the GEMMs and the collectives take time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::tp {

// The chunk count for S rows over p ranks (see above); chunks <= 0 means p.
std::int64_t overlap_chunks(std::int64_t rows, int p, std::int64_t chunks = 0);

// Gemms of a block of gathered rows [R, ...] -> one or more outputs [R, ...] (row for row).
using RowGemms = std::function<std::vector<runtime::Tensor>(const runtime::Tensor& rows)>;

struct GatherMatmul {
  std::vector<runtime::Tensor> outputs;  // each [p S, ...], rows in rank order
  runtime::Tensor total;                 // the gathered input [p S, ...] (only with keep_total)
};

// x: this rank's rows [S, ...]. Collective over g. With p == 1: gemm(x), no collective.
GatherMatmul all_gather_matmul(const runtime::Tensor& x, const RowGemms& gemm, const runtime::ProcessGroup& g,
                               bool keep_total = false, std::int64_t chunks = 0);

// x: [p S, ...]; gemm gives one output [R, ...] per block of R rows; returns this rank's [S, ...]
// rows of the output summed over g. REQUIRES: p divides x.size(0). With p == 1: gemm(x).
runtime::Tensor matmul_reduce_scatter(const runtime::Tensor& x,
                                      const std::function<runtime::Tensor(const runtime::Tensor&)>& gemm,
                                      const runtime::ProcessGroup& g, std::int64_t chunks = 0);

}  // namespace ranksim::tp

#include "tp/comm_overlap.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops.h"
#include "sim/error.h"
#include "tp/mappings.h"

namespace ranksim::tp {

using runtime::Tensor;
using i64 = std::int64_t;

i64 overlap_chunks(i64 rows, int p, i64 chunks) {
  i64 k = std::min<i64>(p, chunks > 0 ? chunks : p);
  while (k > 1 && rows % k != 0) --k;
  return std::max<i64>(k, 1);
}

namespace {

// Joins blocks along dim 0 without charging the copy: TransformerEngine's GEMMs read their chunk
// of the input and write their chunk of the output in place (userbuffers), so the pipelined
// layer moves no more bytes than the unsplit one. (No collective runs in between: no other rank
// can charge meanwhile.)
Tensor join_in_place(const std::vector<Tensor>& blocks) {
  const runtime::ScopedCostSink uncharged(nullptr);
  return runtime::cat(blocks, 0);
}

// The rows of a [p S, ...] tensor that chunk c of k covers on every rank: blocks j S + c S/k of
// S/k rows, j = 0..p-1, as views.
std::vector<Tensor> chunk_blocks(const Tensor& full, int p, i64 k, i64 c) {
  const i64 s = full.size(0) / p, len = s / k;
  std::vector<Tensor> out;
  for (int j = 0; j < p; ++j) out.push_back(full.narrow(0, j * s + c * len, len));
  return out;
}

// Puts gathered chunks back in row order: piece[c] holds chunk c of every rank ([p S/k, ...],
// rank-major); the result is [p S, ...] with rank j's rows j S .. (j+1) S.
Tensor reorder(const std::vector<Tensor>& piece, int p) {
  const auto k = static_cast<i64>(piece.size());
  if (k == 1) return piece.front();
  // Shape-only pieces (a shape-only run: every tensor is): nothing to put in order.
  if (std::none_of(piece.begin(), piece.end(), [](const Tensor& t) { return t.has_data(); })) {
    runtime::Shape shape = piece.front().shape();
    shape[0] *= k;
    return Tensor::shape_only(shape, piece.front().dtype());
  }
  const i64 len = piece.front().size(0) / p;
  std::vector<Tensor> blocks;
  for (int j = 0; j < p; ++j) {
    for (i64 c = 0; c < k; ++c) blocks.push_back(piece[static_cast<std::size_t>(c)].narrow(0, j * len, len));
  }
  return join_in_place(blocks);
}

}  // namespace

GatherMatmul all_gather_matmul(const Tensor& x, const RowGemms& gemm, const runtime::ProcessGroup& g, bool keep_total,
                               i64 chunks) {
  const int p = g.size();
  GatherMatmul r;
  if (p == 1) {
    r.outputs = gemm(x);
    if (keep_total) r.total = x;
    return r;
  }
  if (!x.defined() || x.dim() < 1) throw Error("all_gather_matmul: the input must have a sequence dim");
  const i64 s = x.size(0), k = overlap_chunks(s, p, chunks), len = s / k;
  std::vector<CommResult> gathered;
  gathered.push_back(all_gather_dim0(x.narrow(0, 0, len), g, true));
  std::vector<std::vector<Tensor>> out;  // [chunk][output]
  std::vector<Tensor> inputs;
  for (i64 c = 0; c < k; ++c) {
    if (c + 1 < k) gathered.push_back(all_gather_dim0(x.narrow(0, (c + 1) * len, len), g, true));
    const CommResult& mine = gathered[static_cast<std::size_t>(c)];
    mine.wait();
    out.push_back(gemm(mine.tensor));
    if (keep_total) inputs.push_back(mine.tensor);
  }
  const std::size_t n = out.front().size();
  for (std::size_t o = 0; o < n; ++o) {
    std::vector<Tensor> piece;
    for (const auto& chunk : out) piece.push_back(chunk[o]);
    r.outputs.push_back(reorder(piece, p));
  }
  if (keep_total) r.total = reorder(inputs, p);
  return r;
}

Tensor matmul_reduce_scatter(const Tensor& x, const std::function<Tensor(const Tensor&)>& gemm,
                             const runtime::ProcessGroup& g, i64 chunks) {
  const int p = g.size();
  if (p == 1) return gemm(x);
  if (!x.defined() || x.dim() < 1 || x.size(0) % p != 0) {
    throw Error("matmul_reduce_scatter: the input's sequence dim must be divisible by the tensor-parallel size " +
                std::to_string(p) + ", got " + (x.defined() ? x.str() : "undefined"));
  }
  const i64 k = overlap_chunks(x.size(0) / p, p, chunks);
  if (k == 1) return reduce_scatter_dim0(gemm(x), g, false).tensor;
  std::vector<CommResult> scattered;
  for (i64 c = 0; c < k; ++c) {
    const Tensor rows = join_in_place(chunk_blocks(x, p, k, c));  // [p S/k, ...], rank-major
    scattered.push_back(reduce_scatter_dim0(gemm(rows), g, true));
  }
  std::vector<Tensor> mine;
  for (const CommResult& r : scattered) {
    r.wait();
    mine.push_back(r.tensor);
  }
  return join_in_place(mine);
}

}  // namespace ranksim::tp

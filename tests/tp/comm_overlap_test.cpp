// TP communication overlap (tp/comm_overlap.h, the layers' comm_overlap option): the chunked
// all-gather + GEMM and GEMM + reduce-scatter against the unsplit ones.
//
// Every GEMM output row is one left-to-right sum over k of its own input row (runtime/tensor/ops.h),
// and a chunk's reduce-scatter sums each element over the ranks in the whole one's order, so the
// overlapped layers must give the plain sequence-parallel layers' bits -- forward outputs, input
// gradients and weight gradients -- with random (not exact-sum) inputs, for 2-d and 3-d
// activations ([s, b, h]), at tp 2 and 4, and when the chunk count falls back below tp (rows not
// divisible) or to 1. The chunk count and the collectives issued are checked directly.
#include "tp/comm_overlap.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/run_report.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/trace.h"
#include "tp/layers.h"
#include "tp/parallel_state.h"

namespace ranksim::tp {
namespace {

using runtime::Shape;
using runtime::Tensor;

TEST(CommOverlap, ChunkCountIsTheLargestDivisorUpToTp) {
  EXPECT_EQ(overlap_chunks(8, 4), 4);
  EXPECT_EQ(overlap_chunks(6, 4), 3);
  EXPECT_EQ(overlap_chunks(5, 4), 1);
  EXPECT_EQ(overlap_chunks(9, 2), 1);
  EXPECT_EQ(overlap_chunks(8, 4, 2), 2);
  EXPECT_EQ(overlap_chunks(8, 1), 1);
}

// The rank's share of the global [p s, ...] input (sequence-first), as sequence parallelism holds it.
Tensor share(const Tensor& full, int p, int r) {
  return full.narrow(0, r * (full.size(0) / p), full.size(0) / p).contiguous();
}

struct Case {
  int tp;
  Shape input;  // the global activation, sequence first
};

// Column-parallel (all-gather + GEMM) then row-parallel (GEMM + reduce-scatter), forward and
// backward, with and without overlap: the same bits everywhere.
TEST(CommOverlap, LayersEqualThePlainSequenceParallelLayersBitForBit) {
  const std::int64_t h = 12, f = 16;
  const Tensor w1 = Tensor::uniform({f, h}, 3, -0.5, 0.5), w2 = Tensor::uniform({h, f}, 4, -0.5, 0.5);
  const Tensor b1 = Tensor::uniform({f}, 5, -0.5, 0.5), b2 = Tensor::uniform({h}, 6, -0.5, 0.5);
  for (const Case& c : {Case{2, {8, h}}, Case{4, {16, h}}, Case{4, {24, 3, h}}, Case{2, {6, 2, h}},
                        Case{4, {20, h}} /* 5 rows per rank: one chunk */}) {
    const Tensor x = Tensor::uniform(c.input, 7, -1.0, 1.0);
    Shape out_shape = c.input;
    out_shape.back() = h;
    const Tensor dy = Tensor::uniform(out_shape, 8, -1.0, 1.0);
    // [overlap][rank]: y, dh, dx and the four parameter gradients
    std::vector<std::vector<std::vector<Tensor>>> got(2, std::vector<std::vector<Tensor>>(c.tp));
    for (int overlap = 0; overlap < 2; ++overlap) {
      runtime::spawn(
          [&](int rank) {
            ParallelState ps = initialize_model_parallel(c.tp);
            ColumnParallelLinearOptions co;
            co.sequence_parallel = true;
            co.comm_overlap = overlap == 1;
            RowParallelLinearOptions ro;
            ro.sequence_parallel = true;
            ro.input_is_parallel = true;
            ro.comm_overlap = overlap == 1;
            ColumnParallelLinear fc1(w1, ps.tp().group, co, b1);
            RowParallelLinear fc2(w2, ps.tp().group, ro, b2);
            LinearContext c1, c2;
            const Tensor hmid = fc1.forward(share(x, c.tp, rank), c1).output;
            const Tensor y = fc2.forward(hmid, c2).output;
            const Tensor dh = fc2.backward(share(dy, c.tp, rank), c2);
            const Tensor dx = fc1.backward(dh, c1);
            got[static_cast<std::size_t>(overlap)][static_cast<std::size_t>(rank)] = {
                y, dh, dx, fc1.weight().grad, fc1.bias().grad, fc2.weight().grad, fc2.bias().grad};
          },
          c.tp);
    }
    const std::string what = "tp" + std::to_string(c.tp) + " " + runtime::shape_str(c.input);
    for (int r = 0; r < c.tp; ++r) {
      const auto& plain = got[0][static_cast<std::size_t>(r)];
      const auto& overlapped = got[1][static_cast<std::size_t>(r)];
      ASSERT_EQ(plain.size(), overlapped.size());
      for (std::size_t i = 0; i < plain.size(); ++i)
        EXPECT_TRUE(runtime::bitwise_equal(overlapped[i], plain[i])) << what << " rank " << r << " tensor " << i;
    }
  }
}

// The collectives: with overlap a column-parallel forward gathers in k chunks of 1/k the size, a
// row-parallel forward reduce-scatters in k chunks.
TEST(CommOverlap, EachChunkIsOneCollectiveOfItsSize) {
  const std::int64_t h = 8;
  const Tensor w = Tensor::uniform({h, h}, 3, -0.5, 0.5);
  const Tensor x = Tensor::uniform({16, h}, 7, -1.0, 1.0);
  for (bool column : {true, false}) {
    const runtime::RunReport rep = runtime::spawn(
        [&](int rank) {
          ParallelState ps = initialize_model_parallel(4);
          LinearContext ctx;
          if (column) {
            ColumnParallelLinearOptions o;
            o.sequence_parallel = o.comm_overlap = true;
            ColumnParallelLinear(w, ps.tp().group, o).forward(share(x, 4, rank), ctx);
          } else {
            RowParallelLinearOptions o;
            o.sequence_parallel = o.input_is_parallel = o.comm_overlap = true;
            RowParallelLinear(w, ps.tp().group, o).forward(x.narrow(1, rank * 2, 2).contiguous(), ctx);
          }
        },
        4);
    std::vector<std::string> seen;
    for (const sim::Span& s : rep.trace.spans()) {
      if (s.rank != 0 || s.kind != sim::SpanKind::comm) continue;
      std::string bytes;
      for (const auto& [k, v] : s.args)
        if (k == "bytes") bytes = v;
      seen.push_back(s.name + " " + bytes);
    }
    // 4 rows per rank in 4 chunks of one row: an all-gather of 4 rows x 8 f32 (128 bytes) each, or a
    // reduce-scatter of 4 rows each
    const std::string one = column ? "all_gather 128" : "reduce_scatter 128";
    EXPECT_EQ(seen, std::vector<std::string>(4, one)) << column;
  }
}

}  // namespace
}  // namespace ranksim::tp

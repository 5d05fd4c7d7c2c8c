// Sequence partitioning against the spec's worked examples (section A) and against independent
// descriptions of the same layout: the chunk description vs TransformerEngine's kernel formula,
// the union over ranks as a permutation, and tensors whose values are their own global indices,
// so every slice and reassembly can be read off exactly.
#include "cp/partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/tensor/cost.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using runtime::DType;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using V = std::vector<std::int64_t>;

// A [rows, S, 2] tensor whose element (b, s, k) is 1000 b + 10 s + k: any slice names its source.
Tensor labelled_bsh(std::int64_t rows, std::int64_t seq) {
  std::vector<double> v;
  for (std::int64_t b = 0; b < rows; ++b) {
    for (std::int64_t s = 0; s < seq; ++s) {
      for (std::int64_t k = 0; k < 2; ++k) v.push_back(1000.0 * b + 10.0 * s + k);
    }
  }
  return Tensor::from_vector(v, {rows, seq, 2}, DType::f64);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// --- BSHD -------------------------------------------------------------------------------------

TEST(BshdPartition, SpecExampleCp2Seq8) {
  EXPECT_THAT(bshd_partition_indices(8, 2, 0), ElementsAre(0, 1, 6, 7));
  EXPECT_THAT(bshd_partition_indices(8, 2, 1), ElementsAre(2, 3, 4, 5));
}

TEST(BshdPartition, Cp1KeepsTheWholeSequence) {
  EXPECT_THAT(bshd_partition_indices(6, 1, 0), ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(BshdPartition, LocalIndexFormula) {
  // A1: local t -> r*C + t for t < C, else (2cp-1-r)*C + t - C.
  for (std::int64_t cp = 1; cp <= 5; ++cp) {
    const std::int64_t c = 3, s = 2 * cp * c;
    for (std::int64_t r = 0; r < cp; ++r) {
      const V idx = bshd_partition_indices(s, cp, r);
      ASSERT_EQ(idx.size(), static_cast<std::size_t>(2 * c));
      for (std::int64_t t = 0; t < 2 * c; ++t) {
        const std::int64_t want = t < c ? r * c + t : (2 * cp - 1 - r) * c + (t - c);
        EXPECT_EQ(idx[static_cast<std::size_t>(t)], want) << "cp " << cp << " r " << r;
      }
    }
  }
}

TEST(BshdPartition, IndivisibleLengthNamesSAnd2cp) {
  const std::string msg = error_of([] { bshd_partition_indices(10, 2, 0); });
  EXPECT_THAT(msg, HasSubstr("S = 10"));
  EXPECT_THAT(msg, HasSubstr("2*cp = 4"));
  EXPECT_THAT(error_of([] { bshd_partition_indices(8, 2, 2); }), HasSubstr("cp rank 2"));
  EXPECT_THAT(error_of([] { bshd_partition_indices(8, 0, 0); }), HasSubstr("cp size 0"));
}

TEST(BshdPartition, SlicesAlongDim1AndReassembles) {
  const std::int64_t cp = 3, c = 2, seq = 2 * cp * c;
  const Tensor x = labelled_bsh(2, seq);
  std::vector<Tensor> locals;
  for (std::int64_t r = 0; r < cp; ++r) {
    Tensor local = bshd_partition(x, 1, cp, r);
    ASSERT_EQ(local.shape(), (runtime::Shape{2, 2 * c, 2}));
    EXPECT_TRUE(local.is_contiguous());
    EXPECT_FALSE(local.shares_storage(x));
    // A4: global.view(b, 2cp, C, ...)[:, [r, 2cp-1-r]] == local.view(b, 2, C, ...).
    const Tensor g = x.view({2, 2 * cp, c, 2});
    const Tensor l = local.view({2, 2, c, 2});
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t t = 0; t < c; ++t) {
        for (std::int64_t k = 0; k < 2; ++k) {
          EXPECT_EQ(l.at({b, 0, t, k}), g.at({b, r, t, k}));
          EXPECT_EQ(l.at({b, 1, t, k}), g.at({b, 2 * cp - 1 - r, t, k}));
        }
      }
    }
    locals.push_back(local);
  }
  EXPECT_TRUE(runtime::bitwise_equal(bshd_unpartition(locals, 1), x));
  EXPECT_TRUE(runtime::bitwise_equal(bshd_unpartition(locals, -2), x));
}

TEST(BshdPartition, SbhdSplitsDim0) {
  const std::int64_t cp = 2, seq = 8;
  const Tensor x = labelled_bsh(1, seq).permute({1, 0, 2});  // [S, 1, 2], a non-contiguous view
  std::vector<Tensor> locals;
  for (std::int64_t r = 0; r < cp; ++r) {
    Tensor local = bshd_partition(x, 0, cp, r);
    const V idx = bshd_partition_indices(seq, cp, r);
    for (std::size_t t = 0; t < idx.size(); ++t) {
      EXPECT_EQ(local.at({static_cast<std::int64_t>(t), 0, 1}), 10.0 * idx[t] + 1);
    }
    locals.push_back(local);
  }
  EXPECT_TRUE(runtime::bitwise_equal(bshd_unpartition(locals, 0), x.contiguous()));
}

TEST(BshdPartition, ShapeOnlyInShapeOnlyOut) {
  const Tensor x = Tensor::shape_only({2, 16, 4}, DType::bf16);
  const Tensor local = bshd_partition(x, 1, 4, 1);
  EXPECT_FALSE(local.has_data());
  EXPECT_EQ(local.shape(), (runtime::Shape{2, 4, 4}));
  EXPECT_EQ(bshd_unpartition({local, local, local, local}, 1).shape(), x.shape());
}

TEST(BshdPartition, UnpartitionRejectsMismatchedRanks) {
  const Tensor a = Tensor::zeros({1, 4}), b = Tensor::zeros({1, 6});
  EXPECT_THAT(error_of([&] { bshd_unpartition({a, b}, 1); }), HasSubstr("rank 1"));
  EXPECT_THAT(error_of([&] { bshd_unpartition({Tensor::zeros({1, 3})}, 1); }), HasSubstr("even"));
}

// --- THD --------------------------------------------------------------------------------------

const V kCu = {0, 7, 18, 23};  // lengths 7, 11, 5: the spec's and the CP framework's example

TEST(ThdPartition, SpecExamplePaddedCu) {
  EXPECT_THAT(thd_padded_cu_seqlens(kCu, 2), ElementsAre(0, 8, 20, 28));
  EXPECT_THAT(thd_padded_cu_seqlens(kCu, 1), ElementsAre(0, 8, 20, 26));
  EXPECT_THAT(thd_padded_cu_seqlens({0, 0, 3, 3, 4}, 2), ElementsAre(0, 0, 4, 4, 8));
}

TEST(ThdPartition, SpecExampleIndices) {
  const V pad = thd_padded_cu_seqlens(kCu, 2);
  EXPECT_THAT(thd_partition_indices(pad, 2, 0), ElementsAre(0, 1, 6, 7, 8, 9, 10, 17, 18, 19, 20, 21, 26, 27));
  EXPECT_THAT(thd_partition_indices(pad, 2, 1), ElementsAre(2, 3, 4, 5, 11, 12, 13, 14, 15, 16, 22, 23, 24, 25));
}

TEST(ThdPartition, SpecExampleRealCuPerRank) {
  const V pad = thd_padded_cu_seqlens(kCu, 2);
  EXPECT_THAT(thd_cu_seqlens_on_rank(kCu, pad, 2, 0), ElementsAre(0, 3, 8, 10));
  EXPECT_THAT(thd_cu_seqlens_on_rank(kCu, pad, 2, 1), ElementsAre(0, 4, 10, 13));
  // The halves separately: r0 first chunks 2, 3, 2; second chunks 1, 2, 0.
  EXPECT_THAT(thd_cu_seqlens_on_rank(kCu, pad, 2, 0, ThdHalves::first), ElementsAre(0, 2, 5, 7));
  EXPECT_THAT(thd_cu_seqlens_on_rank(kCu, pad, 2, 0, ThdHalves::second), ElementsAre(0, 1, 3, 3));
}

// Many layouts, zero-length sequences and lengths already divisible included.
std::vector<V> cu_cases() {
  std::vector<V> cases = {{0},         {0, 0},          {0, 1},          {0, 7, 18, 23}, {0, 0, 5, 5},
                          {0, 16, 32}, {0, 3, 3, 3, 4}, {0, 1, 2, 3, 4}, {0, 31, 31},    {0, 8, 9, 40, 41}};
  // A deterministic pseudo-random batch: lengths from a small LCG, zeros included.
  std::uint64_t state = 12345;
  for (int n = 0; n < 20; ++n) {
    V cu{0};
    for (int i = 0; i < 1 + n % 6; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      cu.push_back(cu.back() + static_cast<std::int64_t>((state >> 33) % 20));
    }
    cases.push_back(cu);
  }
  return cases;
}

TEST(ThdPartition, UnionOverRanksIsAPermutation) {
  for (const V& cu : cu_cases()) {
    for (std::int64_t cp = 1; cp <= 4; ++cp) {
      const V pad = thd_padded_cu_seqlens(cu, cp);
      V all;
      for (std::int64_t r = 0; r < cp; ++r) {
        const V idx = thd_partition_indices(pad, cp, r);
        ASSERT_EQ(static_cast<std::int64_t>(idx.size()), pad.back() / cp);
        all.insert(all.end(), idx.begin(), idx.end());
      }
      std::sort(all.begin(), all.end());
      V want(static_cast<std::size_t>(pad.back()));
      std::iota(want.begin(), want.end(), 0);
      EXPECT_EQ(all, want) << "cp " << cp << " cu back " << cu.back();
    }
  }
}

TEST(ThdPartition, KernelClosedFormAgreesWithChunks) {
  for (const V& cu : cu_cases()) {
    for (std::int64_t cp = 1; cp <= 4; ++cp) {
      const V pad = thd_padded_cu_seqlens(cu, cp);
      for (std::int64_t r = 0; r < cp; ++r) {
        const V idx = thd_partition_indices(pad, cp, r);
        for (std::size_t t = 0; t < idx.size(); ++t) {
          ASSERT_EQ(thd_partition_source_index(pad, cp, r, static_cast<std::int64_t>(t)), idx[t])
              << "cp " << cp << " r " << r << " t " << t;
        }
      }
    }
  }
}

TEST(ThdPartition, RealTokensAreAPrefixOfEachLocalBlock) {
  // Counts from thd_cu_seqlens_on_rank must equal the real tokens found by following indices.
  for (const V& cu : cu_cases()) {
    for (std::int64_t cp = 1; cp <= 4; ++cp) {
      const V pad = thd_padded_cu_seqlens(cu, cp);
      const V seg = thd_segment_ids(cu, pad);
      for (std::int64_t r = 0; r < cp; ++r) {
        const V real = thd_cu_seqlens_on_rank(cu, pad, cp, r);
        const V local_seg = thd_local_segments(cu, pad, cp, r);
        for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
          const std::int64_t st = pad[i] / cp, len = (pad[i + 1] - pad[i]) / cp;
          const std::int64_t n = real[i + 1] - real[i];
          for (std::int64_t t = 0; t < len; ++t) {
            const std::int64_t want = t < n ? static_cast<std::int64_t>(i) : -1;
            ASSERT_EQ(local_seg[static_cast<std::size_t>(st + t)], want)
                << "cp " << cp << " r " << r << " seq " << i << " t " << t;
          }
        }
      }
    }
  }
}

TEST(ThdPartition, HalfRows) {
  const V pad = thd_padded_cu_seqlens(kCu, 2);  // local blocks of 4, 6, 4 tokens
  EXPECT_THAT(thd_half_rows(pad, 2, ThdHalves::first), ElementsAre(0, 1, 4, 5, 6, 10, 11));
  EXPECT_THAT(thd_half_rows(pad, 2, ThdHalves::second), ElementsAre(2, 3, 7, 8, 9, 12, 13));
  EXPECT_EQ(thd_half_rows(pad, 2, ThdHalves::both).size(), 14u);
}

TEST(ThdPartition, PositionsCountThroughPadding) {
  const V pad = thd_padded_cu_seqlens(kCu, 2);
  const V pos = thd_position_ids(pad);
  ASSERT_EQ(pos.size(), 28u);
  EXPECT_THAT(V(pos.begin(), pos.begin() + 9), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 0));
  EXPECT_EQ(pos[19], 11);  // the last (padding) token of the second sequence
  // A3: local positions are the global position ids taken at the partition indices.
  for (std::int64_t r = 0; r < 2; ++r) {
    const V local = thd_local_positions(pad, 2, r);
    const V idx = thd_partition_indices(pad, 2, r);
    ASSERT_EQ(local.size(), idx.size());
    for (std::size_t t = 0; t < idx.size(); ++t) {
      EXPECT_EQ(local[t], pos[static_cast<std::size_t>(idx[t])]);
    }
  }
  EXPECT_THAT(thd_local_positions(pad, 2, 1), ElementsAre(2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5));
  EXPECT_THAT(thd_local_positions(pad, 2, 0, {100, 0, 50}),
              ElementsAre(100, 101, 106, 107, 0, 1, 2, 9, 10, 11, 50, 51, 56, 57));
  EXPECT_THAT(bshd_local_positions(8, 2, 1), ElementsAre(2, 3, 4, 5));
}

TEST(ThdPartition, SegmentIds) {
  const V pad = thd_padded_cu_seqlens(kCu, 2);
  const V seg = thd_segment_ids(kCu, pad);
  V want;
  for (int i = 0; i < 7; ++i) want.push_back(0);
  want.push_back(-1);
  for (int i = 0; i < 11; ++i) want.push_back(1);
  want.push_back(-1);
  for (int i = 0; i < 5; ++i) want.push_back(2);
  for (int i = 0; i < 3; ++i) want.push_back(-1);
  EXPECT_EQ(seg, want);
  EXPECT_THAT(thd_local_segments(kCu, pad, 2, 0), ElementsAre(0, 0, 0, -1, 1, 1, 1, 1, 1, -1, 2, 2, -1, -1));
}

TEST(ThdPartition, PadForCpMatchesTheFrameworkExample) {
  std::vector<std::int64_t> ids(23), labels(23);
  for (int i = 0; i < 23; ++i) {
    ids[static_cast<std::size_t>(i)] = 4 + i;
    labels[static_cast<std::size_t>(i)] = 100 + i;
  }
  const ThdPadded p =
      pad_thd_for_cp(Tensor::from_vector(ids, {23}), Tensor::from_vector(labels, {23}), kCu, 2, /*pad_id=*/1);
  EXPECT_THAT(p.cu_seqlens_padded, ElementsAre(0, 8, 20, 28));
  const V got_ids = p.input_ids.to_vector<std::int64_t>();
  const V got_labels = p.labels.to_vector<std::int64_t>();
  const V seg = thd_segment_ids(kCu, p.cu_seqlens_padded);
  ASSERT_EQ(got_ids.size(), 28u);
  EXPECT_EQ(p.input_ids.dtype(), DType::i64);
  std::int64_t next = 0;
  for (std::size_t t = 0; t < 28; ++t) {
    if (seg[t] < 0) {
      EXPECT_EQ(got_ids[t], 1) << t;
      EXPECT_EQ(got_labels[t], -100) << t;
    } else {
      EXPECT_EQ(got_ids[t], 4 + next) << t;
      EXPECT_EQ(got_labels[t], 100 + next) << t;
      ++next;
    }
  }
  EXPECT_EQ(next, 23);
  // Unpadding restores the packed real tokens exactly.
  EXPECT_THAT(thd_unpad(p.input_ids, kCu, p.cu_seqlens_padded).to_vector<std::int64_t>(), ElementsAreArray(ids));
}

TEST(ThdPartition, PadKeepsDtypeAndTrailingDims) {
  const V cu = {0, 1, 1, 3}, pad = thd_padded_cu_seqlens(cu, 1);  // [0, 2, 2, 4]
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor y = thd_pad(x, cu, pad, -7.0);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_THAT(y.to_vector<float>(), ElementsAre(1, 2, -7, -7, 3, 4, 5, 6));
}

TEST(ThdPartition, PartitionAndUnpartitionTensors) {
  for (std::int64_t cp : {1, 2, 3}) {
    const V cu = {0, 5, 5, 17, 18}, pad = thd_padded_cu_seqlens(cu, cp);
    const std::int64_t total = pad.back();
    const Tensor x = labelled_bsh(1, total).select(0, 0);  // [T, 2], value 10 t + k
    std::vector<Tensor> locals;
    for (std::int64_t r = 0; r < cp; ++r) {
      const Tensor local = thd_partition(x, 0, pad, cp, r);
      const V idx = thd_partition_indices(pad, cp, r);
      ASSERT_EQ(local.size(0), static_cast<std::int64_t>(idx.size()));
      for (std::size_t t = 0; t < idx.size(); ++t) {
        EXPECT_EQ(local.at({static_cast<std::int64_t>(t), 1}), 10.0 * idx[t] + 1);
      }
      locals.push_back(local);
    }
    EXPECT_TRUE(runtime::bitwise_equal(thd_unpartition(locals, 0, pad), x));
  }
}

TEST(ThdPartition, PartitionAlongALaterDim) {
  const V pad = {0, 4, 8};
  const Tensor x = labelled_bsh(2, 8);  // [2, T=8, 2]
  const Tensor local = thd_partition(x, 1, pad, 2, 1);
  EXPECT_EQ(local.shape(), (runtime::Shape{2, 4, 2}));
  EXPECT_EQ(local.at({1, 0, 0}), 1000.0 + 10.0);  // global 1 (chunk 1 of sequence 0)
  EXPECT_EQ(local.at({1, 3, 0}), 1000.0 + 60.0);  // global 6 (chunk 2 of sequence 1)
}

TEST(ThdPartition, Errors) {
  EXPECT_THAT(error_of([] { thd_padded_cu_seqlens({1, 3}, 2); }), HasSubstr("start with 0"));
  EXPECT_THAT(error_of([] { thd_padded_cu_seqlens({0, 5, 3}, 2); }), HasSubstr("decreases at index 2"));
  EXPECT_THAT(error_of([] { thd_padded_cu_seqlens({}, 2); }), HasSubstr("start with 0"));
  EXPECT_THAT(error_of([] { thd_partition_indices({0, 7}, 2, 0); }), HasSubstr("not a multiple of 2*cp = 4"));
  EXPECT_THAT(error_of([] { thd_cu_seqlens_on_rank({0, 9}, {0, 8}, 2, 0); }), HasSubstr("longer in cu_seqlens"));
  EXPECT_THAT(error_of([] {
                thd_cu_seqlens_on_rank({0, 3}, {0, 4, 8}, 2, 0);
              }),
              HasSubstr("different numbers of sequences"));
  EXPECT_THAT(error_of([] { thd_partition(Tensor::zeros({9}), 0, {0, 8}, 2, 0); }), HasSubstr("describes 8"));
  EXPECT_THAT(error_of([] { thd_pad(Tensor::zeros({4}), {0, 3}, {0, 4}, 0); }), HasSubstr("describes 3"));
  EXPECT_THAT(error_of([] { thd_partition_source_index({0, 8}, 2, 0, 4); }), HasSubstr("local index 4"));
  EXPECT_THAT(error_of([] { thd_local_positions({0, 4, 8}, 2, 0, {1}); }), HasSubstr("start_positions"));
  EXPECT_THAT(error_of([] { index_select(Tensor::zeros({3}), 0, {0, 3}); }), HasSubstr("index 3"));
}

TEST(Gather, IndexSelectAndCost) {
  struct Sink : runtime::CostSink {
    int calls = 0;
    void charge(const runtime::OpCost&) override { ++calls; }
  } sink;
  runtime::ScopedCostSink guard(&sink);
  const Tensor x = Tensor::arange(10, DType::f32);
  EXPECT_THAT(index_select(x, 0, {3, 4, 5, 0, 9, 8}).to_vector<float>(), ElementsAre(3, 4, 5, 0, 9, 8));
  EXPECT_EQ(sink.calls, 1);  // one cat, however many runs
  EXPECT_EQ(index_select(x, 0, {}).numel(), 0);
}

}  // namespace
}  // namespace ranksim::cp

#include "runtime/tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Tensor, FactoriesFillValues) {
  EXPECT_THAT(Tensor::zeros({2, 2}).to_vector<float>(), ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(Tensor::ones({3}, DType::i32).to_vector<std::int32_t>(), ElementsAre(1, 1, 1));
  EXPECT_THAT(Tensor::full({2}, -1.5, DType::f64).to_vector<double>(), ElementsAre(-1.5, -1.5));
  EXPECT_THAT(Tensor::arange(4, DType::i64).to_vector<std::int64_t>(), ElementsAre(0, 1, 2, 3));
  const Tensor v = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.dtype(), DType::f32);
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.strides(), (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(v.at({1, 0}), 4.0);
  EXPECT_EQ(v.numel(), 6);
  EXPECT_EQ(v.nbytes(), 24u);
  EXPECT_EQ(v.str(), "f32[2, 3]");
  // Values are rounded to the dtype: 0.1 as bf16 is the pattern 0x3DCD.
  const Tensor b = Tensor::from_vector(std::vector<double>{0.1, 1.0}, {2}, DType::bf16);
  EXPECT_EQ(b.data<BFloat16>()[0].bits, 0x3DCD);
  EXPECT_EQ(b.data<BFloat16>()[1].bits, 0x3F80);
  const Tensor scalar = Tensor::full({}, 7.0);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item(), 7.0);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(Tensor::zeros({2, -1}), Error);
  EXPECT_THROW(Tensor::shape_only({1LL << 40, 1LL << 40}), Error);  // more than 2^63 bytes
}

TEST(Tensor, NarrowSelectTransposeAreViews) {
  const Tensor x = Tensor::arange(24).view({2, 3, 4});
  const Tensor n = x.narrow(2, 1, 2);  // [2, 3, 2]
  EXPECT_EQ(n.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.strides(), (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_EQ(n.storage_offset(), 1);
  EXPECT_FALSE(n.is_contiguous());
  EXPECT_EQ(n.at({1, 2, 1}), 1 * 12 + 2 * 4 + 2);
  const Tensor s = x.select(-2, 1);  // [2, 4]
  EXPECT_THAT(s.to_vector<float>(), ElementsAre(4, 5, 6, 7, 16, 17, 18, 19));
  const Tensor t = x.transpose(0, 2);  // [4, 3, 2]
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.at({3, 1, 1}), 1 * 12 + 1 * 4 + 3);
  const Tensor p = x.permute({1, 2, 0});  // [3, 4, 2]
  EXPECT_EQ(p.at({2, 3, 1}), 1 * 12 + 2 * 4 + 3);
  // Writes through a view land in the base tensor.
  n.set({0, 0, 0}, -1.0);
  EXPECT_EQ(x.at({0, 0, 1}), -1.0);
  EXPECT_TRUE(n.shares_storage(x));
  // Leading narrow keeps contiguity; a view of a view composes offsets.
  const Tensor rows = x.narrow(0, 1, 1).narrow(1, 1, 2);
  EXPECT_THAT(rows.to_vector<float>(), ElementsAre(16, 17, 18, 19, 20, 21, 22, 23));
  EXPECT_TRUE(rows.is_contiguous());

  EXPECT_THROW(x.narrow(1, 2, 2), Error);
  EXPECT_THROW(x.narrow(3, 0, 1), Error);
  EXPECT_THROW(x.select(0, 2), Error);
  EXPECT_THROW(x.permute({0, 0, 1}), Error);
  try {
    x.narrow(-1, 3, 5);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("narrow(-1, 3, 5)"));
    EXPECT_THAT(e.what(), HasSubstr("f32[2, 3, 4]"));
  }
}

TEST(Tensor, ViewReshapeContiguous) {
  const Tensor x = Tensor::arange(12).view({3, 4});
  EXPECT_EQ(x.view({2, -1}).shape(), (Shape{2, 6}));
  EXPECT_TRUE(x.view({12}).shares_storage(x));
  EXPECT_THROW(x.view({5, -1}), Error);
  EXPECT_THROW(x.view({-1, -1}), Error);
  EXPECT_THROW(x.view({13}), Error);
  const Tensor t = x.transpose(0, 1);  // [4, 3], not contiguous
  EXPECT_THROW(t.view({12}), Error);
  const Tensor r = t.reshape({12});
  EXPECT_FALSE(r.shares_storage(x));
  EXPECT_THAT(r.to_vector<float>(), ElementsAre(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11));
  const Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), (std::vector<std::int64_t>{3, 1}));
  EXPECT_TRUE(x.contiguous().shares_storage(x));
}

TEST(Tensor, BitwiseEqual) {
  const Tensor a = Tensor::from_vector(std::vector<float>{0.0f, 1.0f}, {2});
  EXPECT_TRUE(bitwise_equal(a, a.clone()));
  EXPECT_FALSE(bitwise_equal(a, Tensor::from_vector(std::vector<float>{-0.0f, 1.0f}, {2})));
  EXPECT_FALSE(bitwise_equal(a, a.to(DType::f64)));
  EXPECT_FALSE(bitwise_equal(a, a.view({1, 2})));
  const Tensor m = Tensor::arange(4).view({2, 2});
  EXPECT_TRUE(bitwise_equal(m.transpose(0, 1), m.transpose(0, 1).contiguous()));
}

TEST(Tensor, ShapeOnlyHasNoData) {
  const Tensor s = Tensor::shape_only({1LL << 20, 1LL << 20}, DType::bf16);  // 2 TiB if real
  EXPECT_TRUE(s.defined());
  EXPECT_FALSE(s.has_data());
  EXPECT_EQ(s.nbytes(), 2ull << 40);
  EXPECT_EQ(s.str(), "bf16[1048576, 1048576] (shape-only)");
  const Tensor v = s.narrow(0, 0, 8).transpose(0, 1).reshape({-1});
  EXPECT_FALSE(v.has_data());
  EXPECT_EQ(v.shape(), (Shape{8LL << 20}));
  const Tensor f = s.narrow(1, 0, 4).to(DType::f32);
  EXPECT_FALSE(f.has_data());
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_FALSE(s.clone().has_data());
  s.fill_(1.0);  // moves nothing
  EXPECT_THROW(s.at({0, 0}), Error);
  EXPECT_THROW(s.data<BFloat16>(), Error);
  EXPECT_THROW(s.to_vector<float>(), Error);
  EXPECT_THROW(Tensor::shape_only({}).item(), Error);
  EXPECT_THROW(Tensor::zeros({2}).copy_(Tensor::shape_only({2})), Error);
  try {
    s.raw_data();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("shape-only"));
  }
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW(Tensor().clone(), Error);
}

struct CountingPending : PendingWrite {
  int* waits;
  explicit CountingPending(int* w) : waits(w) {}
  void wait() override { ++*waits; }
};

TEST(Tensor, PendingWriteIsAwaitedOnceBeforeAccess) {
  const Tensor x = Tensor::zeros({4});
  const Tensor view = x.narrow(0, 1, 2);
  int waits = 0;
  x.set_pending_write(std::make_shared<CountingPending>(&waits));
  (void)x.raw_data_unsynchronized();  // the writer itself does not wait
  EXPECT_EQ(waits, 0);
  (void)view.at({0});  // any handle on the storage waits
  EXPECT_EQ(waits, 1);
  (void)x.to_vector<float>();
  EXPECT_EQ(waits, 1);  // cleared after the first wait
  x.set_pending_write(std::make_shared<CountingPending>(&waits));
  (void)view.clone();
  EXPECT_EQ(waits, 2);
  // Two writes into different slices of one buffer: an access waits for both.
  x.narrow(0, 0, 2).set_pending_write(std::make_shared<CountingPending>(&waits));
  x.narrow(0, 2, 2).set_pending_write(std::make_shared<CountingPending>(&waits));
  x.fill_(1.0);
  EXPECT_EQ(waits, 4);
}

struct ThrowingPending : PendingWrite {
  void wait() override { throw Error("the collective failed"); }
};

TEST(Tensor, PendingWriteErrorsSurfaceOnceAndLaterWritesStay) {
  const Tensor x = Tensor::zeros({2});
  int waits = 0;
  x.set_pending_write(std::make_shared<ThrowingPending>());
  x.set_pending_write(std::make_shared<CountingPending>(&waits));
  EXPECT_THROW((void)x.at({0}), Error);
  EXPECT_EQ(waits, 0);
  EXPECT_EQ(x.at({0}), 0.0);  // the failed write is detached; the next one is awaited
  EXPECT_EQ(waits, 1);
}

// The generator is splitmix64 read by counter: compare against the sequential definition
// (state += golden gamma, then the mix) and its published first outputs.
TEST(Random, IsSplitmix64ByCounter) {
  EXPECT_EQ(random_bits(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(random_bits(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(random_bits(1234567, 0), 0x599ed017fb08fc85ull);
  for (std::uint64_t seed : {0ull, 42ull, 0xffffffffffffffffull}) {
    std::uint64_t state = seed;
    for (std::uint64_t i = 0; i < 1000; ++i) {
      state += 0x9e3779b97f4a7c15ull;
      std::uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      ASSERT_EQ(random_bits(seed, i), z ^ (z >> 31));
    }
  }
}

TEST(Random, RandnIsDeterministicAndIndexed) {
  const Tensor a = Tensor::randn({6}, 7);
  EXPECT_TRUE(bitwise_equal(a, Tensor::randn({6}, 7)));
  EXPECT_FALSE(bitwise_equal(a, Tensor::randn({6}, 8)));
  // Element i depends only on (seed, i): shape and length do not matter.
  EXPECT_TRUE(bitwise_equal(a.view({2, 3}), Tensor::randn({2, 3}, 7)));
  EXPECT_TRUE(bitwise_equal(a.narrow(0, 0, 4), Tensor::randn({4}, 7)));
  // bf16 values are the f64 draws rounded once.
  const Tensor b = Tensor::randn({6}, 7, 0.0, 1.0, DType::bf16);
  const std::vector<double> d = Tensor::randn({6}, 7, 0.0, 1.0, DType::f64).to_vector<double>();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(b.data<BFloat16>()[i].bits, f32_to_bf16_bits(static_cast<float>(d[static_cast<std::size_t>(i)])));
  }
  EXPECT_THROW(Tensor::randn({2}, 1, 0, 1, DType::i64), Error);
}

// The polar method with libm's log must agree with randn's own portable log to a few ulps.
TEST(Random, RandnMatchesPolarMethodWithLibmLog) {
  const std::uint64_t seed = 2024;
  const std::vector<double> got = Tensor::randn({1000}, seed, 0, 1, DType::f64).to_vector<double>();
  for (std::uint64_t i = 0; i < got.size(); ++i) {
    const std::uint64_t stream = random_bits(seed, i);
    double z = 0;
    for (std::uint64_t attempt = 0;; ++attempt) {
      const double u = 2.0 * static_cast<double>(random_bits(stream, 2 * attempt) >> 11) * 0x1p-53 - 1;
      const double v = 2.0 * static_cast<double>(random_bits(stream, 2 * attempt + 1) >> 11) * 0x1p-53 - 1;
      const double s = u * u + v * v;
      if (s > 0 && s < 1) {
        z = u * std::sqrt(-2.0 * std::log(s) / s);
        break;
      }
    }
    ASSERT_NEAR(got[i], z, 8e-16 * std::fabs(z) + 1e-300) << i;
  }
}

TEST(Random, Moments) {
  // n = 200000 standard normals: the sample mean has standard error 1/sqrt(n) = 0.0022 and the
  // sample variance sqrt(2/n) = 0.0032; five standard errors bound a false failure below 1e-6.
  const std::vector<double> x = Tensor::randn({200000}, 99, 0, 1, DType::f64).to_vector<double>();
  double sum = 0, sq = 0;
  for (double v : x) sum += v;
  const double mean = sum / static_cast<double>(x.size());
  for (double v : x) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 5 * 0.0022);
  EXPECT_NEAR(sq / static_cast<double>(x.size()), 1.0, 5 * 0.0032);
  // Uniform on [-2, 6): mean 2 with standard error (8/sqrt(12))/sqrt(n) = 0.0052.
  const std::vector<double> u = Tensor::uniform({200000}, 5, -2.0, 6.0, DType::f64).to_vector<double>();
  double usum = 0;
  for (double v : u) {
    ASSERT_GE(v, -2.0);
    ASSERT_LT(v, 6.0);
    usum += v;
  }
  EXPECT_NEAR(usum / static_cast<double>(u.size()), 2.0, 5 * 0.0052);
}

TEST(Tensor, FromBytes) {
  const std::vector<std::uint16_t> bits = {0x3F80, 0xC000};
  const Tensor t = Tensor::from_bytes({2}, DType::bf16, bits.data(), 4);
  EXPECT_THAT(t.to_vector<float>(), ElementsAre(1.0f, -2.0f));
  EXPECT_THROW(Tensor::from_bytes({3}, DType::bf16, bits.data(), 4), Error);
}

}  // namespace
}  // namespace ranksim::runtime

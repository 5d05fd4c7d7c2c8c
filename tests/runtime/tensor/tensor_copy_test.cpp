// Tensor's copies (runtime/tensor/tensor_copy.cpp) on the host: clone, to, copy_ and fill_ through
// views, and what they charge.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using ::testing::ElementsAre;

struct RecordingSink : CostSink {
  std::vector<OpCost> charges;
  void charge(const OpCost& c) override { charges.push_back(c); }
};

TEST(Tensor, CopiesShareStorageAndCloneDoesNot) {
  const Tensor a = Tensor::zeros({3});
  const Tensor shared = a;
  const Tensor cloned = a.clone();
  shared.set({1}, 5.0);
  EXPECT_EQ(a.at({1}), 5.0);
  EXPECT_EQ(cloned.at({1}), 0.0);
  EXPECT_TRUE(a.shares_storage(shared));
  EXPECT_FALSE(a.shares_storage(cloned));
}

TEST(Tensor, ToConvertsWithRounding) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1.0f, 0.1f, 65520.0f, -2.5f}, {4});
  const Tensor h = x.to(DType::f16);
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3C00);
  EXPECT_EQ(h.data<Half>()[1].bits, 0x2E66);
  EXPECT_EQ(h.data<Half>()[2].bits, 0x7C00);
  EXPECT_THAT(x.to(DType::i32).to_vector<std::int32_t>(), ElementsAre(1, 0, 65520, -2));
  EXPECT_EQ(h.to(DType::f32).at({1}), static_cast<double>(f16_bits_to_f32(0x2E66)));
  EXPECT_TRUE(x.to(DType::f32).shares_storage(x));
  // Converting a strided view converts the view's elements only.
  EXPECT_THAT(x.narrow(0, 2, 2).to(DType::f64).to_vector<double>(), ElementsAre(65520.0, -2.5));
  EXPECT_THROW(x.data<double>(), Error);
}

TEST(Tensor, CopyAndFillThroughViews) {
  const Tensor m = Tensor::zeros({3, 3});
  m.select(1, 1).copy_(Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}));
  EXPECT_THAT(m.to_vector<float>(), ElementsAre(0, 1, 0, 0, 2, 0, 0, 3, 0));
  m.narrow(0, 2, 1).fill_(9);
  EXPECT_THAT(m.to_vector<float>(), ElementsAre(0, 1, 0, 0, 2, 0, 9, 9, 9));
  // Overlapping source and destination: the copy reads the source as it was.
  const Tensor v = Tensor::arange(5);
  v.narrow(0, 1, 4).copy_(v.narrow(0, 0, 4));
  EXPECT_THAT(v.to_vector<float>(), ElementsAre(0, 0, 1, 2, 3));
  EXPECT_THROW(m.copy_(Tensor::zeros({3})), Error);
}

TEST(Tensor, CopiesAreCharged) {
  RecordingSink sink;
  ScopedCostSink guard(&sink);
  const Tensor x = Tensor::shape_only({4, 8}, DType::bf16);
  (void)x.clone();
  (void)x.to(DType::f32);
  (void)x.contiguous();                   // already contiguous: no copy, no charge
  (void)x.transpose(0, 1).reshape({32});  // a copy
  ASSERT_EQ(sink.charges.size(), 3u);
  EXPECT_STREQ(sink.charges[0].op, "copy");
  EXPECT_EQ(sink.charges[0].bytes, 2 * 32 * 2);
  EXPECT_STREQ(sink.charges[1].op, "convert");
  EXPECT_EQ(sink.charges[1].bytes, 32 * (2 + 4));
  EXPECT_EQ(sink.charges[1].dtype, DType::bf16);
  EXPECT_STREQ(sink.charges[2].op, "copy");
}

}  // namespace
}  // namespace ranksim::runtime

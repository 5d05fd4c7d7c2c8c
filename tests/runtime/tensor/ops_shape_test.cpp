// cat and split: exact copies and views along any dimension.
#include "runtime/tensor/ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "sim/error.h"

namespace ranksim::runtime {
namespace {

// --- cat / split ----------------------------------------------------------------------------

TEST(CatSplit, ConcatenatesAlongAnyDimension) {
  const Tensor a = Tensor::arange(24, DType::i64).view({2, 3, 4});
  for (std::int64_t dim : {0, 1, 2, -1}) {
    const std::int64_t d = dim < 0 ? dim + 3 : dim;
    const std::int64_t n = a.size(d);
    const std::vector<std::int64_t> sizes = {1, n - 1};
    const std::vector<Tensor> pieces = split(a, sizes, dim);
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_TRUE(pieces[1].shares_storage(a));
    EXPECT_EQ(pieces[1].size(d), n - 1);
    const Tensor back = cat(pieces, dim);
    EXPECT_TRUE(bitwise_equal(back, a));
    EXPECT_TRUE(back.is_contiguous());
    EXPECT_TRUE(bitwise_equal(split_backward(pieces, dim), a));
    const std::vector<Tensor> grads = cat_backward(a, sizes, dim);
    EXPECT_TRUE(bitwise_equal(grads[0], pieces[0]));
  }
  // Three pieces of different sizes along the middle dim, checked element by element.
  const Tensor x = Tensor::randn({2, 1, 3}, 161, 0, 1, DType::bf16);
  const Tensor y = Tensor::randn({2, 4, 3}, 162, 0, 1, DType::bf16);
  const Tensor z = Tensor::randn({2, 2, 3}, 163, 0, 1, DType::bf16);
  const Tensor c = cat({x, y, z}, 1);
  ASSERT_EQ(c.shape(), (Shape{2, 7, 3}));
  for (std::int64_t i = 0; i < 2; ++i) {
    for (std::int64_t j = 0; j < 7; ++j) {
      for (std::int64_t k = 0; k < 3; ++k) {
        const double want = j < 1 ? x.at({i, j, k}) : j < 5 ? y.at({i, j - 1, k}) : z.at({i, j - 5, k});
        EXPECT_EQ(c.at({i, j, k}), want);
      }
    }
  }
  EXPECT_THROW(cat({x, Tensor::zeros({2, 1, 4}, DType::bf16)}, 1), Error);
  EXPECT_THROW(cat({x, Tensor::zeros({2, 1, 3})}, 1), Error);
  EXPECT_THROW(cat({}, 0), Error);
  EXPECT_THROW(split(a, {1, 2}, 0), Error);
  EXPECT_THROW(split(a, {3, -1}, 0), Error);
  EXPECT_THROW(split(a, {2}, 3), Error);
}

}  // namespace
}  // namespace ranksim::runtime

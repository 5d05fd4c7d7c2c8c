// What every op of runtime/tensor/ops.h charges, in real and shape-only mode, and that ops wait
// for pending writes on their inputs.
#include "runtime/tensor/ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/ops_test_helpers.h"

namespace ranksim::runtime {
namespace {

using namespace ops_testing;  // ops_test_helpers.h: tolerances, comparisons, finite differences

// --- costs and shape-only mode --------------------------------------------------------------

// Runs every op once on the given tensors and returns what was charged.
std::vector<OpCost> run_all(bool with_data, DType dtype) {
  auto make = [&](const Shape& s, std::uint64_t seed) {
    return with_data ? Tensor::randn(s, seed, 0, 1, dtype) : Tensor::shape_only(s, dtype);
  };
  auto make_ids = [&](const Shape& s, std::int64_t v) {
    if (!with_data) return Tensor::shape_only(s, DType::i64);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(shape_numel(s)));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i) % v;
    return Tensor::from_vector(ids, s);
  };
  RecordingSink sink;
  ScopedCostSink guard(&sink);
  const Tensor a = make({2, 8, 16}, 1), b = make({16, 12}, 2);
  const Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 8, 12}));
  EXPECT_EQ(c.has_data(), with_data);
  const MatmulGrads mg = matmul_backward(c, a, b);
  EXPECT_EQ(mg.db.shape(), b.shape());
  EXPECT_EQ(mg.db.has_data(), with_data);
  const Tensor bias = make({12}, 3);
  EXPECT_EQ(add(c, bias).has_data(), with_data);
  EXPECT_EQ(add_backward(c, {12}).db.shape(), (Shape{12}));
  (void)scale(c, 2.0);
  const LayerNormResult ln = layer_norm(c, make({12}, 4), bias);
  EXPECT_EQ(ln.mean.shape(), (Shape{2, 8}));
  EXPECT_EQ(ln.rstd.has_data(), with_data);
  const LayerNormGrads lg = layer_norm_backward(c, c, bias, ln.mean, ln.rstd);
  EXPECT_EQ(lg.dweight.shape(), (Shape{12}));
  const RmsNormResult rn = rms_norm(c, bias);
  EXPECT_EQ(rn.rstd.shape(), (Shape{2, 8}));
  EXPECT_EQ(rn.y.has_data(), with_data);
  const RmsNormGrads rg = rms_norm_backward(c, c, bias, rn.rstd);
  EXPECT_EQ(rg.dweight.shape(), (Shape{12}));
  EXPECT_EQ(rg.dx.has_data(), with_data);
  (void)gelu_backward(c, gelu(c));
  const Tensor sw = swiglu(c);
  EXPECT_EQ(sw.shape(), (Shape{2, 8, 6}));
  EXPECT_EQ(swiglu_backward(sw, c).has_data(), with_data);
  (void)softmax_backward(c, softmax(c));
  const Tensor ids = make_ids({2, 8}, 12);
  const Tensor w = make({12, 16}, 5);
  EXPECT_EQ(embedding(ids, w).shape(), (Shape{2, 8, 16}));
  EXPECT_EQ(embedding_backward(a, ids, 12).shape(), (Shape{12, 16}));
  const CrossEntropyResult ce = cross_entropy(c, ids);
  EXPECT_EQ(ce.loss.has_data(), with_data);
  EXPECT_EQ(cross_entropy_backward(with_data ? Tensor::ones({}, dtype) : Tensor::shape_only({}, dtype), c, ids, ce.lse)
                .shape(),
            c.shape());
  const Tensor joined = cat({a, a}, -1);
  EXPECT_EQ(joined.shape(), (Shape{2, 8, 32}));
  EXPECT_EQ(split_backward(split(joined, {5, 27}, 2), 2).has_data(), with_data);
  return sink.charges;
}

TEST(Cost, ShapeOnlyChargesExactlyWhatRealDataCharges) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::vector<OpCost> real = run_all(true, dtype);
    const std::vector<OpCost> shape_only = run_all(false, dtype);
    ASSERT_EQ(real.size(), shape_only.size());
    ASSERT_EQ(real.size(), 21u);
    for (std::size_t i = 0; i < real.size(); ++i) {
      EXPECT_STREQ(real[i].op, shape_only[i].op);
      EXPECT_EQ(real[i].flops, shape_only[i].flops) << real[i].op;
      EXPECT_EQ(real[i].bytes, shape_only[i].bytes) << real[i].op;
      EXPECT_EQ(real[i].dtype, dtype) << real[i].op;
    }
  }
}

TEST(Cost, DocumentedFlopsAndBytes) {
  const std::vector<OpCost> c = run_all(false, DType::bf16);
  auto find = [&](const char* op) {
    for (const OpCost& x : c) {
      if (std::string(x.op) == op) return x;
    }
    ADD_FAILURE() << "no charge for " << op;
    return OpCost{op, -1, -1, DType::f32};
  };
  const double m = 16, n = 12, k = 16, two = 2;  // a [2, 8, 16] x b [16, 12]: M = 2*8 rows
  EXPECT_EQ(find("matmul").flops, 2 * m * n * k);
  EXPECT_EQ(find("matmul").bytes, two * (m * k + k * n + m * n));
  EXPECT_EQ(find("matmul_backward").flops, 4 * m * n * k);
  EXPECT_EQ(find("matmul_backward").bytes, two * (2 * m * n + m * k + k * n + m * k + k * n));
  EXPECT_EQ(find("add").flops, m * n);
  EXPECT_EQ(find("add").bytes, two * (m * n + n + m * n));
  EXPECT_EQ(find("add_backward").bytes, two * (m * n + n));
  EXPECT_EQ(find("scale").flops, m * n);
  EXPECT_EQ(find("layer_norm").flops, 8 * m * n);
  // x, weight, bias, y in bf16; mean and rstd in f32.
  EXPECT_EQ(find("layer_norm").bytes, two * (m * n + n + n + m * n) + 4 * (m + m));
  EXPECT_EQ(find("layer_norm_backward").flops, 14 * m * n);
  EXPECT_EQ(find("rms_norm").flops, 4 * m * n);
  // x, weight, y in bf16; rstd in f32.
  EXPECT_EQ(find("rms_norm").bytes, two * (m * n + n + m * n) + 4 * m);
  EXPECT_EQ(find("rms_norm_backward").flops, 8 * m * n);
  // dy, x, weight, dx, dweight in bf16; rstd in f32.
  EXPECT_EQ(find("rms_norm_backward").bytes, two * (m * n + m * n + n + m * n + n) + 4 * m);
  EXPECT_EQ(find("gelu").flops, 9 * m * n);
  EXPECT_EQ(find("gelu_backward").flops, 19 * m * n);
  // swiglu: x [m, n] = [gate | up], y [m, n / 2].
  EXPECT_EQ(find("swiglu").flops, 6 * m * n / 2);
  EXPECT_EQ(find("swiglu").bytes, two * (m * n + m * n / 2));
  EXPECT_EQ(find("swiglu_backward").flops, 10 * m * n / 2);
  EXPECT_EQ(find("swiglu_backward").bytes, two * (m * n / 2 + m * n + m * n));
  EXPECT_EQ(find("softmax").flops, 5 * m * n);
  EXPECT_EQ(find("softmax").bytes, two * 2 * m * n);
  EXPECT_EQ(find("softmax_backward").flops, 4 * m * n);
  EXPECT_EQ(find("embedding").flops, 0);
  EXPECT_EQ(find("embedding").bytes, 8 * m + two * 2 * m * 16);  // i64 ids, rows read and written
  EXPECT_EQ(find("embedding_backward").bytes, 8 * m + two * m * 16 + two * 12 * 16);
  EXPECT_EQ(find("cross_entropy").flops, 4 * m * n);
  EXPECT_EQ(find("cross_entropy").bytes, two * m * n + 8 * m + 4 * m + two);
  EXPECT_EQ(find("cat").bytes, two * 2 * (2 * 8 * 32));
  EXPECT_EQ(find("split_backward").bytes, two * 2 * (2 * 8 * 32));
}

TEST(Cost, NoSinkMeansNoCharges) {
  RecordingSink sink;
  {
    ScopedCostSink guard(&sink);
    EXPECT_EQ(cost_sink(), &sink);
    {
      ScopedCostSink off(nullptr);
      (void)matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}));
    }
    (void)matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}));
  }
  EXPECT_EQ(cost_sink(), nullptr);
  EXPECT_EQ(sink.charges.size(), 1u);
}

struct CountingPending : PendingWrite {
  int* waits;
  explicit CountingPending(int* w) : waits(w) {}
  void wait() override { ++*waits; }
};

TEST(Ops, WaitForPendingWritesOnInputs) {
  int waits = 0;
  const Tensor x = Tensor::shape_only({4, 4});
  x.set_pending_write(std::make_shared<CountingPending>(&waits));
  (void)gelu(x);  // even shape-only inputs: the op's start time depends on the write
  EXPECT_EQ(waits, 1);
  const Tensor y = Tensor::ones({4, 4});
  y.set_pending_write(std::make_shared<CountingPending>(&waits));
  (void)matmul(y, y);
  EXPECT_EQ(waits, 2);
}

}  // namespace
}  // namespace ranksim::runtime

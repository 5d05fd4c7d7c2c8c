// add, scale, GELU and SwiGLU against float64 references (tolerances: tests/runtime/tensor/ops_test_helpers.h).
#include "runtime/tensor/ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/tensor/ops_test_helpers.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using namespace ops_testing;  // ops_test_helpers.h: tolerances, comparisons, finite differences
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// --- add / scale ----------------------------------------------------------------------------

TEST(Add, SameShapeAndBiasBroadcast) {
  const Tensor a = Tensor::randn({2, 3, 4}, 41);
  for (const Shape& bs : {Shape{2, 3, 4}, Shape{3, 4}, Shape{4}}) {
    const Tensor b = Tensor::randn(bs, 42);
    const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    const std::vector<float> cv = add(a, b).to_vector<float>();
    for (std::size_t i = 0; i < av.size(); ++i) {
      ASSERT_EQ(cv[i], av[i] + bv[i % bv.size()]);  // one correctly rounded f32 addition
    }
  }
  // bf16: the f32 sum rounded once.
  const Tensor x = Tensor::randn({3, 8}, 43, 0, 1, DType::bf16);
  const Tensor bias = Tensor::randn({8}, 44, 0, 1, DType::bf16);
  EXPECT_TRUE(bitwise_equal(add(x, bias), add(x.to(DType::f32), bias.to(DType::f32)).to(DType::bf16)));
  EXPECT_THROW(add(a, Tensor::zeros({3})), Error);
  EXPECT_THROW(add(a, Tensor::zeros({2, 3})), Error);  // leading, not trailing
  EXPECT_THROW(add(a, Tensor::zeros({4}, DType::f64)), Error);
}

TEST(Add, BackwardSumsOverBroadcastDims) {
  const Tensor dc = Tensor::randn({5, 6, 7}, 45);
  const AddGrads same = add_backward(dc, {5, 6, 7});
  EXPECT_TRUE(same.da.shares_storage(dc));
  EXPECT_TRUE(same.db.shares_storage(dc));
  const AddGrads g = add_backward(dc, {7});
  EXPECT_TRUE(g.da.shares_storage(dc));
  ASSERT_EQ(g.db.shape(), (Shape{7}));
  const std::vector<double> d = vals(dc);
  std::vector<double> ref(7, 0), tol(7, 0);
  for (std::size_t i = 0; i < d.size(); ++i) {
    ref[i % 7] += d[i];
    tol[i % 7] += gamma(30) * std::fabs(d[i]);  // 30 terms per column
  }
  expect_within(vals(g.db), ref, tol, "add db");
  EXPECT_THROW(add_backward(dc, {6}), Error);
}

TEST(Scale, ForwardAndBackward) {
  const Tensor x = Tensor::randn({4, 5}, 51);
  const std::vector<float> xv = x.to_vector<float>();
  const std::vector<float> yv = scale(x, 0.125).to_vector<float>();
  const std::vector<float> dv = scale_backward(x, -3.0).to_vector<float>();
  for (std::size_t i = 0; i < xv.size(); ++i) {
    EXPECT_EQ(yv[i], 0.125f * xv[i]);
    EXPECT_EQ(dv[i], -3.0f * xv[i]);
  }
  const Tensor b = Tensor::randn({9}, 52, 0, 1, DType::bf16);
  EXPECT_TRUE(bitwise_equal(scale(b, 0.3), scale(b.to(DType::f32), 0.3).to(DType::bf16)));
}

// --- GELU -----------------------------------------------------------------------------------

TEST(Gelu, ForwardAndBackwardAgainstFloat64) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Tensor x = Tensor::randn({400}, 91, 0.0, 3.0, dtype);
    const Tensor dy = Tensor::randn({400}, 92, 0.0, 1.0, dtype);
    const std::vector<double> xv = vals(x), dyv = vals(dy);
    const std::vector<double> y = vals(gelu(x)), dx = vals(gelu_backward(dy, x));
    std::vector<double> yr, yt, dr, dt;
    for (std::size_t i = 0; i < xv.size(); ++i) {
      const double v = xv[i];
      const double arg = kGeluC * (v + kGeluA * v * v * v);
      const double t = std::tanh(arg);
      const double du = kGeluC * (1 + 3 * kGeluA * v * v);
      const double yy = 0.5 * v * (1 + t);
      const double dd = dyv[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du);
      // tanh's argument takes 7 roundings (two of them the f32 constants), 8u |arg| at most, which
      // moves t by (1 - t^2) times that; tanhf adds at most 2 ulp, 4u |t|. Then y = 0.5 v (1 + t)
      // adds 2u |y|; the derivative's two terms add at most 12u of their magnitudes, and its
      // (1 - t^2) doubles t's error times |t|.
      const double dt_err = kU32 * (8 * std::fabs(arg) * (1 - t * t) + 4 * std::fabs(t));
      double ytol = 0.5 * std::fabs(v) * dt_err + 3 * kU32 * std::fabs(yy);
      double dtol = std::fabs(dyv[i]) * ((0.5 + std::fabs(v * t * du)) * dt_err +
                                         12 * kU32 * (0.5 * std::fabs(1 + t) + std::fabs(0.5 * v * du)));
      if (dtype == DType::bf16) {
        ytol = kUBf16 * std::fabs(yy) + (1 + kUBf16) * ytol;
        dtol = kUBf16 * std::fabs(dd) + (1 + kUBf16) * dtol;
      }
      yr.push_back(yy);
      yt.push_back(ytol);
      dr.push_back(dd);
      dt.push_back(dtol);
    }
    expect_within(y, yr, yt, std::string("gelu ") + dtype_name(dtype));
    expect_within(dx, dr, dt, std::string("gelu_backward ") + dtype_name(dtype));
  }
  const Tensor x = Tensor::randn({10}, 93, 0.0, 2.0, DType::f64);
  const Tensor dy = Tensor::randn({10}, 94, 0.0, 1.0, DType::f64);
  expect_matches_fd(vals(gelu_backward(dy, x)), numeric_grad([&](const Tensor& v) { return dot(dy, gelu(v)); }, x),
                    "gelu dx");
}

// --- SwiGLU ---------------------------------------------------------------------------------

TEST(Swiglu, ForwardAndBackwardAgainstFloat64) {
  const std::int64_t F = 40;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x = Tensor::randn({2, 3, 2 * F}, 191, 0.0, 3.0, dtype);
    const Tensor dy = Tensor::randn({2, 3, F}, 192, 0.0, 1.0, dtype);
    const Tensor y = swiglu(x), dx = swiglu_backward(dy, x);
    ASSERT_EQ(y.shape(), (Shape{2, 3, F}));
    ASSERT_EQ(y.dtype(), dtype);
    ASSERT_EQ(dx.shape(), x.shape());
    ASSERT_EQ(dx.dtype(), dtype);
    const std::vector<double> xv = vals(x), dyv = vals(dy);
    const double u = unit_roundoff(dtype) + kU64;  // the op's and the reference's
    std::vector<double> yr, yt, dr(xv.size()), dt(xv.size());
    const auto f = static_cast<std::size_t>(F);
    for (std::size_t i = 0; i < dyv.size(); ++i) {
      const std::size_t o = (i / f) * 2 * f + i % f;  // gate at o, up at o + f
      const double g = xv[o], up = xv[o + f], d = dyv[i];
      const double sig = 1 / (1 + std::exp(-g));
      const double silu = g * sig;
      const double yy = silu * up;
      const double dgate = d * up * sig * (1 + g * (1 - sig));
      const double dup = d * silu;
      // exp adds at most 2u, 1 + e 1u, the division 1u (no cancellation: e > 0), the product 1u:
      // y within 6u |y|. The gate's derivative sig + silu (1 - sig) cancels in 1 - sig when sig
      // is near 1, so its error is bounded by the magnitudes sig + |silu|: 8u of them, and the
      // two products 2u more.
      double ytol = 6 * u * std::fabs(yy);
      double gtol = 10 * u * std::fabs(d * up) * (sig + std::fabs(silu));
      double utol = 6 * u * std::fabs(dup);
      if (dtype == DType::bf16) {
        ytol = kUBf16 * std::fabs(yy) + (1 + kUBf16) * ytol;
        gtol = kUBf16 * std::fabs(dgate) + (1 + kUBf16) * gtol;
        utol = kUBf16 * std::fabs(dup) + (1 + kUBf16) * utol;
      }
      yr.push_back(yy);
      yt.push_back(ytol);
      dr[o] = dgate;
      dt[o] = gtol;
      dr[o + f] = dup;
      dt[o + f] = utol;
    }
    expect_within(vals(y), yr, yt, std::string("swiglu ") + dtype_name(dtype));
    expect_within(vals(dx), dr, dt, std::string("swiglu_backward ") + dtype_name(dtype));
  }
  const Tensor x = Tensor::randn({2, 10}, 193, 0.0, 2.0, DType::f64);
  const Tensor dy = Tensor::randn({2, 5}, 194, 0.0, 1.0, DType::f64);
  expect_matches_fd(vals(swiglu_backward(dy, x)), numeric_grad([&](const Tensor& v) { return dot(dy, swiglu(v)); }, x),
                    "swiglu dx");
}

TEST(Swiglu, ShapeOnlyInputsGiveShapeOnlyOutputs) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor x = Tensor::shape_only({4, 3, 10}, dtype);
    const Tensor y = swiglu(x);
    EXPECT_FALSE(y.has_data());
    EXPECT_EQ(y.shape(), (Shape{4, 3, 5}));
    EXPECT_EQ(y.dtype(), dtype);
    const Tensor dx = swiglu_backward(Tensor::ones({4, 3, 5}, dtype), x);  // one shape-only input is enough
    EXPECT_FALSE(dx.has_data());
    EXPECT_EQ(dx.shape(), x.shape());
    EXPECT_EQ(dx.dtype(), dtype);
  }
}

TEST(Swiglu, Errors) {
  const Tensor x = Tensor::zeros({2, 6});
  EXPECT_THAT(
      [&] {
        swiglu(Tensor::zeros({2, 5}));
      },
      ThrowsMessage<Error>(HasSubstr("swiglu: x f32[2, 5] must have an even last dim")));
  EXPECT_THAT([&] { swiglu(Tensor::zeros({})); },
              ThrowsMessage<Error>(HasSubstr("swiglu: x f32[] needs at least one dim")));
  EXPECT_THAT(
      [&] {
        swiglu(Tensor::zeros({2, 6}, DType::i64));
      },
      ThrowsMessage<Error>(HasSubstr("swiglu: x i64[2, 6] must be floating")));
  EXPECT_THAT(
      [&] {
        swiglu_backward(Tensor::zeros({2, 3}, DType::bf16), x);
      },
      ThrowsMessage<Error>(
          HasSubstr("swiglu_backward: dy bf16[2, 3] and x f32[2, 6] have different dtypes; convert one with to()")));
  EXPECT_THAT(
      [&] {
        swiglu_backward(Tensor::zeros({2, 6}), x);
      },
      ThrowsMessage<Error>(
          HasSubstr("swiglu_backward: dy f32[2, 6] must have shape [2, 3] (x f32[2, 6] with the last dim halved)")));
  EXPECT_THAT(
      [&] {
        swiglu_backward(Tensor::zeros({2, 2}), Tensor::zeros({2, 5}));
      },
      ThrowsMessage<Error>(HasSubstr("swiglu_backward: x f32[2, 5] must have an even last dim")));
}

}  // namespace
}  // namespace ranksim::runtime

// The elementwise ops of runtime/tensor/ops.h: add (with its bias broadcast), scale, GELU and SwiGLU.
#include "runtime/tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops_common.h"

namespace ranksim::runtime {

using namespace ops_common;  // ops_common.h: the argument checks and dtype plumbing of every op

// --- add ------------------------------------------------------------------------------------

namespace {
// True when b's shape is a's, or a's trailing dims.
bool is_suffix(const Shape& b, const Shape& a) {
  return b.size() <= a.size() && std::equal(b.begin(), b.end(), a.end() - static_cast<std::ptrdiff_t>(b.size()));
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  const char* op = "add";
  require_same_dtype(op, a, "a", b, "b");
  if (!is_suffix(b.shape(), a.shape())) {
    fail(op, "b " + b.str() + " must have a's shape or a's trailing dims; a is " + a.str());
  }
  Tensor c;
  if (Device* dev = device_for({&a, &b})) {
    c = device_ops::add(*dev, a, b);
  } else if (!inputs_ready({&a, &b})) {
    c = Tensor::shape_only(a.shape(), a.dtype());
  } else {
    c = with_compute_type(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> A(a), B(b);
      Out<T> C(a.shape(), a.dtype());
      const i64 inner = b.numel();
      const i64 rows = inner == 0 ? 0 : a.numel() / inner;
      for (i64 r = 0; r < rows; ++r) {
        RowMap<T>(C.get() + r * inner, inner) =
            ConstRowMap<T>(A.get() + r * inner, inner) + ConstRowMap<T>(B.get(), inner);
      }
      return C.finish();
    });
  }
  charge({op, count(a.numel()), bytes(a) + bytes(b) + bytes(c), a.dtype()});
  return c;
}

AddGrads add_backward(const Tensor& dc, const Shape& b_shape) {
  const char* op = "add_backward";
  require_floating(op, dc, "dc");
  if (!is_suffix(b_shape, dc.shape())) {
    fail(op, "b's shape " + shape_str(b_shape) + " must be dc's shape or its trailing dims; dc is " + dc.str());
  }
  if (b_shape == dc.shape()) {
    charge({op, 0.0, 0.0, dc.dtype()});
    return {dc, dc};
  }
  Tensor db;
  if (Device* dev = device_for({&dc})) {
    db = device_ops::column_sum(*dev, dc, b_shape);
  } else if (!inputs_ready({&dc})) {
    db = Tensor::shape_only(b_shape, dc.dtype());
  } else {
    db = with_compute_type(dc.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> G(dc);
      Out<T> DB(b_shape, dc.dtype());
      const i64 inner = shape_numel(b_shape);
      const i64 rows = inner == 0 ? 0 : dc.numel() / inner;
      RowMap<T> acc(DB.get(), inner);
      for (i64 r = 0; r < rows; ++r) acc += ConstRowMap<T>(G.get() + r * inner, inner);
      return DB.finish();
    });
  }
  charge({op, count(dc.numel()), bytes(dc) + bytes(db), dc.dtype()});
  return {dc, db};
}

// --- scale ----------------------------------------------------------------------------------

namespace {
Tensor scale_impl(const char* op, const Tensor& x, double alpha) {
  require_floating(op, x, "x");
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::scale(*dev, x, alpha);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(x.shape(), x.dtype());
      RowMap<T>(Y.get(), x.numel()) = static_cast<T>(alpha) * ConstRowMap<T>(X.get(), x.numel());
      return Y.finish();
    });
  }
  charge({op, count(x.numel()), 2.0 * bytes(x), x.dtype()});
  return y;
}
}  // namespace

Tensor scale(const Tensor& x, double alpha) { return scale_impl("scale", x, alpha); }
Tensor scale_backward(const Tensor& dy, double alpha) { return scale_impl("scale_backward", dy, alpha); }

// --- GELU -----------------------------------------------------------------------------------

namespace {
constexpr double kGeluC = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
}  // namespace

Tensor gelu(const Tensor& x) {
  const char* op = "gelu";
  require_floating(op, x, "x");
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::gelu(*dev, x);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(x.shape(), x.dtype());
      const T c = static_cast<T>(kGeluC), a = static_cast<T>(kGeluA);
      for (i64 i = 0; i < x.numel(); ++i) {
        const T v = X[i];
        const T t = std::tanh(c * (v + a * v * v * v));
        Y[i] = T(0.5) * v * (T(1) + t);
      }
      return Y.finish();
    });
  }
  charge({op, 9.0 * count(x.numel()), 2.0 * bytes(x), x.dtype()});
  return y;
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  const char* op = "gelu_backward";
  require_same_dtype(op, dy, "dy", x, "x");
  require_shape(op, dy, "dy", x.shape());
  Tensor dx;
  if (Device* dev = device_for({&dy, &x})) {
    dx = device_ops::gelu_backward(*dev, dy, x);
  } else if (!inputs_ready({&dy, &x})) {
    dx = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    dx = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> DY(dy), X(x);
      Out<T> DX(x.shape(), x.dtype());
      const T c = static_cast<T>(kGeluC), a = static_cast<T>(kGeluA);
      for (i64 i = 0; i < x.numel(); ++i) {
        const T v = X[i];
        const T t = std::tanh(c * (v + a * v * v * v));
        const T du = c * (T(1) + T(3) * a * v * v);
        DX[i] = DY[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
      }
      return DX.finish();
    });
  }
  charge({op, 19.0 * count(x.numel()), bytes(dy) + bytes(x) + bytes(dx), x.dtype()});
  return dx;
}

// --- SwiGLU ---------------------------------------------------------------------------------

namespace {
// Checks x [..., 2F] and returns y's shape [..., F].
Shape swiglu_out_shape(const char* op, const Tensor& x) {
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim ([..., 2F]: gate and up)");
  if (x.size(-1) % 2 != 0) {
    fail(op,
         "x " + x.str() + " must have an even last dim ([..., 2F]: gate and up); got " + std::to_string(x.size(-1)));
  }
  Shape s = x.shape();
  s.back() /= 2;
  return s;
}
}  // namespace

Tensor swiglu(const Tensor& x) {
  const char* op = "swiglu";
  require_floating(op, x, "x");
  const Shape y_shape = swiglu_out_shape(op, x);
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::swiglu(*dev, x);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(y_shape, x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(y_shape, x.dtype());
      const i64 F = y_shape.back(), n = shape_numel(y_shape);
      for (i64 i = 0; i < n; ++i) {
        const i64 o = (i / F) * 2 * F + i % F;
        const T g = X[o], u = X[o + F];
        Y[i] = g / (T(1) + std::exp(-g)) * u;
      }
      return Y.finish();
    });
  }
  charge({op, 6.0 * count(y.numel()), bytes(x) + bytes(y), x.dtype()});
  return y;
}

Tensor swiglu_backward(const Tensor& dy, const Tensor& x) {
  const char* op = "swiglu_backward";
  require_same_dtype(op, dy, "dy", x, "x");
  const Shape y_shape = swiglu_out_shape(op, x);
  if (dy.shape() != y_shape) {
    fail(op,
         "dy " + dy.str() + " must have shape " + shape_str(y_shape) + " (x " + x.str() + " with the last dim halved)");
  }
  Tensor dx;
  if (Device* dev = device_for({&dy, &x})) {
    dx = device_ops::swiglu_backward(*dev, dy, x);
  } else if (!inputs_ready({&dy, &x})) {
    dx = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    dx = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> DY(dy), X(x);
      Out<T> DX(x.shape(), x.dtype());
      const i64 F = y_shape.back(), n = shape_numel(y_shape);
      for (i64 i = 0; i < n; ++i) {
        const i64 o = (i / F) * 2 * F + i % F;
        const T g = X[o], u = X[o + F], d = DY[i];
        const T den = T(1) + std::exp(-g);
        const T sig = T(1) / den, s = g / den;  // sigmoid(g), silu(g)
        DX[o] = d * u * (sig + s * (T(1) - sig));
        DX[o + F] = d * s;
      }
      return DX.finish();
    });
  }
  charge({op, 10.0 * count(dy.numel()), bytes(dy) + bytes(x) + bytes(dx), x.dtype()});
  return dx;
}

}  // namespace ranksim::runtime

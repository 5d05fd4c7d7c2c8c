#include "models/rope.h"

#include <cmath>
#include <string>
#include <vector>

#include "models/rope_kernels.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"
#include "sim/error.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;

namespace {

// The rotation on a compute device (models/rope_kernels.h).
using runtime::Device;
using runtime::launch;
using In = runtime::DeviceInput;
using Out = runtime::DeviceOutput;
using i64 = std::int64_t;
namespace k = kernels;

Tensor rope_on_device(Device& dev, const Tensor& x, const Tensor& c, const Tensor& s) {
  In X(dev, x), C(dev, c), S(dev, s);
  Out Y(dev, x.shape(), DType::f32);
  const i64 half = c.size(1);
  if (half > 0) {
    launch(dev, k::RopeKernel{X.as<float>(), C.as<float>(), S.as<float>(), Y.as<float>(), x.size(1), half},
           x.numel() / 2);
  }
  return Y.t;
}

// The cosines and signed sines of a token's d / 2 angles: direction +1 rotates forward by theta,
// -1 is the inverse (the backward).
template <class T>
void angles(std::int64_t position, double base, std::int64_t d, int direction, T* c, T* s) {
  const double p = static_cast<double>(position);
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const double theta = p * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    c[i] = static_cast<T>(std::cos(theta));
    s[i] = static_cast<T>(direction * std::sin(theta));
  }
}

template <class T>
void rotate(const Tensor& in, const Tensor& out, const std::vector<std::int64_t>& positions, double base,
            int direction) {
  const std::int64_t n = in.size(0), h = in.size(1), d = in.size(2), half = d / 2;
  const T* x = in.data<T>();
  T* y = out.data<T>();
  std::vector<T> c(static_cast<std::size_t>(half)), s(static_cast<std::size_t>(half));
  for (std::int64_t t = 0; t < n; ++t) {
    angles<T>(positions[static_cast<std::size_t>(t)], base, d, direction, c.data(), s.data());
    for (std::int64_t j = 0; j < h; ++j) {
      const T* xr = x + (t * h + j) * d;
      T* yr = y + (t * h + j) * d;
      for (std::int64_t i = 0; i < half; ++i) {
        const T a = xr[i], b = xr[i + half];
        const T ci = c[static_cast<std::size_t>(i)], si = s[static_cast<std::size_t>(i)];
        yr[i] = a * ci - b * si;
        yr[i + half] = b * ci + a * si;
      }
    }
  }
}

Tensor apply(const char* op, const Tensor& x, const std::vector<std::int64_t>& positions, double base, int direction) {
  if (!x.defined() || x.dim() != 3) {
    throw Error(std::string(op) + ": x must be [tokens, heads, head_dim], got " +
                (x.defined() ? x.str() : std::string("an undefined tensor")));
  }
  if (!runtime::is_floating(x.dtype())) {
    throw Error(std::string(op) + ": x " + x.str() + " must be a floating tensor");
  }
  if (x.size(2) % 2 != 0) {
    throw Error(std::string(op) + ": head_dim " + std::to_string(x.size(2)) +
                " must be even (rotate-half RoPE pairs element i with i + head_dim/2)");
  }
  if (static_cast<std::int64_t>(positions.size()) != x.size(0)) {
    throw Error(std::string(op) + ": " + std::to_string(positions.size()) + " positions for x " + x.str() +
                " (one per token expected)");
  }
  if (!(base > 1.0)) throw Error(std::string(op) + ": base must be > 1, got " + std::to_string(base));
  // A shape-only result does not depend on the positions, and shape-only steps call this per
  // layer with every token's: they are checked where the numbers are computed.
  if (x.has_data()) {
    for (std::int64_t p : positions)
      if (p < 0) throw Error(std::string(op) + ": negative position " + std::to_string(p));
  }
  const double bytes = 2.0 * static_cast<double>(x.nbytes());
  runtime::charge({op, 6.0 * static_cast<double>(x.numel()), bytes, x.dtype()});
  if (!x.has_data()) return Tensor::shape_only(x.shape(), x.dtype());
  if (x.dtype() == DType::f64) {
    const Tensor in = x.contiguous();
    Tensor out = Tensor::zeros(x.shape(), DType::f64);
    rotate<double>(in, out, positions, base, direction);
    return out;
  }
  const Tensor in = x.to(DType::f32).contiguous();
  if (runtime::Device* dev = runtime::device_for({&in})) {
    // The angle tables on the host, as the loop below makes them; the rotation on the device.
    const std::int64_t n = x.size(0), d = x.size(2), half = d / 2;
    std::vector<float> c(static_cast<std::size_t>(n * half)), s(c.size());
    for (std::int64_t t = 0; t < n; ++t) {
      angles<float>(positions[static_cast<std::size_t>(t)], base, d, direction, c.data() + t * half,
                    s.data() + t * half);
    }
    return rope_on_device(*dev, in, Tensor::from_vector(c, {n, half}), Tensor::from_vector(s, {n, half})).to(x.dtype());
  }
  Tensor out = Tensor::zeros(x.shape(), DType::f32);
  rotate<float>(in, out, positions, base, direction);
  return out.to(x.dtype());
}

}  // namespace

Tensor rope(const Tensor& x, const std::vector<std::int64_t>& positions, double base) {
  return apply("rope", x, positions, base, +1);
}

Tensor rope_backward(const Tensor& dy, const std::vector<std::int64_t>& positions, double base) {
  return apply("rope_backward", dy, positions, base, -1);
}

}  // namespace ranksim::models

#include "testing/inputs.h"

#include <cmath>
#include <vector>

#include "sim/error.h"

namespace ranksim::testing {

runtime::Tensor seeded_normal(const runtime::Shape& shape, std::uint64_t seed, runtime::DType dtype, double mean,
                              double stddev) {
  return runtime::Tensor::randn(shape, seed, mean, stddev, dtype);
}

runtime::Tensor seeded_uniform(const runtime::Shape& shape, std::uint64_t seed, double low, double high,
                               runtime::DType dtype) {
  if (!(low < high)) throw Error("seeded_uniform: low must be below high");
  return runtime::Tensor::uniform(shape, seed, low, high, dtype);
}

runtime::Tensor exact_sum_ints(const runtime::Shape& shape, std::uint64_t seed, int low, int high,
                               runtime::DType dtype) {
  if (low > high) throw Error("exact_sum_ints: low must not exceed high");
  // floor of uniform [low, high + 1): each integer of [low, high] equally likely. Drawn in f64 so
  // that no value rounds up to high + 1.
  std::vector<double> v =
      runtime::Tensor::uniform(shape, seed, low, static_cast<double>(high) + 1.0, runtime::DType::f64)
          .to_vector<double>();
  for (double& x : v) x = std::fmin(std::floor(x), high);
  return runtime::Tensor::from_vector(v, shape, dtype);
}

std::uint64_t seed_for(std::string_view name, std::uint64_t index) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ULL;
  };
  for (const char c : name) mix(static_cast<unsigned char>(c));
  for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(index >> (8 * i)));
  return h;
}

}  // namespace ranksim::testing

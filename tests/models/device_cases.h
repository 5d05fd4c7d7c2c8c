// The models' kernels' cases for a compute device: the model's loss (f64 rows), RoPE on a strided
// view, and tp's vocab-parallel cross-entropy on one rank. check as in
// tests/runtime/device/device_cases.h (emulated: tests/models/device_test.cpp; CUDA:
// tests/gpu/gpu_gputest.cpp).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "models/rope.h"
#include "models/transformer.h"
#include "runtime/device/device_cases.h"
#include "runtime/distributed/spawn.h"
#include "tp/cross_entropy.h"

namespace ranksim::runtime::testing {

inline void model_device_cases(DType dt, const DeviceCheck& check) {
  const auto rnd = [](const Shape& shape, std::uint64_t seed, DType dtype, double lo = -2.0, double hi = 2.0) {
    return device_case_input(shape, seed, dtype, lo, hi);
  };
  {  // The losses outside runtime/tensor/ops.h: the model's (f64 rows) and the vocab-parallel one, one rank
    const Tensor logits = rnd({7, 50}, 60, dt, -6.0, 6.0);
    const Tensor labels = Tensor::from_vector<std::int64_t>({3, -100, 49, 0, 17, -100, 22}, {7});
    check("models::cross_entropy_sum",
          [&] { return std::vector<Tensor>{models::cross_entropy_sum(logits, labels, 5.0).dlogits}; });
    const Tensor targets = Tensor::from_vector<std::int64_t>({3, 8, 49, 0, 17, 31, 22}, {7});
    const Tensor dloss = rnd({7}, 61, dt);
    check("tp::vocab_parallel_cross_entropy on one rank", [&] {
      std::vector<Tensor> out;
      spawn(
          [&](int) {
            tp::CrossEntropyContext c;
            const Tensor loss = tp::vocab_parallel_cross_entropy(logits, targets, ProcessGroup(), c);
            out = {loss, c.softmax, tp::vocab_parallel_cross_entropy_backward(dloss, c)};
          },
          1);
      return out;
    });
  }
  {  // RoPE (models/rope.h) forward and backward, on a strided view
    const Tensor x = rnd({6, 9, 10}, 62, dt).narrow(1, 2, 6);  // [6, 6, 10], token stride 90
    const Tensor dy = rnd({6, 6, 10}, 63, dt);
    const std::vector<std::int64_t> pos = {0, 7, 3, 1000, 12, 5};
    check("models::rope", [&] {
      return std::vector<Tensor>{models::rope(x, pos), models::rope_backward(dy, pos, 500000.0)};
    });
  }
}

}  // namespace ranksim::runtime::testing

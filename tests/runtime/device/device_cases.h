// The op cases a compute device is checked with: every op of runtime/tensor/ops.h in one dtype, on
// contiguous and strided inputs, with the awkward cases (batched and shared GEMM operands in every
// transposition, repeated embedding ids, ignored cross-entropy rows, non-contiguous cat pieces).
// The layers' own kernels have their cases beside their tests: tests/cp/attention_device_cases.h,
// tests/models/device_cases.h (the models' loss and RoPE, and tp's vocab-parallel loss on one rank).
// check(what, f) runs f -- which returns the op's outputs -- on the CPU and on the device under
// test, and compares (tests/runtime/device/device_test.cpp: the emulated device, bit for bit;
// tests/gpu/gpu_gputest.cpp: the CUDA device, to rounding).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::testing {

using OpOutputs = std::function<std::vector<Tensor>()>;
using DeviceCheck = std::function<void(const std::string& what, const OpOutputs& f)>;

inline Tensor device_case_input(const Shape& shape, std::uint64_t seed, DType dtype, double lo = -2.0,
                                double hi = 2.0) {
  return Tensor::uniform(shape, seed, lo, hi, dtype);
}

inline void device_op_cases(DType dt, const DeviceCheck& check) {
  const auto rnd = [](const Shape& shape, std::uint64_t seed, DType dtype, double lo = -2.0, double hi = 2.0) {
    return device_case_input(shape, seed, dtype, lo, hi);
  };
  {  // MatmulInEveryTranspositionAndBatchLayout
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool batched : {false, true}) {
          const std::string what = std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0") +
                                   " batched=" + (batched ? "1" : "0") + " " + dtype_name(dt);
          const Shape as = ta ? Shape{3, 2, 13, 7} : Shape{3, 2, 7, 13};  // L = 6, M = 7, K = 13
          Shape bs = tb ? Shape{5, 13} : Shape{13, 5};
          if (batched) bs.insert(bs.begin(), {3, 2});
          const Tensor a = rnd(as, 1, dt), b = rnd(bs, 2, dt), dc = rnd({3, 2, 7, 5}, 3, dt);
          check(what, [&] {
            const Tensor c = matmul(a, b, ta, tb);
            const MatmulGrads g = matmul_backward(dc, a, b, ta, tb);
            return std::vector<Tensor>{c, g.da, g.db};
          });
        }
      }
    }
  }
  {  // MatmulOnStridedViews
    // A transposed view and a narrowed view: gathered on the device.
    const Tensor a = rnd({9, 6}, 4, dt).transpose(0, 1);   // [6, 9], strides [1, 6]
    const Tensor b = rnd({9, 12}, 5, dt).narrow(1, 3, 4);  // [9, 4], row stride 12
    const Tensor dc = rnd({6, 4}, 6, dt);
    check("strided matmul", [&] {
      const MatmulGrads g = matmul_backward(dc, a, b);
      return std::vector<Tensor>{matmul(a, b), g.da, g.db};
    });
  }
  {  // ElementwiseOps
    const Tensor x = rnd({4, 3, 17}, 7, dt, -4.0, 4.0), bias = rnd({17}, 8, dt), y = rnd({4, 3, 17}, 9, dt);
    check("add/scale/gelu", [&] {
      const AddGrads g = add_backward(y, {17});
      return std::vector<Tensor>{add(x, bias), add(x, y),          g.db, scale(x, 0.37), scale_backward(y, -1.5),
                                 gelu(x),      gelu_backward(y, x)};
    });
  }
  {  // LayerNormForwardAndBackward
    const Tensor x = rnd({5, 2, 33}, 10, dt, -3.0, 5.0), w = rnd({33}, 11, dt, 0.5, 1.5), b = rnd({33}, 12, dt);
    const Tensor dy = rnd({5, 2, 33}, 13, dt);
    check("layer_norm", [&] {
      const LayerNormResult r = layer_norm(x, w, b, 1e-5);
      const LayerNormGrads g = layer_norm_backward(dy, x, w, r.mean, r.rstd);
      return std::vector<Tensor>{r.y, r.mean, r.rstd, g.dx, g.dweight, g.dbias};
    });
  }
  {  // RmsNormForwardAndBackward
    const Tensor x = rnd({5, 2, 33}, 22, dt, -3.0, 5.0), w = rnd({33}, 23, dt, 0.5, 1.5);
    const Tensor dy = rnd({5, 2, 33}, 24, dt);
    check("rms_norm", [&] {
      const RmsNormResult r = rms_norm(x, w, 1e-5);
      const RmsNormGrads g = rms_norm_backward(dy, x, w, r.rstd);
      return std::vector<Tensor>{r.y, r.rstd, g.dx, g.dweight};
    });
  }
  {  // SwigluForwardAndBackward
    const Tensor x = rnd({4, 3, 34}, 25, dt, -6.0, 6.0), dy = rnd({4, 3, 17}, 26, dt);
    const Tensor strided = rnd({34, 6}, 27, dt).transpose(0, 1);  // [6, 34], not contiguous
    const Tensor dy2 = rnd({6, 17}, 28, dt);
    check("swiglu", [&] {
      return std::vector<Tensor>{swiglu(x), swiglu_backward(dy, x), swiglu(strided), swiglu_backward(dy2, strided)};
    });
  }
  {  // SoftmaxForwardAndBackward
    const Tensor x = rnd({6, 40}, 14, dt, -8.0, 8.0), dy = rnd({6, 40}, 15, dt);
    check("softmax", [&] {
      const Tensor y = softmax(x);
      return std::vector<Tensor>{y, softmax_backward(dy, y)};
    });
  }
  {  // EmbeddingForwardAndBackwardWithRepeatedIds
    const Tensor w = rnd({11, 8}, 16, dt);
    const Tensor ids = Tensor::from_vector<std::int32_t>({3, 0, 3, 10, 7, 3, 0, 1, 9, 3}, {2, 5});
    const Tensor dy = rnd({2, 5, 8}, 17, dt);
    check("embedding", [&] { return std::vector<Tensor>{embedding(ids, w), embedding_backward(dy, ids, 11)}; });
  }
  {  // CrossEntropyWithIgnoredRows
    const Tensor logits = rnd({3, 4, 29}, 18, dt, -6.0, 6.0);
    const Tensor targets = Tensor::from_vector<std::int64_t>({5, -100, 28, 0, 13, 13, -100, 2, 27, 1, 6, 9}, {3, 4});
    const Tensor dloss = Tensor::full({}, 0.75, dt);
    check("cross_entropy", [&] {
      const CrossEntropyResult r = cross_entropy(logits, targets);
      return std::vector<Tensor>{r.loss, r.lse, cross_entropy_backward(dloss, logits, targets, r.lse)};
    });
    // Every row ignored: NaN loss, zero gradient, on both paths.
    const Tensor ignored = Tensor::full({3, 4}, -100, DType::i64);
    check("cross_entropy all ignored", [&] {
      const CrossEntropyResult r = cross_entropy(logits, ignored);
      return std::vector<Tensor>{r.loss, cross_entropy_backward(dloss, logits, ignored, r.lse)};
    });
  }
  {  // CatAndSplitBackward
    const Tensor a = rnd({2, 3, 4}, 19, dt), b = rnd({2, 5, 4}, 20, dt);
    const Tensor c = rnd({4, 2, 3}, 21, dt).permute({1, 2, 0});  // [2, 3, 4], not contiguous
    check("cat", [&] { return std::vector<Tensor>{cat({a, b, c}, 1), cat({a, c}, -1), split_backward({a, c}, 0)}; });
  }
}

}  // namespace ranksim::runtime::testing

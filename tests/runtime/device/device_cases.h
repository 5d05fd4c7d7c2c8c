// The op cases a compute device is checked with: every op of runtime/tensor/ops.h in one dtype, on
// contiguous and strided inputs, with the awkward cases (batched and shared GEMM operands in every
// transposition, repeated embedding ids, ignored cross-entropy rows, non-contiguous cat pieces;
// block attention with GQA, d != dv, packed segments with padding, causal and sliding windows,
// and a block where no query sees a key), and the model's and the vocab-parallel losses.
// check(what, f) runs f -- which returns the op's outputs -- on the CPU and on the device under
// test, and compares (tests/runtime/device/device_test.cpp: the emulated device, bit for bit;
// tests/gpu/gpu_gputest.cpp: the CUDA device, to rounding).
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cp/attention.h"
#include "models/rope.h"
#include "models/transformer.h"
#include "runtime/tensor/ops.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/tensor.h"
#include "tp/cross_entropy.h"

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
    const Tensor a = rnd({9, 6}, 4, dt).transpose(0, 1);       // [6, 9], strides [1, 6]
    const Tensor b = rnd({9, 12}, 5, dt).narrow(1, 3, 4);      // [9, 4], row stride 12
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
      return std::vector<Tensor>{add(x, bias), add(x, y), g.db, scale(x, 0.37), scale_backward(y, -1.5),
                                 gelu(x), gelu_backward(y, x)};
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
    check("embedding", [&] {
      return std::vector<Tensor>{embedding(ids, w), embedding_backward(dy, ids, 11)};
    });
  }
  {  // CrossEntropyWithIgnoredRows
    const Tensor logits = rnd({3, 4, 29}, 18, dt, -6.0, 6.0);
    const Tensor targets =
        Tensor::from_vector<std::int64_t>({5, -100, 28, 0, 13, 13, -100, 2, 27, 1, 6, 9}, {3, 4});
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
  {  // The losses outside runtime/tensor/ops.h: the model's (f64 rows) and the vocab-parallel one, one rank
    const Tensor logits = rnd({7, 50}, 60, dt, -6.0, 6.0);
    const Tensor labels = Tensor::from_vector<std::int64_t>({3, -100, 49, 0, 17, -100, 22}, {7});
    check("models::cross_entropy_sum", [&] {
      return std::vector<Tensor>{models::cross_entropy_sum(logits, labels, 5.0).dlogits};
    });
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
  {  // CatAndSplitBackward
    const Tensor a = rnd({2, 3, 4}, 19, dt), b = rnd({2, 5, 4}, 20, dt);
    const Tensor c = rnd({4, 2, 3}, 21, dt).permute({1, 2, 0});  // [2, 3, 4], not contiguous
    check("cat", [&] {
      return std::vector<Tensor>{cat({a, b, c}, 1), cat({a, c}, -1), split_backward({a, c}, 0)};
    });
  }
  {  // Block attention (cp/attention.h), forward and backward
    using cp::AttentionOptions;
    using cp::TokenInfo;
    const auto tokens = [](std::vector<std::int64_t> lengths, std::vector<std::int64_t> firsts, std::int64_t pad) {
      TokenInfo t;
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        for (std::int64_t i = 0; i < lengths[s]; ++i) {
          t.position.push_back(firsts[s] + i);
          t.segment.push_back(static_cast<std::int64_t>(s));
        }
      }
      for (std::int64_t i = 0; i < pad; ++i) {
        t.position.push_back(0);
        t.segment.push_back(-1);
      }
      return t;
    };
    const TokenInfo qt = tokens({20, 15}, {10, 0}, 2), kt = tokens({30, 13}, {0, 0}, 2);
    const std::int64_t tq = qt.size(), tk = kt.size(), hq = 4, hkv = 2, d = 8, dv = 6;
    const Tensor q = rnd({tq, hq, d}, 40, dt), k = rnd({tk, hkv, d}, 41, dt), v = rnd({tk, hkv, dv}, 42, dt);
    const Tensor dout = rnd({tq, hq, dv}, 43, dt);
    std::vector<std::pair<std::string, AttentionOptions>> masks(5);
    masks[0].first = "no mask";
    masks[1].first = "causal";
    masks[1].second.causal = true;
    masks[2].first = "window (5, 3)";
    masks[2].second.window_left = 5;
    masks[2].second.window_right = 3;
    masks[3].first = "causal, window 7";
    masks[3].second.causal = true;
    masks[3].second.window_left = 7;
    masks[4].first = "causal, f32 output, scale 0.3";
    masks[4].second.causal = true;
    masks[4].second.output_dtype = DType::f32;
    masks[4].second.softmax_scale = 0.3;
    for (const auto& [name, opts] : masks) {
      check(std::string("attention ") + name + " " + dtype_name(dt), [&] {
        const cp::AttentionResult r = cp::attention_forward(q, k, v, qt, kt, opts);
        const cp::AttentionGrads g = cp::attention_backward(dout, q, k, v, r.out, r.lse, qt, kt, opts);
        return std::vector<Tensor>{r.out, r.lse, g.dq, g.dk, g.dv};
      });
    }
    // A block no query sees: out 0, lse -inf, zero gradients. Strided q (a narrowed view).
    const TokenInfo alone = tokens({0, 0, 0, 9}, {0, 0, 0, 0}, 0);
    const Tensor q9 = rnd({9, hq, d + 3}, 44, dt).narrow(2, 1, d), dout9 = rnd({9, hq, dv}, 45, dt);
    check(std::string("attention, nothing visible ") + dtype_name(dt), [&] {
      const cp::AttentionResult r = cp::attention_forward(q9, k, v, alone, kt, {});
      const cp::AttentionGrads g = cp::attention_backward(dout9, q9, k, v, r.out, r.lse, alone, kt, {});
      return std::vector<Tensor>{r.out, r.lse, g.dq, g.dk, g.dv};
    });
  }
  {  // Merging partial attention results in place, into views, on row ranges and lists
    const std::int64_t n = 11, h = 3, dv = 5;
    const Tensor lse0 = rnd({h, n}, 50, DType::f32, -3.0, 3.0), out0 = rnd({n, h, dv}, 51, dt);
    const Tensor part_lse = rnd({h, 4}, 52, DType::f32, -3.0, 3.0), part_out = rnd({4, h, dv}, 53, dt);
    part_lse.set({1, 2}, -std::numeric_limits<double>::infinity());  // a part row that saw nothing
    lse0.set({0, 5}, -std::numeric_limits<double>::infinity());       // an accumulator row that saw nothing
    const Tensor acc0 = rnd({n, 2, 3}, 54, dt), rows_part = rnd({4, 2, 3}, 55, dt);
    check(std::string("attention merges ") + dtype_name(dt), [&] {
      // Fresh copies each run: the merges write in place.
      const Tensor lse = lse0.clone(), out = out0.clone(), acc = acc0.clone();
      const Tensor wide = rnd({n, 2, 5}, 56, dt);
      const Tensor acc_view = wide.narrow(2, 1, 3);  // a strided accumulator
      const cp::Rows list = cp::Rows::list({7, 0, 9, 5});
      cp::merge_lse_(lse, part_lse, list);
      cp::add_corrected_out_(out, lse, part_out, part_lse, list);
      cp::merge_lse_(lse.narrow(1, 2, 4), part_lse, cp::Rows::all());
      cp::add_rows_(acc, rows_part, cp::Rows::range(3, 4));
      cp::add_rows_(acc_view, rows_part, list);
      const cp::AttentionResult merged = cp::merge_attention(
          {cp::AttentionResult{out0.narrow(0, 0, 4), lse0.narrow(1, 0, 4)}, cp::AttentionResult{part_out, part_lse}});
      return std::vector<Tensor>{lse, out, acc, wide, merged.out, merged.lse};
    });
  }
}

}  // namespace ranksim::runtime::testing

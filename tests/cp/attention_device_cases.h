// cp/attention.h's cases for a compute device: block attention forward and backward (GQA,
// d != dv, packed segments with padding, causal and sliding windows, a block where no query sees a
// key) and the in-place merges into views, on row ranges and lists. check as in
// tests/runtime/device/device_cases.h (emulated: tests/cp/attention_device_test.cpp; CUDA:
// tests/gpu/gpu_gputest.cpp).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cp/attention.h"
#include "runtime/device/device_cases.h"

namespace ranksim::runtime::testing {

inline void attention_device_cases(DType dt, const DeviceCheck& check) {
  const auto rnd = [](const Shape& shape, std::uint64_t seed, DType dtype, double lo = -2.0, double hi = 2.0) {
    return device_case_input(shape, seed, dtype, lo, hi);
  };
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
    lse0.set({0, 5}, -std::numeric_limits<double>::infinity());      // an accumulator row that saw nothing
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

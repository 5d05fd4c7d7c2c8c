// AdamW (models/adamw.h) against a float64 loop of PyTorch's formulas; the global norm and
// clipping against the norm of the full gradients; ZeRO-1 against plain AdamW; bad options.
#include "models/adamw.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "runtime/distributed/spawn.h"
#include "sim/error.h"
#include "tp/sharding.h"

namespace ranksim::models {
namespace {

using runtime::DType;
using runtime::Tensor;
using ::testing::HasSubstr;

// torch.optim.AdamW for one element sequence, in double.
std::vector<double> torch_adamw(double p, const std::vector<double>& grads, const AdamWOptions& o) {
  double m = 0, v = 0;
  std::vector<double> out;
  for (std::size_t t = 1; t <= grads.size(); ++t) {
    const double g = grads[t - 1];
    p *= 1 - o.lr * o.weight_decay;
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
    p -= o.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + o.eps);
    out.push_back(p);
  }
  return out;
}

TEST(AdamW, MatchesPyTorchsFormulasStepByStep) {
  for (const DType dt : {DType::f32, DType::bf16}) {
    AdamWOptions o;
    o.lr = 3e-2;
    o.weight_decay = 0.1;
    const Tensor start = Tensor::uniform({64}, 5, -1, 1);
    std::vector<std::vector<double>> grads(4);
    for (std::uint64_t s = 0; s < 4; ++s) grads[s] = Tensor::uniform({64}, 100 + s, -1e-2, 1e-2).to_vector<double>();
    runtime::spawn(
        [&](int) {
          tp::Parameter p;
          p.value = start.to(dt);
          std::vector<std::pair<std::string, tp::Parameter*>> list{{"w", &p}};
          AdamW opt(list, AdamW::Groups{}, o, false);
          std::vector<Tensor> after;
          for (int s = 0; s < 4; ++s) {
            p.grad = Tensor::from_vector(grads[static_cast<std::size_t>(s)], {64}, dt);
            EXPECT_EQ(opt.step(std::nullopt), 0.0);
            after.push_back(p.value);
          }
          for (std::int64_t i = 0; i < 64; ++i) {
            std::vector<double> gi;
            for (int s = 0; s < 4; ++s)
              gi.push_back(Tensor::from_vector(grads[static_cast<std::size_t>(s)], {64}, dt).at({i}));
            const std::vector<double> want =
                torch_adamw(start.to(dt).at({i}), gi, o);  // the bf16 master starts from the rounded value
            for (int s = 0; s < 4; ++s) {
              // f32 master: a few f32 roundings per step; bf16: the value is the master rounded once
              const double tol = dt == DType::f32 ? 1e-6 : 0x1p-8 * std::abs(want[static_cast<std::size_t>(s)]) + 1e-6;
              EXPECT_NEAR(after[static_cast<std::size_t>(s)].at({i}), want[static_cast<std::size_t>(s)], tol)
                  << i << " step " << s;
            }
          }
        },
        1);
  }
}

// One sharded [8, 6] weight (column split over tp) and one replicated [6] bias: the norm over
// the full gradients, counted once each, at tp = 1, 2, 4; clipped and not clipped.
TEST(AdamW, GlobalNormCountsEveryParameterOnceAndClipsLikeTorch) {
  const Tensor gw = Tensor::uniform({8, 6}, 1, -1, 1), gb = Tensor::uniform({6}, 2, -1, 1);
  double sq = 0;
  for (double x : gw.to_vector<double>()) sq += x * x;
  for (double x : gb.to_vector<double>()) sq += x * x;
  const double norm = std::sqrt(sq);
  for (int tp : {1, 2, 4}) {
    for (const double max_norm : {norm / 3, norm * 2}) {
      runtime::spawn(
          [&](int rank) {
            tp::Parameter w, b;
            w.value = tp::shard_of(Tensor::zeros({8, 6}), 0, tp, rank);
            w.partition_dim = 0;
            w.grad = tp::shard_of(gw, 0, tp, rank);
            b.value = Tensor::zeros({6});
            b.grad = gb;
            AdamWOptions o;
            o.lr = 0;  // only the clipping is observed, through the state: m = (1 - b1) * clipped g
            AdamW opt({{"w", &w}, {"b", &b}},
                      AdamW::Groups{runtime::ProcessGroup{}, runtime::new_group({rank}), runtime::new_group({rank})}, o,
                      false);
            EXPECT_NEAR(opt.step(max_norm), norm, 1e-6 * norm);
            const double coef = std::min(1.0, max_norm / (norm + 1e-6));
            const auto st = opt.shard_state();
            EXPECT_NEAR(st.at("exp_avg.b").at({3}), 0.1 * coef * gb.at({3}), 1e-6);
          },
          tp);
    }
  }
}

TEST(AdamW, ZeroOneEqualsAdamWOnSummedGradients) {
  for (int dp : {2, 3, 4}) {
    const std::int64_t n = 10;  // not a multiple of 3 or 4
    std::vector<Tensor> plain(static_cast<std::size_t>(dp)), zero(static_cast<std::size_t>(dp));
    for (int z = 0; z < 2; ++z) {
      runtime::spawn(
          [&](int rank) {
            tp::Parameter p;
            p.value = Tensor::uniform({2, n / 2}, 9, -1, 1);
            AdamW opt({{"p", &p}},
                      AdamW::Groups{runtime::new_group({rank}), runtime::new_group({rank}), runtime::ProcessGroup{}},
                      AdamWOptions{}, z == 1);
            for (int s = 0; s < 3; ++s) {
              Tensor g = Tensor::uniform({2, n / 2}, 50 + static_cast<std::uint64_t>(10 * s + rank), -1, 1);
              if (z == 0) {  // plain AdamW expects gradients already summed over the group
                runtime::all_reduce(g).wait();
              }
              p.grad = g;
              opt.step(1.0);
            }
            (z ? zero : plain)[static_cast<std::size_t>(rank)] = p.value;
          },
          dp);
    }
    for (int r = 0; r < dp; ++r) {
      const auto a = plain[static_cast<std::size_t>(r)].to_vector<float>(),
                 b = zero[static_cast<std::size_t>(r)].to_vector<float>();
      for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << "dp " << dp << " rank " << r;
      EXPECT_EQ(plain[0].to_vector<float>(), plain[static_cast<std::size_t>(r)].to_vector<float>());
    }
  }
}

TEST(AdamW, BadOptions) {
  auto err = [](AdamWOptions o) {
    try {
      check_adamw(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("none");
  };
  AdamWOptions o;
  o.lr = -1;
  EXPECT_THAT(err(o), HasSubstr("lr must be >= 0"));
  o = {};
  o.beta1 = 1;
  EXPECT_THAT(err(o), HasSubstr("beta1 must be in [0, 1)"));
  o = {};
  o.eps = 0;
  EXPECT_THAT(err(o), HasSubstr("eps must be > 0"));
}

}  // namespace
}  // namespace ranksim::models

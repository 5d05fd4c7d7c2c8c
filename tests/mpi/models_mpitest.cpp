// The layers and the reference model on the mpi backend, bit for bit against the sim backend:
// Megatron's ParallelMLP over every rank of the job (fp32 and bf16, with and without sequence
// parallelism; outputs, input gradients and weight gradients), and the reference transformer's
// training step under tp x cp layouts with each CP comm type (logits, loss and every gradient).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "models/run.h"
#include "models/transformer.h"
#include "mpi/compare.h"
#include "runtime/distributed/backends/mpi/mpi.h"
#include "runtime/distributed/distributed.h"
#include "tp/mlp.h"
#include "tp/parallel_state.h"

namespace ranksim {
namespace {

using runtime::DType;
using runtime::Tensor;
using runtime::mpitest::Bytes;
using runtime::mpitest::bytes_of;

class MlpOnMpi : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(MlpOnMpi, MatchesSimBitForBit) {
  const auto [dt, sp] = GetParam();
  const int tp = runtime::mpi::world_size();
  const size_t compared =
      runtime::mpitest::expect_mpi_matches_sim([&, dt = dt, sp = sp](int rank, std::vector<Bytes>& out) {
        tp::ParallelState ps = tp::initialize_model_parallel(tp);
        tp::ParallelMLPOptions o;
        o.sequence_parallel = sp;
        o.dtype = dt;
        tp::ParallelMLP mlp = tp::ParallelMLP::seeded(64, 256, 1234, ps.tp().group, o);
        const int64_t rows = sp ? 24 / tp : 24;
        const uint64_t seed = sp ? 77 + static_cast<uint64_t>(rank) : 77;
        Tensor x = Tensor::randn({rows, 64}, seed, 0.0, 1.0, dt);
        tp::MLPContext ctx;
        Tensor y = mlp.forward(x, ctx);
        Tensor dy = Tensor::randn(y.shape(), seed + 1000, 0.0, 1.0, dt);
        Tensor dx = mlp.backward(dy, ctx);
        out.push_back(bytes_of(y));
        out.push_back(bytes_of(dx));
        out.push_back(bytes_of(mlp.fc1().weight().grad));
        out.push_back(bytes_of(mlp.fc2().weight().grad));
      });
  EXPECT_EQ(compared, 4u);
}

INSTANTIATE_TEST_SUITE_P(Tp, MlpOnMpi,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<DType, bool>>& p) {
                           return std::string(runtime::dtype_name(std::get<0>(p.param))) +
                                  (std::get<1>(p.param) ? "_sequence_parallel" : "");
                         });

struct Layout {
  int tp, cp;
  cp::CommType comm;
  cp::Format format;
};

class TransformerOnMpi : public ::testing::TestWithParam<Layout> {};

TEST_P(TransformerOnMpi, StepMatchesSimBitForBit) {
  const Layout l = GetParam();
  const int n = runtime::mpi::world_size();
  if (n % (l.tp * l.cp) != 0) GTEST_SKIP() << "needs a multiple of " << l.tp * l.cp << " ranks";
  models::TransformerRunSpec s;
  s.config.hidden = 128;
  s.config.heads = 8;
  s.config.ffn = 256;
  s.tp = l.tp;
  s.cp = l.cp;
  s.dp = n / (l.tp * l.cp);
  s.weights = models::seeded_weights(s.config, 11);
  // Four sequences, so that dp = 2 takes two each.
  s.batch = l.format == cp::Format::thd ? models::synthetic_batch(l.format, s.config.vocab, {7, 11, 5, 9}, 5)
                                        : models::dummy_batch(l.format, s.config.vocab, 5);
  s.attention.format = l.format;
  s.attention.mask = l.format == cp::Format::thd ? models::Mask::padding : models::Mask::causal;
  s.attention.comm = l.comm;
  const size_t compared = runtime::mpitest::expect_mpi_matches_sim([&](int, std::vector<Bytes>& out) {
    const models::TransformerDump d = models::transformer_step(s);
    out.push_back(bytes_of(d.logits));
    out.push_back(bytes_of(d.loss));
    for (const auto& [name, g] : d.grads) out.push_back(bytes_of(g));
  });
  EXPECT_GT(compared, 10u);
}

// With 4 ranks the 2-rank layouts run with dp = 2 (the gradients reduced over dp x cp); layouts
// of 4 ranks skip themselves on 2.
INSTANTIATE_TEST_SUITE_P(Layouts, TransformerOnMpi,
                         ::testing::Values(Layout{1, 2, cp::CommType::p2p, cp::Format::bshd},
                                           Layout{2, 1, cp::CommType::p2p, cp::Format::bshd},
                                           Layout{1, 2, cp::CommType::all_gather, cp::Format::thd},
                                           Layout{1, 2, cp::CommType::a2a, cp::Format::bshd},
                                           Layout{2, 2, cp::CommType::p2p, cp::Format::bshd},
                                           Layout{1, 4, cp::CommType::a2a_p2p, cp::Format::bshd}),
                         [](const ::testing::TestParamInfo<Layout>& p) {
                           const Layout& l = p.param;
                           const char* comm = l.comm == cp::CommType::p2p          ? "p2p"
                                              : l.comm == cp::CommType::all_gather ? "all_gather"
                                              : l.comm == cp::CommType::a2a        ? "a2a"
                                                                                   : "a2a_p2p";
                           return "tp" + std::to_string(l.tp) + "_cp" + std::to_string(l.cp) + "_" + std::string(comm) +
                                  (l.format == cp::Format::thd ? "_thd" : "_bshd");
                         });

}  // namespace
}  // namespace ranksim

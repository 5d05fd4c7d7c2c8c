// Checkpoint consolidation: layers built from master tensors at tp = 2 and 4 write a file that
// holds those masters bit for bit (gather_full is the exact inverse of the split), under the
// given names, in the given order, from one rank; gradients consolidated at any TP size equal
// the single-rank gradients where those are bitwise (tests/tp/mlp_attention_test.cpp: the
// weight and bias gradients of the MLP without sequence parallelism).
#include "tp/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/safetensors.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "tp/attention.h"
#include "tp/layers.h"
#include "tp/mlp.h"
#include "tp/parallel_state.h"

namespace ranksim::tp {
namespace {

namespace fs = std::filesystem;
using runtime::DType;
using runtime::Tensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

void run_tp(int tp, const std::function<void(int, const runtime::ProcessGroup&)>& fn) {
  runtime::spawn(
      [&](int rank) {
        ParallelState ps = initialize_model_parallel(tp);
        fn(rank, ps.tp().group);
      },
      tp);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> names_of(const runtime::SafetensorsFile& f) {
  std::vector<std::string> names;
  for (const auto& [name, t] : f.tensors) names.push_back(name);
  return names;
}

void expect_bitwise(const runtime::SafetensorsFile& f, const std::string& name, const Tensor& want) {
  ASSERT_TRUE(f.contains(name)) << name;
  const Tensor& got = f.at(name);
  EXPECT_EQ(got.dtype(), want.dtype()) << name;
  EXPECT_EQ(got.shape(), want.shape()) << name;
  EXPECT_TRUE(runtime::bitwise_equal(got, want)) << name << " differs from the master";
}

class Checkpoint : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("checkpoint_") + info->name() + "_" + std::to_string(::getpid());
    for (char& c : name) c = c == '/' ? '_' : c;
    dir_ = fs::path(RANKSIM_BINARY_DIR) / "scratch" / name;
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

constexpr std::int64_t kH = 16, kF = 64;

struct MlpMasters {
  Tensor w1 = Tensor::randn({kF, kH}, 11, 0.0, 0.25);
  Tensor b1 = Tensor::randn({kF}, 12, 0.0, 0.1);
  Tensor w2 = Tensor::randn({kH, kF}, 13, 0.0, 0.125);
  Tensor b2 = Tensor::randn({kH}, 14, 0.0, 0.1);
};

TEST_P(Checkpoint, MlpWritesItsMastersBitForBit) {
  const int p = GetParam();
  const MlpMasters m;
  const std::string path = file("mlp.safetensors");
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(runtime::dtype_name(dtype));
    run_tp(p, [&](int, const runtime::ProcessGroup& g) {
      ParallelMLPOptions o;
      o.dtype = dtype;
      ParallelMLP mlp(m.w1, m.w2, g, o, m.b1, m.b2);
      ConsolidateOptions c;
      c.metadata = {{"format", "pt"}};
      save_consolidated(path, with_prefix("layers.0.mlp.", mlp.named_parameters()), g, c);
      // Collective: the file is complete on every rank's return.
      EXPECT_TRUE(fs::exists(path));
    });
    const runtime::SafetensorsFile f = runtime::load_safetensors(path);
    EXPECT_THAT(names_of(f), ElementsAre("layers.0.mlp.fc1.weight", "layers.0.mlp.fc1.bias", "layers.0.mlp.fc2.weight",
                                         "layers.0.mlp.fc2.bias"));
    EXPECT_THAT(f.metadata, ElementsAre(Pair("format", "pt")));
    expect_bitwise(f, "layers.0.mlp.fc1.weight", m.w1.to(dtype));
    expect_bitwise(f, "layers.0.mlp.fc1.bias", m.b1.to(dtype));
    expect_bitwise(f, "layers.0.mlp.fc2.weight", m.w2.to(dtype));
    expect_bitwise(f, "layers.0.mlp.fc2.bias", m.b2.to(dtype));
  }
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

// The same file from every TP size and every writer rank.
TEST_P(Checkpoint, TheFileDoesNotDependOnTpSizeOrWriter) {
  const int p = GetParam();
  const MlpMasters m;
  auto write = [&](int tp, int writer, const std::string& path) {
    run_tp(tp, [&](int, const runtime::ProcessGroup& g) {
      ParallelMLP mlp(m.w1, m.w2, g, {}, m.b1, m.b2);
      ConsolidateOptions c;
      c.writer = writer;
      save_consolidated(path, mlp.named_parameters(), g, c);
    });
  };
  write(1, 0, file("tp1.safetensors"));
  write(p, p - 1, file("tpn.safetensors"));
  const std::string one = read_bytes(file("tp1.safetensors"));
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(read_bytes(file("tpn.safetensors")), one);
}

// A fused QKV with Megatron's per-group interleaving, and a strided column-parallel weight: the
// pieces go back to their places.
TEST_P(Checkpoint, AttentionAndStridedWeightsGoBackInPlace) {
  const int p = GetParam();
  ParallelAttentionConfig cfg;
  cfg.hidden_size = 32;
  cfg.num_attention_heads = 8;
  cfg.num_query_groups = 4;
  cfg.kv_channels = 4;
  const std::int64_t rows = 4 * (2 + 2) * 4;
  const Tensor wqkv = Tensor::randn({rows, 32}, 21), bqkv = Tensor::randn({rows}, 22);
  const Tensor wp = Tensor::randn({32, 32}, 23), bp = Tensor::randn({32}, 24);
  const Tensor ws = Tensor::randn({6 * 8, 5}, 25), bs = Tensor::randn({6 * 8}, 26);
  const std::string path = file("attn.safetensors");
  run_tp(p, [&](int, const runtime::ProcessGroup& g) {
    ParallelAttention attn(cfg, wqkv, wp, g, bqkv, bp);
    ColumnParallelLinearOptions so;
    so.stride = 3;
    ColumnParallelLinear strided(ws, g, so, bs);
    NamedParameters params = with_prefix("attn.", attn.named_parameters());
    params.emplace_back("strided.weight", &strided.weight());
    params.emplace_back("strided.bias", &strided.bias());
    save_consolidated(path, params, g);
  });
  const runtime::SafetensorsFile f = runtime::load_safetensors(path);
  EXPECT_THAT(names_of(f), ElementsAre("attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                       "strided.weight", "strided.bias"));
  expect_bitwise(f, "attn.qkv.weight", wqkv);
  expect_bitwise(f, "attn.qkv.bias", bqkv);
  expect_bitwise(f, "attn.proj.weight", wp);
  expect_bitwise(f, "attn.proj.bias", bp);
  expect_bitwise(f, "strided.weight", ws);
  expect_bitwise(f, "strided.bias", bs);
}

// Gradients after one forward and backward equal the single-rank ones bitwise: each weight or
// bias gradient of the MLP (without sequence parallelism) is a sum over tokens inside one rank.
TEST_P(Checkpoint, GradientsEqualTheSingleRankGradients) {
  const int p = GetParam();
  const MlpMasters m;
  const Tensor x = Tensor::randn({8, 2, kH}, 31), dy = Tensor::randn({8, 2, kH}, 32);
  auto write = [&](int tp, const std::string& path) {
    run_tp(tp, [&](int, const runtime::ProcessGroup& g) {
      ParallelMLP mlp(m.w1, m.w2, g, {}, m.b1, m.b2);
      MLPContext ctx;
      mlp.forward(x, ctx);
      mlp.backward(dy, ctx);
      ConsolidateOptions c;
      c.gradients = true;
      save_consolidated(path, mlp.named_parameters(), g, c);
    });
  };
  write(1, file("grads1.safetensors"));
  write(p, file("gradsn.safetensors"));
  const runtime::SafetensorsFile one = runtime::load_safetensors(file("grads1.safetensors"));
  const runtime::SafetensorsFile many = runtime::load_safetensors(file("gradsn.safetensors"));
  ASSERT_EQ(names_of(many), names_of(one));
  for (const auto& [name, t] : one.tensors) expect_bitwise(many, name, t);
  // The gradients, not the values: fc2's bias gradient is dY summed over the tokens.
  expect_bitwise(many, "fc2.bias", runtime::add_backward(dy, {kH}).db);
}

INSTANTIATE_TEST_SUITE_P(Tp, Checkpoint, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& i) { return "tp" + std::to_string(i.param); });

class CheckpointErrors : public Checkpoint {};

// A failed write throws on every rank (the writer its own error, the others one naming the
// writer), and leaves the previous file untouched.
TEST_F(CheckpointErrors, AFailedWriteThrowsOnEveryRankAndKeepsThePreviousFile) {
  const MlpMasters m;
  const std::string good = file("good.safetensors");
  const std::string bad = (dir_ / "no-such-dir" / "x.safetensors").string();
  std::atomic<int> failures{0};
  std::vector<std::string> messages(4);
  run_tp(4, [&](int r, const runtime::ProcessGroup& g) {
    ParallelMLP mlp(m.w1, m.w2, g, {}, m.b1, m.b2);
    save_consolidated(good, mlp.named_parameters(), g);
    ConsolidateOptions c;
    c.writer = 2;
    try {
      save_consolidated(bad, mlp.named_parameters(), g, c);
    } catch (const Error& e) {
      ++failures;
      messages[static_cast<std::size_t>(r)] = e.what();
    }
  });
  EXPECT_EQ(failures.load(), 4);
  EXPECT_THAT(messages[2], HasSubstr("safetensors file '" + bad + "'"));
  EXPECT_THAT(messages[0], HasSubstr("save_consolidated: the writer (group rank 2) could not write '" + bad + "'"));
  EXPECT_FALSE(fs::exists(bad));
  const std::string before = read_bytes(good);
  // Invalid requests fail on every rank before anything is gathered or written.
  failures = 0;
  run_tp(2, [&](int, const runtime::ProcessGroup& g) {
    ParallelMLP mlp(m.w1, m.w2, g, {}, m.b1, m.b2);
    auto fails = [&](const NamedParameters& params, const ConsolidateOptions& c, const std::string& msg) {
      try {
        save_consolidated(good, params, g, c);
        ADD_FAILURE() << "no error for: " << msg;
      } catch (const Error& e) {
        ++failures;
        EXPECT_THAT(e.what(), HasSubstr(msg));
      }
    };
    NamedParameters twice = mlp.named_parameters();
    twice.push_back(twice.front());
    fails(twice, {}, "save_consolidated: the name 'fc1.weight' is given twice");
    fails({{"__metadata__", &mlp.fc1().weight()}}, {}, "'__metadata__' cannot name a tensor");
    fails({{"w", nullptr}}, {}, "parameter 'w' is null");
    ConsolidateOptions grads;
    grads.gradients = true;
    fails(mlp.named_parameters(), grads, "parameter 'fc1.weight' has no gradient (run a backward first)");
    ConsolidateOptions writer;
    writer.writer = 2;
    fails(mlp.named_parameters(), writer, "writer 2 is not a rank of the group of 2");
    Parameter shape_only;
    shape_only.value = Tensor::shape_only({4, 4});
    fails({{"s", &shape_only}}, {}, "is shape-only; a checkpoint needs data");
  });
  EXPECT_EQ(failures.load(), 12);
  EXPECT_EQ(read_bytes(good), before);
}

}  // namespace
}  // namespace ranksim::tp

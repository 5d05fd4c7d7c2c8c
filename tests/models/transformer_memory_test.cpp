// Device memory of the reference transformer (models/transformer.h) as the sim backend counts it
// (runtime/tensor/memory.h): the activations one layer keeps for its backward, term by term against
// Megatron's closed form (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", arXiv:2205.05198, section 4.1); the counted bytes against the bytes of the
// tensors a rank can reach, deduplicated by storage; and that backward frees each block's saved
// tensors as it goes, with the peak where that puts it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "models/batch.h"
#include "models/loss.h"
#include "models/transformer.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/memory.h"
#include "runtime/tensor/tensor.h"
#include "sim/topology.h"
#include "tp/parallel_state.h"

namespace ranksim::models {
namespace {

using runtime::DType;
using runtime::MemoryKind;
using runtime::Tensor;
using i64 = std::int64_t;
using u64 = std::uint64_t;

const std::string kRoot = RANKSIM_SOURCE_DIR;

constexpr std::size_t kind(MemoryKind k) { return static_cast<std::size_t>(k); }

u64 total(const std::array<u64, runtime::kMemoryKinds>& bytes) {
  return std::accumulate(bytes.begin(), bytes.end(), u64{0});
}

u64 elem(DType d) { return d == DType::f32 ? 4 : 2; }  // the model's dtypes: f32, or bf16 / f16

runtime::SpawnOptions ring4(const sim::Topology& topo) {
  runtime::SpawnOptions so;
  so.topology = &topo;
  so.engine.trace = false;
  return so;
}

// An f32 model of the given sizes (head_dim = hidden / heads).
TransformerConfig f32_config(i64 vocab, i64 hidden, i64 heads, i64 ffn, i64 layers) {
  TransformerConfig c;
  c.vocab = vocab;
  c.hidden = hidden;
  c.heads = heads;
  c.head_dim = hidden / heads;
  c.ffn = ffn;
  c.layers = layers;
  return c;
}

// Megatron's tensor-parallel groups without sequence parallelism, cp = 1 (built inside a rank).
TransformerGroups groups_of(int tp, const AttentionSetup& setup) {
  const tp::ParallelState ps = tp::initialize_model_parallel(tp, 1, 1);
  TransformerGroups g;
  g.tp = ps.tp().group;
  g.cp = transformer_cp_groups(ps.cp().group, setup);
  return g;
}

// --- 1. Activations per layer against Megatron's formula -----------------------------------------

struct LayerCase {
  const char* name;
  int tp;
  DType dtype;
  i64 hidden, heads, ffn;
  i64 seq, batch;  // BSHD rows of `seq` tokens: s = seq, b = batch
};

// Megatron's bytes per layer (section 4.1, 16-bit activations, tensor parallel, no sequence
// parallelism): sbh (10 + 24/t + 5as/(ht)). Integer as written below when t divides 24 and a.
u64 megatron_layer_bytes(i64 s, i64 b, i64 h, i64 a, i64 t) {
  const i64 sbh = s * b * h;
  return static_cast<u64>(10 * sbh + 24 * sbh / t + 5 * a * s * s * b / t);
}

// The terms of Megatron's sum that this model keeps, in bytes of the model's dtype (e per element;
// Megatron's "2" is e at 16 bits), with ffn f in place of 4h and n = s*b tokens:
//   attention: QKV input (LayerNorm 1 output, replicated)          e n h
//              Q and K (after RoPE: this model keeps the rotated ones)  2 e n h/t
//              softmax 2as^2b/t, its dropout mask as^2b/t and dropout output 2as^2b/t: none (the
//                attention is flash-style: no score matrix is kept; no dropout)
//              V                                                   e n h/t
//              output projection input (the attention kernel's output)  e n h/t
//              dropout mask sbh: none (no dropout)
//   MLP:       fc1 input (LayerNorm 2 output, replicated)          e n h
//              fc1 output (GeLU input)                              e n f/t
//              GeLU output (fc2 input)                              e n f/t
//              dropout mask sbh: none
//   LayerNorm inputs (x_in and x_mid; x_in is the previous layer's output, which one more layer
//   adds once)                                                      2 e n h
//
// What this model keeps on top (its accounting = Megatron's terms + these):
//   lse: the flash kernel keeps its output (already counted above as the projection's input) and
//     its log-sum-exp, f32 [a/t, n] (cp/attention.h AttentionResult).
//   ln_stats: each LayerNorm keeps its mean and rstd for backward, f32 [n] each, two LayerNorms
//     (runtime/tensor/ops.h LayerNormResult).
//   qkv_view, with one token only (n = 1): v is parts[2].reshape(...) of the fused qkv output
//     (Transformer::Block::forward). For n > 1 that column slice is not contiguous, so reshape
//     copies and the fused output dies with the forward; for n = 1 the [1, h/t] slice counts as
//     contiguous (Tensor::is_contiguous ignores the stride of a size-1 dim), reshape returns a
//     view, and v keeps the whole [1, 3h/t] storage alive: its q and k thirds, 2 e n h/t, are kept
//     beside the rotated q and k that backward uses.
struct PerLayer {
  u64 megatron_terms = 0;  // the sum above
  u64 lse = 0;
  u64 ln_stats = 0;
  u64 qkv_view = 0;
  u64 total() const { return megatron_terms + lse + ln_stats + qkv_view; }
};

PerLayer per_layer(const LayerCase& c) {
  const u64 e = elem(c.dtype), n = static_cast<u64>(c.seq * c.batch), h = static_cast<u64>(c.hidden);
  const u64 t = static_cast<u64>(c.tp), f = static_cast<u64>(c.ffn), a = static_cast<u64>(c.heads);
  PerLayer p;
  const u64 attention = e * n * h + 2 * e * n * h / t + e * n * h / t + e * n * h / t;
  const u64 mlp = e * n * h + e * n * f / t + e * n * f / t;
  const u64 layer_norm_inputs = 2 * e * n * h;
  p.megatron_terms = attention + mlp + layer_norm_inputs;
  p.lse = 4 * (a / t) * n;
  p.ln_stats = 2 * 2 * 4 * n;
  p.qkv_view = n == 1 ? 2 * e * n * h / t : 0;
  return p;
}

class LayerActivations : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerActivations, OneMoreLayerAddsMegatronsTermsLessDropoutAndScoresPlusThisModelsExtras) {
  const LayerCase c = GetParam();
  TransformerConfig cfg;
  cfg.vocab = 1000;
  cfg.hidden = c.hidden;
  cfg.heads = c.heads;
  cfg.head_dim = c.hidden / c.heads;
  cfg.ffn = c.ffn;
  cfg.dtype = c.dtype;
  ASSERT_EQ(cfg.heads * cfg.head_dim, cfg.hidden);
  constexpr i64 kLayers = 2;  // measured with kLayers and kLayers + 1 blocks
  TransformerConfig cfg_l = cfg, cfg_l1 = cfg;
  cfg_l.layers = kLayers;
  cfg_l1.layers = kLayers + 1;
  // Made outside the run: neither the weights nor the global batch are any rank's memory.
  const Weights w_l = shape_only_weights(cfg_l), w_l1 = shape_only_weights(cfg_l1);
  const Batch batch = synthetic_batch(cp::Format::bshd, cfg.vocab, std::vector<i64>(c.batch, c.seq), 5);
  const AttentionSetup setup;  // BSHD, causal, cp = 1

  // forward_bytes[rank][0]: activations stage_forward adds with kLayers blocks; [1]: with one more.
  std::vector<std::array<u64, 2>> forward_bytes(static_cast<std::size_t>(c.tp));
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  runtime::spawn(
      [&](int rank) {
        const TransformerGroups g = groups_of(c.tp, setup);
        const LocalBatch local = shard_batch(batch, 1, 0);
        for (int i = 0; i < 2; ++i) {
          const Transformer model(i == 0 ? cfg_l : cfg_l1, i == 0 ? w_l : w_l1, g, setup);
          const u64 before = runtime::memory_in_use()[kind(MemoryKind::activations)];
          TransformerContext ctx;
          const Tensor logits = model.stage_forward(local, Tensor(), ctx);  // ctx and logits alive
          const u64 after = runtime::memory_in_use()[kind(MemoryKind::activations)];
          forward_bytes[static_cast<std::size_t>(rank)][static_cast<std::size_t>(i)] = after - before;
        }
      },
      c.tp, ring4(topo));

  const PerLayer expected = per_layer(c);
  const u64 e = elem(c.dtype), n = static_cast<u64>(c.seq * c.batch), h = static_cast<u64>(c.hidden);
  if (c.dtype == DType::bf16 && c.ffn == 4 * c.hidden) {
    // At Megatron's own element size and ffn, the kept terms are the paper's sum less exactly what
    // this model drops: the two dropout masks (sbh each) and the score terms 5as^2b/t.
    const i64 a = c.heads, s = c.seq, b = c.batch, t = c.tp;
    EXPECT_EQ(expected.megatron_terms, megatron_layer_bytes(s, b, c.hidden, a, t) -
                                           2 * static_cast<u64>(s * b * c.hidden) -
                                           static_cast<u64>(5 * a * s * s * b / t));
  }
  for (int r = 0; r < c.tp; ++r) {
    const std::array<u64, 2>& m = forward_bytes[static_cast<std::size_t>(r)];
    EXPECT_EQ(m[1] - m[0], expected.total())
        << "rank " << r << ": Megatron's terms " << expected.megatron_terms << " + lse " << expected.lse
        << " + LayerNorm stats " << expected.ln_stats << " + fused qkv kept by v " << expected.qkv_view;
    // The whole forward: the embedding's output (e n h), kLayers layers, the final LayerNorm (its
    // output and two f32 statistics) and the logits (e n vocab / t: vocab-parallel, as every tp
    // here divides the vocabulary), and with tp > 1 the vocab-parallel lookup's local ids (i64).
    const auto t = static_cast<u64>(c.tp);
    const u64 head = e * n * h + 2 * 4 * n + e * n * static_cast<u64>(cfg.vocab) / t + (t > 1 ? 8 * n : 0);
    EXPECT_EQ(m[0], e * n * h + kLayers * expected.total() + head) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, LayerActivations,
                         ::testing::Values(
                             // tp 1, f32, ffn = 4h
                             LayerCase{"tp1_f32_ffn4h", 1, DType::f32, 512, 8, 2048, 256, 2},
                             // tp 2, bf16, ffn = 4h: Megatron's own setting
                             LayerCase{"tp2_bf16_ffn4h", 2, DType::bf16, 1024, 16, 4096, 1024, 1},
                             // tp 4, bf16, Llama-7B's sizes (ffn 11008 = 2.6875 h), 2 rows of 2048
                             LayerCase{"tp4_bf16_llama7b", 4, DType::bf16, 4096, 32, 11008, 2048, 2},
                             // tp 2, f32, an ffn that is no multiple of h, odd s*b
                             LayerCase{"tp2_f32_ffn1000", 2, DType::f32, 320, 20, 1000, 48, 3},
                             // tp 4, f32, ffn = 4h, 10 heads per rank
                             LayerCase{"tp4_f32_ffn4h", 4, DType::f32, 2560, 40, 10240, 512, 4},
                             // tp 4, bf16, ffn = 4h: Megatron's setting with the heads split four ways
                             LayerCase{"tp4_bf16_ffn4h", 4, DType::bf16, 768, 12, 3072, 128, 3},
                             // tp 2, f32, one token per rank (s = b = 1): v is a view of the fused qkv output
                             LayerCase{"tp2_f32_one_token", 2, DType::f32, 512, 8, 2048, 1, 1}),
                         [](const ::testing::TestParamInfo<LayerCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

// --- 2. The bytes counted are the bytes of the tensors alive -------------------------------------

// Tensors reachable from the test, counted once per storage.
class Reached {
 public:
  void add(const Tensor& t) {
    if (t.defined()) tensors_.push_back(t);
  }
  void add(const NormResult& r) {
    add(r.y);
    add(r.mean);
    add(r.rstd);
  }
  void add(const BlockContext& b) {
    add(b.x_in);
    add(b.ln1);
    add(b.ln2);
    add(b.x_mid);
    add(b.qkv.input);
    add(b.proj.input);
    add(b.mlp.fc1.input);
    add(b.mlp.fc2.input);
    add(b.mlp.pre_activation);
    add(b.q);
    add(b.k);
    add(b.v);
    add(b.attention.out);
    add(b.attention.lse);
    const cp::CpContext& c = b.cp_ctx;  // empty at cp = 1; added all the same
    for (const Tensor& t : {c.q, c.k, c.v, c.out, c.lse, c.kv_next}) add(t);
    for (const Tensor& t : c.chunk_out) add(t);
    for (const Tensor& t : c.chunk_lse) add(t);
  }
  void add(const TransformerContext& ctx) {
    for (const BlockContext& b : ctx.blocks) add(b);
    add(ctx.x_last);
    add(ctx.lnf);
  }
  void add(Transformer& model) {
    for (auto& [name, p] : model.named_parameters()) {
      add(p->value);
      add(p->grad);
    }
  }
  // The sum of storage_nbytes over distinct storages.
  u64 bytes() const {
    std::vector<Tensor> distinct;
    for (const Tensor& t : tensors_) {
      bool seen = false;
      for (const Tensor& d : distinct) seen = seen || d.shares_storage(t);
      if (!seen) distinct.push_back(t);
    }
    u64 sum = 0;
    for (const Tensor& d : distinct) sum += d.storage_nbytes();
    return sum;
  }

 private:
  std::vector<Tensor> tensors_;
};

TEST(TransformerMemory, TheBytesCountedAreTheBytesOfTheTensorsAliveAfterForwardAndAfterBackward) {
  const TransformerConfig cfg = f32_config(33, 64, 4, 96, 2);
  constexpr int kTp = 2;
  const Batch batch = synthetic_batch(cp::Format::bshd, cfg.vocab, {6, 6}, 11);  // outside the run
  const AttentionSetup setup;
  std::array<u64, kTp> after_forward{}, after_backward{}, counted_forward{}, counted_backward{};
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  const runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        const u64 baseline = total(runtime::memory_in_use());  // nothing is made yet: 0, and collected below
        const TransformerGroups g = groups_of(kTp, setup);
        // The weights are made inside the rank, so every storage the model holds is this rank's
        // (see DISABLED_ParametersMadeOutsideTheRunAreCounted below for weights made outside).
        const Weights weights = seeded_weights(cfg, 3);
        const LocalBatch local = shard_batch(batch, 1, 0);
        Transformer model(cfg, weights, g, setup);
        TransformerContext ctx;
        const Tensor logits = model.stage_forward(local, Tensor(), ctx);
        ASSERT_TRUE(logits.has_data());
        Reached fwd;
        for (const auto& [name, t] : weights) fwd.add(t);
        fwd.add(local.ids);
        fwd.add(local.labels);
        fwd.add(model);
        fwd.add(ctx);
        fwd.add(logits);
        const auto r = static_cast<std::size_t>(rank);
        after_forward[r] = total(runtime::memory_in_use()) - baseline;
        counted_forward[r] = fwd.bytes();

        const GroupLoss loss = group_cross_entropy(logits, local.labels, g.cp.cp);
        const Tensor dx = model.stage_backward(loss.dlogits, local, ctx);
        ASSERT_FALSE(dx.defined());  // the first stage returns nothing
        Reached bwd = fwd;           // the same tensors (ctx is still alive) ...
        bwd.add(model);              // ... plus every parameter's gradient
        bwd.add(loss.dlogits);
        after_backward[r] = total(runtime::memory_in_use()) - baseline;
        counted_backward[r] = bwd.bytes();
        // Every parameter got its gradient: as many gradient bytes as value bytes.
        u64 values = 0, grads = 0;
        for (auto& [name, p] : model.named_parameters()) {
          ASSERT_TRUE(p->grad.defined()) << name;
          values += p->value.nbytes();
          grads += p->grad.storage_nbytes();
        }
        EXPECT_EQ(grads, values);
        EXPECT_EQ(runtime::memory_in_use()[kind(MemoryKind::gradients)], grads);
      },
      kTp, ring4(topo));
  ASSERT_EQ(rep.memory.size(), static_cast<std::size_t>(kTp));
  for (std::size_t r = 0; r < kTp; ++r) {
    EXPECT_EQ(after_forward[r], counted_forward[r]) << "rank " << r;
    EXPECT_EQ(after_backward[r], counted_backward[r]) << "rank " << r;
    EXPECT_GT(counted_backward[r], counted_forward[r]) << "rank " << r;  // the gradients and dlogits
    EXPECT_GE(rep.memory[r].peak, counted_forward[r]) << "rank " << r;
    EXPECT_GE(rep.memory[r].peak, counted_backward[r]) << "rank " << r;
  }
}

// A rank's replicated parameters (embedding, every LayerNorm, the output layer) are its own copies
// even when the weights were made before the run in the model's dtype (as the `ranksim` runner
// makes them): models/transformer.cpp's replicated() clones a master that to() would share. Were
// they shared, no rank would count them (the storage belongs to no rank): each rank would count
// 116864 of its 136452 parameter bytes, short by 4 (2 V h + V + 2 h + 4 h L) = 19588 (the
// embedding and output weights, the output bias, the final LayerNorm and two LayerNorms per layer,
// f32, V = 33, h = 64, L = 2). TP-sharded parameters are copies (tp/sharding.cpp, shard_of).
TEST(TransformerMemory, ParametersMadeOutsideTheRunAreCounted) {
  const TransformerConfig cfg = f32_config(33, 64, 4, 96, 2);
  const Weights weights = seeded_weights(cfg, 3);  // outside the run
  std::array<u64, 2> counted{}, held{};
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  runtime::spawn(
      [&](int rank) {
        const AttentionSetup setup;
        Transformer model(cfg, weights, groups_of(2, setup), setup);
        u64 bytes = 0;
        for (auto& [name, p] : model.named_parameters()) bytes += p->value.nbytes();
        held[static_cast<std::size_t>(rank)] = bytes;
        counted[static_cast<std::size_t>(rank)] = runtime::memory_in_use()[kind(MemoryKind::parameters)];
      },
      2, ring4(topo));
  for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(counted[r], held[r]) << "rank " << r;
}

// --- 3. Backward frees as it goes, and where the peak falls ----------------------------------------

// A shape-only forward, loss and backward (Transformer::forward_backward's sequence), f32, tp = 2,
// three layers, n tokens per rank. Transformer::stage_backward frees what forward kept as soon as
// it is used, as autograd frees a node's saved tensors: after block i's backward its whole context
// is gone, and the gradient passed on (dx, e n h) replaces the one received. So between the
// after_block hooks of two consecutive blocks the activations drop by exactly one layer's bytes
// (test 1's per_layer: what one more layer adds in forward), and after stage_backward only what the
// caller still holds is left (the logits). Gradients are tagged as such once accumulated.
//
// The peak: backward starts with everything forward kept (A0) plus dlogits and only frees from
// there, while the gradients it accumulates (the parameters' size) grow. The output layer's
// backward frees dlogits, x_last, lnf (3 e n h for this vocabulary, about n h) before the blocks;
// the last block, layer 2, then runs with every other block's context still alive, and each later
// block has one layer's context less. With a vocabulary small against the tokens the peak is
// therefore at the start of backward: in the output layer's backward or in layer 2's, never in an
// earlier layer, and below A0 + dlogits + one block's largest temporaries (7 e n h + 7 e n h / t:
// dy, dln2, g2.dx, dmid, dln1, g1.dx, dx and dattn, dq, dk, dv, 3-wide dqkv) + all the gradients.
TEST(TransformerMemory, BackwardFreesEachBlocksContextAndPeaksAtItsStart) {
  const TransformerConfig cfg = f32_config(1000, 1024, 16, 4096, 3);
  constexpr int kTp = 2;
  const LayerCase lc{"", kTp, DType::f32, cfg.hidden, cfg.heads, cfg.ffn, 512, 2};
  const u64 e = 4, n = 1024, h = static_cast<u64>(cfg.hidden), t = kTp;
  const Weights weights = shape_only_weights(cfg);
  const Batch batch = synthetic_batch(cp::Format::bshd, cfg.vocab, std::vector<i64>(2, 512), 2);
  const AttentionSetup setup;
  std::array<u64, kTp> forward_activations{}, after_backward{}, logits_bytes{}, grads{};
  std::array<std::vector<std::pair<i64, u64>>, kTp> at_hook;
  const sim::Topology topo = sim::Topology::load_file(kRoot + "/topologies/ring4.yaml");
  const runtime::RunReport rep = runtime::spawn(
      [&](int rank) {
        const auto r = static_cast<std::size_t>(rank);
        const TransformerGroups g = groups_of(kTp, setup);
        const LocalBatch local = shard_batch(batch, 1, 0);
        Transformer model(cfg, weights, g, setup);
        const u64 base = runtime::memory_in_use()[kind(MemoryKind::activations)];
        TransformerContext ctx;
        const Tensor logits = model.stage_forward(local, Tensor(), ctx);
        logits_bytes[r] = logits.nbytes();
        forward_activations[r] = runtime::memory_in_use()[kind(MemoryKind::activations)] - base;  // A0
        GroupLoss loss;
        {
          const runtime::MemoryPhase phase("loss");  // as forward_backward labels it
          loss = group_cross_entropy(logits, local.labels, g.cp.cp, model.vocab_group());
        }
        EXPECT_TRUE(model.vocab_parallel());  // tp = 2 divides the vocabulary
        model.stage_backward(std::move(loss.dlogits), local, ctx, [&](i64 layer) {
          at_hook[r].emplace_back(layer, runtime::memory_in_use()[kind(MemoryKind::activations)] - base);
        });
        after_backward[r] = runtime::memory_in_use()[kind(MemoryKind::activations)] - base;
        for (auto& [name, p] : model.named_parameters()) grads[r] += p->grad.nbytes();
      },
      kTp, ring4(topo));
  const u64 layer = per_layer(lc).total();
  for (std::size_t r = 0; r < kTp; ++r) {
    ASSERT_EQ(at_hook[r].size(), 3u);
    EXPECT_EQ(at_hook[r][0].first, 2);
    EXPECT_EQ(at_hook[r][2].first, 0);
    EXPECT_EQ(at_hook[r][0].second - at_hook[r][1].second, layer) << "rank " << r;
    EXPECT_EQ(at_hook[r][1].second - at_hook[r][2].second, layer) << "rank " << r;
    // After layer 0: its input gradient (the embedding's), the logits the caller holds, and the
    // vocab-parallel lookup's local ids (i64, one per token), which the embedding's backward reads.
    EXPECT_EQ(at_hook[r][2].second, e * n * h + logits_bytes[r] + 8 * n) << "rank " << r;
    EXPECT_EQ(logits_bytes[r], e * n * static_cast<u64>(cfg.vocab) / t) << "rank " << r;  // this rank's columns
    EXPECT_EQ(after_backward[r], logits_bytes[r]) << "rank " << r;
    const runtime::MemoryUse& m = rep.memory[r];
    EXPECT_THAT(m.phase, ::testing::AnyOf("output layer backward", "layer 2 backward")) << "rank " << r;
    const u64 dlogits = e * n * static_cast<u64>(cfg.vocab) / t;
    EXPECT_GT(m.at_peak[kind(MemoryKind::activations)], forward_activations[r]) << "rank " << r;
    EXPECT_LE(m.at_peak[kind(MemoryKind::activations)] + m.at_peak[kind(MemoryKind::gradients)],
              forward_activations[r] + dlogits + 7 * e * n * h + 7 * e * n * h / t + grads[r])
        << "rank " << r;
  }
}

}  // namespace
}  // namespace ranksim::models

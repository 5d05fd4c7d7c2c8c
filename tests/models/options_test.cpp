// Megatron-LM's options on the decoder (models/transformer.h, models/train.h): sequence
// parallelism, activation recomputation (selective; full, uniform or block) and the interleaved
// 1F1B schedule with virtual pipeline stages. The GPT/Llama family's numerics are
// family_test.cpp's; here each option is checked for what it promises:
//
// - the numbers: recomputation reruns a deterministic forward, and interleaving changes only the
//   order of passes, not any sum (each chunk's gradients still accumulate micro-batch 0 first),
//   so both equal their plain runs bit for bit; sequence parallelism sums the norms' weight
//   gradients per TP share and then over TP (another order), so it agrees within train_test.cpp's
//   bound (see expect_close_training);
// - the timeline (shape-only runs, RunReport::trace): which collectives each option issues, in
//   which order, per rank;
// - the errors for layouts the options cannot take.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model_test_util.h"
#include "models/batch.h"
#include "models/train.h"
#include "models/transformer.h"
#include "runtime/distributed/run_report.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "sim/trace.h"
#include "training_checks.h"

namespace ranksim::models {
namespace {

using testing::arg;
using testing::repeat;
using testing::Seq;
using testing::operator+;

using runtime::DType;
using runtime::Tensor;
using ::testing::HasSubstr;
using i64 = std::int64_t;

constexpr i64 kVocab = 17;
constexpr i64 kHidden = 32;
// Four THD sequences of 41 tokens in all: no tp > 1 divides the local token count at cp = 1, so
// sequence parallelism pads; distinct lengths tell the micro-batches apart by their bytes.
const std::vector<i64> kLengths{9, 14, 6, 12};

// Llama style (RMSNorm, SwiGLU, no biases, RoPE), 4 heads of which 2 for keys and values, 4 blocks.
TrainSpec make_spec(int tp, int cp, int dp, int pp, int micro, bool shape_only = false,
                    const std::vector<i64>& lengths = kLengths) {
  TrainSpec s;
  s.config = llama_config(kVocab, kHidden, 4, 2, 48, 4);
  s.attention.format = cp::Format::thd;
  s.attention.mask = Mask::causal;
  s.attention.comm = cp::CommType::p2p;
  s.weights = shape_only ? shape_only_weights(s.config) : seeded_weights(s.config, 7);
  s.batch = synthetic_batch(cp::Format::thd, kVocab, lengths, 3);
  s.tp = tp;
  s.cp = cp;
  s.dp = dp;
  s.pp = pp;
  s.micro_batches = micro;
  s.steps = shape_only ? 1 : 3;
  s.optimizer.lr = 1e-2;
  s.optimizer.eps = 1e-4;  // train_test.cpp's base() says why
  return s;
}

using testing::expect_bit_identical;
using testing::expect_close_training;  // train_test.cpp's bound
using testing::max_abs;

// --- Numbers ---------------------------------------------------------------------------------

struct RecomputeMode {
  Recompute recompute;
  RecomputeMethod method;
  i64 num_layers;
  const char* name;
};
const std::vector<RecomputeMode> kRecomputeModes{
    {Recompute::selective, RecomputeMethod::uniform, 1, "selective"},
    {Recompute::full, RecomputeMethod::uniform, 1, "full uniform 1"},
    {Recompute::full, RecomputeMethod::uniform, 2, "full uniform 2"},
    {Recompute::full, RecomputeMethod::block, 1, "full block 1"},
};

// Recomputation reruns the same deterministic forward: every mode equals none bit for bit --
// losses, clipped gradient norms and weights.
void expect_recompute_bit_identical(TrainSpec s) {
  s.clip_grad_norm = 0.5;  // the norm of every gradient, compared bit for bit, and applied
  const TrainResult want = run_training(s);
  ASSERT_EQ(want.losses.size(), 3u);
  EXPECT_LT(want.losses[2], want.losses[0]);
  EXPECT_GT(want.grad_norms[0], 0.5);  // clipping really happens
  for (const RecomputeMode& m : kRecomputeModes) {
    TrainSpec r = s;
    r.config.recompute = m.recompute;
    r.config.recompute_method = m.method;
    r.config.recompute_num_layers = m.num_layers;
    expect_bit_identical(run_training(r), want, m.name);
  }
}

TEST(OptionsRecompute, EveryModeEqualsNoneBitForBitAtPp2) { expect_recompute_bit_identical(make_spec(1, 1, 1, 2, 2)); }

TEST(OptionsRecompute, EveryModeEqualsNoneBitForBitAtTp2Cp2) {
  expect_recompute_bit_identical(make_spec(2, 2, 1, 1, 2));
}

// Interleaving reorders passes, not sums: v = 2 equals v = 1 at pp = 2 bit for bit, and both
// equal pp = 1 bit for bit too (stronger than train_test.cpp's bound: a pipeline split reorders no
// sum, and each chunk still accumulates micro-batch 0 first). Without clipping: the global
// gradient norm adds the stages' partial sums, another order, so clipped runs' norms differ in
// their last bits.
TEST(OptionsInterleaved, TwoChunksEqualOneChunkAndOneStageBitForBit) {
  const TrainResult one = run_training(make_spec(1, 1, 1, 1, 4));
  const TrainResult plain = run_training(make_spec(1, 1, 1, 2, 4));
  TrainSpec s = make_spec(1, 1, 1, 2, 4);
  s.virtual_stages = 2;
  const TrainResult interleaved = run_training(s);
  ASSERT_EQ(one.losses.size(), 3u);
  EXPECT_LT(one.losses[2], one.losses[0]);
  expect_bit_identical(interleaved, plain, "v=2 against v=1 at pp=2");
  expect_bit_identical(interleaved, one, "v=2 at pp=2 against pp=1");
}

// Sequence parallelism: the same training within train_test.cpp's bound (41 tokens: tp = 2 pads
// one row, tp = 4 three; at pp = 2 the stages send the padded shares). Not bit for bit (the norms'
// weight gradients are summed in another order); measured, the worst weight is within a tenth of
// the bound.
TEST(OptionsSequenceParallel, EqualsOffWithPaddedRows) {
  struct Case {
    int tp, pp, micro;
  };
  for (const Case c : {Case{2, 1, 1}, Case{4, 1, 1}, Case{2, 2, 2}}) {
    const std::string what = "tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp);
    TrainSpec s = make_spec(c.tp, 1, 1, c.pp, c.micro);
    const TrainResult off = run_training(s);
    s.config.sequence_parallel = true;
    const TrainResult on = run_training(s);
    expect_close_training(on, off, s.optimizer.lr, what);
  }
}

// The combined layout: TP2 with SP, CP2, PP2 with 2 virtual stages, DP2, 4 micro-batches and
// selective recomputation (16 ranks) trains as one rank does; with FSDP over DP x CP as well
// (issue #18's case) it gives the distributed optimizer's bits.
TEST(OptionsSequenceParallel, CombinedLayoutEqualsOneRank) {
  const std::vector<i64> lengths{9, 14, 6, 12, 7, 11, 5, 10};  // 8 sequences: dp 2 x 4 micro-batches
  const TrainResult want = run_training(make_spec(1, 1, 1, 1, 1, false, lengths));
  TrainSpec s = make_spec(2, 2, 2, 2, 4, false, lengths);
  s.config.sequence_parallel = true;
  s.config.recompute = Recompute::selective;
  s.virtual_stages = 2;
  const TrainResult got = run_training(s);
  ASSERT_EQ(want.losses.size(), 3u);
  EXPECT_LT(want.losses[2], want.losses[0]);
  expect_close_training(got, want, s.optimizer.lr, "tp2 sp cp2 pp2 v2 dp2 selective");
  s.zero = 1;
  const TrainResult zero1 = run_training(s);
  s.zero = 3;
  const TrainResult fsdp = run_training(s);
  expect_close_training(fsdp, want, s.optimizer.lr, "tp2 sp cp2 pp2 v2 dp2 fsdp selective");
  EXPECT_EQ(fsdp.losses, zero1.losses);
  ASSERT_EQ(fsdp.params.size(), zero1.params.size());
  for (std::size_t i = 0; i < fsdp.params.size(); ++i)
    EXPECT_TRUE(runtime::bitwise_equal(fsdp.params[i].second, zero1.params[i].second)) << fsdp.params[i].first;
}

// TP communication overlap pipelines the same collectives with the same GEMMs in chunks: every
// output row is computed by the same sum, and each chunk's reduce-scatter sums over the ranks in
// the whole one's order, so it equals sequence parallelism without it bit for bit -- with GQA
// (three GEMMs on one gathered input), at tp = 2 and 4, with a padded token count, through the
// pipeline and with recomputation and FSDP.
TEST(OptionsTpCommOverlap, EqualsSequenceParallelismBitForBit) {
  struct Case {
    int tp, cp, dp, pp, micro;
    Recompute recompute;
    int zero;
  };
  const std::vector<i64> lengths{9, 14, 6, 12, 7, 11, 5, 10};
  for (const Case c : {Case{2, 1, 1, 1, 1, Recompute::none, 0}, Case{4, 1, 1, 1, 2, Recompute::none, 0},
                       Case{2, 2, 1, 2, 2, Recompute::full, 0}, Case{2, 1, 2, 1, 2, Recompute::selective, 3}}) {
    const std::string what = "tp" + std::to_string(c.tp) + " cp" + std::to_string(c.cp) + " dp" + std::to_string(c.dp) +
                             " pp" + std::to_string(c.pp);
    TrainSpec s = make_spec(c.tp, c.cp, c.dp, c.pp, c.micro, false, lengths);
    s.steps = 1;  // one update: the gradients, state and weights (ASan makes each step costly)
    s.config.sequence_parallel = true;
    s.config.recompute = c.recompute;
    s.zero = c.zero;
    const TrainResult plain = run_training(s);
    s.config.tp_comm_overlap = true;
    expect_bit_identical(run_training(s), plain, what, true);
  }
  // fused qkv (multi-head attention) and biases: the column-parallel layer's own path
  TrainSpec s = make_spec(2, 1, 1, 1, 1);
  s.steps = 1;
  s.config = gpt_config(kVocab, kHidden, 4, 48, 2, 16);
  s.weights = seeded_weights(s.config, 5);
  s.batch = synthetic_batch(cp::Format::thd, kVocab, {9, 14, 6, 12}, 3);
  s.config.sequence_parallel = true;
  const TrainResult plain = run_training(s);
  s.config.tp_comm_overlap = true;
  expect_bit_identical(run_training(s), plain, "gpt tp2", true);
}

// --- Timeline ----------------------------------------------------------------------------------

// One rank's communication in a shape-only run of one step and one micro-batch, split at its loss
// (the cross_entropy compute span): the collectives it posted before (forward) and after
// (backward), as "all_gather" etc., in call order -- numbered per group, so these lists are only
// meaningful where `groups` has one (the tests' runs make tp the whole world); its sends and
// receives in post order as "send tag=T" and "recv tag=T".
struct Timeline {
  std::vector<std::string> forward, backward;  // collectives, every group
  std::set<std::string> groups;
  std::vector<std::string> fwd_p2p, bwd_p2p;
};

Timeline timeline_of(const runtime::RunReport& rep, int rank) {
  sim::Time loss{};
  bool found = false;
  for (const sim::Span& s : rep.trace.spans()) {
    if (s.rank == rank && s.kind == sim::SpanKind::compute && s.name == "cross_entropy" && !found) {
      loss = s.start;
      found = true;
    }
  }
  EXPECT_TRUE(found) << "rank " << rank << " has no loss";
  std::vector<const sim::Span*> coll, p2p;
  for (const sim::Span& s : rep.trace.spans()) {
    if (s.rank != rank || s.kind != sim::SpanKind::comm) continue;
    (arg(s, "group").empty() ? p2p : coll).push_back(&s);
  }
  std::stable_sort(coll.begin(), coll.end(), [](const sim::Span* a, const sim::Span* b) {
    return std::stoul(arg(*a, "call")) < std::stoul(arg(*b, "call"));
  });
  std::stable_sort(p2p.begin(), p2p.end(), [](const sim::Span* a, const sim::Span* b) { return a->start < b->start; });
  Timeline t;
  for (const sim::Span* s : coll) {
    t.groups.insert(arg(*s, "group"));
    (s->start < loss ? t.forward : t.backward).push_back(s->name);
  }
  for (const sim::Span* s : p2p) {
    const std::string verb = s->name.rfind("send", 0) == 0 ? "send" : "recv";
    (s->start < loss ? t.fwd_p2p : t.bwd_p2p).push_back(verb + " tag=" + arg(*s, "tag"));
  }
  return t;
}

const std::string AG = "all_gather", RS = "reduce_scatter", AR = "all_reduce";

TEST(OptionsTimeline, SequenceParallelGathersAndScattersInsteadOfAllReduces) {
  // tp = 2 is the whole world, so every collective is over TP
  TrainSpec s = make_spec(2, 1, 1, 1, 1, true);
  runtime::RunReport off_rep, on_rep;
  run_training(s, {}, &off_rep);
  s.config.sequence_parallel = true;
  run_training(s, {}, &on_rep);
  for (int rank : {0, 1}) {
    const Timeline off = timeline_of(off_rep, rank), on = timeline_of(on_rep, rank);
    EXPECT_EQ(on.groups.size(), 1u);
    // without SP: proj's and fc2's all-reduces in each block's forward, qkv's and fc1's in backward
    EXPECT_EQ(off.forward, repeat({AR, AR}, 4)) << rank;
    EXPECT_EQ(off.backward, repeat({AR, AR}, 4)) << rank;
    // with SP: qkv in (all-gather), proj out (reduce-scatter), fc1 in, fc2 out; then the output
    // layer gathers the final norm's rows
    EXPECT_EQ(on.forward, repeat({AG, RS, AG, RS}, 4) + Seq{AG}) << rank;
    // backward: the output layer's input gathered again, then per block fc2 (all-gather of dy),
    // fc1 (input gathered again, dx reduce-scattered), proj, qkv; the embedding's gradient
    // gathered out of the SP region; then the norms' weight gradients summed over TP
    const Seq block_backward{AG, AG, RS, AG, AG, RS};
    const Seq head = Seq{AG} + repeat(block_backward, 4) + Seq{AG};
    ASSERT_GT(on.backward.size(), head.size());
    EXPECT_EQ(Seq(on.backward.begin(), on.backward.begin() + static_cast<std::ptrdiff_t>(head.size())), head);
    for (std::size_t i = head.size(); i < on.backward.size(); ++i) EXPECT_EQ(on.backward[i], AR) << i;
    EXPECT_EQ(std::count(on.forward.begin(), on.forward.end(), AR), 0);
  }
}

// With TP communication overlap each sequence-parallel all-gather before a column-parallel GEMM,
// and each reduce-scatter after a row-parallel one, becomes tp collectives of 1/tp the size (44
// local tokens: 22 rows per rank at tp = 2, chunks of 11), and the backward's all-gathers of the
// row-parallel layers' dY likewise; the step is shorter on the same topology (the chunks' transfers
// run under the GEMMs).
TEST(OptionsTimeline, TpCommOverlapSplitsTheGathersAndScattersIntoChunks) {
  const std::vector<i64> lengths{10, 14, 8, 12};  // 44 tokens
  const i64 row = kHidden * 4;
  auto run = [&](bool overlap, runtime::RunReport& rep) {
    TrainSpec s = make_spec(2, 1, 1, 1, 1, true, lengths);
    s.config.sequence_parallel = true;
    s.config.tp_comm_overlap = overlap;
    run_training(s, {}, &rep);
  };
  runtime::RunReport plain_rep, rep;
  run(false, plain_rep);
  run(true, rep);
  for (int rank : {0, 1}) {
    const Timeline plain = timeline_of(plain_rep, rank), t = timeline_of(rep, rank);
    // forward, per block: qkv's gather in 2 chunks, proj's scatter in 2, fc1's gather, fc2's
    // scatter; then the output layer's gather of the final norm (not overlapped)
    EXPECT_EQ(plain.forward, repeat({AG, RS, AG, RS}, 4) + Seq{AG}) << rank;
    EXPECT_EQ(t.forward, repeat({AG, AG, RS, RS, AG, AG, RS, RS}, 4) + Seq{AG}) << rank;
    // backward, per block: fc2's dY gathered in 2 chunks, fc1's bulk gather and scatter, proj's
    // dY in 2 chunks, qkv's bulk gather and scatter
    const Seq head = Seq{AG} + repeat({AG, AG, AG, RS, AG, AG, AG, RS}, 4) + Seq{AG};
    ASSERT_GT(t.backward.size(), head.size()) << rank;
    EXPECT_EQ(Seq(t.backward.begin(), t.backward.begin() + static_cast<std::ptrdiff_t>(head.size())), head) << rank;
  }
  // the chunks carry 11 rows per rank: all-gathers 22 rows out, reduce-scatters 22 rows in
  std::set<std::string> chunk_bytes;
  for (const sim::Span& x : rep.trace.spans()) {
    if (x.kind == sim::SpanKind::comm && x.name != AR) chunk_bytes.insert(arg(x, "bytes"));
  }
  EXPECT_TRUE(chunk_bytes.count(std::to_string(22 * row))) << "the chunks";
  EXPECT_TRUE(chunk_bytes.count(std::to_string(44 * row))) << "the output layer's whole gather";
  EXPECT_EQ(chunk_bytes.size(), 2u);
  // At this size the step is latency-bound and the chunks' extra latencies cost more than they
  // hide; at a realistic one (hidden 2048, ffn 8192, 8192 tokens) the overlap shortens the step.
  auto big = [&](bool overlap) {
    TrainSpec b = make_spec(2, 1, 1, 1, 1, true, {8192});
    b.config = llama_config(kVocab, 2048, 16, 8, 8192, 2);
    b.config.sequence_parallel = true;
    b.config.tp_comm_overlap = overlap;
    b.weights = shape_only_weights(b.config);
    runtime::RunReport r;
    run_training(b, {}, &r);
    if (std::getenv("RANKSIM_PRINT_DIFFS"))
      std::printf("overlap %d: compute %s comm %s\n", overlap, r.compute[0].str().c_str(), r.comm[0].str().c_str());
    return r.makespan;
  };
  const sim::Time without = big(false), with = big(true);
  EXPECT_LT(with, without);
  if (std::getenv("RANKSIM_PRINT_DIFFS"))
    std::printf("step %s without, %s with\n", without.str().c_str(), with.str().c_str());
}

// Padding and the pipeline's share: 41 local tokens are 42 rows at tp = 2; the stages send 21.
TEST(OptionsTimeline, SequenceParallelPadsRowsAndStagesSendTheirShare) {
  const i64 row = kHidden * 4;  // f32
  for (bool sp : {false, true}) {
    TrainSpec s = make_spec(2, 1, 1, 1, 1, true);
    s.config.sequence_parallel = sp;
    runtime::RunReport rep;
    run_training(s, {}, &rep);
    std::set<std::string> bytes;  // of every collective but SP's all-reduces of norm gradients
    for (const sim::Span& x : rep.trace.spans())
      if (x.kind == sim::SpanKind::comm && (x.name != AR || !sp)) bytes.insert(arg(x, "bytes"));
    EXPECT_EQ(bytes, std::set<std::string>{std::to_string((sp ? 42 : 41) * row)}) << sp;
    s = make_spec(2, 1, 1, 2, 1, true);
    s.config.sequence_parallel = sp;
    run_training(s, {}, &rep);
    std::set<std::string> p2p;
    for (const sim::Span& x : rep.trace.spans())
      if (x.kind == sim::SpanKind::comm && arg(x, "group").empty()) p2p.insert(arg(x, "bytes"));
    EXPECT_EQ(p2p, std::set<std::string>{std::to_string((sp ? 21 : 41) * row)}) << sp;
  }
}

// Full recomputation reruns the forward's TP collectives in backward, group by group; selective
// (the attention core only) adds none over TP. Without SP, uniform recomputation's backward holds
// the forward's 8 all-reduces once more beside its own 8; block 1 (of 4 blocks) only block 0's 2.
TEST(OptionsTimeline, FullRecomputationRepeatsTheBlocksForwardCollectives) {
  const Seq F{AG, RS, AG, RS}, B{AG, AG, RS, AG, AG, RS};
  struct Case {
    RecomputeMode mode;
    Seq blocks;  // the backward's block part, with SP
    int off;     // TP all-reduces in backward without SP
  };
  const Seq none = repeat(B, 4);
  const std::vector<Case> cases{
      {{Recompute::none, RecomputeMethod::uniform, 1, "none"}, none, 8},
      {kRecomputeModes[0], none, 8},                       // selective
      {kRecomputeModes[1], repeat(F + B, 4), 16},          // uniform 1: block by block
      {kRecomputeModes[2], repeat(F + F + B + B, 2), 16},  // uniform 2: two groups of two
      {kRecomputeModes[3], repeat(B, 3) + F + B, 10},      // block 1: only block 0 recomputed
  };
  for (const Case& c : cases) {
    for (bool sp : {true, false}) {
      TrainSpec s = make_spec(2, 1, 1, 1, 1, true);
      s.config.sequence_parallel = sp;
      s.config.recompute = c.mode.recompute;
      s.config.recompute_method = c.mode.method;
      s.config.recompute_num_layers = c.mode.num_layers;
      runtime::RunReport rep;
      run_training(s, {}, &rep);
      const Timeline t = timeline_of(rep, 0);
      const std::string what = std::string(c.mode.name) + (sp ? " sp" : "");
      EXPECT_EQ(t.groups.size(), 1u) << what;
      if (!sp) {
        EXPECT_EQ(t.forward, repeat({AR}, 8)) << what;
        EXPECT_EQ(t.backward, repeat({AR}, c.off)) << what;
        continue;
      }
      EXPECT_EQ(t.forward, repeat(F, 4) + Seq{AG}) << what;
      const Seq head = Seq{AG} + c.blocks + Seq{AG};
      ASSERT_GT(t.backward.size(), head.size()) << what;
      EXPECT_EQ(Seq(t.backward.begin(), t.backward.begin() + static_cast<std::ptrdiff_t>(head.size())), head) << what;
    }
  }
}

// Selective recomputation reruns the attention core with its CP ring: at cp = 2 each block's
// backward sends its K/V once more (tag 0), as its forward did; the dK/dV ring (tag 1) is unchanged.
TEST(OptionsTimeline, SelectiveRecomputationRerunsTheCpRing) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    TrainSpec s = make_spec(1, 2, 1, 1, 1, true);
    s.config.recompute = r;
    runtime::RunReport rep;
    run_training(s, {}, &rep);
    for (int rank : {0, 1}) {
      const Timeline t = timeline_of(rep, rank);
      Seq fwd_sends, bwd_sends;
      for (const std::string& x : t.fwd_p2p)
        if (x.rfind("send", 0) == 0) fwd_sends.push_back(x);
      for (const std::string& x : t.bwd_p2p)
        if (x.rfind("send", 0) == 0) bwd_sends.push_back(x);
      EXPECT_EQ(fwd_sends, repeat({"send tag=0"}, 4));
      const Seq block =
          r == Recompute::none ? Seq{"send tag=0", "send tag=1"} : Seq{"send tag=0", "send tag=0", "send tag=1"};
      EXPECT_EQ(bwd_sends, repeat(block, 4)) << static_cast<int>(r) << " rank " << rank;
      EXPECT_EQ(t.fwd_p2p.size(), 2 * fwd_sends.size());  // each send with its receive
      // the K/V sends of backward: one per block, plus the forward's again when recomputing
      const auto kv = std::count(bwd_sends.begin(), bwd_sends.end(), "send tag=0");
      EXPECT_EQ(static_cast<std::size_t>(kv), 4 + (r == Recompute::none ? 0 : fwd_sends.size()));
    }
  }
}

// The pipeline's point-to-point traffic per rank, in post order: "send to P tag=T mM" (sends)
// or "recv from P tag=T mM", the micro-batch M told by the bytes (lengths differ).
Seq p2p_of(const runtime::RunReport& rep, int rank, const std::string& verb) {
  std::vector<const sim::Span*> spans;
  for (const sim::Span& s : rep.trace.spans())
    if (s.rank == rank && s.kind == sim::SpanKind::comm && s.name.rfind(verb, 0) == 0) spans.push_back(&s);
  std::stable_sort(spans.begin(), spans.end(),
                   [](const sim::Span* a, const sim::Span* b) { return a->start < b->start; });
  Seq out;
  for (const sim::Span* s : spans) {
    const i64 rows = std::stoll(arg(*s, "bytes")) / (kHidden * 4);
    const auto m = std::find(kLengths.begin(), kLengths.end(), rows) - kLengths.begin();
    out.push_back(s->name + " tag=" + arg(*s, "tag") + " m" + std::to_string(m));
  }
  return out;
}

// Megatron's interleaved 1F1B at pp = 2, v = 2, 4 micro-batches. Rank r holds global chunks r
// (its chunk 0) and r + 2 (chunk 1); activations into global chunk g carry tag 2g, gradients out
// of it back tag 2g + 1. Virtual micro-batch k runs chunk (k mod 4) / 2 (reversed in backward) on
// micro-batch (k / 4) * 2 + k mod 2, after 2 (pp - 1 - r) + (v - 1) pp warm-up forwards: 4 on
// rank 0, 2 on rank 1. Rank 0: F(c0 m0) F(c0 m1) F(c1 m0) F(c1 m1) | F(c0 m2) B(c1 m0) F(c0 m3)
// B(c1 m1) F(c1 m2) B(c0 m0) F(c1 m3) B(c0 m1) | B(c1 m2) B(c1 m3) B(c0 m2) B(c0 m3); rank 1:
// F(c0 m0) F(c0 m1) | F(c1 m0) B(c1 m0) F(c1 m1) B(c1 m1) F(c0 m2) B(c0 m0) F(c0 m3) B(c0 m1)
// F(c1 m2) B(c1 m2) F(c1 m3) B(c1 m3) | B(c0 m2) B(c0 m3). Stage 0's chunk 1 takes its input from
// the last stage (tag 4, from rank 1) -- first for micro-batch 0, before any backward.
TEST(OptionsTimeline, InterleavedScheduleIsMegatrons) {
  TrainSpec s = make_spec(1, 1, 1, 2, 4, true);
  s.virtual_stages = 2;
  runtime::RunReport rep;
  run_training(s, {}, &rep);
  const Seq zero_to_one{"tag=2 m0", "tag=2 m1", "tag=6 m0", "tag=6 m1", "tag=2 m2", "tag=3 m0",
                        "tag=2 m3", "tag=3 m1", "tag=6 m2", "tag=6 m3", "tag=3 m2", "tag=3 m3"};
  const Seq one_to_zero{"tag=4 m0", "tag=4 m1", "tag=5 m0", "tag=5 m1", "tag=4 m2", "tag=1 m0",
                        "tag=4 m3", "tag=1 m1", "tag=5 m2", "tag=5 m3", "tag=1 m2", "tag=1 m3"};
  auto prefixed = [](const std::string& p, const Seq& seq) {
    Seq out;
    for (const std::string& x : seq) out.push_back(p + x);
    return out;
  };
  EXPECT_EQ(p2p_of(rep, 0, "send"), prefixed("send to 1 ", zero_to_one));
  EXPECT_EQ(p2p_of(rep, 1, "recv"), prefixed("recv from 0 ", zero_to_one));
  EXPECT_EQ(p2p_of(rep, 1, "send"), prefixed("send to 0 ", one_to_zero));
  EXPECT_EQ(p2p_of(rep, 0, "recv"), prefixed("recv from 1 ", one_to_zero));
  // each rank: v chunks x m micro-batches x (receive + send) x (forward + backward), less the
  // edge chunk's (the first has no forward receive and no backward send; the last the converse)
  const std::size_t v = 2, m = 4;
  for (int rank : {0, 1}) {
    EXPECT_EQ(p2p_of(rep, rank, "send").size() + p2p_of(rep, rank, "recv").size(), 4 * v * m - 2 * m) << rank;
  }
  // 1F1B without chunks: stage 0 only sends activations and receives their gradients
  s.virtual_stages = 1;
  run_training(s, {}, &rep);
  EXPECT_EQ(p2p_of(rep, 0, "send"), prefixed("send to 1 ", {"tag=2 m0", "tag=2 m1", "tag=2 m2", "tag=2 m3"}));
  EXPECT_EQ(p2p_of(rep, 0, "recv"), prefixed("recv from 1 ", {"tag=1 m0", "tag=1 m1", "tag=1 m2", "tag=1 m3"}));
}

// --- Errors ------------------------------------------------------------------------------------

void expect_error(const TrainSpec& s, const std::string& message) {
  EXPECT_THAT([&] { run_training(s); }, ::testing::ThrowsMessage<Error>(HasSubstr(message)));
}

TEST(OptionsErrors, InterleavedLayoutsThatCannotWork) {
  TrainSpec s = make_spec(1, 1, 1, 1, 2, true);
  s.virtual_stages = 2;
  expect_error(s, "training: virtual_stages (the interleaved schedule) needs pp >= 2");
  s = make_spec(1, 1, 1, 2, 2, true);
  s.config.layers = 6;
  s.weights = shape_only_weights(s.config);
  s.virtual_stages = 2;
  expect_error(s,
               "training: 6 layers cannot be split into pp=2 x 2 virtual stages; use a layer count that is a "
               "multiple of 4");
  // 6 sequences: 3 micro-batches divide the batch, but not into groups of pp
  s = make_spec(1, 1, 1, 2, 3, true, {9, 14, 6, 12, 7, 11});
  s.virtual_stages = 2;
  expect_error(s,
               "training: the interleaved schedule runs micro-batches in groups of pp: micro_batches 3 is not a "
               "multiple of pp=2");
  s.virtual_stages = 0;
  expect_error(s, "training: virtual_stages must be >= 1, got 0");
}

TEST(OptionsErrors, RecomputeNumLayersBelowOne) {
  TrainSpec s = make_spec(1, 1, 1, 1, 1, true);
  s.config.recompute = Recompute::full;
  s.config.recompute_num_layers = 0;
  expect_error(s, "recompute_num_layers must be >= 1, got 0");
  EXPECT_THAT([&] { check_config(s.config); },
              ::testing::ThrowsMessage<Error>(HasSubstr("Transformer: recompute_num_layers must be >= 1, got 0")));
}

TEST(OptionsErrors, TpCommOverlapNeedsSequenceParallelism) {
  TrainSpec s = make_spec(2, 1, 1, 1, 1, true);
  s.config.tp_comm_overlap = true;
  expect_error(s,
               "Transformer: tp_comm_overlap pipelines sequence parallelism's all-gathers and reduce-scatters "
               "with the GEMMs: it needs sequence_parallel");
}

}  // namespace
}  // namespace ranksim::models

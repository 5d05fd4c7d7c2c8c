// Compute-device benchmarks (runtime/device/device.h): one transformer-MLP-shaped chain of ops --
// LayerNorm, fc1, GELU, fc2, and their backward -- on [tokens, h] activations, run on each
// device: cpu (the CPU ops), emulated (the GPU kernels run one item after another on the CPU) and
// gpu (the CUDA device; skipped, saying why, without a GPU). Wall time per step, the step's GEMM
// rate (counter FLOP/s), and what crossed between host and device per step after the first
// (counters up_bytes and down_bytes: the weights stay resident, so only the step's input and the
// loss gradient go up and only what the host reads comes down).
// Arguments: h, ffn, tokens. Default 256 / 1024 / 256; RANKSIM_DEVICE_BENCH_FULL=1 adds
// 1024 / 4096 / 2048 (for a GPU).
//
// BM_Gemm: the CUDA device's own GEMM (Device::gemm, what every matmul op runs) on random operands
// already in device memory, [m, k] x [k, n], timed from the host around `iterations` GEMMs and one
// synchronize: counter FLOP/s (2mnk per GEMM). Shapes are those of GPT-3 and Llama layers (h 4096
// to 12288, 4096 to 16384 tokens); skipped without a GPU.
//
// BM_Op: one op of runtime/tensor/ops.h on the CUDA device at a Llama-7B layer's size (8192 tokens,
// h 4096, ffn 11008, vocab 32000, bf16), inputs already resident, timed around the op and a
// synchronize: counter bytes/s counts the bytes the op must read and write at least, so it
// compares with the GPU's memory bandwidth (an H100 SXM: 3.35 TB/s). Skipped without a GPU.
//
// BM_Attention: cp's block attention (cp/attention.h) forward or backward on the CUDA device, one
// sequence of `tokens`, 32 heads of 128, causal, bf16: counter FLOP/s as flash attention counts
// it (4 s^2 h d forward, halved by the mask; backward 2.5 times that). BM_ClipNorm: AdamW's
// gradient norm (the sum of squares of a [4096, 11008] f32 gradient, on the device) and update,
// with clipping, against the update alone (arg 0).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "app/devices.h"
#include "cp/attention.h"
#include "models/adamw.h"
#include "runtime/device/device.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"

namespace {

using namespace ranksim;
using runtime::Tensor;
using i64 = std::int64_t;

// The device `kind` names, or nullptr after marking the benchmark skipped with the reason (no GPU).
std::shared_ptr<runtime::Device> device_or_skip(benchmark::State& state, const std::string& kind) {
  try {
    return app::make_device(kind);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return nullptr;
  }
}

void BM_MlpChain(benchmark::State& state, const std::string& kind) {
  const i64 h = state.range(0), ffn = state.range(1), tokens = state.range(2);
  std::shared_ptr<runtime::Device> device;
  if (kind != "cpu" && !(device = device_or_skip(state, kind))) return;
  const runtime::ScopedComputeDevice on(device);
  const Tensor ln_w = Tensor::ones({h}), ln_b = Tensor::zeros({h});
  const Tensor w1 = Tensor::uniform({ffn, h}, 1, -0.05, 0.05), w2 = Tensor::uniform({h, ffn}, 2, -0.05, 0.05);
  i64 up0 = 0, down0 = 0, steps = 0;
  for (auto _ : state) {
    const Tensor x = Tensor::uniform({tokens, h}, 3 + static_cast<std::uint64_t>(steps), -1, 1);
    const runtime::LayerNormResult ln = runtime::layer_norm(x, ln_w, ln_b);
    const Tensor a = runtime::matmul(ln.y, w1, false, true);
    const Tensor g = runtime::gelu(a);
    const Tensor y = runtime::matmul(g, w2, false, true);
    const Tensor dy = Tensor::ones({tokens, h});
    const runtime::MatmulGrads g2 = runtime::matmul_backward(dy, g, w2, false, true);
    const Tensor da = runtime::gelu_backward(g2.da, a);
    const runtime::MatmulGrads g1 = runtime::matmul_backward(da, ln.y, w1, false, true);
    const runtime::LayerNormGrads gl = runtime::layer_norm_backward(g1.da, x, ln_w, ln.mean, ln.rstd);
    benchmark::DoNotOptimize(gl.dx.to_vector<float>());  // the host reads the result: waits for it
    if (device && steps == 0) {
      up0 = device->stats().upload_bytes;
      down0 = device->stats().download_bytes;
    }
    ++steps;
  }
  const double flops = 6.0 * 2.0 * double(tokens) * double(h) * double(ffn);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  if (device && steps > 1) {
    state.counters["up_bytes"] = double(device->stats().upload_bytes - up0) / double(steps - 1);
    state.counters["down_bytes"] = double(device->stats().download_bytes - down0) / double(steps - 1);
  }
}

void BM_Gemm(benchmark::State& state, runtime::DType dtype) {
  const i64 m = state.range(0), n = state.range(1), k = state.range(2);
  const std::shared_ptr<runtime::Device> device = device_or_skip(state, "gpu");
  if (!device) return;
  const std::size_t esize = runtime::dtype_size(dtype);
  void* a = device->allocate(static_cast<std::size_t>(m * k) * esize);
  void* b = device->allocate(static_cast<std::size_t>(k * n) * esize);
  void* c = device->allocate(static_cast<std::size_t>(m * n) * esize);
  // Random operands: a GPU multiplies zeros faster than data (less switching power, higher
  // clocks), so zeros would flatter the rate.
  const Tensor ha = Tensor::uniform({m, k}, 11, -1, 1, dtype), hb = Tensor::uniform({k, n}, 12, -1, 1, dtype);
  device->upload(a, ha.raw_data(), static_cast<std::size_t>(m * k) * esize);
  device->upload(b, hb.raw_data(), static_cast<std::size_t>(k * n) * esize);
  const runtime::GemmArgs args{a, b, c, dtype, 1, m, n, k, false, false, m * k, k * n, m * n};
  device->gemm(args);  // warm-up: cuBLAS picks its kernel
  device->synchronize();
  for (auto _ : state) {
    device->gemm(args);
    device->synchronize();
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * double(m) * double(n) * double(k), benchmark::Counter::kIsIterationInvariantRate);
  device->release(a);
  device->release(b);
  device->release(c);
  device->synchronize();
}

void BM_Op(benchmark::State& state, const std::string& op) {
  const std::shared_ptr<runtime::Device> device = device_or_skip(state, "gpu");
  if (!device) return;
  const runtime::ScopedComputeDevice on(device);
  const runtime::DType bf16 = runtime::DType::bf16;
  const i64 tokens = 8192, h = 4096, ffn = 11008, vocab = 32000;
  const Tensor x = Tensor::uniform({tokens, h}, 1, -1, 1, bf16), w = Tensor::ones({h}, bf16),
               b = Tensor::zeros({h}, bf16);
  const Tensor a = Tensor::uniform({tokens, ffn}, 2, -1, 1, bf16);
  const Tensor ids = Tensor::arange(tokens, runtime::DType::i64);  // distinct rows of the vocabulary
  const Tensor logits = Tensor::uniform({tokens, vocab}, 4, -4, 4, bf16);
  const runtime::LayerNormResult ln = runtime::layer_norm(x, w, b);
  std::function<void()> run;
  double bytes = 0;
  const double e2 = 2;  // bytes per bf16
  if (op == "gelu") {
    run = [&] { (void)runtime::gelu(a); };
    bytes = 2 * e2 * double(tokens * ffn);
  } else if (op == "gelu_backward") {
    run = [&] { (void)runtime::gelu_backward(a, a); };
    bytes = 3 * e2 * double(tokens * ffn);
  } else if (op == "layer_norm") {
    run = [&] { (void)runtime::layer_norm(x, w, b); };
    bytes = 2 * e2 * double(tokens * h);
  } else if (op == "layer_norm_backward") {  // dx rows, and the weight and bias column sums
    run = [&] { (void)runtime::layer_norm_backward(x, x, w, ln.mean, ln.rstd); };
    bytes = 3 * e2 * double(tokens * h);
  } else if (op == "bias_grad") {  // add_backward: a column sum over the tokens
    run = [&] { (void)runtime::add_backward(a, {ffn}); };
    bytes = e2 * double(tokens * ffn);
  } else if (op == "softmax") {
    run = [&] { (void)runtime::softmax(logits); };
    bytes = 2 * e2 * double(tokens * vocab);
  } else if (op == "cross_entropy") {
    run = [&] { (void)runtime::cross_entropy(logits, ids); };
    bytes = e2 * double(tokens * vocab);
  } else if (op == "embedding_backward") {
    run = [&] { (void)runtime::embedding_backward(x, ids, vocab); };
    bytes = e2 * double(tokens * h) + e2 * double(vocab * h);
  } else {
    state.SkipWithError(("unknown op " + op).c_str());
    return;
  }
  run();  // uploads the inputs once
  device->synchronize();
  for (auto _ : state) {
    run();
    device->synchronize();
  }
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Attention(benchmark::State& state, bool backward) {
  const std::shared_ptr<runtime::Device> device = device_or_skip(state, "gpu");
  if (!device) return;
  const runtime::ScopedComputeDevice on(device);
  const i64 s = state.range(0), h = 32, d = 128;
  const Tensor q = Tensor::uniform({s, h, d}, 1, -1, 1, runtime::DType::bf16);
  const Tensor k = Tensor::uniform({s, h, d}, 2, -1, 1, runtime::DType::bf16);
  const Tensor v = Tensor::uniform({s, h, d}, 3, -1, 1, runtime::DType::bf16);
  const Tensor dout = Tensor::uniform({s, h, d}, 4, -1, 1, runtime::DType::bf16);
  const cp::TokenInfo t = cp::TokenInfo::sequence(s);
  cp::AttentionOptions o;
  o.causal = true;
  const cp::AttentionResult r = cp::attention_forward(q, k, v, t, t, o);
  device->synchronize();
  for (auto _ : state) {
    if (backward) {
      (void)cp::attention_backward(dout, q, k, v, r.out, r.lse, t, t, o);
    } else {
      (void)cp::attention_forward(q, k, v, t, t, o);
    }
    device->synchronize();
  }
  const double flops = 4.0 * double(s) * double(s) * double(h) * double(d) * 0.5 * (backward ? 2.5 : 1.0);
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ClipNorm(benchmark::State& state) {
  const std::shared_ptr<runtime::Device> device = device_or_skip(state, "gpu");
  if (!device) return;
  const runtime::ScopedComputeDevice on(device);
  const bool clip = state.range(0) != 0;
  runtime::SpawnOptions so;
  so.engine.stack.size = app::kGpuFiberStackBytes;  // CUDA calls from the rank's fiber
  runtime::spawn(
      [&](int rank) {
        tp::Parameter w;
        w.value = Tensor::uniform({4096, 11008}, 1, -1, 1);
        w.grad = Tensor::uniform({4096, 11008}, 2, -1, 1);
        models::AdamW adam(
            {{"w", &w}},
            models::AdamW::Groups{runtime::new_group({rank}), runtime::new_group({rank}), runtime::ProcessGroup{}},
            models::AdamWOptions{}, false);
        (void)adam.step(clip ? std::optional<double>(1.0) : std::nullopt);  // the state goes to the device
        device->synchronize();
        for (auto _ : state) {
          (void)adam.step(clip ? std::optional<double>(1.0) : std::nullopt);
          device->synchronize();
        }
      },
      1, so);
  state.counters["bytes/s"] =
      benchmark::Counter(4.0 * 4096 * 11008 * (clip ? 1 : 0), benchmark::Counter::kIsIterationInvariantRate);
}

void gemm_sizes(benchmark::internal::Benchmark* b) {
  for (const i64 t : {4096, 16384}) {
    b->Args({t, 4096, 4096});    // Llama-7B attention projection
    b->Args({t, 11008, 4096});   // Llama-7B MLP up
    b->Args({t, 12288, 12288});  // GPT-3 175B: a dense h x h
    b->Args({t, 49152, 12288});  // GPT-3 175B MLP up
  }
  b->Args({8192, 8192, 8192});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Args({256, 1024, 256});
  if (std::getenv("RANKSIM_DEVICE_BENCH_FULL")) b->Args({1024, 4096, 2048});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_MlpChain, cpu, std::string("cpu"))->Apply(sizes);
BENCHMARK_CAPTURE(BM_MlpChain, emulated, std::string("emulated"))->Apply(sizes)->Iterations(3);
BENCHMARK_CAPTURE(BM_MlpChain, gpu, std::string("gpu"))->Apply(sizes);
BENCHMARK_CAPTURE(BM_Gemm, bf16, runtime::DType::bf16)->Apply(gemm_sizes);
BENCHMARK_CAPTURE(BM_Gemm, f32, runtime::DType::f32)->Apply(gemm_sizes);
#define RANKSIM_BM_OP(op) BENCHMARK_CAPTURE(BM_Op, op, std::string(#op))->Unit(benchmark::kMillisecond)->UseRealTime()
RANKSIM_BM_OP(gelu);
RANKSIM_BM_OP(gelu_backward);
RANKSIM_BM_OP(layer_norm);
RANKSIM_BM_OP(layer_norm_backward);
RANKSIM_BM_OP(bias_grad);
RANKSIM_BM_OP(softmax);
RANKSIM_BM_OP(cross_entropy);
RANKSIM_BM_OP(embedding_backward);
BENCHMARK_CAPTURE(BM_Attention, forward, false)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, backward, true)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ClipNorm)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();

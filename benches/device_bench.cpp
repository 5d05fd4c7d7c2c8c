// Compute-device benchmarks (runtime/device/device.h): one transformer-MLP-shaped chain of ops --
// LayerNorm, fc1, GELU, fc2, and their backward -- on [tokens, h] activations, run on each
// device: cpu (the CPU ops), emulated (the GPU kernels run one item after another on the CPU) and
// gpu (the CUDA device; skipped, saying why, without a GPU). Wall time per step, the step's GEMM
// rate (counter FLOP/s), and what crossed between host and device per step after the first
// (counters up_bytes and down_bytes: the weights stay resident, so only the step's input and the
// loss gradient go up and only what the host reads comes down).
// Arguments: h, ffn, tokens. Default 256 / 1024 / 256; RANKSIM_DEVICE_BENCH_FULL=1 adds
// 1024 / 4096 / 2048 (for a GPU).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "app/devices.h"
#include "runtime/device/device.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"

namespace {

using namespace ranksim;
using runtime::Tensor;
using i64 = std::int64_t;

void BM_MlpChain(benchmark::State& state, const std::string& kind) {
  const i64 h = state.range(0), ffn = state.range(1), tokens = state.range(2);
  std::shared_ptr<runtime::Device> device;
  try {
    device = app::make_device(kind);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
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

void sizes(benchmark::internal::Benchmark* b) {
  b->Args({256, 1024, 256});
  if (std::getenv("RANKSIM_DEVICE_BENCH_FULL")) b->Args({1024, 4096, 2048});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(BM_MlpChain, cpu, std::string("cpu"))->Apply(sizes);
BENCHMARK_CAPTURE(BM_MlpChain, emulated, std::string("emulated"))->Apply(sizes)->Iterations(3);
BENCHMARK_CAPTURE(BM_MlpChain, gpu, std::string("gpu"))->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();

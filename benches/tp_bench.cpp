// Tensor-parallel MLP benchmarks (issue #4):
// - BM_TpMlp/h/ffn/tokens/tp: ParallelMLP (tp/mlp.h) forward + backward on tp ranks, real fp32
//   data (no sequence parallelism): wall time on this machine (one thread runs every rank's
//   kernels and the collectives' data movement) of the second of two steps, and the rate of its
//   GEMMs over that wall time (counter FLOP/s; 12 * tokens * h * ffn flops in all: three GEMMs
//   per linear, two linears). Every op allocates its output, so the first step also pays for the
//   kernel faulting in fresh pages; how much the second still pays depends on what malloc keeps:
//   run with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 to keep every freed block
//   mapped, as a caching allocator would (docs/tp.md gives both).
// - BM_LayerGemms/impl/h/ffn/tokens/tp: the six GEMMs one rank runs (fc1 and fc2 forward, input
//   gradient and weight gradient, on its [ffn/p] shard) as runtime::matmul calls (impl 0, the
//   layers' fixed-order kernel, allocating its outputs) and as plain Eigen products of the same
//   shapes and layouts into preallocated outputs (impl 1, Eigen's own kernel, same build):
//   counter FLOP/s.
// The default size is h = 1024, ffn = 4096, 512 tokens, tp = 8; RANKSIM_TP_BENCH_FULL=1 adds
// issue #4's size, h = 4096, ffn = 16384, 2048 tokens, tp = 8 (1.65 TFLOP per MLP step: about
// a minute for the whole program on one AVX-512 core).
//
// `tp_bench --digest` prints a hash of the bits of matmul, matmul_backward, the elementwise ops
// and a tp = 2 MLP step (f32, bf16, f64) on fixed inputs instead of benchmarking: two builds
// (say with and without RANKSIM_NATIVE) that print the same lines compute the same bits.
//
// Eigen's AVX-512 GEMM (a RANKSIM_NATIVE build on an AVX-512 host) trips GCC 12's
// -Wmaybe-uninitialized inside avx512fintrin.h's own _mm512_undefined_ps (GCC bug 105593, fixed
// in GCC 13); the warning is located in that header, so it is turned off before any include.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "tp/mlp.h"
#include "tp/parallel_state.h"

namespace {

using namespace ranksim;
using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

struct Size {
  i64 h, ffn, tokens;
  int tp;
};

double mlp_flops(const Size& s) { return 12.0 * double(s.tokens) * double(s.h) * double(s.ffn); }

Size size_of(const benchmark::State& state) {
  return {state.range(0), state.range(1), state.range(2), static_cast<int>(state.range(3))};
}

// One forward + backward of the MLP on s.tp ranks, after an untimed warm-up step (the first
// step also pays for faulting in the memory the allocator then keeps; see docs/tp.md). Returns
// the wall seconds of the second step, from the moment every rank has finished the first to the
// moment the last rank finishes its backward.
double mlp_step(const Size& s, const Tensor& w1, const Tensor& w2, const Tensor& x, const Tensor& dy) {
  Clock::time_point start{}, end{};
  bool started = false;
  runtime::SpawnOptions so;
  so.engine.trace = false;
  runtime::spawn(
      [&](int) {
        tp::ParallelState ps = tp::initialize_model_parallel(s.tp);
        tp::ParallelMLP mlp(w1, w2, ps.tp().group);
        for (int step = 0; step < 2; ++step) {
          runtime::barrier();
          if (step == 1 && !started) {
            started = true;
            start = Clock::now();
          }
          tp::MLPContext ctx;
          const Tensor y = mlp.forward(x, ctx);
          const Tensor dx = mlp.backward(dy, ctx);
          benchmark::DoNotOptimize(dx.raw_data());
        }
        end = Clock::now();
      },
      s.tp, so);
  return std::chrono::duration<double>(end - start).count();
}

void BM_TpMlp(benchmark::State& state) {
  const Size s = size_of(state);
  const Tensor w1 = tp::master_normal({s.ffn, s.h}, 1), w2 = tp::master_normal({s.h, s.ffn}, 2);
  const Tensor x = Tensor::randn({s.tokens, 1, s.h}, 3), dy = Tensor::randn({s.tokens, 1, s.h}, 4);
  double total = 0;
  for (auto _ : state) {
    const double wall = mlp_step(s, w1, w2, x, dy);
    state.SetIterationTime(wall);
    total += wall;
  }
  state.counters["FLOP"] = mlp_flops(s);
  state.counters["FLOP/s"] = mlp_flops(s) * double(state.iterations()) / total;
}

// The six GEMMs of one rank, f = ffn / tp: fc1 forward Z[T,f] = X[T,h] W1[f,h]^T, its input
// gradient dX[T,h] = dZ[T,f] W1[f,h], its weight gradient dW1[f,h] = dZ^T X; fc2 forward
// Y[T,h] = H[T,f] W2[h,f]^T, dH[T,f] = dY[T,h] W2, dW2[h,f] = dY^T H.
struct RankOperands {
  Tensor x, w1, dz, h, w2, dy;
  explicit RankOperands(const Size& s) {
    const i64 f = s.ffn / s.tp;
    x = Tensor::randn({s.tokens, s.h}, 11);
    w1 = Tensor::randn({f, s.h}, 12, 0.0, 0.02);
    dz = Tensor::randn({s.tokens, f}, 13);
    h = Tensor::randn({s.tokens, f}, 14);
    w2 = Tensor::randn({s.h, f}, 15, 0.0, 0.02);
    dy = Tensor::randn({s.tokens, s.h}, 16);
  }
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMajor>;

CMap emap(const Tensor& t) { return CMap(t.data<float>(), t.size(0), t.size(1)); }

void BM_LayerGemms(benchmark::State& state) {
  const bool eigen = state.range(0) == 1;
  const Size s{state.range(1), state.range(2), state.range(3), static_cast<int>(state.range(4))};
  state.SetLabel(eigen ? "eigen" : "runtime::matmul");
  const RankOperands o(s);
  const i64 f = s.ffn / s.tp;
  RowMajor z(s.tokens, f), dx(s.tokens, s.h), dw1(f, s.h), y(s.tokens, s.h), dh(s.tokens, f), dw2(s.h, f);
  for (auto _ : state) {
    if (eigen) {
      z.noalias() = emap(o.x) * emap(o.w1).transpose();
      dx.noalias() = emap(o.dz) * emap(o.w1);
      dw1.noalias() = emap(o.dz).transpose() * emap(o.x);
      y.noalias() = emap(o.h) * emap(o.w2).transpose();
      dh.noalias() = emap(o.dy) * emap(o.w2);
      dw2.noalias() = emap(o.dy).transpose() * emap(o.h);
      benchmark::DoNotOptimize(dw2.data());
    } else {
      benchmark::DoNotOptimize(runtime::matmul(o.x, o.w1, false, true).raw_data());
      benchmark::DoNotOptimize(runtime::matmul(o.dz, o.w1).raw_data());
      benchmark::DoNotOptimize(runtime::matmul(o.dz, o.x, true, false).raw_data());
      benchmark::DoNotOptimize(runtime::matmul(o.h, o.w2, false, true).raw_data());
      benchmark::DoNotOptimize(runtime::matmul(o.dy, o.w2).raw_data());
      benchmark::DoNotOptimize(runtime::matmul(o.dy, o.h, true, false).raw_data());
    }
  }
  state.counters["FLOP/s"] = benchmark::Counter(12.0 * double(s.tokens) * double(s.h) * double(f),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// --- --digest --------------------------------------------------------------------------------

std::uint64_t fnv1a(const Tensor& t, std::uint64_t hash = 14695981039346656037ull) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  for (std::size_t i = 0; i < c.nbytes(); ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

void print_digest(const char* what, DType dtype, std::uint64_t hash) {
  std::printf("%-28s %-5s %016llx\n", what, runtime::dtype_name(dtype), static_cast<unsigned long long>(hash));
}

void digest() {
  // Odd sizes, so every kernel's edge paths run as well as its main loop.
  const i64 M = 67, K = 131, N = 45, L = 3;
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor a = Tensor::randn({L, M, K}, 1).to(dtype), b = Tensor::randn({K, N}, 2).to(dtype);
    const Tensor at = Tensor::randn({L, K, M}, 3).to(dtype), bt = Tensor::randn({N, K}, 4).to(dtype);
    const Tensor bb = Tensor::randn({L, K, N}, 5).to(dtype);
    std::uint64_t h = fnv1a(runtime::matmul(a, b));
    h = fnv1a(runtime::matmul(at, b, true, false), h);
    h = fnv1a(runtime::matmul(a, bt, false, true), h);
    h = fnv1a(runtime::matmul(at, bt, true, true), h);
    h = fnv1a(runtime::matmul(a, bb), h);
    print_digest("matmul", dtype, h);
    const Tensor dc = Tensor::randn({L, M, N}, 6).to(dtype);
    h = 14695981039346656037ull;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const runtime::MatmulGrads g = runtime::matmul_backward(dc, ta ? at : a, tb ? bt : b, ta, tb);
        h = fnv1a(g.db, fnv1a(g.da, h));
      }
    const runtime::MatmulGrads g = runtime::matmul_backward(dc, a, bb);
    print_digest("matmul_backward", dtype, fnv1a(g.db, fnv1a(g.da, h)));
    const Tensor x = Tensor::randn({M, K}, 7).to(dtype), dx = Tensor::randn({M, K}, 8).to(dtype);
    const Tensor w = Tensor::randn({K}, 9).to(dtype), bias = Tensor::randn({K}, 10).to(dtype);
    const runtime::LayerNormResult ln = runtime::layer_norm(x, w, bias);
    const runtime::LayerNormGrads lg = runtime::layer_norm_backward(dx, x, w, ln.mean, ln.rstd);
    h = fnv1a(runtime::add(x, bias));
    h = fnv1a(runtime::gelu(x), h);
    h = fnv1a(runtime::gelu_backward(dx, x), h);
    h = fnv1a(runtime::softmax(x), h);
    h = fnv1a(runtime::softmax_backward(dx, runtime::softmax(x)), h);
    h = fnv1a(ln.y, h);
    h = fnv1a(lg.dbias, fnv1a(lg.dweight, fnv1a(lg.dx, h)));
    print_digest("add gelu softmax layer_norm", dtype, h);
  }
  for (DType dtype : {DType::f32, DType::bf16}) {
    const i64 hid = 48, ffn = 192, T = 37;
    const Tensor w1 = tp::master_normal({ffn, hid}, 21, 0.2), w2 = tp::master_normal({hid, ffn}, 22, 0.1);
    const Tensor x = Tensor::randn({T, 1, hid}, 23).to(dtype), dy = Tensor::randn({T, 1, hid}, 24).to(dtype);
    std::uint64_t h = 14695981039346656037ull;
    runtime::spawn(
        [&](int rank) {
          tp::ParallelState ps = tp::initialize_model_parallel(2);
          tp::ParallelMLPOptions o;
          o.dtype = dtype;
          tp::ParallelMLP mlp(w1, w2, ps.tp().group, o);
          tp::MLPContext ctx;
          const Tensor y = mlp.forward(x, ctx);
          const Tensor dx = mlp.backward(dy, ctx);
          std::vector<Tensor> out = {y, dx};
          for (auto& [name, p] : mlp.named_parameters()) out.push_back(p->full_grad(ps.tp().group));
          if (rank == 0)
            for (const Tensor& t : out) h = fnv1a(t, h);
        },
        2);
    print_digest("tp=2 MLP forward+backward", dtype, h);
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--digest") == 0) {
      digest();
      return 0;
    }
  }
  std::vector<Size> sizes = {{1024, 4096, 512, 8}};
  const char* full = std::getenv("RANKSIM_TP_BENCH_FULL");
  if (full && std::string(full) == "1") sizes.push_back({4096, 16384, 2048, 8});
  for (const Size& s : sizes) {
    const bool big = s.h * s.ffn * s.tokens > (i64{1} << 32);
    benchmark::RegisterBenchmark("BM_TpMlp", BM_TpMlp)
        ->ArgNames({"h", "ffn", "tokens", "tp"})
        ->Args({s.h, s.ffn, s.tokens, s.tp})
        ->UseManualTime()
        ->Unit(benchmark::kSecond)
        ->Iterations(big ? 1 : 3);
  }
  for (const Size& s : sizes) {
    for (i64 impl : {0, 1}) {
      benchmark::RegisterBenchmark("BM_LayerGemms", BM_LayerGemms)
          ->ArgNames({"impl", "h", "ffn", "tokens", "tp"})
          ->Args({impl, s.h, s.ffn, s.tokens, s.tp})
          ->Unit(benchmark::kMillisecond)
          ->MinTime(1.0);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

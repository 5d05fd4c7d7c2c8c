#include "app/bench_ops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <ostream>
#include <sstream>

#include "app/devices.h"
#include "cp/attention.h"
#include "runtime/device/device.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "sim/io.h"
#include "sim/kernel_profile.h"
#include "sim/topology.h"

namespace ranksim::app {

namespace {

using runtime::DType;
using runtime::Tensor;

void check_grid(const char* flag, const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] <= 0) throw Error(std::string(flag) + ": every value must be positive, got " + std::to_string(v[i]));
    if (i > 0 && v[i] <= v[i - 1])
      throw Error(std::string(flag) + ": values must be ascending, got " + std::to_string(v[i]) + " after " +
                  std::to_string(v[i - 1]));
  }
}

// Mean seconds of one run of fn: one warm-up, then reps runs between device synchronisations.
double time_runs(runtime::Device& dev, int reps, const std::function<void()>& fn) {
  fn();
  dev.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  dev.synchronize();
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / reps;
}

// Device memory freed at scope exit: the first `bytes` of host, uploaded, or zeros.
struct Buffer {
  runtime::Device& dev;
  void* p;
  Buffer(runtime::Device& d, size_t bytes, const void* host = nullptr) : dev(d), p(d.allocate(bytes)) {
    if (host != nullptr) {
      d.upload(p, host, bytes);
    } else {
      d.zero(p, bytes);
    }
  }
  ~Buffer() { dev.release(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// The tokens of `batch` sequences of length seq, packed (THD).
cp::TokenInfo packed(int64_t batch, int64_t seq) {
  cp::TokenInfo t;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i) {
      t.position.push_back(i);
      t.segment.push_back(b);
    }
  return t;
}

}  // namespace

int bench_ops(const BenchOpsOptions& o, std::ostream& out) {
  if (o.output.empty()) throw Error("bench ops: name the profile to write with -o FILE.yaml");
  const bool gpu = o.device == "gpu";
  if (!gpu && o.device != "emulated")
    throw Error("bench ops: --device must be gpu or emulated, got '" + o.device + "'");
  const sim::Topology topo = sim::Topology::load_file(o.topology, o.sets);
  const sim::DeviceKind& kind = topo.kind_of(0);

  const std::vector<int64_t> def_gemm =
      gpu ? std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192} : std::vector<int64_t>{16, 32, 64};
  const std::vector<int64_t> m = o.m.empty() ? def_gemm : o.m, n = o.n.empty() ? def_gemm : o.n,
                             k = o.k.empty() ? def_gemm : o.k;
  const std::vector<int64_t> seq =
      o.seq.empty() ? (gpu ? std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384} : std::vector<int64_t>{16, 32})
                    : o.seq;
  const std::vector<int64_t> head_dims =
      o.head_dims.empty() ? (gpu ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{8}) : o.head_dims;
  check_grid("--m", m);
  check_grid("--n", n);
  check_grid("--k", k);
  check_grid("--seq", seq);
  check_grid("--head-dims", head_dims);
  const int reps = o.reps > 0 ? o.reps : (gpu ? 10 : 1);

  std::shared_ptr<runtime::Device> dev = make_device(o.device);  // Error when there is no GPU
  const runtime::ScopedComputeDevice installed(dev);

  sim::KernelProfile p;
  p.name = o.name.empty() ? dev->name() + "-bf16" : o.name;
  p.sms = o.sms > 0 ? o.sms : std::max(dev->multiprocessors(), 1);
  // Not measured: the tiles the wave-quantisation model chooses among (docs/compute.md).
  p.tiles = {{256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 0.9}, {128, 64, 0.75}, {64, 128, 0.75}, {64, 64, 0.55}};

  char line[200];
  out << "bench ops on " << dev->name() << " (" << p.sms << " SMs), bf16, mean of " << reps
      << " runs after a warm-up\n\ngemm:\n";
  std::snprintf(line, sizeof line, "%8s %8s %8s %12s %10s\n", "m", "n", "k", "time(us)", "TFLOP/s");
  out << line;
  // The operands are random normal values, as a training step's are: a GPU multiplies zeros
  // faster (on the H100 of docs/data/h100-2026-11-27, 8192^3 bf16: 903 TFLOP/s on zeros, 731 on
  // random operands). One draw each, as large as the grid's largest operand; a GEMM uses its prefix.
  const Tensor rand_a = Tensor::randn({m.back() * k.back()}, 1, 0.0, 1.0, DType::bf16);
  const Tensor rand_b = Tensor::randn({k.back() * n.back()}, 2, 0.0, 1.0, DType::bf16);
  sim::KernelProfile::GemmGrid g;
  for (int64_t v : m) g.m.push_back(static_cast<double>(v));
  for (int64_t v : n) g.n.push_back(static_cast<double>(v));
  for (int64_t v : k) g.k.push_back(static_cast<double>(v));
  for (int64_t mi : m)
    for (int64_t ni : n)
      for (int64_t ki : k) {
        const size_t el = runtime::dtype_size(DType::bf16);
        Buffer a(*dev, static_cast<size_t>(mi * ki) * el, rand_a.raw_data()),
            b(*dev, static_cast<size_t>(ki * ni) * el, rand_b.raw_data()), c(*dev, static_cast<size_t>(mi * ni) * el);
        const runtime::GemmArgs args{a.p, b.p, c.p, DType::bf16, 1, mi, ni, ki, false, false, 0, 0, 0};
        const double s = time_runs(*dev, reps, [&] { dev->gemm(args); });
        const double flops = 2.0 * static_cast<double>(mi) * static_cast<double>(ni) * static_cast<double>(ki);
        g.flops.push_back(flops / s);
        std::snprintf(line, sizeof line, "%8lld %8lld %8lld %12.2f %10.2f\n", static_cast<long long>(mi),
                      static_cast<long long>(ni), static_cast<long long>(ki), s * 1e6, flops / s / 1e12);
        out << line;
      }
  p.gemm["bf16"] = std::move(g);

  // Attention as the flash-attention benchmarks run it: 16k tokens (at least one sequence) in
  // 2048 / head_dim heads on a GPU; one sequence of 2 heads emulated.
  out << "\nattention:\n";
  std::snprintf(line, sizeof line, "%9s %7s %9s %9s %12s %10s\n", "pass", "causal", "head_dim", "seq", "time(us)",
                "TFLOP/s");
  out << line;
  std::vector<sim::KernelProfile::AttentionCurve> curves;
  for (const bool backward : {false, true})
    for (const bool causal : {false, true})
      for (int64_t d : head_dims) {
        sim::KernelProfile::AttentionCurve cv;
        cv.backward = backward;
        cv.causal = causal;
        cv.head_dim = d;
        for (int64_t s : seq) {
          const int64_t batch = gpu ? std::max<int64_t>(16384 / s, 1) : 1;
          const int64_t heads = gpu ? std::max<int64_t>(2048 / d, 1) : 2;
          const cp::TokenInfo tokens = packed(batch, s);
          cp::AttentionOptions opts;
          opts.causal = causal;
          const Tensor q = Tensor::randn({batch * s, heads, d}, 3, 0.0, 1.0, DType::bf16);
          const Tensor kv = Tensor::randn({batch * s, heads, d}, 4, 0.0, 1.0, DType::bf16);
          const double pairs = static_cast<double>(cp::attention_visible_pairs(tokens, tokens, opts));
          double seconds = 0, flops = 4.0 * pairs * static_cast<double>(heads * d);
          if (!backward) {
            seconds = time_runs(*dev, reps, [&] { (void)cp::attention_forward(q, kv, kv, tokens, tokens, opts); });
          } else {
            const cp::AttentionResult fwd = cp::attention_forward(q, kv, kv, tokens, tokens, opts);
            seconds = time_runs(*dev, reps, [&] {
              (void)cp::attention_backward(fwd.out, q, kv, kv, fwd.out, fwd.lse, tokens, tokens, opts);
            });
            flops *= 2.5;
          }
          cv.seq.push_back(static_cast<double>(s));
          cv.flops.push_back(flops / seconds);
          std::snprintf(line, sizeof line, "%9s %7s %9lld %9lld %12.2f %10.2f\n", backward ? "backward" : "forward",
                        causal ? "yes" : "no", static_cast<long long>(d), static_cast<long long>(s), seconds * 1e6,
                        flops / seconds / 1e12);
          out << line;
        }
        curves.push_back(std::move(cv));
      }
  p.attention["bf16"] = std::move(curves);

  // A memory-bound kernel: c = a + b over bf16 vectors (reads 2, writes 1 element each).
  const int64_t elems = gpu ? int64_t{64} << 20 : int64_t{1} << 16;
  const Tensor x = Tensor::full({elems}, 1.0, DType::bf16), y = Tensor::full({elems}, 2.0, DType::bf16);
  const double add_s = time_runs(*dev, reps, [&] { (void)runtime::add(x, y); });
  const double bw = 3.0 * static_cast<double>(elems) * static_cast<double>(runtime::dtype_size(DType::bf16)) / add_s;
  p.memory_efficiency = std::clamp(bw / kind.memory_bandwidth, 1e-6, 1.0);
  std::snprintf(line, sizeof line, "\nmemory-bound (add, %lld bf16 elements): %.1f GB/s, %.1f%% of %s's %.1f GB/s\n",
                static_cast<long long>(elems), bw / 1e9, 100 * bw / kind.memory_bandwidth, kind.name.c_str(),
                kind.memory_bandwidth / 1e9);
  out << line;

  std::ostringstream header;
  header << "Kernel profile measured by `ranksim bench ops --device " << o.device << "` on " << dev->name() << ".\n"
         << "GEMMs: " << (gpu ? "cuBLAS" : "the emulated device's")
         << " bf16 GEMM; attention: ranksim's own kernels (cp/);\n"
         << "memory-bound: the add "
         << "kernel, as a fraction of " << kind.name << "'s memory bandwidth in " << o.topology << ".\n"
         << "Tiles are not measured (docs/compute.md).";
  const std::string yaml = sim::kernel_profile_yaml(p, header.str());
  (void)sim::parse_kernel_profile(yaml, o.output);  // what is written must read back
  sim::write_file_atomically(o.output, [&](std::ostream& f) { f << yaml; });
  out << "wrote " << o.output << "\n";
  return 0;
}

}  // namespace ranksim::app

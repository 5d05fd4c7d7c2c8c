// The GPU backend as a run uses it (label `gpu`): the stack that CUDA, cuBLAS and NCCL need inside
// a rank's fiber, the one rule for a process's GPU, the memory pool, every NCCL operation and
// reduce op against closed forms, an aborted communicator, indices past 2^31, AdamW and the
// gradient norm, and shipped multi-rank scenarios with `--device gpu` against the CPU.
// Tests that need a device (or two) skip themselves, saying why; the rest run everywhere.
#include <cuda_runtime.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/devices.h"
#include "gpu/gpu_testing.h"
#include "models/adamw.h"
#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/device.h"
#include "runtime/distributed/backends/nccl/device_buffer.h"
#include "runtime/distributed/backends/nccl/nccl_comm.h"
#include "runtime/distributed/spawn.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/safetensors.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"
#include "sim/fiber.h"

namespace ranksim::runtime::gpu {
namespace {

using ::testing::HasSubstr;

// Sets an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    had_ = std::getenv(name) != nullptr;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// --- the process's GPU ------------------------------------------------------------------------

TEST(GpuProcessDevice, OneRuleWithAnOverride) {
  const int n = device_info().count;
  if (n == 0) {
    EXPECT_THAT([] { (void)process_device(0); }, ::testing::ThrowsMessage<Error>(HasSubstr("no CUDA device")));
    return;
  }
  EXPECT_EQ(process_device(-1), 0);
  EXPECT_EQ(process_device(n + 1), 1 % n);
  {
    const ScopedEnv e("RANKSIM_GPU", std::to_string(n - 1).c_str());
    EXPECT_EQ(process_device(0), n - 1);
  }
  {
    const ScopedEnv e("RANKSIM_GPU", std::to_string(n).c_str());
    EXPECT_THAT([] { (void)process_device(0); },
                ::testing::ThrowsMessage<Error>(HasSubstr("not a visible CUDA device")));
  }
}

TEST(GpuProcessDevice, TheLauncherLocalRankIsReadAndChecked) {
  const ScopedEnv a("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  EXPECT_EQ(launcher_local_rank(), 3);
  const ScopedEnv b("OMPI_COMM_WORLD_LOCAL_RANK", "x");
  EXPECT_THAT([] { (void)launcher_local_rank(); }, ::testing::ThrowsMessage<Error>(HasSubstr("is not a local rank")));
}

// --- stacks -----------------------------------------------------------------------------------

// What the first CUDA, cuBLAS and NCCL calls need inside a fiber, against the stack a GPU run
// gives each rank (app::kGpuFiberStackBytes): half of it at most, so there is room for the
// program's own frames.
TEST(GpuStacks, FirstCallsOfCudaCublasAndNcclFitAGpuRanksStack) {
  REQUIRE_DEVICES(1);
  sim::StackOptions o;
  o.size = app::kGpuFiberStackBytes;
  o.guard_page = true;
  o.measure = true;
  sim::StackPool pool(o);
  std::string error;
  {
    sim::Fiber f(pool, [&] {
      try {
        const std::shared_ptr<Device> dev = make_cuda_device(0, every_kernel());
        const ScopedComputeDevice on(dev);
        for (DType t : {DType::bf16, DType::f32}) {  // cuBLAS picks a kernel per shape and type
          const Tensor a = Tensor::uniform({1024, 768}, 1, -1, 1, t), b = Tensor::uniform({768, 512}, 2, -1, 1, t);
          (void)matmul(a, b).to_vector<float>();
        }
        std::vector<NcclComm> comms = NcclComm::init_all({0});  // NCCL's topology search
        DeviceBuffer buf = DeviceBuffer::upload(Tensor::full({4096}, 1.0), comms[0].stream());
        comms[0].all_reduce(buf, ReduceOp::SUM);
        comms[0].synchronize(60);
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    f.resume();
  }
  ASSERT_EQ(error, "");
  std::cout << "deepest stack of the first CUDA, cuBLAS and NCCL calls: " << pool.high_water() << " bytes\n";
  RecordProperty("stack_bytes", static_cast<int>(pool.high_water()));
  EXPECT_GT(pool.high_water(), 0u);
  EXPECT_LT(pool.high_water(), app::kGpuFiberStackBytes / 2);
}

// --- devices and memory -----------------------------------------------------------------------

// Every entry point runs on the device's own GPU, whatever is current, and leaves the caller's
// device current.
TEST(GpuDevices, EntryPointsRunOnTheirOwnGpuAndRestoreTheCallers) {
  REQUIRE_DEVICES(2);
  const std::shared_ptr<Device> dev1 = make_cuda_device(1, every_kernel());
  set_device(0);
  const Tensor x = Tensor::uniform({64, 32}, 3, -1, 1), w = Tensor::uniform({32, 16}, 4, -1, 1);
  const std::vector<float> want = gelu(matmul(x, w)).to_vector<float>();
  std::vector<float> got;
  {
    const ScopedComputeDevice on(dev1);
    const Tensor y = gelu(matmul(x, w));
    EXPECT_EQ(current_device(), 0);
    got = y.to_vector<float>();
  }
  EXPECT_EQ(current_device(), 0);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i])));
  std::vector<NcclComm> comms = NcclComm::init_all({1, 0});
  EXPECT_EQ(current_device(), 0) << "init_all leaves the caller's device current";
}

// The stream-ordered pool keeps freed memory across synchronisations (release threshold), so
// allocations after a download come from the pool.
TEST(GpuMemory, ThePoolKeepsFreedMemoryAcrossSynchronisations) {
  REQUIRE_DEVICES(1);
  const std::shared_ptr<Device> dev = make_cuda_device(0, every_kernel());
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  void* p = dev->allocate(kBytes);
  dev->release(p);
  dev->synchronize();
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  std::uint64_t reserved = 0;
  ASSERT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved), cudaSuccess);
  EXPECT_GE(reserved, kBytes) << "the pool gave the freed block back to the driver at the synchronisation";
}

// Elementwise kernels index with 64 bits: a tensor of more than 2^31 elements is computed to its
// last element (an int32 index would wrap and write elsewhere).
TEST(GpuOps, IndicesPastTwoToThe31) {
  REQUIRE_DEVICES(1);
  const std::int64_t n = (std::int64_t{1} << 31) + 4099;  // 4 GiB of bf16
  Tensor x = Tensor::full({n}, 0.5, DType::bf16);
  const Tensor y = Tensor::full({n}, 1.0, DType::bf16);
  const std::vector<std::int64_t> probes = {0, (std::int64_t{1} << 31) - 1, std::int64_t{1} << 31, n - 1};
  for (std::size_t k = 0; k < probes.size(); ++k) x.set({probes[k]}, static_cast<double>(k + 2));
  const std::shared_ptr<Device> dev = make_cuda_device(0, every_kernel());
  Tensor z;
  {
    const ScopedComputeDevice on(dev);
    z = add(x, y);
  }
  ASSERT_TRUE(z.host_stale());
  const auto at = [&](std::int64_t i) { return z.narrow(0, i, 1).item(); };
  for (std::size_t k = 0; k < probes.size(); ++k) EXPECT_EQ(at(probes[k]), static_cast<double>(k + 3)) << probes[k];
  EXPECT_EQ(at(n - 2), 1.5);
  EXPECT_EQ(at((std::int64_t{1} << 31) + 1), 1.5);
}

// cuBLAS takes int sizes: a GEMM with a size past 2^31 - 1 is refused, naming it, before any
// memory is touched (strides are 64-bit and need no check).
TEST(GpuOps, AGemmPastCublasIntLimitsIsRefused) {
  REQUIRE_DEVICES(1);
  const std::shared_ptr<Device> dev = make_cuda_device(0, every_kernel());
  const std::int64_t big = std::int64_t{1} << 31;
  GemmArgs g{nullptr, nullptr, nullptr, DType::bf16, 1, big, 8, 8, false, false, big * 8, 64, big * 8};
  EXPECT_THAT([&] { dev->gemm(g); }, ::testing::ThrowsMessage<Error>(HasSubstr("cuBLAS's int limit")));
  g.m = 8;
  g.batch = big;
  EXPECT_THAT([&] { dev->gemm(g); }, ::testing::ThrowsMessage<Error>(HasSubstr("cuBLAS's int limit")));
}

// NaN and infinities go through the GPU's kernels and cuBLAS as through the CPU ops: the same
// elements come out NaN or infinite, the others agree to f32 rounding.
TEST(GpuOps, NanAndInfinityComeOutWhereTheCpuPutsThem) {
  REQUIRE_DEVICES(1);
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::uniform({8, 64}, 7, -1, 1), w = Tensor::uniform({64, 32}, 8, -1, 1);
  x.set({1, 3}, std::nan(""));
  x.set({2, 5}, inf);
  x.set({3, 7}, -inf);
  const Tensor ln_w = Tensor::ones({64}), ln_b = Tensor::zeros({64});
  const auto ops = [&] {
    return std::vector<Tensor>{
        gelu(x),      softmax(x),   layer_norm(x, ln_w, ln_b).y, rms_norm(x, ln_w).y, swiglu(x), add(x, x),
        matmul(x, w), scale(x, 2.0)};
  };
  const std::vector<Tensor> cpu = ops();
  const std::shared_ptr<Device> dev = make_cuda_device(0, every_kernel());
  std::vector<Tensor> gpu;
  {
    const ScopedComputeDevice on(dev);
    gpu = ops();
  }
  int nonfinite = 0;
  for (std::size_t k = 0; k < cpu.size(); ++k) {
    const std::vector<double> c = cpu[k].to_vector<double>(), g = gpu[k].to_vector<double>();
    ASSERT_EQ(c.size(), g.size());
    for (std::size_t j = 0; j < c.size(); ++j) {
      if (std::isnan(c[j])) {
        ++nonfinite;
        ASSERT_TRUE(std::isnan(g[j])) << "op " << k << " at " << j << ": " << g[j];
      } else if (std::isinf(c[j])) {
        ++nonfinite;
        ASSERT_EQ(g[j], c[j]) << "op " << k << " at " << j;
      } else {
        ASSERT_NEAR(g[j], c[j], 1e-5 * (1 + std::abs(c[j]))) << "op " << k << " at " << j;
      }
    }
  }
  EXPECT_GT(nonfinite, 0);
}

// --- NCCL -------------------------------------------------------------------------------------

std::vector<float> host(const DeviceBuffer& b, std::int64_t n, const NcclComm& c) {
  return b.download({n}, c.stream()).to_vector<float>();
}

// Every operation and reduce op over the communicators of every GPU of this machine (one process,
// ncclCommInitAll), against closed forms: rank r contributes r + 1.
TEST(GpuNccl, EveryOperationAndReduceOpMatchesClosedForms) {
  REQUIRE_DEVICES(1);
  const int n = device_info().count;
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  std::vector<NcclComm> comms = NcclComm::init_all(devices);
  const std::int64_t c = 96 * n;
  const auto each = [&](const std::function<void(int, NcclComm&)>& f) {
    NcclComm::group_start();
    for (int r = 0; r < n; ++r) f(r, comms[static_cast<std::size_t>(r)]);
    NcclComm::group_end();
    for (NcclComm& comm : comms) comm.synchronize(60);
  };
  double prod = 1;
  for (int r = 1; r <= n; ++r) prod *= r;
  const std::vector<std::pair<ReduceOp, double>> ops = {{ReduceOp::SUM, n * (n + 1) / 2.0},
                                                        {ReduceOp::AVG, (n + 1) / 2.0},
                                                        {ReduceOp::MAX, n},
                                                        {ReduceOp::MIN, 1},
                                                        {ReduceOp::PROD, prod}};
  for (const auto& [op, want] : ops) {
    std::vector<DeviceBuffer> bufs;
    for (int r = 0; r < n; ++r)
      bufs.push_back(DeviceBuffer::upload(Tensor::full({c}, r + 1), comms[static_cast<std::size_t>(r)].stream()));
    each([&](int r, NcclComm& comm) { comm.all_reduce(bufs[static_cast<std::size_t>(r)], op); });
    for (int r = 0; r < n; ++r) {
      for (float v : host(bufs[static_cast<std::size_t>(r)], c, comms[static_cast<std::size_t>(r)]))
        ASSERT_EQ(v, static_cast<float>(want)) << to_string(op) << " rank " << r;
    }
  }
  // reduce to the last rank, broadcast from it, reduce_scatter, and a ring of send/recv
  std::vector<DeviceBuffer> red, bc, rs_in, rs_out, snd, rcv;
  for (int r = 0; r < n; ++r) {
    const Stream& s = comms[static_cast<std::size_t>(r)].stream();
    red.push_back(DeviceBuffer::upload(Tensor::full({c}, r + 1), s));
    bc.push_back(DeviceBuffer::upload(Tensor::full({c}, r == n - 1 ? 42 : -1), s));
    rs_in.push_back(DeviceBuffer::upload(Tensor::full({c}, r + 1), s));
    rs_out.emplace_back(c / n, DType::f32);
    snd.push_back(DeviceBuffer::upload(Tensor::full({c}, 100 + r), s));
    rcv.emplace_back(c, DType::f32);
  }
  const auto i = [](int r) { return static_cast<std::size_t>(r); };
  each([&](int r, NcclComm& comm) { comm.reduce(red[i(r)], n - 1, ReduceOp::SUM); });
  each([&](int r, NcclComm& comm) { comm.broadcast(bc[i(r)], n - 1); });
  each([&](int r, NcclComm& comm) { comm.reduce_scatter(rs_out[i(r)], rs_in[i(r)], ReduceOp::SUM); });
  each([&](int r, NcclComm& comm) {
    comm.send(snd[i(r)], (r + 1) % n);
    comm.recv(rcv[i(r)], (r + n - 1) % n);
  });
  for (float v : host(red[i(n - 1)], c, comms[i(n - 1)])) ASSERT_EQ(v, n * (n + 1) / 2.0f);
  for (int r = 0; r < n; ++r) {
    for (float v : host(bc[i(r)], c, comms[i(r)])) ASSERT_EQ(v, 42.0f) << "broadcast, rank " << r;
    for (float v : host(rs_out[i(r)], c / n, comms[i(r)])) ASSERT_EQ(v, n * (n + 1) / 2.0f) << "reduce_scatter";
    for (float v : host(rcv[i(r)], c, comms[i(r)])) ASSERT_EQ(v, static_cast<float>(100 + (r + n - 1) % n)) << "recv";
  }
}

TEST(GpuNccl, AnAbortedCommunicatorRefusesFurtherCalls) {
  REQUIRE_DEVICES(1);
  std::vector<NcclComm> comms = NcclComm::init_all({0});
  DeviceBuffer buf = DeviceBuffer::upload(Tensor::full({16}, 1.0), comms[0].stream());
  comms[0].abort();
  EXPECT_TRUE(comms[0].aborted());
  EXPECT_THAT([&] { comms[0].all_reduce(buf, ReduceOp::SUM); },
              ::testing::ThrowsMessage<Error>(HasSubstr("aborted after an earlier error")));
  comms[0].abort();  // idempotent
}

// --- the optimizer ----------------------------------------------------------------------------

// AdamW's update and the gradient norm's sums of squares on the GPU, against the CPU: three
// steps of an f32 and a bf16 parameter, the middle one clipped.
TEST(GpuOptimizer, AdamWAndTheGradientNormMatchTheCpu) {
  REQUIRE_DEVICES(1);
  struct Out {
    std::vector<Tensor> t;
    std::vector<double> norms;
  };
  const auto run = [](const std::shared_ptr<Device>& dev) {
    Out o;
    const ScopedComputeDevice on(dev);
    spawn(
        [&](int rank) {
          tp::Parameter w, b;
          w.value = Tensor::uniform({300, 70}, 80, -1, 1);
          b.value = Tensor::uniform({70}, 81, -1, 1, DType::bf16);
          models::AdamWOptions opt;
          opt.lr = 0.05;
          opt.weight_decay = 0.1;
          models::AdamW adam({{"w", &w}, {"b", &b}},
                             models::AdamW::Groups{new_group({rank}), new_group({rank}), ProcessGroup{}}, opt, false);
          for (int step = 0; step < 3; ++step) {
            w.grad = Tensor::uniform({300, 70}, 90 + 10 * step, -3, 3);
            b.grad = Tensor::uniform({70}, 91 + 10 * step, -3, 3, DType::bf16);
            o.norms.push_back(adam.step(step == 1 ? 1.0 : 1e9));
          }
          const auto st = adam.shard_state();
          o.t = {w.value, b.value, st.at("exp_avg.w"), st.at("exp_avg_sq.b")};
        },
        1);
    return o;
  };
  const Out cpu = run(nullptr);
  const std::shared_ptr<Device> dev = make_cuda_device(0, every_kernel());
  const Out gpu = run(dev);
  ASSERT_EQ(cpu.norms.size(), gpu.norms.size());
  for (std::size_t k = 0; k < cpu.norms.size(); ++k) EXPECT_NEAR(gpu.norms[k], cpu.norms[k], 1e-5 * cpu.norms[k]);
  EXPECT_TRUE(gpu.t[0].host_stale()) << "the update ran on the GPU";
  for (std::size_t k = 0; k < cpu.t.size(); ++k) {
    const std::vector<double> c = cpu.t[k].to_vector<double>(), g = gpu.t[k].to_vector<double>();
    const double tol = cpu.t[k].dtype() == DType::bf16 ? 1e-2 : 1e-5;
    for (std::size_t j = 0; j < c.size(); ++j) ASSERT_NEAR(g[j], c[j], tol * (1 + std::abs(c[j]))) << k << " " << j;
  }
}

// --- runs -------------------------------------------------------------------------------------

int run_cli(std::vector<std::string> args, std::string& err) {
  args.insert(args.begin(), "ranksim");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, e;
  const int code = app::run_cli(static_cast<int>(argv.size()), argv.data(), out, e);
  err = e.str();
  return code;
}

// Shipped multi-rank scenarios, every rank's ops on the GPU (sim backend, one process), against
// the CPU: cp-validation-bshd's logits and gradients (computed in bf16, dumped in f32) to bf16
// rounding; one training step of train-tp2-cp2-dp2 (f32): the loss to f32 rounding, and the
// updated weights to f32 rounding except
// where the gradient is rounding noise, whose sign decides AdamW's first update (+-lr): those
// may differ by 2 lr, and they must be rare.
TEST(GpuRuns, ShippedMultiRankScenariosOnTheGpuMatchTheCpu) {
  REQUIRE_DEVICES(1);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ranksim_gpu_runs";
  std::filesystem::create_directories(dir);
  struct Case {
    std::string name;
    std::vector<std::string> extra;
    double rel;  // tolerance relative to a tensor's largest magnitude: the compute dtype's rounding
  };
  for (const Case& k :
       {Case{"cp-validation-bshd", {}, 2e-2}, Case{"train-tp2-cp2-dp2-dgx-h100", {"--set", "train.steps=1"}, 1e-4}}) {
    std::vector<std::string> dumps;
    for (const std::string device : {"cpu", "gpu"}) {
      const std::string dump = (dir / (k.name + "-" + device + ".safetensors")).string();
      std::vector<std::string> args = {"run",      std::string(RANKSIM_SOURCE_DIR) + "/scenarios/" + k.name + ".yaml",
                                       "--device", device,
                                       "--set",    "dump=" + dump};
      args.insert(args.end(), k.extra.begin(), k.extra.end());
      std::string err;
      ASSERT_EQ(run_cli(args, err), 0) << k.name << " " << device << ": " << err;
      dumps.push_back(dump);
    }
    const SafetensorsFile cpu = load_safetensors(dumps[0]), gpu = load_safetensors(dumps[1]);
    ASSERT_EQ(cpu.tensors.size(), gpu.tensors.size()) << k.name;
    const bool trained = !k.extra.empty();
    const double lr = 0.01;  // the scenario's AdamW learning rate
    std::int64_t flipped = 0, total = 0;
    for (const auto& [key, c] : cpu.tensors) {
      const std::vector<double> a = c.to_vector<double>(), b = gpu.at(key).to_vector<double>();
      ASSERT_EQ(a.size(), b.size()) << k.name << " " << key;
      double scale = 0;
      for (double v : a) scale = std::max(scale, std::abs(v));
      const double tol = k.rel * (scale > 0 ? scale : 1);
      for (std::size_t j = 0; j < a.size(); ++j) {
        const double d = std::abs(b[j] - a[j]);
        if (trained && key.rfind("param/", 0) == 0) {
          ++total;
          ASSERT_LE(d, 2 * lr + tol) << k.name << " " << key << " at " << j;
          flipped += d > tol ? 1 : 0;
        } else {
          ASSERT_LE(d, tol) << k.name << " " << key << " at " << j;
        }
      }
    }
    if (trained) {
      std::cout << k.name << ": " << flipped << " of " << total << " weights took the other sign's update\n";
      EXPECT_LT(flipped, total / 100) << k.name;
    }
  }
}

}  // namespace
}  // namespace ranksim::runtime::gpu

// KernelProfile: how fast a device kind runs the kernels a training step is made of, measured
// (docs/compute.md). A profile is a YAML file beside the topologies, named by a device kind's
// `kernel_profile` key; `ranksim bench ops` writes one for the GPU it runs on.
//
// It holds, per dtype:
// - GEMMs: achieved FLOP/s on a grid of (M, N, K) shapes. Between grid points the throughput is
//   interpolated multilinearly in (log2 M, log2 N, log2 K) after dividing out each shape's wave
//   quantisation (wave_efficiency): tiles of the output are spread over the SMs in waves, and a
//   last wave that fills few SMs wastes the rest. So a grid point is reproduced exactly, and a shape
//   between points pays its own quantisation (a shape one tile over a full wave costs more per
//   FLOP than its neighbours). Outside the grid the nearest edge's normalised throughput is used
//   and the lookup says so (outside = true).
// - Fused attention (flash-attention style): achieved FLOP/s against the key sequence length, per
//   pass (forward, backward), masking (causal or not) and head dimension; linear in log2(seq)
//   between points, the nearest head dimension's curve, the edge value outside (said so).
// - Memory-bound kernels (normalisations, activations, softmax, optimizer updates, casts,
//   copies): the fraction of the memory bandwidth they reach, one default and per-op values.
// - The launch overhead: the least time any kernel takes.
//
// Errors: a malformed profile is a ConfigError at the profile file's line and column. Lookups are
// const and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/time.h"

namespace ranksim::sim {

// What kind of kernel an op is; compute time is reported by these.
enum class KernelClass : uint8_t { gemm, attention, memory, other };
inline constexpr int kKernelClasses = 4;
const char* to_string(KernelClass c);  // "gemm", "attention", "memory-bound", "other"

// The shape of one kernel, as far as the profile needs it. Memory-bound kernels need none.
struct KernelShape {
  KernelClass cls = KernelClass::memory;
  // gemm: `batch` independent (M x K) @ (K x N) products. With backward, the two GEMMs of that
  // product's backward, each half the FLOPs: dA = dC B^T (M x K, inner N) and dB = A^T dC (K x N,
  // inner M).
  int64_t batch = 1, m = 0, n = 0, k = 0;
  // attention: batch x heads (query heads) x seq_q queries against seq_kv keys of head_dim.
  int64_t heads = 0, seq_q = 0, seq_kv = 0, head_dim = 0;
  bool causal = false;
  bool backward = false;
};

struct KernelProfile {
  struct Tile {
    int m = 0, n = 0;
    double efficiency = 1;  // the tile's per-SM throughput relative to the best tile
  };
  // A GEMM grid: axes ascending, tflops[(i * n.size() + j) * k.size() + l] at (m[i], n[j], k[l]).
  struct GemmGrid {
    std::vector<double> m, n, k;
    std::vector<double> flops;       // FLOP/s as measured
    std::vector<double> normalised;  // flops / wave_efficiency at each point
  };
  struct AttentionCurve {
    bool backward = false, causal = false;
    int64_t head_dim = 0;
    std::vector<double> seq;    // ascending key sequence lengths
    std::vector<double> flops;  // FLOP/s
  };
  struct Rate {
    double flops_per_second = 0;
    bool outside = false;  // the shape lies outside the measured points (edge value used)
  };

  std::string name;
  std::string source;  // the file it was read from
  int sms = 0;
  std::vector<Tile> tiles;
  std::map<std::string, GemmGrid, std::less<>> gemm;                          // by dtype
  std::map<std::string, std::vector<AttentionCurve>, std::less<>> attention;  // by dtype
  double memory_efficiency = 1;                                               // default fraction
  std::map<std::string, double, std::less<>> memory_ops;                      // op -> fraction
  std::optional<Time> launch_overhead;                                        // unset: the device kind's

  // The fraction of the SMs' tile slots doing useful work for `batch` (m x n) outputs, under the
  // best of the profile's tiles (each weighted by its efficiency). In (0, 1].
  double wave_efficiency(int64_t batch, int64_t m, int64_t n) const;
  // Achieved FLOP/s of a GEMM; nullopt when the profile has no grid for dtype.
  std::optional<Rate> gemm_rate(std::string_view dtype, const KernelShape& s) const;
  // Achieved FLOP/s of a fused attention; nullopt when the profile has no curve for dtype. A
  // missing masking or pass falls back to the other masking's curve (outside = true).
  std::optional<Rate> attention_rate(std::string_view dtype, const KernelShape& s) const;
  // The fraction of memory bandwidth the memory-bound op reaches.
  double memory_fraction(std::string_view op) const;
};

// Reads a profile. Throws ConfigError at the offending node, Error when the file cannot be read.
KernelProfile parse_kernel_profile(const std::string& yaml_text, const std::string& source);
KernelProfile load_kernel_profile(const std::string& path);
// The profile as YAML that parse_kernel_profile reads back to the same values.
std::string kernel_profile_yaml(const KernelProfile& p, const std::string& header_comment);

}  // namespace ranksim::sim

// `ranksim bench ops`: measures a kernel profile (sim/kernel_profile.h, docs/compute.md) on a
// compute device and writes it as YAML.
//
// On `--device gpu` it times, over a grid of shapes: cuBLAS GEMMs through the CUDA device, the
// project's own fused attention kernels (cp/) forward and backward, causal and not, and a
// memory-bound elementwise kernel, whose bandwidth is written as a fraction of the topology's
// device kind's. `--device emulated` runs the same sweep on the emulated device (the CPU), for
// testing the pipeline; its numbers describe the CPU, not a GPU. Each measurement is the mean of
// `reps` back-to-back runs after one warm-up, bracketed by device synchronisations.
//
// Errors (exit 2): no GPU (or a build without CUDA) for `--device gpu`; an unknown device; a grid
// that is not ascending positive values; an output that cannot be written. The profile is written
// whole or not at all, and read back before it is kept.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace ranksim::app {

struct BenchOpsOptions {
  std::string device = "gpu";  // gpu | emulated
  std::string topology;        // its first device kind gives the memory bandwidth
  std::vector<std::string> sets;
  std::string output;
  std::string name;  // default: "<device name>-bf16"
  // The grid; empty: the device's default (docs/compute.md).
  std::vector<int64_t> m, n, k, seq, head_dims;
  int sms = 0;   // 0: the device's own count (1 on the emulated device)
  int reps = 0;  // 0: 10 on a GPU, 1 emulated
};

// Runs the sweep, prints a table of what it measured to out, writes options.output. Returns 0.
int bench_ops(const BenchOpsOptions& options, std::ostream& out);

}  // namespace ranksim::app

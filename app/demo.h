// `ranksim demo`: the quick-start job until scenarios land. Runs every device of a topology as
// a rank through one data-parallel training step in shape-only mode — a bf16 GEMM per rank,
// then an all-reduce of the gradients and a barrier — and prints what happened: per-rank clocks
// with their compute/communication split, and the collectives in nccl-tests units.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ranksim::app {

struct DemoOptions {
  std::string topology;              // topology YAML path
  std::vector<std::string> sets;     // "key=value" topology overrides
  int ranks = 0;                     // 0: every device
  int64_t gemm = 8192;               // the GEMM is gemm x gemm x gemm
  int64_t grad_bytes = 256ll << 20;  // all-reduced gradient bytes (bf16)
  std::string trace;                 // Chrome trace JSON path; empty = none
};

int demo(const DemoOptions& options, std::ostream& out);

}  // namespace ranksim::app

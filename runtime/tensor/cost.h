// Compute-cost accounting: every tensor op reports what it would cost on a device.
//
// An op calls charge() once per call with its name, its floating-point operation count, the bytes
// it reads plus the bytes it writes (at the tensors' dtypes, as a GPU kernel would move them), the
// dtype it computes in, and (tensor-core kernels) its shape. The charge goes to the calling thread's CostSink, if one
// is installed; with none installed (the default) charges are dropped, so ops cost nothing outside a run. Shape-only
// tensors are charged exactly like tensors with data: that is how a run of thousands of ranks still advances each
// rank's clock.
//
// The distributed runtime installs a sink that advances the current rank's virtual clock by the
// roofline model; ranks are fibers on one thread, so it looks up the current rank itself or swaps
// sinks when it switches fibers. Views (narrow, select, view, transpose, split) move no data and
// are not charged.
#pragma once

#include <cstdint>

#include "runtime/device/dtype.h"
#include "sim/kernel_profile.h"

namespace ranksim::runtime {

struct OpCost {
  const char* op;  // a string literal naming the op, e.g. "matmul", "layer_norm_backward"
  double flops;    // floating-point operations (a multiply-add counts as 2)
  double bytes;    // bytes read plus bytes written
  DType dtype;     // the dtype the op computes on (its inputs' dtype)
  // What kind of kernel it is, and its shape where the kernel profile needs one (GEMMs and the
  // fused kernels of the layers above); the default is a memory-bound kernel
  // (sim/kernel_profile.h).
  sim::KernelShape shape{};
};

// The precision a rank's tensor-core GEMMs run at, for timing. native: their inputs' dtype.
// fp8: as under TransformerEngine's fp8_autocast, the GEMMs run in FP8 (E4M3 forward, E5M2
// gradients in the hybrid recipe) while the tensors around them stay bf16 or f16: the sim backend
// times each GEMM (matmul, matmul_backward; no other kernel class) of a floating dtype at its device
// kind's fp8 entries (the kernel profile's fp8 grid, peak_flops.fp8), and counts its FLOPs against
// the fp8 peak in MFU. The numbers an op computes do not change: ranksim has no fp8 data type.
enum class GemmPrecision : std::uint8_t { native, fp8 };

class CostSink {
 public:
  virtual ~CostSink();
  virtual void charge(const OpCost& cost) = 0;
  // Sets the calling rank's GEMM precision and returns the previous one. A sink that does not
  // time GEMMs by precision ignores it (the default).
  virtual GemmPrecision exchange_gemm_precision(GemmPrecision p) {
    (void)p;
    return GemmPrecision::native;
  }
};

// Installs sink for the calling thread and returns the previous one. nullptr drops charges.
// The caller keeps ownership; the sink must outlive its installation.
CostSink* set_cost_sink(CostSink* sink);
CostSink* cost_sink();  // the calling thread's current sink, or nullptr

// Reports cost to the calling thread's sink (no-op when none is installed).
void charge(const OpCost& cost);

// The calling rank's GEMMs run at `precision` in this scope (GemmPrecision); nested scopes
// restore the outer one. Nothing outside a run.
class GemmPrecisionScope {
 public:
  explicit GemmPrecisionScope(GemmPrecision precision) : sink_(cost_sink()) {
    if (sink_ != nullptr) previous_ = sink_->exchange_gemm_precision(precision);
  }
  ~GemmPrecisionScope() {
    if (sink_ != nullptr) sink_->exchange_gemm_precision(previous_);
  }
  GemmPrecisionScope(const GemmPrecisionScope&) = delete;
  GemmPrecisionScope& operator=(const GemmPrecisionScope&) = delete;

 private:
  CostSink* sink_;
  GemmPrecision previous_ = GemmPrecision::native;
};

// Installs a sink for the lifetime of the guard, then restores the previous one.
class ScopedCostSink {
 public:
  explicit ScopedCostSink(CostSink* sink) : previous_(set_cost_sink(sink)) {}
  ~ScopedCostSink() { set_cost_sink(previous_); }
  ScopedCostSink(const ScopedCostSink&) = delete;
  ScopedCostSink& operator=(const ScopedCostSink&) = delete;

 private:
  CostSink* previous_;
};

}  // namespace ranksim::runtime

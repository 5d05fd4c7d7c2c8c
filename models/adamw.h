// The optimizer of the training loop (models/train.h): AdamW with PyTorch's semantics, global
// gradient-norm clipping across every shard, and ZeRO-1 (Megatron's distributed optimizer).
//
// AdamW, per element, in this order (torch.optim.AdamW, foreach=False), for step t = 1, 2, ...:
//   p = p * (1 - lr * weight_decay)                    (decoupled weight decay)
//   m = b1 * m + (1 - b1) * g
//   v = b2 * v + (1 - b2) * g * g
//   p = p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Each line is computed in double and rounded once to f32. The state (m, v) and a master copy
// of the parameter are f32; a bf16/f16 parameter gets its master's value rounded once per step.
//
// Clipping (torch.nn.utils.clip_grad_norm_): total = sqrt(sum of g^2 over every element of every
// parameter), each parameter counted once: a TP-partitioned shard's squares are summed over TP, a
// TP-replicated parameter's are counted once; with ZeRO-1 each rank holds a slice of the DP x CP
// reduced gradient, so the slices' squares are summed over DP x CP; pipeline stages hold disjoint
// parameters, so the sums are added over PP. coefficient = max_norm / (total + 1e-6), and the
// gradients are scaled by it only when it is below 1.
//
// ZeRO-1: each parameter's gradient (flattened, zero-padded to a multiple of the group size D)
// is reduce-scattered (SUM) over the DP x CP group, so rank i owns slice i of the summed gradient
// and keeps the optimizer state of that slice only; after the update the parameter slices are
// all-gathered (in the parameter's dtype). With sliced_grads the reduce-scatter has already run
// (models/grad_buckets.h, in buckets overlapped with backward, as Megatron's distributed optimizer
// with --overlap-grad-reduce): Parameter::grad is this rank's padded slice. Without ZeRO the
// gradients must already be summed over DP x CP (all-reduced), and every rank updates its whole
// shard. All give the same numbers.
//
// FSDP (ZeRO-3, fsdp = true): the state is sliced as under ZeRO-1, and so are the parameters:
// the constructor keeps this rank's padded slice of each value (Parameter::dp_slice) and releases
// the value; the model all-gathers it around each use (models/transformer.h). Gradients arrive
// already reduce-scattered: Parameter::grad is the padded slice (models/grad_buckets.h, done
// during backward); the update writes the new slice back, with no all-gather. The same numbers as
// ZeRO-1.
//
// Shape-only parameters run the same communication and charge the update ("adamw", 12 flops per
// element); the norm is then NaN and nothing is clipped.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/sharding.h"

namespace ranksim::models {

struct AdamWOptions {
  double lr = 1e-3;  // torch's defaults
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Errors naming the value: lr < 0, betas outside [0, 1), eps <= 0, weight_decay < 0.
void check_adamw(const AdamWOptions& options);

// One rank's optimizer over its parameters (a pipeline stage's, TP-sharded).
class AdamW {
 public:
  struct Groups {
    runtime::ProcessGroup tp;     // the parameters' TP group
    runtime::ProcessGroup pp;     // pipeline stages (disjoint parameters)
    runtime::ProcessGroup shard;  // DP x CP: gradients summed (and ZeRO-1 state sharded) over it
  };
  // params: this rank's (name, Parameter*) list, the same names in the same order on every rank
  // of shard. zero: ZeRO-1. state: full-shape state to resume from (keys "step",
  // "exp_avg.<name>", "exp_avg_sq.<name>"), or empty for a fresh start.
  AdamW(std::vector<std::pair<std::string, tp::Parameter*>> params, Groups groups, AdamWOptions options, bool zero,
        const std::map<std::string, runtime::Tensor>& state = {}, bool fsdp = false, bool sliced_grads = false);

  // Clips (when max_norm is given) and updates every parameter from its gradient; returns the
  // total norm before clipping (NaN for shape-only; computed only when clipping). Collective over
  // tp, pp and shard.
  double step(std::optional<double> max_norm);
  std::int64_t steps() const { return t_; }

  // This rank's state at the shape of its TP shard (ZeRO slices all-gathered over shard):
  // "exp_avg.<name>" and "exp_avg_sq.<name>" in f32. Collective over shard.
  std::map<std::string, runtime::Tensor> shard_state();

 private:
  struct Slot {
    std::string name;
    tp::Parameter* param = nullptr;
    std::int64_t numel = 0, begin = 0, end = 0;  // this rank's slice [begin, end) of the flat shard
    std::int64_t padded = 0;                     // numel rounded up to a multiple of the shard size
    runtime::Tensor master, m, v;                // f32 [end - begin]
    runtime::Shape shape;                        // the parameter's (TP-shard) shape
  };
  std::vector<Slot> slots_;
  Groups groups_;
  AdamWOptions opts_;
  bool zero_ = false;
  bool fsdp_ = false;
  bool sliced_ = false;  // gradients arrive as this rank's padded slices (fsdp, or sliced_grads)
  std::int64_t t_ = 0;
};

}  // namespace ranksim::models

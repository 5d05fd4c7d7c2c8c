// The reference models' loss: token-weighted cross-entropy over the labelled rows of a batch,
// on one rank (cross_entropy_sum) or over the ranks that share one batch (group_cross_entropy).
// On a compute device the per-row arithmetic runs as models/loss_kernels.h, in the CPU loop's
// order.
#pragma once

#include <cstdint>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models {

constexpr std::int64_t kIgnoreIndex = -100;  // a label the loss skips (PyTorch's ignore_index)

// Cross-entropy of a batch's logits, summed (not averaged) over its labelled tokens, and the
// gradient of loss = sum / total_tokens: (softmax - onehot) / total_tokens per labelled row, in
// the logits' dtype. f32 arithmetic on the logits (autocast), sums in double. Shape-only logits
// give a NaN sum and a shape-only gradient; both are charged.
// With vocab_tp (of more than one rank) the logits are this rank's vocabulary shard [N, V/tp]
// (a vocab-parallel output layer): Megatron's vocab-parallel cross-entropy (tp/cross_entropy.h:
// three all-reduces over vocab_tp, per-token loss in f32) replaces the local loop, and every TP
// rank returns the same sum and its shard of the gradient. Collective over vocab_tp.
struct LossSum {
  double sum = 0;           // sum over labelled tokens of lse - logit[label]
  std::int64_t tokens = 0;  // labelled tokens in this batch
  runtime::Tensor dlogits;
};
LossSum cross_entropy_sum(const runtime::Tensor& logits, const runtime::Tensor& labels, double total_tokens,
                          const runtime::ProcessGroup* vocab_tp = nullptr);

// The mean cross-entropy of a batch whose rows are spread over `group` (CP, or DP x CP): the
// labelled tokens and the loss sums are added over the group (no call when it has one rank), and
// each row's gradient is divided by the global token count. loss is NaN for shape-only logits.
// vocab_tp: as for cross_entropy_sum.
struct GroupLoss {
  double loss = 0;
  std::int64_t tokens = 0;  // labelled tokens over the group
  runtime::Tensor dlogits;
};
GroupLoss group_cross_entropy(const runtime::Tensor& logits, const runtime::Tensor& labels,
                              const runtime::ProcessGroup& group, const runtime::ProcessGroup* vocab_tp = nullptr);

}  // namespace ranksim::models

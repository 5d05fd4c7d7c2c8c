// Vocab-parallel cross-entropy: the loss over logits whose vocabulary is split across TP ranks
// (the output of a ColumnParallelLinear without gather_output), Megatron's
// vocab_parallel_cross_entropy without label smoothing.
//
// Per token, in fp32 (logits of another dtype are converted first), on rank r owning the vocab
// range [start, start + V/p):
//   m    = max of the local logits                  -> all-reduce MAX
//   z    = logits - m
//   pred = z[target - start] if the target is owned, else 0   -> all-reduce SUM
//   se   = sum of exp(z) over the local vocab       -> all-reduce SUM
//   loss = log(se) - pred
// Backward: dlogits = (exp(z) / se - onehot_local(target)) * dloss[token], in the logits' dtype.
// The loss is per token ([...] = the targets' shape, f32), not averaged: Megatron leaves the
// masking and averaging to the caller.
//
// Collective over the TP group (three all-reduces in forward, none in backward). With p == 1 it
// is the plain single-rank cross-entropy.
// Errors: targets of the wrong shape or dtype, a target outside [0, V).
// Not reproduced: label smoothing (Megatron's uses the per-partition vocabulary size and a local
// mean, which is not TP-invariant; see the spec).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::tp {

struct CrossEntropyContext {
  runtime::Tensor softmax;                 // exp(z) / se, [..., V/p], f32
  std::vector<std::int64_t> local_target;  // target - start per token, -1 when not owned
  runtime::DType logits_dtype = runtime::DType::f32;
};

// logits: [..., V/p] floating; targets: [...] i64 or i32 with global ids. Returns the loss per
// token, f32.
runtime::Tensor vocab_parallel_cross_entropy(const runtime::Tensor& logits, const runtime::Tensor& targets,
                                             const runtime::ProcessGroup& tp, CrossEntropyContext& ctx);

// dloss: [...] the gradient of each token's loss (any floating dtype). Returns dlogits.
runtime::Tensor vocab_parallel_cross_entropy_backward(const runtime::Tensor& dloss, const CrossEntropyContext& ctx);

}  // namespace ranksim::tp

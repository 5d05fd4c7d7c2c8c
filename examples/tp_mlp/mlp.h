// SPDX-License-Identifier: Apache-2.0
// A user's tensor-parallel MLP, y = gelu(x W1^T) W2^T, Megatron-style: W1 split by rows
// (column-parallel: each rank computes its slice of the hidden activations, no communication) and
// W2 by columns (row-parallel: each rank's partial product, summed by one all_reduce on the TP
// group). Written against ranksim's torch.distributed-style API only.
#pragma once

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace mymlp {

using ranksim::runtime::ProcessGroup;
using ranksim::runtime::Tensor;

struct MlpOutputs {
  Tensor hidden;  // this rank's slice of gelu(x W1^T): [tokens, ffn / tp]
  Tensor y;       // the full output on every rank: [tokens, hidden]
};

// x [tokens, hidden]; w1 [ffn, hidden] and w2 [hidden, ffn] are the full weights (each rank
// keeps its shard). REQUIRES: ffn divisible by tp.size(). Collective on tp: one all_reduce.
MlpOutputs mlp_forward(const Tensor& x, const Tensor& w1, const Tensor& w2, const ProcessGroup& tp);

}  // namespace mymlp

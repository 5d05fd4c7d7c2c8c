// Sharding: how full ("master") tensors are split across tensor-parallel ranks and joined back.
//
// Megatron's CPU-init rule, used for every TP layer here so that every TP size starts from the
// same numbers: build the full fp32 master tensor (the same seed on every rank), cut it along the
// partition dimension into p * stride equal pieces, and give rank r the pieces r, r + p, r + 2p,
// ... concatenated in that order (list[r::p]). With stride 1 that is the r-th contiguous block.
// gather_full is the inverse: it all-gathers the shards (the checkpoint-consolidation case) and
// puts every piece back in its place, so gather_full(shard_of(master)) == master bit for bit.
//
// A Parameter is one layer parameter on one rank: its shard, its accumulated gradient and how it
// is partitioned. Layers own their Parameters; nothing here is global.
#pragma once

#include <cstdint>

#include "runtime/device/dtype.h"
#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::tp {

// Rank r's shard of master: pieces r, r+p, ... of p*stride equal pieces along dim, concatenated,
// as a new contiguous tensor converted to dtype. Shape-only masters give shape-only shards.
// REQUIRES (Error naming the sizes): p >= 1, 0 <= r < p, stride >= 1, p * stride divides
// master.size(dim).
runtime::Tensor shard_of(const runtime::Tensor& master, int dim, int p, int r, int stride = 1,
                         runtime::DType dtype = runtime::DType::f32);

// The inverse of shard_of over the group g (every member calls it; each gets the full tensor,
// in the shard's dtype). REQUIRES: every member's shard has the same shape.
runtime::Tensor gather_full(const runtime::Tensor& shard, int dim, const runtime::ProcessGroup& g, int stride = 1);

// A seeded fp32 master weight: normal(0, stddev), Megatron's init_method_normal. The values depend
// only on (shape, seed, stddev).
runtime::Tensor master_normal(const runtime::Shape& shape, std::uint64_t seed, double stddev = 0.02);

struct Parameter {
  runtime::Tensor value;   // this rank's shard
  runtime::Tensor grad;    // accumulated by backward calls; undefined until the first one
  int partition_dim = -1;  // the dimension split across TP ranks; -1 when replicated
  int partition_stride = 1;
  // Replicated on every TP rank but with a partial gradient under sequence parallelism (each
  // rank saw only its tokens): the gradient must be all-reduced over TP before use (Megatron's
  // `sequence_parallel` attribute; see allreduce_sequence_parallel_grads in tp/layers.h).
  bool sequence_parallel = false;
  // Fully sharded data parallelism (ZeRO-3): this rank's slice of the flattened value, zero-padded
  // to a multiple of the data-parallel group's size, kept while `value` is released between uses
  // (undefined when the parameter is not sharded); value_shape is the released value's shape.
  runtime::Tensor dp_slice;
  runtime::Shape value_shape;

  // grad += g (grad = g on the first call). REQUIRES: g has value's shape and dtype.
  void accumulate(const runtime::Tensor& g);
  void zero_grad() { grad = runtime::Tensor(); }
  // The full tensor (value or grad) gathered over g; replicated parameters are returned as they
  // are. Collective for partitioned parameters.
  runtime::Tensor full_value(const runtime::ProcessGroup& g) const;
  runtime::Tensor full_grad(const runtime::ProcessGroup& g) const;
};

}  // namespace ranksim::tp

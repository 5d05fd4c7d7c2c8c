// Checkpoint consolidation: TP-sharded parameters gathered back to full shape and written as one
// safetensors file, as Megatron's checkpoint converters do when they turn a tp=N checkpoint into
// a single-rank (Hugging Face style) one.
//
// Every parameter partitioned over TP (Parameter::partition_dim >= 0) is all-gathered and put
// back in place by gather_full (tp/sharding.h), the exact inverse of the master-then-split rule,
// so a model built from master tensors writes those masters back bit for bit, at any TP size, in
// the parameters' dtype. Replicated parameters are written as the writer holds them.
//
// The file is written by one member of the group (options.writer) with save_safetensors, which is
// whole-or-nothing: a temporary file beside the target, flushed and renamed over it, so a failure
// leaves any previous file at that path untouched. Tensors are stored under the given names in
// the given order.
//
// Collective over tp: every member calls it with the same names in the same order. It returns
// on every member only once the file is in place; if the write fails, every member throws
// (the writer its own Error naming the path, the others an Error naming the writer and the path).
//
// Gradients (options.gradients): the accumulated Parameter::grad instead of the value. Under
// sequence parallelism, replicated parameters hold partial gradients until
// allreduce_sequence_parallel_grads (tp/layers.h) has run; call it first.
//
// Errors (ranksim::Error, raised on every member before any communication): an empty name, a
// name given twice or "__metadata__", a null parameter, a parameter without data (shape-only),
// a missing gradient with options.gradients, a writer outside the group.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/sharding.h"

namespace ranksim::tp {

// (name, parameter) as the layers' named_parameters() return them.
using NamedParameters = std::vector<std::pair<std::string, Parameter*>>;

// The same parameters with prefix + name ("decoder.layers.0.mlp." + "fc1.weight").
NamedParameters with_prefix(const std::string& prefix, const NamedParameters& params);

struct ConsolidateOptions {
  bool gradients = false;                       // gather the gradients instead of the values. Default: false
  int writer = 0;                               // the group rank that writes the file. Default: 0
  std::map<std::string, std::string> metadata;  // "__metadata__" of the file. Default: none
};

// The full tensors, in the order and under the names given, on every member of tp (collective;
// the validation above, without the file).
std::vector<std::pair<std::string, runtime::Tensor>> consolidate(const NamedParameters& params,
                                                                 const runtime::ProcessGroup& tp,
                                                                 const ConsolidateOptions& options = {});

// consolidate(), then writes the safetensors file at path from options.writer.
void save_consolidated(const std::string& path, const NamedParameters& params, const runtime::ProcessGroup& tp,
                       const ConsolidateOptions& options = {});

}  // namespace ranksim::tp

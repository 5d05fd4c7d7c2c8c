// Megatron's tensor-parallel mappings: the communication at the edges of parallel regions.
//
// Each mapping is a forward function and its explicit backward (what Megatron's autograd
// functions do), over the tensor-parallel group g of size p, this rank r:
//
//   mapping (Megatron name)                          forward               backward
//   copy_to_tp      (copy_to_tensor_model_parallel_region)        identity              all-reduce
//   reduce_from_tp  (reduce_from_tensor_model_parallel_region)    all-reduce            identity
//   scatter_to_tp   (scatter_to_tensor_model_parallel_region)     split last dim        all-gather last dim
//   gather_from_tp  (gather_from_tensor_model_parallel_region)    all-gather last dim   split last dim
//   scatter_to_sp   (scatter_to_sequence_parallel_region)         split dim 0           all-gather dim 0
//   gather_from_sp  (gather_from_sequence_parallel_region)        all-gather dim 0      reduce-scatter dim 0
//                                                                                       (split when
//                                                                                       tensor_parallel_output_grad
//                                                                                       is false)
//   reduce_scatter_to_sp (reduce_scatter_to_sequence_parallel_region)
//                                                                 reduce-scatter dim 0  all-gather dim 0
//
// Splits give rank r the r-th of p equal pieces (a contiguous copy, as Megatron's .contiguous());
// all-gathers concatenate the ranks' pieces in group-rank order; reductions are SUM in the
// runtime's fixed order, so every rank receives the same bits.
//
// In place: like Megatron's, the all-reduces (reduce_from_tp, copy_to_tp_backward) reduce their
// argument's storage in place and return it (a non-contiguous argument is first copied). Do not
// reuse a tensor after passing it to them.
//
// With p == 1 every mapping returns its argument unchanged and issues no collective.
// REQUIRES (Error otherwise, naming the tensor and p): the split dimension is divisible by p;
// every member of g calls the same mapping with the same shape (a collective).
#pragma once

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::tp {

runtime::Tensor copy_to_tp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor copy_to_tp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g);

runtime::Tensor reduce_from_tp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor reduce_from_tp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g);

runtime::Tensor scatter_to_tp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor scatter_to_tp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g);

runtime::Tensor gather_from_tp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor gather_from_tp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g);

runtime::Tensor scatter_to_sp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor scatter_to_sp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g);

runtime::Tensor gather_from_sp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor gather_from_sp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g,
                                        bool tensor_parallel_output_grad = true);

runtime::Tensor reduce_scatter_to_sp(const runtime::Tensor& x, const runtime::ProcessGroup& g);
runtime::Tensor reduce_scatter_to_sp_backward(const runtime::Tensor& dy, const runtime::ProcessGroup& g);

// --- Primitives the layers use to overlap communication with compute (Megatron's async
// dgrad all-reduce and SP all-gather / reduce-scatter). With async_op the returned tensor carries
// a pending write (reading it waits) and work completes with the collective; with p == 1 the
// input is returned and work is an already-completed Work.
struct CommResult {
  runtime::Tensor tensor;
  runtime::Work work;
  // Waits for the collective and detaches its pending write from tensor, so the tensor can be
  // read later from anywhere (even after the run).
  void wait() const {
    work.wait();
    tensor.wait_pending();
  }
};
// Sum over g, in place on x (x must be contiguous; Error otherwise).
CommResult all_reduce_tp(const runtime::Tensor& x, const runtime::ProcessGroup& g, bool async_op);
// [s, ...] from every rank -> [p*s, ...], rank order.
CommResult all_gather_dim0(const runtime::Tensor& x, const runtime::ProcessGroup& g, bool async_op);
// [p*s, ...] -> this rank's [s, ...] slice of the sum. REQUIRES: p divides size(0).
CommResult reduce_scatter_dim0(const runtime::Tensor& x, const runtime::ProcessGroup& g, bool async_op);
// The rank's piece of p equal pieces along dim (a contiguous copy).
runtime::Tensor split_along(const runtime::Tensor& x, const runtime::ProcessGroup& g, int dim, const char* who);
// Every rank's x concatenated along the last dim, in rank order.
runtime::Tensor all_gather_last_dim(const runtime::Tensor& x, const runtime::ProcessGroup& g);

}  // namespace ranksim::tp

// Data-parallel gradient reduction in buckets, overlapped with backward: Megatron-LM's
// DistributedDataParallel with --overlap-grad-reduce and --ddp-bucket-size.
//
// The training loop hands over each block's parameters as soon as the last micro-batch's backward
// has completed their gradients (last block first, then the embedding and head parameters at the
// end). They join the open bucket; once it holds at least bucket_size elements it is closed and
// its collective started asynchronously, while backward goes on; finish() closes the last one and
// waits for all of them. One collective per bucket, over g (DP x CP):
//
//   all_reduce:      the bucket's gradients flattened into one buffer and all-reduced (plain DP);
//                    each parameter's gradient becomes its view of the summed buffer.
//   reduce_scatter:  each gradient flattened and zero-padded to a multiple of d = g.size(), and
//                    the buffer laid out rank-major: rank i's part is slice i of every parameter
//                    of the bucket, in order (AdamW's ZeRO slices, models/adamw.h). One
//                    reduce-scatter leaves each parameter's gradient as this rank's padded slice
//                    [padded / d] of its sum (ZeRO-1's distributed optimizer, and FSDP).
//
// The numbers do not depend on the buckets: each element is summed over the ranks in the
// collective's one fixed order, whatever else shares its buffer. Megatron's gradients live in
// one contiguous buffer, so packing and unpacking a bucket move no bytes there: the copies are
// not charged (their memory is: the reduce-scatter's send buffer as buffers until it completes).
// A bucket is closed only at a block boundary (Megatron closes them at parameter granularity), so
// a bucket may exceed bucket_size by up to one block.
//
// bucket_size <= 0: one bucket per add() call (each block its own). Parameters without a gradient
// are skipped (identically on every rank: they are the same parameters).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/distributed/distributed.h"
#include "runtime/tensor/tensor.h"
#include "tp/sharding.h"

namespace ranksim::models {

class GradBuckets {
 public:
  enum class Mode { all_reduce, reduce_scatter };
  GradBuckets(runtime::ProcessGroup g, Mode mode, std::int64_t bucket_size);

  // Parameters whose gradients are complete. Collective over g when it closes a bucket.
  void add(const std::vector<std::pair<std::string, tp::Parameter*>>& params);
  // Closes the open bucket and waits for every bucket's collective. Collective over g.
  void finish();
  // The buckets closed so far, and the elements of each (for tests and the summary).
  const std::vector<std::int64_t>& bucket_sizes() const { return sizes_; }

 private:
  void close();

  runtime::ProcessGroup g_;
  Mode mode_;
  std::int64_t bucket_size_;
  std::vector<tp::Parameter*> open_;
  std::int64_t open_elems_ = 0;
  std::vector<runtime::Work> pending_;
  std::vector<runtime::Tensor> send_buffers_;  // kept until their reduce-scatters complete
  std::vector<runtime::Tensor> results_;       // the buffers the collectives write
  std::vector<std::int64_t> sizes_;
};

}  // namespace ranksim::models

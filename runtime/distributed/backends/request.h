// What one rank hands a backend for a collective: the Signature every member must agree on, and
// the rank's tensors, typed per kind of collective.
//
// distributed.cpp validates the arguments (runtime/distributed/distributed.h's buffer contracts)
// and builds both; a backend reads the tensors through the struct of the signature's kind
// (std::get<AllGatherTensors>(t) for an all_gather), so it cannot take an all_gather's input for
// its output: asking for another kind's struct throws std::bad_variant_access, a programming
// error. Counts are elements; roots are group indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "runtime/distributed/reduce.h"
#include "runtime/distributed/schedule.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::detail {

// What every member of a collective must agree on.
struct Signature {
  CollectiveKind kind = CollectiveKind::barrier;
  DType dtype = DType::f32;
  int64_t count = 0;  // elements per rank as make_schedule() counts them
  ReduceOp op = ReduceOp::SUM;
  int root = 0;  // group index
  Algorithm algorithm = Algorithm::automatic;
  std::string shape;  // for messages
  std::string describe() const;
  // Empty when equal; else what differs.
  std::string difference(const Signature& other) const;
};

// all_reduce, broadcast, reduce: one tensor, in place (reduce: the result on the root only).
struct AllReduceTensors {
  Tensor tensor;
};
struct BroadcastTensors {
  Tensor tensor;
};
struct ReduceTensors {
  Tensor tensor;
};
// output.numel() == n * input.numel(); input may be a view of output.
struct AllGatherTensors {
  Tensor output, input;
};
// input.numel() == n * output.numel().
struct ReduceScatterTensors {
  Tensor output, input;
};
// An all_to_all's elements to (or from) each group rank j: n equal sizes, held as one number (a
// call without split sizes; a 16,384-rank group's calls would otherwise hold 16,384^2 sizes), or
// the list the caller gave.
class SplitSizes {
 public:
  SplitSizes() = default;
  static SplitSizes even(int n, int64_t each);
  explicit SplitSizes(std::vector<int64_t> sizes);
  int size() const { return n_; }
  int64_t operator[](int j) const { return sizes_.empty() ? each_ : sizes_[static_cast<std::size_t>(j)]; }
  bool is_even() const { return sizes_.empty(); }
  int64_t total() const;
  std::vector<int64_t> to_vector() const;

 private:
  int n_ = 0;
  int64_t each_ = 0;            // when even
  std::vector<int64_t> sizes_;  // else
};

// input_splits[j]: elements this rank sends group rank j; output_splits[j]: elements it receives
// from group rank j (both already checked against the tensors' sizes).
struct AllToAllTensors {
  Tensor output, input;
  SplitSizes input_splits, output_splits;
};
// tensor: this rank's contribution; gather_list: n tensors like it on the root, empty elsewhere.
struct GatherTensors {
  Tensor tensor;
  std::vector<Tensor> gather_list;
};
// tensor: this rank's piece; scatter_list: n tensors like it on the root, empty elsewhere.
struct ScatterTensors {
  Tensor tensor;
  std::vector<Tensor> scatter_list;
};
struct BarrierTensors {};

// One alternative per CollectiveKind.
using CollectiveTensors =
    std::variant<AllReduceTensors, BroadcastTensors, ReduceTensors, AllGatherTensors, ReduceScatterTensors,
                 GatherTensors, ScatterTensors, AllToAllTensors, BarrierTensors>;

// The kind of collective the tensors are for.
CollectiveKind kind_of(const CollectiveTensors& tensors);

// True when the tensors hold data (false: shape-only, or a barrier). distributed.cpp refuses a
// call that mixes shape-only and data tensors, so the first tensor answers for all.
bool has_data(const CollectiveTensors& tensors);

}  // namespace ranksim::runtime::detail

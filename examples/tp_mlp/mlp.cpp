// SPDX-License-Identifier: Apache-2.0
#include "mlp.h"

#include "runtime/tensor/ops.h"

namespace mymlp {

MlpOutputs mlp_forward(const Tensor& x, const Tensor& w1, const Tensor& w2, const ProcessGroup& tp) {
  namespace rt = ranksim::runtime;
  const std::int64_t shard = w1.size(0) / tp.size();
  const std::int64_t first = tp.rank() * shard;
  const Tensor w1_r = w1.narrow(0, first, shard).contiguous();  // column-parallel
  const Tensor w2_r = w2.narrow(1, first, shard).contiguous();  // row-parallel
  MlpOutputs out;
  out.hidden = rt::gelu(rt::matmul(x, w1_r, false, true));
  out.y = rt::matmul(out.hidden, w2_r, false, true);
  rt::AllreduceOptions opts;
  opts.group = tp;
  rt::all_reduce(out.y, opts);
  return out;
}

}  // namespace mymlp

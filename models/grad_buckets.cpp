#include "models/grad_buckets.h"

#include <algorithm>
#include <utility>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/memory.h"
#include "sim/error.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;

GradBuckets::GradBuckets(runtime::ProcessGroup g, Mode mode, i64 bucket_size)
    : g_(std::move(g)), mode_(mode), bucket_size_(bucket_size) {}

void GradBuckets::add(const std::vector<std::pair<std::string, tp::Parameter*>>& params) {
  for (const auto& [name, p] : params) {
    if (!p->grad.defined()) continue;
    if (!open_.empty() && open_.front()->grad.dtype() != p->grad.dtype()) close();  // one dtype per buffer
    open_.push_back(p);
    open_elems_ += p->grad.numel();
  }
  if (bucket_size_ <= 0 || open_elems_ >= bucket_size_) close();
}

void GradBuckets::finish() {
  close();
  for (runtime::Work& w : pending_) w.wait();
  for (const Tensor& t : results_) t.wait_pending();  // the gradients readable from anywhere
  pending_.clear();
  send_buffers_.clear();
  results_.clear();
}

void GradBuckets::close() {
  if (open_.empty()) return;
  const i64 d = g_.size();
  const bool data = open_.front()->grad.has_data();
  const DType dt = open_.front()->grad.dtype();
  sizes_.push_back(open_elems_);
  auto make = [&](i64 n) { return data ? Tensor::zeros({n}, dt) : Tensor::shape_only({n}, dt); };
  if (mode_ == Mode::all_reduce) {
    Tensor buf;
    {
      const runtime::MemoryScope grads(runtime::MemoryKind::gradients);
      buf = make(open_elems_);
    }
    i64 off = 0;
    for (tp::Parameter* p : open_) {
      const i64 n = p->grad.numel();
      const runtime::Shape shape = p->grad.shape();
      if (data) {
        const runtime::ScopedCostSink uncharged(nullptr);  // Megatron's grads are in the buffer already
        buf.narrow(0, off, n).copy_(p->grad.contiguous().reshape({n}));
      }
      p->grad = buf.narrow(0, off, n).reshape(shape);
      off += n;
    }
    if (d > 1) {
      runtime::AllreduceOptions o;
      o.group = g_;
      o.async_op = true;
      pending_.push_back(runtime::all_reduce(buf, o));
      results_.push_back(buf);
    }
  } else {
    // rank-major: part i holds slice i of every parameter's padded gradient
    std::vector<i64> per, offset;
    i64 part = 0;
    for (tp::Parameter* p : open_) {
      const i64 n = p->grad.numel();
      per.push_back((n + d - 1) / d);
      offset.push_back(part);
      part += per.back();
    }
    Tensor in, out;
    {
      const runtime::MemoryScope buffers(runtime::MemoryKind::buffers);  // the padded send buffer
      in = make(d * part);
    }
    for (std::size_t k = 0; k < open_.size(); ++k) {
      tp::Parameter* p = open_[k];
      const i64 n = p->grad.numel();
      if (data) {
        const runtime::ScopedCostSink uncharged(nullptr);
        const Tensor flat = p->grad.contiguous().reshape({n});
        for (i64 i = 0; i < d; ++i) {
          const i64 begin = std::min(n, i * per[k]), end = std::min(n, (i + 1) * per[k]);
          if (end > begin) in.narrow(0, i * part + offset[k], end - begin).copy_(flat.narrow(0, begin, end - begin));
        }
      }
      p->grad = Tensor();  // the full gradient is freed once packed
    }
    {
      const runtime::MemoryScope grads(runtime::MemoryKind::gradients);
      out = d > 1 ? make(part) : in;
    }
    if (d == 1) runtime::retag_memory(out, runtime::MemoryKind::gradients);  // the packed gradients themselves
    for (std::size_t k = 0; k < open_.size(); ++k) open_[k]->grad = out.narrow(0, offset[k], per[k]);
    if (d > 1) {
      runtime::ReduceScatterOptions o;
      o.group = g_;
      o.async_op = true;
      pending_.push_back(runtime::reduce_scatter_tensor(out, in, o));
      send_buffers_.push_back(in);
      results_.push_back(out);
    }
  }
  open_.clear();
  open_elems_ = 0;
}

}  // namespace ranksim::models

#include "models/adamw.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "models/adamw_kernels.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/memory.h"
#include "sim/error.h"

namespace ranksim::models {

using runtime::DType;
using runtime::Tensor;
using i64 = std::int64_t;

void check_adamw(const AdamWOptions& o) {
  auto bad = [](const std::string& what) { throw Error("adamw: " + what); };
  if (!(o.lr >= 0)) bad("lr must be >= 0, got " + std::to_string(o.lr));
  if (!(o.beta1 >= 0 && o.beta1 < 1)) bad("beta1 must be in [0, 1), got " + std::to_string(o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1)) bad("beta2 must be in [0, 1), got " + std::to_string(o.beta2));
  if (!(o.eps > 0)) bad("eps must be > 0, got " + std::to_string(o.eps));
  if (!(o.weight_decay >= 0)) bad("weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
}

namespace {

// --- the device path (models/adamw_kernels.h) ----------------------------------------------

using runtime::Device;
using runtime::launch;
using In = runtime::DeviceInput;
using Out = runtime::DeviceOutput;
namespace k = kernels;

std::vector<double> sum_squares(Device& dev, const std::vector<Tensor>& gs) {
  const auto n = static_cast<i64>(gs.size());
  Out S(dev, {n}, DType::f64);
  dev.zero(S.ptr, static_cast<std::size_t>(n) * sizeof(double));
  for (i64 i = 0; i < n; ++i) {
    const Tensor& g = gs[static_cast<std::size_t>(i)];
    In G(dev, g);
    launch(dev, k::SumSquaresKernel{G.as<float>(), g.numel(), S.as<double>() + i}, g.numel() > 0 ? 1 : 0);
  }
  return S.t.to_vector<double>();
}

// One AdamW step's constants (the loop in AdamW::step spells them out).
struct AdamWStep {
  double coef, decay, b1, b2, bc2_sqrt, step_size, eps;
};

void adamw_(Device& dev, const Tensor& p, const Tensor& m, const Tensor& v, const Tensor& g, const AdamWStep& st) {
  In G(dev, g);
  float* pp = static_cast<float*>(runtime::device_writable(dev, p));
  float* mp = static_cast<float*>(runtime::device_writable(dev, m));
  float* vp = static_cast<float*>(runtime::device_writable(dev, v));
  launch(dev,
         k::AdamWKernel{pp, mp, vp, G.as<float>(), st.coef, st.decay, st.b1, st.b2, st.bc2_sqrt, st.step_size, st.eps},
         p.numel());
  for (const Tensor* t : {&p, &m, &v}) runtime::mark_device_written(dev, *t);
}

Tensor flat_f32(const Tensor& t) { return t.to(DType::f32).contiguous().reshape({t.numel()}); }

}  // namespace

AdamW::AdamW(std::vector<std::pair<std::string, tp::Parameter*>> params, Groups groups, AdamWOptions options, bool zero,
             const std::map<std::string, Tensor>& state, bool fsdp, bool sliced_grads)
    : groups_(std::move(groups)),
      opts_(options),
      zero_(zero || fsdp),
      fsdp_(fsdp),
      sliced_(zero_ && (fsdp || sliced_grads)) {
  check_adamw(opts_);
  const runtime::MemoryScope optimizer_state(runtime::MemoryKind::optimizer);
  const i64 d = zero_ ? groups_.shard.size() : 1, r = zero_ ? groups_.shard.rank() : 0;
  if (!state.empty()) {
    const auto it = state.find("step");
    if (it == state.end()) throw Error("adamw: resumed state has no 'step'");
    t_ = static_cast<i64>(it->second.item());
  }
  for (auto& [name, p] : params) {
    Slot s;
    s.name = name;
    s.param = p;
    s.numel = p->value.numel();
    s.shape = p->value.shape();
    s.padded = (s.numel + d - 1) / d * d;
    const i64 per = s.padded / d;
    s.begin = std::min(s.numel, r * per);
    s.end = std::min(s.numel, (r + 1) * per);
    const i64 len = s.end - s.begin;
    if (!p->value.has_data()) {
      // three tensors, as with data: the f32 master and the two moments
      s.master = Tensor::shape_only({len}, DType::f32);
      s.m = Tensor::shape_only({len}, DType::f32);
      s.v = Tensor::shape_only({len}, DType::f32);
    } else {
      s.master = flat_f32(p->value).narrow(0, s.begin, len).clone();
      s.m = Tensor::zeros({len}, DType::f32);
      s.v = Tensor::zeros({len}, DType::f32);
      if (!state.empty()) {
        // the full-shape state, cut like the parameter: its TP shard, then this rank's slice
        for (auto [key, dst] : {std::pair<const char*, Tensor*>{"exp_avg.", &s.m}, {"exp_avg_sq.", &s.v}}) {
          const auto f = state.find(key + name);
          if (f == state.end()) throw Error("adamw: resumed state has no '" + std::string(key) + name + "'");
          const Tensor shard = p->partition_dim < 0 ? f->second
                                                    : tp::shard_of(f->second, p->partition_dim, groups_.tp.size(),
                                                                   groups_.tp.rank(), p->partition_stride);
          if (shard.numel() != s.numel) {
            throw Error("adamw: state '" + std::string(key) + name + "' " + f->second.str() +
                        " does not fit the parameter " + p->value.str());
          }
          *dst = flat_f32(shard).narrow(0, s.begin, len).clone();
        }
      }
    }
    if (fsdp_) {
      // keep this rank's padded slice of the value, release the value (the model gathers it)
      const DType pd = p->value.dtype();
      {
        const runtime::MemoryScope parameters(runtime::MemoryKind::parameters);
        p->dp_slice = p->value.has_data() ? Tensor::zeros({per}, pd) : Tensor::shape_only({per}, pd);
        if (p->value.has_data() && len > 0) {
          p->dp_slice.narrow(0, 0, len).copy_(p->value.contiguous().reshape({s.numel}).narrow(0, s.begin, len));
        }
      }
      p->value_shape = s.shape;
      p->value = Tensor();
    }
    slots_.push_back(std::move(s));
  }
}

double AdamW::step(std::optional<double> max_norm) {
  ++t_;
  const tp::Parameter* first = slots_.empty() ? nullptr : slots_.front().param;
  const bool data = !first || (fsdp_ ? first->dp_slice.has_data() : first->value.has_data());
  // 1. This rank's slice of each summed gradient, f32.
  std::vector<Tensor> grads;
  for (Slot& s : slots_) {
    if (!s.param->grad.defined()) {
      throw Error("adamw: parameter '" + s.name + "' has no gradient (run a backward before step)");
    }
    const i64 len = s.end - s.begin;
    if (!zero_) {
      grads.push_back(data ? flat_f32(s.param->grad) : Tensor::shape_only({len}, DType::f32));
      continue;
    }
    const i64 d = groups_.shard.size(), per = s.padded / d;
    if (sliced_) {  // already reduce-scattered during backward
      if (s.param->grad.numel() != per) {
        throw Error("adamw: parameter '" + s.name + "' has a gradient of " + s.param->grad.str() +
                    "; it must be reduce-scattered into this rank's slice first (models/grad_buckets.h)");
      }
      grads.push_back(data ? s.param->grad.narrow(0, 0, len).to(DType::f32).contiguous()
                           : Tensor::shape_only({len}, DType::f32));
      continue;
    }
    const DType gd = s.param->grad.dtype();
    const runtime::MemoryScope buffers(runtime::MemoryKind::buffers);  // ZeRO's reduce-scatter buffers
    Tensor in = data ? Tensor::zeros({s.padded}, gd) : Tensor::shape_only({s.padded}, gd);
    if (data) in.narrow(0, 0, s.numel).copy_(s.param->grad.contiguous().reshape({s.numel}));
    Tensor out = data ? Tensor::zeros({per}, gd) : Tensor::shape_only({per}, gd);
    runtime::ReduceScatterOptions o;
    o.group = groups_.shard;
    runtime::reduce_scatter_tensor(out, in, o).wait();
    grads.push_back(data ? out.narrow(0, 0, len).to(DType::f32).contiguous() : Tensor::shape_only({len}, DType::f32));
  }
  // 2. The global norm and the clipping coefficient.
  double norm = 0, coef = 1;
  if (max_norm) {
    double part = 0, repl = 0;
    if (data) {
      // Each gradient's squares in index order (on the device when one is installed).
      std::vector<const Tensor*> ins;
      for (const Tensor& g : grads) ins.push_back(&g);
      std::vector<double> sq;
      if (runtime::Device* dev = runtime::device_for(ins)) {
        sq = sum_squares(*dev, grads);
      } else {
        for (const Tensor& g : grads) {
          double s = 0;
          for (float x : g.to_vector<float>()) s += static_cast<double>(x) * x;
          sq.push_back(s);
        }
      }
      for (std::size_t i = 0; i < slots_.size(); ++i) (slots_[i].param->partition_dim >= 0 ? part : repl) += sq[i];
    }
    Tensor p = Tensor::from_vector(std::vector<double>{part}, {1}, DType::f64);
    if (groups_.tp.size() > 1) {
      runtime::AllreduceOptions o;
      o.group = groups_.tp;
      runtime::all_reduce(p, o).wait();
    }
    Tensor total = Tensor::from_vector(std::vector<double>{p.to_vector<double>()[0] + repl}, {1}, DType::f64);
    for (const runtime::ProcessGroup* g : {zero_ ? &groups_.shard : nullptr, &groups_.pp}) {
      if (g == nullptr || g->size() <= 1) continue;
      runtime::AllreduceOptions o;
      o.group = *g;
      runtime::all_reduce(total, o).wait();
    }
    norm = data ? std::sqrt(total.to_vector<double>()[0]) : std::numeric_limits<double>::quiet_NaN();
    const double c = *max_norm / (norm + 1e-6);
    if (data && c < 1) coef = c;
  }
  // 3. AdamW on the slices, then the parameters written back (all-gathered under ZeRO-1).
  const double b1 = opts_.beta1, b2 = opts_.beta2;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(t_));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, static_cast<double>(t_)));
  const double step_size = opts_.lr / bc1;
  const double decay = 1 - opts_.lr * opts_.weight_decay;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const i64 len = s.end - s.begin;
    runtime::charge({"adamw", 12.0 * static_cast<double>(len), 16.0 * static_cast<double>(len), DType::f32});
    runtime::Device* dev = data && len > 0 ? runtime::device_for({&s.master, &s.m, &s.v, &grads[i]}) : nullptr;
    if (dev) {
      // The same update as the loop below, in place on the device copies of the slice's state.
      adamw_(*dev, s.master, s.m, s.v, grads[i], {coef, decay, b1, b2, bc2_sqrt, step_size, opts_.eps});
    } else if (data) {
      float* p = s.master.data<float>();
      float* m = s.m.data<float>();
      float* v = s.v.data<float>();
      const float* g = grads[i].data<float>();
      for (i64 k = 0; k < len; ++k) {
        const double gk = static_cast<double>(g[k]) * coef;
        const float gc = static_cast<float>(gk);
        p[k] = static_cast<float>(static_cast<double>(p[k]) * decay);
        m[k] = static_cast<float>(b1 * m[k] + (1 - b1) * gc);
        v[k] = static_cast<float>(b2 * v[k] + (1 - b2) * static_cast<double>(gc) * gc);
        const double denom = std::sqrt(static_cast<double>(v[k])) / bc2_sqrt + opts_.eps;
        p[k] = static_cast<float>(static_cast<double>(p[k]) - step_size * m[k] / denom);
      }
    }
    const DType pd = fsdp_ ? s.param->dp_slice.dtype() : s.param->value.dtype();
    if (fsdp_) {
      // the new slice, kept for the model to gather at its next use
      if (data && len > 0) s.param->dp_slice.narrow(0, 0, len).copy_(s.master.to(pd));
      continue;
    }
    if (!zero_) {
      // a new tensor each step (never the master itself), as the ZeRO path gives
      if (data)
        s.param->value = (pd == DType::f32 ? s.master.clone() : s.master.to(pd)).reshape(s.param->value.shape());
      runtime::retag_memory(s.param->value, runtime::MemoryKind::parameters);
      continue;
    }
    const i64 d = groups_.shard.size(), per = s.padded / d;
    Tensor mine = data ? Tensor::zeros({per}, pd) : Tensor::shape_only({per}, pd);
    if (data && len > 0) mine.narrow(0, 0, len).copy_(s.master.to(pd));
    Tensor all = data ? Tensor::zeros({s.padded}, pd) : Tensor::shape_only({s.padded}, pd);
    runtime::AllgatherOptions o;
    o.group = groups_.shard;
    runtime::all_gather_into_tensor(all, mine, o).wait();
    if (data) s.param->value = all.narrow(0, 0, s.numel).contiguous().reshape(s.param->value.shape());
    runtime::retag_memory(s.param->value, runtime::MemoryKind::parameters);
  }
  return max_norm ? norm : 0.0;
}

std::map<std::string, Tensor> AdamW::shard_state() {
  std::map<std::string, Tensor> out;
  for (Slot& s : slots_) {
    for (auto [key, src] : {std::pair<const char*, Tensor*>{"exp_avg.", &s.m}, {"exp_avg_sq.", &s.v}}) {
      Tensor full;
      if (!zero_) {
        full = *src;
      } else {
        const i64 d = groups_.shard.size(), per = s.padded / d, len = s.end - s.begin;
        Tensor mine = Tensor::zeros({per}, DType::f32);
        if (len > 0) mine.narrow(0, 0, len).copy_(*src);
        Tensor all = Tensor::zeros({s.padded}, DType::f32);
        runtime::AllgatherOptions o;
        o.group = groups_.shard;
        runtime::all_gather_into_tensor(all, mine, o).wait();
        full = all.narrow(0, 0, s.numel).contiguous();
      }
      out[key + s.name] = full.reshape(s.shape);
    }
  }
  return out;
}

}  // namespace ranksim::models

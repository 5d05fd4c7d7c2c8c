#include "cp/attention_device.h"

#include "cp/attention_kernels.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"

namespace ranksim::cp::device {

using runtime::launch;
using In = runtime::DeviceInput;
using Ids = runtime::DeviceIndices;
using Out = runtime::DeviceOutput;
using i64 = std::int64_t;

namespace {

// The token arrays on the device, for one call.
struct Tokens {
  Tokens(Device& dev, const AttentionCall& c)
      : qp(Tensor::from_vector(*c.q_pos, {c.tq})),
        qs(Tensor::from_vector(*c.q_seg, {c.tq})),
        kp(Tensor::from_vector(*c.k_pos, {c.tk})),
        ks(Tensor::from_vector(*c.k_seg, {c.tk})) {
    tok.q_pos = static_cast<const i64*>(device_pointer(dev, qp));
    tok.q_seg = static_cast<const i64*>(device_pointer(dev, qs));
    tok.k_pos = static_cast<const i64*>(device_pointer(dev, kp));
    tok.k_seg = static_cast<const i64*>(device_pointer(dev, ks));
    tok.window_left = c.window_left;
    tok.window_right = c.window_right;
  }
  Tensor qp, qs, kp, ks;
  kernels::AttentionTokens tok{};
};

kernels::AttentionDims dims_of(const AttentionCall& c) {
  return {c.tq, c.tk, c.hq, c.hkv, c.d, c.dv, static_cast<float>(c.scale)};
}

// An f32 device tensor converted into dtype on the device (itself when dtype is f32).
Tensor to_dtype(Device& dev, const Out& f32, DType dtype) {
  if (dtype == DType::f32) return f32.t;
  Out o(dev, f32.t.shape(), dtype);
  runtime::kernels::CopyKernel c{};
  c.src = f32.ptr;
  c.src_dtype = DType::f32;
  c.dst = o.ptr;
  c.dst_dtype = dtype;
  c.ndim = 1;
  c.sizes[0] = f32.t.numel();
  c.src_strides[0] = 1;
  c.dst_strides[0] = 1;
  launch(dev, c, f32.t.numel());
  return o.t;
}

}  // namespace

std::pair<Tensor, Tensor> attention_forward(Device& dev, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const AttentionCall& call, DType out_dtype) {
  In Q(dev, q), K(dev, k), V(dev, v);
  const Tokens t(dev, call);
  Out O(dev, {call.tq, call.hq, call.dv}, DType::f32), L(dev, {call.hq, call.tq}, DType::f32);
  launch(dev,
         kernels::AttentionForwardKernel{Q.get(), K.get(), V.get(), q.dtype(), t.tok, dims_of(call), O.as<float>(),
                                         L.as<float>()},
         call.tq * call.hq);
  return {to_dtype(dev, O, out_dtype), L.t};
}

AttentionGradTensors attention_backward(Device& dev, const Tensor& dout, const Tensor& q, const Tensor& k,
                                        const Tensor& v, const Tensor& out, const Tensor& lse,
                                        const AttentionCall& call, DType dq_dtype, DType dk_dtype, DType dv_dtype) {
  Tensor lse32;
  {
    runtime::ScopedCostSink quiet(nullptr);  // part of the op's traffic
    lse32 = lse.to(DType::f32);
  }
  In dO(dev, dout), Q(dev, q), K(dev, k), V(dev, v), O(dev, out), Ls(dev, lse32);
  const Tokens t(dev, call);
  const kernels::AttentionBackwardInputs in{Q.get(),        K.get(),     V.get(),      q.dtype(),
                                            O.get(),        out.dtype(), dO.get(),     dout.dtype(),
                                            Ls.as<float>(), t.tok,       dims_of(call)};
  Out delta(dev, {call.hq, call.tq}, DType::f32), dq_acc(dev, q.shape(), DType::f32);
  Out dQ(dev, q.shape(), dq_dtype);
  launch(dev, kernels::AttentionBackwardQueryKernel{in, delta.as<float>(), dq_acc.as<float>(), dQ.ptr, dq_dtype},
         call.tq * call.hq);
  Out head_dk(dev, k.shape(), DType::f32), head_dv(dev, v.shape(), DType::f32);
  Out dk_acc(dev, k.shape(), DType::f32), dv_acc(dev, v.shape(), DType::f32);
  Out dK(dev, k.shape(), dk_dtype), dV(dev, v.shape(), dv_dtype);
  launch(
      dev,
      kernels::AttentionBackwardKeyKernel{in, delta.as<float>(), head_dk.as<float>(), head_dv.as<float>(),
                                          dk_acc.as<float>(), dv_acc.as<float>(), dK.ptr, dk_dtype, dV.ptr, dv_dtype},
      call.tk * call.hkv);
  return {dQ.t, dK.t, dV.t};
}

// --- in-place merges ------------------------------------------------------------------------

namespace {
i64 stride(const Tensor& t, int d) { return t.strides()[static_cast<std::size_t>(d)]; }
}  // namespace

void merge_lse_(Device& dev, const Tensor& lse, const Tensor& part_lse, const std::vector<i64>& rows) {
  const i64 h = lse.size(0), m = static_cast<i64>(rows.size());
  In P(dev, part_lse);
  const Ids S(dev, Tensor::from_vector(rows, {m}));
  void* base = runtime::device_writable(dev, lse);
  launch(
      dev,
      kernels::MergeLseKernel{base, lse.dtype(), stride(lse, 0), stride(lse, 1), P.get(), part_lse.dtype(), S.get(), m},
      h * m);
  runtime::mark_device_written(dev, lse);
}

void add_corrected_out_(Device& dev, const Tensor& out, const Tensor& lse, const Tensor& part_out,
                        const Tensor& part_lse, const std::vector<i64>& rows) {
  const i64 h = out.size(1), dv = out.size(2), m = static_cast<i64>(rows.size());
  In PO(dev, part_out), PL(dev, part_lse);
  const Ids S(dev, Tensor::from_vector(rows, {m}));
  const void* l = runtime::device_pointer(dev, lse);
  void* base = runtime::device_writable(dev, out);
  launch(dev,
         kernels::CorrectOutKernel{base, out.dtype(), stride(out, 0), stride(out, 1), stride(out, 2), l, lse.dtype(),
                                   stride(lse, 0), stride(lse, 1), PO.get(), part_out.dtype(), PL.get(),
                                   part_lse.dtype(), S.get(), m, h, dv},
         m * h * dv);
  runtime::mark_device_written(dev, out);
}

void add_rows_(Device& dev, const Tensor& acc, const Tensor& part, const std::vector<i64>& rows) {
  const i64 n = acc.size(0), m = static_cast<i64>(rows.size());
  const i64 inner = n == 0 ? 0 : acc.numel() / n;
  In P(dev, part);
  const Ids S(dev, Tensor::from_vector(rows, {m}));
  kernels::AddRowsKernel a{};
  a.acc = runtime::device_writable(dev, acc);
  a.acc_dtype = acc.dtype();
  a.ndim = static_cast<int>(acc.dim());
  for (int d = 0; d < a.ndim; ++d) {
    a.sizes[d] = acc.size(d);
    a.strides[d] = stride(acc, d);
  }
  a.part = P.get();
  a.part_dtype = part.dtype();
  a.sel = S.get();
  a.inner = inner;
  if (inner > 0) launch(dev, a, m * inner);
  runtime::mark_device_written(dev, acc);
}

}  // namespace ranksim::cp::device

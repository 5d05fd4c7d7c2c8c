#include "runtime/tensor/device_ops.h"

#include <string>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops_kernels.h"
#include "sim/error.h"

namespace ranksim::runtime::device_ops {
namespace {

using i64 = std::int64_t;
namespace k = kernels;

using In = DeviceInput;
using Ids = DeviceIndices;
using Out = DeviceOutput;

void run_gemm(Device& dev, const GemmArgs& g) {
  if (g.batch * g.m * g.n == 0) return;
  if (g.k == 0) {
    dev.zero(g.c, static_cast<std::size_t>(g.batch * g.m * g.n) * dtype_size(g.dtype));
    return;
  }
  dev.gemm(g);
  ++dev.stats().kernels;
  ++dev.stats().gemms;
}

GemmArgs gemm_args(const void* a, bool ta, i64 sa, const void* b, bool tb, i64 sb, void* c, i64 sc, DType dt, i64 batch,
                   i64 m, i64 n, i64 kk) {
  return GemmArgs{a, b, c, dt, batch, m, n, kk, ta, tb, sa, sb, sc};
}

}  // namespace

// --- matmul ---------------------------------------------------------------------------------

Tensor matmul(Device& dev, const Tensor& a, const Tensor& b, bool ta, bool tb, const MatmulShape& s) {
  In A(dev, a), B(dev, b);
  Out C(dev, s.out, a.dtype());
  const DType dt = a.dtype();
  if (!s.batched_b && !ta) {
    run_gemm(dev, gemm_args(A.get(), false, 0, B.get(), tb, 0, C.ptr, 0, dt, 1, s.L * s.M, s.N, s.K));
  } else {
    run_gemm(dev, gemm_args(A.get(), ta, s.M * s.K, B.get(), tb, s.batched_b ? s.K * s.N : 0, C.ptr, s.M * s.N, dt, s.L,
                            s.M, s.N, s.K));
  }
  return C.t;
}

MatmulGrads matmul_backward(Device& dev, const Tensor& dc, const Tensor& a, const Tensor& b, bool ta, bool tb,
                            const MatmulShape& s) {
  In dC(dev, dc), A(dev, a), B(dev, b);
  Out dA(dev, a.shape(), a.dtype()), dB(dev, b.shape(), b.dtype());
  const DType dt = a.dtype();
  const i64 L = s.L, M = s.M, N = s.N, K = s.K;
  const i64 sb = s.batched_b ? K * N : 0;
  // dA.
  if (!s.batched_b && !ta) {
    run_gemm(dev, gemm_args(dC.get(), false, 0, B.get(), !tb, 0, dA.ptr, 0, dt, 1, L * M, K, N));
  } else if (ta) {  // dA_l [K, M] = op(B) dC_l^T
    run_gemm(dev, gemm_args(B.get(), tb, sb, dC.get(), true, M * N, dA.ptr, M * K, dt, L, K, M, N));
  } else {  // dA_l [M, K] = dC_l op(B)^T
    run_gemm(dev, gemm_args(dC.get(), false, M * N, B.get(), !tb, sb, dA.ptr, M * K, dt, L, M, K, N));
  }
  // dB: dB [K, N] = op(A)^T dC, or dB [N, K] = dC^T op(A) when b is stored transposed.
  auto db = [&](const void* opa, bool a_stored_t, i64 sa, i64 batch, i64 rows) {
    if (tb) {
      run_gemm(dev, gemm_args(dC.get(), true, rows * N, opa, a_stored_t, sa, dB.ptr, N * K, dt, batch, N, K, rows));
    } else {
      run_gemm(dev, gemm_args(opa, !a_stored_t, sa, dC.get(), false, rows * N, dB.ptr, K * N, dt, batch, K, N, rows));
    }
  };
  if (s.batched_b) {
    db(A.get(), ta, M * K, L, M);
  } else if (!ta) {
    db(A.get(), false, 0, 1, L * M);
  } else {
    // Rows of op(A) from different batches are not one stride apart: gather them as [L*M, K].
    void* ahat = nullptr;
    Tensor keep = device_tensor(dev, {L, M, K}, dt, &ahat);
    k::CopyKernel c{};
    c.src = A.get();
    c.src_dtype = dt;
    c.dst = ahat;
    c.dst_dtype = dt;
    c.ndim = 3;
    c.sizes[0] = L, c.sizes[1] = M, c.sizes[2] = K;
    c.src_strides[0] = M * K, c.src_strides[1] = 1, c.src_strides[2] = M;
    c.dst_strides[0] = M * K, c.dst_strides[1] = K, c.dst_strides[2] = 1;
    launch(dev, c, L * M * K);
    db(ahat, false, 0, 1, L * M);
  }
  return {dA.t, dB.t};
}

// --- elementwise ----------------------------------------------------------------------------

Tensor add(Device& dev, const Tensor& a, const Tensor& b) {
  In A(dev, a), B(dev, b);
  Out C(dev, a.shape(), a.dtype());
  const i64 inner = b.numel();
  if (inner > 0) launch(dev, k::AddKernel{A.get(), B.get(), C.ptr, a.dtype(), inner}, a.numel());
  return C.t;
}

Tensor column_sum(Device& dev, const Tensor& dc, const Shape& b_shape) {
  In G(dev, dc);
  Out DB(dev, b_shape, dc.dtype());
  const i64 inner = shape_numel(b_shape);
  const i64 rows = inner == 0 ? 0 : dc.numel() / inner;
  launch(dev, k::ColumnSumKernel{G.get(), DB.ptr, dc.dtype(), rows, inner}, inner);
  return DB.t;
}

Tensor scale(Device& dev, const Tensor& x, double alpha) {
  In X(dev, x);
  Out Y(dev, x.shape(), x.dtype());
  launch(dev, k::ScaleKernel{X.get(), Y.ptr, x.dtype(), static_cast<float>(alpha)}, x.numel());
  return Y.t;
}

Tensor gelu(Device& dev, const Tensor& x) {
  In X(dev, x);
  Out Y(dev, x.shape(), x.dtype());
  launch(dev, k::GeluKernel{X.get(), Y.ptr, x.dtype()}, x.numel());
  return Y.t;
}

Tensor gelu_backward(Device& dev, const Tensor& dy, const Tensor& x) {
  In DY(dev, dy), X(dev, x);
  Out DX(dev, x.shape(), x.dtype());
  launch(dev, k::GeluBackwardKernel{DY.get(), X.get(), DX.ptr, x.dtype()}, x.numel());
  return DX.t;
}

Tensor swiglu(Device& dev, const Tensor& x) {
  In X(dev, x);
  Shape y_shape = x.shape();
  y_shape.back() /= 2;
  Out Y(dev, y_shape, x.dtype());
  const i64 F = y_shape.back();
  if (F > 0) launch(dev, k::SwigluKernel{X.get(), Y.ptr, x.dtype(), F}, shape_numel(y_shape));
  return Y.t;
}

Tensor swiglu_backward(Device& dev, const Tensor& dy, const Tensor& x) {
  In DY(dev, dy), X(dev, x);
  Out DX(dev, x.shape(), x.dtype());
  const i64 F = dy.size(-1);
  if (F > 0) launch(dev, k::SwigluBackwardKernel{DY.get(), X.get(), DX.ptr, x.dtype(), F}, dy.numel());
  return DX.t;
}

// --- rows -----------------------------------------------------------------------------------

LayerNormResult layer_norm(Device& dev, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  In X(dev, x), W(dev, weight), B(dev, bias);
  const i64 H = x.size(-1);
  const Shape stat(x.shape().begin(), x.shape().end() - 1);
  Out Y(dev, x.shape(), x.dtype()), Mean(dev, stat, DType::f32), Rstd(dev, stat, DType::f32);
  launch(dev,
         k::LayerNormKernel{X.get(), W.get(), B.get(), Y.ptr, Mean.as<float>(), Rstd.as<float>(), x.dtype(), H,
                            static_cast<float>(eps)},
         H == 0 ? 0 : shape_numel(stat));
  return {Y.t, Mean.t, Rstd.t};
}

LayerNormGrads layer_norm_backward(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd) {
  // The saved statistics are f32 (layer_norm's); others are converted on the way in.
  const Tensor mean32 = mean.to(DType::f32), rstd32 = rstd.to(DType::f32);
  In DY(dev, dy), X(dev, x), W(dev, weight), Mu(dev, mean32), Rs(dev, rstd32);
  const i64 H = x.size(-1);
  const i64 rows = H == 0 ? 0 : x.numel() / H;
  Out DX(dev, x.shape(), x.dtype()), DW(dev, {H}, weight.dtype()), DB(dev, {H}, weight.dtype());
  launch(dev,
         k::LayerNormBackwardKernel{DY.get(), X.get(), W.get(), Mu.as<float>(), Rs.as<float>(), DX.ptr, x.dtype(), H},
         rows);
  launch(dev,
         k::LayerNormParamGradKernel{DY.get(), X.get(), Mu.as<float>(), Rs.as<float>(), DW.ptr, DB.ptr, x.dtype(), rows,
                                     H},
         H);
  return {DX.t, DW.t, DB.t};
}

RmsNormResult rms_norm(Device& dev, const Tensor& x, const Tensor& weight, double eps) {
  In X(dev, x), W(dev, weight);
  const i64 H = x.size(-1);
  const Shape stat(x.shape().begin(), x.shape().end() - 1);
  Out Y(dev, x.shape(), x.dtype()), Rstd(dev, stat, DType::f32);
  launch(dev, k::RmsNormKernel{X.get(), W.get(), Y.ptr, Rstd.as<float>(), x.dtype(), H, static_cast<float>(eps)},
         H == 0 ? 0 : shape_numel(stat));
  return {Y.t, Rstd.t};
}

RmsNormGrads rms_norm_backward(Device& dev, const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd) {
  // The saved rstd is f32 (rms_norm's); another dtype is converted on the way in.
  const Tensor rstd32 = rstd.to(DType::f32);
  In DY(dev, dy), X(dev, x), W(dev, weight), Rs(dev, rstd32);
  const i64 H = x.size(-1);
  const i64 rows = H == 0 ? 0 : x.numel() / H;
  Out DX(dev, x.shape(), x.dtype()), DW(dev, {H}, weight.dtype());
  launch(dev, k::RmsNormBackwardKernel{DY.get(), X.get(), W.get(), Rs.as<float>(), DX.ptr, x.dtype(), H}, rows);
  launch(dev, k::RmsNormParamGradKernel{DY.get(), X.get(), Rs.as<float>(), DW.ptr, x.dtype(), rows, H}, H);
  return {DX.t, DW.t};
}

Tensor softmax(Device& dev, const Tensor& x) {
  In X(dev, x);
  Out Y(dev, x.shape(), x.dtype());
  const i64 V = x.size(-1);
  launch(dev, k::SoftmaxKernel{X.get(), Y.ptr, x.dtype(), V}, V == 0 ? 0 : x.numel() / V);
  return Y.t;
}

Tensor softmax_backward(Device& dev, const Tensor& dy, const Tensor& y) {
  In DY(dev, dy), Y(dev, y);
  Out DX(dev, y.shape(), y.dtype());
  const i64 V = y.size(-1);
  launch(dev, k::SoftmaxBackwardKernel{DY.get(), Y.get(), DX.ptr, y.dtype(), V}, V == 0 ? 0 : y.numel() / V);
  return DX.t;
}

// --- embedding ------------------------------------------------------------------------------

Tensor embedding(Device& dev, const Tensor& ids, const Tensor& weight) {
  Ids I(dev, ids);
  In W(dev, weight);
  const i64 H = weight.size(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(H);
  Out O(dev, out_shape, weight.dtype());
  if (H > 0) launch(dev, k::EmbeddingKernel{I.get(), W.get(), O.ptr, weight.dtype(), H}, ids.numel() * H);
  return O.t;
}

Tensor embedding_backward(Device& dev, const Tensor& dy, const Tensor& ids, std::int64_t num_embeddings) {
  Ids I(dev, ids);
  In DY(dev, dy);
  const i64 H = dy.size(-1);
  const Shape w_shape = {num_embeddings, H};
  // Sums in f32, rounded once into dy's dtype (as the CPU op's compute-type buffer).
  Out Acc(dev, w_shape, DType::f32);
  dev.zero(Acc.ptr, static_cast<std::size_t>(num_embeddings * H) * sizeof(float));
  launch(dev, k::EmbeddingBackwardKernel{DY.get(), I.get(), Acc.as<float>(), dy.dtype(), ids.numel(), H}, H);
  if (dy.dtype() == DType::f32) return Acc.t;
  Out DW(dev, w_shape, dy.dtype());
  k::CopyKernel c{};
  c.src = Acc.ptr;
  c.src_dtype = DType::f32;
  c.dst = DW.ptr;
  c.dst_dtype = dy.dtype();
  c.ndim = 1;
  c.sizes[0] = num_embeddings * H;
  c.src_strides[0] = 1;
  c.dst_strides[0] = 1;
  launch(dev, c, num_embeddings * H);
  return DW.t;
}

// --- cross-entropy --------------------------------------------------------------------------

CrossEntropyResult cross_entropy(Device& dev, const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  In X(dev, logits);
  Ids Tg(dev, targets);
  const i64 V = logits.size(-1);
  const i64 rows = targets.numel();
  Out Lse(dev, targets.shape(), DType::f32), RowLoss(dev, targets.shape(), DType::f32);
  Out Loss(dev, {}, logits.dtype());
  launch(dev,
         k::CrossEntropyRowKernel{X.get(), Tg.get(), Lse.as<float>(), RowLoss.as<float>(), logits.dtype(), V,
                                  ignore_index},
         rows);
  launch(dev, k::CrossEntropyMeanKernel{RowLoss.as<float>(), Tg.get(), Loss.ptr, logits.dtype(), rows, ignore_index},
         1);
  return {Loss.t, Lse.t};
}

Tensor cross_entropy_backward(Device& dev, const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, std::int64_t ignore_index, std::int64_t count) {
  const Tensor lse32 = lse.to(DType::f32);
  In X(dev, logits), Lse(dev, lse32);
  Ids Tg(dev, targets);
  const i64 V = logits.size(-1);
  Out DX(dev, logits.shape(), logits.dtype());
  if (count == 0) {
    dev.zero(DX.ptr, DX.t.nbytes());
    return DX.t;
  }
  // The scale as the CPU op computes it: dloss rounded to f32, divided by the count in f32.
  const float g = static_cast<float>(dloss.item()) / static_cast<float>(count);
  launch(dev,
         k::CrossEntropyBackwardKernel{X.get(), Lse.as<float>(), Tg.get(), DX.ptr, logits.dtype(), V, ignore_index, g},
         logits.numel());
  return DX.t;
}

// --- tensor copies --------------------------------------------------------------------------

Device* device_for_copy(std::initializer_list<const Tensor*> tensors,
                        std::initializer_list<const Tensor*> need_resident) {
  Device* dev = compute_device();
  if (!dev) return nullptr;
  for (const Tensor* t : tensors) {
    if (!t->has_data() || !is_device_dtype(t->dtype()) || t->dim() > k::kMaxDims) return nullptr;
  }
  bool resident = false;
  for (const Tensor* t : need_resident) resident = resident || resident_on(*dev, *t);
  if (!resident) return nullptr;
  ++dev->stats().ops;
  return dev;
}

namespace {
k::CopyKernel strided_copy(const void* src, const Tensor& s, void* dst, const Tensor& d) {
  k::CopyKernel c{};
  c.src = src;
  c.src_dtype = s.dtype();
  c.dst = dst;
  c.dst_dtype = d.dtype();
  c.ndim = static_cast<int>(s.dim());
  for (int i = 0; i < c.ndim; ++i) {
    c.sizes[i] = s.size(i);
    c.src_strides[i] = s.strides()[static_cast<std::size_t>(i)];
    c.dst_strides[i] = d.strides()[static_cast<std::size_t>(i)];
  }
  return c;
}
}  // namespace

Tensor copy_to_new(Device& dev, const Tensor& src, DType dtype) {
  const void* from = device_pointer(dev, src);
  Out O(dev, src.shape(), dtype);
  launch(dev, strided_copy(from, src, O.ptr, O.t), src.numel());
  return O.t;
}

void copy_into(Device& dev, const Tensor& dst, const Tensor& src) {
  const void* from = device_pointer(dev, src);
  void* to = device_writable(dev, dst);
  launch(dev, strided_copy(from, src, to, dst), src.numel());
  mark_device_written(dev, dst);
}

// --- cat ------------------------------------------------------------------------------------

Tensor cat(Device& dev, const std::vector<Tensor>& xs, std::int64_t dim, const Shape& out_shape) {
  Out O(dev, out_shape, xs[0].dtype());
  const int nd = static_cast<int>(out_shape.size());
  std::vector<i64> out_strides(out_shape.size());
  i64 stride = 1;
  for (int d = nd - 1; d >= 0; --d) {
    out_strides[static_cast<std::size_t>(d)] = stride;
    stride *= out_shape[static_cast<std::size_t>(d)];
  }
  i64 offset = 0;
  for (const Tensor& x : xs) {
    if (x.numel() > 0) {
      In X(dev, x);  // contiguous
      k::CopyKernel c{};
      c.src = X.get();
      c.src_dtype = x.dtype();
      c.dst = O.ptr;
      c.dst_dtype = x.dtype();
      c.ndim = nd;
      i64 s = 1;
      for (int d = nd - 1; d >= 0; --d) {
        c.sizes[d] = x.size(d);
        c.src_strides[d] = s;
        s *= x.size(d);
        c.dst_strides[d] = out_strides[static_cast<std::size_t>(d)];
      }
      c.dst_offset = offset * out_strides[static_cast<std::size_t>(dim)];
      launch(dev, c, x.numel());
    }
    offset += x.size(dim);
  }
  return O.t;
}

}  // namespace ranksim::runtime::device_ops

// The ops of runtime/tensor/ops.h that index rows by token id: embedding and cross-entropy.
#include "runtime/tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops_common.h"

namespace ranksim::runtime {

using namespace ops_common;  // ops_common.h: the argument checks and dtype plumbing of every op

// --- embedding ------------------------------------------------------------------------------

namespace {
void check_ids(const char* op, const std::int64_t* ids, i64 n, i64 V) {
  for (i64 i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      fail(op, "id " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is outside the table of " +
                   std::to_string(V) + " rows");
    }
  }
}
}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  const char* op = "embedding";
  require_index(op, ids, "ids");
  require_defined(op, weight, "weight");
  if (weight.dim() != 2) fail(op, "weight " + weight.str() + " must be 2-d [V, H]");
  const i64 V = weight.size(0), H = weight.size(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(H);
  Tensor out;
  Device* dev = is_floating(weight.dtype()) ? device_for({&ids, &weight}) : nullptr;
  if (dev) {
    const std::vector<std::int64_t> host_ids = ids.to_vector<std::int64_t>();
    check_ids(op, host_ids.data(), ids.numel(), V);
    out = device_ops::embedding(*dev, ids, weight);
  } else if (!inputs_ready({&ids, &weight})) {
    out = Tensor::shape_only(out_shape, weight.dtype());
  } else {
    In<std::int64_t> I(ids);
    check_ids(op, I.get(), ids.numel(), V);
    Tensor w;
    {
      ScopedCostSink quiet(nullptr);  // part of this op's traffic
      w = weight.contiguous();
    }
    out = Tensor::zeros(out_shape, weight.dtype());
    const auto row_bytes = static_cast<std::size_t>(H) * dtype_size(weight.dtype());
    const auto* src = static_cast<const std::byte*>(w.raw_data());
    auto* dst = static_cast<std::byte*>(out.raw_data());
    for (i64 i = 0; i < ids.numel(); ++i) {
      if (row_bytes) {
        std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes, src + static_cast<std::size_t>(I[i]) * row_bytes,
                    row_bytes);
      }
    }
  }
  charge({op, 0.0, bytes(ids) + 2.0 * bytes(out), weight.dtype()});
  return out;
}

Tensor embedding_backward(const Tensor& dy, const Tensor& ids, std::int64_t num_embeddings) {
  const char* op = "embedding_backward";
  require_index(op, ids, "ids");
  require_floating(op, dy, "dy");
  if (num_embeddings < 0) fail(op, "num_embeddings is negative");
  if (dy.dim() != ids.dim() + 1 || leading(dy.shape()) != ids.shape()) {
    fail(op, "dy " + dy.str() + " must have shape ids' shape + [H]; ids is " + ids.str());
  }
  const i64 H = dy.size(-1);
  const Shape w_shape = {num_embeddings, H};
  Tensor dw;
  if (Device* dev = device_for({&dy, &ids})) {
    const std::vector<std::int64_t> host_ids = ids.to_vector<std::int64_t>();
    check_ids(op, host_ids.data(), ids.numel(), num_embeddings);
    dw = device_ops::embedding_backward(*dev, dy, ids, num_embeddings);
  } else if (!inputs_ready({&dy, &ids})) {
    dw = Tensor::shape_only(w_shape, dy.dtype());
  } else {
    dw = with_compute_type(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<std::int64_t> I(ids);
      check_ids(op, I.get(), ids.numel(), num_embeddings);
      In<T> DY(dy);
      Out<T> DW(w_shape, dy.dtype());
      for (i64 i = 0; i < ids.numel(); ++i) {
        RowMap<T>(DW.get() + I[i] * H, H) += ConstRowMap<T>(DY.get() + i * H, H);
      }
      return DW.finish();
    });
  }
  charge({op, count(dy.numel()), bytes(ids) + bytes(dy) + bytes(dw), dy.dtype()});
  return dw;
}

// --- cross-entropy --------------------------------------------------------------------------

namespace {
void check_ce_shapes(const char* op, const Tensor& logits, const Tensor& targets) {
  require_floating(op, logits, "logits");
  require_index(op, targets, "targets");
  if (logits.dim() < 1) fail(op, "logits " + logits.str() + " needs at least one dim");
  require_shape(op, targets, "targets", leading(logits.shape()));
}

void check_target(const char* op, std::int64_t t, i64 row, i64 V) {
  if (t < 0 || t >= V) {
    fail(op, "target " + std::to_string(t) + " of row " + std::to_string(row) + " is outside [0, " + std::to_string(V) +
                 ") and is not the ignore_index");
  }
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  const char* op = "cross_entropy";
  check_ce_shapes(op, logits, targets);
  const Shape row_shape = targets.shape();
  CrossEntropyResult r;
  if (Device* dev = device_for({&logits, &targets})) {
    const std::vector<std::int64_t> tg = targets.to_vector<std::int64_t>();
    const i64 V = logits.size(-1);
    for (std::size_t i = 0; i < tg.size(); ++i) {
      if (tg[i] != ignore_index) check_target(op, tg[i], static_cast<i64>(i), V);
    }
    r = device_ops::cross_entropy(*dev, logits, targets, ignore_index);
  } else if (!inputs_ready({&logits, &targets})) {
    r.loss = Tensor::shape_only({}, logits.dtype());
    r.lse = Tensor::shape_only(row_shape, compute_dtype(logits.dtype()));
  } else {
    with_compute_type(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(logits);
      In<std::int64_t> Tg(targets);
      Out<T> Loss({}, logits.dtype()), Lse(row_shape, compute_dtype(logits.dtype()));
      const i64 V = logits.size(-1);
      const i64 rows = targets.numel();
      T total = 0;
      i64 n = 0;
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const T* xr = X.get() + r0 * V;
        T lse = -std::numeric_limits<T>::infinity();
        if (V > 0) {
          T m = xr[0];
          for (i64 j = 1; j < V; ++j) m = std::max(m, xr[j]);
          T sum = 0;
          for (i64 j = 0; j < V; ++j) sum += std::exp(xr[j] - m);
          lse = m + std::log(sum);
        }
        Lse[r0] = lse;
        if (Tg[r0] == ignore_index) continue;
        check_target(op, Tg[r0], r0, V);
        total += lse - xr[Tg[r0]];
        ++n;
      }
      Loss[0] = n == 0 ? std::numeric_limits<T>::quiet_NaN() : total / static_cast<T>(n);
      r.loss = Loss.finish();
      r.lse = Lse.finish();
    });
  }
  charge(
      {op, 4.0 * count(logits.numel()), bytes(logits) + bytes(targets) + bytes(r.lse) + bytes(r.loss), logits.dtype()});
  return r;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              std::int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  check_ce_shapes(op, logits, targets);
  require_floating(op, dloss, "dloss");
  require_shape(op, dloss, "dloss", {});
  require_floating(op, lse, "lse");
  require_shape(op, lse, "lse", targets.shape());
  Tensor dx;
  if (Device* dev = device_for({&dloss, &logits, &targets, &lse})) {
    const std::vector<std::int64_t> tg = targets.to_vector<std::int64_t>();
    const i64 V = logits.size(-1);
    i64 n = 0;
    for (std::size_t i = 0; i < tg.size(); ++i) {
      if (tg[i] == ignore_index) continue;
      check_target(op, tg[i], static_cast<i64>(i), V);
      ++n;
    }
    dx = device_ops::cross_entropy_backward(*dev, dloss, logits, targets, lse, ignore_index, n);
  } else if (!inputs_ready({&dloss, &logits, &targets, &lse})) {
    dx = Tensor::shape_only(logits.shape(), logits.dtype());
  } else {
    dx = with_compute_type(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(logits), Lse(lse);
      In<std::int64_t> Tg(targets);
      Out<T> DX(logits.shape(), logits.dtype());
      const i64 V = logits.size(-1);
      const i64 rows = targets.numel();
      i64 n = 0;
      for (i64 r0 = 0; r0 < rows; ++r0) {
        if (Tg[r0] == ignore_index) continue;
        check_target(op, Tg[r0], r0, V);
        ++n;
      }
      if (n > 0) {
        const T g = static_cast<T>(dloss.item()) / static_cast<T>(n);
        for (i64 r0 = 0; r0 < rows; ++r0) {
          if (Tg[r0] == ignore_index) continue;
          const T* xr = X.get() + r0 * V;
          T* dr = DX.get() + r0 * V;
          for (i64 j = 0; j < V; ++j) dr[j] = std::exp(xr[j] - Lse[r0]) * g;
          dr[Tg[r0]] = (std::exp(xr[Tg[r0]] - Lse[r0]) - T(1)) * g;
        }
      }
      return DX.finish();
    });
  }
  charge({op, 3.0 * count(logits.numel()), bytes(logits) + bytes(targets) + bytes(lse) + bytes(dx), logits.dtype()});
  return dx;
}

}  // namespace ranksim::runtime

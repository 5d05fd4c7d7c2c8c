// matmul and its backward on the host: a blocked GEMM whose every output element is the scalar
// loop over k in increasing order (runtime/tensor/ops.h, "Determinism"), and the device path.
#include "runtime/tensor/ops.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "runtime/tensor/device_tensors.h"
#include "runtime/tensor/ops_common.h"

namespace ranksim::runtime {

using namespace ops_common;  // ops_common.h: the argument checks and dtype plumbing of every op

namespace {

// --- GEMM -----------------------------------------------------------------------------------

// Element (i, j) of a matrix at p[i * rs + j * cs].
template <class T>
struct Strided {
  const T* p;
  i64 rs;
  i64 cs;
};

// The widest vector the build targets (RANKSIM_NATIVE: the host's), as a GCC/Clang vector type.
// Arithmetic on it is elementwise IEEE arithmetic, the same as on T; with -ffp-contract=off a
// multiply and an add stay two roundings, never a fused multiply-add.
#if defined(__AVX512F__)
constexpr std::size_t kVectorBytes = 64;
#elif defined(__AVX__)
constexpr std::size_t kVectorBytes = 32;
#else
constexpr std::size_t kVectorBytes = 16;
#endif

template <class T>
struct Vector {
  typedef T type __attribute__((vector_size(kVectorBytes)));
  static constexpr i64 width = static_cast<i64>(kVectorBytes / sizeof(T));
};

// The register tile of the micro-kernel: kTileRows rows of c by kTileVectors vectors of columns,
// all accumulators in registers (6 x 2 = 12 of the 16 AVX registers; AVX-512's 32 registers
// take 6 x 4).
constexpr i64 kTileRows = 6;
constexpr i64 kTileVectors = kVectorBytes == 64 ? 4 : 2;

// c[0..kTileRows) x [0..NR) (row stride ldc) = (first ? 0 : c) + sum over k = 0 .. kc-1, in
// order, of ap[k][r] * bp[k][j]: ap packed [kc][kTileRows], bp packed [kc][NR].
template <class T>
void micro_kernel(i64 kc, const T* ap, const T* bp, T* c, i64 ldc, bool first) {
  using V = typename Vector<T>::type;
  constexpr i64 W = Vector<T>::width;
  constexpr i64 NR = kTileVectors * W;
  V acc[kTileRows][kTileVectors];
  for (i64 r = 0; r < kTileRows; ++r)
    for (i64 v = 0; v < kTileVectors; ++v) {
      if (first) {
        acc[r][v] = V{};
      } else {
        std::memcpy(&acc[r][v], c + r * ldc + v * W, sizeof(V));
      }
    }
  for (i64 k = 0; k < kc; ++k) {
    V b[kTileVectors];
    for (i64 v = 0; v < kTileVectors; ++v) std::memcpy(&b[v], bp + k * NR + v * W, sizeof(V));
    for (i64 r = 0; r < kTileRows; ++r) {
      const T a = ap[k * kTileRows + r];
      for (i64 v = 0; v < kTileVectors; ++v) acc[r][v] = acc[r][v] + b[v] * a;
    }
  }
  for (i64 r = 0; r < kTileRows; ++r)
    for (i64 v = 0; v < kTileVectors; ++v) std::memcpy(c + r * ldc + v * W, &acc[r][v], sizeof(V));
}

// c[M x N] (contiguous, overwritten) = a[M x K] b[K x N], both strided.
//
// Each c[i, j] is accumulated over k = 0 .. K-1 in order, starting from +0, as
// c = c + a[i,k] * b[k,j] with the product and the sum each rounded: the loop of the scalar
// definition. Blocking (GotoBLAS-style: column blocks of b, depth blocks of k in increasing order,
// row blocks of a, packed into contiguous panels, then register tiles) and the vector width only
// change where a partial sum is kept (a register or c, both exact) and how many elements are
// computed at once, never an element's order of operations -- so the bits do not depend on M,
// N, the blocking or the instruction set. Panels are zero-padded to whole tiles; padded rows and
// columns are computed in a scratch tile and dropped.
template <class T>
void gemm(i64 M, i64 N, i64 K, Strided<T> a, Strided<T> b, T* c) {
  constexpr i64 W = Vector<T>::width;
  constexpr i64 MR = kTileRows, NR = kTileVectors * W;
  // Cache blocking: a kDepth x kCols block of b is packed once and reused by every row block
  // of a; a kRows x kDepth block of a is packed once per row block and swept by the tiles.
  constexpr i64 kDepth = 256, kRows = 16 * MR, kCols = 16 * NR;
  if (K == 0) {
    std::fill(c, c + M * N, T(0));
    return;
  }
  std::vector<T> bpack(static_cast<std::size_t>(kDepth * kCols));
  std::vector<T> apack(static_cast<std::size_t>(kDepth * kRows));
  T edge[MR * NR] = {};
  for (i64 j0 = 0; j0 < N; j0 += kCols) {
    const i64 nc = std::min(kCols, N - j0);
    for (i64 k0 = 0; k0 < K; k0 += kDepth) {
      const i64 kc = std::min(kDepth, K - k0);
      const bool first = k0 == 0;
      // b[k0 .. k0+kc, j0 .. j0+nc) as panels [kc][NR], zero past N.
      for (i64 jp = 0; jp < nc; jp += NR) {
        T* dst = bpack.data() + jp * kc;
        const i64 w = std::min(NR, nc - jp);
        const T* src = b.p + k0 * b.rs + (j0 + jp) * b.cs;
        if (b.cs == 1) {  // rows of b are contiguous
          for (i64 k = 0; k < kc; ++k) std::copy(src + k * b.rs, src + k * b.rs + w, dst + k * NR);
        } else {  // columns are (b is a transposed operand): read along them
          for (i64 j = 0; j < w; ++j)
            for (i64 k = 0; k < kc; ++k) dst[k * NR + j] = src[j * b.cs + k * b.rs];
        }
        for (i64 k = 0; k < kc && w < NR; ++k) std::fill(dst + k * NR + w, dst + (k + 1) * NR, T(0));
      }
      for (i64 i0 = 0; i0 < M; i0 += kRows) {
        const i64 mc = std::min(kRows, M - i0);
        // a[i0 .. i0+mc, k0 .. k0+kc) as panels [kc][MR], zero past M.
        for (i64 ip = 0; ip < mc; ip += MR) {
          T* dst = apack.data() + ip * kc;
          const i64 h = std::min(MR, mc - ip);
          for (i64 k = 0; k < kc; ++k) {
            const T* src = a.p + (i0 + ip) * a.rs + (k0 + k) * a.cs;
            for (i64 r = 0; r < h; ++r) dst[k * MR + r] = src[r * a.rs];
            for (i64 r = h; r < MR; ++r) dst[k * MR + r] = T(0);
          }
        }
        for (i64 jp = 0; jp < nc; jp += NR) {
          const i64 w = std::min(NR, nc - jp);
          for (i64 ip = 0; ip < mc; ip += MR) {
            const i64 h = std::min(MR, mc - ip);
            T* ct = c + (i0 + ip) * N + j0 + jp;
            const T* ap = apack.data() + ip * kc;
            const T* bp = bpack.data() + jp * kc;
            if (h == MR && w == NR) {
              micro_kernel<T>(kc, ap, bp, ct, N, first);
              continue;
            }
            for (i64 r = 0; r < h && !first; ++r) std::copy(ct + r * N, ct + r * N + w, edge + r * NR);
            micro_kernel<T>(kc, ap, bp, edge, NR, first);
            for (i64 r = 0; r < h; ++r) std::copy(edge + r * NR, edge + r * NR + w, ct + r * N);
          }
        }
      }
    }
  }
}

// dst[c * rows + r] = src[r * cols + c].
template <class T>
void transpose_into(const T* src, i64 rows, i64 cols, T* dst) {
  for (i64 r = 0; r < rows; ++r) {
    for (i64 c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

using MatmulDims = device_ops::MatmulShape;

// The kernel profile's view of the product (sim/kernel_profile.h); backward: its two GEMMs.
sim::KernelShape gemm_shape(const MatmulDims& d, bool backward) {
  sim::KernelShape s;
  s.cls = sim::KernelClass::gemm;
  s.batch = d.L;
  s.m = d.M;
  s.n = d.N;
  s.k = d.K;
  s.backward = backward;
  return s;
}

MatmulDims matmul_dims(const char* op, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  require_same_dtype(op, a, "a", b, "b");
  if (a.dim() < 2 || b.dim() < 2) {
    fail(op, "needs matrices (2 or more dims), got a " + a.str() + " and b " + b.str());
  }
  MatmulDims d;
  d.M = ta ? a.size(-1) : a.size(-2);
  const i64 ka = ta ? a.size(-2) : a.size(-1);
  d.K = tb ? b.size(-1) : b.size(-2);
  d.N = tb ? b.size(-2) : b.size(-1);
  if (ka != d.K) {
    fail(op, "inner dimensions differ: a " + a.str() + (ta ? " (transposed)" : "") + " has K=" + std::to_string(ka) +
                 ", b " + b.str() + (tb ? " (transposed)" : "") + " has K=" + std::to_string(d.K));
  }
  d.out = leading(leading(a.shape()));
  d.L = shape_numel(d.out);
  d.batched_b = b.dim() > 2;
  if (d.batched_b && leading(leading(b.shape())) != d.out) {
    fail(op,
         "b " + b.str() + " must be 2-d (shared) or have a's leading dims " + shape_str(d.out) + "; a is " + a.str());
  }
  d.out.push_back(d.M);
  d.out.push_back(d.N);
  return d;
}

// The operands as strided matrices, so that no transpose is ever copied: op(A_l) (i, k) and
// op(B_l) (k, j) of batch l.
template <class T>
Strided<T> op_a(const MatmulDims& d, const T* A, bool ta, i64 l) {
  const T* p = A + l * d.M * d.K;
  return ta ? Strided<T>{p, 1, d.M} : Strided<T>{p, d.K, 1};
}
template <class T>
Strided<T> op_b(const MatmulDims& d, const T* B, bool tb, i64 l) {
  const T* p = d.batched_b ? B + l * d.K * d.N : B;
  return tb ? Strided<T>{p, 1, d.K} : Strided<T>{p, d.N, 1};
}
template <class T>
Strided<T> transpose(Strided<T> x) {
  return {x.p, x.cs, x.rs};
}

template <class T>
void matmul_kernel(const MatmulDims& d, const T* A, const T* B, bool ta, bool tb, T* C) {
  if (!d.batched_b && !ta) {  // one product over all L*M rows of a
    gemm<T>(d.L * d.M, d.N, d.K, op_a(d, A, ta, 0), op_b(d, B, tb, 0), C);
    return;
  }
  for (i64 l = 0; l < d.L; ++l) {
    gemm<T>(d.M, d.N, d.K, op_a(d, A, ta, l), op_b(d, B, tb, l), C + l * d.M * d.N);
  }
}

// dA^ = dC op(B)^T and dB^ = op(A)^T dC (summed over the leading dims when b is shared), each
// element a sum over the contracted index in increasing order. When a (b) is stored transposed,
// its gradient is computed as the transposed product, dA = op(B) dC^T (dB = dC^T op(A)): the
// same products (a*b == b*a exactly) summed in the same order, written in the stored layout.
template <class T>
void matmul_backward_kernel(const MatmulDims& d, const T* dC, const T* A, const T* B, bool ta, bool tb, T* dA, T* dB) {
  const i64 M = d.M, N = d.N, K = d.K, MK = M * K, MN = M * N;
  auto dc = [&](i64 l) { return Strided<T>{dC + l * MN, N, 1}; };  // dC_l (i, j)
  if (!d.batched_b && !ta) {
    gemm<T>(d.L * M, K, N, dc(0), transpose(op_b(d, B, tb, 0)), dA);
  } else {
    for (i64 l = 0; l < d.L; ++l) {
      if (ta) {  // dA_l [K, M] = op(B) dC_l^T
        gemm<T>(K, M, N, op_b(d, B, tb, l), transpose(dc(l)), dA + l * MK);
      } else {
        gemm<T>(M, K, N, dc(l), transpose(op_b(d, B, tb, l)), dA + l * MK);
      }
    }
  }
  // One batch (or all rows of a shared b at once): rows of op(A) x, rows of dC y.
  auto db_product = [&](i64 rows, Strided<T> x, Strided<T> y, T* out) {
    if (tb) {
      gemm<T>(N, K, rows, transpose(y), x, out);  // dB [N, K] = dC^T op(A)
    } else {
      gemm<T>(K, N, rows, transpose(x), y, out);  // dB [K, N] = op(A)^T dC
    }
  };
  if (d.batched_b) {
    for (i64 l = 0; l < d.L; ++l) db_product(M, op_a(d, A, ta, l), dc(l), dB + l * K * N);
  } else if (!ta) {
    db_product(d.L * M, op_a(d, A, ta, 0), dc(0), dB);
  } else {
    // Rows of op(A) from different batches are not one stride apart: gather them as [L*M, K].
    std::vector<T> ahat(static_cast<std::size_t>(d.L * MK));
    for (i64 l = 0; l < d.L; ++l) transpose_into(A + l * MK, K, M, ahat.data() + l * MK);
    db_product(d.L * M, Strided<T>{ahat.data(), K, 1}, dc(0), dB);
  }
}

}  // namespace

// --- matmul ---------------------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  const char* op = "matmul";
  const MatmulDims d = matmul_dims(op, a, b, transpose_a, transpose_b);
  Tensor c;
  if (Device* dev = device_for({&a, &b})) {
    c = device_ops::matmul(*dev, a, b, transpose_a, transpose_b, d);
  } else if (!inputs_ready({&a, &b})) {
    c = Tensor::shape_only(d.out, a.dtype());
  } else {
    c = with_compute_type(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> A(a), B(b);
      Out<T> C(d.out, a.dtype());
      matmul_kernel<T>(d, A.get(), B.get(), transpose_a, transpose_b, C.get());
      return C.finish();
    });
  }
  charge({op, 2.0 * count(d.L) * count(d.M) * count(d.N) * count(d.K), bytes(a) + bytes(b) + bytes(c), a.dtype(),
          gemm_shape(d, false)});
  return c;
}

MatmulGrads matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  const char* op = "matmul_backward";
  const MatmulDims d = matmul_dims(op, a, b, transpose_a, transpose_b);
  require_same_dtype(op, dc, "dc", a, "a");
  require_shape(op, dc, "dc", d.out);
  MatmulGrads g;
  if (Device* dev = device_for({&dc, &a, &b})) {
    g = device_ops::matmul_backward(*dev, dc, a, b, transpose_a, transpose_b, d);
  } else if (!inputs_ready({&dc, &a, &b})) {
    g.da = Tensor::shape_only(a.shape(), a.dtype());
    g.db = Tensor::shape_only(b.shape(), b.dtype());
  } else {
    with_compute_type(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> dC(dc), A(a), B(b);
      Out<T> dA(a.shape(), a.dtype()), dB(b.shape(), b.dtype());
      matmul_backward_kernel<T>(d, dC.get(), A.get(), B.get(), transpose_a, transpose_b, dA.get(), dB.get());
      g.da = dA.finish();
      g.db = dB.finish();
    });
  }
  charge({op, 4.0 * count(d.L) * count(d.M) * count(d.N) * count(d.K),
          2.0 * bytes(dc) + bytes(a) + bytes(b) + bytes(g.da) + bytes(g.db), a.dtype(), gemm_shape(d, true)});
  return g;
}

}  // namespace ranksim::runtime

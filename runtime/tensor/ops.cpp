#include "runtime/tensor/ops.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using i64 = std::int64_t;

// Eigen maps over one row of contiguous storage. Elementwise Eigen expressions round exactly as the
// scalar expression would (-ffp-contract=off keeps multiply and add separate), so they do not
// change any result; sums are written as explicit loops to keep their order fixed.
template <class T>
using RowMap = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T>
using ConstRowMap = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

[[noreturn]] void fail(const char* op, const std::string& message) {
  throw Error(std::string(op) + ": " + message);
}

double bytes(const Tensor& t) { return static_cast<double>(t.nbytes()); }
double count(i64 n) { return static_cast<double>(n); }

void require_defined(const char* op, const Tensor& t, const char* name) {
  if (!t.defined()) fail(op, std::string(name) + " is an undefined tensor");
}

void require_floating(const char* op, const Tensor& t, const char* name) {
  require_defined(op, t, name);
  if (!is_floating(t.dtype())) {
    fail(op, std::string(name) + " " + t.str() + " must be floating (f32, f64, bf16 or f16)");
  }
}

void require_same_dtype(const char* op, const Tensor& a, const char* an, const Tensor& b,
                        const char* bn) {
  require_floating(op, a, an);
  require_floating(op, b, bn);
  if (a.dtype() != b.dtype()) {
    fail(op, std::string(an) + " " + a.str() + " and " + bn + " " + b.str() +
                 " have different dtypes; convert one with to()");
  }
}

void require_index(const char* op, const Tensor& t, const char* name) {
  require_defined(op, t, name);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32) {
    fail(op, std::string(name) + " " + t.str() + " must be i64 or i32");
  }
}

void require_shape(const char* op, const Tensor& t, const char* name, const Shape& shape) {
  if (t.shape() != shape) {
    fail(op, std::string(name) + " " + t.str() + " must have shape " + shape_str(shape));
  }
}

// Waits for pending writes on every input; true when all of them hold data.
bool inputs_ready(std::initializer_list<const Tensor*> inputs) {
  bool data = true;
  for (const Tensor* t : inputs) {
    t->wait_pending();
    data = data && t->has_data();
  }
  return data;
}

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// The type arithmetic runs in: double for f64, float for f32/bf16/f16 (fp32 accumulation).
DType compute_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

template <class F>
decltype(auto) with_compute_type(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  return f(float{});
}

// A contiguous array of compute-type values: the tensor's own storage when it already is one,
// else a converted copy.
template <class T>
class In {
 public:
  explicit In(const Tensor& t) {
    if (t.dtype() == dtype_of<T> && t.is_contiguous()) {
      ptr_ = t.read_data<T>();
    } else {
      buf_ = t.to_vector<T>();
      ptr_ = buf_.data();
    }
  }
  const T* get() const { return ptr_; }
  const T& operator[](i64 i) const { return ptr_[i]; }

 private:
  std::vector<T> buf_;
  const T* ptr_ = nullptr;
};

// A zeroed output tensor written through a compute-type array; finish() rounds the array into
// the tensor once when the dtypes differ.
template <class T>
class Out {
 public:
  Out(const Shape& shape, DType dtype) : t_(Tensor::zeros(shape, dtype)) {
    if (dtype == dtype_of<T>) {
      ptr_ = t_.data<T>();
    } else {
      buf_.assign(static_cast<std::size_t>(t_.numel()), T(0));
      ptr_ = buf_.data();
    }
  }
  T* get() { return ptr_; }
  T& operator[](i64 i) { return ptr_[i]; }
  Tensor finish() {
    if (!buf_.empty())
      convert_elements(buf_.data(), dtype_of<T>, t_.raw_data(), t_.dtype(), buf_.size());
    return t_;
  }

 private:
  Tensor t_;
  std::vector<T> buf_;
  T* ptr_ = nullptr;
};

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
        for (i64 k = 0; k < kc && w < NR; ++k)
          std::fill(dst + k * NR + w, dst + (k + 1) * NR, T(0));
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
            for (i64 r = 0; r < h && !first; ++r)
              std::copy(ct + r * N, ct + r * N + w, edge + r * NR);
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
    fail(op, "inner dimensions differ: a " + a.str() + (ta ? " (transposed)" : "") +
                 " has K=" + std::to_string(ka) + ", b " + b.str() + (tb ? " (transposed)" : "") +
                 " has K=" + std::to_string(d.K));
  }
  d.out = leading(leading(a.shape()));
  d.L = shape_numel(d.out);
  d.batched_b = b.dim() > 2;
  if (d.batched_b && leading(leading(b.shape())) != d.out) {
    fail(op, "b " + b.str() + " must be 2-d (shared) or have a's leading dims " + shape_str(d.out) +
                 "; a is " + a.str());
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
void matmul_backward_kernel(const MatmulDims& d, const T* dC, const T* A, const T* B, bool ta,
                            bool tb, T* dA, T* dB) {
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

// --- cat ------------------------------------------------------------------------------------

i64 wrap(const char* op, const Tensor& t, i64 dim) {
  if (dim < -t.dim() || dim >= t.dim()) {
    fail(op, "dimension " + std::to_string(dim) + " is out of range for " + t.str());
  }
  return dim < 0 ? dim + t.dim() : dim;
}

Tensor cat_impl(const char* op, const std::vector<Tensor>& xs, i64 dim) {
  if (xs.empty()) fail(op, "needs at least one tensor");
  for (const Tensor& x : xs) require_defined(op, x, "input");
  const Tensor& first = xs[0];
  const i64 d = wrap(op, first, dim);
  Shape out_shape = first.shape();
  out_shape[static_cast<std::size_t>(d)] = 0;
  bool data = true;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.dtype() != first.dtype() || x.dim() != first.dim()) {
      fail(op, "input " + std::to_string(i) + " " + x.str() + " differs in dtype or rank from " +
                   first.str());
    }
    Shape s = x.shape();
    s[static_cast<std::size_t>(d)] = 0;
    if (s != out_shape) {
      fail(op, "input " + std::to_string(i) + " " + x.str() + " differs from " + first.str() +
                   " outside dimension " + std::to_string(d));
    }
    data = data && x.has_data();
  }
  i64 total = 0;
  for (const Tensor& x : xs) total += x.size(d);
  out_shape[static_cast<std::size_t>(d)] = total;
  Device* dev = nullptr;
  if (data && is_floating(first.dtype()) && first.dim() <= kernels::kMaxDims) {
    std::vector<const Tensor*> inputs;
    for (const Tensor& x : xs) inputs.push_back(&x);
    dev = device_for(inputs);
  }
  for (const Tensor& x : xs) {
    if (!dev) x.wait_pending();
  }
  Tensor out;
  if (dev) {
    out = device_ops::cat(*dev, xs, d, out_shape);
  } else if (!data) {
    out = Tensor::shape_only(out_shape, first.dtype());
  } else {
    out = Tensor::zeros(out_shape, first.dtype());
    ScopedCostSink quiet(nullptr);  // the pieces' copies are this op's, charged once below
    i64 offset = 0;
    for (const Tensor& x : xs) {
      out.narrow(d, offset, x.size(d)).copy_(x);
      offset += x.size(d);
    }
  }
  charge({op, 0.0, 2.0 * bytes(out), first.dtype()});
  return out;
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
  charge({op, 2.0 * count(d.L) * count(d.M) * count(d.N) * count(d.K),
          bytes(a) + bytes(b) + bytes(c), a.dtype()});
  return c;
}

MatmulGrads matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, bool transpose_a,
                            bool transpose_b) {
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
      matmul_backward_kernel<T>(d, dC.get(), A.get(), B.get(), transpose_a, transpose_b, dA.get(),
                                dB.get());
      g.da = dA.finish();
      g.db = dB.finish();
    });
  }
  charge({op, 4.0 * count(d.L) * count(d.M) * count(d.N) * count(d.K),
          2.0 * bytes(dc) + bytes(a) + bytes(b) + bytes(g.da) + bytes(g.db), a.dtype()});
  return g;
}

// --- add ------------------------------------------------------------------------------------

namespace {
// True when b's shape is a's, or a's trailing dims.
bool is_suffix(const Shape& b, const Shape& a) {
  return b.size() <= a.size() &&
         std::equal(b.begin(), b.end(), a.end() - static_cast<std::ptrdiff_t>(b.size()));
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  const char* op = "add";
  require_same_dtype(op, a, "a", b, "b");
  if (!is_suffix(b.shape(), a.shape())) {
    fail(op, "b " + b.str() + " must have a's shape or a's trailing dims; a is " + a.str());
  }
  Tensor c;
  if (Device* dev = device_for({&a, &b})) {
    c = device_ops::add(*dev, a, b);
  } else if (!inputs_ready({&a, &b})) {
    c = Tensor::shape_only(a.shape(), a.dtype());
  } else {
    c = with_compute_type(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> A(a), B(b);
      Out<T> C(a.shape(), a.dtype());
      const i64 inner = b.numel();
      const i64 rows = inner == 0 ? 0 : a.numel() / inner;
      for (i64 r = 0; r < rows; ++r) {
        RowMap<T>(C.get() + r * inner, inner) =
            ConstRowMap<T>(A.get() + r * inner, inner) + ConstRowMap<T>(B.get(), inner);
      }
      return C.finish();
    });
  }
  charge({op, count(a.numel()), bytes(a) + bytes(b) + bytes(c), a.dtype()});
  return c;
}

AddGrads add_backward(const Tensor& dc, const Shape& b_shape) {
  const char* op = "add_backward";
  require_floating(op, dc, "dc");
  if (!is_suffix(b_shape, dc.shape())) {
    fail(op, "b's shape " + shape_str(b_shape) +
                 " must be dc's shape or its trailing dims; dc is " + dc.str());
  }
  if (b_shape == dc.shape()) {
    charge({op, 0.0, 0.0, dc.dtype()});
    return {dc, dc};
  }
  Tensor db;
  if (Device* dev = device_for({&dc})) {
    db = device_ops::column_sum(*dev, dc, b_shape);
  } else if (!inputs_ready({&dc})) {
    db = Tensor::shape_only(b_shape, dc.dtype());
  } else {
    db = with_compute_type(dc.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> G(dc);
      Out<T> DB(b_shape, dc.dtype());
      const i64 inner = shape_numel(b_shape);
      const i64 rows = inner == 0 ? 0 : dc.numel() / inner;
      RowMap<T> acc(DB.get(), inner);
      for (i64 r = 0; r < rows; ++r) acc += ConstRowMap<T>(G.get() + r * inner, inner);
      return DB.finish();
    });
  }
  charge({op, count(dc.numel()), bytes(dc) + bytes(db), dc.dtype()});
  return {dc, db};
}

// --- scale ----------------------------------------------------------------------------------

namespace {
Tensor scale_impl(const char* op, const Tensor& x, double alpha) {
  require_floating(op, x, "x");
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::scale(*dev, x, alpha);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(x.shape(), x.dtype());
      RowMap<T>(Y.get(), x.numel()) = static_cast<T>(alpha) * ConstRowMap<T>(X.get(), x.numel());
      return Y.finish();
    });
  }
  charge({op, count(x.numel()), 2.0 * bytes(x), x.dtype()});
  return y;
}
}  // namespace

Tensor scale(const Tensor& x, double alpha) { return scale_impl("scale", x, alpha); }
Tensor scale_backward(const Tensor& dy, double alpha) {
  return scale_impl("scale_backward", dy, alpha);
}

// --- layer_norm -----------------------------------------------------------------------------

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  require_same_dtype(op, x, "x", weight, "weight");
  require_same_dtype(op, x, "x", bias, "bias");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  const i64 H = x.size(-1);
  require_shape(op, weight, "weight", {H});
  require_shape(op, bias, "bias", {H});
  const Shape stat_shape = leading(x.shape());
  const DType stat_dtype = compute_dtype(x.dtype());
  LayerNormResult r;
  if (Device* dev = device_for({&x, &weight, &bias})) {
    r = device_ops::layer_norm(*dev, x, weight, bias, eps);
  } else if (!inputs_ready({&x, &weight, &bias})) {
    r.y = Tensor::shape_only(x.shape(), x.dtype());
    r.mean = Tensor::shape_only(stat_shape, stat_dtype);
    r.rstd = Tensor::shape_only(stat_shape, stat_dtype);
  } else {
    with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x), W(weight), B(bias);
      Out<T> Y(x.shape(), x.dtype()), Mean(stat_shape, stat_dtype), Rstd(stat_shape, stat_dtype);
      const i64 rows = shape_numel(stat_shape);
      const ConstRowMap<T> w(W.get(), H), b(B.get(), H);
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const T* xr = X.get() + r0 * H;
        T sum = 0;
        for (i64 j = 0; j < H; ++j) sum += xr[j];
        const T mean = sum / static_cast<T>(H);
        T sq = 0;
        for (i64 j = 0; j < H; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
        const T rstd = T(1) / std::sqrt(sq / static_cast<T>(H) + static_cast<T>(eps));
        RowMap<T>(Y.get() + r0 * H, H) = (ConstRowMap<T>(xr, H) - mean) * rstd * w + b;
        Mean[r0] = mean;
        Rstd[r0] = rstd;
      }
      r.y = Y.finish();
      r.mean = Mean.finish();
      r.rstd = Rstd.finish();
    });
  }
  charge({op, 8.0 * count(x.numel()),
          bytes(x) + bytes(weight) + bytes(bias) + bytes(r.y) + bytes(r.mean) + bytes(r.rstd),
          x.dtype()});
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_backward";
  require_same_dtype(op, dy, "dy", x, "x");
  require_same_dtype(op, x, "x", weight, "weight");
  require_floating(op, mean, "mean");
  require_floating(op, rstd, "rstd");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  const i64 H = x.size(-1);
  require_shape(op, dy, "dy", x.shape());
  require_shape(op, weight, "weight", {H});
  const Shape stat_shape = leading(x.shape());
  require_shape(op, mean, "mean", stat_shape);
  require_shape(op, rstd, "rstd", stat_shape);
  LayerNormGrads g;
  if (Device* dev = device_for({&dy, &x, &weight, &mean, &rstd})) {
    g = device_ops::layer_norm_backward(*dev, dy, x, weight, mean, rstd);
  } else if (!inputs_ready({&dy, &x, &weight, &mean, &rstd})) {
    g.dx = Tensor::shape_only(x.shape(), x.dtype());
    g.dweight = Tensor::shape_only({H}, weight.dtype());
    g.dbias = Tensor::shape_only({H}, weight.dtype());
  } else {
    with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using Row = Eigen::Array<T, 1, Eigen::Dynamic>;
      In<T> DY(dy), X(x), W(weight), Mean(mean), Rstd(rstd);
      Out<T> DX(x.shape(), x.dtype()), DW({H}, weight.dtype()), DB({H}, weight.dtype());
      const i64 rows = shape_numel(stat_shape);
      const ConstRowMap<T> w(W.get(), H);
      RowMap<T> dw(DW.get(), H), db(DB.get(), H);
      Row xhat(H), gw(H);
      for (i64 r0 = 0; r0 < rows; ++r0) {
        const ConstRowMap<T> dyr(DY.get() + r0 * H, H);
        const T rs = Rstd[r0];
        xhat = (ConstRowMap<T>(X.get() + r0 * H, H) - Mean[r0]) * rs;
        gw = dyr * w;
        T sum_g = 0, sum_gx = 0;
        for (i64 j = 0; j < H; ++j) {
          sum_g += gw[j];
          sum_gx += gw[j] * xhat[j];
        }
        const T mean_g = sum_g / static_cast<T>(H);
        const T mean_gx = sum_gx / static_cast<T>(H);
        RowMap<T>(DX.get() + r0 * H, H) = rs * ((gw - mean_g) - xhat * mean_gx);
        dw += dyr * xhat;
        db += dyr;
      }
      g.dx = DX.finish();
      g.dweight = DW.finish();
      g.dbias = DB.finish();
    });
  }
  charge({op, 14.0 * count(x.numel()),
          bytes(dy) + bytes(x) + bytes(weight) + bytes(mean) + bytes(rstd) + bytes(g.dx) +
              bytes(g.dweight) + bytes(g.dbias),
          x.dtype()});
  return g;
}

// --- GELU -----------------------------------------------------------------------------------

namespace {
constexpr double kGeluC = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;
}  // namespace

Tensor gelu(const Tensor& x) {
  const char* op = "gelu";
  require_floating(op, x, "x");
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::gelu(*dev, x);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(x.shape(), x.dtype());
      const T c = static_cast<T>(kGeluC), a = static_cast<T>(kGeluA);
      for (i64 i = 0; i < x.numel(); ++i) {
        const T v = X[i];
        const T t = std::tanh(c * (v + a * v * v * v));
        Y[i] = T(0.5) * v * (T(1) + t);
      }
      return Y.finish();
    });
  }
  charge({op, 9.0 * count(x.numel()), 2.0 * bytes(x), x.dtype()});
  return y;
}

Tensor gelu_backward(const Tensor& dy, const Tensor& x) {
  const char* op = "gelu_backward";
  require_same_dtype(op, dy, "dy", x, "x");
  require_shape(op, dy, "dy", x.shape());
  Tensor dx;
  if (Device* dev = device_for({&dy, &x})) {
    dx = device_ops::gelu_backward(*dev, dy, x);
  } else if (!inputs_ready({&dy, &x})) {
    dx = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    dx = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> DY(dy), X(x);
      Out<T> DX(x.shape(), x.dtype());
      const T c = static_cast<T>(kGeluC), a = static_cast<T>(kGeluA);
      for (i64 i = 0; i < x.numel(); ++i) {
        const T v = X[i];
        const T t = std::tanh(c * (v + a * v * v * v));
        const T du = c * (T(1) + T(3) * a * v * v);
        DX[i] = DY[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
      }
      return DX.finish();
    });
  }
  charge({op, 19.0 * count(x.numel()), bytes(dy) + bytes(x) + bytes(dx), x.dtype()});
  return dx;
}

// --- softmax --------------------------------------------------------------------------------

Tensor softmax(const Tensor& x) {
  const char* op = "softmax";
  require_floating(op, x, "x");
  if (x.dim() < 1) fail(op, "x " + x.str() + " needs at least one dim");
  Tensor y;
  if (Device* dev = device_for({&x})) {
    y = device_ops::softmax(*dev, x);
  } else if (!inputs_ready({&x})) {
    y = Tensor::shape_only(x.shape(), x.dtype());
  } else {
    y = with_compute_type(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> X(x);
      Out<T> Y(x.shape(), x.dtype());
      const i64 V = x.size(-1);
      const i64 rows = V == 0 ? 0 : x.numel() / V;
      for (i64 r = 0; r < rows; ++r) {
        const T* xr = X.get() + r * V;
        T* yr = Y.get() + r * V;
        T m = xr[0];
        for (i64 j = 1; j < V; ++j) m = std::max(m, xr[j]);
        T sum = 0;
        for (i64 j = 0; j < V; ++j) {
          yr[j] = std::exp(xr[j] - m);
          sum += yr[j];
        }
        for (i64 j = 0; j < V; ++j) yr[j] = yr[j] / sum;
      }
      return Y.finish();
    });
  }
  charge({op, 5.0 * count(x.numel()), 2.0 * bytes(x), x.dtype()});
  return y;
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  const char* op = "softmax_backward";
  require_same_dtype(op, dy, "dy", y, "y");
  require_shape(op, dy, "dy", y.shape());
  if (y.dim() < 1) fail(op, "y " + y.str() + " needs at least one dim");
  Tensor dx;
  if (Device* dev = device_for({&dy, &y})) {
    dx = device_ops::softmax_backward(*dev, dy, y);
  } else if (!inputs_ready({&dy, &y})) {
    dx = Tensor::shape_only(y.shape(), y.dtype());
  } else {
    dx = with_compute_type(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      In<T> DY(dy), Y(y);
      Out<T> DX(y.shape(), y.dtype());
      const i64 V = y.size(-1);
      const i64 rows = V == 0 ? 0 : y.numel() / V;
      for (i64 r = 0; r < rows; ++r) {
        const T* g = DY.get() + r * V;
        const T* p = Y.get() + r * V;
        T dot = 0;
        for (i64 j = 0; j < V; ++j) dot += g[j] * p[j];
        RowMap<T>(DX.get() + r * V, V) = ConstRowMap<T>(p, V) * (ConstRowMap<T>(g, V) - dot);
      }
      return DX.finish();
    });
  }
  charge({op, 4.0 * count(y.numel()), bytes(dy) + bytes(y) + bytes(dx), y.dtype()});
  return dx;
}

// --- embedding ------------------------------------------------------------------------------

namespace {
void check_ids(const char* op, const std::int64_t* ids, i64 n, i64 V) {
  for (i64 i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= V) {
      fail(op, "id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                   " is outside the table of " + std::to_string(V) + " rows");
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
        std::memcpy(dst + static_cast<std::size_t>(i) * row_bytes,
                    src + static_cast<std::size_t>(I[i]) * row_bytes, row_bytes);
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
    fail(op, "target " + std::to_string(t) + " of row " + std::to_string(row) + " is outside [0, " +
                 std::to_string(V) + ") and is not the ignore_index");
  }
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                 std::int64_t ignore_index) {
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
  charge({op, 4.0 * count(logits.numel()),
          bytes(logits) + bytes(targets) + bytes(r.lse) + bytes(r.loss), logits.dtype()});
  return r;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, std::int64_t ignore_index) {
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
  charge({op, 3.0 * count(logits.numel()), bytes(logits) + bytes(targets) + bytes(lse) + bytes(dx),
          logits.dtype()});
  return dx;
}

// --- cat / split ----------------------------------------------------------------------------

Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim) { return cat_impl("cat", xs, dim); }

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes,
                          std::int64_t dim) {
  const char* op = "split";
  require_defined(op, x, "x");
  const i64 d = wrap(op, x, dim);
  i64 total = 0;
  for (i64 s : sizes) {
    if (s < 0) fail(op, "negative piece size " + std::to_string(s));
    total += s;
  }
  if (total != x.size(d)) {
    fail(op, "piece sizes sum to " + std::to_string(total) + " but dimension " + std::to_string(d) +
                 " of " + x.str() + " has " + std::to_string(x.size(d)));
  }
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  i64 offset = 0;
  for (i64 s : sizes) {
    pieces.push_back(x.narrow(d, offset, s));
    offset += s;
  }
  return pieces;
}

std::vector<Tensor> cat_backward(const Tensor& dy, const std::vector<std::int64_t>& sizes,
                                 std::int64_t dim) {
  return split(dy, sizes, dim);
}

Tensor split_backward(const std::vector<Tensor>& dys, std::int64_t dim) {
  return cat_impl("split_backward", dys, dim);
}

}  // namespace ranksim::runtime

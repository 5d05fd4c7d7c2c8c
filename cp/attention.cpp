#include "cp/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "cp/attention_device.h"
#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_tensors.h"
#include "sim/error.h"

namespace ranksim::cp {
namespace {

using i64 = std::int64_t;
using runtime::DType;
using runtime::ScopedCostSink;
using runtime::Shape;

// Elementwise Eigen expressions round exactly as the scalar loop would (-ffp-contract=off keeps
// multiply and add apart), and each vector op here runs across independent output elements, so
// vectorising never changes a sum's order.
template <class T>
using RowMap = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T>
using ConstRowMap = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

// Query rows that share one visibility mask (built once per tile for all heads), and keys whose
// transposed K (or V) block is reused across those rows while it sits in cache.
constexpr i64 kTile = 32;
constexpr i64 kKeyBlock = 256;

[[noreturn]] void fail(const char* fn, const std::string& message) { throw Error(std::string(fn) + ": " + message); }

double bytes(const Tensor& t) { return static_cast<double>(t.nbytes()); }
double count(i64 n) { return static_cast<double>(n); }
std::size_t idx(i64 n) { return static_cast<std::size_t>(n); }

std::string str(const Tensor& t) { return t.defined() ? t.str() : std::string("(undefined)"); }

void require_floating(const char* fn, const Tensor& t, const char* name) {
  if (!t.defined() || !runtime::is_floating(t.dtype())) {
    fail(fn, std::string(name) + " " + str(t) + " must be a floating tensor (f32, f64, bf16, f16)");
  }
}

void require_shape(const char* fn, const Tensor& t, const char* name, const Shape& shape) {
  if (t.shape() != shape) {
    fail(fn, std::string(name) + " " + t.str() + " must have shape " + runtime::shape_str(shape));
  }
}

// Waits for pending writes on every input; true when all of them hold data.
bool ready(std::initializer_list<const Tensor*> inputs) {
  bool data = true;
  for (const Tensor* t : inputs) {
    t->wait_pending();
    data = data && t->has_data();
  }
  return data;
}

// The compute type: double when any operand is f64, else float (fp32 accumulation).
bool any_f64(std::initializer_list<const Tensor*> ts) {
  return std::any_of(ts.begin(), ts.end(), [](const Tensor* t) { return t->dtype() == DType::f64; });
}

template <class F>
decltype(auto) with_compute_type(bool f64, F&& f) {
  if (f64) return f(double{});
  return f(float{});
}

// A contiguous array of compute-type values: the tensor's own storage when it already is one,
// else a converted copy.
template <class T>
class In {
 public:
  explicit In(const Tensor& t) {
    if (t.dtype() == runtime::dtype_of<T> && t.is_contiguous()) {
      ptr_ = t.data<T>();
    } else {
      buf_ = t.to_vector<T>();
      ptr_ = buf_.data();
    }
  }
  const T* get() const { return ptr_; }

 private:
  std::vector<T> buf_;
  const T* ptr_ = nullptr;
};

// Writes values (row-major, t's shape) into t, which may be any view; the copy is part of the
// calling op and is not charged separately.
template <class T>
void write_back(const Tensor& t, const std::vector<T>& values) {
  ScopedCostSink quiet(nullptr);
  t.copy_(Tensor::from_vector(values, t.shape(), t.dtype()));
}

// Effective window bounds: -1 = unbounded; causal fixes the right bound at 0.
struct Window {
  i64 left;
  i64 right;
};
Window window_of(const AttentionOptions& opts) { return {opts.window_left, opts.causal ? 0 : opts.window_right}; }

bool visible(const Window& w, i64 qp, i64 qs, i64 kp, i64 ks) {
  if (qs < 0 || ks != qs) return false;
  const i64 delta = kp - qp;
  if (w.left >= 0 && delta < -w.left) return false;
  if (w.right >= 0 && delta > w.right) return false;
  return true;
}

void check_tokens(const char* fn, const TokenInfo& t, const char* name, i64 n) {
  if (t.position.size() != t.segment.size()) {
    fail(fn, std::string(name) + " has " + std::to_string(t.position.size()) + " positions but " +
                 std::to_string(t.segment.size()) + " segment ids");
  }
  if (t.size() != n) {
    fail(fn, std::string(name) + " describes " + std::to_string(t.size()) + " tokens, expected " + std::to_string(n));
  }
}

struct Dims {
  i64 tq, tk, hq, hkv, d, dv;
  i64 group() const { return hq / hkv; }
};

// The fused kernel's shape for the kernel profile: the key length a flash-attention benchmark
// would call its sequence length, from the keys each query sees (s for a full mask, (s + 1) / 2 on
// average for a causal one).
sim::KernelShape kernel_shape(const Dims& g, i64 pairs, const AttentionOptions& opts, bool backward) {
  sim::KernelShape s;
  s.cls = sim::KernelClass::attention;
  s.heads = g.hq;
  s.seq_q = g.tq;
  const i64 per_query = g.tq > 0 ? pairs / g.tq : 0;
  s.seq_kv = opts.causal ? std::max<i64>(2 * per_query - 1, 1) : std::max<i64>(per_query, 1);
  s.head_dim = g.d;
  s.causal = opts.causal;
  s.backward = backward;
  return s;
}

Dims check_inputs(const char* fn, const Tensor& q, const Tensor& k, const Tensor& v, const TokenInfo& q_tokens,
                  const TokenInfo& kv_tokens, const AttentionOptions& opts) {
  require_floating(fn, q, "q");
  require_floating(fn, k, "k");
  require_floating(fn, v, "v");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    fail(fn, "q " + q.str() + ", k " + k.str() + " and v " + v.str() + " must share one dtype; convert with to()");
  }
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3) {
    fail(fn, "q " + q.str() + ", k " + k.str() + " and v " + v.str() + " must be 3-d: [tokens, heads, head_dim]");
  }
  Dims g{q.size(0), k.size(0), q.size(1), k.size(1), q.size(2), v.size(2)};
  if (v.size(0) != g.tk || v.size(1) != g.hkv) {
    fail(fn, "v " + v.str() + " must match k " + k.str() + " in tokens and heads");
  }
  if (k.size(2) != g.d) {
    fail(fn, "q " + q.str() + " and k " + k.str() + " must have the same head dim");
  }
  if (g.d < 1) fail(fn, "q " + q.str() + " has an empty head dim");
  if (g.hkv < 1 || g.hq % g.hkv != 0) {
    fail(fn, "hq = " + std::to_string(g.hq) + " query heads are not a multiple of hkv = " + std::to_string(g.hkv) +
                 " key/value heads (grouped-query attention needs " + "hq % hkv == 0)");
  }
  check_tokens(fn, q_tokens, "q_tokens", g.tq);
  check_tokens(fn, kv_tokens, "kv_tokens", g.tk);
  if (opts.window_left < -1 || opts.window_right < -1) {
    fail(fn, "window (" + std::to_string(opts.window_left) + ", " + std::to_string(opts.window_right) +
                 ") must have sizes >= -1 (-1 = unbounded)");
  }
  if (opts.softmax_scale && !std::isfinite(*opts.softmax_scale)) {
    fail(fn, "softmax_scale must be finite");
  }
  if (opts.output_dtype && !runtime::is_floating(*opts.output_dtype)) {
    fail(fn, std::string("output_dtype ") + runtime::dtype_name(*opts.output_dtype) + " must be floating");
  }
  return g;
}

double scale_of(const AttentionOptions& opts, i64 d) {
  return opts.softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
}

// For the query rows [i0, i1): mask[(i - i0) * tk + k] says whether key k is visible to row i,
// any[i - i0] whether row i sees any key, and [lo, hi) bounds the keys any row sees (lo == hi if
// none), so the score products run over that column range only.
struct TileMask {
  std::vector<unsigned char> mask, any;
  i64 lo = 0, hi = 0;

  void build(const Window& w, const TokenInfo& qt, const TokenInfo& kt, i64 i0, i64 i1) {
    const i64 tk = kt.size();
    mask.assign(idx((i1 - i0) * tk), 0);
    any.assign(idx(i1 - i0), 0);
    lo = tk;
    hi = 0;
    for (i64 i = i0; i < i1; ++i) {
      const i64 qp = qt.position[idx(i)], qs = qt.segment[idx(i)];
      if (qs < 0) continue;
      unsigned char* m = mask.data() + (i - i0) * tk;
      for (i64 k = 0; k < tk; ++k) {
        if (visible(w, qp, qs, kt.position[idx(k)], kt.segment[idx(k)])) {
          m[k] = 1;
          any[idx(i - i0)] = 1;
          lo = std::min(lo, k);
          hi = std::max(hi, k + 1);
        }
      }
    }
    if (lo >= hi) lo = hi = 0;
  }
};

// dst[(h * cols + c) * tk + k] = src[(k * heads + h) * cols + c]: per head, the head-dim-major
// copy that lets a score row be accumulated across keys in one vector op per head-dim index.
template <class T>
std::vector<T> per_head_transposed(const T* src, i64 tk, i64 heads, i64 cols) {
  std::vector<T> dst(idx(tk * heads * cols));
  for (i64 k = 0; k < tk; ++k) {
    for (i64 h = 0; h < heads; ++h) {
      for (i64 c = 0; c < cols; ++c) dst[idx((h * cols + c) * tk + k)] = src[(k * heads + h) * cols + c];
    }
  }
  return dst;
}

// Scores of a tile's rows against the key columns [lo, lo + width):
// S[ii * width + c] = sum over e = 0 .. n-1 of a_ii[e] * bt[e * tk + lo + c], accumulated in e
// order, for the rows with any[ii]; row ii's operand starts at a + ii * a_stride. Keys go in
// blocks of kKeyBlock so a block of bt stays in cache across the tile's rows; blocking changes
// when partial sums are stored, never their order.
template <class T>
void tile_scores(const T* a, i64 a_stride, const unsigned char* any, i64 rows, const T* bt, i64 n, i64 tk, i64 lo,
                 i64 width, T* S) {
  for (i64 b0 = 0; b0 < width; b0 += kKeyBlock) {
    const i64 nb = std::min(kKeyBlock, width - b0);
    for (i64 ii = 0; ii < rows; ++ii) {
      if (!any[ii]) continue;
      RowMap<T> row(S + ii * width + b0, nb);
      row.setZero();
      const T* ai = a + ii * a_stride;
      for (i64 e = 0; e < n; ++e) row += ai[e] * ConstRowMap<T>(bt + e * tk + lo + b0, nb);
    }
  }
}

template <class T>
void forward_kernel(const Dims& g, T scale, const Window& w, const TokenInfo& qt, const TokenInfo& kt, const T* Q,
                    const T* K, const T* V, T* O, T* L) {
  const std::vector<T> kt_heads = per_head_transposed(K, g.tk, g.hkv, g.d);
  std::vector<T> S(idx(kTile * g.tk)), sum(idx(kTile));
  TileMask tile;
  for (i64 i0 = 0; i0 < g.tq; i0 += kTile) {
    const i64 i1 = std::min(g.tq, i0 + kTile), rows = i1 - i0;
    tile.build(w, qt, kt, i0, i1);
    const i64 lo = tile.lo, width = tile.hi - tile.lo;
    if (width == 0) continue;  // no row sees a key: out stays 0, lse -inf
    for (i64 j = 0; j < g.hq; ++j) {
      const i64 h = j / g.group();
      tile_scores(Q + (i0 * g.hq + j) * g.d, g.hq * g.d, tile.any.data(), rows, kt_heads.data() + h * g.d * g.tk, g.d,
                  g.tk, lo, width, S.data());
      // Softmax weights exp(s - max) in place, their sum and the lse, per row.
      for (i64 ii = 0; ii < rows; ++ii) {
        if (!tile.any[idx(ii)]) continue;
        const unsigned char* m = tile.mask.data() + ii * g.tk + lo;
        T* s = S.data() + ii * width;
        T mx = -std::numeric_limits<T>::infinity();
        for (i64 c = 0; c < width; ++c) {
          if (m[c]) {
            s[c] *= scale;
            mx = std::max(mx, s[c]);
          }
        }
        T total = 0;
        for (i64 c = 0; c < width; ++c) {
          if (m[c]) {
            s[c] = std::exp(s[c] - mx);
            total += s[c];
          }
        }
        sum[idx(ii)] = total;
        L[j * g.tq + i0 + ii] = mx + std::log(total);
      }
      // out = sum over keys in increasing order of weight * v, key block by key block.
      for (i64 b0 = 0; b0 < width; b0 += kKeyBlock) {
        const i64 b1 = std::min(width, b0 + kKeyBlock);
        for (i64 ii = 0; ii < rows; ++ii) {
          if (!tile.any[idx(ii)]) continue;
          const unsigned char* m = tile.mask.data() + ii * g.tk + lo;
          const T* s = S.data() + ii * width;
          RowMap<T> o(O + ((i0 + ii) * g.hq + j) * g.dv, g.dv);
          for (i64 c = b0; c < b1; ++c) {
            if (m[c]) o += s[c] * ConstRowMap<T>(V + ((lo + c) * g.hkv + h) * g.dv, g.dv);
          }
        }
      }
      for (i64 ii = 0; ii < rows; ++ii) {
        if (tile.any[idx(ii)]) RowMap<T>(O + ((i0 + ii) * g.hq + j) * g.dv, g.dv) /= sum[idx(ii)];
      }
    }
  }
}

template <class T>
void backward_kernel(const Dims& g, T scale, const Window& w, const TokenInfo& qt, const TokenInfo& kt, const T* Q,
                     const T* K, const T* V, const T* O, const T* dO, const T* L, T* dQ, T* dK, T* dV) {
  const std::vector<T> kt_heads = per_head_transposed(K, g.tk, g.hkv, g.d);
  const std::vector<T> vt_heads = per_head_transposed(V, g.tk, g.hkv, g.dv);
  // Per query head, so that each key's gradient sums over queries in increasing order and the
  // heads of a group are added at the end in increasing order, whatever the tiling.
  std::vector<T> dk_head(idx(g.hq * g.tk * g.d), T(0)), dv_head(idx(g.hq * g.tk * g.dv), T(0));
  std::vector<T> P(idx(kTile * g.tk)), dS(idx(kTile * g.tk)), dq(idx(kTile * g.d));
  std::vector<unsigned char> active(idx(kTile));
  TileMask tile;
  for (i64 i0 = 0; i0 < g.tq; i0 += kTile) {
    const i64 i1 = std::min(g.tq, i0 + kTile), rows = i1 - i0;
    tile.build(w, qt, kt, i0, i1);
    const i64 lo = tile.lo, width = tile.hi - tile.lo;
    if (width == 0) continue;
    for (i64 j = 0; j < g.hq; ++j) {
      const i64 h = j / g.group();
      // Rows with an lse of -inf saw nothing anywhere and get no gradient.
      for (i64 ii = 0; ii < rows; ++ii) {
        active[idx(ii)] = tile.any[idx(ii)] && L[j * g.tq + i0 + ii] != -std::numeric_limits<T>::infinity();
      }
      tile_scores(Q + (i0 * g.hq + j) * g.d, g.hq * g.d, active.data(), rows, kt_heads.data() + h * g.d * g.tk, g.d,
                  g.tk, lo, width, P.data());
      tile_scores(dO + (i0 * g.hq + j) * g.dv, g.hq * g.dv, active.data(), rows, vt_heads.data() + h * g.dv * g.tk,
                  g.dv, g.tk, lo, width, dS.data());
      // P = exp(s - lse) and dS = P (dP - D) in place of the scores and dP.
      for (i64 ii = 0; ii < rows; ++ii) {
        if (!active[idx(ii)]) continue;
        const unsigned char* m = tile.mask.data() + ii * g.tk + lo;
        const T* oi = O + ((i0 + ii) * g.hq + j) * g.dv;
        const T* doi = dO + ((i0 + ii) * g.hq + j) * g.dv;
        T delta = 0;
        for (i64 c = 0; c < g.dv; ++c) delta += doi[c] * oi[c];
        const T lse = L[j * g.tq + i0 + ii];
        T* p = P.data() + ii * width;
        T* ds = dS.data() + ii * width;
        for (i64 c = 0; c < width; ++c) {
          if (m[c]) {
            p[c] = std::exp(p[c] * scale - lse);
            ds[c] = p[c] * (ds[c] - delta);
          }
        }
      }
      std::fill(dq.begin(), dq.end(), T(0));
      for (i64 b0 = 0; b0 < width; b0 += kKeyBlock) {
        const i64 b1 = std::min(width, b0 + kKeyBlock);
        for (i64 ii = 0; ii < rows; ++ii) {
          if (!active[idx(ii)]) continue;
          const unsigned char* m = tile.mask.data() + ii * g.tk + lo;
          const T* p = P.data() + ii * width;
          const T* ds = dS.data() + ii * width;
          const ConstRowMap<T> qi(Q + ((i0 + ii) * g.hq + j) * g.d, g.d);
          const ConstRowMap<T> doi(dO + ((i0 + ii) * g.hq + j) * g.dv, g.dv);
          RowMap<T> dqi(dq.data() + ii * g.d, g.d);
          for (i64 c = b0; c < b1; ++c) {
            if (!m[c]) continue;
            const i64 k = lo + c;
            dqi += ds[c] * ConstRowMap<T>(K + (k * g.hkv + h) * g.d, g.d);
            RowMap<T>(dk_head.data() + (j * g.tk + k) * g.d, g.d) += ds[c] * qi;
            RowMap<T>(dv_head.data() + (j * g.tk + k) * g.dv, g.dv) += p[c] * doi;
          }
        }
      }
      for (i64 ii = 0; ii < rows; ++ii) {
        if (active[idx(ii)]) {
          RowMap<T>(dQ + ((i0 + ii) * g.hq + j) * g.d, g.d) = scale * ConstRowMap<T>(dq.data() + ii * g.d, g.d);
        }
      }
    }
  }
  for (i64 k = 0; k < g.tk; ++k) {
    for (i64 h = 0; h < g.hkv; ++h) {
      RowMap<T> dkk(dK + (k * g.hkv + h) * g.d, g.d);
      RowMap<T> dvk(dV + (k * g.hkv + h) * g.dv, g.dv);
      for (i64 j = h * g.group(); j < (h + 1) * g.group(); ++j) {
        dkk += ConstRowMap<T>(dk_head.data() + (j * g.tk + k) * g.d, g.d);
        dvk += ConstRowMap<T>(dv_head.data() + (j * g.tk + k) * g.dv, g.dv);
      }
      dkk *= scale;
    }
  }
}

// The device call of one attention block (cp/attention_device.h).
device::AttentionCall device_call(const Dims& g, const AttentionOptions& opts, const TokenInfo& qt,
                                  const TokenInfo& kt) {
  const Window w = window_of(opts);
  return {&qt.position, &qt.segment, &kt.position, &kt.segment, w.left, w.right, scale_of(opts, g.d),
          g.tq,         g.tk,        g.hq,         g.hkv,       g.d,    g.dv};
}

// The device for an in-place merge: rows distinct (a GPU writes them in parallel), views the
// device kernels address, every operand with data in a device dtype.
// `sel` gets the rows' indices when a device is considered (a shape-only run has none, and only
// counts the rows).
runtime::Device* merge_device(std::initializer_list<const Tensor*> ts, const Rows& rows, i64 n, const char* fn,
                              std::vector<i64>& sel) {
  if (!runtime::compute_device()) return nullptr;
  for (const Tensor* t : ts) {
    if (t->dim() > runtime::kernels::kMaxDims) return nullptr;
  }
  sel = rows.resolve(n, fn);
  std::vector<i64> sorted = sel;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return nullptr;
  return runtime::device_for(ts);
}

template <class T>
T merge_two(T a, T b) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  if (a == neg_inf) return b;  // also covers both -inf, where max - max would be NaN
  if (b == neg_inf) return a;
  const T mx = std::max(a, b), mn = std::min(a, b);
  return mx + std::log1p(std::exp(mn - mx));
}

}  // namespace

// --- TokenInfo --------------------------------------------------------------------------------

TokenInfo TokenInfo::sequence(i64 length, i64 first_position, i64 segment) {
  TokenInfo t;
  for (i64 i = 0; i < length; ++i) t.position.push_back(first_position + i);
  t.segment.assign(idx(std::max<i64>(length, 0)), segment);
  return t;
}

TokenInfo TokenInfo::slice(i64 start, i64 length) const {
  if (start < 0 || length < 0 || start + length > size()) {
    fail("TokenInfo::slice", "tokens [" + std::to_string(start) + ", " + std::to_string(start + length) +
                                 ") are outside [0, " + std::to_string(size()) + ")");
  }
  TokenInfo t;
  t.position.assign(position.begin() + start, position.begin() + start + length);
  t.segment.assign(segment.begin() + start, segment.begin() + start + length);
  return t;
}

TokenInfo TokenInfo::select(const std::vector<i64>& indices) const {
  TokenInfo t;
  for (i64 i : indices) {
    if (i < 0 || i >= size()) {
      fail("TokenInfo::select", "index " + std::to_string(i) + " is outside [0, " + std::to_string(size()) + ")");
    }
    t.position.push_back(position[idx(i)]);
    t.segment.push_back(segment[idx(i)]);
  }
  return t;
}

// --- Visibility -------------------------------------------------------------------------------

bool attention_visible(i64 q_position, i64 q_segment, i64 kv_position, i64 kv_segment, const AttentionOptions& opts) {
  return visible(window_of(opts), q_position, q_segment, kv_position, kv_segment);
}

namespace {

// Tokens of one segment at consecutive positions first, first + 1, ..., first + len - 1.
}  // namespace

namespace detail {
// Tokens first, first + 1, ..., first + len - 1 of segment seg.
struct Run {
  i64 seg, first, len;
};
// A TokenInfo's runs, sorted by segment (stable), and the vectors they were counted from.
struct TokenRuns {
  const i64* position = nullptr;
  const i64* segment = nullptr;
  i64 size = 0;
  std::vector<Run> runs;
};
}  // namespace detail

namespace {

using detail::Run;

// The unpadded tokens as runs: each token joins the previous run when it continues it (same
// segment, next position), as the layouts' chunks and sequences do; any order stays correct, it
// only makes more runs.
std::vector<Run> runs_of(const TokenInfo& t) {
  std::vector<Run> out;
  for (i64 i = 0; i < t.size(); ++i) {
    const i64 seg = t.segment[idx(i)], pos = t.position[idx(i)];
    if (seg < 0) continue;
    if (!out.empty() && out.back().seg == seg && out.back().first + out.back().len == pos) {
      ++out.back().len;
    } else {
      out.push_back({seg, pos, 1});
    }
  }
  return out;
}

// runs_of(t) sorted by segment, counted once per TokenInfo: a model's step asks for the same
// micro-batch's tokens in every layer, forward and backward.
const std::vector<Run>& sorted_runs(const TokenInfo& t) {
  const detail::TokenRuns* c = t.runs_cache.get();
  if (c == nullptr || c->position != t.position.data() || c->segment != t.segment.data() || c->size != t.size()) {
    auto fresh = std::make_shared<detail::TokenRuns>();
    fresh->position = t.position.data();
    fresh->segment = t.segment.data();
    fresh->size = t.size();
    fresh->runs = runs_of(t);
    std::stable_sort(fresh->runs.begin(), fresh->runs.end(), [](const Run& x, const Run& y) { return x.seg < y.seg; });
    t.runs_cache = std::move(fresh);
  }
  return t.runs_cache->runs;
}

// #{(p, k) : a <= p <= last, b <= k < b + m, k - p <= t}: for query p, clamp(p + t - b + 1, 0, m)
// keys, summed in closed form over the part of [a, last] where the clamp is linear and the part
// where it is m.
i64 pairs_up_to(i64 a, i64 last, i64 b, i64 m, i64 t) {
  const i64 n = last - a + 1;
  if (t >= b + m - 1 - a) return n * m;  // every key of every query
  if (t < b - last) return 0;            // none (t is now within the positions' span)
  const i64 c0 = t - b + 1;
  i64 sum = 0;
  const i64 u = std::max(a, 1 - c0), v = std::min(last, m - 1 - c0);
  if (u <= v) sum += (u + v + 2 * c0) * (v - u + 1) / 2;  // (u + c0) + ... + (v + c0)
  const i64 full = std::max(a, m - c0);
  if (full <= last) sum += m * (last - full + 1);
  return sum;
}

}  // namespace

i64 attention_visible_pairs(const TokenInfo& q_tokens, const TokenInfo& kv_tokens, const AttentionOptions& opts) {
  const char* fn = "attention_visible_pairs";
  check_tokens(fn, q_tokens, "q_tokens", q_tokens.size());
  check_tokens(fn, kv_tokens, "kv_tokens", kv_tokens.size());
  const Window w = window_of(opts);
  // Per pair of a query run and a key run of the same segment, the keys with
  // -left <= k - p <= right: pairs up to right, less those up to -left - 1.
  const std::vector<Run>& keys = sorted_runs(kv_tokens);
  i64 total = 0;
  for (const Run& q : sorted_runs(q_tokens)) {
    const auto [from, to] =
        std::equal_range(keys.begin(), keys.end(), q, [](const Run& x, const Run& y) { return x.seg < y.seg; });
    const i64 last = q.first + q.len - 1;
    for (auto k = from; k != to; ++k) {
      const i64 upper = w.right >= 0 ? pairs_up_to(q.first, last, k->first, k->len, w.right) : q.len * k->len;
      const i64 lower = w.left >= 0 ? pairs_up_to(q.first, last, k->first, k->len, -w.left - 1) : 0;
      total += upper - lower;
    }
  }
  return total;
}

// --- Forward / backward -----------------------------------------------------------------------

AttentionResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const TokenInfo& q_tokens,
                                  const TokenInfo& kv_tokens, const AttentionOptions& opts) {
  const char* fn = "attention_forward";
  const Dims g = check_inputs(fn, q, k, v, q_tokens, kv_tokens, opts);
  const bool f64 = q.dtype() == DType::f64;
  const DType out_dtype = opts.output_dtype.value_or(q.dtype());
  const DType lse_dtype = f64 ? DType::f64 : DType::f32;
  const Shape out_shape{g.tq, g.hq, g.dv}, lse_shape{g.hq, g.tq};
  const i64 pairs = attention_visible_pairs(q_tokens, kv_tokens, opts);
  AttentionResult r;
  runtime::Device* dev = runtime::is_device_dtype(out_dtype) ? runtime::device_for({&q, &k, &v}) : nullptr;
  if (dev) {
    std::tie(r.out, r.lse) =
        device::attention_forward(*dev, q, k, v, device_call(g, opts, q_tokens, kv_tokens), out_dtype);
  } else if (!ready({&q, &k, &v})) {
    r.out = Tensor::shape_only(out_shape, out_dtype);
    r.lse = Tensor::shape_only(lse_shape, lse_dtype);
  } else {
    with_compute_type(f64, [&](auto tag) {
      using T = decltype(tag);
      In<T> Q(q), K(k), V(v);
      std::vector<T> o(idx(g.tq * g.hq * g.dv), T(0));
      std::vector<T> l(idx(g.hq * g.tq), -std::numeric_limits<T>::infinity());
      forward_kernel<T>(g, static_cast<T>(scale_of(opts, g.d)), window_of(opts), q_tokens, kv_tokens, Q.get(), K.get(),
                        V.get(), o.data(), l.data());
      r.out = Tensor::from_vector(o, out_shape, out_dtype);
      r.lse = Tensor::from_vector(l, lse_shape, lse_dtype);
    });
  }
  runtime::charge({"attention", 2.0 * count(pairs) * count(g.hq) * count(g.d + g.dv),
                   bytes(q) + bytes(k) + bytes(v) + bytes(r.out) + bytes(r.lse), q.dtype(),
                   kernel_shape(g, pairs, opts, false)});
  return r;
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const TokenInfo& q_tokens,
                                  const TokenInfo& kv_tokens, const AttentionOptions& opts) {
  const char* fn = "attention_backward";
  const Dims g = check_inputs(fn, q, k, v, q_tokens, kv_tokens, opts);
  require_floating(fn, dout, "dout");
  require_floating(fn, out, "out");
  require_floating(fn, lse, "lse");
  require_shape(fn, dout, "dout", {g.tq, g.hq, g.dv});
  require_shape(fn, out, "out", {g.tq, g.hq, g.dv});
  require_shape(fn, lse, "lse", {g.hq, g.tq});
  const bool f64 = q.dtype() == DType::f64;
  const i64 pairs = attention_visible_pairs(q_tokens, kv_tokens, opts);
  AttentionGrads r;
  const DType dq_dtype = opts.output_dtype.value_or(q.dtype());
  const DType dk_dtype = opts.output_dtype.value_or(k.dtype());
  const DType dv_dtype = opts.output_dtype.value_or(v.dtype());
  runtime::Device* dev =
      runtime::is_device_dtype(dq_dtype) && runtime::is_device_dtype(dk_dtype) && runtime::is_device_dtype(dv_dtype)
          ? runtime::device_for({&dout, &q, &k, &v, &out, &lse})
          : nullptr;
  if (dev) {
    const auto grads = device::attention_backward(
        *dev, dout, q, k, v, out, lse, device_call(g, opts, q_tokens, kv_tokens), dq_dtype, dk_dtype, dv_dtype);
    r.dq = grads.dq;
    r.dk = grads.dk;
    r.dv = grads.dv;
  } else if (!ready({&dout, &q, &k, &v, &out, &lse})) {
    r.dq = Tensor::shape_only(q.shape(), dq_dtype);
    r.dk = Tensor::shape_only(k.shape(), dk_dtype);
    r.dv = Tensor::shape_only(v.shape(), dv_dtype);
  } else {
    with_compute_type(f64, [&](auto tag) {
      using T = decltype(tag);
      In<T> Q(q), K(k), V(v), O(out), dO(dout), L(lse);
      std::vector<T> dq(idx(q.numel()), T(0)), dk(idx(k.numel()), T(0)), dv(idx(v.numel()), T(0));
      backward_kernel<T>(g, static_cast<T>(scale_of(opts, g.d)), window_of(opts), q_tokens, kv_tokens, Q.get(), K.get(),
                         V.get(), O.get(), dO.get(), L.get(), dq.data(), dk.data(), dv.data());
      r.dq = Tensor::from_vector(dq, q.shape(), dq_dtype);
      r.dk = Tensor::from_vector(dk, k.shape(), dk_dtype);
      r.dv = Tensor::from_vector(dv, v.shape(), dv_dtype);
    });
  }
  runtime::charge(
      {"attention_backward", 2.0 * count(pairs) * count(g.hq) * count(3 * g.d + 2 * g.dv),
       bytes(dout) + bytes(q) + bytes(k) + bytes(v) + bytes(out) + bytes(lse) + bytes(r.dq) + bytes(r.dk) + bytes(r.dv),
       q.dtype(), kernel_shape(g, pairs, opts, true)});
  return r;
}

// --- Merging ----------------------------------------------------------------------------------

Rows Rows::all() { return Rows(); }

Rows Rows::range(i64 start, i64 length) {
  Rows r;
  r.kind_ = Kind::range;
  r.start_ = start;
  r.length_ = length;
  return r;
}

Rows Rows::list(std::vector<i64> indices) {
  Rows r;
  r.kind_ = Kind::list;
  r.indices_ = std::move(indices);
  return r;
}

std::int64_t Rows::count(i64 n, const char* fn) const {
  switch (kind_) {
    case Kind::all:
      return n;
    case Kind::range:
      if (start_ < 0 || length_ < 0 || start_ + length_ > n) {
        fail(fn, "rows [" + std::to_string(start_) + ", " + std::to_string(start_ + length_) +
                     ") are outside the accumulator's " + std::to_string(n) + " rows");
      }
      return length_;
    case Kind::list:
      for (i64 i : indices_) {
        if (i < 0 || i >= n) {
          fail(fn, "row " + std::to_string(i) + " is outside the accumulator's " + std::to_string(n) + " rows");
        }
      }
      return static_cast<i64>(indices_.size());
  }
  return 0;
}

std::vector<i64> Rows::resolve(i64 n, const char* fn) const {
  const i64 m = count(n, fn);
  if (kind_ == Kind::list) return indices_;
  std::vector<i64> out(static_cast<std::size_t>(m));
  std::iota(out.begin(), out.end(), kind_ == Kind::range ? start_ : 0);
  return out;
}

void merge_lse_(const Tensor& lse, const Tensor& part_lse, const Rows& rows) {
  const char* fn = "merge_lse_";
  require_floating(fn, lse, "lse");
  require_floating(fn, part_lse, "part_lse");
  if (lse.dim() != 2) fail(fn, "lse " + lse.str() + " must be 2-d [heads, rows]");
  const i64 h = lse.size(0), n = lse.size(1);
  const i64 m = rows.count(n, fn);
  require_shape(fn, part_lse, "part_lse", {h, m});
  std::vector<i64> sel;
  if (runtime::Device* dev = merge_device({&lse, &part_lse}, rows, n, fn, sel)) {
    device::merge_lse_(*dev, lse, part_lse, sel);
  } else if (ready({&lse, &part_lse})) {
    sel = rows.resolve(n, fn);
    with_compute_type(any_f64({&lse, &part_lse}), [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> acc = lse.to_vector<T>();
      const std::vector<T> part = part_lse.to_vector<T>();
      for (i64 hh = 0; hh < h; ++hh) {
        for (i64 i = 0; i < m; ++i) {
          T& a = acc[idx(hh * n + sel[idx(i)])];
          a = merge_two(a, part[idx(hh * m + i)]);
        }
      }
      write_back(lse, acc);
    });
  }
  const double touched = count(h * m) * static_cast<double>(runtime::dtype_size(lse.dtype()));
  runtime::charge({"attention_merge_lse", 5.0 * count(h * m), bytes(part_lse) + 2.0 * touched, lse.dtype()});
}

void add_corrected_out_(const Tensor& out, const Tensor& lse, const Tensor& part_out, const Tensor& part_lse,
                        const Rows& rows) {
  const char* fn = "add_corrected_out_";
  require_floating(fn, out, "out");
  require_floating(fn, lse, "lse");
  require_floating(fn, part_out, "part_out");
  require_floating(fn, part_lse, "part_lse");
  if (out.dim() != 3) fail(fn, "out " + out.str() + " must be 3-d [rows, heads, dv]");
  const i64 n = out.size(0), h = out.size(1), dv = out.size(2);
  require_shape(fn, lse, "lse", {h, n});
  const i64 m = rows.count(n, fn);
  require_shape(fn, part_out, "part_out", {m, h, dv});
  require_shape(fn, part_lse, "part_lse", {h, m});
  std::vector<i64> sel;
  if (runtime::Device* dev = merge_device({&out, &lse, &part_out, &part_lse}, rows, n, fn, sel)) {
    device::add_corrected_out_(*dev, out, lse, part_out, part_lse, sel);
  } else if (ready({&out, &lse, &part_out, &part_lse})) {
    sel = rows.resolve(n, fn);
    with_compute_type(any_f64({&out, &lse, &part_out, &part_lse}), [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> acc = out.to_vector<T>();
      const std::vector<T> final_lse = lse.to_vector<T>();
      const std::vector<T> po = part_out.to_vector<T>();
      const std::vector<T> pl = part_lse.to_vector<T>();
      for (i64 i = 0; i < m; ++i) {
        const i64 row = sel[idx(i)];
        for (i64 hh = 0; hh < h; ++hh) {
          const T part = pl[idx(hh * m + i)];
          if (part == -std::numeric_limits<T>::infinity()) continue;  // saw nothing: adds 0
          const T factor = std::exp(part - final_lse[idx(hh * n + row)]);
          RowMap<T>(acc.data() + (row * h + hh) * dv, dv) += ConstRowMap<T>(po.data() + (i * h + hh) * dv, dv) * factor;
        }
      }
      write_back(out, acc);
    });
  }
  const double touched = count(m * h * dv) * static_cast<double>(runtime::dtype_size(out.dtype()));
  runtime::charge({"attention_correct_out", count(m * h) * count(2 * dv + 1),
                   bytes(part_out) + bytes(part_lse) + 2.0 * touched, out.dtype()});
}

AttentionResult merge_attention(const std::vector<AttentionResult>& parts) {
  const char* fn = "merge_attention";
  if (parts.empty()) fail(fn, "needs at least one partial result");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    require_floating(fn, parts[i].out, "out");
    require_floating(fn, parts[i].lse, "lse");
    if (parts[i].out.shape() != parts[0].out.shape() || parts[i].lse.shape() != parts[0].lse.shape()) {
      fail(fn, "part " + std::to_string(i) + " (out " + parts[i].out.str() + ", lse " + parts[i].lse.str() +
                   ") differs in shape from part 0 (out " + parts[0].out.str() + ", lse " + parts[0].lse.str() + ")");
    }
  }
  AttentionResult r;
  bool data = true;
  for (const AttentionResult& p : parts) data = ready({&p.out, &p.lse}) && data;
  if (!data) {
    r.out = Tensor::shape_only(parts[0].out.shape(), parts[0].out.dtype());
    r.lse = Tensor::shape_only(parts[0].lse.shape(), parts[0].lse.dtype());
  } else {
    ScopedCostSink quiet(nullptr);  // the merges below charge the work
    r.out = Tensor::zeros(parts[0].out.shape(), parts[0].out.dtype());
    r.lse = parts[0].lse.clone();
  }
  for (std::size_t i = 1; i < parts.size(); ++i) merge_lse_(r.lse, parts[i].lse);
  for (const AttentionResult& p : parts) add_corrected_out_(r.out, r.lse, p.out, p.lse);
  return r;
}

void add_rows_(const Tensor& acc, const Tensor& part, const Rows& rows) {
  const char* fn = "add_rows_";
  require_floating(fn, acc, "acc");
  require_floating(fn, part, "part");
  if (acc.dim() < 1) fail(fn, "acc " + acc.str() + " needs a row dimension");
  const i64 n = acc.size(0);
  const i64 m = rows.count(n, fn);
  Shape want = acc.shape();
  want[0] = m;
  require_shape(fn, part, "part", want);
  const i64 inner = n == 0 ? 0 : acc.numel() / n;
  std::vector<i64> sel;
  if (runtime::Device* dev = merge_device({&acc, &part}, rows, n, fn, sel)) {
    device::add_rows_(*dev, acc, part, sel);
  } else if (ready({&acc, &part})) {
    sel = rows.resolve(n, fn);
    with_compute_type(any_f64({&acc, &part}), [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> a = acc.to_vector<T>();
      const std::vector<T> p = part.to_vector<T>();
      for (i64 i = 0; i < m; ++i) {
        RowMap<T>(a.data() + sel[idx(i)] * inner, inner) += ConstRowMap<T>(p.data() + i * inner, inner);
      }
      write_back(acc, a);
    });
  }
  const double touched = count(m * inner) * static_cast<double>(runtime::dtype_size(acc.dtype()));
  runtime::charge({"attention_add_rows", count(m * inner), bytes(part) + 2.0 * touched, acc.dtype()});
}

}  // namespace ranksim::cp

// A float64 implementation of the decoder family's contract (models/transformer.h: embedding and
// learned positions, LayerNorm / RMSNorm, multi-head and grouped-query attention with RoPE and the
// BSHD / THD masks, GELU / SwiGLU, biases, the mean cross-entropy over the labelled tokens),
// written here from the contract's formulas and not from the model's code, for the tests to hold
// the model against (family_test.cpp, float64_training_test.cpp).
//
// The forward is one template over its scalar: double for the plain run (Reference), and Var for
// a run that records every scalar operation on a Tape, whose reverse sweep gives the exact
// gradient of the loss with respect to every parameter (loss_and_gradients) -- reverse-mode
// automatic differentiation, so no backward is written by hand: the gradients are those of
// exactly the forward that family_test.cpp holds against the model, and float64_training_test.cpp
// checks them against central finite differences of the plain run. A Var computes its value with
// the same double operation as the plain run, so both runs give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cp/context_parallel.h"
#include "models/batch.h"
#include "models/transformer.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::models::testing {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;

inline Params to_params(const Weights& w) {
  Params p;
  for (const auto& [name, t] : w) p[name] = t.to(runtime::DType::f64).to_vector<double>();
  return p;
}

// --- Reverse-mode differentiation ----------------------------------------------------------------

// The operations of one forward run, in the order they ran: each node is one scalar result with
// up to two operands (their nodes, -1 for none) and its partial derivatives with respect to them.
// A parameter is a node without operands. Nodes are kept in fixed-size chunks, so that a long run
// never copies the nodes it has already recorded.
class Tape {
 public:
  std::int32_t push(std::int32_t a, double da, std::int32_t b, double db) {
    if (size_ == static_cast<std::size_t>(INT32_MAX)) throw std::runtime_error("tape: too many operations");
    if (size_ % kChunk == 0) {
      chunks_.emplace_back();
      chunks_.back().reserve(kChunk);
    }
    chunks_.back().push_back({a, b, da, db});
    return static_cast<std::int32_t>(size_++);
  }

  // d out / d node for every node: the chain rule swept from out back to the first node. A node
  // comes after its operands, so its adjoint is complete when the sweep reaches it.
  Vec adjoints(std::int32_t out) const {
    Vec adj(size_, 0.0);
    adj.at(static_cast<std::size_t>(out)) = 1.0;
    for (std::size_t i = static_cast<std::size_t>(out) + 1; i-- > 0;) {
      const Node& n = chunks_[i / kChunk][i % kChunk];
      const double g = adj[i];
      if (g == 0.0) continue;
      if (n.a >= 0) adj[static_cast<std::size_t>(n.a)] += n.da * g;
      if (n.b >= 0) adj[static_cast<std::size_t>(n.b)] += n.db * g;
    }
    return adj;
  }

 private:
  struct Node {
    std::int32_t a, b;
    double da, db;
  };
  static constexpr std::size_t kChunk = std::size_t{1} << 16;
  std::vector<std::vector<Node>> chunks_;
  std::size_t size_ = 0;
};

// A scalar of a recorded run: its value and its node on the tape, or a constant (no tape). An
// operation on constants gives a constant and records nothing, so the tape holds only what depends
// on the parameters; an operation whose derivative needs no node (a constant added, a product with
// a constant zero) records nothing either.
struct Var {
  double v = 0;
  std::int32_t node = -1;
  Tape* tape = nullptr;

  Var() = default;
  Var(double value) : v(value) {}  // a constant; implicit, as the plain run's literals are doubles
  Var(double value, std::int32_t n, Tape* t) : v(value), node(n), tape(t) {}

  bool constant() const { return tape == nullptr; }
};

// A result of value `value` with partials da, db with respect to a and b.
inline Var record(double value, const Var& a, double da, const Var& b, double db) {
  Tape* t = a.constant() ? b.tape : a.tape;
  if (t == nullptr) return Var(value);
  return Var(value, t->push(a.node, da, b.node, db), t);
}
inline Var record(double value, const Var& a, double da) { return record(value, a, da, Var(), 0.0); }

inline Var operator+(const Var& a, const Var& b) {
  if (a.constant()) return Var(a.v + b.v, b.node, b.tape);
  if (b.constant()) return Var(a.v + b.v, a.node, a.tape);
  return record(a.v + b.v, a, 1.0, b, 1.0);
}
inline Var operator-(const Var& a) { return record(-a.v, a, -1.0); }
inline Var operator-(const Var& a, const Var& b) {
  if (b.constant()) return Var(a.v - b.v, a.node, a.tape);
  return record(a.v - b.v, a, 1.0, b, -1.0);
}
inline Var operator*(const Var& a, const Var& b) {
  // 0 * x is 0 for every finite x: no derivative to carry (masked attention weights).
  if ((a.constant() && a.v == 0.0) || (b.constant() && b.v == 0.0)) return Var(a.v * b.v);
  return record(a.v * b.v, a, b.v, b, a.v);
}
inline Var operator/(const Var& a, const Var& b) {
  if (a.constant() && a.v == 0.0) return Var(a.v / b.v);
  const double q = a.v / b.v;
  return record(q, a, 1.0 / b.v, b, -q / b.v);
}
inline Var& operator+=(Var& a, const Var& b) { return a = a + b; }
inline Var& operator-=(Var& a, const Var& b) { return a = a - b; }
inline Var& operator*=(Var& a, const Var& b) { return a = a * b; }
inline Var& operator/=(Var& a, const Var& b) { return a = a / b; }

// Found by argument-dependent lookup beside std's, which the forward brings in with `using`.
inline Var exp(const Var& x) {
  const double e = std::exp(x.v);
  return record(e, x, e);
}
inline Var log(const Var& x) { return record(std::log(x.v), x, 1.0 / x.v); }
inline Var sqrt(const Var& x) {
  const double s = std::sqrt(x.v);
  return record(s, x, 0.5 / s);
}
inline Var tanh(const Var& x) {
  const double t = std::tanh(x.v);
  return record(t, x, 1.0 - t * t);
}

// The value, as a constant: for the maximum subtracted inside a softmax or a log-sum-exp, which
// the result does not depend on (its derivative cancels exactly), so it is carried as a constant.
inline double value_of(double x) { return x; }
inline double value_of(const Var& x) { return x.v; }

// --- The forward ---------------------------------------------------------------------------------

// A row-major [rows, cols] matrix.
template <class T>
struct BasicMat {
  std::int64_t rows, cols;
  std::vector<T> v;
  BasicMat(std::int64_t r, std::int64_t c) : rows(r), cols(c), v(static_cast<std::size_t>(r * c), T(0.0)) {}
  T& operator()(std::int64_t r, std::int64_t c) { return v[static_cast<std::size_t>(r * cols + c)]; }
  const T& operator()(std::int64_t r, std::int64_t c) const { return v[static_cast<std::size_t>(r * cols + c)]; }
};
using Mat = BasicMat<double>;

// One token of the batch in global order: id, label, position within its sequence, sequence.
struct Token {
  std::int64_t id, label, pos, seq;
};

inline std::vector<Token> tokens_of(const Batch& b) {
  using i64 = std::int64_t;
  std::vector<Token> out;
  const std::vector<i64> ids = b.input_ids.to(runtime::DType::i64).to_vector<i64>();
  const std::vector<i64> labels = b.labels.to(runtime::DType::i64).to_vector<i64>();
  if (b.format == cp::Format::bshd) {
    const i64 s = b.input_ids.size(1);
    for (std::size_t i = 0; i < ids.size(); ++i)
      out.push_back({ids[i], labels[i], static_cast<i64>(i) % s, static_cast<i64>(i) / s});
  } else {
    for (std::size_t q = 0; q + 1 < b.cu_seqlens.size(); ++q) {
      for (i64 t = b.cu_seqlens[q]; t < b.cu_seqlens[q + 1]; ++t) {
        const std::size_t i = static_cast<std::size_t>(t);
        out.push_back({ids[i], labels[i], t - b.cu_seqlens[q], static_cast<i64>(q)});
      }
    }
  }
  return out;
}

// The reference's parameters: by name, of exactly numel elements (a missing or misshapen weight
// fails the test through the exception).
template <class T>
const std::vector<T>& param(const std::map<std::string, std::vector<T>>& p, const std::string& name,
                            std::int64_t numel) {
  auto it = p.find(name);
  if (it == p.end()) throw std::runtime_error("reference: no parameter '" + name + "'");
  if (static_cast<std::int64_t>(it->second.size()) != numel)
    throw std::runtime_error("reference: '" + name + "' has " + std::to_string(it->second.size()) + " elements, not " +
                             std::to_string(numel));
  return it->second;
}

template <class T>
struct BasicReference {
  using i64 = std::int64_t;
  using size_t = std::size_t;
  using Values = std::vector<T>;
  using M = BasicMat<T>;

  const TransformerConfig& c;
  const std::map<std::string, Values>& p;

  std::string block(i64 layer, const std::string& name) const {
    return c.layers == 1 ? "layer." + name : "layers." + std::to_string(layer) + "." + name;
  }

  // y = x W^T (+ b), W [out, in].
  M linear(const M& x, const std::string& name, i64 out) const {
    const Values& w = param(p, name + ".weight", out * x.cols);
    const Values* b = c.bias ? &param(p, name + ".bias", out) : nullptr;
    M y(x.rows, out);
    for (i64 r = 0; r < x.rows; ++r) {
      for (i64 o = 0; o < out; ++o) {
        T s = b ? (*b)[static_cast<size_t>(o)] : T(0.0);
        for (i64 i = 0; i < x.cols; ++i) s += x(r, i) * w[static_cast<size_t>(o * x.cols + i)];
        y(r, o) = s;
      }
    }
    return y;
  }

  M norm(const M& x, const std::string& name) const {
    using std::sqrt;
    const i64 h = x.cols;
    const Values& w = param(p, name + ".weight", h);
    const Values* b = c.norm == Norm::layernorm ? &param(p, name + ".bias", h) : nullptr;
    M y(x.rows, h);
    for (i64 r = 0; r < x.rows; ++r) {
      T mean(0.0), ms(0.0);
      if (b) {
        for (i64 j = 0; j < h; ++j) mean += x(r, j);
        mean /= static_cast<double>(h);
      }
      for (i64 j = 0; j < h; ++j) ms += (x(r, j) - mean) * (x(r, j) - mean);
      ms /= static_cast<double>(h);
      for (i64 j = 0; j < h; ++j) {
        y(r, j) = (x(r, j) - mean) / sqrt(ms + c.layer_norm_eps) * w[static_cast<size_t>(j)] +
                  (b ? (*b)[static_cast<size_t>(j)] : T(0.0));
      }
    }
    return y;
  }

  // Rotate-half RoPE on every head of x [n, heads * head_dim].
  void rope(M& x, const std::vector<Token>& tok) const {
    const i64 d = c.head_dim;
    for (i64 r = 0; r < x.rows; ++r) {
      for (i64 h = 0; h < x.cols / d; ++h) {
        for (i64 i = 0; i < d / 2; ++i) {
          const double th = static_cast<double>(tok[static_cast<size_t>(r)].pos) *
                            std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d));
          const T a = x(r, h * d + i), b = x(r, h * d + i + d / 2);
          x(r, h * d + i) = a * std::cos(th) - b * std::sin(th);
          x(r, h * d + i + d / 2) = b * std::cos(th) + a * std::sin(th);
        }
      }
    }
  }

  struct Out {
    M logits;  // [tokens, vocab], global order
    T loss;
  };

  Out run(const std::vector<Token>& tok, Mask mask) const {
    using std::exp;
    using std::log;
    using std::tanh;
    const i64 n = static_cast<i64>(tok.size()), h = c.hidden, d = c.head_dim, nh = c.heads;
    const i64 kv = c.kv_heads == 0 ? c.heads : c.kv_heads;
    M x(n, h);
    const Values& emb = param(p, "embedding.weight", c.vocab * h);
    const Values* pos =
        c.positions == Positions::learned ? &param(p, "position_embedding.weight", c.max_positions * h) : nullptr;
    for (i64 r = 0; r < n; ++r) {
      const Token& t = tok[static_cast<size_t>(r)];
      for (i64 j = 0; j < h; ++j)
        x(r, j) =
            emb.at(static_cast<size_t>(t.id * h + j)) + (pos ? pos->at(static_cast<size_t>(t.pos * h + j)) : T(0.0));
    }
    for (i64 l = 0; l < c.layers; ++l) {
      const M a = norm(x, block(l, "ln1"));
      M q(n, nh * d), k(n, kv * d), v(n, kv * d);
      if (kv == nh) {
        const M qkv = linear(a, block(l, "qkv"), 3 * nh * d);
        for (i64 r = 0; r < n; ++r) {
          for (i64 j = 0; j < nh * d; ++j) {
            q(r, j) = qkv(r, j);
            k(r, j) = qkv(r, nh * d + j);
            v(r, j) = qkv(r, 2 * nh * d + j);
          }
        }
      } else {
        q = linear(a, block(l, "q"), nh * d);
        k = linear(a, block(l, "k"), kv * d);
        v = linear(a, block(l, "v"), kv * d);
      }
      if (c.positions == Positions::rope) {
        rope(q, tok);
        rope(k, tok);
      }
      M att(n, nh * d);
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      for (i64 head = 0; head < nh; ++head) {
        const i64 g = head / (nh / kv);  // its key/value head
        for (i64 r = 0; r < n; ++r) {
          Values s(static_cast<size_t>(n), T(-INFINITY));
          double m = -INFINITY;
          for (i64 t = 0; t < n; ++t) {
            const Token &tq = tok[static_cast<size_t>(r)], &tk = tok[static_cast<size_t>(t)];
            if (tq.seq != tk.seq || (mask == Mask::causal && tk.pos > tq.pos)) continue;
            T dot(0.0);
            for (i64 i = 0; i < d; ++i) dot += q(r, head * d + i) * k(t, g * d + i);
            s[static_cast<size_t>(t)] = dot * scale;
            m = std::max(m, value_of(s[static_cast<size_t>(t)]));
          }
          T z(0.0);
          for (const T& e : s) z += exp(e - m);
          for (i64 t = 0; t < n; ++t) {
            const T w = exp(s[static_cast<size_t>(t)] - m) / z;
            for (i64 i = 0; i < d; ++i) att(r, head * d + i) += w * v(t, g * d + i);
          }
        }
      }
      const M o = linear(att, block(l, "proj"), h);
      for (size_t i = 0; i < x.v.size(); ++i) x.v[i] += o.v[i];
      const bool glu = c.activation == Activation::swiglu;
      const M f = linear(norm(x, block(l, "ln2")), block(l, "fc1"), glu ? 2 * c.ffn : c.ffn);
      M y(n, c.ffn);
      for (i64 r = 0; r < n; ++r) {
        for (i64 j = 0; j < c.ffn; ++j) {
          const T u = f(r, j);
          y(r, j) = glu ? u / (1 + exp(-u)) * f(r, c.ffn + j)
                        : 0.5 * u * (1 + tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
        }
      }
      const M o2 = linear(y, block(l, "fc2"), h);
      for (size_t i = 0; i < x.v.size(); ++i) x.v[i] += o2.v[i];
    }
    Out out{linear(norm(x, "final_ln"), "output", c.vocab), T(0.0)};
    T sum(0.0);
    i64 count = 0;
    for (i64 r = 0; r < n; ++r) {
      const i64 label = tok[static_cast<size_t>(r)].label;
      if (label == -100) continue;
      double m = -INFINITY;
      T z(0.0);
      for (i64 j = 0; j < c.vocab; ++j) m = std::max(m, value_of(out.logits(r, j)));
      for (i64 j = 0; j < c.vocab; ++j) z += exp(out.logits(r, j) - m);
      sum += m + log(z) - out.logits(r, label);
      ++count;
    }
    out.loss = sum / static_cast<double>(count);
    return out;
  }
};
using Reference = BasicReference<double>;

// The loss of a run and its gradient with respect to every parameter, by name (p's names and
// sizes), by reverse-mode differentiation of the recorded run.
struct LossAndGradients {
  double loss = 0;
  Params grads;
};

inline LossAndGradients loss_and_gradients(const TransformerConfig& c, const Params& p, const std::vector<Token>& tok,
                                           Mask mask) {
  Tape tape;
  std::map<std::string, std::vector<Var>> leaves;
  for (const auto& [name, values] : p) {
    std::vector<Var>& l = leaves[name];
    l.reserve(values.size());
    for (double x : values) l.emplace_back(x, tape.push(-1, 0.0, -1, 0.0), &tape);
  }
  const Var loss = BasicReference<Var>{c, leaves}.run(tok, mask).loss;
  if (loss.constant()) throw std::runtime_error("reference: the loss depends on no parameter");
  const Vec adj = tape.adjoints(loss.node);
  LossAndGradients out;
  out.loss = loss.v;
  for (const auto& [name, l] : leaves) {
    Vec& g = out.grads[name];
    g.reserve(l.size());
    for (const Var& x : l) g.push_back(adj[static_cast<std::size_t>(x.node)]);
  }
  return out;
}

}  // namespace ranksim::models::testing

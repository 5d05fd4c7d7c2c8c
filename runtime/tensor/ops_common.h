// What the host side of runtime/tensor/ops.h shares across its files (internal to runtime/tensor;
// included only by runtime/tensor/ops_*.cpp): the argument checks every op runs before anything
// else, the waiting on pending writes, and the plumbing that lets one templated loop serve every
// floating dtype (compute in double for f64, in float otherwise, round once into the output).
//
// The checks throw ranksim::Error as "<op>: <message>", naming the tensors by the argument names
// given. In and Out only move and convert values (convert_elements); they do no arithmetic, so the
// ops' results are those of their own loops.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"
#include "sim/error.h"

namespace ranksim::runtime::ops_common {

using i64 = std::int64_t;

// Eigen maps over one row of contiguous storage. Elementwise Eigen expressions round exactly as the
// scalar expression would (-ffp-contract=off keeps multiply and add separate), so they do not
// change any result; sums are written as explicit loops to keep their order fixed.
template <class T>
using RowMap = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;
template <class T>
using ConstRowMap = Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>;

[[noreturn]] inline void fail(const char* op, const std::string& message) {
  throw Error(std::string(op) + ": " + message);
}

inline double bytes(const Tensor& t) { return static_cast<double>(t.nbytes()); }
inline double count(i64 n) { return static_cast<double>(n); }

inline void require_defined(const char* op, const Tensor& t, const char* name) {
  if (!t.defined()) fail(op, std::string(name) + " is an undefined tensor");
}

inline void require_floating(const char* op, const Tensor& t, const char* name) {
  require_defined(op, t, name);
  if (!is_floating(t.dtype())) {
    fail(op, std::string(name) + " " + t.str() + " must be floating (f32, f64, bf16 or f16)");
  }
}

inline void require_same_dtype(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  require_floating(op, a, an);
  require_floating(op, b, bn);
  if (a.dtype() != b.dtype()) {
    fail(op, std::string(an) + " " + a.str() + " and " + bn + " " + b.str() +
                 " have different dtypes; convert one with to()");
  }
}

inline void require_index(const char* op, const Tensor& t, const char* name) {
  require_defined(op, t, name);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32) {
    fail(op, std::string(name) + " " + t.str() + " must be i64 or i32");
  }
}

inline void require_shape(const char* op, const Tensor& t, const char* name, const Shape& shape) {
  if (t.shape() != shape) {
    fail(op, std::string(name) + " " + t.str() + " must have shape " + shape_str(shape));
  }
}

// Waits for pending writes on every input; true when all of them hold data.
inline bool inputs_ready(std::initializer_list<const Tensor*> inputs) {
  bool data = true;
  for (const Tensor* t : inputs) {
    t->wait_pending();
    data = data && t->has_data();
  }
  return data;
}

inline Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

// The type arithmetic runs in: double for f64, float for f32/bf16/f16 (fp32 accumulation).
inline DType compute_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

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
    if (!buf_.empty()) convert_elements(buf_.data(), dtype_of<T>, t_.raw_data(), t_.dtype(), buf_.size());
    return t_;
  }

 private:
  Tensor t_;
  std::vector<T> buf_;
  T* ptr_ = nullptr;
};

}  // namespace ranksim::runtime::ops_common

#include "runtime/tensor/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include <malloc.h>

#include "runtime/tensor/strided_copy.h"
#include "sim/error.h"

namespace ranksim::runtime {

struct Tensor::Storage {
  // Counted by the ledger installed when it was created (runtime/tensor/memory.h).
  std::shared_ptr<MemoryLedger> ledger;
  MemoryLedger::Entry entry;
  std::size_t counted = 0;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (ledger) ledger->release(entry, counted);
  }

  std::unique_ptr<std::byte[]> bytes;  // null for shape-only, and for on_device() until accessed
  std::size_t nbytes = 0;
  bool has_data = false;
  bool host_stale = false;  // the mirror has bytes the host has not seen
  std::uint64_t host_version = 0;
  std::vector<std::shared_ptr<PendingWrite>> pending;  // in the order attached
  std::shared_ptr<StorageMirror> mirror;

  std::byte* host() {
    if (!bytes && has_data) bytes.reset(new std::byte[nbytes]());
    return bytes.get();
  }
};

PendingWrite::~PendingWrite() = default;
StorageMirror::~StorageMirror() = default;

namespace {

// Tensor buffers come and go at the rate of ops. glibc serves blocks above its mmap threshold
// (128 KiB, rising to at most 32 MiB) with fresh mmaps and returns them on free, so every large
// op output is faulted in page by page again -- on the VMs ranksim runs on that cost more than
// the arithmetic (a training step of the reference transformer at world 8 spent 3/4 of its wall
// time in page faults). Keeping freed memory in the heap makes buffers reusable. Values only,
// never results: arithmetic does not depend on where a buffer lives.
const bool kHeapKeepsFreedMemory = [] {
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);    // the largest glibc allows
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);  // return memory to the OS only past 1 GiB free
  return true;
}();

}  // namespace

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) {
    if (s < 0) throw Error("tensor shape " + shape_str(shape) + " has a negative size");
    if (s != 0 && n > std::numeric_limits<std::int64_t>::max() / s) {
      throw Error("tensor shape " + shape_str(shape) + " has more than 2^63 elements");
    }
    n *= s;
  }
  return n;
}

std::uint64_t random_bits(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed + (counter + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {

// Natural logarithm from IEEE basic operations only (frexp and ldexp are exact), so that randn
// gives the same bits with every libm. ln(x) = e ln2 + 2 atanh(t), t = (m-1)/(m+1), m in
// [sqrt(1/2), sqrt(2)), where |t| <= 0.1716 and twelve series terms reach double precision.
double portable_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double p = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) p = p * t2 + 1.0 / (2.0 * k + 1.0);
  return static_cast<double>(e) * 0.69314718055994530942 + 2.0 * t * p;
}

double unit_uniform(std::uint64_t bits) {  // [0, 1) with 53 random bits
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

}  // namespace

// --- Construction ---------------------------------------------------------------------------

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(strided::contiguous_strides(shape_)),
      numel_(shape_numel(shape_)),
      dtype_(dtype) {}

namespace {
std::size_t checked_nbytes(const Shape& shape, DType dtype) {
  const std::int64_t n = shape_numel(shape);
  if (n > std::numeric_limits<std::int64_t>::max() / 8) {
    throw Error("tensor shape " + shape_str(shape) + " is too large to allocate");
  }
  return static_cast<std::size_t>(n) * dtype_size(dtype);
}
}  // namespace

// Reports a new storage of nbytes to the calling thread's ledger.
void count_storage(Tensor::Storage& s, std::size_t nbytes) {
  const std::shared_ptr<MemoryLedger>& ledger = memory_ledger();
  if (!ledger) return;
  s.entry = ledger->acquire(nbytes);
  if (s.entry.owner < 0) return;
  s.ledger = ledger;
  s.counted = nbytes;
}

void retag_memory(const Tensor& t, MemoryKind kind) {
  if (!t.storage_ || !t.storage_->ledger || t.storage_->entry.kind == kind) return;
  t.storage_->ledger->retag(t.storage_->entry, t.storage_->counted, kind);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>();
  // Value-initialised: every byte is zero, which is 0 in all six dtypes.
  storage->nbytes = checked_nbytes(shape, dtype);
  storage->bytes.reset(new std::byte[storage->nbytes]());
  storage->has_data = true;
  count_storage(*storage, storage->nbytes);
  return Tensor(std::move(storage), shape, dtype);
}

Tensor Tensor::on_device(const Shape& shape, DType dtype) {
  auto storage = std::make_shared<Storage>();
  storage->nbytes = checked_nbytes(shape, dtype);
  storage->has_data = true;
  count_storage(*storage, storage->nbytes);
  return Tensor(std::move(storage), shape, dtype);
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = zeros(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(std::int64_t n, DType dtype) {
  if (n < 0) throw Error("Tensor::arange(" + std::to_string(n) + "): n must be >= 0");
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return from_vector(v, {n}, dtype);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  return from_vector(values, shape, dtype_of<T>);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, DType dtype) {
  const std::int64_t n = shape_numel(shape);
  if (static_cast<std::int64_t>(values.size()) != n) {
    throw Error("Tensor::from_vector: " + std::to_string(values.size()) + " values do not fill shape " +
                shape_str(shape) + " (" + std::to_string(n) + " elements)");
  }
  Tensor t = zeros(shape, dtype);
  convert_elements(values.data(), dtype_of<T>, t.storage_->host(), dtype, values.size());
  return t;
}

#define RANKSIM_INSTANTIATE(T)                                                        \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&);        \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, DType); \
  template std::vector<T> Tensor::to_vector<T>() const;
RANKSIM_INSTANTIATE(float)
RANKSIM_INSTANTIATE(double)
RANKSIM_INSTANTIATE(BFloat16)
RANKSIM_INSTANTIATE(Half)
RANKSIM_INSTANTIATE(std::int64_t)
RANKSIM_INSTANTIATE(std::int32_t)
#undef RANKSIM_INSTANTIATE

Tensor Tensor::uniform(const Shape& shape, std::uint64_t seed, double low, double high, DType dtype) {
  if (!is_floating(dtype)) {
    throw Error(std::string("Tensor::uniform: dtype ") + dtype_name(dtype) +
                " is not floating; draw f32 values and convert them instead");
  }
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = low + (high - low) * unit_uniform(random_bits(seed, i));
  }
  return from_vector(v, shape, dtype);
}

Tensor Tensor::randn(const Shape& shape, std::uint64_t seed, double mean, double stddev, DType dtype) {
  if (!is_floating(dtype)) {
    throw Error(std::string("Tensor::randn: dtype ") + dtype_name(dtype) +
                " is not floating; draw f32 values and convert them instead");
  }
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    // Each element has its own stream, so its value does not depend on its neighbours' rejections.
    const std::uint64_t stream = random_bits(seed, i);
    for (std::uint64_t attempt = 0;; ++attempt) {
      const double a = 2.0 * unit_uniform(random_bits(stream, 2 * attempt)) - 1.0;
      const double b = 2.0 * unit_uniform(random_bits(stream, 2 * attempt + 1)) - 1.0;
      const double s = a * a + b * b;
      if (s > 0.0 && s < 1.0) {
        v[i] = mean + stddev * (a * std::sqrt(-2.0 * portable_log(s) / s));
        break;
      }
    }
  }
  return from_vector(v, shape, dtype);
}

Tensor Tensor::shape_only(const Shape& shape, DType dtype) {
  const std::size_t nbytes = checked_nbytes(shape, dtype);
  auto storage = std::make_shared<Storage>();
  count_storage(*storage, nbytes);
  return Tensor(std::move(storage), shape, dtype);
}

Tensor Tensor::from_bytes(const Shape& shape, DType dtype, const void* bytes, std::size_t nbytes) {
  const std::size_t expected = checked_nbytes(shape, dtype);
  if (nbytes != expected) {
    throw Error("Tensor::from_bytes: " + std::to_string(nbytes) + " bytes given for " + std::string(dtype_name(dtype)) +
                shape_str(shape) + ", which needs " + std::to_string(expected));
  }
  Tensor t = zeros(shape, dtype);
  if (nbytes) std::memcpy(t.storage_->host(), bytes, nbytes);
  return t;
}

// --- Metadata -------------------------------------------------------------------------------

bool Tensor::has_data() const { return storage_ && storage_->has_data; }

std::int64_t Tensor::wrap_dim(std::int64_t d, const char* what) const {
  const std::int64_t nd = dim();
  if (d < -nd || d >= nd) {
    throw Error(std::string(what) + ": dimension " + std::to_string(d) + " is out of range for " + str() +
                " (valid: " + std::to_string(-nd) + " to " + std::to_string(nd - 1) + ")");
  }
  return d < 0 ? d + nd : d;
}

std::int64_t Tensor::size(std::int64_t d) const {
  return shape_[static_cast<std::size_t>(wrap_dim(d, "Tensor::size"))];
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 0) return true;
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  std::string s = std::string(dtype_name(dtype_)) + shape_str(shape_);
  if (!has_data()) s += " (shape-only)";
  return s;
}

void Tensor::check_dtype(DType expected) const {
  if (dtype_ != expected) {
    throw Error("Tensor::data<" + std::string(dtype_name(expected)) + ">() called on " + str() + "; convert with to(" +
                dtype_name(expected) + ") first");
  }
}

void Tensor::require_data(const char* what) const {
  if (!defined()) throw Error(std::string(what) + ": the tensor is undefined");
  if (!storage_->has_data) {
    throw Error(std::string(what) + ": " + str() + " has no data; run with real tensors to read values");
  }
}

// --- Views ----------------------------------------------------------------------------------

Tensor Tensor::with_layout(Shape shape, std::vector<std::int64_t> strides, std::int64_t offset) const {
  Tensor t = *this;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  return t;
}

Tensor Tensor::narrow(std::int64_t d, std::int64_t start, std::int64_t length) const {
  const auto i = static_cast<std::size_t>(wrap_dim(d, "Tensor::narrow"));
  if (start < 0 || length < 0 || start > shape_[i] - length) {
    throw Error("Tensor::narrow(" + std::to_string(d) + ", " + std::to_string(start) + ", " + std::to_string(length) +
                ") is out of range for " + str());
  }
  Shape shape = shape_;
  shape[i] = length;
  return with_layout(std::move(shape), strides_, offset_ + start * strides_[i]);
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  const auto i = static_cast<std::size_t>(wrap_dim(d, "Tensor::select"));
  if (index < 0 || index >= shape_[i]) {
    throw Error("Tensor::select(" + std::to_string(d) + ", " + std::to_string(index) + ") is out of range for " +
                str());
  }
  Shape shape = shape_;
  std::vector<std::int64_t> strides = strides_;
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(i));
  strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(i));
  return with_layout(std::move(shape), std::move(strides), offset_ + index * strides_[i]);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  const auto i = static_cast<std::size_t>(wrap_dim(d0, "Tensor::transpose"));
  const auto j = static_cast<std::size_t>(wrap_dim(d1, "Tensor::transpose"));
  Shape shape = shape_;
  std::vector<std::int64_t> strides = strides_;
  std::swap(shape[i], shape[j]);
  std::swap(strides[i], strides[j]);
  return with_layout(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::permute(const std::vector<std::int64_t>& dims) const {
  if (static_cast<std::int64_t>(dims.size()) != dim()) {
    throw Error("Tensor::permute: " + std::to_string(dims.size()) + " dims given for " + str());
  }
  Shape shape(dims.size());
  std::vector<std::int64_t> strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t k = 0; k < dims.size(); ++k) {
    const auto i = static_cast<std::size_t>(wrap_dim(dims[k], "Tensor::permute"));
    if (seen[i]) throw Error("Tensor::permute: dimension " + std::to_string(i) + " repeats");
    seen[i] = true;
    shape[k] = shape_[i];
    strides[k] = strides_[i];
  }
  return with_layout(std::move(shape), std::move(strides), offset_);
}

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous()) {
    throw Error("Tensor::view" + shape_str(shape) + " on non-contiguous " + str() +
                "; use reshape() or contiguous() first");
  }
  Shape out = shape;
  std::int64_t known = 1;
  std::size_t infer = out.size();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer != out.size()) throw Error("Tensor::view" + shape_str(shape) + ": two -1 sizes");
      infer = i;
    } else if (out[i] < 0) {
      throw Error("Tensor::view" + shape_str(shape) + ": negative size");
    } else {
      known *= out[i];
    }
  }
  if (infer != out.size()) {
    if (known == 0 || numel_ % known != 0) {
      throw Error("Tensor::view" + shape_str(shape) + ": cannot infer -1 for " + str());
    }
    out[infer] = numel_ / known;
  }
  if (shape_numel(out) != numel_) {
    throw Error("Tensor::view" + shape_str(shape) + ": " + str() + " has " + std::to_string(numel_) + " elements");
  }
  auto strides = strided::contiguous_strides(out);
  return with_layout(std::move(out), std::move(strides), offset_);
}

// --- Element access -------------------------------------------------------------------------

std::int64_t Tensor::element_offset(std::initializer_list<std::int64_t> index, const char* what) const {
  if (static_cast<std::int64_t>(index.size()) != dim()) {
    throw Error(std::string(what) + ": " + std::to_string(index.size()) + " indices given for " + str());
  }
  std::int64_t off = offset_;
  std::size_t d = 0;
  for (std::int64_t i : index) {
    if (i < 0 || i >= shape_[d]) {
      throw Error(std::string(what) + ": index " + std::to_string(i) + " is out of range for dim " + std::to_string(d) +
                  " of " + str());
    }
    off += i * strides_[d];
    ++d;
  }
  return off;
}

double Tensor::item() const {
  require_data("Tensor::item");
  if (numel_ != 1) throw Error("Tensor::item on " + str() + ", which is not one element");
  return to_vector<double>()[0];
}

double Tensor::at(std::initializer_list<std::int64_t> index) const {
  require_data("Tensor::at");
  const std::int64_t off = element_offset(index, "Tensor::at");
  wait_pending();
  double v = 0.0;
  convert_elements(storage_->host() + off * static_cast<std::int64_t>(dtype_size(dtype_)), dtype_, &v, DType::f64, 1);
  return v;
}

void Tensor::set(std::initializer_list<std::int64_t> index, double value) const {
  require_data("Tensor::set");
  const std::int64_t off = element_offset(index, "Tensor::set");
  wait_pending();
  ++storage_->host_version;
  convert_elements(&value, DType::f64, storage_->host() + off * static_cast<std::int64_t>(dtype_size(dtype_)), dtype_,
                   1);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  require_data("Tensor::to_vector");
  wait_pending();
  std::vector<T> out(static_cast<std::size_t>(numel_));
  strided::convert(storage_->host(), dtype_, shape_, strides_, offset_, reinterpret_cast<std::byte*>(out.data()),
                   dtype_of<T>, strided::contiguous_strides(shape_), 0);
  return out;
}

void* Tensor::raw_data() const {
  require_data("Tensor::data");
  wait_pending();
  ++storage_->host_version;
  return storage_->host() + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

const void* Tensor::raw_read_data() const {
  require_data("Tensor::read_data");
  wait_pending();
  return storage_->host() + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

void* Tensor::raw_data_unsynchronized() const {
  require_data("Tensor::raw_data_unsynchronized");
  ++storage_->host_version;
  return storage_->host() + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
}

void Tensor::set_pending_write(std::shared_ptr<PendingWrite> pending, bool host_write) const {
  if (!defined()) throw Error("Tensor::set_pending_write: the tensor is undefined");
  if (host_write) ++storage_->host_version;
  storage_->pending.push_back(std::move(pending));
}

std::shared_ptr<StorageMirror> Tensor::mirror() const { return storage_ ? storage_->mirror : nullptr; }

void Tensor::set_mirror(std::shared_ptr<StorageMirror> mirror) const {
  if (!defined()) throw Error("Tensor::set_mirror: the tensor is undefined");
  storage_->mirror = std::move(mirror);
}

void Tensor::mark_host_stale() const {
  if (!storage_ || !storage_->mirror) throw Error("Tensor::mark_host_stale: no mirror is set");
  storage_->host_stale = true;
}

bool Tensor::host_stale() const { return storage_ && storage_->host_stale; }

std::uint64_t Tensor::host_version() const { return storage_ ? storage_->host_version : 0; }

std::size_t Tensor::storage_nbytes() const { return storage_ ? storage_->nbytes : 0; }

void* Tensor::storage_bytes_unsynchronized() const {
  require_data("Tensor::storage_bytes_unsynchronized");
  return storage_->host();
}

std::byte* Tensor::host_bytes() const { return storage_->host(); }

void Tensor::count_host_write() const { ++storage_->host_version; }

void Tensor::wait_pending() const {
  if (!storage_) return;
  if (storage_->host_stale) {
    // The flag clears only once the bytes have arrived: a download that throws (an earlier kernel
    // fault surfacing at the synchronisation) leaves the host bytes marked stale, not valid.
    storage_->mirror->download(storage_->host(), storage_->nbytes);
    storage_->host_stale = false;
  }
  wait_pending_writes();
}

void Tensor::wait_pending_writes() const {
  if (!storage_) return;
  // Each is detached before its wait, so a wait that throws is not repeated by the next access,
  // while the writes after it stay attached.
  while (!storage_->pending.empty()) {
    std::shared_ptr<PendingWrite> first = std::move(storage_->pending.front());
    storage_->pending.erase(storage_->pending.begin());
    first->wait();
  }
}

namespace {
template <class T>
bool same_elements(const Tensor& a, const Tensor& b) {
  const std::vector<T> va = a.to_vector<T>();
  const std::vector<T> vb = b.to_vector<T>();
  return va.empty() || std::memcmp(va.data(), vb.data(), va.size() * sizeof(T)) == 0;
}
}  // namespace

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!a.has_data() || !b.has_data()) {
    throw Error("bitwise_equal(" + a.str() + ", " + b.str() + "): both tensors need data");
  }
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  switch (a.dtype()) {
    case DType::f32:
      return same_elements<float>(a, b);
    case DType::f64:
      return same_elements<double>(a, b);
    case DType::bf16:
      return same_elements<BFloat16>(a, b);
    case DType::f16:
      return same_elements<Half>(a, b);
    case DType::i64:
      return same_elements<std::int64_t>(a, b);
    case DType::i32:
      return same_elements<std::int32_t>(a, b);
  }
  return false;
}

}  // namespace ranksim::runtime

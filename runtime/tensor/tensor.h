// Tensor: an N-d, row-major, strided view of shared typed storage, or a shape-only placeholder.
//
// A Tensor is a handle. Copying it shares the storage (as torch tensors do); clone() copies the
// data. Views -- narrow, select, transpose, permute, view -- share the storage and only change
// shape, strides and offset; contiguous() and reshape() copy only when the layout requires it.
// Element types are the DTypes of runtime/device/dtype.h; bf16 and f16 are stored rounded to nearest even.
// Shapes and strides count elements, not bytes. Dimension arguments accept negative values counted
// from the end, as in torch (-1 is the last dimension).
//
// Shape-only mode: Tensor::shape_only(shape, dtype) has a shape and a dtype but no storage
// (has_data() is false). Views and ops on it give shape-only results of the right shape and are
// still charged their cost (runtime/tensor/cost.h); reading or writing its elements is a ranksim::Error.
//
// Pending writes: an asynchronous operation that will write a tensor's storage later (a collective
// in runtime/distributed) attaches a PendingWrite to the storage; every later data access through
// any Tensor sharing that storage, and every op taking it as input, first calls wait() on each
// write attached (several may be, e.g. receives into slices of one buffer), in attachment order.
//
// Device copies: a storage may also have a copy in a compute device's memory (runtime/device/device.h),
// attached as a StorageMirror. The device keeps the two coherent through this header's hooks: a
// device op that writes a storage attaches a PendingWrite that downloads the bytes, so every host
// access above sees them; every host access that may write (data(), raw_data(), copy_, fill_,
// set, a pending write attached) bumps the storage's host_version(), so the device knows its copy
// is stale. A storage made by Tensor::on_device() allocates its host bytes at the first host
// access, so tensors that live and die on the device never take host memory. A device that wrote a
// storage calls mark_host_stale(); the next host access downloads the mirror first, before any
// pending write.
//
// Handles are not synchronised: share a storage across threads only for reading.
// User errors (bad dims, out-of-range slices, dtype mismatches, data access on shape-only
// tensors) throw ranksim::Error naming the tensor and the argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/dtype.h"
#include "runtime/tensor/memory.h"

namespace ranksim::runtime {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& shape);     // "[2, 3]"
std::int64_t shape_numel(const Shape& shape);  // product of the sizes (1 for a 0-d shape)

// Installed on a storage by an asynchronous writer; see the header comment.
class PendingWrite {
 public:
  virtual ~PendingWrite();
  // Blocks (for a rank: yields) until the write has landed; rethrows the writer's error.
  virtual void wait() = 0;
};

// A copy of a storage's bytes held by a compute device (runtime/device/device.h); see the header comment.
class StorageMirror {
 public:
  virtual ~StorageMirror();
  // Copies the device's bytes of the whole storage to host (nbytes: Tensor::storage_nbytes()).
  virtual void download(void* host, std::size_t nbytes) = 0;
};

// Counter-based random bits: the counter-th output of the splitmix64 sequence started at seed.
// Pure and thread-safe; the same (seed, counter) gives the same bits on every platform.
std::uint64_t random_bits(std::uint64_t seed, std::uint64_t counter);

class Tensor {
 public:
  // An undefined tensor (defined() is false), e.g. an absent optional input.
  Tensor() = default;

  // --- Factories. Values are rounded to the dtype (nearest even for bf16/f16).
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // 0, 1, ..., n-1 as a 1-d tensor. REQUIRES: n >= 0.
  static Tensor arange(std::int64_t n, DType dtype = DType::f32);
  // A copy of values laid out as shape, of dtype dtype_of<T>.
  // REQUIRES: values.size() == shape_numel(shape). T: float, double, BFloat16, Half, int64_t,
  // int32_t.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  // The same, converted to dtype (see convert_elements for the rounding rules).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype);
  // Element i is drawn from counter i of random_bits(seed, ...), so a tensor's values depend only
  // on (seed, its index), never on the standard library or on how many tensors came before.
  // uniform: in [low, high) before rounding to dtype. REQUIRES: floating dtype.
  static Tensor uniform(const Shape& shape, std::uint64_t seed, double low = 0.0, double high = 1.0,
                        DType dtype = DType::f32);
  // randn: normal with the given mean and standard deviation (Marsaglia's polar method, computed
  // with IEEE basic operations only, so the bits are the same everywhere). REQUIRES: floating
  // dtype.
  static Tensor randn(const Shape& shape, std::uint64_t seed, double mean = 0.0, double stddev = 1.0,
                      DType dtype = DType::f32);
  // A tensor with shape and dtype but no storage.
  static Tensor shape_only(const Shape& shape, DType dtype = DType::f32);
  // A tensor whose bytes are being produced elsewhere (a device): it has data, but its host bytes
  // are allocated, zeroed, only at the first host access. The producer attaches a StorageMirror and
  // a PendingWrite that fills the host bytes (see the header comment).
  static Tensor on_device(const Shape& shape, DType dtype);
  // A copy of nbytes raw little-endian bytes. REQUIRES: nbytes == shape_numel(shape) * dtype_size.
  static Tensor from_bytes(const Shape& shape, DType dtype, const void* bytes, std::size_t nbytes);

  // --- Metadata.
  bool defined() const { return storage_ != nullptr; }
  bool has_data() const;  // false for shape-only and undefined tensors
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  std::int64_t size(std::int64_t d) const;  // REQUIRES: -dim() <= d < dim()
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  const std::vector<std::int64_t>& strides() const { return strides_; }
  std::int64_t storage_offset() const { return offset_; }
  bool is_contiguous() const;  // row-major with no gaps (size-1 dims may have any stride)
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  std::string str() const;  // "bf16[4, 8]", "f32[2] (shape-only)": for messages

  // --- Views (share storage; cost nothing).
  // Elements [start, start + length) of dimension dim. REQUIRES: 0 <= start <= start+length <=
  // size.
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  // Index index of dimension dim, which is removed. REQUIRES: 0 <= index < size(dim).
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  Tensor permute(const std::vector<std::int64_t>& dims) const;  // REQUIRES: a permutation
  // The same elements with another shape; one size may be -1 (inferred).
  // REQUIRES: is_contiguous(); the numels match.
  Tensor view(const Shape& shape) const;

  // --- Copies (charged as "copy" / "convert").
  Tensor reshape(const Shape& shape) const;  // view() when contiguous, else a contiguous copy
  Tensor contiguous() const;                 // *this when already contiguous
  Tensor clone() const;                      // always a new storage, contiguous
  Tensor to(DType dtype) const;              // a converted copy (*this when dtype is the same)
  // Writes src's elements into this tensor's, converting dtype. REQUIRES: equal shapes.
  void copy_(const Tensor& src) const;
  void fill_(double value) const;

  // --- Element access (for tests and glue code; ops use data<T>()).
  // REQUIRES for all: has_data(). Indices may not be negative.
  double item() const;  // REQUIRES: numel() == 1
  double at(std::initializer_list<std::int64_t> index) const;
  void set(std::initializer_list<std::int64_t> index, double value) const;
  // All elements in row-major order, converted to T (float, double, BFloat16, Half, int64_t or
  // int32_t) by the rules of convert_elements.
  template <class T>
  std::vector<T> to_vector() const;
  // Pointer to the first element. REQUIRES: dtype() == dtype_of<T>; has_data().
  // Waits for pending writes first.
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>);
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;  // untyped data<T>()
  // Read-only access: the same pointer, without counting as a host write (see host_version()).
  template <class T>
  const T* read_data() const {
    check_dtype(dtype_of<T>);
    return static_cast<const T*>(raw_read_data());
  }
  const void* raw_read_data() const;

  // --- Pending writes (see the header comment).
  // Attaches pending to the storage (in addition to any already attached). host_write: the write
  // lands in the host bytes (the sim and mpi backends), so the device copy is out of date from
  // now on. false: it was written to the device copy already (a collective run in place on the
  // device copy), and waiting only orders the host's next access after the work's completion.
  void set_pending_write(std::shared_ptr<PendingWrite> pending, bool host_write = true) const;
  // Makes the host bytes current: downloads the device copy when it is newer (host_stale), then
  // waits for and detaches the storage's pending writes, oldest first.
  void wait_pending() const;
  // Waits for and detaches the pending writes only, leaving a newer device copy where it is: for
  // a writer that works on the device copy in place.
  void wait_pending_writes() const;
  // The data pointer without waiting: only for the pending writer itself, which fills the storage.
  void* raw_data_unsynchronized() const;

  // --- Device copies (see the header comment; used by runtime/device/device.cpp).
  // The storage's mirror, or null. REQUIRES for set_mirror: defined().
  std::shared_ptr<StorageMirror> mirror() const;
  void set_mirror(std::shared_ptr<StorageMirror> mirror) const;
  // The mirror holds bytes the host has not seen: the next host access downloads them.
  // REQUIRES: a mirror is set.
  void mark_host_stale() const;
  bool host_stale() const;
  // Counts host accesses that may have written the storage (0 for a new storage).
  std::uint64_t host_version() const;
  // Bytes of the whole storage (the view's numel times its element size for a fresh tensor).
  std::size_t storage_nbytes() const;
  // The storage's first byte, allocating host bytes if need be, without waiting or counting a
  // write: for a device uploading or downloading the whole storage.
  void* storage_bytes_unsynchronized() const;

 private:
  struct Storage;
  friend void count_storage(Storage& s, std::size_t nbytes);
  friend void retag_memory(const Tensor& t, MemoryKind kind);
  Tensor(std::shared_ptr<Storage> storage, Shape shape, DType dtype);
  void check_dtype(DType expected) const;
  std::int64_t wrap_dim(std::int64_t dim, const char* what) const;
  std::int64_t element_offset(std::initializer_list<std::int64_t> index, const char* what) const;
  void require_data(const char* what) const;
  Tensor with_layout(Shape shape, std::vector<std::int64_t> strides, std::int64_t offset) const;
  // For the copies (runtime/tensor/tensor_copy.cpp), which see the storage only through these:
  // its host bytes (allocated at first access; REQUIRES: defined()), and counting a host write
  // (see host_version()).
  std::byte* host_bytes() const;
  void count_host_write() const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  std::vector<std::int64_t> strides_;
  std::int64_t offset_ = 0;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

// True when a and b have the same dtype, shape and element bits (both must have data).
bool bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace ranksim::runtime

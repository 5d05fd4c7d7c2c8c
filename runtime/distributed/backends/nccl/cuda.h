// CUDA device plumbing for the GPU backend (built with RANKSIM_WITH_CUDA): device discovery,
// error translation, streams and device buffers holding a runtime::Tensor's bytes.
//
// Every CUDA, cuBLAS and NCCL failure becomes a ranksim::Error naming the call and the library's
// own message, so a GPU run fails like any other bad input: a message, a non-zero exit.
//
// Tensors stay ranksim's host tensors (runtime/tensor/tensor.h); a DeviceBuffer is the device copy of
// one, uploaded and downloaded explicitly. Not thread-safe; one process drives one device at a
// time (set_device).
#pragma once

#include <cstddef>
#include <string>

#include "runtime/device/dtype.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::gpu {

struct DeviceInfo {
  int count = 0;       // usable CUDA devices (0 without a driver or a GPU)
  std::string reason;  // why count is 0: the CUDA runtime's message
};
// Never throws: a machine without a GPU or a driver answers count 0 and says why.
DeviceInfo device_info();

void set_device(int device);  // Error for a device that does not exist
int current_device();

// Throw ranksim::Error("<what>: <library message>") on failure. The status is the library's own
// code (cudaError_t, cublasStatus_t, ncclResult_t), passed as int to keep the CUDA headers out
// of callers.
void check_cuda(int status, const char* what);
void check_cublas(int status, const char* what);
void check_nccl(int status, const char* what);

// A CUDA stream owned by this object (non-blocking with respect to the default stream).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  void* handle() const { return stream_; }  // cudaStream_t
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

// Device memory for `numel` elements of `dtype` on the current device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::int64_t numel, DType dtype);
  // A device copy of t (contiguous data; Error for shape-only tensors).
  static DeviceBuffer upload(const Tensor& t, const Stream& stream);
  // The device memory [data, data + numel elements), owned by someone else (a compute device's
  // copy of a tensor): not freed with this buffer.
  static DeviceBuffer borrow(void* data, std::int64_t numel, DType dtype);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* data() const { return data_; }
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  // Copies the contents into a new host tensor of the given shape (numel must match), after the
  // stream's work so far.
  Tensor download(const Shape& shape, const Stream& stream) const;
  // Overwrites elements [offset, offset + t.numel()) from t (same dtype).
  void copy_from(const Tensor& t, const Stream& stream, std::int64_t offset = 0);
  // Copies `numel` elements starting at element `offset` into t's storage (contiguous, same
  // dtype, t.numel() == numel), after the stream's work so far.
  void download_into(const Tensor& t, const Stream& stream, std::int64_t offset = 0) const;

 private:
  void* data_ = nullptr;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  bool owned_ = true;
};

}  // namespace ranksim::runtime::gpu

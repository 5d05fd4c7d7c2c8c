// Device memory holding a runtime::Tensor's bytes, for the nccl backend (built with
// RANKSIM_WITH_CUDA): a DeviceBuffer is the device copy of a host tensor, uploaded and downloaded
// explicitly on a stream, or a borrowed view of a compute device's copy (in-place collectives).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device/cuda/cuda.h"
#include "runtime/device/dtype.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime::gpu {

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

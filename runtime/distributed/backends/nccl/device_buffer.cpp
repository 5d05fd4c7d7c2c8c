#include "runtime/distributed/backends/nccl/device_buffer.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "sim/error.h"

namespace ranksim::runtime::gpu {

DeviceBuffer::DeviceBuffer(std::int64_t numel, DType dtype) : numel_(numel), dtype_(dtype) {
  if (numel < 0) throw Error("DeviceBuffer: negative size " + std::to_string(numel));
  if (numel > 0) check_cuda(cudaMalloc(&data_, nbytes()), "cudaMalloc");
}

DeviceBuffer DeviceBuffer::upload(const Tensor& t, const Stream& stream) {
  DeviceBuffer b(t.numel(), t.dtype());
  b.copy_from(t, stream);
  return b;
}

DeviceBuffer DeviceBuffer::borrow(void* data, std::int64_t numel, DType dtype) {
  if (numel < 0) throw Error("DeviceBuffer: negative size " + std::to_string(numel));
  DeviceBuffer b;
  b.data_ = data;
  b.numel_ = numel;
  b.dtype_ = dtype;
  b.owned_ = false;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr && owned_) (void)cudaFree(data_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      numel_(std::exchange(other.numel_, 0)),
      dtype_(other.dtype_),
      owned_(std::exchange(other.owned_, true)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr && owned_) (void)cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    numel_ = std::exchange(other.numel_, 0);
    dtype_ = other.dtype_;
    owned_ = std::exchange(other.owned_, true);
  }
  return *this;
}

void DeviceBuffer::copy_from(const Tensor& t, const Stream& stream, std::int64_t offset) {
  if (!t.has_data()) throw Error("GPU backend: cannot upload the shape-only tensor " + t.str());
  const bool fits = offset >= 0 && offset + t.numel() <= numel_;
  if (t.dtype() != dtype_ || !fits) {
    throw Error("GPU backend: uploading " + t.str() + " at element " + std::to_string(offset) +
                " of a device buffer of " + std::to_string(numel_) + " " + dtype_name(dtype_));
  }
  const Tensor c = t.contiguous();
  if (c.numel() == 0) return;
  auto s = static_cast<cudaStream_t>(stream.handle());
  const std::size_t esize = dtype_size(dtype_);
  check_cuda(cudaMemcpyAsync(static_cast<char*>(data_) + static_cast<std::size_t>(offset) * esize, c.raw_data(),
                             static_cast<std::size_t>(c.numel()) * esize, cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync (upload)");
  // c's storage must outlive the copy: wait for it here.
  stream.synchronize();
}

Tensor DeviceBuffer::download(const Shape& shape, const Stream& stream) const {
  Tensor out = Tensor::zeros(shape, dtype_);
  if (out.numel() != numel_) {
    throw Error("GPU backend: downloading " + std::to_string(numel_) + " elements as " + out.str());
  }
  if (numel_ == 0) return out;
  auto s = static_cast<cudaStream_t>(stream.handle());
  check_cuda(cudaMemcpyAsync(out.raw_data(), data_, nbytes(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (download)");
  stream.synchronize();
  return out;
}

void DeviceBuffer::download_into(const Tensor& t, const Stream& stream, std::int64_t offset) const {
  if (!t.has_data() || !t.is_contiguous() || t.dtype() != dtype_ || offset < 0 || offset + t.numel() > numel_) {
    throw Error("GPU backend: cannot download elements [" + std::to_string(offset) + ", " +
                std::to_string(offset + t.numel()) + ") of a device buffer of " + std::to_string(numel_) + " " +
                dtype_name(dtype_) + " into " + t.str());
  }
  if (t.numel() == 0) return;
  auto s = static_cast<cudaStream_t>(stream.handle());
  const std::size_t esize = dtype_size(dtype_);
  check_cuda(cudaMemcpyAsync(t.raw_data(), static_cast<const char*>(data_) + static_cast<std::size_t>(offset) * esize,
                             static_cast<std::size_t>(t.numel()) * esize, cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync (download)");
  stream.synchronize();
}

}  // namespace ranksim::runtime::gpu

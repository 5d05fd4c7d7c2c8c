#include "runtime/tensor/device_tensors.h"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "runtime/tensor/cost.h"
#include "sim/error.h"

namespace ranksim::runtime {
namespace {

using i64 = std::int64_t;

// A storage's bytes in one device's memory. Released with the storage, which keeps the device
// alive until then (a device not owned by a shared_ptr must outlive its tensors).
class DeviceMirror final : public StorageMirror {
 public:
  DeviceMirror(Device& device, std::size_t nbytes)
      : keep_(device.weak_from_this().lock()), device_(device), nbytes_(nbytes), ptr_(device.allocate(nbytes)) {}
  ~DeviceMirror() override { device_.release(ptr_); }
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  void download(void* host, std::size_t nbytes) override {
    if (nbytes != nbytes_) {
      throw Error(device_.name() + ": a storage of " + std::to_string(nbytes) + " bytes has a device copy of " +
                  std::to_string(nbytes_));
    }
    if (nbytes == 0) return;
    device_.download(host, ptr_, nbytes);
    ++device_.stats().downloads;
    device_.stats().download_bytes += static_cast<std::int64_t>(nbytes);
  }

  Device& device() const { return device_; }
  void* ptr() const { return ptr_; }
  std::uint64_t version = 0;  // the host_version() the device copy equals
  bool valid = false;         // the device copy holds the storage's bytes

 private:
  std::shared_ptr<Device> keep_;
  Device& device_;
  std::size_t nbytes_;
  void* ptr_;
};

DeviceMirror* mirror_on(const Device& device, const Tensor& t) {
  auto* m = dynamic_cast<DeviceMirror*>(t.mirror().get());
  return m && &m->device() == &device ? m : nullptr;
}

std::byte* element(void* base, const Tensor& t) {
  return static_cast<std::byte*>(base) + static_cast<std::size_t>(t.storage_offset()) * dtype_size(t.dtype());
}

}  // namespace

bool is_device_dtype(DType d) { return d == DType::f32 || d == DType::bf16 || d == DType::f16; }

Device* device_for(std::initializer_list<const Tensor*> inputs) {
  return device_for(std::vector<const Tensor*>(inputs));
}

Device* device_for(const std::vector<const Tensor*>& inputs) {
  Device* dev = compute_device();
  if (!dev) return nullptr;
  for (const Tensor* t : inputs) {
    if (!t->has_data()) return nullptr;
    if (is_floating(t->dtype()) && !is_device_dtype(t->dtype())) return nullptr;
  }
  ++dev->stats().ops;
  return dev;
}

bool resident_on(const Device& device, const Tensor& t) {
  const DeviceMirror* m = mirror_on(device, t);
  return m && m->valid && m->version == t.host_version();
}

const void* device_pointer(Device& device, const Tensor& t) {
  if (!t.has_data()) throw Error(device.name() + ": tensor " + t.str() + " has no data");
  DeviceMirror* m = mirror_on(device, t);
  if (m && m->valid && m->version == t.host_version()) return element(m->ptr(), t);
  // The host holds the newest bytes (or will, once its pending writes land): upload them.
  t.wait_pending();
  if (!m) {
    auto fresh = std::make_shared<DeviceMirror>(device, t.storage_nbytes());
    m = fresh.get();
    t.set_mirror(std::move(fresh));
  }
  const std::size_t n = t.storage_nbytes();
  if (n) device.upload(m->ptr(), t.storage_bytes_unsynchronized(), n);
  ++device.stats().uploads;
  device.stats().upload_bytes += static_cast<std::int64_t>(n);
  m->valid = true;
  m->version = t.host_version();
  return element(m->ptr(), t);
}

Tensor device_tensor(Device& device, const Shape& shape, DType dtype, void** ptr) {
  Tensor t = Tensor::on_device(shape, dtype);
  auto m = std::make_shared<DeviceMirror>(device, t.storage_nbytes());
  m->valid = true;
  m->version = t.host_version();
  *ptr = m->ptr();
  t.set_mirror(std::move(m));
  t.mark_host_stale();
  return t;
}

void mark_device_written(Device& device, const Tensor& t) {
  DeviceMirror* m = mirror_on(device, t);
  if (!m || !m->valid || m->version != t.host_version()) {
    throw Error(device.name() + ": tensor " + t.str() + " was written on the device without an up-to-date device copy");
  }
  t.mark_host_stale();
}

void* device_writable(Device& device, const Tensor& t) { return const_cast<void*>(device_pointer(device, t)); }

DeviceInput::DeviceInput(Device& dev, const Tensor& t) {
  if (t.is_contiguous()) {
    ptr_ = device_pointer(dev, t);
    return;
  }
  if (t.dim() > kernels::kMaxDims) {
    ScopedCostSink quiet(nullptr);  // part of the op's traffic, charged by the op
    keep_ = t.contiguous();         // on the host: more dims than the device's gather takes
    ptr_ = device_pointer(dev, keep_);
    return;
  }
  void* out = nullptr;
  keep_ = device_tensor(dev, t.shape(), t.dtype(), &out);
  kernels::CopyKernel c{};
  c.src = device_pointer(dev, t);
  c.src_dtype = t.dtype();
  c.dst = out;
  c.dst_dtype = t.dtype();
  c.ndim = static_cast<int>(t.dim());
  i64 stride = 1;
  for (int d = c.ndim - 1; d >= 0; --d) {
    c.sizes[d] = t.size(d);
    c.src_strides[d] = t.strides()[static_cast<std::size_t>(d)];
    c.dst_strides[d] = stride;
    stride *= t.size(d);
  }
  launch(dev, c, t.numel());
  ptr_ = out;
}

DeviceIndices::DeviceIndices(Device& dev, const Tensor& ids) {
  ScopedCostSink quiet(nullptr);  // part of the op's traffic, charged by the op
  keep_ = ids.dtype() == DType::i64 && ids.is_contiguous() ? ids : ids.to(DType::i64).contiguous();
  ptr_ = static_cast<const i64*>(device_pointer(dev, keep_));
}

}  // namespace ranksim::runtime

#include "runtime/device/device.h"

#include <memory>
#include <utility>

#include "runtime/device/emulated_device.h"
#include "sim/error.h"

namespace ranksim::runtime {

Device::~Device() = default;

namespace {

std::shared_ptr<Device>& installed() {
  static std::shared_ptr<Device> device;
  return device;
}

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
      throw Error(device_.name() + ": a storage of " + std::to_string(nbytes) +
                  " bytes has a device copy of " + std::to_string(nbytes_));
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
  return static_cast<std::byte*>(base) +
         static_cast<std::size_t>(t.storage_offset()) * dtype_size(t.dtype());
}

}  // namespace

namespace {
std::function<std::shared_ptr<Device>()>& gpu_factory() {
  static std::function<std::shared_ptr<Device>()> f;
  return f;
}
}  // namespace

void set_gpu_device_factory(std::function<std::shared_ptr<Device>()> factory) {
  gpu_factory() = std::move(factory);
}

std::shared_ptr<Device> make_device(const std::string& kind) {
  if (kind == "cpu") return nullptr;
  if (kind == "emulated") return std::make_shared<EmulatedDevice>();
  if (kind == "gpu") {
    if (!gpu_factory()) {
      throw Error("--device gpu: this ranksim was built without the GPU backend (RANKSIM_WITH_CUDA is OFF: "
                  "nvcc, the CUDA toolkit or NCCL was not found, or a sanitizer build); use --device cpu or "
                  "emulated, or rebuild where CUDA is installed (docs/gpu.md)");
    }
    return gpu_factory()();
  }
  throw Error("unknown device '" + kind + "': use cpu, emulated or gpu");
}

void set_compute_device(std::shared_ptr<Device> device) { installed() = std::move(device); }
Device* compute_device() { return installed().get(); }

ScopedComputeDevice::ScopedComputeDevice(std::shared_ptr<Device> device)
    : previous_(installed()) {
  installed() = std::move(device);
}
ScopedComputeDevice::~ScopedComputeDevice() { installed() = std::move(previous_); }

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
    throw Error(device.name() + ": tensor " + t.str() +
                " was written on the device without an up-to-date device copy");
  }
  t.mark_host_stale();
}

}  // namespace ranksim::runtime

// Tensors on a compute device (runtime/device/device.h): device copies, device-resident outputs,
// and the pieces a layer needs to run its own kernels on tensors.
//
// Residency. An op that runs on a device leaves its outputs in device memory: their host bytes
// are neither allocated nor filled until something reads them on the host (Tensor::data(),
// to_vector(), a collective...), which downloads them (runtime/tensor/tensor.h, "Device
// copies"). An input that lives on the device is used in place; one that the host wrote since is
// uploaded first, and its device copy is kept for the next op. Non-contiguous views are gathered
// on the device.
//
// A layer's device path (each layer above the runtime keeps its own kernels and runs them so):
//     if (Device* dev = device_for({&x, &y})) {     // after the layer's own checks
//       const DeviceInput X(*dev, x);               // contiguous device bytes of x
//       DeviceOutput Y(*dev, x.shape(), DType::f32); // a new device-resident tensor
//       launch(*dev, MyKernel{X.get(), Y.as<float>(), ...}, n);
//       return Y.t;
//     }
// Shape, dtype and index checks, error messages and cost charges are the caller's and stay the
// same on both paths.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "runtime/device/device.h"
#include "runtime/tensor/tensor.h"

namespace ranksim::runtime {

// f32, bf16 and f16: the dtypes device kernels compute on.
bool is_device_dtype(DType d);

// The calling thread's compute device when every tensor has data and every floating one has a
// device dtype (integer index tensors may come along); else nullptr and the op runs on the CPU.
// Counts one op in the device's stats when it answers a device.
Device* device_for(std::initializer_list<const Tensor*> inputs);
Device* device_for(const std::vector<const Tensor*>& inputs);

// True when t's storage has an up-to-date copy on device (nothing the host wrote since).
bool resident_on(const Device& device, const Tensor& t);
// The device address of t's first element, uploading the storage first if the device copy is
// missing or stale. REQUIRES: t has data.
const void* device_pointer(Device& device, const Tensor& t);
// A new tensor of shape and dtype whose bytes live on device; *ptr receives their address. The
// caller's kernels fill them; the host reads them by downloading.
Tensor device_tensor(Device& device, const Shape& shape, DType dtype, void** ptr);
// t's device copy, for a kernel that writes it in place; call mark_device_written after.
void* device_writable(Device& device, const Tensor& t);
// After writing t's device copy in place (a kernel, a device collective): the host's bytes are
// stale. REQUIRES: resident_on(device, t) before the write.
void mark_device_written(Device& device, const Tensor& t);

// A kernel input: contiguous device bytes of t -- t's own device copy when t is contiguous, else
// a gather on the device (on the host first for more than kernels::kMaxDims dims). Holds what it
// made for as long as it lives.
class DeviceInput {
 public:
  DeviceInput(Device& device, const Tensor& t);
  const void* get() const { return ptr_; }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(ptr_);
  }

 private:
  Tensor keep_;
  const void* ptr_ = nullptr;
};

// An index tensor (any integer dtype, any view) as contiguous i64 on the device.
class DeviceIndices {
 public:
  DeviceIndices(Device& device, const Tensor& ids);
  const std::int64_t* get() const { return ptr_; }

 private:
  Tensor keep_;
  const std::int64_t* ptr_ = nullptr;
};

// A kernel output: a new device-resident tensor t and its device address.
struct DeviceOutput {
  DeviceOutput(Device& device, const Shape& shape, DType dtype) : t(device_tensor(device, shape, dtype, &ptr)) {}
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void* ptr = nullptr;
  Tensor t;
};

}  // namespace ranksim::runtime

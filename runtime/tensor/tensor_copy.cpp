// Tensor's copies (runtime/tensor/tensor.h): reshape, contiguous, clone, to, copy_ and fill_. A
// copy runs on the compute device when its tensors live there (runtime/tensor/device_ops.h), else
// on the host over the strided layouts (runtime/tensor/strided_copy.h). Kept apart from
// tensor.cpp so that the tensor itself does not depend on the ops' device path, which takes
// tensors.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/tensor/cost.h"
#include "runtime/tensor/device_ops.h"
#include "runtime/tensor/strided_copy.h"
#include "runtime/tensor/tensor.h"
#include "sim/error.h"

namespace ranksim::runtime {

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::contiguous() const {
  if (!defined()) throw Error("Tensor::contiguous: the tensor is undefined");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  if (!defined()) throw Error("Tensor::clone: the tensor is undefined");
  if (Device* dev = device_ops::device_for_copy({this}, {this})) {  // stays on the device
    charge({"copy", 0.0, 2.0 * static_cast<double>(nbytes()), dtype_});
    return device_ops::copy_to_new(*dev, *this, dtype_);
  }
  wait_pending();
  charge({"copy", 0.0, 2.0 * static_cast<double>(nbytes()), dtype_});
  if (!has_data()) return shape_only(shape_, dtype_);
  Tensor out = zeros(shape_, dtype_);
  strided::convert(host_bytes(), dtype_, shape_, strides_, offset_, out.host_bytes(), dtype_, out.strides_, 0);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (!defined()) throw Error("Tensor::to: the tensor is undefined");
  if (dtype == dtype_) return *this;
  const OpCost cost{"convert", static_cast<double>(numel_),
                    static_cast<double>(numel_) * static_cast<double>(dtype_size(dtype_) + dtype_size(dtype)), dtype_};
  if (Device* dev = dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16
                        ? device_ops::device_for_copy({this}, {this})
                        : nullptr) {
    charge(cost);
    return device_ops::copy_to_new(*dev, *this, dtype);
  }
  wait_pending();
  charge(cost);
  if (!has_data()) return shape_only(shape_, dtype);
  Tensor out = zeros(shape_, dtype);
  strided::convert(host_bytes(), dtype_, shape_, strides_, offset_, out.host_bytes(), dtype, out.strides_, 0);
  return out;
}

void Tensor::copy_(const Tensor& src) const {
  if (!defined() || !src.defined()) throw Error("Tensor::copy_: undefined tensor");
  if (src.shape_ != shape_) {
    throw Error("Tensor::copy_: source " + src.str() + " does not match destination " + str());
  }
  const OpCost cost{"copy", 0.0,
                    static_cast<double>(numel_) * static_cast<double>(dtype_size(dtype_) + dtype_size(src.dtype_)),
                    dtype_};
  if (Device* dev = shares_storage(src) ? nullptr : device_ops::device_for_copy({this, &src}, {this, &src})) {
    charge(cost);
    device_ops::copy_into(*dev, *this, src);
    return;
  }
  src.wait_pending();
  wait_pending();
  charge(cost);
  if (!has_data()) return;
  src.require_data("Tensor::copy_ source");
  count_host_write();
  // A source sharing this storage could overlap the destination; copy it out first.
  Tensor from = src;
  if (shares_storage(src)) {
    from = zeros(shape_, src.dtype_);
    strided::convert(src.host_bytes(), src.dtype_, shape_, src.strides_, src.offset_, from.host_bytes(), src.dtype_,
                     from.strides_, 0);
  }
  strided::convert(from.host_bytes(), from.dtype_, shape_, from.strides_, from.offset_, host_bytes(), dtype_, strides_,
                   offset_);
}

void Tensor::fill_(double value) const {
  if (!defined()) throw Error("Tensor::fill_: the tensor is undefined");
  wait_pending();
  if (!has_data()) return;
  count_host_write();
  // Convert once, then replicate the element's bytes.
  std::byte element[8];
  convert_elements(&value, DType::f64, element, dtype_, 1);
  const std::size_t sz = dtype_size(dtype_);
  Tensor one = from_bytes({}, dtype_, element, sz);
  std::vector<std::int64_t> zero_strides(shape_.size(), 0);
  strided::convert(one.host_bytes(), dtype_, shape_, zero_strides, 0, host_bytes(), dtype_, strides_, offset_);
}

}  // namespace ranksim::runtime

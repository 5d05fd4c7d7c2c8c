#include "runtime/device/cuda/cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

#include "sim/error.h"

namespace ranksim::runtime::gpu {

DeviceInfo device_info() {
  DeviceInfo info;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    info.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();  // clear the sticky error state of this query
    return info;
  }
  info.count = n;
  if (n == 0) info.reason = "the CUDA runtime sees no device";
  return info;
}

void check_cuda(int status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(status)));
  }
}

void check_cublas(int status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string(what) + ": " + cublasGetStatusString(static_cast<cublasStatus_t>(status)));
  }
}

void set_device(int device) {
  const DeviceInfo info = device_info();
  if (device < 0 || device >= info.count) {
    throw Error("GPU backend: device " + std::to_string(device) + " does not exist (" + std::to_string(info.count) +
                " device(s)" + (info.reason.empty() ? "" : "; " + info.reason) + ")");
  }
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
}

int current_device() {
  int d = 0;
  check_cuda(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

ScopedDevice::ScopedDevice(int device) {
  previous_ = current_device();
  if (previous_ != device) set_device(device);
}
ScopedDevice::ScopedDevice(int device, std::nothrow_t) noexcept {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ != device) (void)cudaSetDevice(device);
}
ScopedDevice::~ScopedDevice() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

int launcher_local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* s = std::getenv(v);
    if (s == nullptr || *s == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(s, &end, 10);
    if (*end != '\0' || r < 0) {
      throw Error(std::string(v) + "='" + s + "' is not a local rank (a number >= 0); fix the launcher's environment");
    }
    return static_cast<int>(r);
  }
  return -1;
}

int process_device(int local_rank) {
  const DeviceInfo info = device_info();
  if (info.count == 0) throw Error("no CUDA device is visible to this process (" + info.reason + ")");
  if (const char* s = std::getenv("RANKSIM_GPU"); s != nullptr && *s != '\0') {
    char* end = nullptr;
    const long d = std::strtol(s, &end, 10);
    if (*end != '\0' || d < 0 || d >= info.count) {
      throw Error(std::string("RANKSIM_GPU='") + s + "' is not a visible CUDA device (this process sees " +
                  std::to_string(info.count) + ": 0 to " + std::to_string(info.count - 1) + ")");
    }
    return static_cast<int>(d);
  }
  return (local_rank < 0 ? 0 : local_rank) % info.count;
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
}
Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}
Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}
void Stream::synchronize() const {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize");
}

}  // namespace ranksim::runtime::gpu

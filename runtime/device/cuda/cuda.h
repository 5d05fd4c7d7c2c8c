// CUDA plumbing (built with RANKSIM_WITH_CUDA): device discovery, error translation and streams,
// for the CUDA compute device and the nccl backend.
//
// Every CUDA, cuBLAS and NCCL failure becomes a ranksim::Error naming the call and the library's
// own message, so a GPU run fails like any other bad input: a message, a non-zero exit.
// Not thread-safe; one process drives one device at a time (set_device).
#pragma once

#include <cstddef>
#include <new>
#include <string>

namespace ranksim::runtime::gpu {

struct DeviceInfo {
  int count = 0;       // usable CUDA devices (0 without a driver or a GPU)
  std::string reason;  // why count is 0: the CUDA runtime's message
};
// Never throws: a machine without a GPU or a driver answers count 0 and says why.
DeviceInfo device_info();

void set_device(int device);  // Error for a device that does not exist
int current_device();

// Makes `device` current for the scope and restores the previous current device after it, so
// every entry point of the CUDA device and of an NCCL communicator runs on its own GPU whatever
// another one left current. Costs one cudaGetDevice (host-side, no synchronisation) and a
// cudaSetDevice only when the device differs.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  // For destructors and other noexcept paths: ignores CUDA's errors instead of throwing (an
  // unusable device then stays as it was).
  ScopedDevice(int device, std::nothrow_t) noexcept;
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;
};

// The process's launcher-assigned rank on its node, read from the variables mpirun, MPICH's
// hydra, Slurm and torchrun set (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID,
// LOCAL_RANK, in that order); -1 when none is set.
int launcher_local_rank();

// The one rule that picks this process's GPU, for the compute device and the nccl backend alike:
// RANKSIM_GPU=N when set (an ordinal among the visible devices), else local_rank modulo the
// visible devices. Error when there is no device, or RANKSIM_GPU is not a visible device.
int process_device(int local_rank);

// Throw ranksim::Error("<what>: <library message>") on failure. The status is the library's own
// code (cudaError_t, cublasStatus_t), passed as int to keep the CUDA headers out
// of callers.
void check_cuda(int status, const char* what);
void check_cublas(int status, const char* what);

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

}  // namespace ranksim::runtime::gpu

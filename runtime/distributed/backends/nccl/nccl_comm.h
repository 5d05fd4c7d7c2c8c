// NCCL communicators and collectives on device buffers (built with RANKSIM_WITH_CUDA).
//
// A communicator joins `nranks` ranks, each on its own device, from one ncclUniqueId: rank 0
// makes the id (unique_id()) and every rank receives it -- over MPI in a job of one process per
// GPU (the mpi backend's broadcast), or in memory for several devices driven by one process
// (init_all, the single-node test path). Collectives run on the communicator's stream with
// torch.distributed's buffer contracts (runtime/distributed/distributed.h): all_gather concatenates rank
// i's input at [i*c, (i+1)*c), reduce_scatter gives rank i chunk i, all_to_all splits along the
// flat buffer in equal chunks. NCCL chooses its own algorithms, so reductions are not ordered as
// ranksim's schedules order them: results match the sim backend to floating-point rounding,
// not bit for bit.
//
// Errors (ranksim::Error naming the call and NCCL's message): a dtype or size that does not fit
// the contract, a failed NCCL call, an asynchronous communicator error found by synchronize(),
// and a collective that does not finish within synchronize()'s timeout (a peer that failed or
// never came). A communicator that saw an error is aborted (ncclCommAbort), never destroyed,
// so no later call waits on its dead peers; one destroyed while an exception unwinds is aborted
// too. Every call runs on the communicator's device and restores the caller's current device.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/device/cuda/cuda.h"
#include "runtime/distributed/backends/nccl/device_buffer.h"
#include "runtime/distributed/reduce.h"

namespace ranksim::runtime::gpu {

// Throws ranksim::Error("<what>: <NCCL message>") when status (an ncclResult_t) is not success.
void check_nccl(int status, const char* what);

// An ncclUniqueId as plain bytes (NCCL_UNIQUE_ID_BYTES = 128), so callers need no NCCL header to
// broadcast it.
using UniqueId = std::array<char, 128>;
UniqueId unique_id();

class NcclComm {
 public:
  // Joins the communicator as `rank` of `nranks` on the current device. Collective over the
  // ranks holding the same id.
  NcclComm(const UniqueId& id, int nranks, int rank);
  // One communicator per device, in one process (ncclCommInitAll): element i runs on devices[i]
  // as rank i.
  static std::vector<NcclComm> init_all(const std::vector<int>& devices);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  int device() const { return device_; }
  const Stream& stream() const { return *stream_; }

  // The calls below enqueue on stream(); with several communicators in one process, wrap the
  // calls of one collective on every communicator in group_start()/group_end(). AVG divides as
  // NCCL's ncclAvg does.
  void all_reduce(DeviceBuffer& buf, ReduceOp op);
  void all_gather(DeviceBuffer& out, const DeviceBuffer& in);                   // out.numel == size * in.numel
  void reduce_scatter(DeviceBuffer& out, const DeviceBuffer& in, ReduceOp op);  // in == size * out
  void broadcast(DeviceBuffer& buf, int root);
  void reduce(DeviceBuffer& buf, int root, ReduceOp op);       // in place; result on root
  void all_to_all(DeviceBuffer& out, const DeviceBuffer& in);  // equal chunks of numel/size
  // Uneven all-to-all: send_counts[j] elements from send_offsets[j] of `in` go to rank j, and
  // recv_counts[j] elements from rank j land at recv_offsets[j] of `out` (grouped send/recv).
  void all_to_all_v(DeviceBuffer& out, const DeviceBuffer& in, const std::vector<std::int64_t>& send_counts,
                    const std::vector<std::int64_t>& send_offsets, const std::vector<std::int64_t>& recv_counts,
                    const std::vector<std::int64_t>& recv_offsets);
  // gather: root's `out` (size * in.numel) gets rank i's `in` at [i*c, (i+1)*c); out is unused
  // elsewhere. scatter: rank i's `out` gets root's `in` at [i*c, (i+1)*c).
  void gather(DeviceBuffer& out, const DeviceBuffer& in, int root);
  void scatter(DeviceBuffer& out, const DeviceBuffer& in, int root);
  void send(const DeviceBuffer& buf, int peer);
  void recv(DeviceBuffer& buf, int peer);
  // Orders this communicator's next work after everything queued so far on `cuda_stream` (a
  // cudaStream_t, e.g. the compute device's), with an event: no host wait.
  void wait_for_stream(void* cuda_stream);
  // Waits for this communicator's stream, polling it and NCCL's asynchronous error: an
  // asynchronous error, or work still running after timeout_seconds (> 0; 0 waits forever),
  // aborts the communicator and throws an Error that says which.
  void synchronize(double timeout_seconds = 0);
  // ncclCommAbort: ends this rank's part in every pending operation at once; the communicator
  // is unusable after it. Idempotent.
  void abort() noexcept;
  bool aborted() const { return aborted_; }

  static void group_start();
  static void group_end();

 private:
  NcclComm() = default;
  void live(const char* what) const;  // Error once the communicator was aborted
  void* comm_ = nullptr;              // ncclComm_t
  int rank_ = 0, nranks_ = 1, device_ = 0;
  bool aborted_ = false;
  std::unique_ptr<Stream> stream_;
  void* ready_ = nullptr;  // cudaEvent_t for wait_for_stream, made on first use
};

}  // namespace ranksim::runtime::gpu

#include "runtime/distributed/backends/nccl/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "sim/error.h"

namespace ranksim::runtime::gpu {

void check_nccl(int status, const char* what) {
  if (status != ncclSuccess) {
    throw Error(std::string(what) + ": " + ncclGetErrorString(static_cast<ncclResult_t>(status)));
  }
}

namespace {

static_assert(sizeof(ncclUniqueId) == std::tuple_size_v<UniqueId>, "UniqueId must hold an ncclUniqueId");

ncclComm_t comm_of(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t stream_of(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
  }
  throw Error("NCCL: unknown dtype");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::AVG:
      return ncclAvg;
    case ReduceOp::MAX:
      return ncclMax;
    case ReduceOp::MIN:
      return ncclMin;
    case ReduceOp::PROD:
      return ncclProd;
  }
  throw Error("NCCL: unknown reduce op");
}

void same_dtype(const DeviceBuffer& a, const DeviceBuffer& b, const char* what) {
  if (a.dtype() != b.dtype()) {
    throw Error(std::string(what) + ": output is " + dtype_name(a.dtype()) + " but input is " + dtype_name(b.dtype()));
  }
}

size_t count(std::int64_t n) { return static_cast<size_t>(n); }

}  // namespace

UniqueId unique_id() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  UniqueId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

NcclComm::NcclComm(const UniqueId& id, int nranks, int rank) : rank_(rank), nranks_(nranks) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    throw Error("NCCL: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " is not a valid place");
  }
  device_ = current_device();
  stream_ = std::make_unique<Stream>();
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t c = nullptr;
  check_nccl(ncclCommInitRank(&c, nranks, nid, rank), "ncclCommInitRank");
  comm_ = c;
}

std::vector<NcclComm> NcclComm::init_all(const std::vector<int>& devices) {
  const DeviceInfo info = device_info();
  for (int d : devices) {
    if (d < 0 || d >= info.count) {
      throw Error("NCCL: device " + std::to_string(d) + " does not exist (" + std::to_string(info.count) +
                  " device(s)" + (info.reason.empty() ? "" : "; " + info.reason) + ")");
    }
  }
  std::vector<ncclComm_t> raw(devices.size(), nullptr);
  const ScopedDevice keep(current_device());  // leaves the caller's device current afterwards
  check_nccl(ncclCommInitAll(raw.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
  std::vector<NcclComm> out;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    NcclComm c;
    c.comm_ = raw[i];
    c.rank_ = static_cast<int>(i);
    c.nranks_ = static_cast<int>(devices.size());
    c.device_ = devices[i];
    set_device(devices[i]);
    c.stream_ = std::make_unique<Stream>();
    out.push_back(std::move(c));
  }
  return out;
}

namespace {
// Ends a communicator: destroyed when all went well, aborted while an exception unwinds (its
// peers may be gone, and ncclCommDestroy could wait for them).
void release_comm(void* comm, int device) noexcept {
  if (comm == nullptr) return;
  const ScopedDevice on(device, std::nothrow);
  if (std::uncaught_exceptions() > 0) {
    (void)ncclCommAbort(comm_of(comm));
  } else {
    (void)ncclCommDestroy(comm_of(comm));
  }
}
}  // namespace

NcclComm::~NcclComm() {
  release_comm(comm_, device_);
  if (ready_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
}
NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      nranks_(other.nranks_),
      device_(other.device_),
      aborted_(other.aborted_),
      stream_(std::move(other.stream_)),
      ready_(std::exchange(other.ready_, nullptr)) {}
NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    release_comm(comm_, device_);
    if (ready_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = other.rank_;
    nranks_ = other.nranks_;
    device_ = other.device_;
    aborted_ = other.aborted_;
    stream_ = std::move(other.stream_);
    ready_ = std::exchange(other.ready_, nullptr);
  }
  return *this;
}

void NcclComm::wait_for_stream(void* cuda_stream) {
  live("wait_for_stream");
  const ScopedDevice on(device_);
  if (ready_ == nullptr) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    ready_ = e;
  }
  const auto e = static_cast<cudaEvent_t>(ready_);
  check_cuda(cudaEventRecord(e, static_cast<cudaStream_t>(cuda_stream)), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(stream_of(*stream_), e, 0), "cudaStreamWaitEvent");
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  {
    const ScopedDevice on(device_, std::nothrow);
    (void)ncclCommAbort(comm_of(comm_));
  }
  comm_ = nullptr;
  aborted_ = true;
}

void NcclComm::all_reduce(DeviceBuffer& buf, ReduceOp op) {
  live("all_reduce");
  const ScopedDevice on(device_);
  check_nccl(ncclAllReduce(buf.data(), buf.data(), count(buf.numel()), nccl_type(buf.dtype()), nccl_op(op),
                           comm_of(comm_), stream_of(*stream_)),
             "ncclAllReduce");
}

void NcclComm::all_gather(DeviceBuffer& out, const DeviceBuffer& in) {
  live("all_gather");
  const ScopedDevice on(device_);
  same_dtype(out, in, "NCCL all_gather");
  if (out.numel() != in.numel() * nranks_) {
    throw Error("NCCL all_gather: output of " + std::to_string(out.numel()) + " elements is not " +
                std::to_string(nranks_) + " x the input's " + std::to_string(in.numel()));
  }
  check_nccl(ncclAllGather(in.data(), out.data(), count(in.numel()), nccl_type(in.dtype()), comm_of(comm_),
                           stream_of(*stream_)),
             "ncclAllGather");
}

void NcclComm::reduce_scatter(DeviceBuffer& out, const DeviceBuffer& in, ReduceOp op) {
  live("reduce_scatter");
  const ScopedDevice on(device_);
  same_dtype(out, in, "NCCL reduce_scatter");
  if (in.numel() != out.numel() * nranks_) {
    throw Error("NCCL reduce_scatter: input of " + std::to_string(in.numel()) + " elements is not " +
                std::to_string(nranks_) + " x the output's " + std::to_string(out.numel()));
  }
  check_nccl(ncclReduceScatter(in.data(), out.data(), count(out.numel()), nccl_type(in.dtype()), nccl_op(op),
                               comm_of(comm_), stream_of(*stream_)),
             "ncclReduceScatter");
}

void NcclComm::broadcast(DeviceBuffer& buf, int root) {
  live("broadcast");
  const ScopedDevice on(device_);
  check_nccl(ncclBroadcast(buf.data(), buf.data(), count(buf.numel()), nccl_type(buf.dtype()), root, comm_of(comm_),
                           stream_of(*stream_)),
             "ncclBroadcast");
}

void NcclComm::reduce(DeviceBuffer& buf, int root, ReduceOp op) {
  live("reduce");
  const ScopedDevice on(device_);
  check_nccl(ncclReduce(buf.data(), buf.data(), count(buf.numel()), nccl_type(buf.dtype()), nccl_op(op), root,
                        comm_of(comm_), stream_of(*stream_)),
             "ncclReduce");
}

void NcclComm::all_to_all(DeviceBuffer& out, const DeviceBuffer& in) {
  live("all_to_all");
  const ScopedDevice on(device_);
  same_dtype(out, in, "NCCL all_to_all");
  if (in.numel() != out.numel() || in.numel() % nranks_ != 0) {
    throw Error("NCCL all_to_all: input and output must hold the same number of elements, divisible by " +
                std::to_string(nranks_) + " (got " + std::to_string(in.numel()) + " and " +
                std::to_string(out.numel()) + ")");
  }
  const std::int64_t chunk = in.numel() / nranks_;
  const std::size_t bytes = static_cast<std::size_t>(chunk) * dtype_size(in.dtype());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < nranks_; ++peer) {
    const auto* src = static_cast<const char*>(in.data()) + static_cast<std::size_t>(peer) * bytes;
    auto* dst = static_cast<char*>(out.data()) + static_cast<std::size_t>(peer) * bytes;
    check_nccl(ncclSend(src, count(chunk), nccl_type(in.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
               "ncclSend");
    check_nccl(ncclRecv(dst, count(chunk), nccl_type(in.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
               "ncclRecv");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclComm::all_to_all_v(DeviceBuffer& out, const DeviceBuffer& in, const std::vector<std::int64_t>& send_counts,
                            const std::vector<std::int64_t>& send_offsets, const std::vector<std::int64_t>& recv_counts,
                            const std::vector<std::int64_t>& recv_offsets) {
  live("all_to_all_v");
  const ScopedDevice on(device_);
  same_dtype(out, in, "NCCL all_to_all");
  const auto n = static_cast<std::size_t>(nranks_);
  if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n || recv_offsets.size() != n) {
    throw Error("NCCL all_to_all: split tables must have " + std::to_string(nranks_) + " entries");
  }
  for (std::size_t j = 0; j < n; ++j) {
    if (send_offsets[j] < 0 || send_counts[j] < 0 || send_offsets[j] + send_counts[j] > in.numel() ||
        recv_offsets[j] < 0 || recv_counts[j] < 0 || recv_offsets[j] + recv_counts[j] > out.numel()) {
      throw Error("NCCL all_to_all: split " + std::to_string(j) + " lies outside the buffers");
    }
  }
  const std::size_t esize = dtype_size(in.dtype());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < nranks_; ++peer) {
    const auto j = static_cast<std::size_t>(peer);
    if (send_counts[j] > 0) {
      const auto* src = static_cast<const char*>(in.data()) + static_cast<std::size_t>(send_offsets[j]) * esize;
      check_nccl(ncclSend(src, count(send_counts[j]), nccl_type(in.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
                 "ncclSend");
    }
    if (recv_counts[j] > 0) {
      auto* dst = static_cast<char*>(out.data()) + static_cast<std::size_t>(recv_offsets[j]) * esize;
      check_nccl(
          ncclRecv(dst, count(recv_counts[j]), nccl_type(out.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
          "ncclRecv");
    }
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclComm::gather(DeviceBuffer& out, const DeviceBuffer& in, int root) {
  live("gather");
  const ScopedDevice on(device_);
  const std::int64_t c = in.numel();
  if (rank_ == root && (out.numel() != c * nranks_ || out.dtype() != in.dtype())) {
    throw Error("NCCL gather: the root's output must hold " + std::to_string(nranks_) + " x " + std::to_string(c) +
                " elements of the input's dtype");
  }
  const std::size_t bytes = static_cast<std::size_t>(c) * dtype_size(in.dtype());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  if (rank_ == root) {
    for (int peer = 0; peer < nranks_; ++peer) {
      auto* dst = static_cast<char*>(out.data()) + static_cast<std::size_t>(peer) * bytes;
      check_nccl(ncclRecv(dst, count(c), nccl_type(in.dtype()), peer, comm_of(comm_), stream_of(*stream_)), "ncclRecv");
    }
  }
  check_nccl(ncclSend(in.data(), count(c), nccl_type(in.dtype()), root, comm_of(comm_), stream_of(*stream_)),
             "ncclSend");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclComm::scatter(DeviceBuffer& out, const DeviceBuffer& in, int root) {
  live("scatter");
  const ScopedDevice on(device_);
  const std::int64_t c = out.numel();
  if (rank_ == root && (in.numel() != c * nranks_ || out.dtype() != in.dtype())) {
    throw Error("NCCL scatter: the root's input must hold " + std::to_string(nranks_) + " x " + std::to_string(c) +
                " elements of the output's dtype");
  }
  const std::size_t bytes = static_cast<std::size_t>(c) * dtype_size(out.dtype());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  if (rank_ == root) {
    for (int peer = 0; peer < nranks_; ++peer) {
      const auto* src = static_cast<const char*>(in.data()) + static_cast<std::size_t>(peer) * bytes;
      check_nccl(ncclSend(src, count(c), nccl_type(out.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
                 "ncclSend");
    }
  }
  check_nccl(ncclRecv(out.data(), count(c), nccl_type(out.dtype()), root, comm_of(comm_), stream_of(*stream_)),
             "ncclRecv");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclComm::send(const DeviceBuffer& buf, int peer) {
  live("send");
  const ScopedDevice on(device_);
  check_nccl(
      ncclSend(buf.data(), count(buf.numel()), nccl_type(buf.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
      "ncclSend");
}

void NcclComm::recv(DeviceBuffer& buf, int peer) {
  live("recv");
  const ScopedDevice on(device_);
  check_nccl(
      ncclRecv(buf.data(), count(buf.numel()), nccl_type(buf.dtype()), peer, comm_of(comm_), stream_of(*stream_)),
      "ncclRecv");
}

void NcclComm::synchronize(double timeout_seconds) {
  live("synchronize");
  const ScopedDevice on(device_);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream_of(*stream_));
    ncclResult_t async = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_of(comm_), &async);
    if (q != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      abort();
      check_nccl(q, "ncclCommGetAsyncError");
      check_nccl(async, "NCCL (asynchronous error; the communicator was aborted)");
    }
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      abort();
      check_cuda(e, "NCCL stream (the communicator was aborted)");
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_seconds > 0 && waited > timeout_seconds) {
      abort();
      throw Error("NCCL: rank " + std::to_string(rank_) + " of " + std::to_string(nranks_) + " on device " +
                  std::to_string(device_) + " waited " + std::to_string(static_cast<long long>(waited)) +
                  " s for a collective that did not finish (a peer failed or never called it); the communicator "
                  "was aborted. Set RANKSIM_COLLECTIVE_TIMEOUT=SECONDS to wait longer (0: forever)");
    }
    // Spin while the work is likely short, then let other processes have the core.
    if (waited < 0.01) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void NcclComm::live(const char* what) const {
  if (comm_ == nullptr) {
    throw Error(std::string("NCCL ") + what + ": the communicator was aborted after an earlier error (rank " +
                std::to_string(rank_) + " of " + std::to_string(nranks_) + ")");
  }
}

void NcclComm::group_start() { check_nccl(ncclGroupStart(), "ncclGroupStart"); }
void NcclComm::group_end() { check_nccl(ncclGroupEnd(), "ncclGroupEnd"); }

}  // namespace ranksim::runtime::gpu

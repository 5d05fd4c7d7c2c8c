#include "runtime/distributed/backends/nccl/nccl_collectives.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/device/cuda/cuda.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/device.h"
#include "runtime/distributed/backends/nccl/nccl_comm.h"
#include "runtime/distributed/backends/timeout.h"
#include "runtime/tensor/device_tensors.h"
#include "sim/error.h"

namespace ranksim::runtime::gpu {
namespace {

using detail::CollectiveTensors;
using detail::Signature;

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(std::string(what) + ": " + std::string(msg, static_cast<std::size_t>(len)));
  }
}

// This process's rank among the processes of its node, and how many they are.
std::pair<int, int> node_rank_and_size() {
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int r = 0, n = 1;
  MPI_Comm_rank(node, &r);
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return {r, n};
}

class NcclCollectives final : public detail::DeviceCollectives {
 public:
  NcclCollectives() {
    const DeviceInfo info = device_info();
    if (info.count == 0) {
      throw Error("the nccl backend needs a CUDA device in every process, and this one has none (" + info.reason +
                  "); run with --backend mpi, or on GPU nodes");
    }
    // One GPU per process for compute and communication: the compute device's when it is a CUDA
    // device, else the rule the compute device would use (process_device), fed the MPI node-local
    // rank, which every launcher provides.
    const auto [local_rank, local_size] = node_rank_and_size();
    if (local_size > info.count && std::getenv("RANKSIM_GPU") == nullptr) {
      throw Error("the nccl backend needs one GPU per process: " + std::to_string(local_size) +
                  " processes run on this node, which has " + std::to_string(info.count) +
                  " GPU(s) (NCCL refuses two ranks of one communicator on one GPU); start at most " +
                  std::to_string(info.count) + " processes per node, or use --backend mpi");
    }
    const Device* dev = compute_device();
    device_ = dev != nullptr && cuda_ordinal_of(*dev) >= 0 ? cuda_ordinal_of(*dev) : process_device(local_rank);
    set_device(device_);
  }
  ~NcclCollectives() override { comms_.clear(); }

  const char* name() const override { return "nccl"; }

  void add_group(int id, const std::vector<int>& ranks, int index, const void* mpi_comm) override {
    MPI_Comm comm = *static_cast<const MPI_Comm*>(mpi_comm);
    UniqueId uid{};
    if (index == 0) uid = unique_id();
    check_mpi(MPI_Bcast(uid.data(), static_cast<int>(uid.size()), MPI_BYTE, 0, comm), "MPI_Bcast (NCCL id)");
    const ScopedDevice on(device_);
    comms_.emplace(id, std::make_unique<NcclComm>(uid, static_cast<int>(ranks.size()), index));
  }

  void run(int id, const Signature& sig, const CollectiveTensors& tensors, int index) override {
    try {
      run_one(id, sig, tensors, index);
    } catch (...) {
      // A failed collective leaves its peers waiting in it or in the next one: abort every
      // communicator, so neither this process's teardown nor a later call waits on them.
      for (auto& [gid, comm] : comms_) comm->abort();
      throw;
    }
  }

 private:
  void run_one(int id, const Signature& sig, const CollectiveTensors& tensors, int index) {
    const auto it = comms_.find(id);
    if (it == comms_.end()) throw Error("nccl backend: group " + std::to_string(id) + " has no NCCL communicator");
    NcclComm& c = *it->second;
    if (Device* dev = direct_device(sig, tensors)) {
      run_in_place(*dev, c, sig, tensors, index);
      return;
    }
    const Stream& s = c.stream();
    const int n = c.size();
    using K = CollectiveKind;
    switch (sig.kind) {
      case K::all_reduce: {
        const Tensor& t = std::get<detail::AllReduceTensors>(tensors).tensor;
        DeviceBuffer b = DeviceBuffer::upload(t, s);
        c.all_reduce(b, checked_op(sig));
        done(c);
        b.download_into(t, s);
        break;
      }
      case K::broadcast: {
        const Tensor& t = std::get<detail::BroadcastTensors>(tensors).tensor;
        DeviceBuffer b = DeviceBuffer::upload(t, s);
        c.broadcast(b, sig.root);
        done(c);
        b.download_into(t, s);
        break;
      }
      case K::reduce: {
        const Tensor& t = std::get<detail::ReduceTensors>(tensors).tensor;
        DeviceBuffer b = DeviceBuffer::upload(t, s);
        c.reduce(b, sig.root, checked_op(sig));
        done(c);
        if (index == sig.root) b.download_into(t, s);
        break;
      }
      case K::all_gather: {
        const auto& t = std::get<detail::AllGatherTensors>(tensors);
        const DeviceBuffer in = DeviceBuffer::upload(t.input, s);
        DeviceBuffer out(t.output.numel(), t.output.dtype());
        c.all_gather(out, in);
        done(c);
        out.download_into(t.output, s);
        break;
      }
      case K::reduce_scatter: {
        const auto& t = std::get<detail::ReduceScatterTensors>(tensors);
        const DeviceBuffer in = DeviceBuffer::upload(t.input, s);
        DeviceBuffer out(t.output.numel(), t.output.dtype());
        c.reduce_scatter(out, in, checked_op(sig));
        done(c);
        out.download_into(t.output, s);
        break;
      }
      case K::all_to_all: {
        const auto& t = std::get<detail::AllToAllTensors>(tensors);
        const DeviceBuffer in = DeviceBuffer::upload(t.input, s);
        DeviceBuffer out(t.output.numel(), t.output.dtype());
        const std::vector<int64_t> ins = t.input_splits.to_vector(), outs = t.output_splits.to_vector();
        c.all_to_all_v(out, in, ins, offsets(ins), outs, offsets(outs));
        done(c);
        out.download_into(t.output, s);
        break;
      }
      case K::gather: {
        const auto& t = std::get<detail::GatherTensors>(tensors);
        const DeviceBuffer in = DeviceBuffer::upload(t.tensor, s);
        DeviceBuffer out(index == sig.root ? t.tensor.numel() * n : 0, t.tensor.dtype());
        c.gather(out, in, sig.root);
        done(c);
        if (index == sig.root) {
          for (int i = 0; i < n; ++i) {
            out.download_into(t.gather_list[static_cast<std::size_t>(i)], s, i * t.tensor.numel());
          }
        }
        break;
      }
      case K::scatter: {
        const auto& t = std::get<detail::ScatterTensors>(tensors);
        DeviceBuffer in(index == sig.root ? t.tensor.numel() * n : 0, t.tensor.dtype());
        if (index == sig.root) {
          for (int i = 0; i < n; ++i)
            in.copy_from(t.scatter_list[static_cast<std::size_t>(i)], s, i * t.tensor.numel());
        }
        DeviceBuffer out(t.tensor.numel(), t.tensor.dtype());
        c.scatter(out, in, sig.root);
        done(c);
        out.download_into(t.tensor, s);
        break;
      }
      case K::barrier:
        break;  // the mpi backend keeps barriers
    }
  }

  bool in_place(const Tensor& t) const override {
    const Device* dev = compute_device();
    return dev != nullptr && cuda_ordinal_of(*dev) == device_ && t.has_data() && t.is_contiguous();
  }

  // The compute device when it is this process's GPU and the collective's tensors are contiguous:
  // NCCL then works on the tensors' device copies in place, with no host staging. Gather and
  // scatter, whose lists are separate tensors, stage through the host.
  Device* direct_device(const Signature& sig, const CollectiveTensors& tensors) const {
    if (sig.kind == CollectiveKind::gather || sig.kind == CollectiveKind::scatter ||
        sig.kind == CollectiveKind::barrier) {
      return nullptr;
    }
    const auto [out, in] = in_place_tensors(tensors);
    if (!in_place(*out) || (in != nullptr && !in_place(*in))) return nullptr;
    return compute_device();
  }

  // The tensors NCCL works on in place: {the output (or the in-place tensor), the input or
  // nullptr}. REQUIRES: not gather, scatter or barrier.
  static std::pair<const Tensor*, const Tensor*> in_place_tensors(const CollectiveTensors& tensors) {
    using P = std::pair<const Tensor*, const Tensor*>;
    if (const auto* t = std::get_if<detail::AllReduceTensors>(&tensors)) return P{&t->tensor, nullptr};
    if (const auto* t = std::get_if<detail::BroadcastTensors>(&tensors)) return P{&t->tensor, nullptr};
    if (const auto* t = std::get_if<detail::ReduceTensors>(&tensors)) return P{&t->tensor, nullptr};
    if (const auto* t = std::get_if<detail::AllGatherTensors>(&tensors)) return P{&t->output, &t->input};
    if (const auto* t = std::get_if<detail::ReduceScatterTensors>(&tensors)) return P{&t->output, &t->input};
    const auto& t = std::get<detail::AllToAllTensors>(tensors);
    return P{&t.output, &t.input};
  }

  // t's device copy (uploaded first when the host wrote it since), as a buffer NCCL reads and
  // writes in place.
  static DeviceBuffer device_copy(Device& dev, const Tensor& t) {
    return DeviceBuffer::borrow(const_cast<void*>(device_pointer(dev, t)), t.numel(), t.dtype());
  }

  static void run_in_place(Device& dev, NcclComm& c, const Signature& sig, const CollectiveTensors& tensors,
                           int index) {
    using K = CollectiveKind;
    const auto [out, in] = in_place_tensors(tensors);
    DeviceBuffer a = device_copy(dev, *out);
    DeviceBuffer b = in != nullptr ? device_copy(dev, *in) : DeviceBuffer();
    // The kernels that wrote the inputs are queued on the compute device's stream: NCCL's stream
    // waits for them with an event, not the host. The host then waits once, for NCCL (done).
    c.wait_for_stream(cuda_stream_of(dev));
    switch (sig.kind) {
      case K::all_reduce:
        c.all_reduce(a, checked_op(sig));
        break;
      case K::broadcast:
        c.broadcast(a, sig.root);
        break;
      case K::reduce:
        c.reduce(a, sig.root, checked_op(sig));
        break;
      case K::all_gather:
        c.all_gather(a, b);
        break;
      case K::reduce_scatter:
        c.reduce_scatter(a, b, checked_op(sig));
        break;
      case K::all_to_all: {
        const auto& t = std::get<detail::AllToAllTensors>(tensors);
        const std::vector<int64_t> ins = t.input_splits.to_vector(), outs = t.output_splits.to_vector();
        c.all_to_all_v(a, b, ins, offsets(ins), outs, offsets(outs));
        break;
      }
      case K::gather:
      case K::scatter:
      case K::barrier:
        throw Error("nccl backend: " + sig.describe() + " does not run in place on the device");
    }
    done(c);  // the next kernels on the compute device's stream read the results
    if (sig.kind != K::reduce || index == sig.root) mark_device_written(dev, *out);
  }

  // Element offsets of consecutive chunks of the given sizes.
  static std::vector<std::int64_t> offsets(const std::vector<std::int64_t>& splits) {
    std::vector<std::int64_t> off(splits.size());
    for (std::size_t j = 1; j < splits.size(); ++j) off[j] = off[j - 1] + splits[j - 1];
    return off;
  }

  static ReduceOp checked_op(const Signature& sig) {
    if (sig.op == ReduceOp::AVG && !is_floating(sig.dtype)) {
      throw Error(std::string("nccl backend: AVG of ") + dtype_name(sig.dtype) +
                  " is not supported by NCCL; use SUM and divide");
    }
    return sig.op;
  }
  // Waits for the collective: the nccl backend's calls are synchronous for the host. A peer that
  // failed or never called it ends the wait after RANKSIM_COLLECTIVE_TIMEOUT (the mpi backend's
  // timeout, default 600 s) with an Error, the communicator aborted.
  static void done(NcclComm& c) { c.synchronize(detail::collective_timeout()); }

  int device_ = 0;
  std::map<int, std::unique_ptr<NcclComm>> comms_;
};

}  // namespace

std::unique_ptr<detail::DeviceCollectives> nccl_collectives() { return std::make_unique<NcclCollectives>(); }

}  // namespace ranksim::runtime::gpu

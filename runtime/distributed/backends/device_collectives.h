// DeviceCollectives: collectives on devices inside the mpi backend's processes, the seam the
// nccl backend (runtime/distributed/backends/nccl) fills. The mpi backend keeps the processes,
// groups, point-to-point, clocks, records and traces, and hands every collective that carries
// data to this object; shape-only collectives and barriers stay on MPI.
//
// A run gets one through SpawnOptions::device_collectives (runtime/distributed/spawn_options.h),
// made after MPI is initialised and destroyed before the MPI communicators it was bootstrapped
// over. Not thread-safe: it runs on the thread of the run's engine.
#pragma once

#include <vector>

#include "runtime/distributed/backends/request.h"

namespace ranksim::runtime::detail {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives();
  virtual const char* name() const = 0;
  // A group this process is a member of (index: its place in ranks), with the group's MPI
  // communicator (a pointer to an MPI_Comm) to bootstrap its device communicator over.
  // Collective over the group's members, in group-creation order.
  virtual void add_group(int id, const std::vector<int>& ranks, int index, const void* mpi_comm) = 0;
  // Runs the collective sig with this rank's tensors (of sig.kind, holding data; roots are group
  // indices) on group id: reads the inputs, writes the outputs.
  virtual void run(int id, const Signature& sig, const CollectiveTensors& tensors, int index) = 0;
  // True when a collective reads and writes t's device copy in place (t on this process's GPU,
  // the compute device's, dense): t's host bytes need not be current before the call, and its
  // result lands in the device copy, not on the host. Gather and scatter still stage their
  // tensors through the host, with the synchronising accessors.
  virtual bool in_place(const Tensor& /*t*/) const { return false; }
};

}  // namespace ranksim::runtime::detail

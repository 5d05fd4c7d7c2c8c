// What a run started by spawn() (runtime/distributed/spawn.h) reports: every rank's clock, its
// compute and communication time, the collectives as nccl-tests would time them, and the trace.
// Backends fill it (runtime/distributed/backends); spawn() returns it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/distributed/schedule.h"
#include "runtime/tensor/memory.h"
#include "sim/kernel_profile.h"
#include "sim/time.h"
#include "sim/trace.h"

namespace ranksim::runtime {

// One completed collective, as nccl-tests would time it.
struct CollectiveRecord {
  CollectiveKind kind;
  Algorithm algorithm;  // as timed: the nccl model's choice where the topology uses it
  // The nccl timing model's protocol ("LL", "LL128", "Simple") and channel count; empty and 0
  // when the collective was timed as a schedule on the network graph.
  std::string protocol;
  int channels = 0;
  bool tuner = false;  // the topology's tuner config chose the algorithm and protocol
  std::string group;
  int group_size = 0;
  uint64_t call = 0;  // call number within the group
  int64_t bytes = 0;  // nccl-tests "size": the per-rank buffer in bytes (see docs)
  int64_t count = 0;  // elements in that buffer
  std::string dtype;
  sim::Time start;  // latest post among the members
  sim::Time end;    // latest completion among the members
};

// For a sim run, every field covers every rank in virtual time. For an mpi run, times are wall
// clock since the run's start: makespan, clocks, compute and comm cover every rank (gathered at
// the end), collectives lists every group's collectives on rank 0 (each recorded by the group's
// first member, with that member's start and end; ordered by start) and, elsewhere, those of
// the groups this process is the first member of, and trace holds every rank's spans on rank 0 and this rank's own
// elsewhere.
// "ring", or with the nccl model "ring/LL128/16ch" ("+tuner" appended where the topology's tuner
// config chose it): the label of a record's algorithm in summaries, tables and JSON.
std::string algorithm_label(const CollectiveRecord& rec);

// One rank's compute on the sim backend, by kernel class (sim/kernel_profile.h).
struct ComputeBreakdown {
  std::array<sim::Time, sim::kKernelClasses> time{};  // indexed by sim::KernelClass
  double flops = 0;                                   // every FLOP charged
  // The FLOPs of its tensor-core kernel classes (sim::KernelClass), each divided by its device's
  // peak for its dtype: the seconds the tensor cores would need at peak (MFU = this / makespan;
  // docs/compute.md).
  double peak_seconds = 0;
};

// One rank's device memory on the sim backend (runtime/tensor/memory.h): the peak of the bytes
// its live tensors held, what that peak was made of (indexed by MemoryKind), when it was reached
// and the op the rank had run last and its phase (runtime/tensor/memory.h's MemoryPhase), its
// device's capacity, and its bytes over virtual time.
struct MemorySample {
  sim::Time time;
  std::array<uint64_t, kMemoryKinds> bytes{};  // indexed by MemoryKind
};
struct MemoryUse {
  uint64_t peak = 0;
  std::array<uint64_t, kMemoryKinds> at_peak{};
  sim::Time peak_time;
  std::string after_op;
  std::string phase;  // empty: the program named none
  uint64_t capacity = 0;
  // The bytes over time, kept for the first kMemoryTimelineRanks ranks: at each instant the most
  // held at it, in time order, the first at the rank's first allocation and the last at its last
  // change. At most kMemoryTimelineSamples samples: a longer run keeps, of each run of 2^k
  // consecutive instants, the one holding the most (the peak itself is always kept).
  std::vector<MemorySample> timeline;
};
inline constexpr int kMemoryTimelineRanks = 64;
inline constexpr std::size_t kMemoryTimelineSamples = 512;

struct RunReport {
  sim::Time makespan;
  std::vector<sim::Time> clocks;   // each rank's final clock
  std::vector<sim::Time> compute;  // each rank's time charged to compute ops
  std::vector<sim::Time> comm;     // each rank's time inside blocking communication
  // Sim backend only (empty elsewhere): each rank's `comm` by the description of the group it
  // waited on (new_group's group_desc: "tp", "cp-dp", "pp", ...; "" for undescribed groups and
  // the world); only descriptions with time.
  std::vector<std::map<std::string, sim::Time>> comm_by_group;
  // Sim backend only: each rank's time its collectives and transfers were in flight (from its post
  // to its completion, summed over calls), by the same group descriptions. What of it is not in
  // comm_by_group overlapped the rank's own work.
  std::vector<std::map<std::string, sim::Time>> comm_busy_by_group;
  std::vector<CollectiveRecord> collectives;
  // Sim backend only (empty elsewhere): each rank's compute by kernel class; how kernels were
  // timed ("profile NAME (FILE)" or "roofline" per device kind); and the kernels the profile
  // could not time from its measurements, with how often ("gemm f32: roofline, no f32 grid").
  std::vector<ComputeBreakdown> compute_detail;
  std::vector<std::string> compute_models;
  std::map<std::string, int64_t> compute_notes;
  std::vector<MemoryUse> memory;  // sim backend only: each rank's peak
  sim::Trace trace;
  uint64_t events = 0;
};

}  // namespace ranksim::runtime

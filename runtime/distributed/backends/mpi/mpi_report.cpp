#if RANKSIM_HAVE_MPI

#include "runtime/distributed/backends/mpi/mpi_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace ranksim::runtime::detail {

namespace {

// Spans cross processes as flat records: rank, kind, start, end (ps), name, args.
void put(std::string& out, const std::string& s) {
  const uint32_t len = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&len), sizeof len);
  out.append(s);
}
template <class T>
void put_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get_pod(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}
std::string get(const char*& p) {
  const uint32_t len = get_pod<uint32_t>(p);
  std::string s(p, len);
  p += len;
  return s;
}

}  // namespace

// Every rank's bytes, concatenated in rank order, on rank 0 (empty elsewhere).
std::string MpiBackend::gather_to_root(const std::string& blob, const char* what) {
  const size_t n = static_cast<size_t>(size_);
  const int len = message_size(blob.size(), what);
  std::vector<int> lens(n), displs(n);
  check_mpi(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, world_comm_), "MPI_Gather");
  std::string gathered;
  if (rank_ == 0) {
    size_t total = 0;
    for (size_t r = 0; r < n; ++r) {
      displs[r] = static_cast<int>(total);
      total += static_cast<size_t>(lens[r]);
    }
    gathered.resize(static_cast<size_t>(message_size(total, what)));
  }
  check_mpi(
      MPI_Gatherv(blob.data(), len, MPI_BYTE, gathered.data(), lens.data(), displs.data(), MPI_BYTE, 0, world_comm_),
      "MPI_Gatherv");
  return gathered;
}

RunReport MpiBackend::report(sim::Time end) {
  RunReport rep;
  const size_t n = static_cast<size_t>(size_);
  std::vector<int64_t> mine{end.picoseconds(), compute_[static_cast<size_t>(rank_)].picoseconds(),
                            comm_[static_cast<size_t>(rank_)].picoseconds()};
  std::vector<int64_t> all(3 * n);
  check_mpi(MPI_Allgather(mine.data(), 3, MPI_INT64_T, all.data(), 3, MPI_INT64_T, world_comm_), "MPI_Allgather");
  for (size_t r = 0; r < n; ++r) {
    rep.clocks.push_back(sim::Time::ps(all[3 * r]));
    rep.compute.push_back(sim::Time::ps(all[3 * r + 1]));
    rep.comm.push_back(sim::Time::ps(all[3 * r + 2]));
    rep.makespan = std::max(rep.makespan, rep.clocks.back());
  }
  // Rank 0 collects every group's collective records (each kept by the group's first member),
  // ordered by start time as the sim backend's are by completion.
  {
    std::string blob;
    for (const CollectiveRecord& r : records_) {
      put_pod(blob, static_cast<uint8_t>(r.kind));
      put_pod(blob, static_cast<uint8_t>(r.algorithm));
      put(blob, r.group);
      put_pod(blob, static_cast<int32_t>(r.group_size));
      put_pod(blob, r.call);
      put_pod(blob, r.bytes);
      put_pod(blob, r.count);
      put(blob, r.dtype);
      put_pod(blob, r.start.picoseconds());
      put_pod(blob, r.end.picoseconds());
    }
    const std::string gathered = gather_to_root(blob, "collective records");
    if (rank_ == 0) {
      const char* p = gathered.data();
      const char* stop = p + gathered.size();
      while (p < stop) {
        CollectiveRecord r;
        r.kind = static_cast<CollectiveKind>(get_pod<uint8_t>(p));
        r.algorithm = static_cast<Algorithm>(get_pod<uint8_t>(p));
        r.group = get(p);
        r.group_size = get_pod<int32_t>(p);
        r.call = get_pod<uint64_t>(p);
        r.bytes = get_pod<int64_t>(p);
        r.count = get_pod<int64_t>(p);
        r.dtype = get(p);
        r.start = sim::Time::ps(get_pod<int64_t>(p));
        r.end = sim::Time::ps(get_pod<int64_t>(p));
        rep.collectives.push_back(std::move(r));
      }
      std::stable_sort(rep.collectives.begin(), rep.collectives.end(),
                       [](const CollectiveRecord& a, const CollectiveRecord& b) { return a.start < b.start; });
    } else {
      rep.collectives = records_;
    }
  }
  // Rank 0 collects every rank's spans, in rank order.
  std::string blob;
  for (const sim::Span& s : trace_.spans()) {
    put_pod(blob, static_cast<int32_t>(s.rank));
    put_pod(blob, static_cast<uint8_t>(s.kind));
    put_pod(blob, s.start.picoseconds());
    put_pod(blob, s.end.picoseconds());
    put(blob, s.name);
    put_pod(blob, static_cast<uint32_t>(s.args.size()));
    for (const auto& [k, v] : s.args) {
      put(blob, k);
      put(blob, v);
    }
  }
  const std::string gathered = gather_to_root(blob, "trace");
  if (rank_ == 0) {
    const char* p = gathered.data();
    const char* stop = p + gathered.size();
    while (p < stop) {
      sim::Span s;
      s.rank = get_pod<int32_t>(p);
      s.kind = static_cast<sim::SpanKind>(get_pod<uint8_t>(p));
      s.start = sim::Time::ps(get_pod<int64_t>(p));
      s.end = sim::Time::ps(get_pod<int64_t>(p));
      s.name = get(p);
      const uint32_t nargs = get_pod<uint32_t>(p);
      for (uint32_t a = 0; a < nargs; ++a) {
        std::string k = get(p);
        s.args.emplace_back(std::move(k), get(p));
      }
      rep.trace.add(std::move(s));
    }
  } else {
    rep.trace = std::move(trace_);
  }
  rep.trace.set_num_ranks(size_);
  return rep;
}

}  // namespace ranksim::runtime::detail

#endif  // RANKSIM_HAVE_MPI

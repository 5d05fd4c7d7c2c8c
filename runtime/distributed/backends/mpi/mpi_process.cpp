#include "runtime/distributed/backends/mpi/mpi.h"

#include "sim/error.h"

#if RANKSIM_HAVE_MPI

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include "runtime/distributed/backends/mpi/mpi_backend.h"

namespace ranksim::runtime {

namespace {

void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace

namespace mpi {

bool available() { return true; }

void init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  // Fibers switch stacks but stay on one thread: FUNNELED is enough.
  detail::check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
}

int world_rank() {
  init();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  init();
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace mpi

namespace detail {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<size_t>(len)));
}

double collective_timeout() {
  static const double seconds = [] {
    const char* v = std::getenv("RANKSIM_COLLECTIVE_TIMEOUT");
    if (v == nullptr || *v == '\0') return 600.0;
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(t >= 0)) {
      throw Error(std::string("RANKSIM_COLLECTIVE_TIMEOUT='") + v +
                  "' is not a number of seconds (>= 0; 0 waits forever)");
    }
    return t;
  }();
  return seconds;
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", s);
  return buf;
}

int message_size(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw Error(std::string("the MPI backend sends messages of up to 2 GiB; this ") + what + " needs " +
                std::to_string(bytes) + " bytes in one message (split the tensor)");
  return static_cast<int>(bytes);
}

MpiBackend::MpiBackend(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm, bool trace,
                       std::unique_ptr<DeviceCollectives> device)
    : engine_(engine),
      topology_(topology),
      default_algorithm_(default_algorithm),
      trace_on_(trace),
      device_(std::move(device)) {
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world_comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(world_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(world_comm_, &rank_);
  MPI_Comm_size(world_comm_, &size_);
  void* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  tag_ub_ = found ? *static_cast<int*>(ub) : 32767;
  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[static_cast<size_t>(r)] = r;
  world_ = make_group(all, 0);
  world_->name = "world";
  compute_.assign(static_cast<size_t>(size_), sim::Time::zero());
  comm_.assign(static_cast<size_t>(size_), sim::Time::zero());
  // Spans are recorded on every rank when any asks for them (rank 0 gathers them; the others
  // may not write a trace themselves). The reduction also lines the ranks' starts up, as far
  // as a barrier can, so wall-clock spans of different ranks are comparable.
  int want = trace ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &want, 1, MPI_INT, MPI_MAX, world_comm_), "MPI_Allreduce");
  trace_on_ = want != 0;
  start_ = std::chrono::steady_clock::now();
  engine_.set_context(static_cast<Backend*>(this));
}

MpiBackend::~MpiBackend() {
  device_.reset();  // device communicators before the MPI communicators they were made over
  for (auto& g : groups_) {
    if (g->coll != MPI_COMM_NULL) MPI_Comm_free(&g->coll);
    if (g->p2p != MPI_COMM_NULL) MPI_Comm_free(&g->p2p);
  }
  MPI_Comm_free(&world_comm_);
}

std::shared_ptr<MpiGroup> MpiBackend::make_group(const std::vector<int>& ranks, int occurrence) {
  auto g = std::make_shared<MpiGroup>();
  g->owner = static_cast<const Backend*>(this);
  g->id = static_cast<int>(groups_.size());
  g->ranks = ranks;
  g->index_of.assign(static_cast<size_t>(size_), -1);
  for (size_t i = 0; i < ranks.size(); ++i) g->index_of[static_cast<size_t>(ranks[i])] = static_cast<int>(i);
  std::ostringstream name;
  name << "group[";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) name << (i ? ", " : "") << ranks[i];
  if (ranks.size() > 8) name << ", ... (" << ranks.size() << " in all)";
  name << ']';
  g->name = name.str();
  set_node_layout(*g, [&](int r) { return topology_.device(r).node; });
  if (g->index_of[static_cast<size_t>(rank_)] >= 0) {
    // Only members create the communicators (MPI_Comm_create_group is collective over them).
    // The tag keeps concurrent creations of different groups apart.
    uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(occurrence);
    for (int r : ranks) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
    const int tag = static_cast<int>(h % static_cast<uint64_t>(tag_ub_));
    MPI_Group world_group, sub;
    MPI_Comm_group(world_comm_, &world_group);
    MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &sub);
    check_mpi(MPI_Comm_create_group(world_comm_, sub, tag, &g->coll), "MPI_Comm_create_group");
    MPI_Group_free(&sub);
    MPI_Group_free(&world_group);
    check_mpi(MPI_Comm_dup(g->coll, &g->p2p), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(g->coll, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(g->p2p, MPI_ERRORS_RETURN);
    if (device_) device_->add_group(g->id, ranks, g->index_of[static_cast<size_t>(rank_)], &g->coll);
  }
  groups_.push_back(g);
  return g;
}

RunReport spawn_mpi(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts,
                    const sim::Topology& topology) {
  mpi::init();
  const int size = mpi::world_size();
  if (size != nprocs)
    throw Error("spawn: the program asks for " + std::to_string(nprocs) + " ranks but this MPI job has " +
                std::to_string(size) + " process" + (size == 1 ? "" : "es") + "; start it with mpirun -np " +
                std::to_string(nprocs) + " (one process per rank)");
  std::unique_ptr<DeviceCollectives> collectives;
  if (opts.backend == BackendKind::nccl) {
    if (!opts.device_collectives) {
      throw Error(
          "the nccl backend is not available: ranksim was built without CUDA and NCCL (CMake option "
          "RANKSIM_WITH_CUDA; docs/gpu.md), or this program did not pass its collectives in "
          "SpawnOptions::device_collectives = runtime::gpu::nccl_collectives (the ranksim command does)");
    }
    collectives = opts.device_collectives();
  }
  sim::Engine engine(opts.engine);
  MpiBackend backend(engine, topology, opts.algorithm, opts.engine.trace, std::move(collectives));
  const int rank = backend.rank();
  sim::Time end;
  try {
    ScopedCostSink sink(&backend);
    engine.run(1, [&](int) {
      fn(rank);
      backend.drain();
      end = backend.now();
    });
  } catch (const sim::RankFailure& e) {
    const std::string msg = e.errors().empty() ? e.what() : e.errors().front().message;
    std::fprintf(stderr, "rank %d: %s\n", rank, msg.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return
  }
  return backend.report(end);
}

}  // namespace detail
}  // namespace ranksim::runtime

#else  // built without MPI

namespace ranksim::runtime {

namespace {
[[noreturn]] void unavailable() {
  throw Error(
      "the mpi backend is not available: ranksim was built without MPI; install with "
      "scripts/setup.sh --with-mpi and rebuild (CMake option RANKSIM_WITH_MPI)");
}
}  // namespace

namespace mpi {
bool available() { return false; }
void init() { unavailable(); }
int world_rank() { unavailable(); }
int world_size() { unavailable(); }
}  // namespace mpi

namespace detail {
RunReport spawn_mpi(const std::function<void(int)>&, int, const SpawnOptions&, const sim::Topology&) { unavailable(); }
}  // namespace detail

}  // namespace ranksim::runtime

#endif

#include "runtime/distributed/backends/backend.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "runtime/distributed/reduce.h"
#include "sim/engine.h"
#include "sim/error.h"

namespace ranksim::runtime::detail {

namespace {

std::byte* bytes_of(const Tensor& t) { return static_cast<std::byte*>(t.raw_data_unsynchronized()); }

// memcpy/memmove that accept the null pointers of empty buffers (zero-element splits).
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}
void move_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memmove(dst, src, n);
}

}  // namespace

std::string Signature::describe() const {
  std::ostringstream os;
  os << to_string(kind) << '(' << dtype_name(dtype) << shape;
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::reduce_scatter: os << ", op=" << to_string(op); break;
    case CollectiveKind::reduce: os << ", op=" << to_string(op) << ", root=" << root; break;
    case CollectiveKind::broadcast:
    case CollectiveKind::gather:
    case CollectiveKind::scatter: os << ", root=" << root; break;
    default: break;
  }
  if (algorithm != Algorithm::automatic) os << ", algorithm=" << to_string(algorithm);
  os << ')';
  return os.str();
}

std::string Signature::difference(const Signature& o) const {
  if (kind != o.kind) return "different collectives";
  if (dtype != o.dtype) return "different dtypes";
  if (count != o.count) return "different element counts (" + std::to_string(count) + " vs " +
                               std::to_string(o.count) + ")";
  if (op != o.op) return "different reduce ops";
  if (root != o.root) return "different roots";
  if (algorithm != o.algorithm) return "different algorithms";
  return {};
}

void set_node_layout(GroupState& g, const std::function<int(int)>& node_of_rank) {
  std::map<int, int> per_node;
  g.node_of.clear();
  for (int r : g.ranks) {
    const int node = node_of_rank(r);
    g.node_of.push_back(node);
    ++per_node[node];
  }
  g.nodes = static_cast<int>(per_node.size());
  g.equal_per_node = true;
  for (const auto& [node, k] : per_node)
    if (k != per_node.begin()->second) g.equal_per_node = false;
}

Algorithm resolve_algorithm(const GroupState& g, const Signature& sig, Algorithm run_default) {
  Algorithm algo = sig.algorithm != Algorithm::automatic ? sig.algorithm
                   : g.algorithm != Algorithm::automatic ? g.algorithm
                                                         : run_default;
  if (algo == Algorithm::automatic) {
    algo = choose_algorithm(sig.kind, static_cast<int>(g.ranks.size()),
                            sig.count * static_cast<int64_t>(dtype_size(sig.dtype)), g.nodes,
                            g.equal_per_node);
  }
  return algo;
}

ScheduleRequest schedule_request(const GroupState& g, const Signature& sig, Algorithm algorithm) {
  ScheduleRequest req;
  req.kind = sig.kind;
  req.nranks = static_cast<int>(g.ranks.size());
  req.count = sig.count;
  req.root = sig.root;
  req.algorithm = algorithm;
  if (algorithm == Algorithm::hierarchical) req.node_of = g.node_of;
  return req;
}

CollectiveRecord collective_record(const GroupState& g, const Signature& sig, Algorithm algorithm,
                                   uint64_t call, const ScheduleRequest& req) {
  const int n = static_cast<int>(g.ranks.size());
  CollectiveRecord rec;
  rec.kind = sig.kind;
  rec.algorithm = algorithm;
  rec.group = g.name;
  rec.group_size = n;
  rec.call = call;
  rec.dtype = dtype_name(sig.dtype);
  switch (sig.kind) {
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::gather:
    case CollectiveKind::scatter: rec.count = sig.count * n; break;
    case CollectiveKind::all_to_all: {
      int64_t most = 0;
      for (const auto& row : req.splits) {
        int64_t sum = 0;
        for (int64_t x : row) sum += x;
        most = std::max(most, sum);
      }
      rec.count = most;
      break;
    }
    default: rec.count = sig.count;
  }
  rec.bytes = rec.count * static_cast<int64_t>(dtype_size(sig.dtype));
  return rec;
}

void check_splits(const GroupState& g, uint64_t call, const ScheduleRequest& req, int j,
                  const std::vector<int64_t>& out_splits) {
  for (size_t i = 0; i < req.splits.size(); ++i) {
    const int64_t sent = req.splits[i][static_cast<size_t>(j)];
    const int64_t expected = out_splits[i];
    if (sent != expected) {
      throw Error("all_to_all_single on " + g.name + " call #" + std::to_string(call) + ": rank " +
                  std::to_string(g.ranks[i]) + " sends " + std::to_string(sent) + " elements to rank " +
                  std::to_string(g.ranks[static_cast<size_t>(j)]) + ", which expects " +
                  std::to_string(expected) +
                  " (input_split_sizes and output_split_sizes must agree pairwise)");
    }
  }
}

const Schedule& ScheduleCache::get(int group_id, const ScheduleRequest& req, Schedule& local) {
  if (req.kind == CollectiveKind::all_to_all || req.algorithm == Algorithm::hierarchical) {
    local = make_schedule(req);
    return local;
  }
  const auto key = std::make_tuple(group_id, static_cast<int>(req.kind), static_cast<int>(req.algorithm),
                                   req.count, req.root, req.nranks);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() > 256) cache_.clear();  // sweeps: keep memory bounded
  return cache_.emplace(key, make_schedule(req)).first->second;
}

// ---- Backend

Backend::~Backend() = default;
DeviceCollectives::~DeviceCollectives() = default;

namespace {
DeviceCollectivesFactory& factory_slot() {
  static DeviceCollectivesFactory f;
  return f;
}
}  // namespace

void set_device_collectives_factory(DeviceCollectivesFactory factory) { factory_slot() = std::move(factory); }
const DeviceCollectivesFactory& device_collectives_factory() { return factory_slot(); }

Backend* Backend::current_or_null() {
  sim::Engine* e = sim::Engine::current();
  if (e == nullptr || !e->in_rank() || e->context() == nullptr) return nullptr;
  return static_cast<Backend*>(e->context());
}

Backend& Backend::current() {
  Backend* b = current_or_null();
  if (b == nullptr)
    throw Error("torch.distributed-style call outside a rank: call it from a function run by "
                "ranksim::runtime::spawn()");
  return *b;
}

std::shared_ptr<GroupState> Backend::resolve(const ProcessGroup& group) {
  if (!group.state()) return world_group();
  if (group.state()->owner != this)
    throw Error("process group " + group.state()->name +
                " was created by another run (another spawn() or backend); create groups inside "
                "the run that uses them");
  return group.state();
}

// ---- WorkingBuffer

WorkingBuffer::WorkingBuffer(const Signature& sig, const Part& part, int index, int n,
                             int64_t buffer_elems)
    : sig_(sig), part_(part), index_(index), n_(n) {
  const size_t esize = dtype_size(sig.dtype);
  const int64_t c = sig.count;
  const size_t chunk = static_cast<size_t>(c) * esize;
  const size_t mine = static_cast<size_t>(index) * chunk;
  auto scratch = [&](int64_t elems) {
    scratch_.assign(static_cast<size_t>(elems) * esize, std::byte{0});
    data_ = scratch_.data();
  };
  switch (sig.kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::broadcast: data_ = bytes_of(part.a); break;
    case CollectiveKind::reduce:
      if (index == sig.root) {
        data_ = bytes_of(part.a);
      } else {
        scratch(c);
        copy_bytes(data_, bytes_of(part.a), chunk);
      }
      break;
    case CollectiveKind::all_gather:
      // a = output (n*c), b = input (c); place the input first (memmove: it may be a view of a).
      data_ = bytes_of(part.a);
      move_bytes(data_ + mine, bytes_of(part.b), chunk);
      break;
    case CollectiveKind::reduce_scatter:
      // a = output (c), b = input (n*c); reduce in scratch so the input stays untouched.
      scratch(c * n);
      copy_bytes(data_, bytes_of(part.b), chunk * static_cast<size_t>(n));
      break;
    case CollectiveKind::gather:
      scratch(c * n);
      copy_bytes(data_ + mine, bytes_of(part.a), chunk);
      break;
    case CollectiveKind::scatter:
      scratch(c * n);
      if (index == sig.root)
        for (int j = 0; j < n; ++j)
          copy_bytes(data_ + static_cast<size_t>(j) * chunk, bytes_of(part.list[static_cast<size_t>(j)]), chunk);
      break;
    case CollectiveKind::all_to_all:
      // a = output, b = input; scratch = [input | output].
      scratch(buffer_elems);
      for (int64_t x : part.in_splits) in_total_ += x;
      copy_bytes(data_, bytes_of(part.b), static_cast<size_t>(in_total_) * esize);
      break;
    case CollectiveKind::barrier: break;
  }
}

void WorkingBuffer::finish() {
  const size_t esize = dtype_size(sig_.dtype);
  const int64_t c = sig_.count;
  const size_t chunk = static_cast<size_t>(c) * esize;
  std::byte* mine = data_ + static_cast<size_t>(index_) * chunk;
  const bool avg = sig_.op == ReduceOp::AVG;
  switch (sig_.kind) {
    case CollectiveKind::all_reduce:
      if (avg) divide_elements(data_, sig_.dtype, c, n_);
      break;
    case CollectiveKind::reduce:
      if (avg && index_ == sig_.root) divide_elements(data_, sig_.dtype, c, n_);
      break;
    case CollectiveKind::reduce_scatter:
      if (avg) divide_elements(mine, sig_.dtype, c, n_);
      copy_bytes(bytes_of(part_.a), mine, chunk);
      break;
    case CollectiveKind::gather:
      if (index_ == sig_.root)
        for (int j = 0; j < n_; ++j)
          copy_bytes(bytes_of(part_.list[static_cast<size_t>(j)]), data_ + static_cast<size_t>(j) * chunk, chunk);
      break;
    case CollectiveKind::scatter: copy_bytes(bytes_of(part_.a), mine, chunk); break;
    case CollectiveKind::all_to_all: {
      int64_t out_total = 0;
      for (int64_t x : part_.out_splits) out_total += x;
      copy_bytes(bytes_of(part_.a), data_ + static_cast<size_t>(in_total_) * esize,
                 static_cast<size_t>(out_total) * esize);
      break;
    }
    case CollectiveKind::broadcast:
    case CollectiveKind::all_gather:
    case CollectiveKind::barrier: break;
  }
}

}  // namespace ranksim::runtime::detail

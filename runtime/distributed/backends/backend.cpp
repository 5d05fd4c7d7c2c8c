#include "runtime/distributed/backends/backend.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "runtime/distributed/backends/device_collectives.h"
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
  g.max_per_node = 1;
  for (const auto& [node, k] : per_node) {
    if (k != per_node.begin()->second) g.equal_per_node = false;
    g.max_per_node = std::max(g.max_per_node, k);
  }
}

Algorithm requested_algorithm(const GroupState& g, const Signature& sig, Algorithm run_default) {
  return sig.algorithm != Algorithm::automatic ? sig.algorithm
         : g.algorithm != Algorithm::automatic ? g.algorithm
                                               : run_default;
}

Algorithm resolve_algorithm(const GroupState& g, const Signature& sig, Algorithm run_default) {
  Algorithm algo = sig.algorithm != Algorithm::automatic ? sig.algorithm
                   : g.algorithm != Algorithm::automatic ? g.algorithm
                                                         : run_default;
  if (algo == Algorithm::automatic || timing_only(algo)) {
    algo = choose_algorithm(sig.kind, static_cast<int>(g.ranks.size()),
                            sig.count * static_cast<int64_t>(dtype_size(sig.dtype)), g.nodes, g.equal_per_node);
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

CollectiveRecord collective_record(const GroupState& g, const Signature& sig, Algorithm algorithm, uint64_t call,
                                   const ScheduleRequest& req) {
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
    case CollectiveKind::scatter:
      rec.count = sig.count * n;
      break;
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
    default:
      rec.count = sig.count;
  }
  rec.bytes = rec.count * static_cast<int64_t>(dtype_size(sig.dtype));
  return rec;
}

void check_splits(const GroupState& g, uint64_t call, const ScheduleRequest& req, int j, const SplitSizes& out_splits) {
  for (size_t i = 0; i < req.splits.size(); ++i) {
    const int64_t sent = req.splits[i][static_cast<size_t>(j)];
    const int64_t expected = out_splits[static_cast<int>(i)];
    if (sent != expected) {
      throw Error("all_to_all_single on " + g.name + " call #" + std::to_string(call) + ": rank " +
                  std::to_string(g.ranks[i]) + " sends " + std::to_string(sent) + " elements to rank " +
                  std::to_string(g.ranks[static_cast<size_t>(j)]) + ", which expects " + std::to_string(expected) +
                  " (input_split_sizes and output_split_sizes must agree pairwise)");
    }
  }
}

const Schedule& ScheduleCache::get(int group_id, const ScheduleRequest& req, Schedule& local) {
  if (req.kind == CollectiveKind::all_to_all || req.algorithm == Algorithm::hierarchical) {
    local = make_schedule(req);
    return local;
  }
  const auto key = std::make_tuple(group_id, static_cast<int>(req.kind), static_cast<int>(req.algorithm), req.count,
                                   req.root, req.nranks);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  if (cache_.size() > 256) cache_.clear();  // sweeps: keep memory bounded
  return cache_.emplace(key, make_schedule(req)).first->second;
}

// ---- Backend

Backend::~Backend() = default;
DeviceCollectives::~DeviceCollectives() = default;

Backend* Backend::current_or_null() {
  sim::Engine* e = sim::Engine::current();
  if (e == nullptr || !e->in_rank() || e->context() == nullptr) return nullptr;
  return static_cast<Backend*>(e->context());
}

Backend& Backend::current() {
  Backend* b = current_or_null();
  if (b == nullptr)
    throw Error(
        "torch.distributed-style call outside a rank: call it from a function run by "
        "ranksim::runtime::spawn()");
  return *b;
}

// ---- WorkingBuffer

WorkingBuffer::WorkingBuffer(const Signature& sig, const CollectiveTensors& tensors, int index, int n,
                             int64_t buffer_elems)
    : sig_(sig), tensors_(tensors), index_(index), n_(n) {
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
      data_ = bytes_of(std::get<AllReduceTensors>(tensors).tensor);
      break;
    case CollectiveKind::broadcast:
      data_ = bytes_of(std::get<BroadcastTensors>(tensors).tensor);
      break;
    case CollectiveKind::reduce: {
      const Tensor& t = std::get<ReduceTensors>(tensors).tensor;
      if (index == sig.root) {
        data_ = bytes_of(t);
      } else {
        scratch(c);
        copy_bytes(data_, bytes_of(t), chunk);
      }
      break;
    }
    case CollectiveKind::all_gather: {
      // Place the input first (memmove: it may be a view of the output).
      const auto& t = std::get<AllGatherTensors>(tensors);
      data_ = bytes_of(t.output);
      move_bytes(data_ + mine, bytes_of(t.input), chunk);
      break;
    }
    case CollectiveKind::reduce_scatter:
      // Reduce in scratch (n*c) so the input stays untouched.
      scratch(c * n);
      copy_bytes(data_, bytes_of(std::get<ReduceScatterTensors>(tensors).input), chunk * static_cast<size_t>(n));
      break;
    case CollectiveKind::gather:
      scratch(c * n);
      copy_bytes(data_ + mine, bytes_of(std::get<GatherTensors>(tensors).tensor), chunk);
      break;
    case CollectiveKind::scatter: {
      const auto& list = std::get<ScatterTensors>(tensors).scatter_list;
      scratch(c * n);
      if (index == sig.root)
        for (int j = 0; j < n; ++j)
          copy_bytes(data_ + static_cast<size_t>(j) * chunk, bytes_of(list[static_cast<size_t>(j)]), chunk);
      break;
    }
    case CollectiveKind::all_to_all: {
      // scratch = [input | output].
      const auto& t = std::get<AllToAllTensors>(tensors);
      scratch(buffer_elems);
      in_total_ = t.input_splits.total();
      copy_bytes(data_, bytes_of(t.input), static_cast<size_t>(in_total_) * esize);
      break;
    }
    case CollectiveKind::barrier:
      break;
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
      copy_bytes(bytes_of(std::get<ReduceScatterTensors>(tensors_).output), mine, chunk);
      break;
    case CollectiveKind::gather:
      if (index_ == sig_.root) {
        const auto& list = std::get<GatherTensors>(tensors_).gather_list;
        for (int j = 0; j < n_; ++j)
          copy_bytes(bytes_of(list[static_cast<size_t>(j)]), data_ + static_cast<size_t>(j) * chunk, chunk);
      }
      break;
    case CollectiveKind::scatter:
      copy_bytes(bytes_of(std::get<ScatterTensors>(tensors_).tensor), mine, chunk);
      break;
    case CollectiveKind::all_to_all: {
      const auto& t = std::get<AllToAllTensors>(tensors_);
      const int64_t out_total = t.output_splits.total();
      copy_bytes(bytes_of(t.output), data_ + static_cast<size_t>(in_total_) * esize,
                 static_cast<size_t>(out_total) * esize);
      break;
    }
    case CollectiveKind::broadcast:
    case CollectiveKind::all_gather:
    case CollectiveKind::barrier:
      break;
  }
}

}  // namespace ranksim::runtime::detail

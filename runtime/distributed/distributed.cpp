#include "runtime/distributed/distributed.h"

#include <algorithm>
#include <set>

#include "runtime/distributed/backends/backend.h"
#include "runtime/distributed/spawn_options.h"
#include "sim/error.h"

namespace ranksim::runtime {

using detail::Backend;
using detail::GroupState;
using detail::Signature;
using detail::WorkState;

// ---- Work

bool Work::is_completed() const {
  if (!state_) return true;
  return Backend::current().poll(*state_);
}

void Work::wait() const {
  if (!state_) return;
  Backend::current().wait(*state_);
}

sim::Time Work::completion_time() const { return state_ ? state_->done : sim::Time::zero(); }

// ---- ProcessGroup

namespace {
const GroupState& resolved(const ProcessGroup& g) { return g.state() ? *g.state() : *Backend::current().world_group(); }
}  // namespace

const std::shared_ptr<detail::GroupState>& ProcessGroup::state() const { return state_; }
void ProcessGroup::set_algorithm(Algorithm algorithm) const {
  (state_ ? *state_ : *Backend::current().world_group()).algorithm = algorithm;
}
Algorithm ProcessGroup::algorithm() const { return resolved(*this).algorithm; }
int ProcessGroup::rank() const { return resolved(*this).index_of[static_cast<size_t>(Backend::current().rank())]; }
int ProcessGroup::size() const { return static_cast<int>(resolved(*this).ranks.size()); }
const std::vector<int>& ProcessGroup::ranks() const { return resolved(*this).ranks; }
const std::string& ProcessGroup::name() const { return resolved(*this).name; }
int ProcessGroup::group_rank(int global_rank) const {
  const auto& g = resolved(*this);
  if (global_rank < 0 || global_rank >= static_cast<int>(g.index_of.size())) return -1;
  return g.index_of[static_cast<size_t>(global_rank)];
}
int ProcessGroup::global_rank(int group_rank) const {
  const auto& g = resolved(*this);
  if (group_rank < 0 || group_rank >= static_cast<int>(g.ranks.size()))
    throw Error("group rank " + std::to_string(group_rank) + " is outside " + g.name);
  return g.ranks[static_cast<size_t>(group_rank)];
}

// ---- helpers

namespace {

// The pending write of an async collective or irecv on its outputs. Once the owner has observed
// the completion, waiting is a no-op (bar rethrowing the error), with or without a backend: the
// data landed when the operation matched. Outside any run (after spawn() returned) a matched
// operation's data is final too; only one that never matched cannot be read.
class WorkPendingWrite : public PendingWrite {
 public:
  explicit WorkPendingWrite(std::shared_ptr<WorkState> w) : w_(std::move(w)) {}
  void wait() override {
    if (!w_->observed) {
      if (Backend* b = Backend::current_or_null()) {
        b->wait(*w_);  // rethrows the error
        return;
      }
      if (!w_->matched)
        throw Error("a tensor is read outside spawn() while the asynchronous " +
                    (w_->describe ? w_->describe() : std::string("operation")) + " that writes it never completed");
    }
    if (w_->error) std::rethrow_exception(w_->error);
  }

 private:
  std::shared_ptr<WorkState> w_;
};

void require_usable(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw Error(std::string(op) + ": the " + what + " tensor is undefined");
  if (t.has_data() && !t.is_contiguous())
    throw Error(std::string(op) + ": the " + what + " tensor " + t.str() +
                " is not contiguous; call .contiguous() first (collectives work on dense buffers)");
  // A backend that works on the device copy in place needs no host bytes: downloading them here
  // would be a round trip per collective.
  if (Backend::current().in_place_on_device(t)) {
    t.wait_pending_writes();
  } else {
    t.wait_pending();
  }
}

// The group a handle names (the world for a default handle). Throws Error for a group made by
// another run.
std::shared_ptr<GroupState> resolve(Backend& backend, const ProcessGroup& group) {
  if (!group.state()) return backend.world_group();
  if (group.state()->owner != &backend)
    throw Error("process group " + group.state()->name +
                " was created by another run (another spawn() or backend); create groups inside "
                "the run that uses them");
  return group.state();
}

int root_index(const GroupState& g, int global, const char* op, const char* role) {
  if (global < 0 || global >= static_cast<int>(g.index_of.size()) || g.index_of[static_cast<size_t>(global)] < 0)
    throw Error(std::string(op) + ": " + role + " rank " + std::to_string(global) + " is not in " + g.name);
  return g.index_of[static_cast<size_t>(global)];
}

Work finish_post(Backend& backend, const std::shared_ptr<WorkState>& work, bool async,
                 std::initializer_list<const Tensor*> outputs) {
  if (async) {
    for (const Tensor* t : outputs)
      if (t && t->defined())
        t->set_pending_write(std::make_shared<WorkPendingWrite>(work), !backend.in_place_on_device(*t));
  } else {
    backend.wait(*work);
  }
  return Work(work);
}

Signature base(CollectiveKind kind, const Tensor& t, int64_t count, const CollectiveOptions& o) {
  Signature s;
  s.kind = kind;
  s.dtype = t.dtype();
  s.count = count;
  s.algorithm = o.algorithm;
  s.shape = shape_str(t.shape());
  return s;
}

void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype())
    throw Error(std::string(op) + ": output " + a.str() + " and input " + b.str() + " must have the same dtype");
}

}  // namespace

// ---- collectives

Work all_reduce(const Tensor& tensor, const AllreduceOptions& opts) {
  Backend& backend = Backend::current();
  require_usable(tensor, "all_reduce", "");
  Signature sig = base(CollectiveKind::all_reduce, tensor, tensor.numel(), opts);
  sig.op = opts.op;
  auto work = backend.post(resolve(backend, opts.group), sig, detail::AllReduceTensors{tensor});
  return finish_post(backend, work, opts.async_op, {&tensor});
}

Work all_gather_into_tensor(const Tensor& output, const Tensor& input, const AllgatherOptions& opts) {
  Backend& backend = Backend::current();
  const char* op = "all_gather_into_tensor";
  require_usable(output, op, "output");
  require_usable(input, op, "input");
  same_dtype(output, input, op);
  const auto g = resolve(backend, opts.group);
  const int64_t n = static_cast<int64_t>(g->ranks.size());
  if (output.numel() != n * input.numel())
    throw Error(std::string(op) + ": output " + output.str() + " must hold group size (" + std::to_string(n) +
                ") x input " + input.str() + " elements");
  Signature sig = base(CollectiveKind::all_gather, input, input.numel(), opts);
  if (output.has_data() != input.has_data())
    throw Error(std::string(op) + ": output and input must both hold data or both be shape-only");
  auto work = backend.post(g, sig, detail::AllGatherTensors{output, input});
  return finish_post(backend, work, opts.async_op, {&output});
}

Work reduce_scatter_tensor(const Tensor& output, const Tensor& input, const ReduceScatterOptions& opts) {
  Backend& backend = Backend::current();
  const char* op = "reduce_scatter_tensor";
  require_usable(output, op, "output");
  require_usable(input, op, "input");
  same_dtype(output, input, op);
  const auto g = resolve(backend, opts.group);
  const int64_t n = static_cast<int64_t>(g->ranks.size());
  if (input.numel() != n * output.numel())
    throw Error(std::string(op) + ": input " + input.str() + " must hold group size (" + std::to_string(n) +
                ") x output " + output.str() + " elements");
  if (output.has_data() != input.has_data())
    throw Error(std::string(op) + ": output and input must both hold data or both be shape-only");
  Signature sig = base(CollectiveKind::reduce_scatter, output, output.numel(), opts);
  sig.op = opts.op;
  auto work = backend.post(g, sig, detail::ReduceScatterTensors{output, input});
  return finish_post(backend, work, opts.async_op, {&output});
}

Work all_to_all_single(const Tensor& output, const Tensor& input, const AllToAllOptions& opts) {
  Backend& backend = Backend::current();
  const char* op = "all_to_all_single";
  require_usable(output, op, "output");
  require_usable(input, op, "input");
  same_dtype(output, input, op);
  if (output.has_data() != input.has_data())
    throw Error(std::string(op) + ": output and input must both hold data or both be shape-only");
  const auto g = resolve(backend, opts.group);
  const int n = static_cast<int>(g->ranks.size());
  auto splits = [&](const Tensor& t, const std::vector<int64_t>& sizes, const char* which) -> detail::SplitSizes {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row_elems = rows == 0 ? 0 : t.numel() / rows;
    if (sizes.empty()) {
      if (rows % n != 0)
        throw Error(std::string(op) + ": " + which + " " + t.str() + " has " + std::to_string(rows) +
                    " rows, not divisible by the group size " + std::to_string(n) + "; pass " + which + "_split_sizes");
      return detail::SplitSizes::even(n, rows / n * row_elems);
    }
    std::vector<int64_t> out;
    if (static_cast<int>(sizes.size()) != n)
      throw Error(std::string(op) + ": " + which + "_split_sizes has " + std::to_string(sizes.size()) +
                  " entries for a group of " + std::to_string(n));
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) throw Error(std::string(op) + ": negative " + which + " split size");
      total += s;
      out.push_back(s * row_elems);
    }
    if (total != rows)
      throw Error(std::string(op) + ": " + which + "_split_sizes sum to " + std::to_string(total) + " but the " +
                  which + " " + t.str() + " has " + std::to_string(rows) + " rows");
    return detail::SplitSizes(std::move(out));
  };
  detail::AllToAllTensors tensors{output, input, splits(input, opts.input_split_sizes, "input"),
                                  splits(output, opts.output_split_sizes, "output")};
  // The element count is not part of the signature: uneven splits are the point.
  Signature sig = base(CollectiveKind::all_to_all, input, 0, opts);
  sig.shape = "";
  auto work = backend.post(g, sig, std::move(tensors));
  return finish_post(backend, work, opts.async_op, {&output});
}

Work broadcast(const Tensor& tensor, const BroadcastOptions& opts) {
  Backend& backend = Backend::current();
  require_usable(tensor, "broadcast", "");
  const auto g = resolve(backend, opts.group);
  Signature sig = base(CollectiveKind::broadcast, tensor, tensor.numel(), opts);
  sig.root = root_index(*g, opts.src, "broadcast", "src");
  auto work = backend.post(g, sig, detail::BroadcastTensors{tensor});
  return finish_post(backend, work, opts.async_op, {&tensor});
}

Work reduce(const Tensor& tensor, const ReduceOptions& opts) {
  Backend& backend = Backend::current();
  require_usable(tensor, "reduce", "");
  const auto g = resolve(backend, opts.group);
  Signature sig = base(CollectiveKind::reduce, tensor, tensor.numel(), opts);
  sig.root = root_index(*g, opts.dst, "reduce", "dst");
  sig.op = opts.op;
  auto work = backend.post(g, sig, detail::ReduceTensors{tensor});
  return finish_post(backend, work, opts.async_op, {&tensor});
}

namespace {
void check_list(const std::vector<Tensor>& list, const Tensor& like, int n, const char* op, const char* name) {
  if (static_cast<int>(list.size()) != n)
    throw Error(std::string(op) + ": " + name + " has " + std::to_string(list.size()) + " tensors for a group of " +
                std::to_string(n));
  for (const Tensor& t : list) {
    require_usable(t, op, name);
    if (t.dtype() != like.dtype() || t.numel() != like.numel() || t.has_data() != like.has_data())
      throw Error(std::string(op) + ": every tensor in " + name + " must match " + like.str() + ", got " + t.str());
  }
}
}  // namespace

Work gather(const Tensor& tensor, const std::vector<Tensor>& gather_list, const GatherOptions& opts) {
  Backend& backend = Backend::current();
  require_usable(tensor, "gather", "");
  const auto g = resolve(backend, opts.group);
  Signature sig = base(CollectiveKind::gather, tensor, tensor.numel(), opts);
  sig.root = root_index(*g, opts.dst, "gather", "dst");
  detail::GatherTensors tensors{tensor, {}};
  const bool is_root = backend.rank() == opts.dst;
  if (is_root) {
    check_list(gather_list, tensor, static_cast<int>(g->ranks.size()), "gather", "gather_list");
    tensors.gather_list = gather_list;
  }
  auto work = backend.post(g, sig, std::move(tensors));
  if (opts.async_op && is_root)
    for (const Tensor& t : gather_list) t.set_pending_write(std::make_shared<WorkPendingWrite>(work));
  return finish_post(backend, work, opts.async_op, {});
}

Work scatter(const Tensor& tensor, const std::vector<Tensor>& scatter_list, const ScatterOptions& opts) {
  Backend& backend = Backend::current();
  require_usable(tensor, "scatter", "");
  const auto g = resolve(backend, opts.group);
  Signature sig = base(CollectiveKind::scatter, tensor, tensor.numel(), opts);
  sig.root = root_index(*g, opts.src, "scatter", "src");
  detail::ScatterTensors tensors{tensor, {}};
  if (backend.rank() == opts.src) {
    check_list(scatter_list, tensor, static_cast<int>(g->ranks.size()), "scatter", "scatter_list");
    tensors.scatter_list = scatter_list;
  }
  auto work = backend.post(g, sig, std::move(tensors));
  return finish_post(backend, work, opts.async_op, {&tensor});
}

Work barrier(const BarrierOptions& opts) {
  Backend& backend = Backend::current();
  Signature sig;
  sig.kind = CollectiveKind::barrier;
  sig.algorithm = opts.algorithm;
  sig.dtype = DType::f32;
  auto work = backend.post(resolve(backend, opts.group), sig, detail::BarrierTensors{});
  return finish_post(backend, work, opts.async_op, {});
}

// ---- point-to-point

Work isend(const Tensor& tensor, int dst, const P2POptions& opts) {
  Backend& backend = Backend::current();
  tensor.wait_pending();
  return Work(backend.post_p2p(true, tensor, dst, resolve(backend, opts.group), opts.tag));
}

Work irecv(const Tensor& tensor, int src, const P2POptions& opts) {
  Backend& backend = Backend::current();
  tensor.wait_pending();
  auto work = backend.post_p2p(false, tensor, src, resolve(backend, opts.group), opts.tag);
  if (!work->matched || work->done > backend.now()) tensor.set_pending_write(std::make_shared<WorkPendingWrite>(work));
  return Work(work);
}

void send(const Tensor& tensor, int dst, const P2POptions& opts) { isend(tensor, dst, opts).wait(); }

void recv(const Tensor& tensor, int src, const P2POptions& opts) {
  Backend& backend = Backend::current();
  tensor.wait_pending();
  auto work = backend.post_p2p(false, tensor, src, resolve(backend, opts.group), opts.tag);
  backend.wait(*work);
}

std::vector<Work> batch_isend_irecv(const std::vector<P2POp>& ops) {
  std::vector<Work> works;
  works.reserve(ops.size());
  for (const P2POp& op : ops) {
    const P2POptions o{op.group, op.tag};
    works.push_back(op.op == P2POp::Kind::isend ? isend(op.tensor, op.peer, o) : irecv(op.tensor, op.peer, o));
  }
  return works;
}

// ---- groups

void init_process_group(const std::string& backend) {
  Backend* b = Backend::current_or_null();
  if (b == nullptr) {
    // Outside a run there is nothing to initialise: each run names its own backend.
    if (parse_backend(backend) != BackendKind::sim)
      throw Error("init_process_group: backend '" + backend +
                  "' requested outside a run; a run's backend is chosen by the run: pass "
                  "SpawnOptions::backend to spawn() (ranksim run --backend " +
                  backend + ")");
    return;
  }
  if (backend != b->name())
    throw Error("init_process_group: backend '" + backend + "' requested inside a run of the '" + b->name() +
                "' backend; pass \"" + b->name() +
                "\" (or choose the run's backend: SpawnOptions::backend, ranksim run --backend)");
  b->set_initialized();
}

bool is_initialized() {
  Backend* b = Backend::current_or_null();
  return b != nullptr && b->initialized();
}

int get_rank(const ProcessGroup& group) { return group.rank(); }
int get_world_size(const ProcessGroup& group) { return group.size(); }

ProcessGroup new_group(const std::vector<int>& ranks, const std::string& group_desc) {
  Backend& backend = Backend::current();
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty()) throw Error("new_group: the rank list is empty");
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= backend.size())
      throw Error("new_group: rank " + std::to_string(sorted[i]) + " is outside the world of " +
                  std::to_string(backend.size()) + " ranks");
    if (i > 0 && sorted[i] == sorted[i - 1])
      throw Error("new_group: rank " + std::to_string(sorted[i]) + " is listed twice");
  }
  std::shared_ptr<GroupState> g = backend.find_or_make_group(sorted);
  // Every creator passes the same description; the first one renames the shared state.
  // ("group[0,2]" -> "<desc>[0,2]"; a group of every rank, "world#<id>" -> "<desc>#<id>")
  if (!group_desc.empty() && (g->name.rfind("group[", 0) == 0 || g->name.rfind("world#", 0) == 0))
    g->name = group_desc + g->name.substr(5);
  return ProcessGroup(std::move(g));
}

std::string group_desc_of(const std::string& group_name) {
  const std::string base = group_name.substr(0, group_name.find_first_of("[#"));
  return base == "group" || base == "world" ? std::string() : base;
}

std::pair<ProcessGroup, std::vector<ProcessGroup>> new_subgroups_by_enumeration(
    const std::vector<std::vector<int>>& ranks_per_subgroup, const std::string& group_desc) {
  Backend& backend = Backend::current();
  std::vector<int> seen(static_cast<size_t>(backend.size()), -1);
  for (size_t k = 0; k < ranks_per_subgroup.size(); ++k)
    for (int r : ranks_per_subgroup[k]) {
      if (r < 0 || r >= backend.size())
        throw Error("new_subgroups_by_enumeration: rank " + std::to_string(r) + " in subgroup " + std::to_string(k) +
                    " is outside the world of " + std::to_string(backend.size()) + " ranks");
      if (seen[static_cast<size_t>(r)] >= 0)
        throw Error("new_subgroups_by_enumeration: rank " + std::to_string(r) + " is in subgroups " +
                    std::to_string(seen[static_cast<size_t>(r)]) + " and " + std::to_string(k) +
                    "; every rank must be in exactly one subgroup");
      seen[static_cast<size_t>(r)] = static_cast<int>(k);
    }
  for (int r = 0; r < backend.size(); ++r)
    if (seen[static_cast<size_t>(r)] < 0)
      throw Error("new_subgroups_by_enumeration: rank " + std::to_string(r) +
                  " is in no subgroup; every rank must be in exactly one");
  std::vector<ProcessGroup> all;
  for (const auto& ranks : ranks_per_subgroup) all.push_back(new_group(ranks, group_desc));
  return {all[static_cast<size_t>(seen[static_cast<size_t>(backend.rank())])], all};
}

}  // namespace ranksim::runtime

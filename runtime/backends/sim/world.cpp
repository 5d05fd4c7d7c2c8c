#include "runtime/backends/sim/world.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include "runtime/execute.h"
#include "sim/check.h"
#include "sim/error.h"

namespace ranksim::runtime::detail {

namespace {

std::string join_ranks(const std::vector<int>& ranks, size_t limit = 16) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size() && i < limit; ++i) os << (i ? ", " : "") << ranks[i];
  if (ranks.size() > limit) os << ", ... (" << ranks.size() << " in all)";
  return os.str();
}

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

World::World(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm,
             int nranks)
    : engine_(engine),
      topology_(topology),
      network_(topology),
      compute_(topology),
      default_algorithm_(default_algorithm),
      nranks_(nranks),
      initialized_(static_cast<size_t>(nranks), 0),
      compute_time_(static_cast<size_t>(nranks)),
      comm_time_(static_cast<size_t>(nranks)) {
  std::vector<int> all(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) all[static_cast<size_t>(r)] = r;
  world_ = make_group(all);
  world_->name = "world";
  engine_.set_context(this);
}

World& World::current() {
  sim::Engine* e = sim::Engine::current();
  if (e == nullptr || !e->in_rank() || e->context() == nullptr)
    throw Error("torch.distributed-style call outside a rank: call it from a function run by "
                "ranksim::runtime::spawn()");
  return *static_cast<World*>(e->context());
}

std::shared_ptr<GroupState> World::resolve(const ProcessGroup& group) {
  return group.state() ? group.state() : world_;
}

std::shared_ptr<GroupState> World::make_group(std::vector<int> ranks) {
  auto g = std::make_shared<GroupState>();
  g->id = static_cast<int>(groups_.size());
  g->ranks = std::move(ranks);
  g->index_of.assign(static_cast<size_t>(nranks_), -1);
  for (size_t i = 0; i < g->ranks.size(); ++i) g->index_of[static_cast<size_t>(g->ranks[i])] = static_cast<int>(i);
  g->next_call.assign(g->ranks.size(), 0);
  std::ostringstream name;
  name << "group[" << join_ranks(g->ranks, 8) << ']';
  g->name = name.str();
  // Node layout for hierarchical algorithms and the default choice.
  std::vector<int> node_ids;
  std::map<int, int> per_node;
  for (int r : g->ranks) {
    const int node = topology_.device(r).node;
    g->node_of.push_back(node);
    ++per_node[node];
  }
  g->nodes = static_cast<int>(per_node.size());
  g->equal_per_node = true;
  for (const auto& [node, k] : per_node)
    if (k != per_node.begin()->second) g->equal_per_node = false;
  groups_.push_back(g);
  return g;
}

std::shared_ptr<GroupState> World::find_or_make_group(int creator, const std::vector<int>& ranks) {
  const int occurrence = creations_[{creator, ranks}]++;
  auto& slot = registry_[{ranks, occurrence}];
  if (!slot) {
    slot = make_group(ranks);
    if (ranks.size() == static_cast<size_t>(nranks_)) slot->name = "world#" + std::to_string(slot->id);
  }
  return slot;
}

std::shared_ptr<WorkState> World::post(const std::shared_ptr<GroupState>& gp, Signature sig,
                                       Part part) {
  GroupState& g = *gp;
  const int me = rank();
  const int idx = g.index_of[static_cast<size_t>(me)];
  if (idx < 0) {
    throw Error("rank " + std::to_string(me) + " called " + sig.describe() + " on " + g.name +
                ", which it is not a member of (members: " + join_ranks(g.ranks) + ")");
  }
  const uint64_t call = g.next_call[static_cast<size_t>(idx)]++;
  Pending& p = g.pending[call];
  const int n = static_cast<int>(g.ranks.size());
  if (p.arrived == 0) {
    p.sig = sig;
    p.first_rank = me;
    p.parts.resize(static_cast<size_t>(n));
  } else {
    const std::string diff = p.sig.difference(sig);
    if (!diff.empty()) {
      throw Error("collective mismatch on " + g.name + " at call #" + std::to_string(call) +
                  ": rank " + std::to_string(p.first_rank) + " called " + p.sig.describe() +
                  " but rank " + std::to_string(me) + " called " + sig.describe() + " (" + diff +
                  "); every member must issue the same collectives in the same order");
    }
    const Part& first = p.parts[static_cast<size_t>(g.index_of[static_cast<size_t>(p.first_rank)])];
    if (first.has_data != part.has_data) {
      throw Error("collective " + sig.describe() + " on " + g.name + " call #" +
                  std::to_string(call) + " mixes shape-only and data tensors: rank " +
                  std::to_string(p.first_rank) + (first.has_data ? " has data" : " is shape-only") +
                  ", rank " + std::to_string(me) + (part.has_data ? " has data" : " is shape-only"));
    }
  }
  auto w = std::make_shared<WorkState>();
  w->owner = me;
  std::weak_ptr<GroupState> weak = gp;
  const std::string what = sig.describe();
  w->describe = [weak, call, what, n] {
    std::ostringstream os;
    os << what;
    auto g2 = weak.lock();
    if (!g2) return os.str();
    os << " on " << g2->name << ", call #" << call;
    auto it = g2->pending.find(call);
    if (it != g2->pending.end()) {
      std::vector<int> missing;
      for (int i = 0; i < n; ++i)
        if (!it->second.parts[static_cast<size_t>(i)].posted) missing.push_back(g2->ranks[static_cast<size_t>(i)]);
      os << ": waiting for rank" << (missing.size() == 1 ? " " : "s ") << join_ranks(missing)
         << " to join";
    }
    return os.str();
  };
  part.posted = true;
  part.post = engine_.now();
  part.work = w;
  p.parts[static_cast<size_t>(idx)] = std::move(part);
  if (++p.arrived == n) {
    complete(g, call, p);
    g.pending.erase(call);
  }
  return w;
}

const Schedule& World::schedule_for(const GroupState& g, const ScheduleRequest& req) {
  const auto key = std::make_tuple(g.id, static_cast<int>(req.kind), static_cast<int>(req.algorithm),
                                   req.count, req.root, req.nranks);
  auto it = schedule_cache_.find(key);
  if (it != schedule_cache_.end()) return it->second;
  if (schedule_cache_.size() > 256) schedule_cache_.clear();  // sweeps: keep memory bounded
  return schedule_cache_.emplace(key, make_schedule(req)).first->second;
}

void World::complete(GroupState& g, uint64_t call, Pending& p) {
  const int n = static_cast<int>(g.ranks.size());
  const Signature& sig = p.sig;
  const size_t esize = dtype_size(sig.dtype);

  ScheduleRequest req;
  req.kind = sig.kind;
  req.nranks = n;
  req.count = sig.count;
  req.root = sig.root;
  // The call's choice, else the group's, else the run's, else by size and layout.
  Algorithm algo = sig.algorithm != Algorithm::automatic ? sig.algorithm
                   : g.algorithm != Algorithm::automatic ? g.algorithm
                                                         : default_algorithm_;
  if (algo == Algorithm::automatic) {
    algo = choose_algorithm(sig.kind, n, sig.count * static_cast<int64_t>(esize), g.nodes,
                            g.equal_per_node);
  }
  req.algorithm = algo;
  if (algo == Algorithm::hierarchical) req.node_of = g.node_of;
  Schedule local;
  const Schedule* sched;
  if (sig.kind == CollectiveKind::all_to_all) {
    req.splits.assign(static_cast<size_t>(n), {});
    for (int i = 0; i < n; ++i) req.splits[static_cast<size_t>(i)] = p.parts[static_cast<size_t>(i)].in_splits;
    // Rank j's output splits must match what every rank sends it.
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        const int64_t sent = req.splits[static_cast<size_t>(i)][static_cast<size_t>(j)];
        const int64_t expected = p.parts[static_cast<size_t>(j)].out_splits[static_cast<size_t>(i)];
        if (sent != expected) {
          throw Error("all_to_all_single on " + g.name + " call #" + std::to_string(call) +
                      ": rank " + std::to_string(g.ranks[static_cast<size_t>(i)]) + " sends " +
                      std::to_string(sent) + " elements to rank " +
                      std::to_string(g.ranks[static_cast<size_t>(j)]) + ", which expects " +
                      std::to_string(expected) + " (input_split_sizes and output_split_sizes "
                      "must agree pairwise)");
        }
      }
    local = make_schedule(req);
    sched = &local;
  } else if (algo == Algorithm::hierarchical) {
    local = make_schedule(req);
    sched = &local;
  } else {
    sched = &schedule_for(g, req);
  }

  if (p.parts.front().has_data) execute_data(g, p, *sched);

  std::vector<sim::Time> start(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    start[static_cast<size_t>(i)] = p.parts[static_cast<size_t>(i)].post +
                                    topology_.kind_of(g.ranks[static_cast<size_t>(i)]).launch_overhead;
  const std::vector<sim::Time> done = time_schedule(g, *sched, start, esize);

  CollectiveRecord rec;
  rec.kind = sig.kind;
  rec.algorithm = algo;
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
      for (const Part& part : p.parts) {
        int64_t s = 0;
        for (int64_t x : part.in_splits) s += x;
        most = std::max(most, s);
      }
      rec.count = most;
      break;
    }
    default: rec.count = sig.count;
  }
  rec.bytes = rec.count * static_cast<int64_t>(esize);
  for (int i = 0; i < n; ++i) {
    rec.start = std::max(rec.start, p.parts[static_cast<size_t>(i)].post);
    rec.end = std::max(rec.end, done[static_cast<size_t>(i)]);
  }
  records_.push_back(rec);

  if (engine_.options().trace) {
    const std::string name = to_string(sig.kind);
    for (int i = 0; i < n; ++i) {
      const Part& part = p.parts[static_cast<size_t>(i)];
      engine_.trace().add(sim::Span{g.ranks[static_cast<size_t>(i)], sim::SpanKind::comm, part.post,
                                    done[static_cast<size_t>(i)], name,
                                    {{"group", g.name},
                                     {"call", std::to_string(call)},
                                     {"bytes", std::to_string(rec.bytes)},
                                     {"dtype", rec.dtype},
                                     {"algorithm", to_string(algo)}}});
    }
  }
  for (int i = 0; i < n; ++i) finish(*p.parts[static_cast<size_t>(i)].work, done[static_cast<size_t>(i)]);
}

void World::execute_data(GroupState& g, Pending& p, const Schedule& s) {
  const int n = static_cast<int>(g.ranks.size());
  const Signature& sig = p.sig;
  const size_t esize = dtype_size(sig.dtype);
  const int64_t c = sig.count;
  const ReduceKernel kernel = reduce_kernel(sig.dtype, sig.op);
  auto run = [&](const std::vector<std::byte*>& bufs) {
    execute_schedule(s, bufs, esize, kernel);
  };
  auto part = [&](int i) -> Part& { return p.parts[static_cast<size_t>(i)]; };
  std::vector<std::vector<std::byte>> scratch;
  auto make_scratch = [&](int64_t elems) {
    scratch.assign(static_cast<size_t>(n), std::vector<std::byte>(static_cast<size_t>(elems) * esize));
    std::vector<std::byte*> bufs;
    for (auto& v : scratch) bufs.push_back(v.data());
    return bufs;
  };
  const bool avg = sig.op == ReduceOp::AVG;
  switch (sig.kind) {
    case CollectiveKind::all_reduce: {
      std::vector<std::byte*> bufs;
      for (int i = 0; i < n; ++i) bufs.push_back(bytes_of(part(i).a));
      run(bufs);
      if (avg)
        for (int i = 0; i < n; ++i) divide_elements(bufs[static_cast<size_t>(i)], sig.dtype, c, n);
      break;
    }
    case CollectiveKind::broadcast: {
      std::vector<std::byte*> bufs;
      for (int i = 0; i < n; ++i) bufs.push_back(bytes_of(part(i).a));
      run(bufs);
      break;
    }
    case CollectiveKind::reduce: {
      auto bufs = make_scratch(c);
      for (int i = 0; i < n; ++i) {
        if (i == sig.root) bufs[static_cast<size_t>(i)] = bytes_of(part(i).a);
        else copy_bytes(bufs[static_cast<size_t>(i)], bytes_of(part(i).a), static_cast<size_t>(c) * esize);
      }
      run(bufs);
      if (avg) divide_elements(bufs[static_cast<size_t>(sig.root)], sig.dtype, c, n);
      break;
    }
    case CollectiveKind::all_gather: {
      // a = output (n*c), b = input (c); place the input first (memmove: it may be a view of a).
      std::vector<std::byte*> bufs;
      for (int i = 0; i < n; ++i) {
        std::byte* out = bytes_of(part(i).a);
        move_bytes(out + static_cast<size_t>(i * c) * esize, bytes_of(part(i).b), static_cast<size_t>(c) * esize);
        bufs.push_back(out);
      }
      run(bufs);
      break;
    }
    case CollectiveKind::reduce_scatter: {
      // a = output (c), b = input (n*c); reduce in scratch so inputs stay untouched.
      auto bufs = make_scratch(c * n);
      for (int i = 0; i < n; ++i)
        copy_bytes(bufs[static_cast<size_t>(i)], bytes_of(part(i).b), static_cast<size_t>(c * n) * esize);
      run(bufs);
      for (int i = 0; i < n; ++i) {
        std::byte* mine = bufs[static_cast<size_t>(i)] + static_cast<size_t>(i * c) * esize;
        if (avg) divide_elements(mine, sig.dtype, c, n);
        copy_bytes(bytes_of(part(i).a), mine, static_cast<size_t>(c) * esize);
      }
      break;
    }
    case CollectiveKind::gather: {
      auto bufs = make_scratch(c * n);
      for (int i = 0; i < n; ++i)
        copy_bytes(bufs[static_cast<size_t>(i)] + static_cast<size_t>(i * c) * esize, bytes_of(part(i).a),
                    static_cast<size_t>(c) * esize);
      run(bufs);
      Part& root = part(sig.root);
      for (int j = 0; j < n; ++j)
        copy_bytes(bytes_of(root.list[static_cast<size_t>(j)]),
                    bufs[static_cast<size_t>(sig.root)] + static_cast<size_t>(j * c) * esize,
                    static_cast<size_t>(c) * esize);
      break;
    }
    case CollectiveKind::scatter: {
      auto bufs = make_scratch(c * n);
      Part& root = part(sig.root);
      for (int j = 0; j < n; ++j)
        copy_bytes(bufs[static_cast<size_t>(sig.root)] + static_cast<size_t>(j * c) * esize,
                    bytes_of(root.list[static_cast<size_t>(j)]), static_cast<size_t>(c) * esize);
      run(bufs);
      for (int i = 0; i < n; ++i)
        copy_bytes(bytes_of(part(i).a), bufs[static_cast<size_t>(i)] + static_cast<size_t>(i * c) * esize,
                    static_cast<size_t>(c) * esize);
      break;
    }
    case CollectiveKind::all_to_all: {
      // a = output, b = input; scratch = [input | output].
      auto bufs = make_scratch(s.buffer_elems);
      std::vector<int64_t> in_total(static_cast<size_t>(n), 0), out_total(static_cast<size_t>(n), 0);
      for (int i = 0; i < n; ++i) {
        for (int64_t x : part(i).in_splits) in_total[static_cast<size_t>(i)] += x;
        for (int64_t x : part(i).out_splits) out_total[static_cast<size_t>(i)] += x;
        copy_bytes(bufs[static_cast<size_t>(i)], bytes_of(part(i).b),
                    static_cast<size_t>(in_total[static_cast<size_t>(i)]) * esize);
      }
      run(bufs);
      for (int i = 0; i < n; ++i)
        copy_bytes(bytes_of(part(i).a),
                    bufs[static_cast<size_t>(i)] + static_cast<size_t>(in_total[static_cast<size_t>(i)]) * esize,
                    static_cast<size_t>(out_total[static_cast<size_t>(i)]) * esize);
      break;
    }
    case CollectiveKind::barrier: break;
  }
}

std::vector<sim::Time> World::time_schedule(const GroupState& g, const Schedule& s,
                                            const std::vector<sim::Time>& start, size_t elem_size) {
  std::vector<sim::Time> t = start;
  std::vector<std::tuple<int, int, int64_t>> pairs;
  std::vector<sim::Transfer> transfers;
  // Consecutive steps of a ring (or of any regular schedule) are usually the same transfers
  // shifted in time. The network model's result depends only on the transfers' sizes, routes and
  // relative start times, so such a step reuses the previous step's durations instead of
  // running the flow solver again (up to the picosecond rounding of absolute instants).
  std::vector<std::tuple<int, int, uint64_t, int64_t>> signature, prev_signature;
  std::vector<sim::Time> prev_durations;
  for (const Step& step : s.steps) {
    pairs.clear();
    for (const Move& m : step.moves)
      if (m.src != m.dst) pairs.emplace_back(m.src, m.dst, m.count * static_cast<int64_t>(elem_size));
    if (pairs.empty()) continue;
    std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    transfers.clear();
    std::vector<std::pair<int, int>> ends;
    for (size_t k = 0; k < pairs.size();) {
      const auto [src, dst, b0] = pairs[k];
      int64_t bytes = 0;
      while (k < pairs.size() && std::get<0>(pairs[k]) == src && std::get<1>(pairs[k]) == dst)
        bytes += std::get<2>(pairs[k++]);
      transfers.push_back(sim::Transfer{g.ranks[static_cast<size_t>(src)], g.ranks[static_cast<size_t>(dst)],
                                        static_cast<uint64_t>(bytes),
                                        std::max(t[static_cast<size_t>(src)], t[static_cast<size_t>(dst)])});
      ends.emplace_back(src, dst);
      (void)b0;
    }
    sim::Time first = sim::Time::max();
    for (const sim::Transfer& tr : transfers) first = std::min(first, tr.start);
    signature.clear();
    for (const sim::Transfer& tr : transfers)
      signature.emplace_back(tr.src, tr.dst, tr.bytes, (tr.start - first).picoseconds());
    std::vector<sim::Time> finish_at;
    if (signature == prev_signature) {
      for (const sim::Time& d : prev_durations) finish_at.push_back(first + d);
    } else {
      finish_at = network_.complete(transfers);
      prev_durations.clear();
      for (const sim::Time& f : finish_at) prev_durations.push_back(f - first);
      std::swap(prev_signature, signature);
    }
    std::vector<sim::Time> next = t;
    for (size_t k = 0; k < ends.size(); ++k) {
      auto& a = next[static_cast<size_t>(ends[k].first)];
      auto& b = next[static_cast<size_t>(ends[k].second)];
      a = std::max(a, finish_at[k]);
      b = std::max(b, finish_at[k]);
    }
    t = std::move(next);
  }
  return t;
}

void World::finish(WorkState& w, sim::Time done) {
  w.matched = true;
  w.done = done;
  if (w.owner_waiting) {
    w.owner_waiting = false;
    engine_.wake(w.owner, done);
  }
}

void World::wait(WorkState& w) {
  const int me = rank();
  if (w.owner != me) {
    throw Error("rank " + std::to_string(me) + " waited on a Work owned by rank " +
                std::to_string(w.owner) + ": a Work belongs to the rank that started it");
  }
  const sim::Time before = engine_.now();
  if (!w.matched) {
    w.owner_waiting = true;
    engine_.block(w.describe);
  } else if (w.done > before) {
    engine_.sleep_until(w.done);
  }
  comm_time_[static_cast<size_t>(me)] += engine_.now() - before;
  w.observed = true;
  if (w.error) std::rethrow_exception(w.error);
}

bool World::poll(WorkState& w) {
  if (w.matched && w.done <= engine_.now()) {
    w.observed = true;
    return true;
  }
  const sim::Time step = sim::Time::us(1);
  engine_.sleep_until(w.matched ? std::min(w.done, engine_.now() + step) : engine_.now() + step);
  w.observed = w.matched && w.done <= engine_.now();
  return w.observed;
}

std::shared_ptr<WorkState> World::post_p2p(bool is_send, const Tensor& tensor, int peer,
                                           const P2POptions& opts) {
  const auto gp = resolve(opts.group);
  const GroupState& g = *gp;
  const int me = rank();
  const char* verb = is_send ? "send" : "recv";
  if (g.index_of[static_cast<size_t>(me)] < 0)
    throw Error(std::string(verb) + " on " + g.name + " from rank " + std::to_string(me) +
                ", which is not a member");
  if (peer < 0 || peer >= nranks_ || g.index_of[static_cast<size_t>(peer)] < 0)
    throw Error(std::string(verb) + (is_send ? " to" : " from") + " rank " + std::to_string(peer) +
                ", which is not in " + g.name + " (members: " + join_ranks(g.ranks) + ")");
  if (peer == me)
    throw Error(std::string(verb) + " by rank " + std::to_string(me) + " to itself: copy the tensor instead");
  if (tensor.has_data() && !tensor.is_contiguous())
    throw Error(std::string(verb) + " needs a contiguous tensor, got a strided view " + tensor.str() +
                "; call .contiguous() first");
  const ChannelKey key = is_send ? ChannelKey{g.id, me, peer, opts.tag} : ChannelKey{g.id, peer, me, opts.tag};
  auto w = std::make_shared<WorkState>();
  w->owner = me;
  const std::string desc = std::string(verb) + "(" + (is_send ? "dst=" : "src=") + std::to_string(peer) +
                           ", tag=" + std::to_string(opts.tag) + ", " + g.name + ", " + tensor.str() +
                           "): no matching " + (is_send ? "recv" : "send") + " posted by rank " +
                           std::to_string(peer);
  w->describe = [desc] { return desc; };
  Channel& ch = channels_[key];
  (is_send ? ch.sends : ch.recvs).push_back(P2PPost{tensor, engine_.now(), w});
  match_p2p(key, ch);
  return w;
}

void World::match_p2p(const ChannelKey& key, Channel& ch) {
  while (!ch.sends.empty() && !ch.recvs.empty()) {
    P2PPost s = std::move(ch.sends.front());
    P2PPost r = std::move(ch.recvs.front());
    ch.sends.pop_front();
    ch.recvs.pop_front();
    const int src = std::get<1>(key), dst = std::get<2>(key);
    if (s.tensor.dtype() != r.tensor.dtype() || s.tensor.numel() != r.tensor.numel()) {
      throw Error("send/recv mismatch: rank " + std::to_string(src) + " sends " + s.tensor.str() +
                  " to rank " + std::to_string(dst) + " (tag " + std::to_string(std::get<3>(key)) +
                  ") but rank " + std::to_string(dst) + " receives into " + r.tensor.str() +
                  "; dtype and element count must match");
    }
    if (s.tensor.has_data() != r.tensor.has_data())
      throw Error("send/recv between ranks " + std::to_string(src) + " and " + std::to_string(dst) +
                  " mixes shape-only and data tensors");
    if (s.tensor.has_data())
      copy_bytes(bytes_of(r.tensor), bytes_of(s.tensor), s.tensor.nbytes());
    const sim::Time start = std::max(s.post, r.post) + topology_.kind_of(src).launch_overhead;
    const sim::Transfer tr{src, dst, static_cast<uint64_t>(s.tensor.nbytes()), start};
    const sim::Time done = network_.complete(std::span<const sim::Transfer>(&tr, 1)).front();
    if (engine_.options().trace) {
      const std::vector<std::pair<std::string, std::string>> args{
          {"bytes", std::to_string(s.tensor.nbytes())}, {"tag", std::to_string(std::get<3>(key))}};
      engine_.trace().add(sim::Span{src, sim::SpanKind::comm, s.post, done, "send to " + std::to_string(dst), args});
      engine_.trace().add(sim::Span{dst, sim::SpanKind::comm, r.post, done, "recv from " + std::to_string(src), args});
    }
    finish(*s.work, done);
    finish(*r.work, done);
  }
}

void World::charge(const OpCost& cost) {
  sim::Engine* e = sim::Engine::current();
  if (e != &engine_ || !e->in_rank()) return;
  const int r = e->rank();
  const bool fp = is_floating(cost.dtype);
  const sim::Time dt = compute_.cost(r, fp ? cost.flops : 0.0, cost.bytes, fp ? dtype_name(cost.dtype) : "f32");
  const sim::Time begin = e->now();
  e->advance(dt);
  compute_time_[static_cast<size_t>(r)] += dt;
  if (engine_.options().trace && dt > sim::Time::zero())
    engine_.trace().add(sim::Span{r, sim::SpanKind::compute, begin, begin + dt, cost.op, {}});
}

RunReport World::take_report() {
  RunReport rep;
  rep.collectives = std::move(records_);
  rep.compute = compute_time_;
  rep.comm = comm_time_;
  return rep;
}

}  // namespace ranksim::runtime::detail

#include "runtime/distributed/backends/sim/world.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>

#include "runtime/distributed/execute.h"
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

// memcpy that accepts the null pointers of empty buffers (zero-element splits).
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

}  // namespace

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
  engine_.set_context(static_cast<Backend*>(this));
}

std::shared_ptr<SimGroup> World::make_group(std::vector<int> ranks) {
  auto g = std::make_shared<SimGroup>();
  g->owner = static_cast<const Backend*>(this);
  g->id = static_cast<int>(groups_.size());
  g->ranks = std::move(ranks);
  g->index_of.assign(static_cast<size_t>(nranks_), -1);
  for (size_t i = 0; i < g->ranks.size(); ++i) g->index_of[static_cast<size_t>(g->ranks[i])] = static_cast<int>(i);
  g->next_call.assign(g->ranks.size(), 0);
  std::ostringstream name;
  name << "group[" << join_ranks(g->ranks, 8) << ']';
  g->name = name.str();
  // Node layout for hierarchical algorithms and the default choice.
  set_node_layout(*g, [&](int r) { return topology_.device(r).node; });
  groups_.push_back(g);
  return g;
}

std::shared_ptr<GroupState> World::find_or_make_group(const std::vector<int>& ranks) {
  const int occurrence = creations_[{rank(), ranks}]++;
  auto& slot = registry_[{ranks, occurrence}];
  if (!slot) {
    slot = make_group(ranks);
    if (ranks.size() == static_cast<size_t>(nranks_)) slot->name = "world#" + std::to_string(slot->id);
  }
  return slot;
}

std::shared_ptr<WorkState> World::post(const std::shared_ptr<GroupState>& gp, Signature sig,
                                       Part part) {
  SimGroup& g = static_cast<SimGroup&>(*gp);
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
  std::weak_ptr<SimGroup> weak = std::static_pointer_cast<SimGroup>(gp);
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

void World::complete(SimGroup& g, uint64_t call, Pending& p) {
  const int n = static_cast<int>(g.ranks.size());
  const Signature& sig = p.sig;
  const size_t esize = dtype_size(sig.dtype);

  // The call's choice, else the group's, else the run's, else by size and layout.
  const Algorithm algo = resolve_algorithm(g, sig, default_algorithm_);
  ScheduleRequest req = schedule_request(g, sig, algo);
  if (sig.kind == CollectiveKind::all_to_all) {
    req.splits.assign(static_cast<size_t>(n), {});
    for (int i = 0; i < n; ++i) req.splits[static_cast<size_t>(i)] = p.parts[static_cast<size_t>(i)].in_splits;
    // Rank j's output splits must match what every rank sends it.
    for (int j = 0; j < n; ++j) check_splits(g, call, req, j, p.parts[static_cast<size_t>(j)].out_splits);
  }
  Schedule local;
  const Schedule* sched = &schedules_.get(g.id, req, local);

  if (p.parts.front().has_data) execute_data(g, p, *sched);

  std::vector<sim::Time> start(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    start[static_cast<size_t>(i)] = p.parts[static_cast<size_t>(i)].post +
                                    topology_.kind_of(g.ranks[static_cast<size_t>(i)]).launch_overhead;
  const std::vector<sim::Time> done = time_schedule(g, *sched, start, esize);

  CollectiveRecord rec = collective_record(g, sig, algo, call, req);
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

void World::execute_data(SimGroup& g, Pending& p, const Schedule& s) {
  const int n = static_cast<int>(g.ranks.size());
  std::vector<WorkingBuffer> work;
  work.reserve(static_cast<size_t>(n));
  std::vector<std::byte*> bufs;
  for (int i = 0; i < n; ++i) {
    work.emplace_back(p.sig, p.parts[static_cast<size_t>(i)], i, n, s.buffer_elems);
    bufs.push_back(work.back().data());
  }
  execute_schedule(s, bufs, dtype_size(p.sig.dtype), reduce_kernel(p.sig.dtype, p.sig.op));
  for (WorkingBuffer& b : work) b.finish();
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

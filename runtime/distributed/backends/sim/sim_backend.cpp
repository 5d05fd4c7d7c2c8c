#include "runtime/distributed/backends/sim/sim_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "runtime/distributed/distributed.h"
#include "runtime/distributed/execute.h"
#include "runtime/distributed/nccl_names.h"
#include "sim/check.h"
#include "sim/error.h"

namespace ranksim::runtime::detail {

namespace {

// A duration times a factor (an injected fault's), to the nearest picosecond.
sim::Time stretch(sim::Time t, double factor) {
  return sim::Time::ps(std::llround(static_cast<double>(t.picoseconds()) * factor));
}

// The error every member of a call gets when the network links it needs have failed.
std::exception_ptr network_failure(const std::string& call, const FaultPlan::NetworkFault& f) {
  return std::make_exception_ptr(
      Error(call + ": " + f.what + " (the network links it needs failed at virtual time " + f.at.str() + ")"));
}

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

SimBackend::SimBackend(sim::Engine& engine, const sim::Topology& topology, Algorithm default_algorithm,
                       std::optional<sim::Protocol> protocol, int nranks)
    : engine_(engine),
      topology_(topology),
      network_(topology),
      collective_model_(topology),
      compute_(topology),
      default_algorithm_(default_algorithm),
      protocol_(protocol),
      nranks_(nranks),
      initialized_(static_cast<size_t>(nranks), 0),
      compute_time_(static_cast<size_t>(nranks)),
      comm_time_(static_cast<size_t>(nranks)),
      comm_by_account_(static_cast<size_t>(nranks)),
      busy_by_group_(static_cast<size_t>(nranks)),
      compute_detail_(static_cast<size_t>(nranks)),
      gemm_precision_(static_cast<size_t>(nranks), GemmPrecision::native),
      memory_(std::make_shared<SimMemory>(engine, nranks, device_capacities(topology, nranks))) {
  std::vector<int> all(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) all[static_cast<size_t>(r)] = r;
  world_ = make_group(all);
  world_->name = "world";
  engine_.set_context(static_cast<Backend*>(this));
}

std::shared_ptr<SimGroup> SimBackend::make_group(std::vector<int> ranks) {
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

std::size_t SimBackend::RankSetHash::operator()(const std::vector<int>& v) const noexcept {
  uint64_t h = 0xcbf29ce484222325ULL ^ v.size();  // FNV-1a over the ranks
  for (const int r : v) h = (h ^ static_cast<uint32_t>(r)) * 0x100000001b3ULL;
  return static_cast<std::size_t>(h);
}

std::shared_ptr<GroupState> SimBackend::find_or_make_group(const std::vector<int>& ranks) {
  RankSet& set = sets_[ranks];
  // A rank outside the set gets a handle of its own kind: it takes no part in the set's groups,
  // so which creation it makes cannot depend on what the members made (nor can it name their
  // group first: a group keeps the description of its first creator).
  if (!std::binary_search(ranks.begin(), ranks.end(), rank())) {
    if (!set.outside) set.outside = make_group(ranks);
    return set.outside;
  }
  const auto me = static_cast<size_t>(rank());
  const uint64_t bit = uint64_t{1} << (me % 64);
  size_t occurrence = 0;
  while (occurrence < set.created.size() && (set.created[occurrence][me / 64] & bit) != 0) ++occurrence;
  if (occurrence == set.created.size()) {
    set.created.emplace_back((static_cast<size_t>(nranks_) + 63) / 64, 0);
    set.by_occurrence.emplace_back();
  }
  set.created[occurrence][me / 64] |= bit;
  auto& slot = set.by_occurrence[occurrence];
  if (!slot) {
    slot = make_group(ranks);
    if (ranks.size() == static_cast<size_t>(nranks_)) slot->name = "world#" + std::to_string(slot->id);
  }
  return slot;
}

std::shared_ptr<WorkState> SimBackend::post(const std::shared_ptr<GroupState>& gp, Signature sig,
                                            CollectiveTensors tensors) {
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
    p.arrivals.resize(static_cast<size_t>(n));
  } else {
    const std::string diff = p.sig.difference(sig);
    if (!diff.empty()) {
      throw Error("collective mismatch on " + g.name + " at call #" + std::to_string(call) + ": rank " +
                  std::to_string(p.first_rank) + " called " + p.sig.describe() + " but rank " + std::to_string(me) +
                  " called " + sig.describe() + " (" + diff +
                  "); every member must issue the same collectives in the same order");
    }
    const Arrival& first = p.arrivals[static_cast<size_t>(g.index_of[static_cast<size_t>(p.first_rank)])];
    const bool first_data = has_data(first.tensors), my_data = has_data(tensors);
    if (first_data != my_data) {
      throw Error("collective " + sig.describe() + " on " + g.name + " call #" + std::to_string(call) +
                  " mixes shape-only and data tensors: rank " + std::to_string(p.first_rank) +
                  (first_data ? " has data" : " is shape-only") + ", rank " + std::to_string(me) +
                  (my_data ? " has data" : " is shape-only"));
    }
  }
  auto work = std::make_shared<WorkState>();
  work->owner = me;
  work->group = g.id;
  work->posted = engine_.now();
  std::weak_ptr<SimGroup> weak = std::static_pointer_cast<SimGroup>(gp);
  // Described only if asked (a deadlock report): posting is on every collective's path.
  work->describe = [weak, call, sig, n] {
    std::ostringstream os;
    os << sig.describe();
    auto g2 = weak.lock();
    if (!g2) return os.str();
    os << " on " << g2->name << ", call #" << call;
    auto it = g2->pending.find(call);
    if (it != g2->pending.end()) {
      std::vector<int> missing;
      for (int i = 0; i < n; ++i)
        if (!it->second.arrivals[static_cast<size_t>(i)].posted) missing.push_back(g2->ranks[static_cast<size_t>(i)]);
      if (!missing.empty())
        os << ": waiting for rank" << (missing.size() == 1 ? " " : "s ") << join_ranks(missing) << " to join";
      else if (it->second.stalled_by >= 0)
        os << ": rank " << it->second.stalled_by << " stopped inside it (an injected fault), so it never completes";
    }
    return os.str();
  };
  p.arrivals[static_cast<size_t>(idx)] = Arrival{true, engine_.now(), std::move(tensors), work};
  if (++p.arrived == n && complete(g, call, p)) g.pending.erase(call);
  return work;
}

bool SimBackend::complete(SimGroup& g, uint64_t call, Pending& p) {
  const int n = static_cast<int>(g.ranks.size());
  const Signature& sig = p.sig;
  const size_t esize = dtype_size(sig.dtype);

  // The call's choice, else the group's, else the run's, else by size and layout.
  const Algorithm requested = requested_algorithm(g, sig, default_algorithm_);
  const bool nccl = topology_.collectives().model == sim::CollectiveTimingModel::nccl;
  if (!nccl && timing_only(requested))
    throw Error(std::string("collective algorithm '") + to_string(requested) + "' is NCCL's, timed only by the nccl " +
                "collective model; topology '" + topology_.name() + "' times collectives as schedules (set " +
                "collectives.model: nccl in the topology, or use ring, tree, direct or hierarchical)");
  const Algorithm algo = resolve_algorithm(g, sig, default_algorithm_);
  ScheduleRequest req = schedule_request(g, sig, algo);
  const bool data = has_data(p.arrivals.front().tensors);
  int64_t even_all_to_all = -1;  // an all_to_all of even splits timed without its n x n table
  if (sig.kind == CollectiveKind::all_to_all) {
    const auto splits = [&](int i) -> const AllToAllTensors& {
      return std::get<AllToAllTensors>(p.arrivals[static_cast<size_t>(i)].tensors);
    };
    bool even = !data && nccl;
    for (int i = 0; i < n && even; ++i)
      even = splits(i).input_splits.is_even() && splits(i).output_splits.is_even() &&
             splits(i).input_splits[0] == splits(0).input_splits[0] &&
             splits(i).output_splits[0] == splits(0).input_splits[0];
    if (even) {
      even_all_to_all = splits(0).input_splits.total();
    } else {
      req.splits.assign(static_cast<size_t>(n), {});
      for (int i = 0; i < n; ++i) req.splits[static_cast<size_t>(i)] = splits(i).input_splits.to_vector();
      // Rank j's output splits must match what every rank sends it.
      for (int j = 0; j < n; ++j) check_splits(g, call, req, j, splits(j).output_splits);
    }
  }
  std::vector<sim::Time> start(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    start[static_cast<size_t>(i)] =
        p.arrivals[static_cast<size_t>(i)].post + topology_.kind_of(g.ranks[static_cast<size_t>(i)]).launch_overhead;
  // An injected network fault on the links this call crosses: failed links fail it on every
  // member (as NCCL reports a remote error on each), degraded ones slow it.
  const sim::Time latest = *std::max_element(start.begin(), start.end());
  const NetworkEffect net = network_effect(g.ranks, latest);
  if (net.failed != nullptr) {
    const auto error = network_failure(
        std::string(to_string(sig.kind)) + " on " + g.name + ", call #" + std::to_string(call), *net.failed);
    for (int i = 0; i < n; ++i) {
      p.arrivals[static_cast<size_t>(i)].work->error = error;
      finish(*p.arrivals[static_cast<size_t>(i)].work, latest);
    }
    return true;
  }

  Schedule local;
  // The nccl model times shape-only calls without a schedule: none is built for them. A
  // shape-only ring or hierarchical collective is timed step by step as its steps are made
  // (LazySteps), in memory linear in the group, rather than from its n^2 moves.
  const bool lazy_ring = !data && !nccl && LazySteps::serves(req);
  const Schedule* sched = (data || !nccl) && !lazy_ring ? &schedules_.get(g.id, req, local) : nullptr;
  if (data) execute_data(g, p, *sched);

  CollectiveRecord rec = collective_record(g, sig, algo, call, req);
  if (even_all_to_all >= 0) {
    rec.count = even_all_to_all;
    rec.bytes = rec.count * static_cast<int64_t>(esize);
  }
  std::vector<sim::Time> done;
  if (nccl) {
    const sim::CollectiveEstimate est = time_nccl(g, sig, requested, rec, net.factor);
    rec.algorithm = from_nccl_algorithm(est.algorithm);
    rec.protocol = sim::to_string(est.protocol);
    rec.channels = est.channels;
    rec.tuner = est.tuner_line > 0;
    const sim::Time t0 = *std::max_element(start.begin(), start.end());
    done.assign(static_cast<size_t>(n), t0 + sim::Time::from_seconds(est.seconds));
  } else {
    if (lazy_ring) {
      const LazySteps ring(req);
      Step buffer;
      done = time_schedule(
          g, static_cast<std::size_t>(ring.size()),
          [&](std::size_t k) -> const Step& {
            ring.step(static_cast<int>(k), buffer);
            return buffer;
          },
          start, esize);
    } else {
      done = time_schedule(
          g, sched->steps.size(), [&](std::size_t k) -> const Step& { return sched->steps[k]; }, start, esize);
    }
    if (net.factor < 1) {  // the crossing transfers' times stretched as a whole (latency included)
      for (size_t i = 0; i < done.size(); ++i) done[i] = start[i] + stretch(done[i] - start[i], 1.0 / net.factor);
    }
  }
  for (int i = 0; i < n; ++i) {
    rec.start = std::max(rec.start, p.arrivals[static_cast<size_t>(i)].post);
    rec.end = std::max(rec.end, done[static_cast<size_t>(i)]);
  }
  // A member stopped by an injected fault before the call would finish holds every member in it.
  for (int i = 0; i < n; ++i) {
    if (engine_.stop_time(g.ranks[static_cast<size_t>(i)]) < rec.end) {
      p.stalled_by = g.ranks[static_cast<size_t>(i)];
      return false;
    }
  }
  records_.push_back(rec);

  if (engine_.options().trace) {
    const std::string name = to_string(sig.kind);
    const std::string label = algorithm_label(rec);
    for (int i = 0; i < n; ++i) {
      const Arrival& arrival = p.arrivals[static_cast<size_t>(i)];
      engine_.trace().add(sim::Span{g.ranks[static_cast<size_t>(i)],
                                    sim::SpanKind::comm,
                                    arrival.post,
                                    done[static_cast<size_t>(i)],
                                    name,
                                    {{"group", g.name},
                                     {"call", std::to_string(call)},
                                     {"bytes", std::to_string(rec.bytes)},
                                     {"dtype", rec.dtype},
                                     {"algorithm", label}}});
    }
  }
  for (int i = 0; i < n; ++i) finish(*p.arrivals[static_cast<size_t>(i)].work, done[static_cast<size_t>(i)]);
  return true;
}

sim::CollectiveEstimate SimBackend::time_nccl(const GroupState& g, const Signature& sig, Algorithm requested,
                                              const CollectiveRecord& rec, double network_factor) const {
  sim::CollectiveShape shape;
  shape.nranks = static_cast<int>(g.ranks.size());
  shape.nodes = g.nodes;
  shape.ranks_per_node = g.max_per_node;
  shape.bytes = static_cast<double>(rec.bytes);
  shape.op = nccl_op(sig.kind);
  if (sig.kind == CollectiveKind::barrier) shape.bytes = 4;  // torch.distributed's NCCL barrier: one element
  // NCCL_ALGO: ring and tree as NCCL has them, and its own algorithms; ranksim's direct and
  // hierarchical schedules (and any choice for point-to-point collectives) leave NCCL's pick.
  const std::optional<sim::CollAlgo> forced = nccl_point_to_point(sig.kind) ? std::nullopt : nccl_algorithm(requested);
  // An algorithm (or protocol) that NCCL does not have for this collective (ranksim's tree
  // all_gather, say) leaves the choice to the model, as NCCL_ALGO="allreduce:tree" leaves
  // all_gather to NCCL; the data still moves by ranksim's schedule of that name.
  // `bench collectives` refuses such a choice up front instead (one collective, asked for).
  // A degraded network (an injected fault) slows the call; NCCL's choice, made from the
  // nominal bandwidths, stays what it was.
  auto degraded = [&](const sim::CollectiveEstimate& est) {
    if (network_factor >= 1) return est;
    sim::CollectiveShape slow = shape;
    slow.network_factor = network_factor;
    std::optional<sim::CollectiveEstimate> e =
        collective_model_.estimate(slow, est.algorithm, est.protocol, nullptr, est.tuner_channels);
    if (!e) return est;
    e->tuner_line = est.tuner_line;
    e->tuner_channels = est.tuner_channels;
    return *e;
  };
  auto context = [&](const Error& e) {
    return Error(std::string(to_string(sig.kind)) + " on " + g.name + " (" + std::to_string(shape.nranks) +
                 " ranks on " + std::to_string(shape.nodes) + " node(s), " + std::to_string(rec.bytes) +
                 " bytes): " + e.what());
  };
  // NCCL_ALGO / NCCL_PROTO lists: the fastest pair they allow, narrowed to the asked-for
  // algorithm where it serves the call (else, as below, the lists' own choice), and nothing
  // that they allow serving it an Error, as NCCL 2.24 refuses it.
  if (allowed_) {
    if (forced) {
      sim::NcclAllowed asked = *allowed_;
      asked.only(*forced);
      try {
        return degraded(collective_model_.choose(shape, asked));
      } catch (const Error&) {
        // the lists' own choice
      }
    }
    try {
      return degraded(collective_model_.choose(shape, *allowed_));
    } catch (const Error& e) {
      throw context(e);
    }
  }
  using Choice = std::pair<std::optional<sim::CollAlgo>, std::optional<sim::Protocol>>;
  for (const Choice& c : {Choice{forced, protocol_}, Choice{std::nullopt, protocol_}}) {
    try {
      return degraded(collective_model_.choose(shape, c.first, c.second));
    } catch (const Error&) {
      // the next, wider choice
    }
  }
  try {
    return degraded(collective_model_.choose(shape));
  } catch (const Error& e) {
    throw context(e);
  }
}

void SimBackend::execute_data(SimGroup& g, Pending& p, const Schedule& s) {
  const int n = static_cast<int>(g.ranks.size());
  std::vector<WorkingBuffer> working;
  working.reserve(static_cast<size_t>(n));
  std::vector<std::byte*> bufs;
  for (int i = 0; i < n; ++i) {
    working.emplace_back(p.sig, p.arrivals[static_cast<size_t>(i)].tensors, i, n, s.buffer_elems);
    bufs.push_back(working.back().data());
  }
  execute_schedule(s, bufs, dtype_size(p.sig.dtype), reduce_kernel(p.sig.dtype, p.sig.op));
  for (WorkingBuffer& b : working) b.finish();
}

std::vector<sim::Time> SimBackend::time_schedule(const GroupState& g, std::size_t nsteps,
                                                 const std::function<const Step&(std::size_t)>& step_at,
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
  const auto by_ends = [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  };
  for (std::size_t k_step = 0; k_step < nsteps; ++k_step) {
    const Step& step = step_at(k_step);
    pairs.clear();
    for (const Move& m : step.moves)
      if (m.src != m.dst) pairs.emplace_back(m.src, m.dst, m.count * static_cast<int64_t>(elem_size));
    if (pairs.empty()) continue;
    // (A ring's steps come sorted: a check instead of a sort on every one of its 2(n-1) steps.)
    if (!std::is_sorted(pairs.begin(), pairs.end(), by_ends)) std::stable_sort(pairs.begin(), pairs.end(), by_ends);
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

void SimBackend::finish(WorkState& work, sim::Time done) {
  work.matched = true;
  work.done = done;
  if (work.group >= 0 && done > work.posted)
    busy_by_group_[static_cast<size_t>(work.owner)][work.group] += done - work.posted;
  if (work.owner_waiting) {
    work.owner_waiting = false;
    engine_.wake(work.owner, done);
  }
}

void SimBackend::wait(WorkState& work) {
  const int me = rank();
  if (work.owner != me) {
    throw Error("rank " + std::to_string(me) + " waited on a Work owned by rank " + std::to_string(work.owner) +
                ": a Work belongs to the rank that started it");
  }
  const sim::Time before = engine_.now();
  if (!work.matched) {
    work.owner_waiting = true;
    engine_.block(work.describe);
  } else if (work.done > before) {
    engine_.sleep_until(work.done);
  }
  const sim::Time waited = engine_.now() - before;
  comm_time_[static_cast<size_t>(me)] += waited;
  if (work.group >= 0 && waited > sim::Time::zero()) {
    SimGroup& g = *groups_[static_cast<size_t>(work.group)];
    if (g.account < 0) {  // named by now: new_group renames a group before anything runs on it
      const std::string desc = group_desc_of(g.name);
      const auto it = std::find(accounts_.begin(), accounts_.end(), desc);
      g.account = static_cast<int>(it - accounts_.begin());
      if (it == accounts_.end()) accounts_.push_back(desc);
    }
    std::vector<sim::Time>& mine = comm_by_account_[static_cast<size_t>(me)];
    if (mine.size() <= static_cast<size_t>(g.account)) mine.resize(static_cast<size_t>(g.account) + 1);
    mine[static_cast<size_t>(g.account)] += waited;
  }
  work.observed = true;
  if (work.error) std::rethrow_exception(work.error);
}

bool SimBackend::poll(WorkState& work) {
  if (work.matched && work.done <= engine_.now()) {
    work.observed = true;
    return true;
  }
  const sim::Time step = sim::Time::us(1);
  engine_.sleep_until(work.matched ? std::min(work.done, engine_.now() + step) : engine_.now() + step);
  work.observed = work.matched && work.done <= engine_.now();
  return work.observed;
}

std::shared_ptr<WorkState> SimBackend::post_p2p(bool is_send, const Tensor& tensor, int peer,
                                                const std::shared_ptr<GroupState>& gp, int tag) {
  const GroupState& g = *gp;
  const int me = rank();
  const char* verb = is_send ? "send" : "recv";
  if (g.index_of[static_cast<size_t>(me)] < 0)
    throw Error(std::string(verb) + " on " + g.name + " from rank " + std::to_string(me) + ", which is not a member");
  if (peer < 0 || peer >= nranks_ || g.index_of[static_cast<size_t>(peer)] < 0)
    throw Error(std::string(verb) + (is_send ? " to" : " from") + " rank " + std::to_string(peer) +
                ", which is not in " + g.name + " (members: " + join_ranks(g.ranks) + ")");
  if (peer == me)
    throw Error(std::string(verb) + " by rank " + std::to_string(me) + " to itself: copy the tensor instead");
  if (tensor.has_data() && !tensor.is_contiguous())
    throw Error(std::string(verb) + " needs a contiguous tensor, got a strided view " + tensor.str() +
                "; call .contiguous() first");
  const ChannelKey key = is_send ? ChannelKey{g.id, me, peer, tag} : ChannelKey{g.id, peer, me, tag};
  auto work = std::make_shared<WorkState>();
  work->owner = me;
  work->group = g.id;
  work->posted = engine_.now();
  const std::string desc = std::string(verb) + "(" + (is_send ? "dst=" : "src=") + std::to_string(peer) +
                           ", tag=" + std::to_string(tag) + ", " + g.name + ", " + tensor.str() + "): no matching " +
                           (is_send ? "recv" : "send") + " posted by rank " + std::to_string(peer);
  work->describe = [desc] { return desc; };
  Channel& ch = channels_[key];
  (is_send ? ch.sends : ch.recvs).push_back(P2PPost{tensor, engine_.now(), work});
  match_p2p(key, ch);
  return work;
}

void SimBackend::match_p2p(const ChannelKey& key, Channel& ch) {
  while (!ch.sends.empty() && !ch.recvs.empty()) {
    P2PPost s = std::move(ch.sends.front());
    P2PPost r = std::move(ch.recvs.front());
    ch.sends.pop_front();
    ch.recvs.pop_front();
    const int src = std::get<1>(key), dst = std::get<2>(key);
    if (s.tensor.dtype() != r.tensor.dtype() || s.tensor.numel() != r.tensor.numel()) {
      throw Error("send/recv mismatch: rank " + std::to_string(src) + " sends " + s.tensor.str() + " to rank " +
                  std::to_string(dst) + " (tag " + std::to_string(std::get<3>(key)) + ") but rank " +
                  std::to_string(dst) + " receives into " + r.tensor.str() + "; dtype and element count must match");
    }
    if (s.tensor.has_data() != r.tensor.has_data())
      throw Error("send/recv between ranks " + std::to_string(src) + " and " + std::to_string(dst) +
                  " mixes shape-only and data tensors");
    const sim::Time start = std::max(s.post, r.post) + topology_.kind_of(src).launch_overhead;
    const NetworkEffect net = network_effect({src, dst}, start);
    if (net.failed != nullptr) {
      const auto error =
          network_failure("send from rank " + std::to_string(src) + " to rank " + std::to_string(dst), *net.failed);
      s.work->error = error;
      r.work->error = error;
      finish(*s.work, start);
      finish(*r.work, start);
      continue;
    }
    if (s.tensor.has_data()) copy_bytes(bytes_of(r.tensor), bytes_of(s.tensor), s.tensor.nbytes());
    const sim::Transfer tr{src, dst, static_cast<uint64_t>(s.tensor.nbytes()), start};
    sim::Time done = network_.complete(std::span<const sim::Transfer>(&tr, 1)).front();
    if (net.factor < 1) done = start + stretch(done - start, 1.0 / net.factor);
    // An end stopped by an injected fault before the transfer would finish: it never completes.
    if (engine_.stop_time(src) < done || engine_.stop_time(dst) < done) continue;
    if (engine_.options().trace) {
      const std::vector<std::pair<std::string, std::string>> args{{"bytes", std::to_string(s.tensor.nbytes())},
                                                                  {"tag", std::to_string(std::get<3>(key))}};
      engine_.trace().add(sim::Span{src, sim::SpanKind::comm, s.post, done, "send to " + std::to_string(dst), args});
      engine_.trace().add(sim::Span{dst, sim::SpanKind::comm, r.post, done, "recv from " + std::to_string(src), args});
    }
    finish(*s.work, done);
    finish(*r.work, done);
  }
}

std::vector<uint64_t> SimBackend::device_capacities(const sim::Topology& topology, int nranks) {
  std::vector<uint64_t> c;
  for (int r = 0; r < nranks && r < topology.num_devices(); ++r) c.push_back(topology.kind_of(r).memory_bytes);
  return c;
}

GemmPrecision SimBackend::exchange_gemm_precision(GemmPrecision p) {
  sim::Engine* e = sim::Engine::current();
  if (e != &engine_ || !e->in_rank()) return GemmPrecision::native;
  return std::exchange(gemm_precision_[static_cast<size_t>(e->rank())], p);
}

void SimBackend::charge(const OpCost& cost) {
  sim::Engine* e = sim::Engine::current();
  if (e != &engine_ || !e->in_rank()) return;
  const int r = e->rank();
  const bool fp = is_floating(cost.dtype);
  const bool fp8 =
      fp && cost.shape.cls == sim::KernelClass::gemm && gemm_precision_[static_cast<size_t>(r)] == GemmPrecision::fp8;
  const std::string_view dtype = fp8 ? "fp8" : fp ? dtype_name(cost.dtype) : "f32";
  const double flops = fp ? cost.flops : 0.0;
  const sim::KernelTime kt = compute_.time(r, cost.op, cost.shape, flops, cost.bytes, dtype);
  const sim::Time begin = e->now();
  const sim::Time dt = stragglers_.empty() ? kt.time : stretch(kt.time, slowdown(r, begin));
  e->advance(dt);
  compute_time_[static_cast<size_t>(r)] += dt;
  memory_->ran(r, cost.op);
  ComputeBreakdown& cb = compute_detail_[static_cast<size_t>(r)];
  cb.time[static_cast<size_t>(kt.cls)] += dt;
  cb.flops += flops;
  if (kt.cls != sim::KernelClass::memory && kt.cls != sim::KernelClass::other) {  // tensor-core kernels
    const auto& peaks = topology_.kind_of(r).peak_flops;
    const auto peak = peaks.find(dtype);
    if (peak != peaks.end()) cb.peak_seconds += flops / peak->second;
  }
  if (kt.roofline || kt.outside) ++unmeasured_[{kt.cls, dtype, kt.roofline}];  // dtype: a static name
  if (engine_.options().trace && dt > sim::Time::zero())
    engine_.trace().add(sim::Span{r, sim::SpanKind::compute, begin, begin + dt, cost.op, {}});
  if (fp8) charge(fp8_quantisation(cost.shape));
}

OpCost SimBackend::fp8_quantisation(const sim::KernelShape& gemm) {
  // A forward GEMM casts its activation input (batch x M x K); a backward one its incoming
  // gradient (batch x M x N). The weights' FP8 copies are cached across micro-batches, and the
  // activation's transposed copy for the weight gradient is made in forward.
  const double elements = static_cast<double>(gemm.batch) * static_cast<double>(gemm.m) *
                          static_cast<double>(gemm.backward ? gemm.n : gemm.k);
  return OpCost{"fp8_cast", 0.0, kFp8CastBytesPerElement * elements, DType::bf16, sim::KernelShape{}};
}

void SimBackend::set_faults(const FaultPlan& plan) {
  stragglers_ = plan.stragglers;
  network_faults_ = plan.network;
}

double SimBackend::slowdown(int rank, sim::Time at) const {
  double f = 1;
  for (const FaultPlan::Straggler& s : stragglers_)
    if (s.rank == rank && at >= s.from) f *= s.slowdown;
  return f;
}

SimBackend::NetworkEffect SimBackend::network_effect(const std::vector<int>& ranks, sim::Time at) const {
  NetworkEffect effect;
  if (network_faults_.empty() || ranks.empty()) return effect;
  const int first_node = topology_.device(ranks.front()).node;
  bool crosses = false;
  for (int r : ranks) crosses = crosses || topology_.device(r).node != first_node;
  if (!crosses) return effect;  // inside one node: no network link is used
  for (const FaultPlan::NetworkFault& f : network_faults_) {
    if (at < f.at) continue;
    bool hit = false;
    for (int r : ranks) hit = hit || (f.rank >= 0 ? r == f.rank : topology_.device(r).node == f.node);
    if (!hit) continue;
    if (f.factor <= 0) {
      effect.failed = &f;
      return effect;
    }
    effect.factor = std::min(effect.factor, f.factor);  // the slowest link paces the call
  }
  return effect;
}

RunReport SimBackend::take_report() {
  RunReport rep;
  rep.collectives = std::move(records_);
  rep.compute = compute_time_;
  rep.compute_detail = compute_detail_;
  for (const auto& [key, kernels] : unmeasured_) {
    const auto& [cls, dtype, roofline] = key;
    const std::string d(dtype);
    rep.compute_notes[std::string(sim::to_string(cls)) + " " + d + ": " +
                      (roofline ? "roofline (the kernel profile has no " + d + " entry)"
                                : "outside the profile's measured shapes (its edge value used)")] += kernels;
  }
  rep.memory = memory_->report();
  memory_->close();
  for (int k = 0; k < topology_.num_kinds(); ++k) {
    const sim::DeviceKind& kind = topology_.kind(k);
    rep.compute_models.push_back(kind.name + ": " +
                                 (kind.profile
                                      ? "kernel profile " + kind.profile->name + " (" + kind.profile->source + ")"
                                      : std::string("roofline (no kernel profile)")));
  }
  rep.comm = comm_time_;
  rep.comm_by_group.resize(comm_by_account_.size());
  for (size_t r = 0; r < comm_by_account_.size(); ++r)
    for (size_t a = 0; a < comm_by_account_[r].size(); ++a)
      if (comm_by_account_[r][a] > sim::Time::zero()) rep.comm_by_group[r][accounts_[a]] = comm_by_account_[r][a];
  rep.comm_busy_by_group.resize(busy_by_group_.size());
  for (size_t r = 0; r < busy_by_group_.size(); ++r)
    for (const auto& [gid, t] : busy_by_group_[r])
      rep.comm_busy_by_group[r][group_desc_of(groups_[static_cast<size_t>(gid)]->name)] += t;
  return rep;
}

RunReport spawn_sim(const std::function<void(int rank)>& fn, int nprocs, const SpawnOptions& opts,
                    const sim::Topology& topology) {
  sim::Engine engine(opts.engine);
  if (opts.progress) engine.set_progress(opts.progress);
  if (opts.guard) engine.set_guard(opts.guard);
  SimBackend backend(engine, topology, opts.algorithm, opts.protocol, nprocs);
  backend.set_faults(opts.faults);
  backend.set_nccl_allowed(opts.nccl_allowed);
  for (const FaultPlan::RankFault& f : opts.faults.ranks) engine.inject_fault(f.rank, f.at, f.stop, f.what);
  {
    ScopedCostSink sink(&backend);
    struct LedgerGuard {
      std::shared_ptr<MemoryLedger> previous;
      ~LedgerGuard() { set_memory_ledger(std::move(previous)); }
    } ledger{set_memory_ledger(opts.count_memory ? backend.memory() : nullptr)};
    engine.run(nprocs, fn);
  }
  RunReport report = backend.take_report();
  if (!opts.count_memory) report.memory.clear();
  report.makespan = engine.makespan();
  report.clocks.resize(static_cast<size_t>(nprocs));
  for (int r = 0; r < nprocs; ++r) report.clocks[static_cast<size_t>(r)] = engine.clock(r);
  report.events = engine.stats().events;
  report.trace = std::move(engine.trace());
  return report;
}

}  // namespace ranksim::runtime::detail

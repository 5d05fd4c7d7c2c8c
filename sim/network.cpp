#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>
#include <string>
#include <tuple>

#include "sim/check.h"
#include "sim/error.h"

namespace ranksim::sim {
namespace {

// Longest transfer phase the integer clock can hold with room to spare (about 100 days).
constexpr double kMaxSeconds = 8e6;

Time seconds_to_time(double s) {
  RANKSIM_CHECK(s >= 0, "transfer times are not negative");
  if (!(s < kMaxSeconds))
    throw Error("a transfer would take " + [&] {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", s);
      return std::string(buf);
    }() + " s, more than the simulated clock holds (8e6 s); check the sizes and bandwidths");
  return Time::from_seconds(s);
}

struct Flow {
  uint32_t transfer = 0;  // index in the input
  Time start;
  Time latency;          // of the whole route
  double solo_rate = 0;  // bottleneck bandwidth of the whole route
  double bound = 0;      // smallest capacity among its sharing links: its rate never exceeds it
  uint32_t first = 0;    // sharing links: local ids in links[first, first + count)
  uint32_t count = 0;
  double remaining = 0;  // bytes not yet sent at `updated`
  double rate = 0;       // bytes/s since `updated`
  double next_rate = 0;  // scratch for a refill
  int bottleneck = -1;   // the link that fixed its rate (where it froze)
  int next_bottleneck = -1;
  Time updated;
  uint32_t version = 0;  // bumps invalidate queued finish events
  bool active = false;
};

// The state of one complete() call.
//
// A link is inert while the bounds of the flows on it add up to less than its capacity: even if
// every one of them ran at its bound the link would not fill, so it constrains nobody and does
// not couple its flows. Dropping inert links leaves the max-min allocation unchanged (each flow's
// bound is reached at one of its links, which is then not inert) and keeps refills small on
// fabrics with headroom.
class Solver {
 public:
  Solver(std::vector<Flow> flows, std::vector<int> flow_links, std::vector<double> capacity, std::vector<Time>& done,
         NetworkStats& stats)
      : flows_(std::move(flows)), links_(std::move(flow_links)), cap_(std::move(capacity)), done_(done), stats_(stats) {
    const size_t nl = cap_.size();
    on_link_.resize(nl);
    live_.assign(nl, 0);
    bound_sum_.assign(nl, 0.0);
    link_mark_.assign(nl, 0);
    in_fill_.assign(nl, 0);
    froze_.assign(nl, 0);
    fill_level_.assign(nl, 0.0);
    link_stamp_.assign(nl, 0);
    rem_.assign(nl, 0.0);
    cnt_.assign(nl, 0);
    flow_mark_.assign(flows_.size(), 0);
    frozen_.assign(flows_.size(), 0);
  }

  void run() {
    size_t next = 0;  // flows are sorted by start: admit in order
    while (true) {
      while (!finishes_.empty() && stale(finishes_.top())) finishes_.pop();
      int64_t t = std::numeric_limits<int64_t>::max();
      if (next < flows_.size()) t = flows_[next].start.picoseconds();
      if (!finishes_.empty()) t = std::min(t, std::get<0>(finishes_.top()));
      if (t == std::numeric_limits<int64_t>::max()) break;
      const Time now = Time::ps(t);
      ++stats_.events;
      dirty_.clear();
      fresh_.clear();
      while (!finishes_.empty() && std::get<0>(finishes_.top()) == t) {
        const Event e = finishes_.top();
        finishes_.pop();
        if (stale(e)) continue;
        finish(std::get<1>(e), now);
      }
      while (next < flows_.size() && flows_[next].start == now) admit(static_cast<uint32_t>(next++), now);
      if (!dirty_.empty()) refill(now);
    }
  }

 private:
  using Event = std::tuple<int64_t, uint32_t, uint32_t>;  // finish ps, flow, version

  bool stale(const Event& e) const { return std::get<2>(e) != flows_[std::get<1>(e)].version; }

  bool inert(int l) const {
    const size_t li = static_cast<size_t>(l);
    // The margin keeps rounding in the running sum from ever calling a full link inert.
    return bound_sum_[li] <= cap_[li] * (1 - 1e-9);
  }

  void schedule(uint32_t fi, Time now) {
    Flow& f = flows_[fi];
    ++f.version;
    const Time end = now + seconds_to_time(std::max(0.0, f.remaining) / f.rate);
    finishes_.emplace(end.picoseconds(), fi, f.version);
  }

  void finish(uint32_t fi, Time now) {
    Flow& f = flows_[fi];
    f.active = false;
    ++f.version;
    done_[f.transfer] = now + f.latency;
    for (uint32_t k = f.first; k < f.first + f.count; ++k) {
      const size_t l = static_cast<size_t>(links_[k]);
      --live_[l];
      bound_sum_[l] -= f.bound;
      dirty_.push_back(links_[k]);
    }
  }

  void admit(uint32_t fi, Time now) {
    Flow& f = flows_[fi];
    f.active = true;
    f.updated = now;
    if (f.count == 0) {  // only non-blocking links: nothing to share
      f.rate = f.solo_rate;
      ++stats_.rate_changes;
      schedule(fi, now);
      return;
    }
    fresh_.push_back(fi);
    for (uint32_t k = f.first; k < f.first + f.count; ++k) {
      const size_t l = static_cast<size_t>(links_[k]);
      on_link_[l].push_back(fi);
      ++live_[l];
      bound_sum_[l] += f.bound;
      dirty_.push_back(links_[k]);
    }
  }

  // Marks flow fi for refilling, with the links it can be limited by.
  void include(uint32_t fi) {
    if (flow_mark_[fi] == epoch_) return;
    flow_mark_[fi] = epoch_;
    comp_flows_.push_back(fi);
    const Flow& f = flows_[fi];
    for (uint32_t k = f.first; k < f.first + f.count; ++k) {
      const int m = links_[k];
      const size_t mi = static_cast<size_t>(m);
      if (in_fill_[mi] == epoch_ || inert(m)) continue;
      in_fill_[mi] = epoch_;
      comp_links_.push_back(m);
    }
  }

  // The flows admitted on link l, pruned of finished ones when they pile up.
  const std::vector<uint32_t>& flows_on(size_t l) {
    std::vector<uint32_t>& on = on_link_[l];
    if (on.size() > 2 * static_cast<size_t>(live_[l]) + 8)
      std::erase_if(on, [&](uint32_t fi) { return !flows_[fi].active; });
    return on;
  }

  // Progressive filling of the included flows over their links, every other flow's rate fixed
  // and taken off the capacity: repeatedly freeze the included flows of the link with the
  // smallest fair share of what is left.
  void fill() {
    ++pass_;
    ++stats_.refills;
    stats_.refilled += comp_flows_.size();
    using Share = std::tuple<double, int, uint32_t>;  // share, link, stamp
    std::priority_queue<Share, std::vector<Share>, std::greater<>> shares;
    for (int l : comp_links_) {
      const size_t li = static_cast<size_t>(l);
      double left = cap_[li];
      int n = 0;
      for (uint32_t fi : flows_on(li)) {
        if (!flows_[fi].active) continue;
        if (flow_mark_[fi] == epoch_)
          ++n;
        else
          left -= flows_[fi].rate;
      }
      rem_[li] = std::max(0.0, left);
      cnt_[li] = n;
      if (n > 0) shares.emplace(rem_[li] / n, l, ++link_stamp_[li]);
    }
    double level = 0;
    while (!shares.empty()) {
      const auto [share, l, stamp] = shares.top();
      shares.pop();
      const size_t li = static_cast<size_t>(l);
      if (stamp != link_stamp_[li] || cnt_[li] == 0) continue;
      // Max-min levels never decrease; rounding in rem_ must not make them.
      level = std::max(level, share);
      for (uint32_t fi : on_link_[li]) {
        Flow& f = flows_[fi];
        if (!f.active || flow_mark_[fi] != epoch_ || frozen_[fi] == pass_) continue;
        frozen_[fi] = pass_;
        f.next_rate = level;
        f.next_bottleneck = l;
        for (uint32_t k = f.first; k < f.first + f.count; ++k) {
          const int m = links_[k];
          const size_t mi = static_cast<size_t>(m);
          if (m == l || in_fill_[mi] != epoch_) continue;
          rem_[mi] -= level;
          if (--cnt_[mi] > 0) shares.emplace(std::max(0.0, rem_[mi]) / cnt_[mi], m, ++link_stamp_[mi]);
        }
      }
      cnt_[li] = 0;
      froze_[li] = pass_;
      fill_level_[li] = level;
    }
  }

  // Finds the flows left out of the fill that no longer satisfy max-min fairness on link l: one
  // whose rate exceeds the level at which included flows froze on l (those need to be the
  // largest on their bottleneck), or one whose own bottleneck is l while l is no longer full or
  // it is no longer the largest there. Tolerances absorb rounding, far below a picosecond.
  void check(int l) {
    const size_t li = static_cast<size_t>(l);
    double total = 0, top = 0;
    for (uint32_t fi : flows_on(li)) {
      const Flow& f = flows_[fi];
      if (!f.active) continue;
      const double r = flow_mark_[fi] == epoch_ ? f.next_rate : f.rate;
      total += r;
      top = std::max(top, r);
    }
    const bool froze_here = froze_[li] == pass_;
    const bool full = total >= cap_[li] * (1 - 1e-9);
    for (uint32_t fi : on_link_[li]) {
      const Flow& f = flows_[fi];
      if (!f.active || flow_mark_[fi] == epoch_) continue;
      if ((froze_here && f.rate > fill_level_[li] * (1 + 1e-9)) ||
          (f.bottleneck == l && (!full || f.rate < top * (1 - 1e-9))))
        violations_.push_back(fi);
    }
  }

  // Restores max-min fairness after flows started or finished. The allocation is max-min fair
  // exactly when it is feasible and every flow has a bottleneck: a full link on which no flow
  // goes faster. Starting from the new flows, the solver refills a growing set of flows (the
  // rest keep their rates) until every flow left out still has its bottleneck: on links the
  // refilled flows cross, and on links whose flows changed. The set only grows, so this ends;
  // at worst it is every flow coupled to the change. Usually it is the few flows whose rates
  // really change.
  void refill(Time now) {
    ++epoch_;
    comp_links_.clear();
    comp_flows_.clear();
    for (uint32_t fi : fresh_) include(fi);
    changed_.clear();
    for (int l : dirty_)
      if (link_mark_[static_cast<size_t>(l)] != epoch_) {
        link_mark_[static_cast<size_t>(l)] = epoch_;
        changed_.push_back(l);
      }
    while (true) {
      if (!comp_flows_.empty()) fill();
      violations_.clear();
      for (int l : comp_links_) check(l);
      for (int l : changed_)
        if (in_fill_[static_cast<size_t>(l)] != epoch_) check(l);
      if (violations_.empty()) break;
      for (uint32_t fi : violations_) include(fi);
    }
    for (uint32_t fi : comp_flows_) {
      Flow& f = flows_[fi];
      RANKSIM_CHECK(frozen_[fi] == pass_ && f.next_rate > 0, "every refilled flow has a full link that is not inert");
      f.bottleneck = f.next_bottleneck;
      if (f.next_rate == f.rate) continue;  // unchanged: its queued finish still holds
      f.remaining -= f.rate * (now - f.updated).seconds();
      f.updated = now;
      f.rate = f.next_rate;
      ++stats_.rate_changes;
      schedule(fi, now);
    }
  }

  std::vector<Flow> flows_;
  std::vector<int> links_;   // concatenated sharing links of the flows (local ids)
  std::vector<double> cap_;  // per local link
  std::vector<Time>& done_;
  NetworkStats& stats_;

  std::vector<std::vector<uint32_t>> on_link_;  // flows admitted on each link (lazily pruned)
  std::vector<int> live_;                       // active flows on each link
  std::vector<double> bound_sum_;               // sum of the bounds of the active flows
  std::priority_queue<Event, std::vector<Event>, std::greater<>> finishes_;
  std::vector<int> dirty_;       // links whose set of flows changed at this event (may repeat)
  std::vector<uint32_t> fresh_;  // flows that started at this event
  // Refill scratch, reused across events; marks compare against epoch_ so they never need
  // clearing.
  uint32_t epoch_ = 1;  // per refill: flow_mark_ (included), in_fill_, link_mark_ (changed)
  uint32_t pass_ = 1;   // per fill pass: frozen_, froze_
  std::vector<uint32_t> link_mark_, in_fill_, flow_mark_, frozen_, froze_, link_stamp_;
  std::vector<double> rem_, fill_level_;
  std::vector<int> cnt_;
  std::vector<int> changed_;
  std::vector<int> comp_links_;
  std::vector<uint32_t> comp_flows_;
  std::vector<uint32_t> violations_;
};

}  // namespace

NetworkModel::NetworkModel(const Topology& topology) : topology_(&topology) {}

Time NetworkModel::local_copy(int device, uint64_t bytes) const {
  return seconds_to_time(2.0 * static_cast<double>(bytes) / topology_->kind_of(device).memory_bandwidth);
}

Time NetworkModel::uncontended(int src, int dst, uint64_t bytes) const {
  if (src == dst) return local_copy(src, bytes);
  const Route r = topology_->route(src, dst);
  return r.latency + seconds_to_time(static_cast<double>(bytes) / r.bandwidth);
}

std::vector<Time> NetworkModel::complete(std::span<const Transfer> transfers, NetworkStats* stats) const {
  const Topology& topo = *topology_;
  std::vector<Time> done(transfers.size());
  NetworkStats local_stats;
  NetworkStats& st = stats ? *stats : local_stats;
  st = NetworkStats{};

  std::vector<Flow> flows;
  std::vector<int> flow_links;  // global link ids for now
  std::vector<int> route;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& x = transfers[i];
    RANKSIM_CHECK(x.src >= 0 && x.src < topo.num_devices() && x.dst >= 0 && x.dst < topo.num_devices(),
                  "transfer endpoint is not a device of the topology");
    if (x.src == x.dst) {
      done[i] = x.start + local_copy(x.src, x.bytes);
      continue;
    }
    route.clear();
    topo.append_route_links(x.src, x.dst, route);
    Flow f;
    f.transfer = static_cast<uint32_t>(i);
    f.start = x.start;
    f.remaining = static_cast<double>(x.bytes);
    f.solo_rate = std::numeric_limits<double>::infinity();
    f.first = static_cast<uint32_t>(flow_links.size());
    for (int id : route) {
      const Link& l = topo.link(id);
      f.latency += l.latency;
      f.solo_rate = std::min(f.solo_rate, l.bandwidth);
      if (!l.non_blocking) flow_links.push_back(id);
    }
    f.count = static_cast<uint32_t>(flow_links.size()) - f.first;
    f.bound = std::numeric_limits<double>::infinity();
    for (uint32_t k = f.first; k < f.first + f.count; ++k)
      f.bound = std::min(f.bound, topo.link(flow_links[k]).bandwidth);
    if (x.bytes == 0) {
      done[i] = x.start + f.latency;
      flow_links.resize(f.first);
      continue;
    }
    flows.push_back(f);
  }

  // Canonical order, independent of the input order.
  std::sort(flows.begin(), flows.end(), [&](const Flow& a, const Flow& b) {
    const Transfer& x = transfers[a.transfer];
    const Transfer& y = transfers[b.transfer];
    return std::tie(x.start, x.src, x.dst, x.bytes, a.transfer) < std::tie(y.start, y.src, y.dst, y.bytes, b.transfer);
  });

  // Renumber the links in use densely, so per-call state is sized by what the transfers touch.
  std::vector<int> ids = flow_links;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int& id : flow_links) id = static_cast<int>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
  std::vector<double> capacity(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) capacity[k] = topo.link(ids[k]).bandwidth;

  Solver(std::move(flows), std::move(flow_links), std::move(capacity), done, st).run();
  return done;
}

}  // namespace ranksim::sim

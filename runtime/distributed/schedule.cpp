#include "runtime/distributed/schedule.h"

#include "runtime/distributed/schedule_blocks.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "sim/check.h"
#include "sim/error.h"

namespace ranksim::runtime {

int64_t Schedule::moved_elems() const {
  int64_t n = 0;
  for (const Step& s : steps)
    for (const Move& m : s.moves) n += m.count;
  return n;
}

namespace {

using namespace blocks;  // schedule_blocks.h: the step sequences composed below

[[noreturn]] void unsupported(const ScheduleRequest& req, const char* supported) {
  throw Error(std::string("collective ") + to_string(req.kind) + " has no '" + to_string(req.algorithm) +
              "' algorithm; use one of: " + supported);
}

Steps all_reduce(const ScheduleRequest& req) {
  const int n = req.nranks;
  const Members all = iota_members(n);
  const Split sp{0, req.count, n};
  switch (req.algorithm) {
    case Algorithm::ring: {
      Steps s = ring_reduce_scatter(all, sp, 1);
      append(s, ring_all_gather(all, sp, 1));
      return s;
    }
    case Algorithm::tree: {
      Steps s = halving_reduce_scatter(all, pieces_of(sp), /*unfold=*/false);
      append(s, doubling_all_gather(all, pieces_of(sp), /*fold=*/false));
      return s;
    }
    case Algorithm::direct: {
      // Reduce-scatter by sending each piece to its owner (owner reduces in rank order), then
      // every owner sends its piece to everyone: one owner per piece, so every rank ends with
      // the same bits.
      Step rs, ag;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i)
          if (i != j) add(rs, i, j, sp.begin(j), sp.size(j), true);
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i)
          if (i != j) add(ag, j, i, sp.begin(j), sp.size(j), false);
      Steps s;
      if (n > 1) {
        s.push_back(std::move(rs));
        s.push_back(std::move(ag));
      }
      return s;
    }
    case Algorithm::hierarchical: {
      const auto nodes = node_layout(req);
      const int L = static_cast<int>(nodes.front().size());
      const int K = static_cast<int>(nodes.size());
      const Split local{0, req.count, L};
      std::vector<Steps> intra;
      for (const Members& node : nodes) intra.push_back(ring_reduce_scatter(node, local, 1));
      Steps s = zip(intra);
      // Local index l holds piece (l+1) mod L; all-reduce it across nodes with a ring.
      std::vector<Steps> inter;
      for (int l = 0; l < L; ++l) {
        Members across;
        for (int j = 0; j < K; ++j) across.push_back(nodes[j][l]);
        const int piece = (l + 1) % L;
        const Split sub{local.begin(piece), local.size(piece), K};
        Steps part = ring_reduce_scatter(across, sub, 1);
        append(part, ring_all_gather(across, sub, 1));
        inter.push_back(std::move(part));
      }
      append(s, zip(inter));
      std::vector<Steps> gather;
      for (const Members& node : nodes) gather.push_back(ring_all_gather(node, local, 1));
      append(s, zip(gather));
      return s;
    }
    case Algorithm::automatic:
    case Algorithm::nvls:
    case Algorithm::nvls_tree:
    case Algorithm::collnet:
    case Algorithm::pat:
      break;
  }
  unsupported(req, "ring, tree, direct, hierarchical");
}

Steps broadcast(const ScheduleRequest& req) {
  const int n = req.nranks;
  const Members rel = rotated(n, req.root);
  switch (req.algorithm) {
    case Algorithm::ring: {
      // A pipelined chain root -> root+1 -> ...: the message is cut into segments so that all
      // hops work at once; step t moves segment t-h across hop h.
      Steps s;
      if (n == 1) return s;
      const int segs = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(req.count, 4 * (n - 1))));
      const Split sp{0, req.count, segs};
      for (int t = 0; t < segs + n - 2; ++t) {
        Step st;
        for (int h = 0; h < n - 1; ++h) {
          const int seg = t - h;
          if (seg >= 0 && seg < segs) add(st, rel[h], rel[h + 1], sp.begin(seg), sp.size(seg), false);
        }
        s.push_back(std::move(st));
      }
      return s;
    }
    case Algorithm::tree:
      return binomial_broadcast(rel, 0, req.count);
    case Algorithm::direct: {
      Steps s;
      if (n == 1) return s;
      Step st;
      for (int v = 1; v < n; ++v) add(st, rel[0], rel[v], 0, req.count, false);
      s.push_back(std::move(st));
      return s;
    }
    case Algorithm::hierarchical: {
      const auto nodes = node_layout(req);
      // Root's local index on every node leads that node.
      int root_node = 0, root_local = 0;
      for (size_t j = 0; j < nodes.size(); ++j)
        for (size_t l = 0; l < nodes[j].size(); ++l)
          if (nodes[j][l] == req.root) {
            root_node = static_cast<int>(j);
            root_local = static_cast<int>(l);
          }
      Members leaders{req.root};
      for (size_t j = 0; j < nodes.size(); ++j)
        if (static_cast<int>(j) != root_node) leaders.push_back(nodes[j][static_cast<size_t>(root_local)]);
      Steps s = binomial_broadcast(leaders, 0, req.count);
      std::vector<Steps> intra;
      for (const Members& node : nodes) {
        Members m{node[static_cast<size_t>(root_local)]};
        for (size_t l = 0; l < node.size(); ++l)
          if (static_cast<int>(l) != root_local) m.push_back(node[l]);
        intra.push_back(binomial_broadcast(m, 0, req.count));
      }
      append(s, zip(intra));
      return s;
    }
    case Algorithm::automatic:
    case Algorithm::nvls:
    case Algorithm::nvls_tree:
    case Algorithm::collnet:
    case Algorithm::pat:
      break;
  }
  unsupported(req, "ring, tree, direct, hierarchical");
}

Steps reduce(const ScheduleRequest& req) {
  const int n = req.nranks;
  const Members rel = rotated(n, req.root);
  switch (req.algorithm) {
    case Algorithm::tree:
      return binomial_reduce(rel, 0, req.count);
    case Algorithm::direct: {
      Steps s;
      if (n == 1) return s;
      Step st;
      for (int i = 0; i < n; ++i)
        if (i != req.root) add(st, i, req.root, 0, req.count, true);
      s.push_back(std::move(st));
      return s;
    }
    case Algorithm::ring: {
      // Ring reduce-scatter (member i ends with piece i), then every piece goes to the root.
      const Members all = iota_members(n);
      const Split sp{0, req.count, n};
      Steps s = ring_reduce_scatter(all, sp, 0);
      if (n > 1) {
        Step st;
        for (int i = 0; i < n; ++i)
          if (i != req.root) add(st, i, req.root, sp.begin(i), sp.size(i), false);
        s.push_back(std::move(st));
      }
      return s;
    }
    case Algorithm::hierarchical: {
      const auto nodes = node_layout(req);
      int root_node = 0, root_local = 0;
      for (size_t j = 0; j < nodes.size(); ++j)
        for (size_t l = 0; l < nodes[j].size(); ++l)
          if (nodes[j][l] == req.root) {
            root_node = static_cast<int>(j);
            root_local = static_cast<int>(l);
          }
      std::vector<Steps> intra;
      for (const Members& node : nodes) {
        Members m{node[static_cast<size_t>(root_local)]};
        for (size_t l = 0; l < node.size(); ++l)
          if (static_cast<int>(l) != root_local) m.push_back(node[l]);
        intra.push_back(binomial_reduce(m, 0, req.count));
      }
      Steps s = zip(intra);
      Members leaders{req.root};
      for (size_t j = 0; j < nodes.size(); ++j)
        if (static_cast<int>(j) != root_node) leaders.push_back(nodes[j][static_cast<size_t>(root_local)]);
      append(s, binomial_reduce(leaders, 0, req.count));
      return s;
    }
    case Algorithm::automatic:
    case Algorithm::nvls:
    case Algorithm::nvls_tree:
    case Algorithm::collnet:
    case Algorithm::pat:
      break;
  }
  unsupported(req, "ring, tree, direct, hierarchical");
}

Steps all_gather(const ScheduleRequest& req) {
  const int n = req.nranks;
  const Members all = iota_members(n);
  const Split sp{0, req.count * n, n};  // piece i = rank i's contribution
  switch (req.algorithm) {
    case Algorithm::ring:
      return ring_all_gather(all, sp, 0);
    case Algorithm::tree:
      return doubling_all_gather(all, pieces_of(sp));
    case Algorithm::direct: {
      Steps s;
      if (n == 1) return s;
      Step st;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (i != j) add(st, i, j, sp.begin(i), sp.size(i), false);
      s.push_back(std::move(st));
      return s;
    }
    case Algorithm::hierarchical: {
      // Across nodes first (ring among equal local indices), so that each rank then holds the
      // pieces of its whole "rail"; then within each node every rank passes on its rail's pieces.
      const auto nodes = node_layout(req);
      const int L = static_cast<int>(nodes.front().size());
      const int K = static_cast<int>(nodes.size());
      std::vector<Steps> inter;
      for (int l = 0; l < L; ++l) {
        Members across;
        for (int j = 0; j < K; ++j) across.push_back(nodes[j][l]);
        Steps part;
        for (int st_i = 0; st_i < K - 1; ++st_i) {
          Step st;
          for (int j = 0; j < K; ++j) {
            const int piece_owner = across[static_cast<size_t>(mod(j - st_i, K))];
            add(st, across[j], across[(j + 1) % K], sp.begin(piece_owner), sp.size(piece_owner), false);
          }
          part.push_back(std::move(st));
        }
        inter.push_back(std::move(part));
      }
      Steps s = zip(inter);
      std::vector<Steps> intra;
      for (const Members& node : nodes) {
        Steps part;
        for (int st_i = 0; st_i < L - 1; ++st_i) {
          Step st;
          for (int l = 0; l < L; ++l) {
            const int rail = mod(l - st_i, L);  // the rail whose pieces member l forwards now
            for (int j = 0; j < K; ++j) {
              const int owner = nodes[j][rail];
              add(st, node[l], node[(l + 1) % L], sp.begin(owner), sp.size(owner), false);
            }
          }
          part.push_back(std::move(st));
        }
        intra.push_back(std::move(part));
      }
      append(s, zip(intra));
      return s;
    }
    case Algorithm::automatic:
    case Algorithm::nvls:
    case Algorithm::nvls_tree:
    case Algorithm::collnet:
    case Algorithm::pat:
      break;
  }
  unsupported(req, "ring, tree, direct, hierarchical");
}

Steps reduce_scatter(const ScheduleRequest& req) {
  const int n = req.nranks;
  const Members all = iota_members(n);
  const Split sp{0, req.count * n, n};
  switch (req.algorithm) {
    case Algorithm::ring:
      return ring_reduce_scatter(all, sp, 0);
    case Algorithm::tree:
      return halving_reduce_scatter(all, pieces_of(sp));
    case Algorithm::direct: {
      Steps s;
      if (n == 1) return s;
      Step st;
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < n; ++i)
          if (i != j) add(st, i, j, sp.begin(j), sp.size(j), true);
      s.push_back(std::move(st));
      return s;
    }
    case Algorithm::hierarchical: {
      // Within each node, local index l collects (reduces) the pieces of its rail from its node
      // peers; then each rail reduce-scatters those pieces across nodes with a ring.
      const auto nodes = node_layout(req);
      const int L = static_cast<int>(nodes.front().size());
      const int K = static_cast<int>(nodes.size());
      Steps s;
      if (L > 1) {
        Step st;
        for (const Members& node : nodes)
          for (int l = 0; l < L; ++l)
            for (int src = 0; src < L; ++src)
              if (src != l)
                for (int j = 0; j < K; ++j) {
                  const int owner = nodes[j][l];
                  add(st, node[src], node[l], sp.begin(owner), sp.size(owner), true);
                }
        s.push_back(std::move(st));
      }
      std::vector<Steps> inter;
      for (int l = 0; l < L; ++l) {
        Members across;
        for (int j = 0; j < K; ++j) across.push_back(nodes[j][l]);
        Steps part;
        for (int st_i = 0; st_i < K - 1; ++st_i) {
          Step st;
          for (int j = 0; j < K; ++j) {
            const int owner = across[static_cast<size_t>(mod(j - st_i - 1, K))];
            add(st, across[j], across[(j + 1) % K], sp.begin(owner), sp.size(owner), true);
          }
          part.push_back(std::move(st));
        }
        inter.push_back(std::move(part));
      }
      append(s, zip(inter));
      return s;
    }
    case Algorithm::automatic:
    case Algorithm::nvls:
    case Algorithm::nvls_tree:
    case Algorithm::collnet:
    case Algorithm::pat:
      break;
  }
  unsupported(req, "ring, tree, direct, hierarchical");
}

Steps gather_or_scatter(const ScheduleRequest& req, bool gather) {
  const int n = req.nranks;
  const Split sp{0, req.count * n, n};
  switch (req.algorithm) {
    case Algorithm::direct: {
      Steps s;
      if (n == 1) return s;
      Step st;
      for (int i = 0; i < n; ++i) {
        if (i == req.root) continue;
        if (gather)
          add(st, i, req.root, sp.begin(i), sp.size(i), false);
        else
          add(st, req.root, i, sp.begin(i), sp.size(i), false);
      }
      s.push_back(std::move(st));
      return s;
    }
    case Algorithm::tree: {
      // Binomial tree on relative ranks v = (i - root) mod n: subtree of v at level `mask`
      // covers relative ranks [v, v + mask), i.e. up to two contiguous runs of real ranks.
      const Members rel = rotated(n, req.root);
      Steps s;
      std::vector<int> masks;
      for (int mask = 1; mask < n; mask *= 2) masks.push_back(mask);
      if (!gather) std::reverse(masks.begin(), masks.end());
      for (int mask : masks) {
        Step st;
        for (int v = mask; v < n; v += 2 * mask) {
          const int end = std::min(n, v + mask);
          // Real ranks rel[v..end) as runs of consecutive indices.
          int a = v;
          while (a < end) {
            int b = a + 1;
            while (b < end && rel[b] == rel[b - 1] + 1) ++b;
            const int64_t off = sp.begin(rel[a]);
            const int64_t len = sp.begin(rel[b - 1]) + sp.size(rel[b - 1]) - off;
            if (gather)
              add(st, rel[v], rel[v - mask], off, len, false);
            else
              add(st, rel[v - mask], rel[v], off, len, false);
            a = b;
          }
        }
        s.push_back(std::move(st));
      }
      return s;
    }
    default:
      break;
  }
  unsupported(req, "direct, tree");
}

Steps all_to_all(const ScheduleRequest& req, int64_t& buffer_elems) {
  const int n = req.nranks;
  if (static_cast<int>(req.splits.size()) != n) throw Error("all_to_all needs a split-size row per rank");
  // Input region of rank i: its rows in order; output region follows it: what it receives, in
  // source order.
  std::vector<int64_t> in_total(static_cast<size_t>(n), 0), out_total(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(req.splits[i].size()) != n) throw Error("all_to_all split sizes must be an n x n table");
    for (int j = 0; j < n; ++j) {
      in_total[i] += req.splits[i][j];
      out_total[j] += req.splits[i][j];
    }
  }
  buffer_elems = 0;
  for (int i = 0; i < n; ++i) buffer_elems = std::max(buffer_elems, in_total[i] + out_total[i]);
  auto in_off = [&](int i, int j) {
    int64_t o = 0;
    for (int q = 0; q < j; ++q) o += req.splits[i][q];
    return o;
  };
  auto out_off = [&](int i, int j) {  // where j's data lands in i's output
    int64_t o = in_total[i];
    for (int q = 0; q < j; ++q) o += req.splits[q][i];
    return o;
  };
  // The local piece is a move too (src == dst): it copies input to output.
  Steps s;
  switch (req.algorithm) {
    case Algorithm::direct: {
      Step st;
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) add(st, i, j, in_off(i, j), out_off(j, i), req.splits[i][j], false);
      s.push_back(std::move(st));
      return s;
    }
    case Algorithm::ring: {
      // Pairwise exchange: step d sends to (i + d) mod n.
      for (int d = 0; d < n; ++d) {
        Step st;
        for (int i = 0; i < n; ++i) {
          const int j = (i + d) % n;
          add(st, i, j, in_off(i, j), out_off(j, i), req.splits[i][j], false);
        }
        s.push_back(std::move(st));
      }
      return s;
    }
    default:
      break;
  }
  unsupported(req, "direct, ring");
}

Steps barrier(const ScheduleRequest& req) {
  const int n = req.nranks;
  Steps s;
  switch (req.algorithm) {
    case Algorithm::tree:
    case Algorithm::ring:
    case Algorithm::hierarchical:
      // Dissemination: after ceil(log2 n) rounds everyone has heard from everyone.
      for (int d = 1; d < n; d *= 2) {
        Step st;
        for (int i = 0; i < n; ++i) add(st, i, (i + d) % n, 0, 0, false);
        s.push_back(std::move(st));
      }
      return s;
    case Algorithm::direct: {
      if (n == 1) return s;
      Step in, out;
      for (int i = 1; i < n; ++i) {
        add(in, i, 0, 0, 0, false);
        add(out, 0, i, 0, 0, false);
      }
      s.push_back(std::move(in));
      s.push_back(std::move(out));
      return s;
    }
    case Algorithm::automatic:
    case Algorithm::nvls:
    case Algorithm::nvls_tree:
    case Algorithm::collnet:
    case Algorithm::pat:
      break;
  }
  unsupported(req, "tree, direct");
}

}  // namespace

bool LazySteps::serves(const ScheduleRequest& req) {
  const bool ring_kind = req.kind == CollectiveKind::all_reduce || req.kind == CollectiveKind::all_gather ||
                         req.kind == CollectiveKind::reduce_scatter;
  return (req.algorithm == Algorithm::ring || req.algorithm == Algorithm::hierarchical) && ring_kind;
}

bool LazySteps::exact(const ScheduleRequest& req) {
  return serves(req) && (req.algorithm == Algorithm::ring || req.kind == CollectiveKind::all_reduce);
}

int LazySteps::Ring::steps() const {
  const int k = static_cast<int>(members.size());
  if (exchange) return k > 1 ? 1 : 0;
  return (scatter ? k - 1 : 0) + (gather ? k - 1 : 0);
}

// The same rings as the builder's (all_reduce, all_gather, reduce_scatter above, and the
// building blocks' ring_reduce_scatter / ring_all_gather), described instead of made; for the
// hierarchical all_gather and reduce_scatter, their traffic per pair.
LazySteps::LazySteps(const ScheduleRequest& req) {
  RANKSIM_CHECK(serves(req) && req.nranks >= 1, "LazySteps of a request it does not serve");
  const int n = req.nranks;
  if (req.algorithm == Algorithm::ring) {
    Ring r{iota_members(n), 0, req.count, 1, true, true};
    if (req.kind != CollectiveKind::all_reduce) {
      r.count = req.count * n;
      r.shift = 0;
      r.scatter = req.kind == CollectiveKind::reduce_scatter;
      r.gather = req.kind == CollectiveKind::all_gather;
    }
    phases_.push_back({{std::move(r)}, 0});
  } else if (req.kind == CollectiveKind::all_reduce) {  // hierarchical
    const auto nodes = node_layout(req);
    const int L = static_cast<int>(nodes.front().size());
    const int K = static_cast<int>(nodes.size());
    const Split local{0, req.count, L};
    Phase intra, inter, gather;
    for (const Members& node : nodes) {
      intra.rings.push_back({node, 0, req.count, 1, true, false});
      gather.rings.push_back({node, 0, req.count, 1, false, true});
    }
    for (int l = 0; l < L; ++l) {
      Members across;
      for (int j = 0; j < K; ++j) across.push_back(nodes[static_cast<size_t>(j)][static_cast<size_t>(l)]);
      const int piece = (l + 1) % L;
      inter.rings.push_back({std::move(across), local.begin(piece), local.size(piece), 1, true, true});
    }
    phases_ = {std::move(intra), std::move(inter), std::move(gather)};
  } else {
    // Hierarchical all_gather and reduce_scatter (above): what each (src, dst) pair moves per
    // step. Every rank's piece is `count` elements; a rail's pieces (one per node) travel
    // together inside a node, so there each move carries K pieces.
    const auto nodes = node_layout(req);
    const int L = static_cast<int>(nodes.front().size());
    const int K = static_cast<int>(nodes.size());
    const bool gather = req.kind == CollectiveKind::all_gather;
    Phase inside, across;
    for (int l = 0; l < L; ++l) {
      Members rail;
      for (int j = 0; j < K; ++j) rail.push_back(nodes[static_cast<size_t>(j)][static_cast<size_t>(l)]);
      across.rings.push_back({std::move(rail), 0, req.count * K, 0, !gather, gather});
    }
    for (const Members& node : nodes) {
      if (gather) {
        inside.rings.push_back({node, 0, req.count * K * L, 0, false, true});
      } else {  // every member sends each node peer the K pieces of the peer's rail, at once
        Ring r{node, 0, req.count * K, 0, true, false};
        r.exchange = true;
        inside.rings.push_back(std::move(r));
      }
    }
    if (gather) {
      phases_ = {std::move(across), std::move(inside)};
    } else {
      phases_ = {std::move(inside), std::move(across)};
    }
  }
  for (Phase& p : phases_) {
    for (const Ring& r : p.rings) p.steps = std::max(p.steps, r.steps());
    steps_ += p.steps;
  }
}

void LazySteps::step(int s, Step& out) const {
  out.moves.clear();
  std::size_t ph = 0;
  while (s >= phases_[ph].steps) s -= phases_[ph++].steps;
  for (const Ring& r : phases_[ph].rings) {
    if (s >= r.steps()) continue;
    const int k = static_cast<int>(r.members.size());
    if (r.exchange) {
      for (int l = 0; l < k; ++l)
        for (int src = 0; src < k; ++src)
          if (src != l)
            add(out, r.members[static_cast<size_t>(src)], r.members[static_cast<size_t>(l)], r.off, r.count, r.scatter);
      continue;
    }
    const Split sp{r.off, r.count, k};
    const bool reduce = r.scatter && s < k - 1;
    const int t = reduce ? s : s - (r.scatter ? k - 1 : 0);  // the step within its half
    for (int i = 0; i < k; ++i) {
      const int piece = reduce ? mod(i - t - 1 + r.shift, k) : mod(i - t + r.shift, k);
      add(out, r.members[static_cast<size_t>(i)], r.members[static_cast<size_t>((i + 1) % k)], sp.begin(piece),
          sp.size(piece), reduce);
    }
  }
}

Schedule make_schedule(const ScheduleRequest& req) {
  RANKSIM_CHECK(req.nranks >= 1, "schedule for an empty group");
  RANKSIM_CHECK(req.algorithm != Algorithm::automatic && !timing_only(req.algorithm),
                "resolve Algorithm::automatic and the timing-only algorithms first");
  RANKSIM_CHECK(req.root >= 0 && req.root < req.nranks, "root outside the group");
  RANKSIM_CHECK(req.node_of.empty() || static_cast<int>(req.node_of.size()) == req.nranks,
                "node_of must name a node per rank");
  Schedule s;
  s.kind = req.kind;
  s.algorithm = req.algorithm;
  s.nranks = req.nranks;
  const int64_t n = req.nranks;
  switch (req.kind) {
    case CollectiveKind::all_reduce:
      s.buffer_elems = req.count;
      s.steps = all_reduce(req);
      break;
    case CollectiveKind::broadcast:
      s.buffer_elems = req.count;
      s.steps = broadcast(req);
      break;
    case CollectiveKind::reduce:
      s.buffer_elems = req.count;
      s.steps = reduce(req);
      break;
    case CollectiveKind::all_gather:
      s.buffer_elems = req.count * n;
      s.steps = all_gather(req);
      break;
    case CollectiveKind::reduce_scatter:
      s.buffer_elems = req.count * n;
      s.steps = reduce_scatter(req);
      break;
    case CollectiveKind::gather:
      s.buffer_elems = req.count * n;
      s.steps = gather_or_scatter(req, true);
      break;
    case CollectiveKind::scatter:
      s.buffer_elems = req.count * n;
      s.steps = gather_or_scatter(req, false);
      break;
    case CollectiveKind::all_to_all:
      s.steps = all_to_all(req, s.buffer_elems);
      break;
    case CollectiveKind::barrier:
      s.buffer_elems = 0;
      s.steps = barrier(req);
      break;
  }
  return s;
}

Algorithm choose_algorithm(CollectiveKind kind, int nranks, int64_t bytes, int nodes, bool equal_ranks_per_node) {
  switch (kind) {
    case CollectiveKind::all_to_all:
    case CollectiveKind::gather:
    case CollectiveKind::scatter:
      return nranks > 64 ? (kind == CollectiveKind::all_to_all ? Algorithm::ring : Algorithm::tree) : Algorithm::direct;
    case CollectiveKind::barrier:
      return Algorithm::tree;
    default:
      break;
  }
  // Latency-bound sizes and very large groups (where a ring's 2(n-1) steps dominate): trees.
  if (bytes <= 64 * 1024 || nranks > 512) {
    if (nodes > 1 && equal_ranks_per_node && nranks > 512 && bytes > 64 * 1024) return Algorithm::hierarchical;
    return Algorithm::tree;
  }
  if (nodes > 1 && equal_ranks_per_node) return Algorithm::hierarchical;
  return Algorithm::ring;
}

}  // namespace ranksim::runtime

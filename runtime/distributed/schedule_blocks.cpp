#include "runtime/distributed/schedule_blocks.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "sim/error.h"

namespace ranksim::runtime::blocks {

namespace {

// Rabenseifner's folding for k members that are not a power of two: p = the largest power of two
// <= k, r = k - p. Virtual rank v < r stands for members 2v and 2v+1 (the even one acts), the
// others for member v + r alone. Byte ranges of a virtual rank span its members' pieces.
struct Folding {
  int p = 1, r = 0;
  std::vector<int> first, last;  // members represented by each virtual rank
  const Pieces* pieces;
  Folding(int k, const Pieces& pc) : pieces(&pc) {
    while (p * 2 <= k) p *= 2;
    r = k - p;
    for (int v = 0; v < p; ++v) {
      first.push_back(v < r ? 2 * v : v + r);
      last.push_back(v < r ? 2 * v + 1 : v + r);
    }
  }
  int64_t begin(int v) const { return (*pieces)[static_cast<size_t>(first[static_cast<size_t>(v)])].first; }
  int64_t end(int v) const {
    const auto& pc = (*pieces)[static_cast<size_t>(last[static_cast<size_t>(v)])];
    return pc.first + pc.second;
  }
};

}  // namespace

int mod(int a, int n) { return ((a % n) + n) % n; }

void add(Step& st, int src, int dst, int64_t src_off, int64_t dst_off, int64_t count, bool reduce) {
  st.moves.push_back(Move{src, dst, src_off, dst_off, count, reduce});
}
void add(Step& st, int src, int dst, int64_t off, int64_t count, bool reduce) {
  add(st, src, dst, off, off, count, reduce);
}

Steps zip(const std::vector<Steps>& parts) {
  size_t len = 0;
  for (const Steps& p : parts) len = std::max(len, p.size());
  Steps out(len);
  for (const Steps& p : parts)
    for (size_t t = 0; t < p.size(); ++t) out[t].moves.insert(out[t].moves.end(), p[t].moves.begin(), p[t].moves.end());
  return out;
}

void append(Steps& a, Steps b) {
  for (Step& s : b) a.push_back(std::move(s));
}

Steps ring_reduce_scatter(const Members& m, Split sp, int shift) {
  const int k = static_cast<int>(m.size());
  Steps out;
  for (int s = 0; s < k - 1; ++s) {
    Step st;
    for (int i = 0; i < k; ++i) {
      const int piece = mod(i - s - 1 + shift, k);
      add(st, m[i], m[(i + 1) % k], sp.begin(piece), sp.size(piece), true);
    }
    out.push_back(std::move(st));
  }
  return out;
}

Steps ring_all_gather(const Members& m, Split sp, int shift) {
  const int k = static_cast<int>(m.size());
  Steps out;
  for (int s = 0; s < k - 1; ++s) {
    Step st;
    for (int i = 0; i < k; ++i) {
      const int piece = mod(i - s + shift, k);
      add(st, m[i], m[(i + 1) % k], sp.begin(piece), sp.size(piece), false);
    }
    out.push_back(std::move(st));
  }
  return out;
}

Steps halving_reduce_scatter(const Members& m, const Pieces& pieces, bool unfold) {
  const int k = static_cast<int>(m.size());
  Steps out;
  if (k == 1) return out;
  const Folding f(k, pieces);
  const int p = f.p, r = f.r;
  const int64_t total_begin = pieces.front().first;
  const int64_t total_end = pieces.back().first + pieces.back().second;
  if (r > 0) {
    Step st;
    for (int v = 0; v < r; ++v) add(st, m[2 * v + 1], m[2 * v], total_begin, total_end - total_begin, true);
    out.push_back(std::move(st));
  }
  // Each virtual rank's current segment of virtual pieces [lo, hi).
  std::vector<int> lo(static_cast<size_t>(p), 0), hi(static_cast<size_t>(p), p);
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    Step st;
    std::vector<int> nlo = lo, nhi = hi;
    for (int v = 0; v < p; ++v) {
      const int partner = v ^ mask;
      const int mid = (lo[v] + hi[v]) / 2;
      // v keeps the half containing its own index and sends the other half to its partner.
      const bool keep_low = (v & mask) == 0;
      const int send_lo = keep_low ? mid : lo[v];
      const int send_hi = keep_low ? hi[v] : mid;
      const int64_t b = f.begin(send_lo), e = f.end(send_hi - 1);
      add(st, m[f.first[v]], m[f.first[partner]], b, e - b, true);
      nlo[v] = keep_low ? lo[v] : mid;
      nhi[v] = keep_low ? mid : hi[v];
    }
    lo = std::move(nlo);
    hi = std::move(nhi);
    out.push_back(std::move(st));
  }
  if (r > 0 && unfold) {
    Step st;
    for (int v = 0; v < r; ++v) {
      const auto& pc = pieces[static_cast<size_t>(2 * v + 1)];
      add(st, m[2 * v], m[2 * v + 1], pc.first, pc.second, false);
    }
    out.push_back(std::move(st));
  }
  return out;
}

Steps doubling_all_gather(const Members& m, const Pieces& pieces, bool fold) {
  const int k = static_cast<int>(m.size());
  Steps out;
  if (k == 1) return out;
  const Folding f(k, pieces);
  const int p = f.p, r = f.r;
  if (r > 0 && fold) {
    Step st;
    for (int v = 0; v < r; ++v) {
      const auto& pc = pieces[static_cast<size_t>(2 * v + 1)];
      add(st, m[2 * v + 1], m[2 * v], pc.first, pc.second, false);
    }
    out.push_back(std::move(st));
  }
  std::vector<int> lo(static_cast<size_t>(p)), hi(static_cast<size_t>(p));
  for (int v = 0; v < p; ++v) {
    lo[v] = v;
    hi[v] = v + 1;
  }
  for (int mask = 1; mask < p; mask *= 2) {
    Step st;
    std::vector<int> nlo = lo, nhi = hi;
    for (int v = 0; v < p; ++v) {
      const int partner = v ^ mask;
      const int64_t b = f.begin(lo[v]), e = f.end(hi[v] - 1);
      add(st, m[f.first[v]], m[f.first[partner]], b, e - b, false);
      nlo[v] = std::min(lo[v], lo[partner]);
      nhi[v] = std::max(hi[v], hi[partner]);
    }
    lo = std::move(nlo);
    hi = std::move(nhi);
    out.push_back(std::move(st));
  }
  if (r > 0) {
    Step st;
    const int64_t b = pieces.front().first;
    const int64_t e = pieces.back().first + pieces.back().second;
    for (int v = 0; v < r; ++v) add(st, m[2 * v], m[2 * v + 1], b, e - b, false);
    out.push_back(std::move(st));
  }
  return out;
}

Pieces pieces_of(Split sp) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int j = 0; j < sp.k; ++j) out.emplace_back(sp.begin(j), sp.size(j));
  return out;
}

Steps binomial_broadcast(const Members& m, int64_t off, int64_t count) {
  const int k = static_cast<int>(m.size());
  Steps out;
  for (int mask = 1; mask < k; mask *= 2) {
    Step st;
    for (int v = 0; v < mask && v + mask < k; ++v) add(st, m[v], m[v + mask], off, count, false);
    out.push_back(std::move(st));
  }
  return out;
}

Steps binomial_reduce(const Members& m, int64_t off, int64_t count) {
  const int k = static_cast<int>(m.size());
  Steps out;
  for (int mask = 1; mask < k; mask *= 2) {
    Step st;
    for (int v = mask; v < k; v += 2 * mask) add(st, m[v], m[v - mask], off, count, true);
    out.push_back(std::move(st));
  }
  return out;
}

Members rotated(int n, int root) {
  Members m(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) m[v] = (root + v) % n;
  return m;
}

Members iota_members(int n) {
  Members m(static_cast<size_t>(n));
  std::iota(m.begin(), m.end(), 0);
  return m;
}

std::vector<Members> node_layout(const ScheduleRequest& req) {
  std::vector<Members> nodes;
  std::vector<int> node_ids;
  for (int i = 0; i < req.nranks; ++i) {
    const int node = req.node_of.empty() ? 0 : req.node_of[static_cast<size_t>(i)];
    auto it = std::find(node_ids.begin(), node_ids.end(), node);
    if (it == node_ids.end()) {
      node_ids.push_back(node);
      nodes.emplace_back();
      nodes.back().push_back(i);
    } else {
      nodes[static_cast<size_t>(it - node_ids.begin())].push_back(i);
    }
  }
  for (const Members& n : nodes) {
    if (n.size() != nodes.front().size()) {
      throw Error(std::string("hierarchical ") + to_string(req.kind) +
                  " needs the same number of group ranks on every node (found " + std::to_string(nodes.front().size()) +
                  " and " + std::to_string(n.size()) + "); use algorithm ring or tree for this group");
    }
  }
  return nodes;
}

}  // namespace ranksim::runtime::blocks

#include "app/topo.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "sim/units.h"

namespace ranksim::app {
namespace {

using sim::Time;
namespace units = sim::units;

constexpr int kExhaustiveLimit = 512;

std::string range(const std::string& lo, const std::string& hi) { return lo == hi ? lo : lo + " - " + hi; }

std::string plural(long long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

const char* fabric_word(sim::FabricType t) {
  switch (t) {
    case sim::FabricType::none:
      return "none";
    case sim::FabricType::switched:
      return "switch";
    case sim::FabricType::ring:
      return "ring";
    case sim::FabricType::mesh:
      return "full mesh";
    case sim::FabricType::links:
      return "explicit links";
  }
  return "?";
}

void print_kinds(const sim::Topology& t, std::ostream& out) {
  for (int k = 0; k < t.num_kinds(); ++k) {
    const sim::DeviceKind& kind = t.kind(k);
    int count = 0;
    for (int d = 0; d < t.num_devices(); ++d) count += t.device(d).kind == k;
    out << "device kind " << kind.name << ": " << plural(count, "device", "devices");
    if (count > 0) out << " (" << count / t.num_nodes() << " per node)";
    // Slowest first, which is also the usual order (f64, f32, tf32, bf16, ...).
    std::vector<std::pair<std::string, double>> peaks(kind.peak_flops.begin(), kind.peak_flops.end());
    std::stable_sort(peaks.begin(), peaks.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    out << "\n  peak:";
    for (size_t i = 0; i < peaks.size(); ++i)
      out << (i ? ", " : " ") << peaks[i].first << " " << units::format_flop_rate(peaks[i].second);
    out << "\n  memory " << units::format_bytes(kind.memory_bytes) << " at "
        << units::format_bandwidth(kind.memory_bandwidth) << ", launch overhead " << kind.launch_overhead << "\n";
  }
}

void print_fabric(const sim::Topology& t, std::ostream& out) {
  const sim::Fabric& f = t.fabric();
  out << "fabric: ";
  switch (f.type) {
    case sim::FabricType::none:
      out << "none (devices of a node talk through their NICs)\n";
      return;
    case sim::FabricType::switched:
      out << "switch '" << f.name << "', " << units::format_bandwidth(f.bandwidth) << " per device and direction, "
          << f.latency << " device to device\n";
      return;
    case sim::FabricType::ring:
    case sim::FabricType::mesh:
    case sim::FabricType::links:
      out << fabric_word(f.type) << " '" << f.name << "', "
          << plural(static_cast<long long>(f.links.size()), "full-duplex link", "full-duplex links") << " per node\n";
      return;
  }
}

void print_network(const sim::Topology& t, std::ostream& out) {
  if (!t.has_network()) {
    out << "network: none\n";
    return;
  }
  const sim::Network& n = t.network();
  out << "network: " << units::format_bandwidth_bits(n.nic_bandwidth) << " ("
      << units::format_bandwidth(n.nic_bandwidth) << ") NIC per device, " << n.nic_latency
      << " at each NIC; fat tree, leaf first:\n";
  for (size_t i = 0; i < n.levels.size(); ++i) {
    const sim::FatTreeLevel& l = n.levels[i];
    const bool top = i + 1 == n.levels.size();
    const std::string unit = i == 0 ? "nodes" : n.levels[i - 1].name + " groups";
    out << "  " << l.name << ": ";
    if (top)
      out << "top" << (l.children > 0 ? " (up to " + std::to_string(l.children) + " " + unit + ")" : std::string());
    else
      out << l.children << " " << unit << " per group";
    if (l.rail_optimized) out << ", rail-optimized (one group per local device index)";
    if (l.oversubscription != 1.0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", l.oversubscription);
      out << ", oversubscribed " << buf << ":1";
    }
    out << ", " << l.latency << " per switch\n";
  }
}

void print_links(const sim::Topology& t, std::ostream& out) {
  struct Group {
    long long count = 0;
    double bw_lo = std::numeric_limits<double>::infinity(), bw_hi = 0;
    Time lat_lo = Time::max(), lat_hi = Time::zero();
  };
  std::vector<Group> groups(static_cast<size_t>(t.num_link_kinds()));
  for (int id = 0; id < t.num_links(); ++id) {
    const sim::Link& l = t.link(id);
    Group& g = groups[static_cast<size_t>(l.kind)];
    ++g.count;
    g.bw_lo = std::min(g.bw_lo, l.bandwidth);
    g.bw_hi = std::max(g.bw_hi, l.bandwidth);
    g.lat_lo = sim::min(g.lat_lo, l.latency);
    g.lat_hi = sim::max(g.lat_hi, l.latency);
  }
  out << "links (directional; a full-duplex cable is one link each way): " << t.num_links() << "\n";
  std::vector<std::vector<std::string>> rows = {{"kind", "count", "bandwidth", "latency", "from -> to"}};
  for (int k = 0; k < t.num_link_kinds(); ++k) {
    const Group& g = groups[static_cast<size_t>(k)];
    if (g.count == 0) continue;
    rows.push_back({t.link_kind(k).name, std::to_string(g.count),
                    range(units::format_bandwidth(g.bw_lo), units::format_bandwidth(g.bw_hi)),
                    range(g.lat_lo.str(), g.lat_hi.str()), t.link_kind(k).description});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  for (const auto& r : rows) {
    out << " ";
    for (size_t c = 0; c < r.size(); ++c) {
      const bool right = c == 1;
      const std::string pad(width[c] - r[c].size(), ' ');
      out << "  " << (right ? pad + r[c] : c + 1 == r.size() ? r[c] : r[c] + pad);
    }
    out << "\n";
  }
}

void print_slowest_route(const sim::Topology& t, std::ostream& out) {
  const int n = t.num_devices();
  if (n < 2) {
    out << "slowest route: none (a single device)\n";
    return;
  }
  int best_src = -1, best_dst = -1;
  double best_bw = std::numeric_limits<double>::infinity();
  Time best_lat;
  std::vector<int> links;
  auto consider = [&](int a, int b) {
    if (a == b) return;
    links.clear();
    t.append_route_links(a, b, links);
    double bw = std::numeric_limits<double>::infinity();
    Time lat;
    for (int id : links) {
      bw = std::min(bw, t.link(id).bandwidth);
      lat += t.link(id).latency;
    }
    if (bw < best_bw || (bw == best_bw && lat > best_lat)) {
      best_bw = bw;
      best_lat = lat;
      best_src = a;
      best_dst = b;
    }
  };
  std::string searched;
  if (n <= kExhaustiveLimit) {
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) consider(a, b);
    searched = "all " + std::to_string(static_cast<long long>(n) * (n - 1)) + " ordered pairs";
  } else {
    const int per = t.devices_per_node();
    std::vector<int> ends;
    for (int i = 0; i < per; ++i) ends.push_back(i);
    if (t.num_nodes() > 1)
      for (int i = 0; i < per; ++i) ends.push_back((t.num_nodes() - 1) * per + i);
    for (int e : ends)
      for (int d = 0; d < n; ++d) {
        consider(e, d);
        consider(d, e);
      }
    searched = "routes from and to the first and last node";
  }
  const sim::Route r = t.route(best_src, best_dst);
  out << "slowest route (least bandwidth, then most latency; searched " << searched << "):\n  "
      << t.device(best_src).name << " -> " << t.device(best_dst).name << ": latency " << r.latency << ", bottleneck "
      << units::format_bandwidth(r.bandwidth) << ", " << plural(static_cast<long long>(r.links.size()), "link", "links")
      << "\n    " << t.vertex_name(best_src);
  for (int id : r.links) out << " -> " << t.vertex_name(t.link(id).to);
  out << "\n";
}

}  // namespace

void print_topology(const sim::Topology& t, std::ostream& out) {
  out << "topology " << t.name() << " (" << t.source() << ")\n";
  out << "  " << plural(t.num_nodes(), "node", "nodes") << " x " << plural(t.devices_per_node(), "device", "devices")
      << " = " << plural(t.num_devices(), "device", "devices") << "; devices " << t.device(0).name;
  if (t.num_devices() > 1) out << " .. " << t.device(t.num_devices() - 1).name;
  out << " (ids 0-" << t.num_devices() - 1 << ", node-major)\n";
  print_kinds(t, out);
  print_fabric(t, out);
  print_network(t, out);
  print_links(t, out);
  print_slowest_route(t, out);
}

}  // namespace ranksim::app

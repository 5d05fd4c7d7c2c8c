#include "sim/kernel_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "sim/error.h"
#include "sim/io.h"
#include "sim/yaml_fields.h"

namespace ranksim::sim {

const char* to_string(KernelClass c) {
  switch (c) {
    case KernelClass::gemm:
      return "gemm";
    case KernelClass::attention:
      return "attention";
    case KernelClass::memory:
      return "memory-bound";
    case KernelClass::other:
      return "other";
  }
  return "?";
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Where x falls on an ascending axis, in log2: the lower index and the weight of the upper one.
// Outside the axis the edge is used and *outside is set.
struct Bracket {
  size_t lo = 0;
  double w = 0;
};
Bracket bracket(const std::vector<double>& axis, double x, bool* outside) {
  if (axis.size() == 1 || x <= axis.front()) {
    if (x != axis.front()) *outside = true;
    return {0, 0};
  }
  if (x >= axis.back()) {
    if (x != axis.back()) *outside = true;
    return {axis.size() - 2, 1};
  }
  size_t i = static_cast<size_t>(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin()) - 1;
  const double w = (std::log2(x) - std::log2(axis[i])) / (std::log2(axis[i + 1]) - std::log2(axis[i]));
  return {i, w};
}

// ---- Reading ---------------------------------------------------------------------------------

struct Schemas {
  YamlSchema leaf, grid, gemm, curve, curves, attention, memory_ops, memory, root;
  Schemas() {
    grid.keys = {{"m", nullptr}, {"n", nullptr}, {"k", nullptr}, {"tflops", nullptr}};
    gemm.any_key = &grid;  // `tiles` and one grid per dtype, checked by the reader
    curve.keys = {{"pass", nullptr}, {"causal", nullptr}, {"head_dim", nullptr}, {"seq", nullptr}, {"tflops", nullptr}};
    curves.items = &curve;
    attention.any_key = &curves;
    memory_ops.any_key = &leaf;
    memory.keys = {{"efficiency", nullptr}, {"ops", &memory_ops}};
    root.keys = {{"name", nullptr}, {"description", nullptr},  {"sms", nullptr},         {"launch_overhead", nullptr},
                 {"gemm", &gemm},   {"attention", &attention}, {"memory_bound", &memory}};
  }
};
const Schemas& schemas() {
  static const Schemas s;
  return s;
}

const char* const kDtypes[] = {"f64", "f32", "tf32", "bf16", "f16", "fp8", "i8"};

class ProfileReader {
 public:
  explicit ProfileReader(const YamlPositions& pos) : rd_(pos) {}

  KernelProfile read(const YAML::Node& root) {
    const Schemas& s = schemas();
    const MapView top(rd_.pos(), root, "", s.root, "a mapping with the keys name, sms, gemm, attention, memory_bound",
                      nullptr, "the kernel profile");
    p_.name = rd_.name(top.need("name", "the profile's name"));
    if (const Field* d = top.find("description")) rd_.scalar(*d, "a text");
    p_.sms = static_cast<int>(rd_.integer(top.need("sms", "the GPU's streaming multiprocessor count, e.g. 132"), 1,
                                          1 << 16, "streaming multiprocessors"));
    if (const Field* lo = top.find("launch_overhead")) p_.launch_overhead = rd_.duration(*lo);
    if (const Field* g = top.find("gemm")) read_gemm(*g);
    if (const Field* a = top.find("attention")) read_attention(*a);
    if (const Field* m = top.find("memory_bound")) read_memory(*m);
    return std::move(p_);
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const { rd_.pos().fail(at, what); }

  double number(const YAML::Node& n, const std::string& path, double lo) const {
    if (!n.IsScalar()) fail(n, "'" + path + "' must be a number, got " + describe(n));
    const std::string& s = n.Scalar();
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v))
      fail(n, "'" + path + "' must be a number, got '" + s + "'");
    if (!(v > lo)) fail(n, "'" + path + "' must be greater than " + fmt(lo) + ", got " + s);
    return v;
  }
  static std::string fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  std::vector<double> numbers(const Field& f, double lo, bool ascending) const {
    if (!f.value.IsSequence() || f.value.size() == 0)
      fail(f.value.IsNull() ? f.key_node : f.value, "'" + f.path + "' must be a non-empty list of numbers");
    std::vector<double> out;
    for (size_t i = 0; i < f.value.size(); ++i) {
      out.push_back(number(f.value[i], f.path + "[" + std::to_string(i) + "]", lo));
      if (ascending && i > 0 && !(out[i] > out[i - 1]))
        fail(f.value[i], "'" + f.path + "' must be in ascending order; " + fmt(out[i]) + " follows " + fmt(out[i - 1]));
    }
    return out;
  }
  void check_dtype(const Field& f) const {
    for (const char* d : kDtypes)
      if (f.key == d) return;
    std::vector<std::string> names(std::begin(kDtypes), std::end(kDtypes));
    fail(f.key_node, "unknown dtype '" + f.key + "' in '" + f.path.substr(0, f.path.rfind('.')) + "'" +
                         did_you_mean(f.key, names) + " (known: tiles, " + join(names) + ")");
  }

  void read_gemm(const Field& f) {
    const MapView g(rd_.pos(), f, schemas().gemm, "a mapping with tiles and one grid per dtype");
    const Field& tiles = g.need("tiles", "the output tiles the GEMM library chooses among, e.g. [[256, 128, 1.0]]");
    if (!tiles.value.IsSequence() || tiles.value.size() == 0)
      fail(tiles.value, "'" + tiles.path + "' must be a list of [rows, columns, efficiency] tiles");
    for (size_t i = 0; i < tiles.value.size(); ++i) {
      const YAML::Node t = tiles.value[i];
      const std::string path = tiles.path + "[" + std::to_string(i) + "]";
      if (!t.IsSequence() || t.size() != 3) fail(t, "'" + path + "' must be [rows, columns, efficiency]");
      KernelProfile::Tile tile;
      tile.m = static_cast<int>(number(t[0], path + "[0]", 0));
      tile.n = static_cast<int>(number(t[1], path + "[1]", 0));
      tile.efficiency = number(t[2], path + "[2]", 0);
      if (tile.efficiency > 1) fail(t[2], "'" + path + "[2]' is a relative efficiency, at most 1");
      p_.tiles.push_back(tile);
    }
    for (const Field& d : g.fields()) {
      if (d.key == "tiles") continue;
      check_dtype(d);
      const MapView grid(rd_.pos(), d, schemas().grid, "a mapping with the keys m, n, k and tflops");
      KernelProfile::GemmGrid gg;
      gg.m = numbers(grid.need("m", "the grid's M values, ascending"), 0, true);
      gg.n = numbers(grid.need("n", "the grid's N values, ascending"), 0, true);
      gg.k = numbers(grid.need("k", "the grid's K values, ascending"), 0, true);
      const Field& t = grid.need("tflops", "one row of K values per (M, N), M-major");
      const size_t rows = gg.m.size() * gg.n.size();
      if (!t.value.IsSequence() || t.value.size() != rows)
        fail(t.value.IsNull() ? t.key_node : t.value,
             "'" + t.path + "' must hold " + std::to_string(rows) + " rows (one per M, N pair, M-major), got " +
                 (t.value.IsSequence() ? std::to_string(t.value.size()) : describe(t.value)));
      for (size_t r = 0; r < rows; ++r) {
        const YAML::Node row = t.value[r];
        const std::string path = t.path + "[" + std::to_string(r) + "]";
        if (!row.IsSequence() || row.size() != gg.k.size())
          fail(row, "'" + path + "' must list " + std::to_string(gg.k.size()) + " TFLOP/s values, one per K");
        for (size_t l = 0; l < gg.k.size(); ++l) gg.flops.push_back(1e12 * number(row[l], path, 0));
      }
      p_.gemm[d.key] = std::move(gg);
    }
    for (auto& [dtype, gg] : p_.gemm) {
      for (size_t i = 0; i < gg.m.size(); ++i)
        for (size_t j = 0; j < gg.n.size(); ++j)
          for (size_t l = 0; l < gg.k.size(); ++l) {
            const size_t at = (i * gg.n.size() + j) * gg.k.size() + l;
            gg.normalised.push_back(
                gg.flops[at] / p_.wave_efficiency(1, static_cast<int64_t>(gg.m[i]), static_cast<int64_t>(gg.n[j])));
          }
    }
  }

  void read_attention(const Field& f) {
    const MapView a(rd_.pos(), f, schemas().attention, "a mapping from dtype to a list of curves");
    for (const Field& d : a.fields()) {
      check_dtype(d);
      if (!d.value.IsSequence() || d.value.size() == 0)
        fail(d.value.IsNull() ? d.key_node : d.value, "'" + d.path + "' must be a list of curves");
      std::vector<KernelProfile::AttentionCurve> curves;
      for (size_t i = 0; i < d.value.size(); ++i) {
        const std::string path = d.path + "[" + std::to_string(i) + "]";
        const MapView c(rd_.pos(), d.value[i], path, schemas().curve,
                        "a mapping with the keys pass, causal, head_dim, seq and tflops");
        KernelProfile::AttentionCurve cv;
        const std::string pass = rd_.name(c.need("pass", "forward or backward"));
        if (pass != "forward" && pass != "backward")
          fail(c.need("pass", "").value, "'" + path + ".pass' must be forward or backward, got '" + pass + "'");
        cv.backward = pass == "backward";
        cv.causal = rd_.boolean(c.need("causal", "true or false"));
        cv.head_dim = rd_.integer(c.need("head_dim", "the head dimension"), 1, 1 << 16, "head dimension");
        cv.seq = numbers(c.need("seq", "key sequence lengths, ascending"), 0, true);
        const Field& t = c.need("tflops", "achieved TFLOP/s, one per sequence length");
        std::vector<double> tf = numbers(t, 0, false);
        if (tf.size() != cv.seq.size())
          fail(t.value, "'" + t.path + "' must list " + std::to_string(cv.seq.size()) +
                            " values, one per sequence length, got " + std::to_string(tf.size()));
        for (double v : tf) cv.flops.push_back(1e12 * v);
        for (const auto& other : curves)
          if (other.backward == cv.backward && other.causal == cv.causal && other.head_dim == cv.head_dim)
            fail(d.value[i], "'" + path + "' repeats the curve for " + pass + (cv.causal ? " causal" : " non-causal") +
                                 " head_dim " + std::to_string(cv.head_dim));
        curves.push_back(std::move(cv));
      }
      p_.attention[d.key] = std::move(curves);
    }
  }

  void read_memory(const Field& f) {
    const MapView m(rd_.pos(), f, schemas().memory, "a mapping with the keys efficiency and ops");
    auto fraction = [&](const Field& x) {
      const double v = number(x.value, x.path, 0);
      if (v > 1) fail(x.value, "'" + x.path + "' is a fraction of the memory bandwidth, at most 1");
      return v;
    };
    if (const Field* e = m.find("efficiency")) p_.memory_efficiency = fraction(*e);
    if (const Field* ops = m.find("ops")) {
      const MapView ov(rd_.pos(), *ops, schemas().memory_ops, "a mapping from op name to a fraction");
      for (const Field& o : ov.fields()) p_.memory_ops[o.key] = fraction(o);
    }
  }

  Reader rd_;
  KernelProfile p_;
};

}  // namespace

double KernelProfile::wave_efficiency(int64_t batch, int64_t m, int64_t n) const {
  if (tiles.empty() || sms <= 0 || m <= 0 || n <= 0) return 1;
  double best = 0;
  for (const Tile& t : tiles) {
    const int64_t count = std::max<int64_t>(batch, 1) * ceil_div(m, t.m) * ceil_div(n, t.n);
    const int64_t waves = ceil_div(count, sms);
    const double useful = static_cast<double>(std::max<int64_t>(batch, 1)) * static_cast<double>(m) *
                          static_cast<double>(n) /
                          (static_cast<double>(waves) * sms * static_cast<double>(t.m) * static_cast<double>(t.n));
    best = std::max(best, useful * t.efficiency);
  }
  return best;
}

std::optional<KernelProfile::Rate> KernelProfile::gemm_rate(std::string_view dtype, const KernelShape& s) const {
  const auto it = gemm.find(dtype);
  if (it == gemm.end()) return std::nullopt;
  const GemmGrid& g = it->second;
  bool outside = false;
  const Bracket bm = bracket(g.m, static_cast<double>(s.m), &outside);
  const Bracket bn = bracket(g.n, static_cast<double>(s.n), &outside);
  const Bracket bk = bracket(g.k, static_cast<double>(s.k), &outside);
  double v = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj)
      for (int dl = 0; dl < 2; ++dl) {
        const double w = (di ? bm.w : 1 - bm.w) * (dj ? bn.w : 1 - bn.w) * (dl ? bk.w : 1 - bk.w);
        if (w == 0) continue;
        const size_t i = bm.lo + static_cast<size_t>(di), j = bn.lo + static_cast<size_t>(dj),
                     l = bk.lo + static_cast<size_t>(dl);
        v += w * std::log2(g.normalised[(i * g.n.size() + j) * g.k.size() + l]);
      }
  return Rate{std::exp2(v) * wave_efficiency(s.batch, s.m, s.n), outside};
}

std::optional<KernelProfile::Rate> KernelProfile::attention_rate(std::string_view dtype, const KernelShape& s) const {
  const auto it = attention.find(dtype);
  if (it == attention.end() || it->second.empty()) return std::nullopt;
  // The curves of this pass and masking (else the other masking's), at the nearest head dim.
  const AttentionCurve* best = nullptr;
  bool fallback = false;
  for (int pass = 0; pass < 2 && best == nullptr; ++pass) {
    const bool causal = pass == 0 ? s.causal : !s.causal;
    for (const AttentionCurve& c : it->second) {
      if (c.backward != s.backward || c.causal != causal) continue;
      if (best == nullptr || std::llabs(c.head_dim - s.head_dim) < std::llabs(best->head_dim - s.head_dim) ||
          (std::llabs(c.head_dim - s.head_dim) == std::llabs(best->head_dim - s.head_dim) &&
           c.head_dim > best->head_dim))
        best = &c;
    }
    if (best == nullptr) fallback = true;
  }
  if (best == nullptr) return std::nullopt;
  bool outside = fallback || best->head_dim != s.head_dim;
  const Bracket b = bracket(best->seq, static_cast<double>(std::max<int64_t>(s.seq_kv, 1)), &outside);
  const double lo = std::log2(best->flops[b.lo]);
  const double hi = best->seq.size() > 1 ? std::log2(best->flops[b.lo + 1]) : lo;
  return Rate{std::exp2(lo + b.w * (hi - lo)), outside};
}

double KernelProfile::memory_fraction(std::string_view op) const {
  const auto it = memory_ops.find(op);
  return it == memory_ops.end() ? memory_efficiency : it->second;
}

KernelProfile parse_kernel_profile(const std::string& yaml_text, const std::string& source) {
  YamlPositions pos(source);
  const YAML::Node root = parse_yaml(yaml_text, source);
  if (root.IsNull())
    throw ConfigError(source, 1, 1,
                      "the kernel profile is empty; expected a mapping with the keys name, sms, gemm, "
                      "attention and memory_bound");
  try {
    KernelProfile p = ProfileReader(pos).read(root);
    p.source = source;
    return p;
  } catch (const YAML::Exception& e) {
    throw ConfigError(source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

KernelProfile load_kernel_profile(const std::string& path) {
  return parse_kernel_profile(
      read_text_file(path, "kernel profile", "check the path (relative paths are from the topology file's folder)"),
      path);
}

std::string kernel_profile_yaml(const KernelProfile& p, const std::string& header_comment) {
  std::ostringstream o;
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  auto list = [&](const std::vector<double>& xs, double scale) {
    std::string s = "[";
    for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + num(xs[i] / scale);
    return s + "]";
  };
  std::istringstream hc(header_comment);
  for (std::string line; std::getline(hc, line);) o << "# " << line << "\n";
  o << "name: " << p.name << "\nsms: " << p.sms << "\n";
  if (p.launch_overhead) o << "launch_overhead: " << num(p.launch_overhead->seconds() * 1e6) << " us\n";
  if (!p.gemm.empty() || !p.tiles.empty()) {
    o << "gemm:\n  tiles: [";
    for (size_t i = 0; i < p.tiles.size(); ++i)
      o << (i ? ", " : "") << "[" << p.tiles[i].m << ", " << p.tiles[i].n << ", " << num(p.tiles[i].efficiency) << "]";
    o << "]\n";
    for (const auto& [dtype, g] : p.gemm) {
      o << "  " << dtype << ":\n    m: " << list(g.m, 1) << "\n    n: " << list(g.n, 1) << "\n    k: " << list(g.k, 1)
        << "\n    tflops:\n";
      for (size_t r = 0; r < g.m.size() * g.n.size(); ++r) {
        const std::vector<double> row(g.flops.begin() + static_cast<std::ptrdiff_t>(r * g.k.size()),
                                      g.flops.begin() + static_cast<std::ptrdiff_t>((r + 1) * g.k.size()));
        o << "      - " << list(row, 1e12) << "  # m " << num(g.m[r / g.n.size()]) << ", n " << num(g.n[r % g.n.size()])
          << "\n";
      }
    }
  }
  if (!p.attention.empty()) {
    o << "attention:\n";
    for (const auto& [dtype, curves] : p.attention) {
      o << "  " << dtype << ":\n";
      for (const auto& c : curves)
        o << "    - {pass: " << (c.backward ? "backward" : "forward") << ", causal: " << (c.causal ? "true" : "false")
          << ", head_dim: " << c.head_dim << ", seq: " << list(c.seq, 1) << ", tflops: " << list(c.flops, 1e12)
          << "}\n";
    }
  }
  o << "memory_bound:\n  efficiency: " << num(p.memory_efficiency) << "\n";
  if (!p.memory_ops.empty()) {
    o << "  ops:\n";
    for (const auto& [op, f] : p.memory_ops) o << "    " << op << ": " << num(f) << "\n";
  }
  return o.str();
}

}  // namespace ranksim::sim

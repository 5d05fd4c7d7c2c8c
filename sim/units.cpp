#include "sim/units.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "sim/text.h"

namespace ranksim::sim::units {
namespace {

struct Unit {
  std::string spelling;
  double factor;  // to the SI base value (bytes/s, seconds, bytes, FLOP/s)
};

struct Quantity {
  const char* what;      // "bandwidth"
  const char* example;   // "450 GB/s"
  const char* accepted;  // the list shown in error messages
  std::vector<Unit> units;
};

struct Prefix {
  const char* text;
  double factor;
};

constexpr Prefix kDecimal[] = {{"", 1.0}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}};
constexpr Prefix kBinary[] = {{"Ki", 0x1p10}, {"Mi", 0x1p20}, {"Gi", 0x1p30}, {"Ti", 0x1p40}, {"Pi", 0x1p50}};

void add(std::vector<Unit>& out, const Prefix* begin, const Prefix* end, const char* base, double scale) {
  for (const Prefix* p = begin; p != end; ++p) out.push_back({std::string(p->text) + base, p->factor * scale});
}

Quantity make_bandwidth() {
  Quantity q{"bandwidth",
             "450 GB/s",
             "B/s, kB/s, MB/s, GB/s, TB/s, PB/s, KiB/s, MiB/s, GiB/s, TiB/s, or bits as b/s, "
             "kb/s, Mb/s, Gb/s, Tb/s (also Gbit/s, Gbps)",
             {}};
  add(q.units, std::begin(kDecimal), std::end(kDecimal), "B/s", 1.0);
  add(q.units, std::begin(kBinary), std::end(kBinary), "B/s", 1.0);
  for (const char* bits : {"b/s", "bit/s", "bps"}) add(q.units, std::begin(kDecimal), std::end(kDecimal), bits, 0.125);
  return q;
}

Quantity make_duration() {
  return {"duration",
          "2 us",
          "ps, ns, us (or µs), ms, s",
          {{"ps", 1e-12},
           {"ns", 1e-9},
           {"us", 1e-6},
           {"\u00b5s", 1e-6},  // micro sign
           {"\u03bcs", 1e-6},  // Greek small letter mu
           {"ms", 1e-3},
           {"s", 1.0}}};
}

Quantity make_size() {
  Quantity q{"size", "80 GiB", "B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB", {}};
  add(q.units, std::begin(kDecimal), std::end(kDecimal), "B", 1.0);
  add(q.units, std::begin(kBinary), std::end(kBinary), "B", 1.0);
  return q;
}

Quantity make_flop_rate() {
  constexpr Prefix flop_prefixes[] = {{"", 1.0},  {"k", 1e3},  {"K", 1e3},  {"M", 1e6},
                                      {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}};
  Quantity q{
      "FLOP rate", "989.4 TFLOP/s", "FLOP/s, FLOPS, OP/s or OPS with a prefix k, M, G, T, P or E (e.g. TFLOP/s)", {}};
  for (const char* base : {"FLOP/s", "FLOPS", "OP/s", "OPS"})
    add(q.units, std::begin(flop_prefixes), std::end(flop_prefixes), base, 1.0);
  return q;
}

const Quantity& bandwidth_q() {
  static const Quantity q = make_bandwidth();
  return q;
}
const Quantity& duration_q() {
  static const Quantity q = make_duration();
  return q;
}
const Quantity& size_q() {
  static const Quantity q = make_size();
  return q;
}
const Quantity& flop_q() {
  static const Quantity q = make_flop_rate();
  return q;
}

const Unit* find_unit(const Quantity& q, std::string_view spelling) {
  for (const Unit& u : q.units)
    if (u.spelling == spelling) return &u;
  return nullptr;
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// Returns the value in SI base units; the sign is left to the caller.
double parse(const Quantity& q, std::string_view raw) {
  const std::string_view text = trim(raw);
  if (text.empty()) throw UnitError("empty value; expected a " + std::string(q.what) + " such as '" + q.example + "'");
  std::string_view digits = text;
  bool plus = false;
  if (digits.front() == '+') {
    plus = true;
    digits.remove_prefix(1);
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || (plus && !digits.empty() && digits.front() == '-'))
    throw UnitError(quoted(text) + " is not a " + q.what + ": expected a number followed by a unit, such as '" +
                    q.example + "'");
  if (!std::isfinite(value))
    throw UnitError(quoted(text) + " is not a finite number; expected a " + q.what + " such as '" + q.example + "'");
  const std::string_view unit = trim(digits.substr(static_cast<size_t>(end - digits.data())));
  if (unit.empty())
    throw UnitError(quoted(text) + " has no unit; write it with one, such as '" + q.example +
                    "' (accepted: " + q.accepted + ")");
  if (const Unit* u = find_unit(q, unit)) {
    const double scaled = value * u->factor;
    if (!std::isfinite(scaled))
      throw UnitError(quoted(text) + " is too large: it overflows a " + std::string(q.what) + " such as '" + q.example +
                      "'");
    return scaled;
  }
  for (const Quantity* other : {&bandwidth_q(), &duration_q(), &size_q(), &flop_q()}) {
    if (other != &q && find_unit(*other, unit))
      throw UnitError(quoted(text) + " is a " + other->what + ", not a " + q.what + "; accepted units: " + q.accepted);
  }
  throw UnitError("unknown " + std::string(q.what) + " unit " + quoted(unit) + " in " + quoted(text) +
                  "; accepted units: " + q.accepted);
}

std::string format_scaled(double value, const char* const* names, const double* scales, int n) {
  int pick = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(value) >= scales[i]) pick = i;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s", value / scales[pick], names[pick]);
  return buf;
}

}  // namespace

double parse_bandwidth(std::string_view text) {
  const double v = parse(bandwidth_q(), text);
  if (!(v > 0.0)) throw UnitError("bandwidth must be positive, got " + quoted(trim(text)));
  return v;
}

Time parse_duration(std::string_view text) {
  const double v = parse(duration_q(), text);
  if (v < 0.0) throw UnitError("duration must not be negative, got " + quoted(trim(text)));
  if (v > 1e6) throw UnitError("duration " + quoted(trim(text)) + " is too long (over 1e6 s)");
  return Time::from_seconds(v);
}

uint64_t parse_bytes(std::string_view text) {
  const double v = parse(size_q(), text);
  if (!(v > 0.0)) throw UnitError("size must be positive, got " + quoted(trim(text)));
  if (v >= 0x1p64) throw UnitError("size " + quoted(trim(text)) + " does not fit in 64 bits");
  const double rounded = std::nearbyint(v);
  if (rounded < 1.0) throw UnitError("size " + quoted(trim(text)) + " is less than one byte");
  return static_cast<uint64_t>(rounded);
}

double parse_flop_rate(std::string_view text) {
  const double v = parse(flop_q(), text);
  if (!(v > 0.0)) throw UnitError("FLOP rate must be positive, got " + quoted(trim(text)));
  return v;
}

std::string format_bandwidth(double bytes_per_second) {
  static constexpr const char* names[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s", "PB/s"};
  static constexpr double scales[] = {1.0, 1e3, 1e6, 1e9, 1e12, 1e15};
  return format_scaled(bytes_per_second, names, scales, 6);
}

std::string format_bandwidth_bits(double bytes_per_second) {
  static constexpr const char* names[] = {"b/s", "kb/s", "Mb/s", "Gb/s", "Tb/s", "Pb/s"};
  static constexpr double scales[] = {1.0, 1e3, 1e6, 1e9, 1e12, 1e15};
  return format_scaled(bytes_per_second * 8.0, names, scales, 6);
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  static constexpr double scales[] = {1.0, 0x1p10, 0x1p20, 0x1p30, 0x1p40, 0x1p50};
  return format_scaled(static_cast<double>(bytes), names, scales, 6);
}

std::string format_flop_rate(double flop_per_second) {
  static constexpr const char* names[] = {"FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s", "EFLOP/s"};
  static constexpr double scales[] = {1.0, 1e3, 1e6, 1e9, 1e12, 1e15, 1e18};
  return format_scaled(flop_per_second, names, scales, 7);
}

}  // namespace ranksim::sim::units

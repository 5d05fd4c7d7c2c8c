// Units: quantities written with their unit in configuration text ("450 GB/s", "2 us", "80 GiB",
// "989.4 TFLOP/s"), parsed to SI base values, and printed back in human units.
//
// Contract:
// - A quantity is a decimal number (optionally with a fraction and an exponent), optional spaces,
//   then a unit. A unit is required: a bare "450" is rejected, since guessing bytes or bits,
//   seconds or microseconds is how configuration files go wrong.
// - Rates use decimal SI prefixes (GB/s = 1e9 bytes/s, TFLOP/s = 1e12 FLOP/s). Lower-case `b`
//   means bits (400 Gb/s = 50e9 bytes/s). Sizes use binary prefixes for KiB/MiB/GiB/TiB and
//   decimal ones for kB/MB/GB/TB. KiB/s ... TiB/s are accepted as binary rates.
// - Each parser enforces the sign its quantity allows (bandwidth, FLOP rate and size > 0,
//   duration >= 0) and throws UnitError otherwise. UnitError messages say what was written,
//   what is wrong and which units are accepted, but carry no file position: the caller (the
//   topology loader) knows where the text came from and wraps the message in a ConfigError.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sim/error.h"
#include "sim/time.h"

namespace ranksim::sim::units {

class UnitError : public Error {
 public:
  using Error::Error;
};

// Bytes per second. Accepts B/s, kB/s (or KB/s), MB/s, GB/s, TB/s, PB/s; KiB/s, MiB/s, GiB/s,
// TiB/s; bits as b/s, kb/s (Kb/s), Mb/s, Gb/s, Tb/s, also spelled Gbit/s or Gbps.
double parse_bandwidth(std::string_view text);

// A non-negative duration, rounded to the nearest picosecond. Accepts ps, ns, us (or µs), ms, s.
Time parse_duration(std::string_view text);

// A positive size in bytes, rounded to the nearest byte. Accepts B, kB (KB), MB, GB, TB, PB and
// KiB, MiB, GiB, TiB, PiB.
uint64_t parse_bytes(std::string_view text);

// Floating-point (or integer) operations per second. Accepts FLOP/s, FLOPS, OP/s or OPS with the
// decimal prefixes k (K), M, G, T, P, E: "989.4 TFLOP/s", "1979 TOPS".
double parse_flop_rate(std::string_view text);

// Human units with up to 4 significant digits, choosing the largest prefix that keeps the
// number at or above 1: "450 GB/s", "3.35 TB/s", "12.8 TB/s".
std::string format_bandwidth(double bytes_per_second);
// The same rate in bits: "400 Gb/s".
std::string format_bandwidth_bits(double bytes_per_second);
// Binary prefixes: "80 GiB", "1.5 KiB", "512 B".
std::string format_bytes(uint64_t bytes);
// Decimal prefixes: "989.4 TFLOP/s".
std::string format_flop_rate(double flop_per_second);

}  // namespace ranksim::sim::units

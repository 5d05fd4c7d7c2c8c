#include "sim/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ranksim::sim::units {
namespace {

using ::testing::HasSubstr;

std::string error_of(void (*f)(std::string_view), std::string_view text) {
  try {
    f(text);
  } catch (const UnitError& e) {
    return e.what();
  }
  return "(no error)";
}
void bw(std::string_view t) { parse_bandwidth(t); }
void dur(std::string_view t) { parse_duration(t); }
void size(std::string_view t) { parse_bytes(t); }
void flops(std::string_view t) { parse_flop_rate(t); }

TEST(Units, BandwidthBytesUseDecimalPrefixes) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("450 GB/s"), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3.35 TB/s"), 3.35e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("12 kB/s"), 12e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("12 KB/s"), 12e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth("7 B/s"), 7.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("  450GB/s  "), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1.5e2 MB/s"), 150e6);
}

TEST(Units, BandwidthLowerCaseBIsBits) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("400 Gb/s"), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("400 Gbit/s"), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("400 Gbps"), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("8 b/s"), 1.0);
}

TEST(Units, BandwidthBinaryPrefixes) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("1 GiB/s"), 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("2 KiB/s"), 2048.0);
}

TEST(Units, DurationsRoundToPicoseconds) {
  EXPECT_EQ(parse_duration("2 us"), Time::us(2));
  EXPECT_EQ(parse_duration("2 \u00b5s"), Time::us(2));
  EXPECT_EQ(parse_duration("130 ns"), Time::ns(130));
  EXPECT_EQ(parse_duration("1.5 ms"), Time::us(1500));
  EXPECT_EQ(parse_duration("750 ps"), Time::ps(750));
  EXPECT_EQ(parse_duration("3 s"), Time::s(3));
  EXPECT_EQ(parse_duration("0 s"), Time::zero());
  EXPECT_EQ(parse_duration("0.0004 ns"), Time::zero());  // 0.4 ps rounds down
}

TEST(Units, SizesBinaryAndDecimal) {
  EXPECT_EQ(parse_bytes("80 GiB"), 80ull << 30);
  EXPECT_EQ(parse_bytes("80 GB"), 80'000'000'000ull);
  EXPECT_EQ(parse_bytes("1.5 KiB"), 1536u);
  EXPECT_EQ(parse_bytes("64 MiB"), 64ull << 20);
  EXPECT_EQ(parse_bytes("3 B"), 3u);
}

TEST(Units, FlopRates) {
  EXPECT_DOUBLE_EQ(parse_flop_rate("989.4 TFLOP/s"), 989.4e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("66.9 TFLOPS"), 66.9e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("1979 TOPS"), 1979e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate("2 PFLOP/s"), 2e15);
}

TEST(Units, MissingUnitIsRejectedWithTheAcceptedList) {
  const std::string e = error_of(bw, "450");
  EXPECT_THAT(e, HasSubstr("'450' has no unit"));
  EXPECT_THAT(e, HasSubstr("450 GB/s"));
  EXPECT_THAT(e, HasSubstr("Gb/s"));
  EXPECT_THAT(error_of(dur, "5"), HasSubstr("ps, ns, us"));
}

TEST(Units, UnknownUnitListsAcceptedUnits) {
  const std::string e = error_of(bw, "450 GBs");
  EXPECT_THAT(e, HasSubstr("unknown bandwidth unit 'GBs'"));
  EXPECT_THAT(e, HasSubstr("accepted units: B/s, kB/s"));
  EXPECT_THAT(error_of(flops, "9 TFLOP"), HasSubstr("unknown FLOP rate unit 'TFLOP'"));
}

TEST(Units, UnitOfAnotherQuantityIsNamed) {
  EXPECT_THAT(error_of(bw, "3.35 TB"), HasSubstr("'3.35 TB' is a size, not a bandwidth"));
  EXPECT_THAT(error_of(size, "80 GB/s"), HasSubstr("is a bandwidth, not a size"));
  EXPECT_THAT(error_of(dur, "2 GB"), HasSubstr("is a size, not a duration"));
  EXPECT_THAT(error_of(flops, "2 us"), HasSubstr("is a duration, not a FLOP rate"));
}

TEST(Units, SignsAreChecked) {
  EXPECT_THAT(error_of(bw, "-5 GB/s"), HasSubstr("bandwidth must be positive, got '-5 GB/s'"));
  EXPECT_THAT(error_of(bw, "0 GB/s"), HasSubstr("bandwidth must be positive"));
  EXPECT_THAT(error_of(dur, "-1 us"), HasSubstr("duration must not be negative"));
  EXPECT_THAT(error_of(size, "0 GiB"), HasSubstr("size must be positive"));
  EXPECT_THAT(error_of(flops, "-1 TFLOP/s"), HasSubstr("FLOP rate must be positive"));
  EXPECT_THAT(error_of(size, "0.2 B"), HasSubstr("less than one byte"));
}

TEST(Units, NotANumber) {
  EXPECT_THAT(error_of(bw, "fast GB/s"), HasSubstr("'fast GB/s' is not a bandwidth"));
  EXPECT_THAT(error_of(bw, ""), HasSubstr("empty value"));
  EXPECT_THAT(error_of(bw, "inf GB/s"), HasSubstr("not a finite number"));
  EXPECT_THAT(error_of(bw, "+-3 GB/s"), HasSubstr("is not a bandwidth"));
  EXPECT_THAT(error_of(size, "1e30 GiB"), HasSubstr("does not fit in 64 bits"));
  // Finite numbers whose unit makes them overflow (1e300 x 1e12): refused, not infinite.
  EXPECT_THAT(error_of(bw, "1e300 TB/s"), HasSubstr("'1e300 TB/s' is too large"));
  EXPECT_THAT(error_of(flops, "1e300 TFLOP/s"), HasSubstr("'1e300 TFLOP/s' is too large"));
  EXPECT_EQ(error_of(bw, "1e290 TB/s"), "(no error)");
}

TEST(Units, FormatsHumanUnits) {
  EXPECT_EQ(format_bandwidth(450e9), "450 GB/s");
  EXPECT_EQ(format_bandwidth(3.35e12), "3.35 TB/s");
  EXPECT_EQ(format_bandwidth(500.0), "500 B/s");
  EXPECT_EQ(format_bandwidth_bits(50e9), "400 Gb/s");
  EXPECT_EQ(format_bytes(80ull << 30), "80 GiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_flop_rate(989.4e12), "989.4 TFLOP/s");
  EXPECT_EQ(format_flop_rate(1979e12), "1.979 PFLOP/s");
}

TEST(Units, FormatThenParseRoundTrips) {
  for (double v : {1.0, 450e9, 3.35e12, 12.8e12, 50e9}) EXPECT_DOUBLE_EQ(parse_bandwidth(format_bandwidth(v)), v);
}

}  // namespace
}  // namespace ranksim::sim::units

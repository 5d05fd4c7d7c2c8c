// The fuzz targets' driver in a build without libFuzzer (every build but the `fuzz` preset's):
// runs LLVMFuzzerTestOneInput once over each file named on the command line, or over each file
// of each folder named (sorted, not recursive). ctest runs it over each target's seeds and each
// saved regression input (fuzz/CMakeLists.txt), so a finding, once fixed, stays fixed under every
// compiler and sanitizer of the normal suite.
//
// A finding ends the program: an exception other than ranksim::Error escapes the target, a
// sanitizer stops it, or an input passes the limits scripts/fuzz.sh gives libFuzzer (-timeout=10,
// -rss_limit_mb=2048), checked here once the input is done: more than 10 s, or a peak resident
// size above 2048 MiB (exit status 1). Exit status 2: an argument is missing or unreadable, or no
// input was named at all; 0: every input was read or refused with ranksim::Error within limits.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {
// scripts/fuzz.sh's libFuzzer limits.
constexpr double kTimeoutSeconds = 10;
constexpr long kRssLimitMib = 2048;
}  // namespace

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const fs::directory_entry& e : fs::directory_iterator(arg, ec)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::cerr << argv[0] << ": '" << arg.string() << "' is neither a file nor a folder\n";
      return 2;
    }
  }
  if (inputs.empty()) {
    std::cerr << "usage: " << argv[0] << " FILE_OR_FOLDER...  (runs the fuzz target over each input)\n";
    return 2;
  }
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::cerr << argv[0] << ": cannot read '" << p.string() << "'\n";
      return 2;
    }
    std::cerr << "replay: " << p.string() << std::endl;  // flushed: a crash names its input
    const auto start = std::chrono::steady_clock::now();
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > kTimeoutSeconds) {
      std::cerr << "replay: '" << p.string() << "' took " << seconds << " s, more than the " << kTimeoutSeconds
                << " s a fuzz run allows one input\n";
      return 1;
    }
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    if (const long peak_mib = usage.ru_maxrss / 1024; peak_mib > kRssLimitMib) {
      std::cerr << "replay: '" << p.string() << "' took the peak resident size to " << peak_mib
                << " MiB, more than the " << kRssLimitMib << " MiB a fuzz run allows\n";
      return 1;
    }
  }
  std::cout << "replay: " << inputs.size() << " inputs, each read or refused with ranksim::Error\n";
  return 0;
}

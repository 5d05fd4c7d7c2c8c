// Fuzz target: the reader of the `--json` run summaries that `ranksim compare` lines up
// (app/compare.h, parse_compared_summary).
#include <cstddef>
#include <cstdint>

#include "app/compare.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = ranksim::fuzz::as_text(data, size);
  ranksim::fuzz::refuse_cleanly([&] { ranksim::app::parse_compared_summary(text, "fuzz-input.json"); });
  return 0;
}

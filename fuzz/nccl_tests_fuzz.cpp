// Fuzz target: the nccl-tests reader of `ranksim calibrate` (app/nccl_tests_input.h), both of
// its layouts (the text table nccl-tests prints and the CSV of docs/data/nccl-tests/).
#include <cstddef>
#include <cstdint>

#include "app/nccl_tests_input.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = ranksim::fuzz::as_text(data, size);
  ranksim::fuzz::refuse_cleanly([&] { ranksim::app::parse_nccl_tests(text, "fuzz-input.txt"); });
  return 0;
}

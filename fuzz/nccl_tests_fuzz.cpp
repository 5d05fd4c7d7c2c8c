// Fuzz target: the nccl-tests reader of `ranksim calibrate` (app/nccl_tests_input.h), both of
// its layouts (the text table nccl-tests prints, a log of several, the CSV of
// docs/data/nccl-tests/, and the JSON of nccl-tests -J), and the choice of a log's tests.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "app/nccl_tests_input.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = ranksim::fuzz::as_text(data, size);
  ranksim::fuzz::refuse_cleanly([&] {
    std::vector<std::string> left_out;
    ranksim::app::select_tests(ranksim::app::parse_nccl_tests_log(text, "fuzz-input.txt"), "", "fuzz-input.txt",
                               &left_out);
  });
  return 0;
}

// Fuzz target: the scenario reader (app/scenario.h, load_scenario_text) on YAML text with the
// input's "#set" lines as --set overrides (fuzz/fuzz_input.h). The text is named as a file in the
// source tree's scenarios/ folder, so the shipped scenarios' relative paths (topology:
// ../topologies/..., batch and weights files) resolve and the topology they name is read too.
#include <cstddef>
#include <cstdint>

#include "app/scenario.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = ranksim::fuzz::as_text(data, size);
  ranksim::fuzz::refuse_cleanly([&] {
    ranksim::app::load_scenario_text(text, RANKSIM_SOURCE_DIR "/scenarios/fuzz-input.yaml",
                                     ranksim::fuzz::set_lines(text));
  });
  return 0;
}

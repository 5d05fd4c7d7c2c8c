// Fuzz target: the topology reader (sim/topology.h, sim/topology_reader.h) on YAML text with the
// input's "#set" lines as --set overrides (fuzz/fuzz_input.h). The text is named as a file in the
// source tree's topologies/ folder, so a `kernel_profile:` path resolves as in a shipped file.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "sim/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = ranksim::fuzz::as_text(data, size);
  ranksim::fuzz::refuse_cleanly([&] {
    ranksim::sim::Topology::parse(text, RANKSIM_SOURCE_DIR "/topologies/fuzz-input.yaml",
                                  ranksim::fuzz::set_lines(text));
  });
  return 0;
}

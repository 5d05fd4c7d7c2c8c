// Fuzz target: the tuner config reader (sim/tuner_config.h), the CSV of NCCL's example tuner
// plugin that a topology's `collectives.tuner` names, and the rules' matching of calls.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_input.h"
#include "sim/tuner_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = ranksim::fuzz::as_text(data, size);
  ranksim::fuzz::refuse_cleanly([&] {
    const ranksim::sim::TunerConfig c = ranksim::sim::parse_tuner_config(text, "fuzz-input.conf");
    for (const ranksim::sim::TunerRule& r : c.rules) {
      const ranksim::sim::CollectiveShape s{r.op, r.min_bytes, r.ranks > 0 ? r.ranks : 16, r.nodes > 0 ? r.nodes : 2,
                                            8};
      (void)r.applies_to(s);
    }
  });
  return 0;
}

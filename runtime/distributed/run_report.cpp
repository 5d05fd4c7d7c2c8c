#include "runtime/distributed/run_report.h"

namespace ranksim::runtime {

std::string algorithm_label(const CollectiveRecord& rec) {
  std::string s = to_string(rec.algorithm);
  if (!rec.protocol.empty()) s += "/" + rec.protocol + "/" + std::to_string(rec.channels) + "ch";
  if (rec.tuner) s += "+tuner";
  return s;
}

}  // namespace ranksim::runtime

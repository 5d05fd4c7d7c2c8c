#include "runtime/tensor/cost.h"

namespace ranksim::runtime {
namespace {
thread_local CostSink* t_sink = nullptr;
}  // namespace

CostSink::~CostSink() = default;

CostSink* set_cost_sink(CostSink* sink) {
  CostSink* previous = t_sink;
  t_sink = sink;
  return previous;
}

CostSink* cost_sink() { return t_sink; }

void charge(const OpCost& cost) {
  if (t_sink != nullptr) t_sink->charge(cost);
}

}  // namespace ranksim::runtime

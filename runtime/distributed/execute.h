// Executes a collective Schedule on in-memory buffers: the data side of the sim backend.
//
// buffers[i] is group rank i's working buffer (layout in runtime/distributed/schedule.h), elem_size bytes per
// element. Steps run in order; within a step, moves run in list order. Schedules are
// hazard-free (no move in a step writes a range another move of that step reads; the schedule
// tests check this for every algorithm), so moves read and write the buffers directly with no
// staging copy. A copy move is memcpy; a reduce move calls reduce(dst, src, count), which must
// compute dst[k] = op(dst[k], src[k]) elementwise.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>

#include "runtime/distributed/schedule.h"

namespace ranksim::runtime {

template <class ReduceFn>
void execute_schedule(const Schedule& schedule, std::span<std::byte* const> buffers, size_t elem_size,
                      ReduceFn&& reduce) {
  for (const Step& step : schedule.steps) {
    for (const Move& m : step.moves) {
      if (m.count == 0) continue;
      std::byte* dst = buffers[static_cast<size_t>(m.dst)] + static_cast<size_t>(m.dst_off) * elem_size;
      const std::byte* src = buffers[static_cast<size_t>(m.src)] + static_cast<size_t>(m.src_off) * elem_size;
      if (m.reduce) {
        reduce(dst, src, m.count);
      } else if (dst != src) {
        std::memcpy(dst, src, static_cast<size_t>(m.count) * elem_size);
      }
    }
  }
}

}  // namespace ranksim::runtime

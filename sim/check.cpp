#include "sim/check.h"

#include <cstdio>
#include <cstdlib>

namespace ranksim::detail {

void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "ranksim internal error: %s:%d: check failed: %s: %s\n", file, line, expr, msg);
  std::abort();
}

}  // namespace ranksim::detail

// ranksim::testing: GoogleTest helpers for tests of code that runs on ranks (docs/library.md).
//
//   testing/ranks.h     run a function on N ranks and on one rank; compare outputs per rank
//   testing/compare.h   bitwise or tolerance comparison naming the first differing element
//   testing/grid.h      tp x cp x dp x pp layouts, a TEST_P fixture, each rank's parallel state
//   testing/inputs.h    seeded and exact-sum inputs
//   testing/timeline.h  virtual clocks and the collectives each rank issued
//
// Link ranksim::testing (CMake) and include "testing/testing.h" (installed as
// <ranksim/testing/testing.h>; both spellings work).
#pragma once

#include "testing/compare.h"
#include "testing/grid.h"
#include "testing/inputs.h"
#include "testing/ranks.h"
#include "testing/timeline.h"

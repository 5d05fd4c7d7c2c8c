#!/usr/bin/env bash
# Quick start, part 2: install what is missing, build every target of the given preset
# (default: release) including benchmarks, and run every test with ctest.
# Usage: scripts/test.sh [release|debug|asan] [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
scripts/setup.sh --for-tests
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" "$@"

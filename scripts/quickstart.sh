#!/usr/bin/env bash
# Quick start, part 1: install what building needs, build the ranksim command (release; not the
# tests or benchmarks: scripts/test.sh builds those), and run the main job.
# Usage: scripts/quickstart.sh [extra arguments for `ranksim run`, e.g. --trace out.json]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target ranksim
echo
echo "== build/release/bin/ranksim run scenarios/quickstart.yaml $*"
build/release/bin/ranksim run scenarios/quickstart.yaml "$@"

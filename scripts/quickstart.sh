#!/usr/bin/env bash
# Quick start, part 1: install what is missing, build ranksim (release), and run the main job.
# Usage: scripts/quickstart.sh [extra arguments for `ranksim run`, e.g. --trace out.json]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
echo
echo "== build/release/bin/ranksim run scenarios/quickstart.yaml $*"
build/release/bin/ranksim run scenarios/quickstart.yaml "$@"

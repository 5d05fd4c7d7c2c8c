#!/usr/bin/env bash
# Quick start, part 1: install what is missing, build ranksim (release), and run the main job.
# Usage: scripts/quickstart.sh [extra arguments for `ranksim demo`]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release
echo
echo "== build/release/bin/ranksim demo --topology topologies/dgx-h100.yaml $*"
build/release/bin/ranksim demo --topology topologies/dgx-h100.yaml "$@"

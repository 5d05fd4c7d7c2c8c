#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks, warnings as errors) over the project's C++ sources,
# using a configured build's compile_commands.json.
# Usage: scripts/tidy.sh [--changed REV] [PRESET]
#   default: every .cpp under sim, runtime, tp, cp, models, testing, app (CI runs this);
#   --changed REV: only the .cpp files changed since REV (git diff REV), for a quick local check.
#   PRESET: the build whose compile commands to use (default: release; configure it first).
set -euo pipefail
cd "$(dirname "$0")/.."
base=""
if [ "${1:-}" = "--changed" ]; then
  base="${2:?--changed needs a git revision}"
  shift 2
fi
preset="${1:-release}"
db="build/$preset/compile_commands.json"
if [ ! -f "$db" ]; then
  echo "tidy.sh: $db not found; configure first: cmake --preset $preset" >&2
  exit 2
fi
if [ -n "$base" ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- 'sim/*.cpp' 'runtime/*.cpp' 'tp/*.cpp' \
    'cp/*.cpp' 'models/*.cpp' 'testing/*.cpp' 'app/*.cpp')
else
  mapfile -t files < <(git ls-files 'sim/*.cpp' 'runtime/*.cpp' 'tp/*.cpp' 'cp/*.cpp' 'models/*.cpp' \
    'testing/*.cpp' 'app/*.cpp')
fi
# Sources a build leaves out (the mpi and nccl backends without MPI or CUDA) have no compile
# command: skip them rather than guess their flags.
checked=()
for f in "${files[@]}"; do
  if grep -q "\"file\": \"[^\"]*/$f\"" "$db"; then checked+=("$f"); fi
done
if [ ${#checked[@]} -eq 0 ]; then
  echo "tidy.sh: no source to check"
  exit 0
fi
echo "tidy.sh: clang-tidy on ${#checked[@]} files"
# GCC-only warning flags in the compile commands mean nothing to clang: ignore them.
printf '%s\n' "${checked[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "build/$preset" --quiet \
  --extra-arg=-Wno-unknown-warning-option 2> >(grep -v "warnings generated" >&2)
echo "tidy.sh: no finding"

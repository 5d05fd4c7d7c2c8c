#!/usr/bin/env bash
# Formats the project's C++ sources with .clang-format (clang-format 14, Debian's clang-format).
# Usage: scripts/format.sh           rewrite every file that is not formatted
#        scripts/format.sh --check   list the files that are not formatted; exit 1 if any (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[ "${1:-}" = "--check" ] && check=1
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')
bad=0
for f in "${files[@]}"; do
  if ! clang-format --style=file "$f" | cmp -s - "$f"; then
    if [ "$check" -eq 1 ]; then
      echo "not formatted: $f (run scripts/format.sh)"
      bad=1
    else
      clang-format --style=file -i "$f"
      echo "formatted: $f"
    fi
  fi
done
if [ "$check" -eq 1 ]; then
  [ "$bad" -eq 0 ] && echo "format.sh: ${#files[@]} files formatted"
  exit "$bad"
fi

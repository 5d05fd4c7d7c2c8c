#!/usr/bin/env bash
# Runs a command that must fail: a non-zero exit within the time limit (no hung processes) and
# output matching a pattern. Usage: expect_failure.sh SECONDS PATTERN COMMAND...
set -uo pipefail
limit="$1"; pattern="$2"; shift 2
out="$(timeout --kill-after=5 "$limit" "$@" 2>&1)"
rc=$?
echo "$out"
# 77: the program found that this machine cannot run it (ctest's SKIP_RETURN_CODE), saying why.
if [ "$rc" -eq 77 ]; then echo "expect_failure: skipped" >&2; exit 77; fi
if [ "$rc" -eq 0 ]; then echo "expect_failure: the command succeeded" >&2; exit 1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "expect_failure: the command hung (killed after ${limit}s)" >&2; exit 1
fi
if ! grep -qE -- "$pattern" <<<"$out"; then
  echo "expect_failure: exit code $rc but no line matches: $pattern" >&2; exit 1
fi
echo "expect_failure: exit code $rc, message found"

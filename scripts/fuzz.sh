#!/usr/bin/env bash
# Fuzzes each reader of user input for a bounded time under ASan + UBSan (docs/engine.md,
# "Fuzzing"): builds the `fuzz` preset (clang, libFuzzer; only the fuzz targets and the libraries
# they link), then runs each target of fuzz/targets.txt from a corpus of its seeds -- the shipped
# files that fuzz/targets.txt names, fuzz/seeds/<target>/ and fuzz/regressions/<target>/ -- with a
# dictionary of the words in those seeds. Prints per target the executions, executions per second,
# coverage (cov: edges, ft: features) and corpus size that libFuzzer reached.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default: 60 seconds, every target)
# Exit status: 0 when no target found anything; 1 when one crashed, leaked, timed out (10 s on
# one input), ran out of memory (2 GiB) or threw anything but ranksim::Error -- its input is then
# left in build/fuzz/runs/<target>/ and the message says how to keep it as a regression test.
# The corpora grow in build/fuzz/corpus/<target>/ and later runs start from them (remove the
# folder to start from the seeds alone).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "fuzz.sh: SECONDS_PER_TARGET must be a whole number of seconds, 1 or more; got '$seconds'" >&2
  exit 2
fi
only=("$@")

scripts/setup.sh --for-fuzz
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

# A dictionary of the seeds' words (YAML keys, JSON keys, column names, dtypes), plus the prefix
# of the "#set key=value" override lines the YAML targets read (fuzz/fuzz_input.h).
write_dict() {
  local out="$1"
  shift
  {
    echo '"#set "'
    echo '"="'
    # awk reads the whole list (head would close the pipe early: sort's SIGPIPE, exit 141 under
    # pipefail, whenever the list outgrows the pipe's buffer before head has read its 400 lines).
    cat -- "$@" 2>/dev/null | LC_ALL=C grep -aoE '[A-Za-z_][A-Za-z0-9_]{1,30}:?' | LC_ALL=C sort | uniq -c |
      LC_ALL=C sort -rn | awk 'NR <= 400 { printf "\"%s\"\n", $2 }'
  } >"$out"
}

# The last value of libFuzzer's "name: value" figures in a log ("cov: 1234").
figure() { grep -oE "$1: [0-9]+" "$2" | tail -n 1 | awk '{ print $2 }'; }
final_stat() { grep -E "^stat::$1:" "$2" | tail -n 1 | awk '{ print $2 }'; }

failed=()
printf '%-12s %12s %8s %7s %7s %8s  %s\n' target executions exec/s cov ft corpus result
while read -r name max_len patterns; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " == *" $name "* ]]; then continue; fi
  exe="build/fuzz/fuzz/ranksim_${name}_fuzz"
  corpus="build/fuzz/corpus/$name"
  run="build/fuzz/runs/$name"
  rm -rf "$run"
  mkdir -p "$corpus" "$run"
  seeds=()
  # shellcheck disable=SC2086  # the patterns are globs, expanded here
  for f in $patterns "fuzz/seeds/$name"/* "fuzz/regressions/$name"/*; do
    [ -f "$f" ] && seeds+=("$f")
  done
  for f in "${seeds[@]}"; do cp -- "$f" "$corpus/seed-$(basename "$f")"; done
  write_dict "$run/words.dict" "${seeds[@]}"
  status=0
  # libFuzzer's output goes to the log; -print_final_stats gives the stat:: lines.
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
    "$exe" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -dict="$run/words.dict" -artifact_prefix="$run/" -print_final_stats=1 >"$run/log" 2>&1 || status=$?
  execs=$(final_stat number_of_executed_units "$run/log")
  rate=$(final_stat average_exec_per_sec "$run/log")
  result=ok
  mapfile -t found < <(find "$run" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \))
  if [ "$status" -ne 0 ] || [ ${#found[@]} -gt 0 ]; then
    result="FOUND (exit $status): ${found[*]:-see $run/log}"
    failed+=("$name")
  fi
  printf '%-12s %12s %8s %7s %7s %8s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "$(figure cov "$run/log")" \
    "$(figure ft "$run/log")" "$(find "$corpus" -type f | wc -l)" "$result"
done <fuzz/targets.txt

if [ ${#failed[@]} -gt 0 ]; then
  for name in "${failed[@]}"; do
    echo
    echo "fuzz.sh: $name found a problem; libFuzzer's report (build/fuzz/runs/$name/log) ends:"
    grep -E '^(==[0-9]+==|SUMMARY|.*runtime error|.*terminate called|.*what\(\)|    #[0-9]+ )' \
      "build/fuzz/runs/$name/log" | awk 'NR <= 40'
  done
  echo
  echo "fuzz.sh: to keep a finding as a regression test, copy its input (the crash-*, leak-*, timeout-* or"
  echo "oom-* file named above) into fuzz/regressions/<target>/ under a name that says what it does; ctest"
  echo "then replays it (ranksim_fuzz_<target>_regression_<file>). Reproduce: build/fuzz/fuzz/ranksim_<target>_fuzz FILE"
  exit 1
fi
echo "fuzz.sh: no finding in ${seconds} s per target"

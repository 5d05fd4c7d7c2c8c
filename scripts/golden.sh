#!/usr/bin/env bash
# Writes every shipped scenario's outputs (stdout summary, --json, --trace, --report, and the
# scenario's own dump where it has one) into OUTDIR, so that two builds can be compared byte for
# byte (`diff -r A B`): the check that a refactoring changed no behaviour.
# Usage: scripts/golden.sh OUTDIR [RANKSIM_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/golden.sh OUTDIR [RANKSIM_BINARY]}"
bin="${2:-build/release/bin/ranksim}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
for s in scenarios/*.yaml; do
  name="$(basename "$s" .yaml)"
  d="$out/$name"
  mkdir -p "$d"
  trace=(--trace "$d/trace.json")
  run() {
    "$bin" run "$s" --json "$d/summary.json" "${trace[@]}" --report "$d/report.html" \
      "$@" >"$d/stdout.txt" 2>"$d/stderr.txt"
  }
  # Model workloads with real data also dump their tensors; the others refuse the key. A
  # collectives sweep records no trace and refuses --trace.
  set +e
  run --set "dump=$d/dump.safetensors"
  rc=$?
  if [ "$rc" -eq 2 ] && grep -q dump "$d/stderr.txt"; then run; rc=$?; fi
  if [ "$rc" -eq 2 ] && grep -q "records no trace" "$d/stderr.txt"; then trace=(); run; rc=$?; fi
  echo "$rc" >"$d/rc"
  set -e
  # Wall-clock figures vary between runs; drop the lines that carry them.
  sed -i -E -e "/wall|elapsed/d" -e "s#$out#OUT#g" "$d/stdout.txt" "$d/stderr.txt"
  echo "$name: exit $(cat "$d/rc")"
done

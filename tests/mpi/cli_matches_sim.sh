#!/usr/bin/env bash
# `ranksim run SCENARIO --backend mpi` under mpirun writes the same dump, byte for byte, as the
# sim run of the same scenario, and a trace with spans from every rank.
# Usage: cli_matches_sim.sh RANKSIM NP SCENARIO [--set key=value ...]   (MPIEXEC: the mpirun)
set -euo pipefail
ranksim="$1"; np="$2"; scenario="$3"; shift 3
mpirun="${MPIEXEC:-mpirun}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$ranksim" run "$scenario" "$@" --set dump="$dir/sim.safetensors" > "$dir/sim.out"
timeout --kill-after=5 300 "$mpirun" --oversubscribe -np "$np" "$ranksim" run "$scenario" "$@" \
  --backend mpi --set dump="$dir/mpi.safetensors" --trace "$dir/trace.json" > "$dir/mpi.out"
if ! cmp "$dir/sim.safetensors" "$dir/mpi.safetensors"; then
  echo "cli_matches_sim: the mpi dump differs from the sim dump" >&2; exit 1
fi
echo "cli_matches_sim: dumps identical ($(stat -c %s "$dir/sim.safetensors") bytes)"
for ((r = 0; r < np; ++r)); do
  # Metadata names every track; a rank that recorded spans has events besides its two.
  spans=$(grep -c "\"tid\":$r," "$dir/trace.json" || true)
  if [ "$spans" -le 2 ]; then echo "cli_matches_sim: no spans from rank $r in the trace" >&2; exit 1; fi
done
grep -q "wall time:" "$dir/mpi.out" || { echo "cli_matches_sim: no summary from rank 0" >&2; exit 1; }
echo "cli_matches_sim: the trace has spans from all $np ranks"

#!/usr/bin/env bash
# Runs ranksim's GPU checks on a machine with a GPU, from a bundle made elsewhere by
# scripts/measure/gpu_bundle.sh, in the repository's root: the `gpu` test programs (as ctest's
# label `gpu` runs them), the shipped scenarios with `--device gpu` and `--backend nccl`,
# `ranksim bench ops --device gpu`, and the GEMM grid (scripts/measure/gemm_grid.py).
# Every step runs under its own time limit and its log goes to OUT_DIR; a failing step does not
# stop the others; the last line counts them.
#
# Usage: scripts/measure/gpu_checks.sh BUNDLE OUT_DIR [STEP...]
#   STEP: tests, scenarios, nccl, bench_ops, gemm_grid (default: all).
set -uo pipefail
bundle="$(realpath "$1")"
out="$(realpath -m "$2")"
shift 2
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests scenarios nccl bench_ops gemm_grid)
mkdir -p "$out"

# Open MPI and the libraries the machine lacks, at their own paths, never over the machine's.
cp -an "$bundle/root/." /
ldconfig
# CUDA's libraries where the machine has them: the toolkit, else the Python wheels (NCCL comes
# from PyTorch's).
libdirs=()
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  if ! ldconfig -p | grep -q "$lib"; then
    f="$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)"
    [ -n "$f" ] && libdirs+=("$(dirname "$f")")
  fi
done
[ ${#libdirs[@]} -gt 0 ] && LD_LIBRARY_PATH="$(printf '%s:' "${libdirs[@]}")${LD_LIBRARY_PATH:-}"
export LD_LIBRARY_PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# The test programs read the shipped scenarios at the source path they were built in.
[ -d /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
bin="$bundle/bin"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$bin/ranksim" | grep -E 'not found|nccl|cublas|cudart|mpi'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

passed=0
failed=0
step() {  # step NAME SECONDS COMMAND...: runs it, logs to OUT/NAME.log, counts it
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  echo "$name: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || tail -25 "$out/$name.log"
}
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
mpirun=(mpirun --oversubscribe -np)

if want tests; then
  step gputest 120 "$bin/ranksim_gpu_gpu_gputest"
  step gpu_runtime_gputest 240 "$bin/ranksim_gpu_gpu_runtime_gputest"
  step nccl_backend_np1 120 "${mpirun[@]}" 1 "$bin/ranksim_gpu_nccl_backend_gpumpitest"
  # Two processes on the one GPU: the backend's clear error, not a hang.
  step nccl_backend_np2 120 "${mpirun[@]}" 2 "$bin/ranksim_gpu_nccl_backend_gpumpitest"
fi
if want scenarios; then
  for s in cp-validation-bshd cp-validation-thd train-tp2-cp2-dp2-dgx-h100 gpt-train-tp2-sp-pp2-interleaved-dgx-h100 \
           llama-validate-tp4-sp-cp2-dgx-h100 multimodal-fan-in-dgx-h100 multimodal-fan-out-dgx-h100; do
    step "scenario_$s" 120 "$bin/ranksim" run "scenarios/$s.yaml" --device gpu --json "$out/$s.json"
  done
fi
if want nccl; then
  step nccl_train_np1 180 "${mpirun[@]}" 1 "$bin/ranksim" run scenarios/train-tp2-cp2-dp2-dgx-h100.yaml --backend nccl \
    --set parallel.tp=1 --set parallel.cp=1 --set parallel.dp=1 --set train.steps=5 --json "$out/nccl_train.json"
fi
if want bench_ops; then
  # ranksim's own attention kernels are slow (docs/gpu.md): a short attention sweep.
  step bench_ops 240 "$bin/ranksim" bench ops --device gpu -t topologies/dgx-h100.yaml --seq 512,1024 --head-dims 128 \
    --reps 3 -o "$out/bench_ops_profile.yaml"
fi
if want gemm_grid; then
  step gemm_grid 300 env PYTHONUNBUFFERED=1 python3 scripts/measure/gemm_grid.py "$out"
fi
echo "$passed passed, $failed failed"

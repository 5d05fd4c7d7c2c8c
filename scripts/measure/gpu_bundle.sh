#!/usr/bin/env bash
# Packs what the GPU checks need to run on a bare GPU machine that has the CUDA runtime, cuBLAS
# and NCCL (as a PyTorch image does) but not ranksim's own dependencies: the ranksim command, the
# `gpu` test programs, the libraries they link that such a machine lacks (Boost.Context,
# yaml-cpp, Open MPI and what it loads), and Open MPI's launcher, plugins and help files.
# scripts/measure/gpu_checks.sh unpacks it there and runs the checks.
#
# Usage: scripts/measure/gpu_bundle.sh BUILD_DIR OUT_DIR
#   BUILD_DIR: a release build with RANKSIM_WITH_CUDA and RANKSIM_WITH_MPI on (build/release);
#   the targets it needs are built first.
set -euo pipefail
build="$1"
out="$2"
targets=(bin/ranksim tests/ranksim_gpu_gpu_gputest tests/ranksim_gpu_gpu_runtime_gputest
         tests/ranksim_gpu_nccl_backend_gpumpitest tests/ranksim_mpi_failures_mpiprog)
ninja -C "$build" -j2 "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/root"
for t in "${targets[@]}"; do cp "$build/$t" "$out/bin/"; done
strip "$out"/bin/*

# Open MPI's own files: launcher, libraries, plugins (loaded at run time), help texts, settings.
files=()
while read -r f; do
  if [ -f "$f" ] || [ -L "$f" ]; then files+=("$f"); fi
done < <(dpkg -L openmpi-bin libopenmpi3 openmpi-common libpmix2 | grep -v -E '^/usr/share/(doc|man|lintian)')
for f in /usr/bin/mpirun /usr/bin/mpiexec; do files+=("$(readlink -f "$f")"); done

# Every shared library the programs and the plugins load, except glibc's and the C++ runtime
# (the GPU machine's own are newer) and CUDA's (found there).
objs=("$out"/bin/*)
for f in "${files[@]}"; do case "$f" in *.so|*.so.*) objs+=("$f") ;; esac; done
while read -r lib; do files+=("$lib"); done < <(
  for o in "${objs[@]}"; do ldd "$o" 2>/dev/null | awk '$3 ~ /^\// {print $3}'; done | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so' |
    grep -v -E '/(libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so')
# Paths under /lib are kept under /usr/lib: on a merged-/usr system (Debian 12, Ubuntu 24.04) they
# are the same files, and /lib there is a link that a copied folder must not replace.
put() {
  local dest="${1/#\/lib\//\/usr\/lib\/}"
  mkdir -p "$out/root$(dirname "$dest")"
  cp -a "$1" "$out/root$dest"
}
for f in "${files[@]}"; do
  put "$f"
  # A library named through a symbolic link needs what the link points to as well.
  if [ -L "$f" ]; then put "$(readlink -f "$f")"; fi
done
# The alternatives links that name the launcher.
ln -sf "$(readlink -f /usr/bin/mpirun)" "$out/root/usr/bin/mpirun"
ln -sf "$(readlink -f /usr/bin/mpirun)" "$out/root/usr/bin/mpiexec"
du -sh "$out"

#!/usr/bin/env bash
# Installs, from Debian's packages only, whatever ranksim needs to build and test that is not
# already installed. Idempotent: a second run installs nothing. Runs apt-get as root, or via sudo.
# Usage: scripts/setup.sh [--with-mpi] [--for-tests] [--for-fuzz]
#   (none): what building ranksim needs (the main job: scripts/quickstart.sh);
#   --with-mpi: Open MPI too, for the mpi backend and the ctest label `mpi`;
#   --for-tests: what only the tests use (a headless browser that renders --report pages);
#   --for-fuzz: clang and its libFuzzer runtime, for scripts/fuzz.sh (the `fuzz` preset).
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libboost-context-dev   # fibers (boost::context::fiber)
  libeigen3-dev          # tensor arithmetic
  libyaml-cpp-dev        # topology and scenario files
  libgtest-dev libgmock-dev googletest  # tests
  libbenchmark-dev       # benches/
  libcli11-dev           # the ranksim command line
  python3                # scripts/check_layers.py (a ctest test)
  clang-format clang-tidy  # scripts/format.sh and scripts/tidy.sh (CI runs both)
  nlohmann-json3-dev     # the run summary (--json) and ranksim compare
)
for arg in "$@"; do
  case "$arg" in
    --with-mpi) packages+=(openmpi-bin libopenmpi-dev) ;;
    --for-tests) packages+=(chromium) ;;  # renders `ranksim run --report` pages in a test (headless)
    --for-fuzz) packages+=(clang libclang-rt-dev) ;;  # libFuzzer, ASan and UBSan runtimes for clang
    *) echo "setup.sh: unknown option '$arg' (known: --with-mpi, --for-tests, --for-fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup.sh: all ${#packages[@]} required Debian packages are already installed."
  exit 0
fi

echo "setup.sh: installing from Debian's packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup.sh: not root and no sudo; install these packages yourself: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup.sh: done."

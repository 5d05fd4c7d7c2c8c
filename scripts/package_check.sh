#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks ranksim as other projects get it (docs/library.md), from an existing build (CI: after
# scripts/test.sh release, reusing build/release; nothing of ranksim is rebuilt there, and
# elsewhere only what changed since the build):
#   1. cmake --install into a temporary prefix; `ranksim --version` and `ranksim list` run from it
#      (the shipped files found beside the command);
#   2. nothing installed names the source or build tree (grep, binaries included);
#   3. every installed header compiles on its own (one translation unit each, -fsyntax-only,
#      with the flags of the installed ranksim.pc), and README's C++ example builds and runs
#      with `pkg-config --cflags --libs ranksim`;
#   4. examples/tp_mlp and examples/spawn_worker configure against the prefix
#      (CMAKE_PREFIX_PATH), build, and pass ctest; tp_mlp also configures with ranksim through
#      FetchContent from this checkout (the in-tree ALIAS targets);
#   5. cpack builds the .deb; its Depends names packages apt knows, and `dpkg -x` of it holds the
#      command, the headers, the CMake package and the data, none naming the build machine's
#      trees; the extracted command runs and an example configures against the extracted tree.
# Usage: scripts/package_check.sh [BUILD_DIR]   (default: build/release). Temporary files go
# to a folder under $TMPDIR that is removed at exit (kept with KEEP=1). Needs 2-3 minutes on 2
# cores plus the examples' builds.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd -P)
build=$(cd "${1:-build/release}" && pwd -P)
[ -f "$build/CMakeCache.txt" ] || { echo "package_check: $build is not a configured build" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ranksim-package.XXXXXX")
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$work"' EXIT; else echo "package_check: keeping $work"; fi
prefix=$work/prefix
jobs=${JOBS:-2}
fail() { echo "package_check: FAILED: $*" >&2; exit 1; }
step() { echo "== package_check: $*"; }

# Headers are installed from the checkout and libraries from the build: bring the build up to
# date first, or the two may disagree (a no-op right after scripts/test.sh, as in CI).
step "the build is up to date ($build)"
cmake --build "$build" -j "$jobs" >"$work/build.log" || { cat "$work/build.log"; fail "cmake --build $build"; }

step "install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
"$prefix/bin/ranksim" --version | grep -Eq '^ranksim [0-9]+\.[0-9]+\.[0-9]+$' || fail "ranksim --version"
version=$("$prefix/bin/ranksim" --version | cut -d' ' -f2)
# (Outputs are captured before grep -q reads them: grep -q exits at its first match, and a command
# still writing then dies of SIGPIPE, which pipefail would report as a failure.)
listed=$(cd / && "$prefix/bin/ranksim" list) || fail "the installed ranksim list"
grep -q 'ring4.yaml' <<<"$listed" || fail "the installed ranksim list does not find share/ranksim"
for f in include/ranksim/runtime/distributed/spawn.h include/ranksim/testing/testing.h \
         lib/cmake/ranksim/ranksimConfig.cmake lib/cmake/ranksim/ranksimConfigVersion.cmake \
         lib/cmake/ranksim/ranksimTargets.cmake lib/pkgconfig/ranksim.pc lib/libranksim_sim.a \
         share/ranksim/topologies/ring4.yaml share/ranksim/scenarios/quickstart.yaml; do
  [ -f "$prefix/$f" ] || fail "not installed: $f"
done

# The installed tree must not name where it was built from ($src covers $build when the build is
# inside the checkout).
no_tree_paths() {
  local tree=$1 hits
  hits=$(grep -rlaF -e "$src" -e "$build" "$tree" || true)
  [ -z "$hits" ] || fail "these installed files name the source or build tree ($src, $build):"$'\n'"$hits"
}
step "no installed file names $src or $build"
no_tree_paths "$prefix"

step "every installed header compiles alone (-fsyntax-only, pkg-config --cflags ranksim)"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cflags=$(pkg-config --cflags ranksim) || fail "pkg-config --cflags ranksim"
export cflags
(cd "$prefix/include" && find ranksim -name '*.h' | sort) >"$work/headers"
[ "$(wc -l <"$work/headers")" -gt 50 ] || fail "too few headers installed"
# shellcheck disable=SC2016
if ! xargs -P "$jobs" -I{} sh -c 'out=$(echo "#include <{}>" | g++ -fsyntax-only -x c++ $cflags - 2>&1) ||
       { printf "%s\n%s\n" "{}:" "$out"; exit 1; }' <"$work/headers" >"$work/headers.log" 2>&1; then
  cat "$work/headers.log"
  fail "a header does not compile alone"
fi
echo "package_check: $(wc -l <"$work/headers") headers compile alone"

step "README's C++ example, built with pkg-config"
awk '/^```cpp$/{on=1; next} /^```$/{if (on) exit} on' README.md >"$work/readme.cpp"
grep -q 'int main' "$work/readme.cpp" || fail "README's first C++ block is not a whole program"
# shellcheck disable=SC2046
g++ -std=c++20 -O1 "$work/readme.cpp" -o "$work/readme" $(pkg-config --cflags --libs ranksim) ||
  fail "README's example does not build with pkg-config"
readme_out=$("$work/readme") || fail "README's example"
grep -q 'rank 0 holds 10' <<<"$readme_out" || fail "README's example does not print what it says"

for ex in tp_mlp spawn_worker; do
  step "examples/$ex against the installed package"
  cmake -S "examples/$ex" -B "$work/$ex" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    >"$work/$ex.configure.log" || { cat "$work/$ex.configure.log"; fail "configure examples/$ex"; }
  cmake --build "$work/$ex" -j "$jobs" || fail "build examples/$ex"
  ctest --test-dir "$work/$ex" -j "$jobs" --output-on-failure || fail "ctest examples/$ex"
done

# The same targets in-tree: FetchContent from this checkout (configure only: building it would
# rebuild ranksim). CMake refuses to generate when a linked ranksim:: name does not exist.
step "examples/tp_mlp with ranksim through FetchContent (configure)"
cmake -S examples/tp_mlp -B "$work/fetchcontent" -G Ninja -DRANKSIM_SOURCE="$src" >"$work/fetchcontent.log" 2>&1 ||
  { cat "$work/fetchcontent.log"; fail "configure examples/tp_mlp with FetchContent"; }
if grep -q 'ranksim_sim_engine_test' "$work/fetchcontent/build.ninja"; then
  fail "ranksim built inside another project adds its own tests"
fi

step "the Debian package (cpack -G DEB)"
(cd "$build" && cpack -G DEB -B "$work/deb" >"$work/cpack.log") || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(find "$work/deb" -maxdepth 1 -name "ranksim_${version}_*.deb" | head -n 1)
[ -n "$deb" ] || fail "no ranksim_${version}_*.deb in $work/deb"
dpkg-deb --field "$deb" Package Version Architecture Depends
depends=$(dpkg-deb --field "$deb" Depends)
[ -n "$depends" ] || fail "the package has no Depends"
for dep in $(echo "$depends" | tr ',' '\n' | sed 's/(.*)//; s/|.*//' | tr -d ' '); do
  apt-cache show "$dep" >/dev/null 2>&1 || dpkg-query -W "$dep" >/dev/null 2>&1 ||
    fail "Depends names $dep, which is not a Debian package apt knows"
done
root=$work/debroot
dpkg -x "$deb" "$root"
for f in usr/bin/ranksim usr/include/ranksim/runtime/distributed/spawn.h usr/include/ranksim/testing/ranks.h \
         usr/lib/cmake/ranksim/ranksimConfig.cmake usr/lib/pkgconfig/ranksim.pc \
         usr/share/ranksim/topologies/dgx-h100.yaml usr/share/doc/ranksim/LICENSE; do
  [ -f "$root/$f" ] || fail "the .deb lacks $f"
done
no_tree_paths "$root"
"$root/usr/bin/ranksim" --version | grep -qx "ranksim $version" || fail "the packaged ranksim --version"
listed=$("$root/usr/bin/ranksim" list) || fail "the packaged ranksim list"
grep -q 'dgx-h100.yaml' <<<"$listed" || fail "the packaged ranksim list"
cmake -S examples/spawn_worker -B "$work/deb-config" -G Ninja -DCMAKE_PREFIX_PATH="$root/usr" \
  >"$work/deb-config.log" || { cat "$work/deb-config.log"; fail "configure an example against the .deb's tree"; }
grep -q "$root/usr/share/ranksim" "$work/deb-config/CTestTestfile.cmake" ||
  fail "the .deb's CMake package does not point at its own data"
echo "package_check: ok ($(basename "$deb"), $(wc -l <"$work/headers") headers, both examples pass)"

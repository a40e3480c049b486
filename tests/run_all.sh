#!/usr/bin/env bash
# run_all.sh — the one command that runs every feedguard test tier on this machine:
#   1. installs what is missing (tests/install_deps.sh),
#   2. release build + every CTest label: unit, cgroup_v1 (real host cgroups, needs root),
#      vm (real cgroup v2 kernel in qemu), apiserver + e2e (real kube-apiserver + etcd), bench smoke,
#   3. ASan+UBSan build running the unit, cgroup_v1 and threaded tiers,
#   4. clang libFuzzer build: every parser of untrusted input fuzzed for a few seconds,
#   5. TSan build running the threaded tests,
#   6. a clang-format check.
# Usage: tests/run_all.sh [--fast] [--node-shapes]
#   --fast         release tier only (skips the sanitizer and fuzz builds)
#   --node-shapes  also the whole node-shape matrix (bench/node_shapes/run.sh: v2 + systemd with
#                  Debian's containerd 1.6 / runc 1.1, with the oldest supported kubelet, and v1 +
#                  systemd; ~10-12 min each on 2 cores, +~8 min to build the oldest kubelet once);
#                  CI runs the v2 + systemd shape with the newest kubelet only (vm_node_systemd)
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0 shapes=0
for a in "$@"; do
  case "$a" in
    --fast) fast=1 ;;
    --node-shapes) shapes=1 ;;
    *) echo "run_all.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
jobs=${FEEDGUARD_JOBS:-$(nproc)}

tests/install_deps.sh
# The compiler cache lives with the other slow-to-rebuild things (CMakeLists.txt uses ccache
# when it is installed), bounded so it cannot grow without end.
export CCACHE_DIR="${CCACHE_DIR:-${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# A fresh clone in another directory (as CI makes one per run) hits the same cache: paths under
# the clone are hashed relative to it, and the build directory itself is not hashed (the debug
# info of a cached object then names the directory of the build that first compiled it).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"

step() { printf '\n==== %s ====\n' "$*"; }

step "clang-format check"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || true)
if ((${#sources[@]})); then
  clang-format --dry-run --Werror "${sources[@]}"
fi

step "release build"
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"
step "release tests (all tiers)"
ctest --preset release -j1 --repeat until-pass:2

if ((shapes)); then
  step "node-shape matrix (bench/node_shapes/run.sh)"
  bench/node_shapes/run.sh
fi

if ((fast)); then exit 0; fi

step "ASan+UBSan build"
cmake --preset asan >/dev/null
cmake --build --preset asan -j"$jobs" --target fg_sanitizer_tests
step "ASan+UBSan tests"
# The asan test preset sets HWLOC_COMPONENTS=-pci: hwloc's dlopen'ed PCI plugin (libpciaccess)
# leaks ~1 KB per topology load, which LeakSanitizer cannot attribute once the plugin is
# unloaded. Our own code is still leak-checked; the XML topology tests keep their PCI devices.
ctest --preset asan -j1

step "fuzz build (clang, libFuzzer + ASan/UBSan)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$jobs" --target fg_fuzz_targets
step "fuzz tier (each target ${FEEDGUARD_FUZZ_SECONDS:-10}s from its seed corpus)"
# -j2: each fuzzer is one single-threaded process bounded in time.
ctest --preset fuzz -j2

step "TSan build (threaded parts)"
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j"$jobs" --target fg_threaded_tests
step "TSan tests"
ctest --preset tsan -j1

#!/usr/bin/env bash
# run_in_vm_selftest.sh — checks the qemu harness itself: argv quoting, --env, the guest environment,
# exit-code propagation, the timeout path (124), the missing-marker path (125), the skip path (77),
# and that the cgroup v2 smoke test really fails when pointed at something that is not cgroup v2.
# Usage: run_in_vm_selftest.sh RUN_IN_VM VM_PROBE CGROUP2_SMOKE_TEST CACHE_DIR
set -uo pipefail
(($# == 4)) || { echo "usage: $0 RUN_IN_VM VM_PROBE CGROUP2_SMOKE_TEST CACHE_DIR"; exit 2; }
runner=$1 probe=$2 smoke=$3 cache=$4
failures=0
fail() { echo "SELFTEST FAIL: $*"; failures=$((failures + 1)); }
run() { "$runner" --cache-dir "$cache" "$@" 2>&1; }

# 1. argv (quotes, $, empty, glob) and --env arrive verbatim; the guest exports the v2 root.
out=$(run --env "FOO=a b'c \$HOME" -- "$probe" args "it's here" '$HOME' '' 'a"b' '*'); rc=$?
echo "$out"
if ((rc == 77)); then echo "harness cannot run here (see above): skipped"; exit 77; fi
((rc == 0)) || fail "args run exited $rc"
for want in "arg[0]=<it's here>" 'arg[1]=<$HOME>' 'arg[2]=<>' 'arg[3]=<a"b>' 'arg[4]=<*>' \
  "env FOO=<a b'c \$HOME>" 'env FEEDGUARD_VM=<1>' 'env FEEDGUARD_CGROUP2_ROOT=</sys/fs/cgroup>'; do
  grep -qxF -- "$want" <<<"$out" || fail "missing line: $want"
done

# 2. the binary's exit status comes back.
run -- "$probe" exit 3 >/dev/null; rc=$?
((rc == 3)) && echo "exit 3 -> $rc" || fail "exit 3 came back as $rc"

# 3. a hung binary is cut off by the timeout.
out=$(run --timeout 15 -- "$probe" sleep 600); rc=$?
((rc == 124)) && echo "sleep 600 with --timeout 15 -> $rc" || fail "timeout path gave $rc: $out"

# 4. a VM that dies without the marker is an error, not a pass.
out=$(run -- "$probe" poweroff); rc=$?
((rc == 125)) && echo "poweroff without marker -> $rc" || fail "missing-marker path gave $rc: $out"

# 5. no kernel → skip (77), before any boot.
out=$(run --kernel /nonexistent/vmlinuz -- "$probe" exit 0); rc=$?
((rc == 77)) && echo "absent kernel -> $rc (skip)" || fail "absent kernel gave $rc: $out"

# 6. the smoke test fails inside the VM when its root is a tmpfs rather than cgroup v2.
out=$(run --env FEEDGUARD_CGROUP2_ROOT=/tmp -- "$smoke"); rc=$?
if ((rc == 1)) && grep -q 'is not a cgroup2 mount' <<<"$out"; then
  echo "smoke test with FEEDGUARD_CGROUP2_ROOT=/tmp -> $rc (fails, as it must)"
else
  fail "smoke test on a non-cgroup2 root gave $rc: $out"
fi

if ((failures)); then echo "$failures selftest failure(s)"; exit 1; fi
echo "harness selftest: all checks passed"

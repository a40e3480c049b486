#!/usr/bin/env bash
# vm_v2_check.sh — the kit's cgroup v2 path, checked under a real cgroup v2 kernel (this host is
# v1): boots tests/vm/run_in_vm.sh with /usr/bin/python3 (+ a trimmed stdlib and libffi for
# ctypes), the bundle (agent + libraries + kit) and fake_trainer.py, and runs
#   gpu_wedge.py run --cpu-only --trainer-script fake_trainer.py --arms cfs,fence-idle,fence-cpuset
# in it: the kubelet-shaped tree with cpu.weight / cpu.max, subtree_control, the bundled agent's
# apply/revert on v2, cpu.stat usage sampling, cleanup. The trainer is a stand-in (no torch in
# the VM), so the numbers mean nothing; the run's exit status and its checks are the result.
#
#   bench/gpu/vm_v2_check.sh [--agent PATH] [--timeout 900]
# Exit: 0 pass, 1 fail, 77 cannot run here (no qemu / kernel / busybox).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
agent=$repo/build/release/agent/feedguard-agent
timeout_s=900
while [ $# -gt 0 ]; do
  case $1 in
    --agent) agent=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    *) echo "vm_v2_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/fg-gpu-v2check-XXXXXX)
trap 'rm -rf "$work"' EXIT
bash "$here/bundle.sh" --agent "$agent" --out "$work/gpukit" >/dev/null
cp "$here/fake_trainer.py" "$here/v2_inner_check.py" "$work/gpukit/kit/"
pyver=$(/usr/bin/python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
/usr/bin/python3 - "$work/stdlib" "/usr/lib/$pyver" <<'PY'
import shutil, sys
shutil.copytree(sys.argv[2], sys.argv[1], ignore=shutil.ignore_patterns(
    "test", "tests", "__pycache__", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
    "pydoc_data", "config-*", "*.exe"))
PY
libffi=$(ldd "/usr/lib/$pyver/lib-dynload/_ctypes".*.so | awk '/libffi/ {print $3}')
exec_rc=0
"$repo/tests/vm/run_in_vm.sh" --timeout "$timeout_s" --mem 1G \
  --env PYTHONHOME=/usr --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
  --file "$work/stdlib:/usr/lib/$pyver" --file "$libffi:$libffi" \
  --file "$work/gpukit:/gpukit" \
  -- /usr/bin/python3 /gpukit/kit/v2_inner_check.py || exec_rc=$?
exit $exec_rc

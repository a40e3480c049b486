#!/usr/bin/env bash
# boot.sh — boots the VM node image (image.sh: Debian bookworm, systemd 252 as PID 1) under qemu
# (tcg) with a payload, and brings back what the payload wrote.
#
#   boot.sh [OPTIONS] PAYLOAD_DIR OUT_DIR
#     PAYLOAD_DIR  becomes /fg in the guest (an ext4 disk, LABEL=fgpayload); it must hold
#                  guest/run.sh, which fg-guest.service runs once the system is up.
#     OUT_DIR      receives the guest's /fg/out after the VM has powered off.
#   --cgroup v2|v1   v2 (default): systemd.unified_cgroup_hierarchy=1; v1: =0 (systemd's legacy
#                    layout, every controller a v1 hierarchy)
#   --mem SIZE (default 4G)   --smp N (default 2)   --timeout S (default 1800)
#   --log FILE       the console transcript (also written to OUT_DIR/console.log)
#   --verbose        kernel and systemd status messages on the console (default: quiet)
#   --net user|none  user (default): one virtio NIC on qemu's user-mode network; the guest is
#                    10.0.2.15/24 and reaches the 127.0.0.1 of the network namespace qemu runs in
#                    as 10.0.2.2 (run qemu inside a namespace of the caller's own)
#
# The payload ends the run by writing "FEEDGUARD_VM_EXIT <nonce> <rc>" to /dev/ttyS1 (the nonce is
# in /fg/nonce) and powering off. Exit status: the payload's rc; 124 timeout; 125 no exit marker;
# 77 cannot run here (no qemu/kernel/image); 2 usage. The root disk is opened with snapshot=on:
# the cached image is never written.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf '[vm/node/boot %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 2; }
skip() { log "SKIP: $*"; exit 77; }

cgroup=v2 mem=4G smp=2 timeout_s=1800 log_file="" net=user verbose=0
while (($#)); do
  case "$1" in
    --cgroup) cgroup="$2"; [[ "$cgroup" == v1 || "$cgroup" == v2 ]] || die "--cgroup v1|v2"; shift 2 ;;
    --mem) mem="$2"; shift 2 ;;
    --smp) smp="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --log) log_file="$2"; shift 2 ;;
    --verbose) verbose=1; shift ;;
    --net) net="$2"; [[ "$net" == user || "$net" == none ]] || die "--net user|none"; shift 2 ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
(($# == 2)) || die "usage: boot.sh [OPTIONS] PAYLOAD_DIR OUT_DIR"
payload="$(cd "$1" && pwd)"
out="$2"
[[ -f "$payload/guest/run.sh" ]] || die "$payload/guest/run.sh missing"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 not installed"
command -v debugfs >/dev/null && command -v mke2fs >/dev/null || skip "e2fsprogs missing"
"$HERE/image.sh" --check || skip "the VM node image is not built (tests/vm/node/image.sh)"
img="$("$HERE/image.sh")"

work="$(mktemp -d "${TMPDIR:-/tmp}/fg-vmnode.XXXXXX")"
trap 'rm -rf -- "$work"' EXIT
nonce="$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
printf '%s\n' "$nonce" >"$payload/nonce"
mkdir -p "$payload/out"
# The payload disk: its files plus room for what the guest writes (logs, results).
size_mb=$(($(du -sm "$payload" | cut -f1) + 768))
mke2fs -q -t ext4 -L fgpayload -E root_owner=0:0 -d "$payload" "$work/payload.img" "${size_mb}M" >/dev/null ||
  die "mke2fs of the payload failed"

append="console=ttyS0 root=/dev/vda rw panic=-1 net.ifnames=0"
((verbose)) || append+=" quiet loglevel=3 systemd.show_status=0"
append+=" rcupdate.rcu_cpu_stall_suppress=1 systemd.unified_cgroup_hierarchy=$([[ $cgroup == v2 ]] && echo 1 || echo 0)"
[[ "$cgroup" == v2 ]] || append+=" systemd.legacy_systemd_cgroup_controller=1"
nic=(-nic none)
[[ "$net" == none ]] || nic=(-netdev user,id=n0 -device virtio-net-pci,netdev=n0,romfile=)
log "booting $(cat "$img/kver") (cgroup $cgroup, mem $mem, smp $smp, payload ${size_mb} MB, timeout ${timeout_s}s)"
start=$SECONDS
set +e
timeout -k 10 "$timeout_s" qemu-system-x86_64 -accel tcg -cpu max -m "$mem" -smp "$smp" \
  -display none -vga none "${nic[@]}" -monitor none -serial stdio -serial "file:$work/exit" -no-reboot \
  -kernel "$img/kernel" -initrd "$img/initrd.cpio" -append "$append" \
  -drive "file=$img/rootfs.img,if=virtio,format=raw,snapshot=on" \
  -drive "file=$work/payload.img,if=virtio,format=raw" </dev/null 2>&1 |
  stdbuf -oL tr -d '\r' >"$work/console.log"
qemu_rc=${PIPESTATUS[0]}
set -e
mkdir -p "$out"
cp "$work/console.log" "$out/console.log"
[[ -z "$log_file" ]] || cp "$work/console.log" "$log_file"
debugfs -R "rdump /out $work" "$work/payload.img" >/dev/null 2>&1 || log "WARNING: nothing to bring back from /fg/out"
[[ -d "$work/out" ]] && cp -a "$work/out/." "$out/"
marker="$(tr -d '\r' <"$work/exit" 2>/dev/null | grep -a -E "^FEEDGUARD_VM_EXIT $nonce [0-9]+\$" | tail -n1 || true)"
[[ -n "$marker" ]] || marker="$(grep -a -E "FEEDGUARD_VM_EXIT $nonce [0-9]+\$" "$work/console.log" | tail -n1 | grep -oE "FEEDGUARD_VM_EXIT $nonce [0-9]+" || true)"
if [[ -n "$marker" ]]; then
  rc=${marker##* }
  log "guest exited $rc after $((SECONDS - start)) s"
  exit "$rc"
fi
if ((qemu_rc == 124 || qemu_rc == 137)); then
  log "TIMEOUT after ${timeout_s}s; console tail:"
  tail -n 30 "$work/console.log" >&2
  exit 124
fi
log "VM ended without the exit marker (qemu rc $qemu_rc); console tail:"
tail -n 30 "$work/console.log" >&2
exit 125

#!/usr/bin/env bash
# run_in_vm.sh — runs one test binary inside a real Linux kernel (qemu, software emulation) with
# cgroup v2 mounted at /sys/fs/cgroup and every v2 controller (cpu incl. cpu.idle, cpuset, io,
# memory, pids, ...) enabled in the root's cgroup.subtree_control. Exits with the binary's exit code.
#
# Usage: run_in_vm.sh [OPTIONS] [--] BINARY [ARGS...]
#   --env K=V         export K=V to the binary inside the VM (repeatable)
#   --file SRC[:DST]  also put host file SRC at DST (absolute; default: same path) in the VM (repeatable)
#   --timeout S       wall-clock limit for the whole VM run, seconds (default $FEEDGUARD_VM_TIMEOUT or 180)
#   --kernel PATH     kernel image (default $FEEDGUARD_VM_KERNEL or newest /boot/vmlinuz-*-cloud-amd64)
#   --cache-dir DIR   where built initramfs images are cached by content hash
#                     (default $FEEDGUARD_VM_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/feedguard-vm)
#   --mem SIZE        guest memory (default 512M)     --smp N   guest CPUs (default 2)
#   --log FILE        also keep the full console transcript in FILE
#   --net MODE        none (default) | user: one virtio NIC on qemu's user-mode network (slirp): the
#                     guest is 10.0.2.15/24 and reaches the 127.0.0.1 of qemu's network namespace as
#                     10.0.2.2. The guest must load virtio/virtio_pci/virtio_net itself (modules).
#
# Inside the VM the binary runs as root (PID 1's child) in the root cgroup, cwd /tmp (writable), with
# FEEDGUARD_VM=1 and FEEDGUARD_CGROUP2_ROOT=/sys/fs/cgroup in its environment; busybox provides the
# usual commands (sh, sleep, cat, ...). Dynamic binaries are supported: every library ldd lists and
# the dynamic loader go into the image. Libraries loaded only through dlopen() are not.
#
# Exit status: the binary's exit status; 77 when the harness cannot run here (no qemu, no kernel,
# no busybox: ctest treats it as a skip, with the reason printed); 124 when the timeout hit;
# 125 when the VM ended without the exit marker (crash, panic); 2 on usage/packaging errors.
set -euo pipefail

readonly kHarnessVersion=4  # bump when the image layout or /init changes (invalidates the cache)
readonly kSkip=77 kTimeout=124 kNoMarker=125 kUsage=2

die() { echo "run_in_vm: $*" >&2; exit "$kUsage"; }
skip() { echo "run_in_vm: SKIP: $*" >&2; exit "$kSkip"; }

envs=() files=()
timeout_s=${FEEDGUARD_VM_TIMEOUT:-180}
kernel=${FEEDGUARD_VM_KERNEL:-}
cache_dir=${FEEDGUARD_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/feedguard-vm}
mem=512M smp=2 log_file="" net=none
while (($#)); do
  case "$1" in
    --env) (($# >= 2)) || die "--env needs K=V"; [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] ||
      die "--env wants NAME=VALUE, got '$2'"; envs+=("$2"); shift 2 ;;
    --file) (($# >= 2)) || die "--file needs SRC[:DST]"; files+=("$2"); shift 2 ;;
    --timeout) (($# >= 2)) || die "--timeout needs seconds"; timeout_s=$2; shift 2 ;;
    --kernel) (($# >= 2)) || die "--kernel needs a path"; kernel=$2; shift 2 ;;
    --cache-dir) (($# >= 2)) || die "--cache-dir needs a path"; cache_dir=$2; shift 2 ;;
    --mem) (($# >= 2)) || die "--mem needs a size"; mem=$2; shift 2 ;;
    --smp) (($# >= 2)) || die "--smp needs a count"; smp=$2; shift 2 ;;
    --log) (($# >= 2)) || die "--log needs a file"; log_file=$2; shift 2 ;;
    --net) (($# >= 2)) || die "--net needs none|user"; [[ "$2" == none || "$2" == user ]] ||
      die "--net wants none or user, got '$2'"; net=$2; shift 2 ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
(($# >= 1)) || die "usage: run_in_vm.sh [OPTIONS] [--] BINARY [ARGS...]"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "--timeout wants a positive integer, got '$timeout_s'"
binary=$1; shift
[[ -f "$binary" && -x "$binary" ]] || die "not an executable file: $binary"
binary=$(readlink -f "$binary")

# ---- what the host must have ----------------------------------------------------------------
qemu=$(command -v qemu-system-x86_64 || true)
[[ -n "$qemu" ]] || skip "qemu-system-x86_64 not installed (Debian package qemu-system-x86)"
busybox=""
for b in /bin/busybox /usr/bin/busybox; do
  if [[ -x "$b" ]] && ! ldd "$b" >/dev/null 2>&1; then busybox=$b; break; fi  # ldd fails: static
done
[[ -n "$busybox" ]] || skip "no static busybox (Debian package busybox-static)"
if [[ -z "$kernel" ]]; then
  kernel=$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n1 || true)
  [[ -n "$kernel" ]] || kernel=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n1 || true)
fi
[[ -n "$kernel" && -r "$kernel" ]] ||
  skip "no readable kernel image (Debian package linux-image-cloud-amd64; or --kernel)"
command -v cpio >/dev/null || skip "cpio not installed"

work=$(mktemp -d "${TMPDIR:-/tmp}/feedguard-vm.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

# ---- the cached base image: busybox, /init, the binary, its libraries, --file extras -----------
# Every file that goes in is listed as "SRC<TAB>DST"; the cache key hashes that list and the contents.
manifest=$work/manifest
: >"$manifest"
add() { printf '%s\t%s\n' "$1" "$2" >>"$manifest"; }
guest_bin=/fg/bin/$(basename "$binary")
add "$binary" "$guest_bin"
add "$busybox" /bin/busybox
if ldd_out=$(ldd "$binary" 2>&1); then
  while read -r line; do
    lib=""
    if [[ "$line" == *"=> not found"* ]]; then die "$binary: missing library: $line"
    elif [[ "$line" =~ =\>\ (/[^ ]+) ]]; then lib=${BASH_REMATCH[1]}
    elif [[ "$line" =~ ^(/[^ ]+) ]]; then lib=${BASH_REMATCH[1]}  # the dynamic loader
    fi
    [[ -n "$lib" ]] && add "$(readlink -f "$lib")" "$lib"
  done <<<"$ldd_out"
elif ! grep -q 'not a dynamic executable\|statically linked' <<<"$ldd_out"; then
  die "ldd $binary failed: $ldd_out"
fi
for f in "${files[@]}"; do
  src=${f%%:*} dst=${f#*:}
  [[ "$f" == *:* ]] || dst=$src
  [[ -e "$src" ]] || die "--file: no such file: $src"
  [[ "$dst" == /* ]] || die "--file: destination must be absolute: $dst"
  if [[ -d "$src" ]]; then
    while IFS= read -r -d '' g; do add "$g" "$dst/${g#"$src"/}"; done < <(find "$src" -type f -print0 | sort -z)
  else
    add "$(readlink -f "$src")" "$dst"
  fi
done

# /init: PID 1 in the guest. The per-run part (argv, env, marker nonce) lives in /fg/job, appended
# as a second cpio archive so the cached base image does not depend on it.
cat >"$work/init" <<'INIT'
#!/bin/busybox sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/shm /dev/pts && mount -t tmpfs tmpfs /dev/shm
# / is the initramfs (a writable tmpfs), so /tmp needs no mount of its own and --file may target it.
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "run_in_vm(init): mounting cgroup2 failed"
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
  echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control ||
    echo "run_in_vm(init): could not enable controller $c"
done
export FEEDGUARD_VM=1 FEEDGUARD_CGROUP2_ROOT=/sys/fs/cgroup
. /fg/job
cd /tmp
echo "run_in_vm(init): kernel up $(cut -d' ' -f1 /proc/uptime)s; running $FG_BINARY"
"$FG_BINARY" "$@" </dev/null
rc=$?
# The exit marker goes to the second serial port (a file on the host) so kernel messages on the
# console can never split it; closing the tty waits until the UART has sent it. Echo it for humans too.
echo "FEEDGUARD_VM_EXIT $FG_NONCE $rc" >/dev/ttyS1
echo "FEEDGUARD_VM_EXIT $FG_NONCE $rc"
sync
poweroff -f
echo o >/proc/sysrq-trigger
INIT
add "$work/init" /init

# Hash paths + contents (the binary and libraries can change at the same path).
key=$({
  echo "harness $kHarnessVersion"
  while IFS=$'\t' read -r src dst; do printf '%s %s\n' "$dst" "$(sha256sum <"$src" | cut -d' ' -f1)"; done <"$manifest"
} | sha256sum | cut -c1-32)
mkdir -p "$cache_dir"
base=$cache_dir/base-$key.cpio
if [[ ! -s "$base" ]]; then
  stage=$work/stage
  mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,root,fg/bin}
  while IFS=$'\t' read -r src dst; do
    mkdir -p "$stage$(dirname "$dst")"
    cp -L --preserve=mode "$src" "$stage$dst"
  done <"$manifest"
  chmod 0755 "$stage/init"
  # busybox applets as symlinks (never over a file the manifest placed).
  while read -r applet; do
    [[ -e "$stage/$applet" || -L "$stage/$applet" ]] || ln -s /bin/busybox "$stage/$applet"
  done < <("$busybox" --list-full)
  tmp_base=$(mktemp "$cache_dir/.base-$key.XXXXXX")
  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$tmp_base"
  chmod 0644 "$tmp_base"
  mv -f "$tmp_base" "$base"  # atomic: parallel runs see either nothing or a whole image
fi
touch "$base"

# ---- the per-run job archive ------------------------------------------------------------------
# POSIX single-quoting: ' -> '\''
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
nonce=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
mkdir -p "$work/job/fg"
{
  echo "FG_BINARY=$(q "$guest_bin")"
  echo "FG_NONCE=$nonce"
  for e in "${envs[@]}"; do echo "export $(q "$e")"; done
  printf 'set --'
  for a in "$@"; do printf ' %s' "$(q "$a")"; done
  echo
} >"$work/job/fg/job"
(cd "$work/job" && printf '%s\n' fg fg/job | cpio -o -H newc -R 0:0 --quiet) >"$work/job.cpio"
cat "$base" "$work/job.cpio" >"$work/initrd.cpio"
# Keep the cache bounded: drop images beyond the 16 most recently used that are over an hour old.
ls -1t "$cache_dir"/base-*.cpio 2>/dev/null | tail -n +17 | while read -r old; do
  [[ -z "$(find "$old" -mmin +60 2>/dev/null)" ]] || rm -f -- "$old"
done || true

# ---- boot -------------------------------------------------------------------------------------
# qemu64 + RDRAND: the kernel trusts the CPU's RNG (RANDOM_TRUST_CPU), so getrandom() does not block
# for 1-2 s of early-boot entropy gathering (std::random_device, OpenSSL, ...). -nic none skips iPXE.
console=$work/console.log
nic=(-nic none)
[[ "$net" == none ]] || nic=(-netdev user,id=n0 -device virtio-net-pci,netdev=n0,romfile=)
start=$(date +%s.%N)
set +e
timeout -k 5 "$timeout_s" "$qemu" -accel tcg -cpu qemu64,+rdrand -m "$mem" -smp "$smp" \
  -display none -vga none "${nic[@]}" -monitor none -serial stdio -serial "file:$work/exit" \
  -no-reboot -kernel "$kernel" -initrd "$work/initrd.cpio" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 oops=panic rcupdate.rcu_cpu_stall_suppress=1" </dev/null 2>&1 |
  stdbuf -oL tr -d '\r' | tee "$console"
qemu_rc=${PIPESTATUS[0]}
set -e
elapsed=$(echo "$start $(date +%s.%N)" | awk '{printf "%.2f", $2 - $1}')
[[ -z "$log_file" ]] || cp "$console" "$log_file"

marker=$(tr -d '\r' <"$work/exit" 2>/dev/null | grep -a -E "^FEEDGUARD_VM_EXIT $nonce [0-9]+\$" | tail -n1 || true)
if [[ -z "$marker" ]]; then
  # Seen once under heavy load: the echo on the console arrived, the second port's file stayed
  # empty. A whole console line with this run's nonce is as trustworthy; say that it was used.
  marker=$(grep -a -E "^FEEDGUARD_VM_EXIT $nonce [0-9]+\$" "$console" 2>/dev/null | tail -n1 || true)
  [[ -z "$marker" ]] || echo "run_in_vm: exit marker missing on the second serial port; taken from the console" >&2
fi
if [[ -n "$marker" ]]; then
  rc=${marker##* }
  echo "run_in_vm: $(basename "$binary") exited $rc in the VM (${elapsed}s wall, kernel $(basename "$kernel"))" >&2
  exit "$rc"
fi
if ((qemu_rc == 124 || qemu_rc == 137)); then
  echo "run_in_vm: TIMEOUT after ${timeout_s}s (${elapsed}s wall); no exit marker" >&2
  exit "$kTimeout"
fi
echo "run_in_vm: VM ended without the exit marker (qemu exit $qemu_rc, ${elapsed}s wall)" >&2
exit "$kNoMarker"

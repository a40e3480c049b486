#!/usr/bin/env bash
# image.sh — the demo's workload image, built locally in about a second (no registry, no builder):
#
#   examples/demo/image.sh OUTDIR TRAINER_BIN SPINNER_BIN
#
# writes OUTDIR/wedge.tar, a one-layer `docker save` archive (tests/node/mkimage.py) of the image
# feedguard.local/wedge:1 that `ctr -n k8s.io images import` loads, and prints "FILE NAME". The
# image holds:
#   /usr/local/bin/fg-wedge-trainer  the synthetic DataLoader-heavy trainer (bench/wedge/trainer.cc)
#   /usr/local/bin/fg-wedge-spinner  the batch neighbour: one busy thread (bench/wedge/spinner.cc)
#   exactly the shared libraries `ldd` resolves for the two (and the loader),
#   /bin/busybox (Debian's busybox-static) with a link per applet: the trainer pod's start gate
#   is a few lines of sh (wait for /tmp/GO, run the trainer, stay up until deleted).
# Before writing, both binaries' --help is run inside the image's root (chroot) as a check.
# Needs root for that check (skipped otherwise), busybox-static, strip (binutils), python3.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MKIMAGE="$HERE/../../tests/node/mkimage.py"
IMAGE="feedguard.local/wedge:1"

die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 3 ]] || die "usage: image.sh OUTDIR TRAINER_BIN SPINNER_BIN"
out="$1" trainer="$2" spinner="$3"
[[ -x "$trainer" ]] || die "$trainer is not built (target fg-wedge-trainer)"
[[ -x "$spinner" ]] || die "$spinner is not built (target fg-wedge-spinner)"
busybox=/bin/busybox
[[ -x "$busybox" ]] && "$busybox" --list >/dev/null 2>&1 || die "busybox-static is not installed"
ldd "$busybox" >/dev/null 2>&1 && die "$busybox is dynamically linked; install busybox-static"
command -v strip >/dev/null || die "strip is not installed (binutils)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
tmp="$(mktemp -d "$out/.image.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

args=()
declare -A seen=()
for bin in "$trainer" "$spinner"; do
  name="$(basename "$bin")"
  cp "$bin" "$tmp/$name"
  strip --strip-debug "$tmp/$name"
  args+=(--file "$tmp/$name:/usr/local/bin/$name")
  # ldd: "libx.so.1 => /lib/.../libx.so.1 (0x...)" and the loader as "/lib64/ld-linux-x86-64.so.2 (0x...)".
  ldd_out="$(ldd "$bin")" || die "ldd $bin failed"
  [[ "$ldd_out" != *"not found"* ]] || die "ldd $bin: a library is not found on this machine"
  while read -r lib; do
    [[ -n "$lib" && -z "${seen[$lib]:-}" ]] || continue
    seen[$lib]=1
    args+=(--file "$lib:$lib")
  done < <(printf '%s\n' "$ldd_out" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
done
args+=(--file "$busybox:/bin/busybox" --dir /tmp:1777 --dir /proc --dir /sys --dir /dev --dir /etc)
while read -r applet; do
  [[ "$applet" == busybox ]] || args+=(--symlink "/bin/$applet:busybox")
done < <("$busybox" --list)

# The image's files run as they are: a chroot into exactly them runs both binaries' --help.
if ((EUID == 0)) && command -v chroot >/dev/null; then
  root="$tmp/root"
  for ((a = 0; a < ${#args[@]}; a += 2)); do
    [[ "${args[a]}" == --file ]] || continue
    install -D -m 0755 "${args[a + 1]%%:*}" "$root${args[a + 1]#*:}"
  done
  for name in fg-wedge-trainer fg-wedge-spinner; do
    chroot "$root" "/usr/local/bin/$name" --help >"$tmp/help.txt" 2>&1 ||
      { cat "$tmp/help.txt" >&2; die "$name --help fails inside the image's root (missing library?)"; }
  done
  rm -rf "$root"
fi
"$MKIMAGE" --name "$IMAGE" --out "$out/wedge.tar" "${args[@]}" --cmd '["/bin/sh"]' \
  --label org.opencontainers.image.title=feedguard-demo-wedge >&2
printf '%s %s\n' "$out/wedge.tar" "$IMAGE"

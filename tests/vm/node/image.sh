#!/usr/bin/env bash
# image.sh — builds (once, cached) the disk image of the VM node: a Debian bookworm root file
# system with systemd (252) as PID 1, made by mmdebstrap from this machine's own apt sources,
# plus the host's Debian cloud kernel modules, and a tiny initramfs that mounts it and hands over
# to systemd. tests/vm/node/boot.sh boots it.
#
#   image.sh            prints the image directory (rootfs.img, initrd.cpio, kernel, kver)
#   image.sh --check    exit 0 when the cached image is complete, 1 otherwise (builds nothing)
#
# What is in the root file system (Debian packages): systemd + systemd-sysv, udev, dbus, iproute2,
# iptables (nft), kmod, conntrack, util-linux, procps, ca-certificates, Debian's containerd (1.6)
# and runc (1.1) for the "Debian runtime" shape, libseccomp2 (for a runc built elsewhere),
# containernetworking-plugins (bridge, host-local, loopback), jq, socat. Units that would run on
# their own during a measurement (apt/man-db/fstrim/e2scrub timers, timesyncd, gettys) are
# masked, Debian's containerd.service is disabled (the guest starts the runtime under test), a
# fixed machine id and hostname are set, and fg-guest.service runs /fg/guest/run.sh from the
# payload disk (LABEL=fgpayload, mounted at /fg) once the system is up.
#
# Cache: ${FEEDGUARD_CACHE:-~/.cache/feedguard}/vm/node-<key>/, key = this script's contents +
# the package list + the kernel version. ~1 min and ~700 MB (sparse) on first use.
# Needs root, mmdebstrap, e2fsprogs (mke2fs -d), busybox-static, cpio, the Debian cloud kernel.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}"

log() { printf '[vm/node/image %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PACKAGES=(systemd systemd-sysv udev dbus iproute2 iptables kmod conntrack util-linux mount procps
  ca-certificates containerd runc libseccomp2 containernetworking-plugins jq socat)
# Room for images, containers and logs on top of the packages (the file is sparse).
IMAGE_SIZE=4G

KERNEL="${FEEDGUARD_VM_KERNEL:-$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n1)}"
[[ -n "$KERNEL" && -r "$KERNEL" ]] || die "no Debian cloud kernel in /boot (package linux-image-cloud-amd64)"
KVER="$(basename "$KERNEL" | sed 's/^vmlinuz-//')"
[[ -d "/lib/modules/$KVER" ]] || die "/lib/modules/$KVER missing"

KEY="$({ cat "${BASH_SOURCE[0]}"; echo "${PACKAGES[*]}"; echo "$KVER"; } | sha256sum | cut -c1-16)"
OUT="$CACHE/vm/node-$KEY"
complete() { [[ -f "$OUT/.complete" && -s "$OUT/rootfs.img" && -s "$OUT/initrd.cpio" ]]; }

if [[ "${1:-}" == --check ]]; then complete; exit; fi
if complete; then
  echo "$OUT"
  exit 0
fi

((EUID == 0)) || die "must run as root (mmdebstrap --mode=root)"
for b in mmdebstrap mke2fs cpio depmod; do command -v "$b" >/dev/null || die "$b is not installed (tests/install_deps.sh)"; done
BUSYBOX=/bin/busybox
[[ -x "$BUSYBOX" ]] && ! ldd "$BUSYBOX" >/dev/null 2>&1 || die "static busybox missing (busybox-static)"
# The machine's own apt sources (never a registry host name written here).
SOURCES=""
for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  [[ -s "$f" ]] && grep -qE '^[^#]*(deb |URIs:)' "$f" && { SOURCES="$f"; break; }
done
[[ -n "$SOURCES" ]] || die "no Debian apt sources configured on this machine"

t0=$SECONDS
mkdir -p "$CACHE/vm"
WORK="$(mktemp -d "$CACHE/vm/.node-$KEY.XXXXXX")"
trap 'rm -rf --one-file-system "$WORK"' EXIT
ROOT="$WORK/root"
log "mmdebstrap bookworm (sources: $SOURCES): ${PACKAGES[*]}"
include="$(IFS=,; echo "${PACKAGES[*]}")"
mmdebstrap --mode=root --variant=apt --format=directory --include="$include" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  bookworm "$ROOT" "$SOURCES" >"$WORK/mmdebstrap.log" 2>&1 || { tail -n 30 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
log "root file system: $(du -sh "$ROOT" | cut -f1) in $((SECONDS - t0)) s"

# ---- the kernel's modules (the cloud kernel builds virtio, overlay, bridge, netfilter as modules)
mkdir -p "$ROOT/lib/modules"
cp -a "/lib/modules/$KVER" "$ROOT/lib/modules/"
depmod -b "$ROOT" "$KVER"
printf '%s\n' overlay br_netfilter veth bridge nf_conntrack >"$ROOT/etc/modules-load.d/feedguard-node.conf"

# ---- system configuration ---------------------------------------------------------------------
echo fg-node >"$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 fg-node\n' >"$ROOT/etc/hosts"
printf '0123456789abcdef0123456789abcdef\n' >"$ROOT/etc/machine-id"
: >"$ROOT/etc/resolv.conf"
cat >"$ROOT/etc/fstab" <<'FSTAB'
/dev/vda        /      ext4  rw,noatime,errors=remount-ro  0 0
LABEL=fgpayload /fg    ext4  rw,noatime,nofail             0 0
tmpfs           /tmp   tmpfs rw,nosuid,nodev               0 0
FSTAB
mkdir -p "$ROOT/fg"
cat >"$ROOT/etc/sysctl.d/90-feedguard-node.conf" <<'SYSCTL'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
SYSCTL
# Quiet, short boots: no gettys on the console, nothing that wakes up by itself mid-measurement.
for u in serial-getty@ttyS0.service getty@tty1.service getty-static.service systemd-timesyncd.service \
  apt-daily.timer apt-daily-upgrade.timer man-db.timer fstrim.timer e2scrub_all.timer e2scrub_reap.service \
  dpkg-db-backup.timer logrotate.timer systemd-tmpfiles-clean.timer; do
  ln -sf /dev/null "$ROOT/etc/systemd/system/$u"
done
rm -f "$ROOT/etc/systemd/system/multi-user.target.wants/containerd.service"
# A node that powers off waits at most 5 s for stragglers (pods' processes), not systemd's 90.
mkdir -p "$ROOT/etc/systemd/system.conf.d"
printf '[Manager]\nDefaultTimeoutStopSec=5s\n' >"$ROOT/etc/systemd/system.conf.d/feedguard.conf"
mkdir -p "$ROOT/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n' >"$ROOT/etc/systemd/journald.conf.d/feedguard.conf"
cat >"$ROOT/etc/systemd/system/fg-guest.service" <<'UNIT'
[Unit]
Description=feedguard VM node: the test payload (/fg/guest/run.sh)
After=multi-user.target fg.mount
Requires=fg.mount
ConditionPathExists=/fg/guest/run.sh

[Service]
Type=simple
ExecStart=/bin/bash /fg/guest/run.sh
StandardOutput=journal+console
StandardError=journal+console
# The payload powers the VM off itself when it is done.
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
ln -sf /etc/systemd/system/fg-guest.service "$ROOT/etc/systemd/system/multi-user.target.wants/fg-guest.service"

# ---- initramfs: load virtio block, mount /dev/vda, switch to systemd --------------------------
IRD="$WORK/initrd"
mkdir -p "$IRD"/{bin,dev,proc,sys,newroot,modules}
cp "$BUSYBOX" "$IRD/bin/busybox"
MODDIR="/lib/modules/$KVER"
: >"$IRD/modules.list"
add_module() {  # path relative to MODDIR, dependencies first
  local rel="$1" dep
  grep -qxF "$(basename "$rel")" "$IRD/modules.list" && return 0
  for dep in $(awk -v m="$rel:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' "$MODDIR/modules.dep"); do add_module "$dep"; done
  cp "$MODDIR/$rel" "$IRD/modules/"
  basename "$rel" >>"$IRD/modules.list"
}
for m in virtio_pci virtio_blk; do
  rel="$(awk -F: -v m="/$m.ko" 'index($1, m) && substr($1, length($1) - length(m) + 1) == m { print $1; exit }' "$MODDIR/modules.dep")"
  [[ -n "$rel" ]] || die "module $m not found in $MODDIR"
  add_module "$rel"
done
cat >"$IRD/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
while read -r m; do /bin/busybox insmod "/modules/$m" || echo "initrd: insmod $m failed"; done </modules.list
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do i=$((i + 1)); /bin/busybox sleep 0.1; done
/bin/busybox mount -t ext4 -o rw,noatime /dev/vda /newroot || { echo "initrd: cannot mount /dev/vda"; /bin/busybox sh; }
/bin/busybox umount /proc /sys
/bin/busybox mount --move /dev /newroot/dev
exec /bin/busybox switch_root /newroot /lib/systemd/systemd
INIT
chmod 0755 "$IRD/init"
(cd "$IRD" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$WORK/initrd.cpio"

# ---- the disk image -------------------------------------------------------------------------------
log "ext4 image ($IMAGE_SIZE, sparse) from the tree"
mke2fs -q -t ext4 -L fgroot -E root_owner=0:0 -d "$ROOT" "$WORK/rootfs.img" "$IMAGE_SIZE" ||
  die "mke2fs -d failed"
printf '%s\n' "$KVER" >"$WORK/kver"
rm -rf "$OUT"
mkdir -p "$OUT"
mv "$WORK/rootfs.img" "$WORK/initrd.cpio" "$WORK/kver" "$OUT/"
ln -sf "$KERNEL" "$OUT/kernel"
printf 'built %s in %ss: %s\n' "$(date -u +%FT%TZ)" "$((SECONDS - t0))" "${PACKAGES[*]}" >"$OUT/.complete"
# Keep only this image (older keys are older script versions).
for old in "$CACHE"/vm/node-*; do [[ "$old" == "$OUT" ]] || rm -rf --one-file-system "$old"; done
log "image ready in $((SECONDS - t0)) s: $OUT ($(du -sh "$OUT/rootfs.img" | cut -f1) used)"
echo "$OUT"

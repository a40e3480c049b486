#!/usr/bin/env bash
# build_images.sh — builds the controller and agent images (controller/Dockerfile,
# agent/Dockerfile) with Debian's buildah, as root, and checks what came out: each image runs its
# binary's --help as the image's user, and its size is printed.
#
#   sudo tests/images/build_images.sh [--only controller|agent] [--tag TAG] [--local-base]
#                                     [--cpu-shares N]
#
# The Dockerfiles' build stage starts FROM debian:bookworm; the runtime stage is FROM scratch plus
# the binary and its ldd-resolved libraries.
# Where Docker Hub cannot be reached (this project's build machines resolve no registry but
# Debian's), --local-base (or an unreachable registry, detected) makes both base images locally:
# `debootstrap --variant=minbase bookworm` from the machine's apt mirror into a rootfs cached under
# ~/.cache/feedguard/images/ (keyed by suite and date), imported with `buildah from scratch` and
# tagged docker.io/library/debian:bookworm and :bookworm-slim in local storage, so the Dockerfiles
# build unchanged with --pull=never. (The local "slim" is the same minbase rootfs: larger than
# Docker Hub's slim image by the docs and locales slim strips.)
#
# --cpu-shares N is passed to `buildah bud` (e.g. 2: the build only uses CPU nothing else wants).
#
# Output: localhost/feedguard-controller:TAG, localhost/feedguard-agent:TAG (TAG default dev).
# Needs: root, buildah, debootstrap (Debian packages buildah, debootstrap).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}/images"
SUITE=bookworm
# The Debian mirror this machine's apt is configured with (deb822 .sources or sources.list).
apt_mirror() {
  local m
  m="$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)"
  [[ -n "$m" ]] || m="$(awk '$1 == "deb" {print ($2 ~ /^\[/ ? $3 : $2); exit}' /etc/apt/sources.list 2>/dev/null)"
  echo "$m"
}
MIRROR="${FEEDGUARD_DEBIAN_MIRROR:-$(apt_mirror)}"
TAG=dev
ONLY=""
LOCAL_BASE=0
BUD_ARGS=()

die() { echo "build_images: $*" >&2; exit 1; }
while (($#)); do
  case "$1" in
    --only) ONLY="${2:-}"; shift 2 ;;
    --tag) TAG="${2:-}"; shift 2 ;;
    --local-base) LOCAL_BASE=1; shift ;;
    --cpu-shares) BUD_ARGS+=(--cpu-shares "${2:-}"); shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[[ -z "$ONLY" || "$ONLY" == controller || "$ONLY" == agent ]] || die "--only takes controller or agent"
((EUID == 0)) || die "run as root (buildah's storage, debootstrap)"
command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah)"
# RUN steps without an OCI runtime: buildah picks crun when it is installed (tests/install_deps.sh
# installs it for the node tier), and crun refuses this project's hybrid cgroup hosts ("did not get
# container create message from subprocess: EOF"). Override with BUILDAH_ISOLATION=oci.
export BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"

base_present() { buildah inspect --type image "docker.io/library/debian:$SUITE" >/dev/null 2>&1; }

if ((!LOCAL_BASE)) && ! base_present; then
  echo "==> pulling docker.io/library/debian:$SUITE and :$SUITE-slim"
  if ! buildah pull "docker.io/library/debian:$SUITE" || ! buildah pull "docker.io/library/debian:$SUITE-slim"; then
    echo "==> the registry is not reachable: making the base images locally (--local-base)"
    LOCAL_BASE=1
  fi
fi

if ((LOCAL_BASE)) && ! base_present; then
  command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
  rootfs_tar="$CACHE/debian-$SUITE-minbase-$(date +%Y%m%d).tar"
  if [[ ! -s "$rootfs_tar" ]]; then
    mkdir -p "$CACHE"
    work="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    echo "==> debootstrap --variant=minbase $SUITE ($MIRROR) → $rootfs_tar"
    debootstrap --variant=minbase "$SUITE" "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
      { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    # As the official image: apt sources in deb822 form, no caches.
    rm -f "$work/root/etc/apt/sources.list"
    cat >"$work/root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
    tar -C "$work/root" -cf "$rootfs_tar.tmp" . && mv "$rootfs_tar.tmp" "$rootfs_tar"
    rm -rf "$work"
    trap - EXIT
  fi
  echo "==> importing $rootfs_tar as docker.io/library/debian:$SUITE and :$SUITE-slim"
  ctr="$(buildah from scratch)"
  buildah add "$ctr" "$rootfs_tar" / >/dev/null
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --rm "$ctr" "docker.io/library/debian:$SUITE" >/dev/null
  buildah tag "docker.io/library/debian:$SUITE" "docker.io/library/debian:$SUITE-slim"
fi

build() {
  local name="$1" check="$2" image="localhost/feedguard-$1:$TAG" t0=$SECONDS
  echo "==> buildah bud -f $name/Dockerfile -t $image"
  buildah bud --pull=never --layers "${BUD_ARGS[@]}" -f "$REPO/$name/Dockerfile" -t "$image" "$REPO"
  echo "==> $image built in $((SECONDS - t0)) s"
  # The binary runs as the image's user with only the runtime libraries the image carries.
  local ctr out
  ctr="$(buildah from "$image")"
  if ! out="$(buildah run "$ctr" -- $check 2>&1)"; then
    buildah rm "$ctr" >/dev/null
    die "$image: '$check' failed: $out"
  fi
  buildah rm "$ctr" >/dev/null
  echo "    $check: $(printf '%s\n' "$out" | head -n 1)"
  echo "    user: $(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")," \
    "size: $(buildah images --format '{{.Size}}' "$image")"
}

[[ -z "$ONLY" || "$ONLY" == controller ]] && build controller "/usr/local/bin/feedguard-controller --help"
[[ -z "$ONLY" || "$ONLY" == agent ]] && build agent "/usr/local/bin/feedguard-agent --help"
echo "==> done"

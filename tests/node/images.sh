#!/usr/bin/env bash
# images.sh — builds the node tier's container images locally, in seconds, as `docker save`
# archives (tests/node/mkimage.py) that `ctr -n k8s.io images import` loads; no registry, no
# image builder.
#
#   images.sh base OUTDIR     pause.tar    feedguard.local/pause:3.10   (static C binary, pause.c)
#                             busybox.tar  feedguard.local/busybox:1    (Debian's busybox-static)
#   images.sh feedguard OUTDIR [--build-dir DIR] [--controller BIN] [--agent BIN] [--tag TAG]
#                             controller.tar  ghcr.io/feedguard/feedguard-controller:TAG
#                             agent.tar       ghcr.io/feedguard/feedguard-agent:TAG
#       from the binaries CI already built (DIR default build/release), TAG default the chart's
#       appVersion, so that the chart's default image names resolve to them (pullPolicy
#       IfNotPresent never pulls). MIRRORS controller/Dockerfile and agent/Dockerfile (the release
#       path, `FROM scratch`): the same file list and user. Each image holds the binary (debug
#       info stripped), exactly the shared libraries `ldd` resolves for it (and the loader), the
#       CA bundle, /etc/passwd + /etc/group (root, nonroot 65532) and /tmp (1777). The controller
#       runs as 65532:65532, the agent as 0:0 (unprivileged, CAP_SYS_NICE alone: see the chart).
#       Checked before writing: the binary's --help runs in the image's root (chroot) as the
#       image's user. Change the Dockerfiles and this script together.
#
# Prints one line per image: FILE NAME. Needs gcc (static libc) and busybox-static (base),
# binutils' strip and ldd (feedguard).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

PAUSE_IMAGE="feedguard.local/pause:3.10"
BUSYBOX_IMAGE="feedguard.local/busybox:1"

log() { printf '[node/images %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

build_base() {
  local out="$1" tmp
  command -v gcc >/dev/null || die "gcc is not installed (build-essential)"
  local busybox=/bin/busybox
  [[ -x "$busybox" ]] && "$busybox" --list >/dev/null 2>&1 || die "busybox-static is not installed"
  ldd "$busybox" >/dev/null 2>&1 && die "$busybox is dynamically linked; install busybox-static"
  tmp="$(mktemp -d "$out/.images.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN

  gcc -static -Os -s -Wall -Wextra -Werror -o "$tmp/pause" "$HERE/pause.c" || die "compiling pause.c failed"
  "$HERE/mkimage.py" --name "$PAUSE_IMAGE" --out "$out/pause.tar" \
    --file "$tmp/pause:/pause" --entrypoint '["/pause"]' >&2

  local args=(--file "$busybox:/bin/busybox" --dir /tmp:1777 --dir /root:0700 --dir /etc
    --dir /proc --dir /sys --dir /dev --dir /var/run)
  local applet
  while read -r applet; do
    [[ "$applet" == busybox ]] || args+=(--symlink "/bin/$applet:busybox")
  done < <("$busybox" --list)
  "$HERE/mkimage.py" --name "$BUSYBOX_IMAGE" --out "$out/busybox.tar" "${args[@]}" \
    --cmd '["/bin/sh"]' >&2
  printf '%s %s\n' "$out/pause.tar" "$PAUSE_IMAGE" "$out/busybox.tar" "$BUSYBOX_IMAGE"
}

# feedguard_image NAME BINARY IMAGE USER OUT — binary + its shared libraries on an empty base.
feedguard_image() {
  local name="$1" bin="$2" image="$3" user="$4" out="$5" tmp lib libs=() args=()
  [[ -x "$bin" ]] || die "$bin is not built (cmake --build --preset release --target feedguard-$name)"
  tmp="$(mktemp -d "$(dirname "$out")/.images.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  cp "$bin" "$tmp/$name"
  strip --strip-debug "$tmp/$name"
  # ldd: "libx.so.1 => /lib/.../libx.so.1 (0x...)" and the loader as "/lib64/ld-linux-x86-64.so.2 (0x...)".
  local ldd_out
  ldd_out="$(ldd "$bin")" || die "ldd $bin failed"
  [[ "$ldd_out" != *"not found"* ]] || die "ldd $bin: a library is not found on this machine"
  mapfile -t libs < <(printf '%s\n' "$ldd_out" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
  ((${#libs[@]})) || die "ldd found no shared libraries for $bin"
  for lib in "${libs[@]}"; do args+=(--file "$lib:$lib"); done
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$tmp/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$tmp/group"
  args+=(--file "$tmp/$name:/usr/local/bin/feedguard-$name" --file "$tmp/passwd:/etc/passwd"
    --file "$tmp/group:/etc/group" --dir /tmp:1777)
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] &&
    args+=(--file "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt")
  # Check that the binary runs from exactly these files before writing the image.
  if ((EUID == 0)) && command -v chroot >/dev/null; then
    local root="$tmp/root" a
    mkdir -p "$root"
    for ((a = 0; a < ${#args[@]}; a += 2)); do
      [[ "${args[a]}" == --file ]] || continue
      local src="${args[a + 1]%%:*}" dst="${args[a + 1]#*:}"
      install -D -m 0755 "$src" "$root$dst"
    done
    mkdir -p "$root/tmp"
    chroot --userspec="$user" "$root" "/usr/local/bin/feedguard-$name" --help >"$tmp/help.txt" 2>&1 ||
      { cat "$tmp/help.txt" >&2; die "feedguard-$name --help fails inside the image's root (missing library?)"; }
  else
    log "not root: skipping the chroot --help check of $image"
  fi
  "$HERE/mkimage.py" --name "$image" --out "$out" "${args[@]}" --user "$user" \
    --entrypoint "[\"/usr/local/bin/feedguard-$name\"]" \
    --label "org.opencontainers.image.title=feedguard-$name" >&2
}

build_feedguard() {
  local out="$1" controller_bin="$2" agent_bin="$3" tag="$4"
  command -v strip >/dev/null || die "strip is not installed (binutils)"
  feedguard_image controller "$controller_bin" \
    "ghcr.io/feedguard/feedguard-controller:$tag" 65532:65532 "$out/controller.tar"
  feedguard_image agent "$agent_bin" \
    "ghcr.io/feedguard/feedguard-agent:$tag" 0:0 "$out/agent.tar"
  printf '%s %s\n' "$out/controller.tar" "ghcr.io/feedguard/feedguard-controller:$tag" \
    "$out/agent.tar" "ghcr.io/feedguard/feedguard-agent:$tag"
}

case "${1:-}" in
  base)
    [[ $# -eq 2 ]] || die "usage: images.sh base OUTDIR"
    mkdir -p "$2"
    build_base "$(cd "$2" && pwd)"
    ;;
  feedguard)
    [[ $# -ge 2 ]] || die "usage: images.sh feedguard OUTDIR [--build-dir DIR] [--controller BIN] [--agent BIN] [--tag TAG]"
    outdir="$2"
    shift 2
    repo="$(cd "$HERE/../.." && pwd)"
    build_dir="$repo/build/release"
    tag="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/feedguard/Chart.yaml")"
    while (($#)); do
      case "$1" in
        --build-dir) build_dir="$2"; shift 2 ;;
        --controller) controller_bin="$2"; shift 2 ;;
        --agent) agent_bin="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        *) die "unknown argument $1" ;;
      esac
    done
    [[ -n "$tag" ]] || die "no tag: charts/feedguard/Chart.yaml has no appVersion; pass --tag"
    mkdir -p "$outdir"
    build_feedguard "$(cd "$outdir" && pwd)" "${controller_bin:-$build_dir/controller/feedguard-controller}" \
      "${agent_bin:-$build_dir/agent/feedguard-agent}" "$tag"
    ;;
  *)
    sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# install_deps.sh — installs everything feedguard's build, tests, demo and benchmark need on a fresh
# Debian bookworm machine (as root): Debian packages, then the Go-built kube-apiserver, etcd and helm
# (cached under ${FEEDGUARD_CACHE:-~/.cache/feedguard}, keyed by version). Idempotent.
#
# Usage: tests/install_deps.sh [--demo]
#   --demo: only what examples/demo/run.sh needs — no PyTorch (the GPU kit's smoke test), no
#           containerd 2 / runc builds and no VM node image (the VM node shapes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
demo=0
[[ "${1:-}" == --demo ]] && demo=1

packages=(
  build-essential cmake ninja-build pkg-config clang-format git curl ca-certificates openssl jq
  libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libcli11-dev
  libhwloc-dev hwloc libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libturbojpeg0-dev
  qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio
  containerd runc crun containernetworking-plugins iproute2 util-linux iptables conntrack prometheus
  clang libclang-rt-14-dev ccache
  libseccomp-dev mmdebstrap e2fsprogs libsystemd-dev
  python3 python3-matplotlib python3-yaml python3-venv python3-pil python3-numpy
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The test bed builds kube-apiserver, etcd and helm from Go modules: Debian's Go (1.19) is too
# old for them (Kubernetes v1.37 needs Go 1.26.0, containerd v2.4 1.26.6). Use a Go ≥ 1.26.6 on
# PATH or in /usr/local/go; otherwise fetch the official
# toolchain from the Go module proxy (the golang.org/toolchain module, the zip `go` itself
# downloads for GOTOOLCHAIN) into the cache, keyed by version.
GO_TOOLCHAIN_VERSION=1.26.8
export PATH="$PATH:/usr/local/go/bin"
go_ok() { command -v go >/dev/null && go version | grep -Eq 'go1\.(26\.([6-9]|[1-9][0-9])|2[7-9]|[3-9][0-9])'; }
if ! go_ok; then
  go_root="${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}/go-$GO_TOOLCHAIN_VERSION"
  mod="golang.org/toolchain@v0.0.1-go$GO_TOOLCHAIN_VERSION.linux-amd64"
  if [[ ! -x "$go_root/$mod/bin/go" ]]; then
    # The module proxy this machine is configured with: $GOPROXY, else what an installed go (or
    # Debian's golang-go, installed for the purpose) reports as its default.
    proxy="${GOPROXY:-}"
    if [[ -z "$proxy" ]] && ! command -v go >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go >/dev/null
    fi
    [[ -n "$proxy" ]] || proxy="$(go env GOPROXY)"
    proxy="${proxy%%,*}"
    [[ "$proxy" == http* ]] || { echo "install_deps: no Go module proxy configured (GOPROXY=$proxy)" >&2; exit 1; }
    mkdir -p "$go_root"
    curl -fsSL --retry 3 -o "$go_root/toolchain.zip" \
      "$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_TOOLCHAIN_VERSION.linux-amd64.zip"
    python3 - "$go_root" <<'PY'
import os, sys, zipfile
root = sys.argv[1]
with zipfile.ZipFile(os.path.join(root, "toolchain.zip")) as z:
    for info in z.infolist():
        z.extract(info, root)
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(os.path.join(root, info.filename), mode)
PY
    rm -f "$go_root/toolchain.zip"
  fi
  export PATH="$go_root/$mod/bin:$PATH" GOTOOLCHAIN=local
fi
if ! go_ok; then
  echo "install_deps: Go ≥ 1.26.6 is needed to build kube-apiserver/etcd/helm and none could be installed" >&2
  exit 1
fi

if ((demo)); then
  "$here/testbed/build.sh" etcd kube-apiserver kubectl helm kubelet kube-scheduler \
    kube-controller-manager kube-proxy coredns
  exit 0
fi

# The GPU kit's CPU-only smoke test runs a real PyTorch DataLoader: torch + torchvision in a venv
# cached by version (once: ~82 s, 4.6 GiB — PyPI's Linux wheel brings the CUDA libraries). A
# download more than a computation: it runs beside the Go builds below.
"$here/../bench/gpu/torch_venv.sh" >/dev/null &
torch_pid=$!

# Every test-bed binary (the Kubernetes binaries, etcd, helm, CoreDNS, containerd 2 + runc) and
# the VM node image (tests/vm/node_shape.sh), each cached by version.
"$here/testbed/build.sh"
"$here/vm/node/image.sh" >/dev/null
wait "$torch_pid" || { echo "install_deps: bench/gpu/torch_venv.sh failed" >&2; exit 1; }

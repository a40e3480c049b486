#!/usr/bin/env bash
# install_deps.sh — installs everything feedguard's build, tests, demo and benchmark need on a fresh
# Debian bookworm machine (as root): Debian packages, then the Go-built kube-apiserver, etcd and helm
# (cached under ${FEEDGUARD_CACHE:-~/.cache/feedguard}, keyed by version). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

packages=(
  build-essential cmake ninja-build pkg-config clang-format git curl ca-certificates openssl jq
  libcurl4-openssl-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev
  libhwloc-dev hwloc libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libturbojpeg0-dev
  qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio
  python3 python3-matplotlib python3-yaml
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
# old for them; this machine kind ships Go in /usr/local/go.
export PATH="$PATH:/usr/local/go/bin"
if ! command -v go >/dev/null; then
  echo "install_deps: Go ≥ 1.24 is needed to build kube-apiserver/etcd/helm and none is on PATH" >&2
  exit 1
fi

if [[ -x "$here/testbed/build.sh" ]]; then
  "$here/testbed/build.sh"
fi

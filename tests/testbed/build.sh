#!/usr/bin/env bash
# build.sh — builds the pinned test-bed binaries (kube-apiserver, etcd, helm, and for the node
# tier kubelet, kube-scheduler, kube-controller-manager, kube-proxy, CoreDNS) from Go modules
# through the Go module proxy and caches them by version under
#   ${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}/bin/<component>-<version>/<binary>
# A second run with the same versions does nothing. Non-interactive; needs only `go` and `curl`.
#
# Usage: tests/testbed/build.sh [COMPONENT ...]   (default: all eight)
#   COMPONENT: etcd kube-apiserver helm kubelet kube-scheduler kube-controller-manager kube-proxy
#              coredns
# Environment (all optional):
#   FEEDGUARD_CACHE          cache root (binaries, module cache, Go build cache)
#   FEEDGUARD_K8S_VERSION    k8s.io/kubernetes version   (default: versions.env)
#   FEEDGUARD_ETCD_VERSION   go.etcd.io/etcd/server/v3   (default: versions.env, >= v3.5.13)
#   FEEDGUARD_HELM_VERSION   helm.sh/helm/v3             (default: versions.env)
#   FEEDGUARD_COREDNS_VERSION github.com/coredns/coredns (default: versions.env)
#   FEEDGUARD_GO_SHARED_CACHE=1  use the machine's own GOMODCACHE/GOCACHE instead of the cache root
set -euo pipefail

# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"
K8S_VERSION="$FEEDGUARD_K8S_VERSION"
ETCD_VERSION="$FEEDGUARD_ETCD_VERSION"
HELM_VERSION="$FEEDGUARD_HELM_VERSION"
COREDNS_VERSION="$FEEDGUARD_COREDNS_VERSION"
CONTAINERD_VERSION="$FEEDGUARD_CONTAINERD_VERSION"
RUNC_VERSION="$FEEDGUARD_RUNC_VERSION"

log() { printf '[testbed/build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "go is not installed (need Go >= 1.24 on PATH)"
mkdir -p "$CACHE/bin" "$CACHE/src"
if [[ "${FEEDGUARD_GO_SHARED_CACHE:-0}" != 1 ]]; then
  export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build"
fi
# Never fetch another toolchain, never prompt, build static binaries without cgo.
export GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0 CI="${CI:-true}"
export GOPROXY="${GOPROXY:-$(go env GOPROXY)}"

# bin_dir COMPONENT VERSION
bin_dir() { echo "$CACHE/bin/$1-$2"; }

# is_built COMPONENT VERSION BINARY — the binary exists and the stamp says it completed.
is_built() {
  local d; d="$(bin_dir "$1" "$2")"
  [[ -x "$d/$3" && -f "$d/.complete" ]]
}

# go_build_main COMPONENT VERSION MODULE MODVERSION PACKAGE BINARY LDFLAGS [setup-function [TARGET]]
# Creates a throw-away main module that requires MODULE@MODVERSION, optionally lets a setup
# function add replace directives (or write a main package of its own), resolves the package's
# requirements and builds TARGET (default: PACKAGE; "." for a main package the setup wrote; words
# before the package are `go build` flags).
go_build_main() {
  local comp="$1" ver="$2" mod="$3" modver="$4" pkg="$5" bin="$6" ldflags="$7" setup="${8:-}"
  local target="${9:-$5}"
  if is_built "$comp" "$ver" "$bin"; then
    log "$comp $ver: cached at $(bin_dir "$comp" "$ver")/$bin"
    return 0
  fi
  local t0=$SECONDS src out
  src="$CACHE/src/$comp-$ver"
  out="$(bin_dir "$comp" "$ver")"
  rm -rf "$src"
  mkdir -p "$src" "$out"
  log "$comp $ver: preparing module in $src"
  (
    cd "$src"
    printf 'module feedguard.local/testbed/%s\n\ngo 1.24\n' "$comp" >go.mod
    go mod edit -require="$mod@$modver"
    if [[ -n "$setup" ]]; then "$setup"; fi
    log "$comp $ver: resolving $pkg (downloads through $GOPROXY)"
    go get "$pkg@$modver"
    log "$comp $ver: compiling (-trimpath, -ldflags=-s -w)"
    # shellcheck disable=SC2086 # TARGET may carry build flags (runc: -tags=seccomp PACKAGE)
    go build -trimpath -ldflags="-s -w $ldflags" -o "$out/$bin.tmp" $target
  ) || die "$comp $ver: build failed (see output above)"
  mv -f "$out/$bin.tmp" "$out/$bin"
  printf '%s %s built %s in %ss\n' "$comp" "$ver" "$(date -u +%FT%TZ)" "$((SECONDS - t0))" >"$out/.complete"
  log "$comp $ver: built $out/$bin in $((SECONDS - t0))s"
}

# k8s.io/kubernetes points every staging module (k8s.io/api, k8s.io/client-go, ...) at
# ./staging/src/...; a consumer must replace each of them with the published v0.X.Y tag.
# The list is generated from the go.mod of the exact kubernetes version.
k8s_replaces() {
  local gomod staging
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || die "could not download the go.mod of k8s.io/kubernetes@$K8S_VERSION"
  staging="v0.${K8S_VERSION#v1.}"
  local n=0
  while read -r m; do
    go mod edit -replace="$m=$m@$staging"
    n=$((n + 1))
  done < <(grep -oE '^[[:space:]]*k8s\.io/[A-Za-z0-9._/-]+[[:space:]]+=>[[:space:]]+\./staging/' "$gomod" |
    awk '{print $1}' | sort -u)
  ((n > 0)) || die "no staging replace directives found in $gomod"
  log "k8s.io/kubernetes $K8S_VERSION: replaced $n k8s.io/* staging modules with $staging"
}

# build_k8s_cmd NAME — k8s.io/kubernetes/cmd/NAME (kube-apiserver, kubectl, kubelet, kube-scheduler,
# kube-controller-manager, kube-proxy), version stamped so that `NAME --version` and the node's
# status.nodeInfo report it. The Go build cache makes the later ones cheap: they share most
# packages with kube-apiserver.
build_k8s_cmd() {
  local name="$1" minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local v="k8s.io/component-base/version" c="k8s.io/client-go/pkg/version"
  go_build_main "$name" "$K8S_VERSION" k8s.io/kubernetes "$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/$name" "$name" \
    "-X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $c.gitVersion=$K8S_VERSION -X $c.gitMajor=1 -X $c.gitMinor=$minor -X $c.gitTreeState=clean" \
    k8s_replaces
}

# CoreDNS with only the plugins the node tier's cluster DNS uses (CoreDNS's documented way of
# choosing plugins at compile time: a main package that imports them and sets the directive
# order). The full plugin set pulls every cloud SDK; this one needs little beyond client-go.
# Listed in the order they see a query (CoreDNS's plugin.cfg order). The cache key is the version
# only: after changing this list, remove $CACHE/bin/coredns-<version>.
COREDNS_PLUGINS=(ready health errors loadbalance cache kubernetes)
coredns_main() {
  local p directives=""
  for p in "${COREDNS_PLUGINS[@]}"; do directives+="${directives:+, }\"$p\""; done
  {
    printf 'package main\n\nimport (\n'
    printf '\t"github.com/coredns/coredns/core/dnsserver"\n\t"github.com/coredns/coredns/coremain"\n'
    for p in "${COREDNS_PLUGINS[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
    printf ')\n\nfunc init() {\n\tdnsserver.Directives = []string{%s}\n}\n\n' "$directives"
    printf 'func main() { coremain.Run() }\n'
  } >main.go
}

build_coredns() {
  go_build_main coredns "$COREDNS_VERSION" github.com/coredns/coredns "$COREDNS_VERSION" \
    github.com/coredns/coredns/coremain coredns "" coredns_main .
}

build_etcd() {
  [[ "$(printf '%s\n' v3.5.13 "$ETCD_VERSION" | sort -V | head -1)" == v3.5.13 ]] ||
    die "etcd $ETCD_VERSION is too old: kube-apiserver needs >= v3.5.13 (RequestWatchProgress)"
  go_build_main etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" \
    go.etcd.io/etcd/server/v3 etcd ""
}

build_helm() {
  go_build_main helm "$HELM_VERSION" helm.sh/helm/v3 "$HELM_VERSION" \
    helm.sh/helm/v3/cmd/helm helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}

# containerd 2.x (github.com/containerd/containerd/v2): containerd, its runc shim and ctr in one
# directory, static (no cgo: the btrfs snapshotter, the only cgo part, is left out by its build
# constraint). Debian bookworm ships 1.6; fleets run 2.x.
build_containerd() {
  local out pkg
  out="$(bin_dir containerd "$CONTAINERD_VERSION")"
  if is_built containerd "$CONTAINERD_VERSION" containerd && [[ -x "$out/ctr" && -x "$out/containerd-shim-runc-v2" ]]; then
    log "containerd $CONTAINERD_VERSION: cached at $out"
    return 0
  fi
  local m=github.com/containerd/containerd/v2 v="-X github.com/containerd/containerd/v2/version"
  local lf="$v.Version=${CONTAINERD_VERSION#v} $v.Revision=feedguard-testbed $v.Package=github.com/containerd/containerd"
  for pkg in containerd containerd-shim-runc-v2 ctr; do
    go_build_main containerd "$CONTAINERD_VERSION" "$m" "$CONTAINERD_VERSION" "$m/cmd/$pkg" "$pkg" "$lf"
  done
}

# runc (github.com/opencontainers/runc): cgo (its nsenter is C) with seccomp (libseccomp-dev on
# the build host, libseccomp2 where it runs), as distributions build it. runc >= 1.3.2 converts a
# container's cpu.shares to cpu.weight with the quadratic map (agent/cgroup/kubelet_facts.h).
build_runc() {
  (
    export CGO_ENABLED=1
    go_build_main runc "$RUNC_VERSION" github.com/opencontainers/runc "$RUNC_VERSION" \
      github.com/opencontainers/runc runc "-X main.gitCommit=feedguard-testbed" "" \
      "-tags=seccomp github.com/opencontainers/runc"
  )
}

main() {
  local comps=("$@")
  ((${#comps[@]})) || comps=(etcd kube-apiserver kubectl helm kubelet kube-scheduler kube-controller-manager kube-proxy coredns containerd runc)
  log "go $(go env GOVERSION), cache $CACHE, GOMODCACHE=$(go env GOMODCACHE)"
  local t0=$SECONDS c
  for c in "${comps[@]}"; do
    case "$c" in
      kube-apiserver | kubelet | kube-scheduler | kube-controller-manager | kube-proxy | kubectl) build_k8s_cmd "$c" ;;
      coredns) build_coredns ;;
      containerd) build_containerd ;;
      runc) build_runc ;;
      etcd) build_etcd ;;
      helm) build_helm ;;
      *) die "unknown component '$c' (etcd|kube-apiserver|kubectl|helm|kubelet|kube-scheduler|kube-controller-manager|kube-proxy|coredns)" ;;
    esac
  done
  log "done in $((SECONDS - t0))s"
  # Machine-readable summary for testbed.sh and CI.
  printf 'KUBE_APISERVER=%s\nETCD=%s\nHELM=%s\nKUBELET=%s\nKUBE_SCHEDULER=%s\nKUBE_CONTROLLER_MANAGER=%s\nKUBE_PROXY=%s\nCOREDNS=%s\n' \
    "$(bin_dir kube-apiserver "$K8S_VERSION")/kube-apiserver" \
    "$(bin_dir etcd "$ETCD_VERSION")/etcd" "$(bin_dir helm "$HELM_VERSION")/helm" \
    "$(bin_dir kubelet "$K8S_VERSION")/kubelet" "$(bin_dir kube-scheduler "$K8S_VERSION")/kube-scheduler" \
    "$(bin_dir kube-controller-manager "$K8S_VERSION")/kube-controller-manager" \
    "$(bin_dir kube-proxy "$K8S_VERSION")/kube-proxy" "$(bin_dir coredns "$COREDNS_VERSION")/coredns"
}

main "$@"

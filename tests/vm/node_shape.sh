#!/usr/bin/env bash
# node_shape.sh — one node shape of the fleet, real from the kernel up: a qemu VM booted into
# Debian bookworm with systemd 252 as PID 1 (tests/vm/node/image.sh), kubelet with the systemd
# cgroup driver, containerd with SystemdCgroup = true, runc, kube-proxy and the CNI bridge inside
# it; etcd, kube-apiserver, kube-scheduler, kube-controller-manager and CoreDNS on this host in a
# network namespace of the test's own, which qemu's user-mode network makes the guest's 10.0.2.2.
# The chart is installed with helm as users install it (agent.cgroup.driver=systemd, narrow host
# mounts), then the scenario runs inside the guest and its raw observations come back.
#
#   node_shape.sh [--shape NAME] [--scenario NAME] [--results FILE] WORKDIR
#
# Shapes (cgroup, driver, runtime, kubelet):
#   v2-systemd          v2, systemd, containerd $FEEDGUARD_CONTAINERD_VERSION + runc $FEEDGUARD_RUNC_VERSION,
#                       kubelet $FEEDGUARD_K8S_VERSION (the default, and CI's)
#   v2-systemd-debian   v2, systemd, Debian's containerd 1.6 + runc 1.1, kubelet $FEEDGUARD_K8S_VERSION
#   v2-systemd-oldest   v2, systemd, containerd + runc as v2-systemd, kubelet $FEEDGUARD_K8S_OLDEST_VERSION
#   v1-systemd          v1 (systemd.unified_cgroup_hierarchy=0), systemd, runtime as v2-systemd
# Scenarios (tests/vm/node/guest/scenario_NAME.sh): fences (default: every fence kind under
#   daemon-reloads, runtime and kubelet restarts, a resize, a runtime update, a new pod slice;
#   revert checked byte for byte; kubelet's pod status checked for CPU read back from a fenced
#   cgroup), arms (an Idle fence held three ways — the agent's file writes, CPUWeight=idle through
#   systemd's D-Bus API, both — under the same 20 daemon-reloads, then each one's revert),
#   smoke (node up, the chart installed, D-Bus privilege probes).
# --results FILE: the shape's row (tests/vm/node/analyze.py) is appended to FILE (JSON lines).
#
# Exit: 0 pass, 1 fail, 77 cannot run here (not root, binaries or image not built), 124 timeout.
# Env: FEEDGUARD_NODE_MEM (4G), FEEDGUARD_NODE_SMP (2), FEEDGUARD_NODE_TIMEOUT (2400 s),
#      FG_BUILD (build/release: the agent/controller binaries and fg-cgwatch).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TESTBED="$REPO/tests/testbed"

shape=v2-systemd scenario=fences results=""
while (($#)); do
  case "$1" in
    --shape) shape="$2"; shift 2 ;;
    --scenario) scenario="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    -*) echo "node_shape: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
case "$shape" in
  v2-systemd | v2-systemd-debian | v1-systemd) ;;
  v2-systemd-oldest) export FEEDGUARD_K8S_VERSION="${FEEDGUARD_K8S_OLDEST_VERSION:-v1.35.4}" ;;
  *) echo "node_shape: unknown shape $shape" >&2; exit 2 ;;
esac
# shellcheck source=../testbed/versions.env
source "$TESTBED/versions.env"
[[ -f "$HERE/node/guest/scenario_$scenario.sh" ]] || { echo "node_shape: no scenario $scenario" >&2; exit 2; }

T0=$SECONDS
say() { printf '[node-shape %s %(%H:%M:%S)T +%4ds] %s\n' "$shape" -1 "$((SECONDS - T0))" "$*" >&2; }
skip() { say "SKIP: $*"; exit 77; }
die() { say "ERROR: $*"; exit 1; }

((EUID == 0)) || skip "needs root (network namespace, images)"
BUILD="${FG_BUILD:-$REPO/build/release}"
for b in "$BUILD/agent/feedguard-agent" "$BUILD/controller/feedguard-controller" "$BUILD/tests/vm/fg-cgwatch"; do
  [[ -x "$b" ]] || skip "$b not built (cmake --build --preset release)"
done
for b in "$KUBELET" "$KUBE_APISERVER" "$ETCD" "$KUBE_SCHEDULER" "$KUBE_CONTROLLER_MANAGER" "$KUBE_PROXY" \
  "$COREDNS" "$KUBECTL" "$HELM"; do
  [[ -x "$b" ]] || skip "$b not built (tests/testbed/build.sh)"
done
if [[ "$shape" != v2-systemd-debian ]]; then
  for b in "$CONTAINERD_DIR/containerd" "$CONTAINERD_DIR/containerd-shim-runc-v2" "$CONTAINERD_DIR/ctr" "$RUNC"; do
    [[ -x "$b" ]] || skip "$b not built (tests/testbed/build.sh containerd runc)"
  done
fi
for b in ip nsenter openssl python3; do command -v "$b" >/dev/null || skip "$b not installed"; done
command -v mmdebstrap >/dev/null || skip "mmdebstrap not installed (tests/install_deps.sh)"
"$HERE/node/image.sh" >/dev/null || die "building the VM node image failed (tests/vm/node/image.sh)"

(($# == 1)) || { echo "usage: node_shape.sh [--shape NAME] [--scenario NAME] [--results FILE] WORKDIR" >&2; exit 2; }
WORK="$1"
rm -rf --one-file-system "$WORK"
mkdir -p "$WORK/logs"
WORK="$(cd "$WORK" && pwd)"
ID="$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
NETNS="fgshape-$ID"
NODE=fg-node
P="$WORK/payload"  # /fg in the guest
PIDS=()
in_net() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [[ -f "$WORK/apiserver/env" ]] && { in_net "$TESTBED/testbed.sh" down "$WORK/apiserver" >/dev/null 2>&1 || say "WARNING: testbed down failed"; }
  [[ -e "/run/netns/$NETNS" ]] && { ip netns del "$NETNS" || say "WARNING: could not delete netns $NETNS"; }
  rm -rf --one-file-system "$P"
  say "exit $rc after $((SECONDS - T0)) s (work dir $WORK)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- control plane on the host, in a network namespace of our own ----------------------------
ip netns add "$NETNS"
ip -n "$NETNS" link set lo up
say "netns $NETNS: etcd + kube-apiserver $FEEDGUARD_K8S_VERSION (advertising 10.0.2.2)"
FEEDGUARD_TESTBED_SA_ADMISSION=1 FEEDGUARD_TESTBED_ADVERTISE_ADDRESS=10.0.2.2 \
  in_net "$TESTBED/testbed.sh" up "$WORK/apiserver" 2>"$WORK/logs/testbed.log" ||
  { tail -n 20 "$WORK/logs/testbed.log" >&2; die "testbed up failed"; }
# shellcheck disable=SC1091
PORT="$(source "$WORK/apiserver/env" && echo "$APISERVER_PORT")"
ADMIN="$WORK/apiserver/kubeconfig"
PKI="$WORK/apiserver/pki"
spawn() {  # NAME CMD... — in the namespace, logged, stopped by cleanup (nsenter execs CMD in
  local name="$1"  # place, so $! is the daemon's own pid)
  shift
  nsenter --net="/run/netns/$NETNS" -- "$@" </dev/null >"$WORK/logs/$name.log" 2>&1 &
  PIDS+=($!)
}
spawn kube-scheduler "$KUBE_SCHEDULER" --kubeconfig="$ADMIN" --authentication-kubeconfig="$ADMIN" \
  --authorization-kubeconfig="$ADMIN" --leader-elect=false --secure-port=0 --v=1
mkdir -p "$WORK/kcm"
# --flex-volume-plugin-dir in WORK: by default kube-controller-manager creates
# /usr/libexec/kubernetes/kubelet-plugins/volume/exec on the host it runs on.
spawn kube-controller-manager "$KUBE_CONTROLLER_MANAGER" --kubeconfig="$ADMIN" \
  --authentication-kubeconfig="$ADMIN" --authorization-kubeconfig="$ADMIN" --leader-elect=false \
  --secure-port=0 --cert-dir="$WORK/kcm" --flex-volume-plugin-dir="$WORK/kcm/volume-plugins" \
  --service-account-private-key-file="$PKI/sa.key" \
  --root-ca-file="$PKI/ca.crt" --cluster-signing-cert-file="$PKI/ca.crt" \
  --cluster-signing-key-file="$PKI/ca.key" --use-service-account-credentials=false \
  --allocate-node-cidrs=false --v=1
# CoreDNS on every address of the namespace: the guest's pods ask 10.0.2.2:53 (qemu forwards it
# to the namespace's 127.0.0.1).
mkdir -p "$WORK/coredns"
cat >"$WORK/coredns/Corefile" <<COREFILE
.:53 {
    errors
    ready 127.0.0.1:10261
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $ADMIN
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
COREFILE
spawn coredns "$COREDNS" -conf "$WORK/coredns/Corefile"

# ---- the payload: what the guest finds under /fg ------------------------------------------------
mkdir -p "$P/bin" "$P/images" "$P/etc" "$P/out"
cp "$KUBELET" "$KUBE_PROXY" "$KUBECTL" "$HELM" "$BUILD/tests/vm/fg-cgwatch" "$P/bin/"
if [[ "$shape" == v2-systemd-debian ]]; then
  RUNTIME_BIN=/usr/bin  # Debian's containerd + runc, in the image
else
  cp "$CONTAINERD_DIR/containerd" "$CONTAINERD_DIR/containerd-shim-runc-v2" "$CONTAINERD_DIR/ctr" "$RUNC" "$P/bin/"
  RUNTIME_BIN=/fg/bin
fi
cp -r "$REPO/charts/feedguard" "$P/chart"
cp -r "$HERE/node/guest" "$P/guest"
"$REPO/tests/node/images.sh" base "$P/images" >"$WORK/images.list" 2>>"$WORK/logs/images.log" || die "base images"
"$REPO/tests/node/images.sh" feedguard "$P/images" --build-dir "$BUILD" >>"$WORK/images.list" 2>>"$WORK/logs/images.log" ||
  die "feedguard images (log $WORK/logs/images.log)"
# The node's client certificate (system:node:<name>, O=system:nodes) from the API server's CA, so
# the Node authorizer and NodeRestriction treat it as kubelet; kubectl in the guest is admin.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$WORK/node.key" \
  -out "$WORK/node.csr" -subj "/O=system:masters/O=system:nodes/CN=system:node:$NODE" 2>/dev/null
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$WORK/node.ext"
openssl x509 -req -in "$WORK/node.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 2 \
  -extfile "$WORK/node.ext" -out "$WORK/node.crt" 2>/dev/null
guest_kubeconfig() {  # CERT KEY
  cat <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: fg
  cluster: {server: "https://10.0.2.2:$PORT", certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")}
users:
- name: u
  user: {client-certificate-data: $(base64 -w0 <"$1"), client-key-data: $(base64 -w0 <"$2")}
contexts:
- name: fg
  context: {cluster: fg, user: u}
current-context: fg
KCFG
}
guest_kubeconfig "$WORK/node.crt" "$WORK/node.key" >"$P/etc/kubelet.kubeconfig"
sed "s#https://127.0.0.1:$PORT#https://10.0.2.2:$PORT#" "$ADMIN" >"$P/etc/admin.kubeconfig"
grep -q "10.0.2.2:$PORT" "$P/etc/admin.kubeconfig" || die "could not aim the admin kubeconfig at 10.0.2.2"
cgroup=v2
[[ "$shape" == v1-* ]] && cgroup=v1
cat >"$P/shape.env" <<ENV
SHAPE=$shape
SCENARIO=$scenario
CGROUP=$cgroup
DRIVER=systemd
NODE=$NODE
RUNTIME_BIN=$RUNTIME_BIN
K8S_VERSION=$FEEDGUARD_K8S_VERSION
ENV
while read -r file name; do printf '%s %s\n' "$(basename "$file")" "$name"; done <"$WORK/images.list" >"$P/images/list"
say "payload $(du -sh "$P" | cut -f1); waiting for the control plane"
for _ in $(seq 1 120); do
  in_net "$KUBECTL" --kubeconfig "$ADMIN" -n default get serviceaccount default >/dev/null 2>&1 && break
  sleep 0.5
done
in_net "$KUBECTL" --kubeconfig "$ADMIN" -n default get serviceaccount default >/dev/null 2>&1 ||
  die "kube-controller-manager made no default ServiceAccount (log $WORK/logs/kube-controller-manager.log)"

# ---- the node ----------------------------------------------------------------------------------
say "booting the node (cgroup $cgroup, scenario $scenario)"
set +e
in_net "$HERE/node/boot.sh" --cgroup "$cgroup" --mem "${FEEDGUARD_NODE_MEM:-4G}" --smp "${FEEDGUARD_NODE_SMP:-2}" \
  --timeout "${FEEDGUARD_NODE_TIMEOUT:-2400}" "$P" "$WORK/out"
rc=$?
set -e
say "guest exited $rc; observations in $WORK/out"
if [[ -n "$results" && -f "$WORK/out/observations.jsonl" ]]; then
  python3 "$HERE/node/analyze.py" --shape "$shape" "$WORK/out" >>"$results" || { say "analysis failed"; rc=1; }
fi
exit "$rc"

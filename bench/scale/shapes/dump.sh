#!/usr/bin/env bash
# dump.sh [OUT] — the real pods behind the scale ladder's "realistic" shape: starts the node
# tier's real one-node cluster (tests/node/cluster.sh: kubelet, containerd, runc, the scheduler
# and controller manager), advertises 8 nvidia.com/gpu on the node (no device plugin here),
# applies workloads.yaml (Jobs, Deployments, a StatefulSet: see its head), waits until every pod
# runs and is Ready, and writes the pods as the API server holds them (`kubectl get pods -o json
# --show-managed-fields`: what a watch delivers) to OUT
# (default bench/scale/shapes/pods.json); then stops the cluster. Root only; ~2 min.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
OUT="${1:-$HERE/pods.json}"
DIR="$(mktemp -d /tmp/fg-shapes-XXXXXX)"
CLUSTER="$REPO/tests/node/cluster.sh"
down() { "$CLUSTER" down "$DIR/node" >/dev/null 2>&1 || true; rm -rf --one-file-system "$DIR"; }
trap down EXIT
"$CLUSTER" up "$DIR/node"
# shellcheck disable=SC1091
source "$DIR/node/env"
K() { "$KUBECTL" "$@"; }
K patch node "$NODE_NAME" --subresource=status --type=json -p \
  '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "8"},
    {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": "8"}]' >/dev/null
K label node "$NODE_NAME" nvidia.com/gpu.present=true >/dev/null
K create namespace shapes >/dev/null
sed "s|IMAGE|$BUSYBOX_IMAGE|g" "$HERE/workloads.yaml" | K apply -f - >/dev/null
for i in $(seq 1 120); do
  n="$(K -n shapes get pods --no-headers 2>/dev/null | awk '$3 == "Running"' | wc -l)"
  ((n >= 9)) && break
  sleep 1
done
K -n shapes get pods -o wide
((n >= 9)) || { echo "dump.sh: $n of 9 pods Running after 120 s" >&2; exit 1; }
K -n shapes wait --for=condition=Ready pods --all --timeout=60s >/dev/null
K -n shapes get pods -o json --show-managed-fields >"$OUT"
echo "dump.sh: $(jq '.items | length' "$OUT") pods ($KUBELET_VERSION, containerd $CONTAINERD_VERSION) -> $OUT"

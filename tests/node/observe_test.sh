#!/usr/bin/env bash
# observe_test.sh WORKDIR — observation with no policy (issue 30 item 4) on a real one-node
# cluster (tests/node/cluster.sh), the chart helm-installed with observation on (its default).
# The node advertises 2 nvidia.com/gpu (status capacity, as "advertise extended resources"
# does: no device plugin, no NVML — the figures are feeder wait only, and the report says so).
# No FencePolicy exists at any point.
#   1. Two GPU pods that fit: `quiet` sleeps, `fits` runs one busy loop under a 1-CPU request on
#      the 2-CPU node. Neither starves: StarvationReport/cluster counts 2 GPU pods, 0 starving,
#      and lists no pod.
#   2. A host process contender: `hostwait` (a GPU pod with two busy loops, 250m) beside two busy
#      loops this test runs on the host, outside every pod cgroup. It starves; its top contender
#      is the node ("kind: Node"), which took more CPU than every pod contender together.
#   3. Pod contenders: the host loops stop; `trainer` (a GPU pod with two busy loops, 250m) beside
#      two batch pods with one busy loop each. It starves; its contenders over the last minute
#      name both batch pods, and no GPU figure is claimed (gpuSampled false).
#   4. Observation writes nothing: every knob file of every pod of phases 1-3 and of kubelet's
#      QoS tiers holds the bytes it held before observation saw it (kubelet's own writes, made
#      when the pods came and went, are taken from a snapshot after the last pod started).
# Exit: 0 pass, 1 fail, 77 skipped (not root).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
node_init observe "$@"

HOST_PIDS=()
stop_host_load() {
  local p
  for p in "${HOST_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${HOST_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  HOST_PIDS=()
}
trap 'stop_host_load; lib_on_exit' EXIT

node_up
import_feedguard_images
# Samples every 2 s, the report written every 2 s: the phases take seconds, not minutes.
helm_install_fg --set observe.periodSeconds=2 --set observe.topK=8 \
  --set observe.reportIntervalSeconds=2
$K create namespace "$WNS" >/dev/null
$K patch node "$NODE_NAME" --subresource=status --type=json -p \
  '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "2"},
    {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": "2"}]' >/dev/null ||
  fail "cannot advertise nvidia.com/gpu on the node"

SPIN='while :; do :; done'
# gpu_pod NAME REQUEST-CPU SCRIPT — a bare pod holding one nvidia.com/gpu.
gpu_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $WNS, labels: {app: $1}}
spec:
$(busybox_spec "[sh, -c, '$3']" "{requests: {cpu: $2}, limits: {nvidia.com/gpu: 1}}" | sed 's/^/  /')
---
YAML
}
report() { $K get starvationreport cluster -o json 2>/dev/null || echo '{}'; }
rjq() { report | jq -r "$@"; }
pod_uid() { $K -n "$WNS" get pod "$1" -o 'jsonpath={.metadata.uid}'; }
wait_ready() {
  $K -n "$WNS" wait --for=condition=Ready "$@" --timeout=120s >/dev/null || fail "pods $* not Ready"
}

# ---- 1. GPU pods that fit ------------------------------------------------------------------
say "1. two GPU pods that fit their node: one asleep, one busy within its 1-CPU request"
{ gpu_pod quiet 100m 'exec sleep 86400'; gpu_pod fits 1 "$SPIN"; } | $K apply -f - >/dev/null
wait_ready pod/quiet pod/fits
observed() { [[ "$(rjq '.status.cluster.gpuPods // 0')" == 2 ]]; }
s=$(wait_until 60 "StarvationReport counts the 2 GPU pods" observed)
sleep 8  # a few more samples of both
[[ "$(rjq '.status.cluster.starvingPods')" == 0 && "$(rjq '.status.pods | length')" == 0 ]] ||
  fail "a pod that fits its request is reported starving: $(rjq '.status')"
pass "2 GPU pods observed ${s}s after they were Ready, none starving, none listed"
# The knob files as kubelet left them, before the busy phases (phase 4 compares).
declare -A REL
for p in quiet fits; do REL[$p]="$(pod_rel "$(pod_uid "$p")" Burstable)"; done

# ---- 2. a host process ---------------------------------------------------------------------
say "2. a GPU pod starved by processes on the host, outside every pod"
$K -n "$WNS" delete pod fits --wait=true >/dev/null
gpu_pod hostwait 250m "$SPIN & $SPIN" | $K apply -f - >/dev/null
wait_ready pod/hostwait
REL[hostwait]="$(pod_rel "$(pod_uid hostwait)" Burstable)"
snapshot "$WORK/snap/before.txt" "${REL[quiet]}/*" "${REL[hostwait]}/*" "${QOS[@]}"
for _ in 1 2; do
  timeout 300 sh -c "$SPIN" &
  HOST_PIDS+=($!)
done
huid="$(pod_uid hostwait)"
node_first() {
  [[ "$(rjq --arg u "$huid" '.status.pods[] | select(.uid == $u) | .windows[0].contenders[0].kind')" == Node ]]
}
s=$(wait_until 60 "hostwait reported starving with the node as its top contender" node_first)
w60="$(rjq --arg u "$huid" '.status.pods[] | select(.uid == $u) | .windows[0]')"
node_s="$(jq '[.contenders[] | select(.kind == "Node") | .cpuSeconds] | add' <<<"$w60")"
pods_s="$(jq '[.contenders[] | select(.kind == "Pod") | .cpuSeconds] | add // 0' <<<"$w60")"
awk -v n="$node_s" -v p="$pods_s" 'BEGIN {exit !(n > p)}' ||
  fail "the node took ${node_s}s, the pods ${pods_s}s: $w60"
pass "hostwait: waited $(jq .waitFraction <<<"$w60") of its last minute ($(jq -r .waitSource <<<"$w60")); top contender the node (${node_s} CPU-s vs ${pods_s} for pods), ${s}s"
stop_host_load

# ---- 3. pod contenders ---------------------------------------------------------------------
say "3. a GPU pod starved by two batch pods"
$K -n "$WNS" delete pod hostwait --wait=true >/dev/null
{
  gpu_pod trainer 250m "$SPIN & $SPIN"
  deploy batch-a neighbour '{requests: {cpu: 100m}}' "$SPIN"
  deploy batch-b neighbour '{requests: {cpu: 100m}}' "$SPIN"
} | $K apply -f - >/dev/null
wait_ready pod/trainer
wait_rollouts batch-a batch-b
REL[trainer]="$(pod_rel "$(pod_uid trainer)" Burstable)"
for d in batch-a batch-b; do
  read -r uid qos _ <<<"$(pod_of "$d")"
  REL[$d]="$(pod_rel "$uid" "$qos")"
done
snapshot "$WORK/snap/before3.txt" "${REL[quiet]}/*" "${REL[trainer]}/*" "${REL[batch-a]}/*" \
  "${REL[batch-b]}/*" "${QOS[@]}"
tuid="$(pod_uid trainer)"
both_named() {
  local names
  names="$(rjq --arg u "$tuid" '.status.pods[] | select(.uid == $u) | .windows[0].contenders[]
    | select(.kind == "Pod") | .name' | sort | tr '\n' ' ')"
  [[ "$names" == batch-a-*batch-b-* ]]
}
s=$(wait_until 60 "trainer reported starving with both batch pods as contenders" both_named)
w60="$(rjq --arg u "$tuid" '.status.pods[] | select(.uid == $u) | .windows[0]')"
[[ "$(jq .gpuSampled <<<"$w60")" == false && "$(jq 'has("gpuLostSeconds")' <<<"$w60")" == false ]] ||
  fail "a GPU figure without NVML: $w60"
[[ "$(rjq --arg u "$tuid" '.status.pods[] | select(.uid == $u) | .name')" == trainer ]] ||
  fail "the report does not name the trainer"
pass "trainer: waited $(jq .waitFraction <<<"$w60") of its last minute; contenders $(jq -c '[.contenders[] | "\(.kind):\(.name // "-"):\(.cpuSeconds)"]' <<<"$w60"); no GPU figure (no NVML), ${s}s"

# ---- 4. nothing written --------------------------------------------------------------------
say "4. observation wrote no cgroup file"
snapshot "$WORK/snap/after3.txt" "${REL[quiet]}/*" "${REL[trainer]}/*" "${REL[batch-a]}/*" \
  "${REL[batch-b]}/*" "${QOS[@]}"
diff_snap "$WORK/snap/before3.txt" "$WORK/snap/after3.txt" "observation wrote cgroup files"
grep -F "${REL[quiet]}" "$WORK/snap/before.txt" >"$WORK/snap/q1.txt"
grep -F "${REL[quiet]}" "$WORK/snap/after3.txt" >"$WORK/snap/q2.txt"
diff_snap "$WORK/snap/q1.txt" "$WORK/snap/q2.txt" "quiet's files changed across phases 2-3"
pass "$(wc -l <"$WORK/snap/after3.txt") knob files of 4 pods and the QoS tiers hold their bytes; quiet's $(wc -l <"$WORK/snap/q1.txt") unchanged since phase 2"
[[ -z "$($K get fencepolicies -o name)" ]] || fail "a FencePolicy exists"
say "PASS in $((SECONDS - T0))s"

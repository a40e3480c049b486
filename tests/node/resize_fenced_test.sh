#!/usr/bin/env bash
# resize_fenced_test.sh WORKDIR — kubelet's in-place resize against feedguard's fences, on the
# real node (tests/node/cluster.sh): the ownership rule of docs/DESIGN.md §4 seen with the real
# kubelet, containerd and runc. The agent runs as `feedguard-agent apply/revert` on the host
# against the kubelet-made cgroups (no controller needed for this).
#   1. Weight fence; kubelet resizes the pod 250m → 400m (it rewrites pod and container
#      cpu.shares); the next apply re-fences; the revert leaves kubelet's new value, not the
#      pre-resize one.
#   2. Idle fence; kubelet resizes the pod while cpu.idle=1: the kernel refuses kubelet's weight
#      write (EINVAL) and kubelet retries; given the pod's new request the agent steps aside
#      (ResizePending, cpu.idle 0), kubelet's retry lands, the next apply re-fences with
#      kubelet's value as the original and the resize completes.
#   3. Every file the agent touched holds kubelet's latest bytes; the QoS tiers are byte-identical.
# Exit: 0 pass, 1 fail, 77 skipped (not root).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
node_init resize "$@"
AGENT="$FG_AGENT"
NSP=fg-resize
node_exit_hook() {  # RC — kubelet's word on the resize, and the agent's fences withdrawn
  if (($1)) && [[ -d "$NODE/logs" ]]; then
    say "kubelet log (resize/cgroup lines):"
    grep -iE "resize|shares|cgroup.*error|EINVAL|invalid argument" "$NODE/logs/kubelet.log" 2>/dev/null | tail -n 20 || true
  fi
  [[ -d "$WORK/state" && -n "${CGROUP_ROOT:-}" ]] && agent revert >/dev/null 2>&1
}

node_up
agent() { "$AGENT" "$@" --cgroup-root "$CGROUP_ROOT" --cgroup-driver cgroupfs --cgroup-version v1 \
  --state-dir "$WORK/state" --cpu-manager-state ""; }

$K create namespace "$NSP" >/dev/null
for p in trainer nb-weight nb-idle; do
  sleep_pod "$p" "$NSP" '{requests: {cpu: 250m}, limits: {cpu: "1"}}'
done | $K apply -f - >/dev/null
$K -n "$NSP" wait --for=condition=Ready pod --all --timeout=180s >/dev/null || fail "pods not Ready"
jp() { $K -n "$NSP" get pod "$1" -o "jsonpath=$2"; }
declare -A DIR CID
for p in trainer nb-weight nb-idle; do
  uid="$(jp "$p" '{.metadata.uid}')"
  CID[$p]="$(jp "$p" '{.status.containerStatuses[0].containerID}')"
  DIR[$p]="$CPU/kubepods/burstable/pod$uid"
  [[ -d "${DIR[$p]}" ]] || fail "${DIR[$p]} missing"
done
pass "3 Burstable pods Running (250m request, 1 CPU limit)"
podref() {  # NAME POLICY
  jq -nc --arg n "$1" --arg ns "$NSP" --arg uid "$(jp "$1" '{.metadata.uid}')" --arg c "${CID[$1]}" --arg pol "$2" \
    '{policy: $pol, pod: {uid: $uid, namespace: $ns, name: $n, qosClass: "BURSTABLE",
      containers: [{containerId: $c}], cpuRequestMilli: "250", cpuLimitMilli: "1000"}}'
}
jq -n --argjson t "$(podref trainer w)" --argjson w "$(podref nb-weight w)" --argjson i "$(podref nb-idle i)" \
  '{nodeName: "n", version: "1", policies: [{name: "w", neighbourFence: "WEIGHT"}, {name: "i", neighbourFence: "IDLE"}],
    trainers: [$t], neighbours: [$w, $i]}' >"$WORK/fence.json"

snap() { for f in "$CPU"/kubepods/cpu.shares "$CPU"/kubepods/{burstable,besteffort}/cpu.{shares,cfs_quota_us,cfs_period_us,idle}; do printf '%s=%s\n' "$f" "$(cat "$f")"; done; }
tiers_before="$(snap)"
w_pod="${DIR[nb-weight]}/cpu.shares" w_ctr="${DIR[nb-weight]}/${CID[nb-weight]#containerd://}/cpu.shares"
i_pod="${DIR[nb-idle]}" i_ctr="${DIR[nb-idle]}/${CID[nb-idle]#containerd://}"
[[ "$(cat "$w_pod")" == 256 ]] || fail "nb-weight pod cpu.shares is $(cat "$w_pod"), expected 256"

agent apply --fence "$WORK/fence.json" >"$WORK/apply1.json" || fail "apply: $(jq -c '.pods' "$WORK/apply1.json")"
[[ "$(cat "$w_pod")" == 2 && "$(cat "$i_pod/cpu.idle")" == 1 ]] || fail "fences not in place"
pass "fenced: nb-weight pod cpu.shares 256 → 2, nb-idle pod cpu.idle 1 (shares reads $(cat "$i_pod/cpu.shares"))"

# eventually FILE VALUE TIMEOUT_S
eventually() { local t=$SECONDS; while ((SECONDS - t <= $3)); do [[ "$(cat "$1" 2>/dev/null)" == "$2" ]] && { echo $((SECONDS - t)); return 0; }; sleep 0.5; done; return 1; }
resize() { $K -n "$NSP" patch pod "$1" --subresource resize --type strategic \
  -p '{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"400m"}}}]}}' >/dev/null; }

# ---- 1. Weight fence + resize --------------------------------------------------------------
resize nb-weight || fail "resize nb-weight"
s=$(eventually "$w_pod" 409 60) || fail "kubelet did not write the resized pod cpu.shares (holds $(cat "$w_pod"))"
pass "kubelet resized nb-weight: pod cpu.shares 2 → 409 after ${s}s (container $(cat "$w_ctr"))"
agent apply --fence "$WORK/fence.json" >"$WORK/apply2.json" || fail "re-apply"
[[ "$(cat "$w_pod")" == 2 ]] || fail "re-apply did not re-fence nb-weight"
pass "the agent re-fenced nb-weight (cpu.shares 2) and took kubelet's 409 as the original"

# ---- 2. Idle fence + resize ----------------------------------------------------------------
resize nb-idle || fail "resize nb-idle"
sleep 5
idle_shares="$(cat "$i_pod/cpu.shares")" idle_ctr="$(cat "$i_ctr/cpu.shares")"
cond="$($K -n "$NSP" get pod nb-idle -o json | jq -c '[.status.conditions[]? | select(.type | test("Resize")) | {type, status, reason, message}]')"
say "while cpu.idle=1: pod cpu.shares reads $idle_shares, container $idle_ctr; resize conditions: $cond"
grep -iE "nb-idle|$(jp nb-idle '{.metadata.uid}')" "$NODE/logs/kubelet.log" | grep -iE "Failed to set cgroup config" | tail -n 1 | sed 's/^/    kubelet: /' || true
# The controller would now send the pod's new request (spec.containers[].resources changed):
# the agent steps aside (cpu.idle 0), kubelet's retry lands, the next apply re-fences.
req="$(jp nb-idle '{.spec.containers[0].resources.requests.cpu}')"
[[ "$req" == 400m ]] || fail "nb-idle request is $req after the resize"
jq --arg uid "$(jp nb-idle '{.metadata.uid}')" \
  '(.neighbours[] | select(.pod.uid == $uid) | .pod.cpuRequestMilli) = "400" | .version = "2"' \
  "$WORK/fence.json" >"$WORK/fence2.json"
agent apply --fence "$WORK/fence2.json" >"$WORK/apply3.json" || true
r="$(jq -r --arg uid "$(jp nb-idle '{.metadata.uid}')" '.pods[] | select(.uid == $uid) | .reason // "enforced"' "$WORK/apply3.json")"
[[ "$r" == ResizePending && "$(cat "$i_pod/cpu.idle")" == 0 ]] || fail "the Idle fence did not step aside (reason $r, cpu.idle $(cat "$i_pod/cpu.idle"))"
pass "the agent saw the new request and lifted nb-idle's Idle fence (ResizePending)"
s=$(eventually "$i_pod/cpu.shares" 409 60) || fail "kubelet's retry did not land (pod cpu.shares $(cat "$i_pod/cpu.shares"))"
pass "kubelet's retry landed ${s}s later: pod cpu.shares 409 (container $(cat "$i_ctr/cpu.shares"))"
agent apply --fence "$WORK/fence2.json" >"$WORK/apply4.json" || fail "re-fence: $(jq -c .pods "$WORK/apply4.json")"
[[ "$(cat "$i_pod/cpu.idle")" == 1 ]] || fail "nb-idle not re-fenced"
orig="$(jq -r --arg f "$i_pod/cpu.shares" '.entries[] | select(.path == $f) | .original' "$WORK/state/checkpoint.json")"
[[ "$(tr -d '\n' <<<"$orig")" == 409 ]] || fail "the recorded original is '$orig', not kubelet's 409"
for _ in $(seq 30); do
  cond="$($K -n "$NSP" get pod nb-idle -o json | jq -c '[.status.conditions[]? | select(.type | test("Resize"))]')"
  [[ "$cond" == "[]" ]] && break; sleep 1
done
[[ "$cond" == "[]" ]] || fail "resize conditions still set: $cond"
pass "nb-idle Idle-fenced again with kubelet's 409 as the original; the resize completed (no Resize conditions)"

# ---- 3. revert -----------------------------------------------------------------------------
agent revert >"$WORK/revert.json" || fail "revert: $(jq -c '.reverts' "$WORK/revert.json")"
[[ "$(cat "$w_pod")" == 409 ]] || fail "revert put $(cat "$w_pod") into nb-weight's pod cpu.shares: kubelet's resize (409) was lost"
pass "revert left kubelet's resize on nb-weight (pod cpu.shares 409, not the pre-resize 256)"
[[ "$(cat "$i_pod/cpu.idle")" == 0 ]] || fail "nb-idle still idle"
[[ "$(cat "$i_pod/cpu.shares")" == 409 ]] || fail "revert put $(cat "$i_pod/cpu.shares") into nb-idle's pod cpu.shares, kubelet's is 409"
pass "revert left kubelet's resize on nb-idle too (pod cpu.shares 409)"
[[ "$(cat "$i_ctr/cpu.shares")" == 409 ]] || fail "nb-idle container cpu.shares $(cat "$i_ctr/cpu.shares")"
[[ "$(snap)" == "$tiers_before" ]] || say "note: QoS tier files changed (kubelet follows the resized requests): $(diff <(echo "$tiers_before") <(snap) | tr '\n' ' ')"
[[ -z "$(ls "$WORK/state" 2>/dev/null | grep -v lock)" || "$(jq '.entries | length' "$WORK/state/checkpoint.json")" == 0 ]] || fail "checkpoint not empty after revert"
pass "all fences withdrawn; every file holds kubelet's latest value"
node_down
say "PASS in $((SECONDS - T0))s"

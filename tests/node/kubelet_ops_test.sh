#!/usr/bin/env bash
# kubelet_ops_test.sh WORKDIR — what kubelet does every day to a fenced pod, on the real node
# (tests/node/cluster.sh: kubelet, containerd + runc, cgroup v1), the chart helm-installed and the
# fences set by FencePolicies as users set them:
#   1. Cpuset fence + a trainer pinned to a whole core: a neighbour's container and the trainer's
#      container crash and are restarted by kubelet (v1 gives the new container cgroup a copy of
#      the fenced set). While fenced the policy reads Enforced; after the policy is deleted every
#      cpuset file of both pods — the restarted containers' too — holds its pre-fence bytes.
#   2. Idle fence, the neighbour resized in place to exactly `cpu: 1` (1024 shares: what leaving
#      idle leaves in the file, so the value never "changes"): the fence comes back after
#      kubelet's write, the resize completes, the policy reads Enforced (not ResizePending), and
#      the delete leaves kubelet's 1024.
#   3. Quota fence on a neighbour with a CPU limit, resized in place (request and limit): kubelet's
#      pod write and runc's container write both land (no Contested), the fence comes back, the
#      delete leaves kubelet's and runc's new quotas.
#   4. Quota fence on a neighbour whose native sidecar (an init container with restartPolicy:
#      Always) has its own CPU limit above the fence's share: the fence lands (the sidecar is a
#      container of the pod like any other), the policy reads Enforced, and the delete leaves
#      every bandwidth file of the pod as it was.
# Exit: 0 pass, 1 fail, 77 skipped (not root).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
node_init ops "$@"

node_up
import_feedguard_images
helm_install_fg
$K create namespace "$WNS" >/dev/null

# A busybox pod whose main container exits when /tmp/crash appears (kubectl exec touches it);
# kubelet restarts it in a fresh container (and cgroup) with an empty /tmp.
crashable() {  # NAME ROLE RESOURCES
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $WNS, labels: {app: $1, feedguard.io/role: $2}}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Always
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'rm -f /tmp/crash; while [ ! -e /tmp/crash ]; do sleep 0.5; done; exit 1']
    resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}]
    resources: $3
---
YAML
}
policy() {  # NAME FENCE NEIGHBOUR-APP TRAINER-CPU-YAML [EXTRA]
  cat <<YAML
apiVersion: feedguard.io/v1alpha1
kind: FencePolicy
metadata: {name: $1}
spec:
  trainers:
    podSelector: {matchLabels: {app: trainer-$1}}
$4
  neighbours:
    podSelector: {matchLabels: {app: $3}}
    fence: $2
${5:-}
YAML
}
# pair_up TRAINER NEIGHBOUR NEIGHBOUR-RESOURCES — a 250m trainer and a neighbour, both Ready.
pair_up() {
  { crashable "$1" trainer '{requests: {cpu: 250m}}'; crashable "$2" neighbour "$3"; } | $K apply -f - >/dev/null
  $K -n "$WNS" wait --for=condition=Ready "pod/$1" "pod/$2" --timeout=180s >/dev/null || fail "pods not Ready"
}
jp() { $K -n "$WNS" get pod "$1" -o "jsonpath=$2"; }
pod_dir() { echo "$(pod_rel "$(jp "$1" '{.metadata.uid}')" "$(jp "$1" '{.status.qosClass}')")"; }
restarts() { jp "$1" '{.status.containerStatuses[0].restartCount}'; }
cid() { local c; c="$(jp "$1" '{.status.containerStatuses[0].containerID}')"; echo "${c#containerd://}"; }
running_again() {  # POD RESTARTS-BEFORE
  [[ "$(restarts "$1")" -gt "$2" && "$(jp "$1" '{.status.containerStatuses[0].state.running.startedAt}')" != "" ]]
}
enforced_on_node() { [[ "$(policy_field "$1" '{.status.nodes.enforced}')" == 1 ]]; }
failures_of() { policy_field "$1" '{.status.failures}'; }
policy_gone() { ! $K get fencepolicy "$1" >/dev/null 2>&1; }
crash() { $K -n "$WNS" exec "$1" -- touch /tmp/crash; }
cpuset_files() {  # POD — every cpuset.cpus under the pod's dir (pod, sandbox, containers)
  find "$CPUSET/$(pod_dir "$1")" -name cpuset.cpus | sort
}
snap_cpusets() {  # OUT POD...
  local out="$1" p f
  shift
  : >"$out"
  for p in "$@"; do for f in $(cpuset_files "$p"); do printf '%s\t%s\n' "$f" "$(cat "$f")" >>"$out"; done; done
}

# ---- 1. container restarts under a Cpuset fence and pinning ------------------------------------
say "1. container restarts under a Cpuset fence and a pinned trainer"
pair_up trainer-cpuset nb-cpuset '{requests: {cpu: 250m}}'
all_cpus="$(cat "$CPUSET/cpuset.cpus")"
snap_cpusets "$WORK/snap/cpuset.before" trainer-cpuset nb-cpuset
policy cpuset Cpuset nb-cpuset '    cpu: {cores: 1, placement: WholeCores, numa: Ignore}' | $K apply -f - >/dev/null
wait_until "$FENCE_TIMEOUT_S" "Cpuset policy enforced" enforced_on_node cpuset >/dev/null
t_cpus="$(cat "$CPUSET/$(pod_dir trainer-cpuset)/cpuset.cpus")"
n_cpus="$(cat "$CPUSET/$(pod_dir nb-cpuset)/cpuset.cpus")"
[[ "$t_cpus" != "$all_cpus" && "$n_cpus" != "$all_cpus" ]] || fail "not confined: trainer $t_cpus, neighbour $n_cpus (node $all_cpus)"
pass "trainer pinned to $t_cpus, neighbour confined to $n_cpus (node $all_cpus)"
for p in nb-cpuset trainer-cpuset; do
  before="$(restarts "$p")" old="$(cid "$p")"
  crash "$p"
  wait_until 120 "$p's container restarted" running_again "$p" "$before" >/dev/null
  new="$(cid "$p")"
  [[ "$new" != "$old" ]] || fail "$p: same container id after the restart"
  f="$CPUSET/$(pod_dir "$p")/$new/cpuset.cpus"
  want="$([[ $p == nb-* ]] && echo "$n_cpus" || echo "$t_cpus")"
  wait_until 30 "$p's new container confined to $want" bash -c "[[ \"\$(cat '$f')\" == '$want' ]]" >/dev/null
  pass "$p restarted (container ${new:0:12}): its new cgroup holds the fence's $want"
done
wait_until "$FENCE_TIMEOUT_S" "Cpuset policy enforced after the restarts" enforced_on_node cpuset >/dev/null
[[ "$(failures_of cpuset)" == "" || "$(failures_of cpuset)" == "[]" ]] || fail "policy failures while fenced: $(failures_of cpuset)"
pass "while fenced: the policy reads Enforced on the node, no failures"
$K delete fencepolicy cpuset --wait=true --timeout=120s >/dev/null
wait_until 60 "Cpuset policy gone" policy_gone cpuset >/dev/null
snap_cpusets "$WORK/snap/cpuset.after" trainer-cpuset nb-cpuset
# The restarted containers' dirs are new: each must hold what its pod held before the fence.
while IFS=$'\t' read -r f v; do
  [[ "$v" == "$all_cpus" ]] || fail "$f holds '$v' after the policy was deleted, not the pod's '$all_cpus'"
done <"$WORK/snap/cpuset.after"
awk -F'\t' -v all="$all_cpus" '$2 != all {bad = 1} END {exit bad}' "$WORK/snap/cpuset.before" ||
  fail "the pods did not start on every CPU (before: $(cat "$WORK/snap/cpuset.before"))"
pass "after the delete every cpuset file of both pods ($(wc -l <"$WORK/snap/cpuset.after"), restarted containers' included) holds '$all_cpus', as before the fence"
for p in nb-cpuset trainer-cpuset; do
  tasks_cpus="$($K -n "$WNS" exec "$p" -- sh -c 'grep Cpus_allowed_list /proc/1/status' | awk '{print $2}')"
  [[ "$tasks_cpus" == "$all_cpus" ]] || fail "$p's process still runs on $tasks_cpus"
done
pass "the restarted containers' processes run on every CPU again (Cpus_allowed_list $all_cpus)"
$K -n "$WNS" delete pod trainer-cpuset nb-cpuset --wait=true >/dev/null

# ---- 2. Idle fence, resize to exactly 1 CPU ----------------------------------------------------
say "2. Idle fence; the neighbour resized in place to cpu: 1"
pair_up trainer-idle nb-idle '{requests: {cpu: 250m}, limits: {cpu: "2"}}'
d="$CPU/$(pod_dir nb-idle)"
[[ "$(cat "$d/cpu.shares")" == 256 ]] || fail "nb-idle cpu.shares $(cat "$d/cpu.shares"), expected 256"
policy idle Idle nb-idle '' | $K apply -f - >/dev/null
wait_until "$FENCE_TIMEOUT_S" "Idle policy enforced" enforced_on_node idle >/dev/null
[[ "$(cat "$d/cpu.idle")" == 1 ]] || fail "nb-idle not idle"
$K -n "$WNS" patch pod nb-idle --subresource resize --type strategic \
  -p '{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"1"}}}]}}' >/dev/null
resize_done() { [[ "$(jp nb-idle '{.status.containerStatuses[0].resources.requests.cpu}')" == 1 ]] &&
  [[ -z "$(jp nb-idle '{.status.conditions[?(@.type=="PodResizeInProgress")].status}')" ]]; }
s=$(wait_until 120 "kubelet completed the resize to cpu: 1" resize_done)
refenced() { [[ "$(cat "$d/cpu.idle")" == 1 ]]; }
s2=$(wait_until 90 "nb-idle fenced again after the resize" refenced)
wait_until 90 "Idle policy reads Enforced again (not ResizePending)" enforced_on_node idle >/dev/null
pass "resize to cpu: 1 completed in ${s}s; the Idle fence was back ${s2}s later; the policy reads Enforced"
$K delete fencepolicy idle --wait=true --timeout=120s >/dev/null
wait_until 60 "Idle policy gone" policy_gone idle >/dev/null
[[ "$(cat "$d/cpu.idle")" == 0 && "$(cat "$d/cpu.shares")" == 1024 ]] ||
  fail "after the delete nb-idle holds cpu.idle $(cat "$d/cpu.idle"), cpu.shares $(cat "$d/cpu.shares"); kubelet's is 1024"
pass "after the delete nb-idle holds kubelet's 1024 shares (cpu.idle 0)"
$K -n "$WNS" delete pod trainer-idle nb-idle --wait=true >/dev/null

# ---- 3. Quota fence, resize with a limit -------------------------------------------------------
say "3. Quota fence on a neighbour with a limit; resized in place (request and limit)"
pair_up trainer-quota nb-quota '{requests: {cpu: 250m}, limits: {cpu: "1"}}'
d="$CPU/$(pod_dir nb-quota)"
c="$d/$(cid nb-quota)"
policy quota Quota nb-quota '' '    maxCPU: "25%"' | $K apply -f - >/dev/null
wait_until "$FENCE_TIMEOUT_S" "Quota policy enforced" enforced_on_node quota >/dev/null
fenced_quota="$(cat "$d/cpu.cfs_quota_us")"
[[ "$fenced_quota" != 100000 && "$fenced_quota" != -1 ]] || fail "nb-quota not capped ($fenced_quota)"
pass "nb-quota capped: pod cfs_quota_us 100000 -> $fenced_quota (container $(cat "$c/cpu.cfs_quota_us"))"
$K -n "$WNS" patch pod nb-quota --subresource resize --type strategic \
  -p '{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"400m"},"limits":{"cpu":"1500m"}}}]}}' >/dev/null
qresize_done() { [[ "$(jp nb-quota '{.status.containerStatuses[0].resources.limits.cpu}')" == 1500m ]] &&
  [[ -z "$(jp nb-quota '{.status.conditions[?(@.type=="PodResizeInProgress")].status}')" ]]; }
s=$(wait_until 120 "kubelet completed the resize to 400m / 1500m" qresize_done)
qrefenced() { [[ "$(cat "$d/cpu.cfs_quota_us")" == "$fenced_quota" ]]; }
s2=$(wait_until 90 "nb-quota capped again after the resize" qrefenced)
wait_until 90 "Quota policy reads Enforced again" enforced_on_node quota >/dev/null
[[ "$(failures_of quota)" != *Contested* ]] || fail "the quota fence was given up: $(failures_of quota)"
pass "resize (400m / 1500m) completed in ${s}s; the cap was back ${s2}s later; not Contested"
$K delete fencepolicy quota --wait=true --timeout=120s >/dev/null
wait_until 60 "Quota policy gone" policy_gone quota >/dev/null
[[ "$(cat "$d/cpu.cfs_quota_us")" == 150000 && "$(cat "$c/cpu.cfs_quota_us")" == 150000 ]] ||
  fail "after the delete nb-quota holds pod $(cat "$d/cpu.cfs_quota_us"), container $(cat "$c/cpu.cfs_quota_us"); kubelet's and runc's are 150000"
[[ "$(cat "$d/cpu.shares")" == 409 ]] || fail "nb-quota cpu.shares $(cat "$d/cpu.shares"), kubelet's for 400m is 409"
pass "after the delete nb-quota holds kubelet's and runc's new quota (150000) and shares (409)"

$K -n "$WNS" delete pod trainer-quota nb-quota --wait=true >/dev/null

# ---- 4. Quota fence on a pod with a native sidecar that has its own limit ----------------------
say "4. Quota fence on a neighbour with a native sidecar (initContainers, restartPolicy: Always) with a limit"
{
  crashable trainer-side trainer '{requests: {cpu: 250m}}'
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: nb-side, namespace: $WNS, labels: {app: nb-side, feedguard.io/role: neighbour}}
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: side
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    restartPolicy: Always
    command: [sh, -c, 'while true; do sleep 1; done']
    resources: {requests: {cpu: 100m}, limits: {cpu: "1"}}
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'while true; do sleep 1; done']
    resources: {requests: {cpu: 250m}, limits: {cpu: "1"}}
YAML
} | $K apply -f - >/dev/null
$K -n "$WNS" wait --for=condition=Ready pod/trainer-side pod/nb-side --timeout=180s >/dev/null || fail "pods not Ready"
d="$CPU/$(pod_dir nb-side)"
side_id="$(jp nb-side '{.status.initContainerStatuses[0].containerID}')"
side="$d/${side_id#containerd://}"
[[ -f "$side/cpu.cfs_quota_us" ]] || fail "no cgroup for the sidecar at $side"
snap_quotas() { find "$d" -name cpu.cfs_quota_us -o -name cpu.cfs_period_us -o -name cpu.cfs_burst_us | sort | while read -r f; do printf '%s\t%s\n' "$f" "$(cat "$f")"; done; }
snap_quotas >"$WORK/snap/side.before"
[[ "$(cat "$side/cpu.cfs_quota_us")" == 100000 ]] || fail "sidecar quota $(cat "$side/cpu.cfs_quota_us"), runc's for 1 CPU is 100000"
policy side Quota nb-side '' '    maxCPU: "25%"' | $K apply -f - >/dev/null
wait_until "$FENCE_TIMEOUT_S" "Quota policy enforced on the pod with a sidecar" enforced_on_node side >/dev/null
side_fenced="$(cat "$d/cpu.cfs_quota_us")"
[[ "$side_fenced" -lt 100000 && "$side_fenced" != -1 ]] || fail "nb-side not capped below its sidecar's 1 CPU (pod quota $side_fenced)"
[[ "$(failures_of side)" == "" || "$(failures_of side)" == "[]" ]] || fail "policy failures while fenced: $(failures_of side)"
pass "nb-side capped: pod cfs_quota_us $side_fenced below its sidecar's own limit (sidecar now $(cat "$side/cpu.cfs_quota_us")); the policy reads Enforced, no failures"
$K delete fencepolicy side --wait=true --timeout=120s >/dev/null
wait_until 60 "Quota policy on the sidecar pod gone" policy_gone side >/dev/null
snap_quotas >"$WORK/snap/side.after"
diff "$WORK/snap/side.before" "$WORK/snap/side.after" >/dev/null ||
  fail "after the delete the sidecar pod's bandwidth files differ: $(diff "$WORK/snap/side.before" "$WORK/snap/side.after" | head -5)"
pass "after the delete every bandwidth file of the sidecar pod ($(wc -l <"$WORK/snap/side.after")) holds its pre-fence bytes"

node_down
say "PASS in $((SECONDS - T0))s"

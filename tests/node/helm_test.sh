#!/usr/bin/env bash
# helm_test.sh WORKDIR — the `node` tier's chart test on a real one-node cluster
# (tests/node/cluster.sh: kubelet, containerd + runc, kube-proxy, CoreDNS): the controller and
# agent images are built from the binaries CI built (tests/node/images.sh feedguard) and
# imported; charts/feedguard is `helm install`ed as it is (only the image pull policy and the
# node's kubelet cgroup root/driver, which the chart documents, are set); the controller
# Deployment (2 replicas, leader election) and the agent DaemonSet become Ready; a trainer and two
# Burstable neighbours run as Deployments; a FencePolicy (fence: Idle) fences the neighbours' pod
# cgroups that kubelet made (cpu.idle=1) within a bounded time and `kubectl get fencepolicies`
# shows the counts; a neighbour pod deleted and recreated by its Deployment is fenced again;
# deleting the policy and `helm uninstall` restore every pod cgroup file
# byte for byte; kubelet's QoS-tier cgroup files are byte-identical around the fence and back to
# their pre-install bytes after the uninstall; iptables rules exist only in the node's network
# namespace. Exit: 0 pass, 1 fail, 77 skipped (not root).
#
# Binaries: FG_CONTROLLER / FG_AGENT (CTest sets them), else build/release.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
node_init helm "$@"

# Host netfilter state: kube-proxy must write its rules only inside the node's namespace.
host_rules() { { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | grep -v '^#' || true; }
host_rules >"$WORK/snap/host-rules.before"

# ---- cluster and images --------------------------------------------------------------------
node_up
import_feedguard_images

# ---- workloads: a trainer and two Burstable neighbours (Deployments) -----------------------
deploy_trainer_and_neighbours '{requests: {cpu: 500m, memory: 32Mi}, limits: {cpu: "1", memory: 128Mi}}'
for d in trainer neighbour-a neighbour-b; do
  [[ "${REL[$d]}" == kubepods/burstable/pod* ]] || fail "$d is not Burstable (${REL[$d]})"
done
[[ -f "$CPU/${REL[neighbour-a]}/cpu.idle" ]] || fail "$CPU/${REL[neighbour-a]}/cpu.idle missing: kernel without cpu.idle"

# snapshot, QOS, diff_snap, wait_qos, pods_rel: lib.sh.
# kubelet's QoS tiers settle on their own schedule: wait (lib.sh wait_qos) before the "before"
# picture.
s="$(wait_qos)"
snapshot "$WORK/snap/qos.0" "${QOS[@]}"
pass "QoS tiers settled after ${s}s (burstable cpu.shares $(cat "$CPU/kubepods/burstable/cpu.shares")); pre-install picture: $(wc -l <"$WORK/snap/qos.0") files"

# ---- helm install, as a user would ---------------------------------------------------------
helm_install_fg
ready="$($K -n "$RNS" get deployment "$RELEASE-feedguard-controller" -o 'jsonpath={.status.readyReplicas}/{.spec.replicas}')"
[[ "$ready" == 2/2 ]] || fail "controller Deployment ready $ready, expected 2/2"
ds="$($K -n "$RNS" get daemonset "$RELEASE-feedguard-agent" -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}')"
[[ "$ds" == 1/1 ]] || fail "agent DaemonSet ready $ds, expected 1/1"
images="$($K -n "$RNS" get deployment "$RELEASE-feedguard-controller" -o 'jsonpath={.spec.template.spec.containers[0].image}') $($K -n "$RNS" get daemonset "$RELEASE-feedguard-agent" -o 'jsonpath={.spec.template.spec.containers[0].image}')"
[[ "$images" == "${IMG[controller]} ${IMG[agent]}" ]] || fail "the chart's default images are '$images', not the imported '${IMG[controller]} ${IMG[agent]}'"
pass "helm install --wait: controller 2/2 Ready, agent DaemonSet 1/1 Ready in ${T_INSTALL}s (the chart's default images: $images)"
$K -n "$RNS" get pods -o wide

# Leader election: the Lease names one of the two controller pods, and exactly that pod reports
# feedguard_controller_leader 1 (both are Ready: the chart's readiness is /healthz).
holder="$($K -n "$RNS" get lease -o 'jsonpath={.items[*].spec.holderIdentity}')"
leaders=""
for p in $($K -n "$RNS" get pods -l app.kubernetes.io/component=controller -o 'jsonpath={.items[*].metadata.name}'); do
  v="$($K get --raw "/api/v1/namespaces/$RNS/pods/$p:8080/proxy/metrics" | awk '$1 == "feedguard_controller_leader" {print $2}')" ||
    fail "controller $p: /metrics unreachable"
  [[ "$v" == 1 ]] && leaders+="$p "
done
[[ "$leaders" == "${holder%-*} " || "$leaders" == "$holder " ]] ||
  fail "leader election: Lease holder '$holder', pods reporting leader=1: '$leaders'"
pass "leader election: Lease holder $holder, the only replica with feedguard_controller_leader 1"

# The agent reached the controller through the Service's DNS name (CoreDNS) and ClusterIP
# (kube-proxy) and is ready (/readyz: checkpoint loaded, first NodeFence applied).
agent_pod="$($K -n "$RNS" get pods -l app.kubernetes.io/component=agent -o 'jsonpath={.items[0].metadata.name}')"
probes="$($K -n "$RNS" get pod "$agent_pod" -o 'jsonpath={.spec.containers[0].readinessProbe.httpGet.path} {.spec.containers[0].livenessProbe.httpGet.path}')"
[[ "$probes" == "/readyz /healthz" ]] || fail "agent probes are '$probes', expected '/readyz /healthz'"
connected="$($K get --raw "/api/v1/namespaces/$RNS/pods/$agent_pod:8081/proxy/metrics" 2>/dev/null | awk '$1 == "feedguard_agent_connected" {print $2}')" || true
[[ "$connected" == 1 ]] || fail "agent $agent_pod: feedguard_agent_connected = '${connected}', expected 1"
pass "agent $agent_pod connected to the controller Service by name (probes $probes)"

# The agent sees only kubelet's pod tree (agent.cgroup.hostMount's default once the version and
# driver are set): in the agent process's mount namespace every writable cgroup mount has its
# root inside <cgroup root>/kubepods, and none of the host's other cgroups is mounted at all
# (the runtime's own /sys/fs/cgroup for the container is read-only).
agent_pid="$(agent_pids)"
[[ -n "$agent_pid" && "$agent_pid" != *$'\n'* ]] || fail "not exactly one agent process on this node: '$agent_pid'"
# mountinfo: ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
cg_mounts="$(awk '{ for (i = 7; $i != "-"; i++); if ($(i + 1) ~ /^cgroup2?$/) print $4, $5, $6 }' "/proc/$agent_pid/mountinfo")"
rw_mounts="$(awk '$3 ~ /^rw(,|$)/' <<<"$cg_mounts")"
kp="$CGROUP_ROOT/kubepods"
[[ -n "$rw_mounts" ]] || fail "agent: no writable cgroup mount at all: $cg_mounts"
while read -r root mp _; do
  [[ "$root" == "$kp" ]] || fail "agent: writable cgroup mount of $root at $mp, outside $kp"
  [[ "$mp" == /host/cgroup/* ]] || fail "agent: writable cgroup mount at $mp, not under /host/cgroup"
done <<<"$rw_mounts"
n_rw="$(wc -l <<<"$rw_mounts")"
((n_rw == 3)) || fail "agent: $n_rw writable cgroup mounts, expected 3 (cpu, cpuacct, cpuset): $rw_mounts"
pass "agent pid $agent_pid: $n_rw writable cgroup mounts, each of $kp only ($(tr '\n' ';' <<<"$rw_mounts"))"

host_rules >"$WORK/snap/host-rules.during"
diff_snap "$WORK/snap/host-rules.before" "$WORK/snap/host-rules.during" "host iptables rules"
n_rules="$("$NODE_EXEC" iptables-save | grep -c '^-A KUBE-' || true)"
((n_rules > 0)) || fail "no KUBE-* rules in the node's network namespace"
pass "iptables: $n_rules KUBE-* rules in netns $NETNS, host rules unchanged ($(wc -l <"$WORK/snap/host-rules.before") lines)"

# ---- the fence -----------------------------------------------------------------------------
s="$(wait_qos)"
snapshot "$WORK/snap/qos.1" "${QOS[@]}"
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.1" $(pods_rel)
for d in neighbour-a neighbour-b trainer; do
  [[ "$(cat "$CPU/${REL[$d]}/cpu.idle")" == 0 ]] || fail "$d cpu.idle is not 0 before the policy"
done
pass "before the policy (QoS settled after ${s}s): $(wc -l <"$WORK/snap/pods.1") pod cgroup files, $(wc -l <"$WORK/snap/qos.1") QoS-tier files"

# examples/demo/policy.yaml's shape: the release namespace is not excluded — the chart passes
# --agent-namespace=<release namespace>, whose pods (agent and controller) the rails protect, so
# exactly the two neighbours are fenced.
$K label node "$NODE_NAME" nvidia.com/gpu.present=true --overwrite >/dev/null
POLICY=node-tier-trainers
fence_policy "$POLICY" Idle >"$WORK/policy.yaml"
t1=$SECONDS
t1ms="$(now_ms)"
$K apply -f "$WORK/policy.yaml" >/dev/null
fenced_all() {
  local d
  for d in neighbour-a neighbour-b; do
    [[ "$(cat "$CPU/${REL[$d]}/cpu.idle" 2>/dev/null)" == 1 ]] || return 1
  done
}
until fenced_all; do
  ((SECONDS - t1 < FENCE_TIMEOUT_S)) || fail "neighbours not fenced (cpu.idle=1) within ${FENCE_TIMEOUT_S}s"
  sleep 0.1
done
t_fence_ms=$(($(now_ms) - t1ms))
t_fence="$(printf '%d.%03d' $((t_fence_ms / 1000)) $((t_fence_ms % 1000)))"
[[ "$(cat "$CPU/${REL[trainer]}/cpu.idle")" == 0 ]] || fail "the trainer's cpu.idle is not 0"
pass "fence after kubectl apply: both neighbours' pod cgroups cpu.idle=1 after ${t_fence}s (poll 0.1 s), trainer 0"
# The snapshot sees the fence: while fenced, the files that differ are the neighbours' and
# include both pod-level cpu.idle files; nothing of the trainer changed.
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.2" $(pods_rel)
changed="$({ diff "$WORK/snap/pods.1" "$WORK/snap/pods.2" || true; } | sed -n 's/^> \([^	]*\)	.*/\1/p')"
for d in neighbour-a neighbour-b; do
  grep -qx "$CPU/${REL[$d]}/cpu.idle" <<<"$changed" || fail "snapshot while fenced: $d pod cpu.idle not among the changed files: $changed"
done
! grep -q "${REL[trainer]}" <<<"$changed" || fail "the trainer's cgroup files changed: $changed"
shown=""
while read -r f; do
  shown+="${f#/sys/fs/cgroup/}: $(grep -F "$f"$'\t' "$WORK/snap/pods.1" | cut -f2- | tr -d ' ')->$(grep -F "$f"$'\t' "$WORK/snap/pods.2" | cut -f2- | tr -d ' ');  "
done <<<"$changed"
pass "while fenced $(wc -l <<<"$changed") neighbour cgroup files differ from the originals: ${shown//$CGROUP_ROOT\/kubepods\/burstable\//\/}"

status_ok() {
  [[ "$($K get fencepolicy "$POLICY" -o 'jsonpath={.status.trainers.protected}/{.status.neighbours.fenced}/{.status.nodes.enforced}')" == 1/2/1 ]]
}
t1=$SECONDS
until status_ok; do
  ((SECONDS - t1 < 60)) || fail "status: $($K get fencepolicy "$POLICY" -o 'jsonpath={.status}')"
  sleep 1
done
$K get fencepolicies
pass "status after $((SECONDS - t1))s more: trainers.protected 1, neighbours.fenced 2, nodes.enforced 1"

snapshot "$WORK/snap/qos.2" "${QOS[@]}"
diff_snap "$WORK/snap/qos.1" "$WORK/snap/qos.2" "QoS tiers while fenced"
pass "QoS-tier files byte-identical while fenced"

# A new neighbour pod: neighbour-b's pod is deleted; the Deployment's replacement (new UID, a new
# pod cgroup made by kubelet) is fenced too, and the status still counts 2 fenced neighbours.
old_uid="$(pod_of neighbour-b | cut -d' ' -f1)"
old_name="$($K -n "$WNS" get pods -l app=neighbour-b -o 'jsonpath={.items[0].metadata.name}')"
POD_REL_OLD_B="${REL[neighbour-b]}"
t1ms="$(now_ms)"
$K -n "$WNS" delete pod -l app=neighbour-b --wait=false >/dev/null
new_fenced() {
  local uid qos
  read -r uid qos _ <<<"$(pod_of neighbour-b)"
  [[ -n "$uid" && "$uid" != "$old_uid" ]] || return 1
  REL[neighbour-b]="kubepods/burstable/pod$uid"
  [[ "$(cat "$CPU/${REL[neighbour-b]}/cpu.idle" 2>/dev/null)" == 1 ]]
}
until new_fenced; do
  (($(now_ms) - t1ms < FENCE_TIMEOUT_S * 1000)) || fail "the recreated neighbour-b pod was not fenced within ${FENCE_TIMEOUT_S}s"
  sleep 0.1
done
t_refence_ms=$(($(now_ms) - t1ms))
$K -n "$WNS" rollout status deployment/neighbour-b --timeout=60s >/dev/null || fail "neighbour-b did not roll out again"
# kubelet counts a terminating pod in its QoS tier until the pod is gone; then it recomputes the
# tier on its own schedule (wait_qos).
$K -n "$WNS" wait --for=delete "pod/$old_name" --timeout=60s >/dev/null 2>&1 || fail "pod $old_name not gone after 60 s"
t1=$SECONDS
until status_ok; do
  ((SECONDS - t1 < 60)) || fail "status after the recreation: $($K get fencepolicy "$POLICY" -o 'jsonpath={.status}')"
  sleep 1
done
s="$(wait_qos)"
snapshot "$WORK/snap/qos.2b" "${QOS[@]}"
diff_snap "$WORK/snap/qos.1" "$WORK/snap/qos.2b" "QoS tiers after a neighbour pod was recreated while fenced"
pass "recreated neighbour-b pod (${old_uid:0:8}… -> ${REL[neighbour-b]#kubepods/burstable/pod}) fenced $((t_refence_ms / 1000)).$(printf '%03d' $((t_refence_ms % 1000)))s after the delete; status 1/2/1 again; QoS tiers back to the same bytes (${s}s)"

# ---- withdraw: delete the policy, uninstall ------------------------------------------------
t1=$SECONDS
$K delete fencepolicy "$POLICY" --timeout=90s >/dev/null || fail "deleting the policy did not finish in 90 s (finalizer)"
for d in neighbour-a neighbour-b; do
  [[ "$(cat "$CPU/${REL[$d]}/cpu.idle")" == 0 ]] || fail "$d (${REL[$d]}) still cpu.idle=1 after the policy is gone"
done
pass "policy deleted (finalizer released) in $((SECONDS - t1))s; neighbours cpu.idle=0"
snapshot "$WORK/snap/qos.3" "${QOS[@]}"
diff_snap "$WORK/snap/qos.1" "$WORK/snap/qos.3" "QoS tiers after the policy deletion"

t1=$SECONDS
"$HELM" uninstall "$RELEASE" --namespace "$RNS" --wait --timeout 120s >"$WORK/helm-uninstall.log" 2>&1 ||
  { cat "$WORK/helm-uninstall.log"; fail "helm uninstall failed"; }
$K -n "$RNS" wait --for=delete pod --all --timeout=120s >/dev/null 2>&1 || fail "release pods still there 120 s after helm uninstall"
t_uninstall=$((SECONDS - t1))
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.4" $(pods_rel)
# neighbour-b's pod was replaced: its files are compared with those of the pod it replaced (same
# spec, so kubelet wrote the same values), with pod UIDs and container ids named by role.
normalize() { # FILE REL_TRAINER REL_A REL_B
  sed -e "s|$2/|TRAINER/|; s|$3/|NEIGHBOUR-A/|; s|$4/|NEIGHBOUR-B/|" -e 's|/[0-9a-f]\{64\}/|/CONTAINER/|' "$1" | sort
}
normalize "$WORK/snap/pods.1" "${REL[trainer]}" "${REL[neighbour-a]}" "$POD_REL_OLD_B" >"$WORK/snap/pods.1n"
normalize "$WORK/snap/pods.4" "${REL[trainer]}" "${REL[neighbour-a]}" "${REL[neighbour-b]}" >"$WORK/snap/pods.4n"
diff_snap "$WORK/snap/pods.1n" "$WORK/snap/pods.4n" "pod cgroup files after policy deletion + helm uninstall"
grep -q "NEIGHBOUR-B/cpu.idle" "$WORK/snap/pods.4n" || fail "normalization lost neighbour-b's files"
pass "helm uninstall in ${t_uninstall}s; every pod cgroup file of the trainer and neighbours holds its original bytes ($(wc -l <"$WORK/snap/pods.4") files; the recreated neighbour-b's against its predecessor's)"
s="$(wait_qos)"
snapshot "$WORK/snap/qos.4" "${QOS[@]}"
diff_snap "$WORK/snap/qos.0" "$WORK/snap/qos.4" "QoS tiers after uninstall vs before install"
pass "QoS-tier files byte-identical to their pre-install bytes (kubelet settled after ${s}s)"

# ---- down ----------------------------------------------------------------------------------
node_down
host_rules >"$WORK/snap/host-rules.after"
diff_snap "$WORK/snap/host-rules.before" "$WORK/snap/host-rules.after" "host iptables rules after down"
pass "host iptables rules unchanged"
say "PASS (up ${T_UP}s, install ${T_INSTALL}s, fence ${t_fence}s, uninstall ${t_uninstall}s, total $((SECONDS - T0))s)"

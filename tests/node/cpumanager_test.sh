#!/usr/bin/env bash
# cpumanager_test.sh WORKDIR — feedguard beside kubelet's static CPU manager on a real node
# (tests/node/cluster.sh with cpuManagerPolicy: static, cpuManagerPolicyOptions full-pcpus-only,
# kubeReserved cpu 100m: the static policy needs a CPU reservation, kubelet keeps ceil(100m) = 1
# whole CPU out of the exclusive pool while allocatable stays 1.9 CPU — reservedSystemCPUs "0"
# would leave allocatable 1 CPU, all of it taken by the exclusive pod, and the chart's pods could
# not schedule on 2 vCPUs. This machine has 1 thread per core, so one whole core can be
# exclusive under full-pcpus-only). charts/feedguard is helm-installed as in helm_test.sh; the agent reads kubelet's
# real cpu_manager_state (the chart's default mount). Pods: a Burstable trainer, a Guaranteed
# neighbour with `cpu: 1` (kubelet gives it CPU 1 exclusively) and a Burstable neighbour. A
# FencePolicy with the Cpuset fence:
#   - the exclusive pod is fenced with Idle (planner: CpuManagerOwnsPod) and its cpuset files
#     (pod and container) keep kubelet's bytes; kubelet's cpu_manager_state is unchanged;
#   - the Burstable neighbour is fenced (Cpuset off the exclusive CPU, or Idle when none is left);
#   - over a quiet window (3+ of kubelet's 10 s CPU-manager reconcile periods) the agent's
#     overwrite counter stays flat: neither rewrites the other;
#   - policy deletion + helm uninstall restore every pod cgroup file; the QoS tiers are
#     byte-identical to their pre-install bytes.
# Exit: 0 pass, 1 fail, 77 skipped (not root).
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
node_init cpumanager "$@"
QUIET_S="${FEEDGUARD_NODE_QUIET_S:-35}"

ncpu="$(nproc)"
((ncpu >= 2)) || { echo "SKIPPED: the static CPU manager test needs 2 CPUs (1 kept back by the reservation, 1 exclusive), this machine has $ncpu"; exit 77; }
# full-pcpus-only admits only whole cores: with SMT siblings a 1-CPU exclusive pod is refused.
tpc="$(lscpu | awk -F: '/^Thread\(s\) per core/ {gsub(/ /, "", $2); print $2}')"
OPTS='cpuManagerPolicyOptions: {full-pcpus-only: "true"}'
if [[ "$tpc" != 1 ]]; then
  say "note: $tpc threads per core: full-pcpus-only would refuse a 1-CPU exclusive pod; using static without options"
  OPTS=""
fi
export FEEDGUARD_NODE_CPU_MANAGER_POLICY=static
export FEEDGUARD_NODE_KUBELET_CONFIG_EXTRA="kubeReserved: {cpu: 100m}
$OPTS"
node_up
STATE_FILE="$KUBELET_ROOT/cpu_manager_state"
[[ -f "$STATE_FILE" ]] || fail "kubelet wrote no $STATE_FILE"
[[ "$(jq -r .policyName "$STATE_FILE")" == static ]] || fail "cpu_manager_state policy is $(jq -r .policyName "$STATE_FILE"), not static"
say "kubelet static CPU manager: kubeReserved cpu 100m, ${OPTS:-no policy options}; cpu_manager_state: $(tr -d '\n' <"$STATE_FILE")"
import_feedguard_images

$K create namespace "$WNS" >/dev/null
{
  deploy trainer trainer '{requests: {cpu: 100m, memory: 16Mi}}'
  deploy pinned neighbour '{requests: {cpu: "1", memory: 32Mi}, limits: {cpu: "1", memory: 32Mi}}'
  deploy nb neighbour '{requests: {cpu: 100m, memory: 16Mi}}'
} | $K apply -f - >/dev/null
wait_rollouts trainer pinned nb
declare -A REL UID_OF
for d in trainer pinned nb; do
  read -r uid qos _ <<<"$(pod_of "$d")"
  UID_OF[$d]="$uid"
  REL[$d]="$(pod_rel "$uid" "$qos")"
done
[[ "${REL[pinned]}" == kubepods/pod* ]] || fail "the pinned pod is not Guaranteed (${REL[pinned]})"
excl="$(jq -r --arg u "${UID_OF[pinned]}" '.entries[$u].main // empty' "$STATE_FILE")"
[[ "$excl" == 1 ]] || fail "kubelet did not give the pinned pod CPU 1 exclusively (cpu_manager_state entry '$excl')"
pinned_ctr="$(find "$CPUSET/${REL[pinned]}" -mindepth 1 -maxdepth 1 -type d | while read -r c; do
  if [[ "$(cat "$c/cpuset.cpus")" == 1 ]]; then echo "$c"; fi; done)"
[[ -n "$pinned_ctr" ]] || fail "no container of the pinned pod has cpuset.cpus=1 (kubelet/runc)"
nb_cpus="$(for c in "$CPUSET/${REL[nb]}"/*/; do cat "$c/cpuset.cpus"; done | sort -u | tr '\n' ' ')"
say "kubelet pinned ${REL[pinned]} to CPU $excl (container cpuset.cpus=1, cpu.cfs_quota_us=$(cat "$CPU/${REL[pinned]}/$(basename "$pinned_ctr")/cpu.cfs_quota_us")); shared-pool containers of nb: cpuset.cpus $nb_cpus"
pods_rel() { echo "${REL[trainer]}/*" "${REL[pinned]}/*" "${REL[nb]}/*"; }

s="$(wait_qos)"
snapshot "$WORK/snap/qos.0" "${QOS[@]}"
cp "$STATE_FILE" "$WORK/snap/cpu_manager_state.0"
helm_install_fg
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.0" $(pods_rel)

$K label node "$NODE_NAME" nvidia.com/gpu.present=true --overwrite >/dev/null
POLICY=cpumanager
fence_policy "$POLICY" Cpuset '{cores: 1}' | $K apply -f - >/dev/null
# Both neighbours fenced. The trainer asks for 1 whole core: on 2 CPUs with CPU 1 exclusive the
# planner's rail (one whole core always left for everyone else) leaves none, so it is not pinned
# (NotEnoughCores) — logged, whatever the status says about it.
status_ok() { [[ "$(policy_field "$POLICY" '{.status.neighbours.fenced}/{.status.nodes.matched}')" == 2/1 ]]; }
t1="$(now_ms)"
s="$(wait_until "$FENCE_TIMEOUT_S" "status neighbours.fenced 2" status_ok)"
pass "policy (fence: Cpuset, trainer cores 1) applied: neighbours.fenced 2 $(secs_since "$t1")s after kubectl apply"
sleep 2
say "status: $(policy_field "$POLICY" '{.status.nodes} {.status.trainers} {.status.neighbours} failures={.status.failures} conditions={range .status.conditions[*]}{.type}={.status}({.reason}) {end}')"
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.F" $(pods_rel)
changed="$({ diff "$WORK/snap/pods.0" "$WORK/snap/pods.F" || true; } | sed -n 's/^> \([^	]*\)	\(.*\)/\1=\2/p' | sed "s|/sys/fs/cgroup/||; s|$CGROUP_ROOT/||")"
say "files the fence changed: $(tr '\n' ' ' <<<"$changed")"
# The exclusive pod: Idle at pod level, not one cpuset file touched.
[[ "$(cat "$CPU/${REL[pinned]}/cpu.idle")" == 1 ]] || fail "the pinned pod is not fenced (cpu.idle $(cat "$CPU/${REL[pinned]}/cpu.idle"))"
grep "${REL[pinned]}" <<<"$changed" | grep -q cpuset && fail "the agent changed a cpuset file of the CPU-manager pod: $(grep "${REL[pinned]}" <<<"$changed")"
[[ "$(cat "$pinned_ctr/cpuset.cpus")" == 1 ]] || fail "the pinned container's cpuset.cpus is $(cat "$pinned_ctr/cpuset.cpus")"
diff_snap "$WORK/snap/cpu_manager_state.0" "$STATE_FILE" "kubelet's cpu_manager_state while fenced"
pass "CPU-manager pod: fenced with Idle (pod cpu.idle=1); its pod/container cpuset files keep kubelet's bytes (container cpuset.cpus=1); cpu_manager_state unchanged"
# The Burstable neighbour: fenced one way or the other, never onto the exclusive CPU.
nb_changed="$(grep "${REL[nb]}" <<<"$changed" || true)"
[[ -n "$nb_changed" ]] || fail "the Burstable neighbour was not fenced (no file changed)"
while IFS='=' read -r f v; do
  [[ "$f" == */cpuset.cpus && "$v" == *1* ]] && fail "the agent gave $f the exclusive CPU 1 ($v)"
done <<<"$nb_changed"
pass "Burstable neighbour fenced: $(tr '\n' ' ' <<<"${nb_changed//${REL[nb]}/nb}")"
[[ "$(cat "$CPU/${REL[trainer]}/cpu.idle")" == 0 ]] || fail "the trainer got cpu.idle=1"

# Quiet window: kubelet's CPU manager reconciles every 10 s; nobody rewrites anybody.
a="$(agent_pod)"
ow0="$(agent_metric "$a" feedguard_overwrites_total)"
sleep "$QUIET_S"
ow1="$(agent_metric "$a" feedguard_overwrites_total)"
[[ "$ow0" =~ ^[0-9.]+$ && "$ow1" =~ ^[0-9.]+$ ]] || fail "overwrite counter unreadable ('$ow0', '$ow1')"
growth=$((${ow1%.*} - ${ow0%.*}))
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.Q" $(pods_rel)
diff_snap "$WORK/snap/pods.F" "$WORK/snap/pods.Q" "fenced files after ${QUIET_S}s beside the static CPU manager"
diff_snap "$WORK/snap/cpu_manager_state.0" "$STATE_FILE" "kubelet's cpu_manager_state after the quiet window"
((growth <= 1)) || fail "overwrite counter grew by $growth in ${QUIET_S}s: the agent and kubelet rewrite each other"
pass "quiet ${QUIET_S}s: agent overwrite counter $ow0 -> $ow1 (growth $growth); every fenced file and cpu_manager_state unchanged"
if $K -n "$RNS" logs "$a" 2>/dev/null | grep -q CpuManagerOwnsPod; then
  say "agent log names CpuManagerOwnsPod: $($K -n "$RNS" logs "$a" | grep -m1 CpuManagerOwnsPod | cut -c1-200)"
fi

t1=$SECONDS
$K delete fencepolicy "$POLICY" --timeout=90s >/dev/null || fail "deleting the policy did not finish in 90 s"
"$HELM" uninstall "$RELEASE" --namespace "$RNS" --wait --timeout 120s >"$WORK/helm-uninstall.log" 2>&1 ||
  { cat "$WORK/helm-uninstall.log"; fail "helm uninstall failed"; }
$K -n "$RNS" wait --for=delete pod --all --timeout=120s >/dev/null 2>&1 || fail "release pods still there 120 s after helm uninstall"
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.end" $(pods_rel)
diff_snap "$WORK/snap/pods.0" "$WORK/snap/pods.end" "pod cgroup files after policy deletion + helm uninstall"
diff_snap "$WORK/snap/cpu_manager_state.0" "$STATE_FILE" "kubelet's cpu_manager_state at the end"
qos_as_before_install "QoS tiers after uninstall vs before install"
pass "withdrawn in $((SECONDS - t1))s: all $(wc -l <"$WORK/snap/pods.end") pod cgroup files original, cpu_manager_state and QoS tiers byte-identical"

node_down
say "PASS (up ${T_UP}s, install ${T_INSTALL}s, total $((SECONDS - T0))s; kubelet $KUBELET_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION)"

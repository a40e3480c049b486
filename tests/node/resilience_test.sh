#!/usr/bin/env bash
# resilience_test.sh WORKDIR — the `node` tier's fail-static test on a real one-node cluster
# (tests/node/cluster.sh), charts/feedguard helm-installed as in helm_test.sh (with
# --stale-after-ms set short through controller.extraArgs). A Guaranteed trainer and two
# Burstable neighbours (Deployments) under an Idle FencePolicy; then, in sequence:
#   f. the policy's CrossTier condition names the neighbours sitting in another QoS tier than
#      the trainer (what an Idle fence cannot do there);
#   a. kubelet restarted, then containerd restarted: every fenced pod cgroup file keeps its bytes,
#      the agent stays connected, the policy stays Ready, a new neighbour pod is fenced;
#   b. the agent pod deleted, then the DaemonSet rolled (helm upgrade --set of a pod
#      annotation): while no agent process runs, the pod cgroup files keep their fenced bytes
#      (fail static); the new agent reconnects and the policy is Ready;
#   c. the leading controller pod deleted: the other replica takes the Lease, the agent
#      reconnects to it, and it writes the status again (a neighbour removed → count drops);
#   d. the agent cut off from the controller (iptables REJECT in the agent pod's own network
#      namespace): fences held, the node turns stale in the status only after the grace period,
#      a neighbour started meanwhile is fenced once the path returns, the policy Ready again;
#   g. a quiet minute: the agent's overwrite counter stays flat (no flip-flop with kubelet/runc);
#      the counters after each phase are logged; after policy deletion and helm uninstall every
#      pod cgroup file holds its original bytes (from the host state dir's checkpoint) and
#      kubelet's QoS-tier cgroups are byte-identical to their pre-install bytes.
# Exit: 0 pass, 1 fail, 77 skipped (not root). Binaries: FG_CONTROLLER / FG_AGENT (CTest sets
# them), else build/release.
set -euo pipefail
# shellcheck source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
node_init resilience "$@"
# The controller's grace period before a disconnected agent's node is reported stale
# (--stale-after-ms; the controller sets no lower bound, the chart's default is 60 s).
STALE_AFTER_MS="${FEEDGUARD_NODE_STALE_AFTER_MS:-20000}"
QUIET_S="${FEEDGUARD_NODE_QUIET_S:-60}"

node_up
import_feedguard_images

# ---- workloads: a Guaranteed trainer, two Burstable neighbours ------------------------------
deploy_trainer_and_neighbours '{requests: {cpu: 300m, memory: 64Mi}, limits: {cpu: 300m, memory: 64Mi}}'
[[ "${REL[trainer]}" == kubepods/pod* ]] || fail "the trainer is not Guaranteed (${REL[trainer]})"
pass "Guaranteed trainer (${REL[trainer]%%/pod*}) and 2 Burstable neighbours Running"

s="$(wait_qos)"
snapshot "$WORK/snap/qos.0" "${QOS[@]}"
pass "QoS tiers settled after ${s}s; pre-install picture of kubepods, burstable, besteffort: $(wc -l <"$WORK/snap/qos.0") files"

# A short Lease through the chart's controller.leaderElection.* values (renewed every second
# for the whole test); phase c checks the controller got them. A deleted leader pod hands the
# Lease over at SIGTERM, so its takeover does not wait for the expiry.
LEASE_S=5
helm_install_fg --set-json "controller.extraArgs=[\"--stale-after-ms=$STALE_AFTER_MS\"]" \
  --set controller.leaderElection.leaseDurationSeconds=$LEASE_S \
  --set controller.leaderElection.renewDeadlineSeconds=3 \
  --set controller.leaderElection.retryPeriodSeconds=1
AGENT="$(agent_pod)"
[[ -n "$AGENT" ]] || fail "no Running agent pod"
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.0" $(pods_rel)

# ---- the fence ------------------------------------------------------------------------------
$K label node "$NODE_NAME" nvidia.com/gpu.present=true --overwrite >/dev/null
POLICY=resilience
fence_policy "$POLICY" Idle | $K apply -f - >/dev/null
idle_of() { cat "$CPU/$1/cpu.idle" 2>/dev/null; }
app_fenced() { # APP — its (current) pod's cgroup has cpu.idle=1
  local uid qos
  read -r uid qos _ <<<"$(pod_of "$1" 2>/dev/null)"
  [[ -n "$uid" && -n "$qos" && "$(idle_of "$(pod_rel "$uid" "$qos")")" == 1 ]]
}
both_fenced() { app_fenced neighbour-a && app_fenced neighbour-b; }
t1="$(now_ms)"
s="$(wait_until "$FENCE_TIMEOUT_S" "neighbours fenced (cpu.idle=1)" both_fenced)"
[[ "$(idle_of "${REL[trainer]}")" == 0 ]] || fail "the trainer's cpu.idle is not 0"
pass "both neighbours fenced $(secs_since "$t1")s after kubectl apply; trainer cpu.idle 0"
# status_is P/F/E — trainers.protected / neighbours.fenced / nodes.enforced, stale 0, Ready True
status_is() {
  [[ "$(policy_field "$POLICY" '{.status.trainers.protected}/{.status.neighbours.fenced}/{.status.nodes.enforced}/{.status.nodes.stale}/{.status.conditions[?(@.type=="Ready")].status}')" == "$1/0/True" ]]
}
s="$(wait_until 60 "status 1/2/1 Ready" status_is 1/2/1)"
pass "status: protected 1, fenced 2, enforced 1, stale 0, Ready ($s s)"
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.F" $(pods_rel)
changed="$({ diff "$WORK/snap/pods.0" "$WORK/snap/pods.F" || true; } | sed -n 's/^> \([^	]*\)	.*/\1/p' | sed "s|/sys/fs/cgroup/||; s|$CGROUP_ROOT/||" | tr '\n' ' ')"
[[ -n "$changed" ]] || fail "the fence changed no file"
pass "fenced picture: $(wc -l <"$WORK/snap/pods.F") pod cgroup files, changed by the fence: $changed"

# held WHAT — every pod cgroup file of the trainer and the two neighbours holds its fenced bytes.
held() {
  # shellcheck disable=SC2046
  snapshot "$WORK/snap/pods.now" $(pods_rel)
  diff_snap "$WORK/snap/pods.F" "$WORK/snap/pods.now" "fence not held: $1"
}
# overwrites WHAT — logs the agent's overwrite counter (and returns it in OW).
overwrites() {
  local a
  a="$(agent_pod)"
  OW="$(agent_metric "$a" feedguard_overwrites_total)"
  say "overwrite counter ($1): agent $a feedguard_overwrites_total=${OW:-?}"
}
overwrites "after the fence"

# ---- f. trainer and neighbours in different QoS tiers ---------------------------------------
cross_tier() { [[ "$(policy_field "$POLICY" '{.status.conditions[?(@.type=="CrossTier")].status}')" == True ]]; }
s="$(wait_until 30 "CrossTier condition True" cross_tier)"
reason="$(policy_field "$POLICY" '{.status.conditions[?(@.type=="CrossTier")].reason}')"
msg="$(policy_field "$POLICY" '{.status.conditions[?(@.type=="CrossTier")].message}')"
[[ "$reason" == NeighboursInOtherQoSTier ]] || fail "CrossTier reason '$reason'"
[[ "$msg" == "2 neighbours"*"(Burstable) vs trainer $WNS/"*"(Guaranteed)"* ]] || fail "CrossTier message: $msg"
[[ "$(policy_field "$POLICY" '{.status.conditions[?(@.type=="Ready")].status}')" == True ]] || fail "CrossTier made the policy not Ready"
pass "f: CrossTier=True ($reason): $msg"

# ---- a. kubelet and containerd restarts -----------------------------------------------------
agent_connected() { [[ "$(agent_metric "$(agent_pod)" feedguard_agent_connected)" == 1 ]]; }
new_neighbour_fenced() { # APP WHAT — (re)creates APP's pod and waits until it is fenced
  local t
  t="$(now_ms)"
  if $K -n "$WNS" get deployment "$1" >/dev/null 2>&1; then
    NN_APP="$1"
    NN_OLD="$(pod_of "$1" | cut -d' ' -f1)"
    $K -n "$WNS" delete pod -l "app=$1" --wait=false >/dev/null
    wait_until 30 "the deleted $1 pod replaced" eval '[[ "$(pod_of "$NN_APP" | cut -d" " -f1)" != "$NN_OLD" ]]' >/dev/null
  else
    deploy "$1" neighbour '{requests: {cpu: 50m, memory: 16Mi}}' | $K apply -f - >/dev/null
  fi
  wait_until "$FENCE_TIMEOUT_S" "$2: new $1 pod fenced" app_fenced "$1" >/dev/null
  say "$2: new $1 pod ($(pod_of "$1" | cut -d' ' -f3)) fenced $(secs_since "$t")s after it was asked for"
}
agent_before="$(agent_pod)"
for daemon in kubelet containerd; do
  t1="$(now_ms)"
  "$HERE/cluster.sh" "restart-$daemon" "$NODE" 2>&1 | sed 's/^/    /'
  held "after the $daemon restart"
  [[ "$(agent_pod)" == "$agent_before" ]] || fail "the agent pod changed across the $daemon restart"
  wait_until 60 "agent connected after the $daemon restart" agent_connected >/dev/null
  new_neighbour_fenced neighbour-c "$daemon restart"
  wait_until 60 "status after the $daemon restart" status_is 1/3/1 >/dev/null
  held "after the $daemon restart and a new neighbour"
  overwrites "after the $daemon restart"
  pass "a: $daemon restarted ($(secs_since "$t1")s in all): fences held byte for byte, agent connected, new neighbour fenced, status 1/3/1 Ready"
done

# ---- b. agent pod killed, DaemonSet rolled --------------------------------------------------
# gap WHAT OLD_POD — until a new agent pod is Ready: while no agent process runs in the node's
# cgroups, the pod cgroup files keep their fenced bytes. Counts the samples taken without agent.
agent_gap() {
  local what="$1" old="$2" t n=0 all=0 p
  t="$(now_ms)"
  while :; do
    p="$(agent_pod)"
    if [[ -n "$p" && "$p" != "$old" ]] && agent_connected; then break; fi
    (($(now_ms) - t < 120000)) || fail "$what: no new connected agent within 120 s"
    if [[ -z "$(agent_pids)" ]]; then
      held "$what, no agent process running"
      n=$((n + 1))
    fi
    all=$((all + 1))
    sleep 0.2
  done
  ((n > 0)) || fail "$what: no sample caught the node without an agent process ($all samples)"
  held "$what, new agent $(agent_pod)"
  wait_until 60 "status after $what" status_is 1/3/1 >/dev/null
  pass "b: $what: $n of $all samples without any agent process, every one with the fenced bytes; new agent $(agent_pod) connected $(secs_since "$t")s after; status 1/3/1 Ready"
}
old="$(agent_pod)"
$K -n "$RNS" delete pod "$old" --wait=false >/dev/null
agent_gap "agent pod $old deleted" "$old"
overwrites "after the agent pod was replaced"
old="$(agent_pod)"
ctl_before="$($K -n "$RNS" get pods -l app.kubernetes.io/component=controller -o 'jsonpath={.items[*].metadata.name}')"
t1=$SECONDS
"$HELM" upgrade "$RELEASE" "$REPO/charts/feedguard" --namespace "$RNS" --reuse-values \
  --set-string agent.podAnnotations.fgroll="$(date +%s)" >"$WORK/helm-upgrade.log" 2>&1 ||
  { cat "$WORK/helm-upgrade.log"; fail "helm upgrade failed"; }
agent_gap "DaemonSet rolled by helm upgrade" "$old"
[[ -n "$($K -n "$RNS" get pod "$(agent_pod)" -o 'jsonpath={.metadata.annotations.fgroll}')" ]] ||
  fail "the new agent pod lacks the upgraded annotation"
$K -n "$RNS" rollout status "daemonset/$RELEASE-feedguard-agent" --timeout=60s >/dev/null || fail "the DaemonSet rollout did not finish"
$K -n "$RNS" rollout status "deployment/$RELEASE-feedguard-controller" --timeout=90s >/dev/null || fail "the controller rollout did not finish"
say "b: controller pods before the upgrade: $ctl_before; after: $($K -n "$RNS" get pods -l app.kubernetes.io/component=controller -o 'jsonpath={.items[*].metadata.name}')"
overwrites "after the DaemonSet roll"
STATE_HOST="$NODE/root/var/lib/feedguard"
n_state="$(find "$STATE_HOST" -type f | wc -l)"
((n_state > 0)) || fail "the host state dir $STATE_HOST is empty"
for d in neighbour-a neighbour-b; do
  grep -rqs "${REL[$d]#*pod}" "$STATE_HOST" || fail "the host state dir holds no entry for $d (${REL[$d]#*pod})"
done
pass "b: host state dir holds $n_state file(s) naming both neighbours' pods (their originals)"

# ---- c. the leading controller killed -------------------------------------------------------
leader="$(leader_pod)"
[[ -n "$leader" ]] || fail "no controller pod holds the Lease"
t1="$(now_ms)"
$K -n "$RNS" delete pod "$leader" --wait=false >/dev/null
new_leader() { local l; l="$(leader_pod)"; [[ -n "$l" && "$l" != "$leader" && "$(pod_metric "$l" 8080 feedguard_controller_leader)" == 1 ]]; }
wait_until 90 "a new controller leader" new_leader >/dev/null
t_lead="$(secs_since "$t1")"
$K -n "$RNS" get deployment "$RELEASE-feedguard-controller" -o 'jsonpath={.spec.template.spec.containers[0].args}' |
  grep -q -- "--lease-duration-ms=$((LEASE_S * 1000))" || fail "the controller was not given the chart's lease duration"
wait_until 90 "agent connected to the new leader" agent_connected >/dev/null
nl="$(leader_pod)"
wait_until 60 "the new leader counts the agent" eval '[[ "$(pod_metric "$nl" 8080 feedguard_agents_connected)" == 1 ]]' >/dev/null
held "across the controller failover"
writes0="$(pod_metric "$nl" 8080 feedguard_status_writes_total)"
$K -n "$WNS" delete deployment neighbour-c --wait=false >/dev/null
s="$(wait_until 60 "status 1/2/1 written by the new leader" status_is 1/2/1)"
writes1="$(pod_metric "$nl" 8080 feedguard_status_writes_total)"
(( ${writes1%.*} > ${writes0%.*} )) || fail "the new leader wrote no status (status writes $writes0 -> $writes1)"
say "c: the policy's Events so far: $($K get events -A --field-selector "involvedObject.name=$POLICY" -o 'jsonpath={range .items[*]}{.reason}x{.count} {end}')"
pass "c: leader $leader deleted; $nl leads after ${t_lead}s, agent reconnected, fences held; it rewrote the status (neighbour-c gone: 1/2/1, ${s}s; its status writes $writes0 -> $writes1)"

# ---- d. the agent cut off from the controller -----------------------------------------------
AGENT="$(agent_pod)"
cid="$($K -n "$RNS" get pod "$AGENT" -o 'jsonpath={.status.containerStatuses[0].containerID}')"
apid="$("$CTR" tasks ls | awk -v id="${cid#containerd://}" '$1 == id {print $2}')"
[[ "$apid" =~ ^[0-9]+$ ]] || fail "no task pid for the agent container ${cid}"
in_agent_net() { nsenter -t "$apid" -n -- "$@"; }
[[ "$(readlink "/proc/$apid/ns/net")" != "$(readlink /proc/self/ns/net)" ]] || fail "the agent pod shares the host's network namespace"
# Every packet of the agent to or from port 9443 is refused, except RSTs: those must reach the
# controller (the reset of `ss -K` below, and REJECT's answers to the controller's packets).
RULES=("OUTPUT -p tcp --dport 9443 --tcp-flags RST NONE -j REJECT --reject-with tcp-reset"
  "INPUT -p tcp --sport 9443 -j REJECT --reject-with tcp-reset")
unblock() { local r; for r in "${RULES[@]}"; do in_agent_net iptables -D $r 2>/dev/null || true; done; }
t1="$(now_ms)"
for r in "${RULES[@]}"; do
  # shellcheck disable=SC2086
  in_agent_net iptables -I $r || fail "iptables in the agent's network namespace failed"
done
# Cut the open stream at once (the controller would notice at its next keepalive otherwise).
killed="$(in_agent_net ss -K -t -n '( dport = :9443 )' 2>/dev/null | grep -c ':9443' || true)"
say "d: ss -K reset $killed open connection(s) to port 9443"
lead="$(leader_pod)"
controller_lost() { [[ "$(pod_metric "$lead" 8080 feedguard_agents_connected)" == 0 ]]; }
s="$(wait_until 60 "the controller sees the agent gone" controller_lost)"
t_lost="$(now_ms)"
say "d: agent's controller path blocked in its netns; the controller lost the stream $(secs_since "$t1")s later"
# Within the grace period the node is not stale: its agent still holds its fences. The stream
# ended after t1 (the block), so a read before t1 + grace is within it; 2 s after the controller
# noticed, it has recomputed the status (status interval 1 s).
sleep 2
st="$(policy_field "$POLICY" '{.status.nodes.stale}/{.status.conditions[?(@.type=="Ready")].status}')"
if (($(now_ms) - t1 < STALE_AFTER_MS - 1000)); then
  [[ "$st" == 0/True ]] || fail "stale/Ready '$st' within the ${STALE_AFTER_MS} ms grace period ($(secs_since "$t1")s after the block)"
  pass "d: $(secs_since "$t1")s after the block, $(secs_since "$t_lost")s after the controller noticed: stale 0, Ready True (within the grace period)"
else
  say "d: NOT CHECKED: the in-grace status read came $(secs_since "$t1")s after the block (machine too slow); it read stale/Ready $st"
fi
# A new neighbour while cut off: the agent cannot learn of it until the path returns.
deploy neighbour-d neighbour '{requests: {cpu: 50m, memory: 16Mi}}' | $K apply -f - >/dev/null
stale_now() { [[ "$(policy_field "$POLICY" '{.status.nodes.stale}/{.status.conditions[?(@.type=="Degraded")].status}/{.status.failures[0].reason}')" == 1/True/AgentNotConnected ]]; }
wait_until 90 "the node reported stale" stale_now >/dev/null
t_stale="$(secs_since "$t1")"
(($(now_ms) - t1 + 500 >= STALE_AFTER_MS)) || fail "stale after only ${t_stale}s, the grace period is ${STALE_AFTER_MS} ms"
pass "d: node reported stale (Degraded, AgentNotConnected) ${t_stale}s after the block, $(secs_since "$t_lost")s after the controller noticed (grace ${STALE_AFTER_MS} ms)"
# Hold the cut for a while longer, checking the fences.
t2=$SECONDS
while ((SECONDS - t2 < 12)); do
  held "while cut off from the controller"
  sleep 2
done
$K -n "$WNS" rollout status deployment/neighbour-d --timeout=60s >/dev/null || fail "neighbour-d did not start"
! app_fenced neighbour-d || fail "neighbour-d fenced while the agent was cut off (from where?)"
held "at the end of the cut"
pass "d: cut off for $(secs_since "$t1")s: fences held byte for byte; neighbour-d started meanwhile, not fenced (no path)"
t3="$(now_ms)"
unblock
wait_until 120 "the agent reconnected" agent_connected >/dev/null
t_back="$(secs_since "$t3")"
wait_until "$FENCE_TIMEOUT_S" "neighbour-d fenced after the path returned" app_fenced neighbour-d >/dev/null
wait_until 60 "status converged" status_is 1/3/1 >/dev/null
held "after the path returned"
pass "d: path back: agent reconnected after ${t_back}s, neighbour-d fenced, status 1/3/1, stale 0, Ready after $(secs_since "$t3")s"
overwrites "after the partition"

# ---- g. a quiet minute, then withdraw -------------------------------------------------------
overwrites "quiet window start"
ow0="${OW:-x}"
a0="$(agent_pod)"
sleep "$QUIET_S"
overwrites "quiet window end (${QUIET_S}s)"
[[ "$(agent_pod)" == "$a0" ]] || fail "the agent pod changed during the quiet window"
[[ "$ow0" =~ ^[0-9.]+$ && "$OW" =~ ^[0-9.]+$ ]] || fail "overwrite counter unreadable ('$ow0', '$OW')"
growth=$((${OW%.*} - ${ow0%.*}))
((growth <= 1)) || fail "the agent's overwrite counter grew by $growth in ${QUIET_S}s: it fights another writer"
held "after the quiet window"
pass "g: quiet ${QUIET_S}s: overwrite counter $ow0 -> $OW (growth $growth), fences held"

t1=$SECONDS
$K delete fencepolicy "$POLICY" --timeout=90s >/dev/null || fail "deleting the policy did not finish in 90 s"
for d in neighbour-a neighbour-b; do
  [[ "$(idle_of "${REL[$d]}")" == 0 ]] || fail "$d still cpu.idle=1 after the policy is gone"
done
! app_fenced neighbour-d || fail "neighbour-d still fenced after the policy is gone"
"$HELM" uninstall "$RELEASE" --namespace "$RNS" --wait --timeout 120s >"$WORK/helm-uninstall.log" 2>&1 ||
  { cat "$WORK/helm-uninstall.log"; fail "helm uninstall failed"; }
$K -n "$RNS" wait --for=delete pod --all --timeout=120s >/dev/null 2>&1 || fail "release pods still there 120 s after helm uninstall"
# shellcheck disable=SC2046
snapshot "$WORK/snap/pods.end" $(pods_rel)
diff_snap "$WORK/snap/pods.0" "$WORK/snap/pods.end" "pod cgroup files after policy deletion + helm uninstall vs before the policy"
pass "g: policy deleted + helm uninstall ($((SECONDS - t1))s): all $(wc -l <"$WORK/snap/pods.end") pod cgroup files of the trainer and neighbours hold their original bytes (restored by the 3rd agent from the host checkpoint)"
$K -n "$WNS" delete deployment neighbour-d --wait=true --timeout=60s >/dev/null || fail "deleting neighbour-d"
$K -n "$WNS" wait --for=delete pod -l app=neighbour-d --timeout=60s >/dev/null 2>&1 || true
qos_as_before_install "QoS tiers after everything vs before install"
pass "g: kubelet's QoS-tier files (${QOS[*]}) byte-identical to their pre-install bytes after 2 restarts, 2 agent replacements, a failover, a partition ($(wc -l <"$WORK/snap/qos.end") files, settled ${QOS_S}s)"

node_down
say "PASS (up ${T_UP}s, install ${T_INSTALL}s, total $((SECONDS - T0))s; kubelet $KUBELET_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION)"

#!/usr/bin/env bash
# e2e_test.sh — the end-to-end tier: real kube-apiserver + etcd (private test bed), real cgroup v1
# (kubelet stand-in), feedguard-controller and feedguard-agent processes, kubectl.
#
#   e2e_test.sh WORKDIR [PHASES]     PHASES: comma list of core,suspend,resilience,leader,hostile
#                                    (default: all but hostile)
#   env: FG_CONTROLLER FG_AGENT FG_STANDIN (binaries), FG_FLOOD (bench/flood/fg-flood, for
#        hostile), FG_E2E_KEEP=1 keeps WORKDIR's logs
#
# Exit codes: 0 all checks passed, 1 a check or a prerequisite failed (named in the output),
# 77 skipped (not root: real cgroups need it).
# shellcheck disable=SC2015,SC2016  # `ok … || bad …` is intended; the sampler script is literal
set -uo pipefail

WORK="${1:?usage: e2e_test.sh WORKDIR [core,suspend,resilience,leader]}"
PHASES=",${2:-core,suspend,resilience,leader},"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"

if [[ "$(id -u)" != 0 ]]; then
  echo "SKIP: e2e needs root (it creates real cgroup v1 dirs and moves its own processes into them)"
  exit 77
fi

PASSED=0 FAILED=0
ok() { PASSED=$((PASSED + 1)); echo "ok   - $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL - $*"; }
fatal() {
  echo "FATAL: $*"
  exit 1
}
# check DESC TIMEOUT CMD... — polls CMD (fg_wait) and records ok/FAIL.
check() {
  local desc="$1" t="$2"
  shift 2
  if fg_wait "$t" "$desc" "$@"; then ok "$desc"; else bad "$desc"; fi
}

rm -rf "$WORK"
fg_init "$WORK" || fatal "cannot create $WORK"
finish() {
  local rc=$?
  fg_cleanup
  local left
  left="$(find /sys/fs/cgroup/ -maxdepth 2 -name "$FG_CGROUP_ROOT" 2>/dev/null)"
  if [[ -n "$FG_CGROUP_ROOT" && -n "$left" ]]; then
    echo "FAIL - cgroup root left behind: $left"
    rc=1
  fi
  if ((rc != 0)) || ((FAILED > 0)); then
    echo "---- logs (tails) ----"
    for f in "$FG_WORK"/logs/*.log; do
      [[ -e "$f" ]] || continue
      echo "== $f"
      tail -n 25 "$f"
    done
  fi
  [[ "${FG_E2E_KEEP:-0}" == 1 ]] || rm -rf "$FG_WORK"
  exit "$rc"
}
trap finish EXIT
trap 'exit 1' INT TERM

fg_check_prereqs || fatal "prerequisites missing (above)"

NODE=e2e-node
POLICY=e2e-trainers
TRAINER_LABEL=feedguard.io/role=trainer

# apply_policy FENCE — the one FencePolicy of this test, with neighbours.fence = FENCE.
apply_policy() { fence_policy "$POLICY" "$1" | fg_kubectl apply -f - >/dev/null; }
idle_of() { fg_pod_file "$1" "$2" cpu cpu.idle; }
shares_of() { fg_pod_file "$1" "$2" cpu cpu.shares; }
# status_is ENFORCED PROTECTED FENCED — counts, Ready=True, observedGeneration == generation.
status_is() {
  fg_policy_matches "$POLICY" "(.status.nodes.enforced // 0) == $1 and
    (.status.trainers.protected // 0) == $2 and (.status.neighbours.fenced // 0) == $3 and
    ([.status.conditions[]? | select(.type == \"Ready\" and .status == \"True\")] | length) == 1 and
    .status.observedGeneration == .metadata.generation"
}

# ---- a) the cluster ------------------------------------------------------------------------
echo "# a) private test bed, CRD, node, namespaces"
fg_testbed_up || fatal "the private test bed did not start (is it built? tests/testbed/build.sh)"
fg_install_crd && ok "CRD installed and Established" || fatal "CRD install failed"
fg_create_node "$NODE" nvidia.com/gpu.present=true && ok "Node $NODE created" || fatal "Node create failed"
for ns in ml batch feedguard-system; do fg_create_namespace "$ns" || fatal "namespace $ns"; done

# ---- b) pods: real cgroups + processes, and Pod objects with kubelet-like status ------------
echo "# b) kubelet stand-in + pods"
fg_standin_start systemd || fatal "kubelet stand-in did not start"
fg_create_pod ml trainer-1 "$NODE" "$TRAINER_LABEL" 500 0 || fatal "create trainer-1"
fg_create_pod batch spin-1 "$NODE" app=spin 250 1000 || fatal "create spin-1"
fg_create_pod batch spin-2 "$NODE" app=spin 0 0 || fatal "create spin-2"
fg_create_pod batch spin-3 "$NODE" app=spin 200 200 || fatal "create spin-3"
check "pods Running with containerIDs in the API" 20 bash -c \
  "[[ \$('$FG_KUBECTL' --kubeconfig '$FG_KUBECONFIG' get pods -A --field-selector spec.nodeName=$NODE \
     -o json | jq '[.items[] | select(.status.phase == \"Running\" and
       (.status.containerStatuses[0].containerID | startswith(\"containerd://\")))] | length') == 4 ]]"
[[ "$(cat "$(idle_of batch spin-1)")" == 0 ]] && ok "neighbour cpu.idle starts at 0" || bad "spin-1 cpu.idle is not 0 before any policy"

# ---- c) controller + agent + policy --------------------------------------------------------
echo "# c) controller, agent, FencePolicy (Idle)"
# hostile: a small fence limit, so that one pod of many containers makes the node's fence too big.
CTL_FLAGS=()
[[ "$PHASES" == *,hostile,* ]] && CTL_FLAGS=(--max-fence-bytes 1600)
fg_controller_start ctl "${CTL_FLAGS[@]}" || fatal "controller did not start"
fg_controller_wait_leading ctl 30 || fatal "controller never served agents"
fg_agent_start agent "$NODE" "127.0.0.1:${FG_GRPC_PORT[ctl]}"
check "agent connected (feedguard_agents_connected 1)" 30 fg_metric_is ctl feedguard_agents_connected 1

if [[ "$PHASES" == *,core,* || "$PHASES" == *,resilience,* || "$PHASES" == *,leader,* ||
      "$PHASES" == *,suspend,* ]]; then
  apply_policy Idle && ok "FencePolicy applied (fence: Idle)" || fatal "kubectl apply FencePolicy failed"
  for p in spin-1 spin-2 spin-3; do
    check "neighbour batch/$p cpu.idle = 1" 30 fg_file_is "$(idle_of batch $p)" 1
  done
  check "trainer ml/trainer-1 untouched" 5 fg_check_snapshot ml trainer-1
  check "status: enforced=1 protected=1 fenced=3 Ready=True, observedGeneration current" 30 status_is 1 1 3
  check "finalizer on the policy" 10 fg_policy_matches "$POLICY" '.metadata.finalizers | length > 0'
fi

# ---- s) the emergency off switch: annotation on the agent namespace ---------------------------
# has_event REASON — an Event with this reason on the policy.
has_event() {
  [[ -n "$(fg_kubectl get events -A --field-selector "involvedObject.name=$POLICY,reason=$1" -o name)" ]] ||
    { echo "no Event $1 on $POLICY"; return 1; }
}
if [[ "$PHASES" == *,suspend,* ]]; then
  echo "# s) emergency off switch (feedguard.io/suspend=true on namespace feedguard-system)"
  t0="$(fg_now_ms)"
  fg_kubectl annotate namespace feedguard-system feedguard.io/suspend=true >/dev/null &&
    ok "off switch on (kubectl annotate)" || bad "kubectl annotate failed"
  for p in batch/spin-1 batch/spin-2 batch/spin-3 ml/trainer-1; do
    check "suspended: $p holds its original bytes" 10 fg_check_snapshot "${p%/*}" "${p#*/}"
  done
  echo "# every cgroup file back to its original bytes $(($(fg_now_ms) - t0)) ms after the annotation"
  check "suspended: status Suspended=True (every node reverted), Ready=False reason Suspended" 15 \
    fg_policy_matches "$POLICY" '([.status.conditions[]? | select(.type == "Suspended" and .status == "True" and
        (.message | test("every node reverted")))] | length) == 1 and
      ([.status.conditions[]? | select(.type == "Ready" and .status == "False" and .reason == "Suspended")] | length) == 1'
  check "suspended: Event Suspended on the policy" 15 has_event Suspended
  check "suspended: feedguard_suspended 1" 10 fg_metric_is ctl feedguard_suspended 1
  check "suspended: the policy keeps its finalizer" 5 fg_policy_matches "$POLICY" '.metadata.finalizers | length > 0'
  fg_kubectl annotate namespace feedguard-system feedguard.io/suspend- >/dev/null &&
    ok "off switch cleared" || bad "kubectl annotate (remove) failed"
  for p in spin-1 spin-2 spin-3; do
    check "resumed: neighbour batch/$p cpu.idle = 1 again" 15 fg_file_is "$(idle_of batch $p)" 1
  done
  check "resumed: no Suspended condition in status" 30 \
    fg_policy_matches "$POLICY" '([.status.conditions[]? | select(.type == "Suspended")] | length) == 0'
  check "resumed: status enforced=1 protected=1 fenced=3, Ready=True" 30 status_is 1 1 3
  check "resumed: Event Resumed on the policy" 15 has_event Resumed
  check "resumed: feedguard_suspended 0" 10 fg_metric_is ctl feedguard_suspended 0
fi

# ---- d) changes: new trainer, new neighbour, policy edit, delete -----------------------------
if [[ "$PHASES" == *,core,* ]]; then
  echo "# d) new trainer, new neighbour, policy edit, delete"
  fg_create_pod ml trainer-2 "$NODE" "$TRAINER_LABEL" 1000 0 || fatal "create trainer-2"
  check "status counts the new trainer (protected=2, fenced=3)" 30 status_is 1 2 3
  check "new trainer ml/trainer-2 untouched" 5 fg_check_snapshot ml trainer-2
  fg_create_pod batch spin-4 "$NODE" app=spin 100 0 || fatal "create spin-4"
  check "new neighbour batch/spin-4 cpu.idle = 1" 30 fg_file_is "$(idle_of batch spin-4)" 1
  check "status: fenced=4" 30 status_is 1 2 4
  for p in trainer-1 trainer-2; do
    [[ "$(cat "$(idle_of ml $p)")" == 0 ]] && ok "trainer ml/$p cpu.idle still 0" || bad "trainer ml/$p cpu.idle changed"
  done

  # Policy edit: Weight instead of Idle — shares drop, idle goes back to its original.
  gen_before="$(fg_policy_json "$POLICY" | jq .metadata.generation)"
  apply_policy Weight && ok "policy edited (fence: Weight)" || bad "kubectl apply (Weight) failed"
  for p in spin-1 spin-3 spin-4; do
    orig_shares="$(grep -F "$(shares_of batch $p)"$'\t' "$FG_WORK/orig/batch_$p" | cut -f2 | base64 -d)"
    check "batch/$p cpu.shares lowered from $orig_shares" 30 fg_file_is_not "$(shares_of batch $p)" "$orig_shares"
    check "batch/$p cpu.idle back to 0 under Weight" 30 fg_file_is "$(idle_of batch $p)" 0
  done
  check "status observes the new generation (> $gen_before), still enforced" 30 \
    fg_policy_matches "$POLICY" ".metadata.generation > $gen_before and .status.observedGeneration == .metadata.generation and .status.nodes.enforced == 1"

  # Back to DryRun: the fences are withdrawn (every file holds its original bytes again) while
  # the policy goes on planning and reporting; then Enforce writes them again.
  gen_before="$(fg_policy_json "$POLICY" | jq .metadata.generation)"
  fg_kubectl patch fencepolicy "$POLICY" --type merge -p '{"spec":{"mode":"DryRun"}}' >/dev/null &&
    ok "policy patched to DryRun" || bad "kubectl patch (DryRun) failed"
  for p in batch/spin-1 batch/spin-2 batch/spin-3 batch/spin-4 ml/trainer-1 ml/trainer-2; do
    check "DryRun: $p holds its original bytes" 30 fg_check_snapshot "${p%/*}" "${p#*/}"
  done
  check "DryRun: status observes the new generation, Ready (reason DryRun)" 30 \
    fg_policy_matches "$POLICY" ".metadata.generation > $gen_before and .status.observedGeneration == .metadata.generation and
      ([.status.conditions[]? | select(.type == \"Ready\" and .status == \"True\" and .reason == \"DryRun\")] | length) == 1"
  check "DryRun: no failures listed" 10 fg_policy_matches "$POLICY" "(.status.failures | length) == 0"
  check "DryRun: planned pods counted (protected=2, fenced=4)" 10 status_is 1 2 4
  fg_kubectl patch fencepolicy "$POLICY" --type merge -p '{"spec":{"mode":"Enforce"}}' >/dev/null &&
    ok "policy patched back to Enforce" || bad "kubectl patch (Enforce) failed"
  orig_shares="$(grep -F "$(shares_of batch spin-1)"$'\t' "$FG_WORK/orig/batch_spin-1" | cut -f2 | base64 -d)"
  check "Enforce again: batch/spin-1 cpu.shares lowered from $orig_shares" 30 \
    fg_file_is_not "$(shares_of batch spin-1)" "$orig_shares"

  # Delete: every file back to its exact original bytes, then the finalizer goes and the object too.
  fg_kubectl delete fencepolicy "$POLICY" --wait=false >/dev/null && ok "kubectl delete fencepolicy" || bad "kubectl delete failed"
  for p in batch/spin-1 batch/spin-2 batch/spin-3 batch/spin-4 ml/trainer-1 ml/trainer-2; do
    check "$p: every file holds its original bytes" 30 fg_check_snapshot "${p%/*}" "${p#*/}"
  done
  check "FencePolicy gone (finalizer removed)" 30 fg_policy_gone "$POLICY"
  fg_delete_pod ml trainer-2 && fg_delete_pod batch spin-4 || bad "deleting pods failed"
fi

# ---- e) watch resilience: API server restart, etcd compaction ---------------------------------
# sampler FILE... — background: one line "ms path value" each time a file's value changes.
start_sampler() {
  local out="$FG_WORK/sampler.txt"
  : >"$out"
  fg_spawn sampler bash -c '
    out="$1"; shift; declare -A last
    end=$(( $(date +%s) + 900 ))
    while (( $(date +%s) < end )); do
      for f in "$@"; do
        v="$(cat "$f" 2>/dev/null || echo "<gone>")"
        if [[ "${last[$f]-unset}" != "$v" ]]; then last[$f]="$v"; echo "$(date +%s%3N) $f $v" >>"$out"; fi
      done
      sleep 0.05
    done' sampler "$out" "$@"
}
# sampler_changes — changes recorded after each file's first value.
sampler_changes() { awk '{seen[$2]++; if (seen[$2] > 1) print}' "$FG_WORK/sampler.txt"; }
stop_sampler() { fg_stop sampler TERM; }

if [[ "$PHASES" == *,resilience,* || "$PHASES" == *,leader,* ]]; then
  apply_policy Idle || fatal "re-applying the policy (Idle) failed"
  check "policy (Idle) enforced again" 30 status_is 1 1 3
  for p in spin-1 spin-2 spin-3; do check "batch/$p cpu.idle = 1" 30 fg_file_is "$(idle_of batch $p)" 1; done
fi

if [[ "$PHASES" == *,resilience,* ]]; then
  echo "# e) API server restart + etcd compaction"
  files=()
  for p in spin-1 spin-2 spin-3; do files+=("$(idle_of batch $p)" "$(shares_of batch $p)"); done
  files+=("$(idle_of ml trainer-1)" "$(shares_of ml trainer-1)")
  start_sampler "${files[@]}"
  sent_before="$(fg_metric ctl feedguard_fences_sent_total)"
  "$FG_TESTBED_SH" restart-apiserver "$FG_TESTBED_DIR" >>"$FG_WORK/logs/testbed-restart.log" 2>&1 &&
    ok "kube-apiserver restarted" || bad "restart-apiserver failed"
  # Changes made while watches re-establish, then a compaction so the old RVs are gone (410).
  "$FG_TESTBED_SH" compact "$FG_TESTBED_DIR" >>"$FG_WORK/logs/testbed-compact.log" 2>&1 &&
    ok "etcd compacted" || bad "etcd compaction failed"
  fg_kubectl create configmap e2e-churn -n batch --from-literal=a=1 >/dev/null  # moves the RV on
  "$FG_TESTBED_SH" compact "$FG_TESTBED_DIR" >>"$FG_WORK/logs/testbed-compact.log" 2>&1 || bad "second compaction failed"
  # Nothing changed for the fence: watch the files and the controller for a quiet window.
  quiet_end=$(($(fg_now_ms) + 8000))
  while (($(fg_now_ms) < quiet_end)); do sleep 0.5; done
  [[ -z "$(sampler_changes)" ]] && ok "no cgroup file changed across restart + compaction" ||
    bad "files flapped across restart: $(sampler_changes | head -5)"
  sent_after="$(fg_metric ctl feedguard_fences_sent_total)"
  [[ "$sent_after" == "$sent_before" ]] && ok "no NodeFence re-sent for an unchanged cluster ($sent_after)" ||
    bad "feedguard_fences_sent_total $sent_before -> $sent_after with nothing changed"
  # A change after the restart is still seen and enforced.
  fg_create_pod batch spin-5 "$NODE" app=spin 100 0 || bad "create spin-5 after restart"
  check "after restart: new neighbour batch/spin-5 cpu.idle = 1" 40 fg_file_is "$(idle_of batch spin-5)" 1
  check "after restart: status fenced=4" 40 status_is 1 1 4
  fg_delete_pod batch spin-5 || bad "delete spin-5"
  check "after restart: status fenced=3 once spin-5 is gone" 40 status_is 1 1 3
  stop_sampler
  # A policy change after the compaction (the FencePolicy informer must have relisted too).
  orig_shares="$(grep -F "$(shares_of batch spin-1)"$'\t' "$FG_WORK/orig/batch_spin-1" | cut -f2 | base64 -d)"
  apply_policy Weight || bad "kubectl apply (Weight) after restart failed"
  check "after restart: policy edit (Weight) lowers batch/spin-1 cpu.shares" 40 fg_file_is_not "$(shares_of batch spin-1)" "$orig_shares"
  check "after restart: policy edit (Weight) clears batch/spin-1 cpu.idle" 40 fg_file_is "$(idle_of batch spin-1)" 0
  apply_policy Idle || bad "kubectl apply (Idle) after restart failed"
  check "after restart: policy edit (Idle) sets batch/spin-1 cpu.idle = 1 again" 40 fg_file_is "$(idle_of batch spin-1)" 1
fi

# ---- f) two replicas, leader election, kill -9 the leader -----------------------------------
if [[ "$PHASES" == *,leader,* ]]; then
  echo "# f) leader election: two replicas, kill -9 the leader"
  fg_stop agent TERM
  fg_stop ctl TERM
  for p in spin-1 spin-2 spin-3; do
    [[ "$(cat "$(idle_of batch $p)")" == 1 ]] && ok "batch/$p stays fenced with no controller (fail static)" || bad "batch/$p unfenced when the controller stopped"
  done
  files=()
  for p in spin-1 spin-2 spin-3; do files+=("$(idle_of batch $p)"); done
  start_sampler "${files[@]}"
  le=(--leader-elect --lease-namespace feedguard-system)
  fg_controller_start r1 "${le[@]}" || bad "replica r1 did not start"
  fg_controller_start r2 "${le[@]}" || bad "replica r2 did not start"
  one_leader() {
    local a b
    a="$(fg_metric r1 feedguard_controller_leader)" b="$(fg_metric r2 feedguard_controller_leader)"
    [[ "$a$b" == 10 || "$a$b" == 01 ]] || { echo "leader gauges r1=$a r2=$b"; return 1; }
  }
  check "exactly one leader (feedguard_controller_leader 1 vs 0)" 40 one_leader
  if [[ "$(fg_metric r1 feedguard_controller_leader)" == 1 ]]; then leader=r1 follower=r2; else leader=r2 follower=r1; fi
  fg_controller_wait_leading "$leader" 30 || bad "leader $leader serves no gRPC"
  check "leader /readyz 200" 30 bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:${FG_METRICS_PORT[$leader]}/readyz) == 200 ]]"
  [[ "$(fg_readyz "$follower")" == 503 ]] && ok "follower /readyz 503" || bad "follower /readyz $(fg_readyz "$follower")"
  fg_agent_start agent2 "$NODE" "127.0.0.1:${FG_GRPC_PORT[$leader]}"
  check "agent connected to leader $leader" 30 fg_metric_is "$leader" feedguard_agents_connected 1
  check "status enforced under $leader" 40 status_is 1 1 3

  # The armed standby (--standby-arm-after-ms, default 1.5 x the 2 s retry period): a leader that
  # stops renewing (SIGSTOP, shorter than the 15 s Lease) makes the follower listen for agents'
  # streams; when the leader renews again (SIGCONT) the follower lets go.
  armed_port() { sed -n "s/.*holding agents' streams on port \([0-9]*\).*/\1/p" "${FG_LOG[$1]}" | tail -n1; }
  listens_on() { fg_listen_ports "${FG_PID[$1]}" | grep -qx "$2" || { echo "$1 does not listen on $2"; return 1; }; }
  not_listening_on() { ! fg_listen_ports "${FG_PID[$1]}" | grep -qx "$2" || { echo "$1 still listens on $2"; return 1; }; }
  held_not_leading() {
    fg_metric_is "$1" feedguard_agents_connected 1 && fg_metric_is "$1" feedguard_controller_leader 0
  }
  kill -STOP "${FG_PID[$leader]}"
  check "follower arms while the leader is silent (standby_armed 1)" 9 fg_metric_is "$follower" feedguard_controller_standby_armed 1
  port1="$(armed_port "$follower")"
  [[ -n "$port1" ]] && listens_on "$follower" "$port1" >/dev/null && ok "armed follower listens for agents on $port1" ||
    bad "armed follower does not listen on ${port1:-?}"
  fg_metric_is "$follower" feedguard_controller_leader 0 >/dev/null && ok "armed follower does not lead" ||
    bad "armed follower leads"
  [[ "$(fg_readyz "$follower")" == 503 ]] && ok "armed follower /readyz 503 (only the leader is ready)" || bad "armed follower /readyz $(fg_readyz "$follower")"
  kill -CONT "${FG_PID[$leader]}"
  check "follower lets go when the leader renews (standby_armed 0)" 10 fg_metric_is "$follower" feedguard_controller_standby_armed 0
  check "follower stops listening on ${port1:-?}" 5 not_listening_on "$follower" "$port1"
  fg_metric_is "$leader" feedguard_controller_leader 1 >/dev/null && ok "the paused leader still leads" ||
    bad "the paused leader lost the Lease"

  kill_ms="$(fg_now_ms)"
  fg_stop "$leader" KILL
  # Armed after the kill: an agent that dials the follower now holds a stream there before the
  # follower leads, and is fenced by it once it does.
  check "follower arms after the leader's kill" 9 fg_metric_is "$follower" feedguard_controller_standby_armed 1
  armed_port="$(armed_port "$follower")"
  fg_stop agent2 TERM
  fg_agent_start agent3 "$NODE" "127.0.0.1:${armed_port:-0}"
  check "agent's stream held by the armed follower before it leads" 8 held_not_leading "$follower"
  check "follower $follower takes over (leader gauge 1) within 25 s" 25 fg_metric_is "$follower" feedguard_controller_leader 1
  takeover_ms=$(($(fg_now_ms) - kill_ms))
  echo "# takeover after ${takeover_ms} ms"
  fg_controller_wait_leading "$follower" 20 || bad "new leader $follower serves no gRPC"
  [[ "${FG_GRPC_PORT[$follower]}" == "$armed_port" ]] && ok "the new leader serves on the port it held streams on" ||
    bad "new leader port ${FG_GRPC_PORT[$follower]}, armed port $armed_port"
  check "agent connected to new leader $follower" 30 fg_metric_is "$follower" feedguard_agents_connected 1
  check "status enforced under new leader" 40 status_is 1 1 3
  fg_create_pod batch spin-6 "$NODE" app=spin 100 0 || bad "create spin-6 under the new leader"
  check "new leader enforces a new neighbour (batch/spin-6 cpu.idle = 1)" 40 fg_file_is "$(idle_of batch spin-6)" 1
  check "new leader writes status (fenced=4)" 40 status_is 1 1 4
  stop_sampler
  [[ -z "$(sampler_changes)" ]] && ok "fenced files held their values through the failover (sampled every 50 ms)" ||
    bad "files changed during failover: $(sampler_changes | head -5)"
fi

# ---- h) hostile input (issue 28): the outside tester's attacks against the real processes ------
# probe_all PORT N — N kubelet-style probes of /healthz (a new connection each, 1 s timeout),
# one every 200 ms; prints how many were answered.
probe_all() {
  local port="$1" n="$2" ok=0 i
  for ((i = 0; i < n; i++)); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$port/healthz")" == 200 ]] &&
      ok=$((ok + 1))
    sleep 0.2
  done
  echo "$ok"
}
# agent_metrics_port NAME — the port the agent NAME serves /healthz on (its only listening port).
agent_metrics_port() { fg_listen_ports "${FG_PID[$1]}" | head -n1; }
# pending_at_most N — the controller's hellos in progress are at most N.
pending_at_most() {
  local v
  v="$(fg_metric ctl feedguard_agent_hellos_pending)" || { echo "no feedguard_agent_hellos_pending"; return 1; }
  ((${v%.*} <= $1)) || { echo "feedguard_agent_hellos_pending $v"; return 1; }
}
# refused_on_connection — the per-connection bound has refused streams (the attack is real).
refused_on_connection() {
  local v
  v="$(curl -fsS --max-time 5 "http://127.0.0.1:${FG_METRICS_PORT[ctl]}/metrics" |
    awk '$1 == "feedguard_agent_streams_refused_total{bound=\"connection\"}" {print $2}')"
  [[ -n "$v" ]] && ((${v%.*} > 0)) || { echo "refused on the connection: '${v}'"; return 1; }
}
ctl_log_has() { grep -q -- "$1" "${FG_LOG[ctl]}" || { echo "no '$1' in the controller's log"; return 1; }; }

if [[ "$PHASES" == *,hostile,* ]]; then
  echo "# h) hostile input (issue 28)"
  [[ -x "${FG_FLOOD:-}" ]] || fatal "FG_FLOOD (bench/flood/fg-flood) is not built"
  GRPC="${FG_GRPC_PORT[ctl]}"

  # h1) item 3, agent side: a tenant's child cgroup named with bytes that are not UTF-8 below a
  # Cpuset-fenced neighbour's container (made before the fence, so the first plan walks it).
  child="$(fg_pod_dir batch spin-1 cpuset main)/"$'\xff\xfe'
  mkdir "$child" || fatal "mkdir of the non-UTF-8 child cgroup failed"
  # Cpuset keeps neighbours off pinned trainers' cores: the trainer gets one whole core.
  fence_policy "$POLICY" Cpuset '{cores: 1}' | fg_kubectl apply -f - >/dev/null &&
    ok "FencePolicy applied (fence: Cpuset, trainer pinned to 1 core)" || fatal "kubectl apply (Cpuset) failed"
  check "Cpuset fence enforced with the non-UTF-8 child below a neighbour: enforced=1, no failure" 40 \
    fg_policy_matches "$POLICY" '.status.nodes.enforced == 1 and (.status.failures | length) == 0 and .status.neighbours.fenced == 3'
  fenced="$(cat "$(fg_pod_file batch spin-1 cpuset cpuset.cpus main)")"
  check "the child is confined with its neighbour (cpuset.cpus $fenced)" 10 fg_file_is "$child/cpuset.cpus" "$fenced"
  check "the controller read every report (feedguard_agent_messages_unreadable_total 0)" 5 \
    fg_metric_is ctl feedguard_agent_messages_unreadable_total 0

  # h2) item 3, controller side: a report the controller cannot parse, after the ACK (the
  # agent's own escaping is bypassed: fg-flood sends it for the node).
  fg_stop agent TERM
  "$FG_FLOOD" --port "$GRPC" --kinds badreport --threads 1 --node "$NODE" >"$FG_WORK/logs/badreport.log" 2>&1
  check "unreadable report counted (feedguard_agent_messages_unreadable_total 1)" 10 \
    fg_metric_is ctl feedguard_agent_messages_unreadable_total 1
  check "the node is failing, not enforced (AgentMessageUnreadable)" 20 fg_policy_matches "$POLICY" \
    '.status.nodes.enforced == 0 and .status.nodes.failed == 1 and ([.status.failures[] | select(.reason == "AgentMessageUnreadable")] | length) == 1'
  check "the controller logged it" 5 ctl_log_has "did not parse as an AgentMessage"
  fg_agent_start agent-h "$NODE" "127.0.0.1:$GRPC" --metrics-addr 127.0.0.1:0
  check "the real agent's readable report clears it: enforced=1 again" 40 \
    fg_policy_matches "$POLICY" '.status.nodes.enforced == 1 and (.status.failures | length) == 0'

  # h3) item 1: one connection holds 1,100 streams that never say hello; the agent restarts
  # meanwhile and must be served.
  fg_spawn onesock "$FG_FLOOD" --port "$GRPC" --kinds onesock --threads 1 --onesock-streams 1100 --duration-s 45
  sleep 3
  check "the attack holds at most its connection's share (feedguard_agent_hellos_pending <= 2)" 10 \
    pending_at_most 2
  check "the attack is on: its connection's extra streams are refused" 10 refused_on_connection
  fg_stop agent-h TERM
  check "agent gone" 20 fg_metric_is ctl feedguard_agents_connected 0
  t0="$(fg_now_ms)"
  fg_agent_start agent-h2 "$NODE" "127.0.0.1:$GRPC" --metrics-addr 127.0.0.1:0
  check "a restarted agent is served during the attack (connected within 20 s)" 20 fg_metric_is ctl feedguard_agents_connected 1
  echo "# agent connected $(($(fg_now_ms) - t0)) ms after its start, during the attack"
  check "and enforced during the attack" 30 fg_policy_matches "$POLICY" '.status.nodes.enforced == 1'
  { wait "${FG_PID[onesock]}"; } 2>/dev/null
  unset 'FG_PID[onesock]'

  # h4) item 4: 200 slowloris connections at the controller's and at the agent's probe port.
  aport="$(agent_metrics_port agent-h2)"
  [[ -n "$aport" ]] || bad "agent-h2 serves no metrics port"
  for target in "controller:${FG_METRICS_PORT[ctl]}" "agent:$aport"; do
    port="${target#*:}"
    "$FG_FLOOD" --kinds '' --threads 0 --slowloris 200 --slowloris-port "$port" --duration-s 12 \
      >"$FG_WORK/logs/slowloris-${target%%:*}.log" 2>&1 &
    slow_pid=$!
    sleep 2
    answered="$(probe_all "$port" 30)"
    wait "$slow_pid"
    ((answered == 30)) && ok "${target%%:*} /healthz answered $answered of 30 probes during 200 slow connections" ||
      bad "${target%%:*} /healthz answered $answered of 30 probes during 200 slow connections"
  done

  # h5) item 2: a pod of many containers makes the node's fence bigger than the controller sends
  # (--max-fence-bytes 1600 here): reported FenceTooLarge, the node keeps its last fence.
  FG_POD_CONTAINERS=20 fg_create_pod batch wide "$NODE" app=spin 0 0 || bad "create batch/wide (20 containers)"
  check "fence too large: node failed with FenceTooLarge" 30 fg_policy_matches "$POLICY" \
    '.status.nodes.failed == 1 and ([.status.failures[] | select(.reason == "FenceTooLarge")] | length) == 1'
  check "the node keeps its last fence (batch/spin-1 still confined to $fenced)" 5 \
    fg_file_is "$(fg_pod_file batch spin-1 cpuset cpuset.cpus main)" "$fenced"
  fg_delete_pod batch wide || bad "delete batch/wide"
  check "fits again once the pod is gone: enforced=1, no failure" 40 \
    fg_policy_matches "$POLICY" '.status.nodes.enforced == 1 and (.status.failures | length) == 0'

  fg_kubectl delete fencepolicy "$POLICY" --wait=false >/dev/null || bad "kubectl delete fencepolicy failed"
  for p in batch/spin-1 batch/spin-2 batch/spin-3 ml/trainer-1; do
    check "$p: every file holds its original bytes" 30 fg_check_snapshot "${p%/*}" "${p#*/}"
  done
  check "FencePolicy gone (finalizer removed)" 30 fg_policy_gone "$POLICY"
  rmdir "$child" || bad "could not remove the non-UTF-8 child cgroup"
fi

echo "# passed $PASSED, failed $FAILED"
((FAILED == 0))

#!/bin/bash
# scenario_fences.sh — every fence kind on the systemd node, under what systemd, containerd and
# kubelet do to a node every day, measured (sourced by run.sh after node_up):
#
#   1. The chart installed (agent.cgroup.driver=systemd, narrow host mounts). Four policies, each
#      with a trainer and a neighbour of its own: Idle, Weight, Quota (50%), Cpuset with the
#      trainer pinned to a whole core (cores: 1). Every pod Burstable (50m, limit 1 CPU: ten of them and the chart fit 2 CPUs).
#   2. Fence latency: `kubectl apply` of the policies → every fenced file holding its fence.
#   3. Events, each a segment of the observations: 10 `systemctl daemon-reload` 3 s apart, 10
#      back to back, `systemctl restart containerd`, `systemctl restart kubelet`, an in-place
#      resize of the Idle, Weight, Quota and Cpuset neighbours (kubectl patch --subresource
#      resize), a runtime update of the Cpuset neighbour's container (ctr tasks update), a new
#      pod slice beside the fenced ones. fg-cgwatch records every write to every fenced file.
#   4. Nothing abandoned: after the events every fence holds, no pod reported Contested.
#   5. The policies deleted: every file holds kubelet's latest value — the bytes it held before
#      the fence, or what kubelet's resize wrote — and a daemon-reload afterwards changes nothing.
#
# With ARMS=1 (scenario_arms.sh) three ways to hold an Idle fence on a systemd slice are measured
# side by side on the daemon-reloads, then the run ends with their revert (docs/DESIGN.md §4,
# "Fencing a systemd slice"; the agent keeps cpu.idle there, --idle-when-weight-reads-zero):
#   (a) direct   nb-idle: the agent writes cpu.idle and re-applies it after other writers (inotify);
#   (b) dbus     nb-dbus: no policy; cpu.idle set through systemd itself (SetUnitProperties,
#                runtime, CPUWeight=idle) by this script, as an agent using D-Bus would;
#   (c) both     nb-both: in the Idle policy (the agent writes the file) and CPUWeight=idle set
#                through systemd as in (b).
# Observations (observations.jsonl, cgwatch.log) are turned into the shape's row by analyze.py.

KINDS=(idle weight quota cpuset)
ARMS="${ARMS:-0}"
ARM_KINDS=()
((ARMS)) && ARM_KINDS=(dbus both)
declare -A FENCE=([idle]=Idle [weight]=Weight [quota]=Quota [cpuset]=Cpuset)

pods_yaml() {
  local k role name
  for k in "${KINDS[@]}" "${ARM_KINDS[@]}"; do
    for role in trainer nb; do
      [[ "$role" == trainer && ( "$k" == dbus || "$k" == both ) ]] && continue
      name="$role-$k"
      local labels="{fg-role: $role, fg-kind: $k}"
      [[ "$k" == both ]] && labels="{fg-role: nb, fg-kind: idle, fg-arm: both}"
      cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $NS, labels: $labels}
spec:
  terminationGracePeriodSeconds: 1
  enableServiceLinks: false
  automountServiceAccountToken: false
  containers:
  - name: main
    image: feedguard.local/busybox:1
    imagePullPolicy: Never
    command: [sleep, "86400"]
    resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}]
    resources: {requests: {cpu: 50m}, limits: {cpu: "1"}}
---
YAML
    done
  done
}

policy_yaml() {  # KIND
  local k="$1" extra=""
  [[ "$k" == quota ]] && extra="    maxCPU: \"50%\""
  local cpu=""
  [[ "$k" == cpuset ]] && cpu="    cpu: {cores: 1, placement: WholeCores, numa: Ignore}"
  cat <<YAML
apiVersion: feedguard.io/v1alpha1
kind: FencePolicy
metadata: {name: shape-$k}
spec:
  mode: Enforce
  trainers:
    podSelector: {matchLabels: {fg-role: trainer, fg-kind: $k}}
$cpu
  neighbours:
    podSelector: {matchLabels: {fg-role: nb, fg-kind: $k}}
    fence: ${FENCE[$k]}
$extra
---
YAML
}

# The files each pod's fence owns (pod dir; container dirs for cpusets).
fenced_files() {  # KIND
  local k="$1" nb tr
  nb="$(pod_dir "nb-$k")" tr="$(pod_dir "trainer-$k")"
  case "$k" in
    idle) if ((IDLE_AS_WEIGHT)); then echo "$nb/$WEIGHT_FILE"; else echo "$nb/cpu.idle"; fi ;;
    weight) echo "$nb/$WEIGHT_FILE" ;;
    quota) echo "$nb/$QUOTA_FILE" ;;
    cpuset)
      find "$(cpuset_dir "$nb")" "$(cpuset_dir "$tr")" -name cpuset.cpus | sort ;;
  esac
}
all_fenced_files() {
  local k
  for k in "${KINDS[@]}"; do fenced_files "$k"; done
  ((ARMS)) || return 0
  echo "$(pod_dir nb-dbus)/cpu.idle"
  echo "$(pod_dir nb-both)/cpu.idle"
}
# set_unit_idle POD 1|0 — CPUWeight=idle (or back to kubelet's weight, from the pre-fence bytes)
# on the pod's slice through systemd's D-Bus API, runtime only: the (b) and (c) arms.
set_unit_idle() {
  local d unit w
  d="$(pod_dir "$1")" unit="$(unit_of "$(pod_dir "$1")")"
  if [[ "$2" == 1 ]]; then
    w=0
  elif [[ "$CGROUP" == v1 ]]; then  # systemd's CPUWeight maps to cpu.shares on v1
    w="$(awk -F'\t' -v f="$d/cpu.shares" '$1 == f {print $2}' "$OUT/before.tsv")"
    w=$((1 + (w - 2) * 9999 / 262142))
  else
    w="$(awk -F'\t' -v f="$d/cpu.weight" '$1 == f {print $2}' "$OUT/before.tsv")"
  fi
  busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager \
    SetUnitProperties 'sba(sv)' "$unit" true 1 CPUWeight t "$w" >/dev/null
}
# Every CPU knob file of every pod of the scenario (pod and container dirs): the revert check.
knob_files() {
  local p d
  for p in "${!POD_DIR[@]}"; do
    d="$(pod_dir "$p")"
    [[ -d "$d" ]] || continue
    find "$d" "$(cpuset_dir "$d")" \( -name cpu.idle -o -name cpu.weight -o -name cpu.shares -o -name cpu.max \
      -o -name cpu.cfs_quota_us -o -name cpu.cfs_period_us -o -name cpu.max.burst -o -name cpuset.cpus -o -name cpuset.mems \) 2>/dev/null
  done | sort -u
}
# snapshot FILE... — "path<TAB>bytes" lines (newlines as spaces), without a fork per file (tcg).
snapshot() {
  local f v
  for f in "$@"; do
    v=""
    [[ -r "$f" ]] && { IFS= read -r -d '' v <"$f" || true; }
    v="${v//$'\n'/ }"
    printf '%s\t%s\n' "$f" "${v% }"
  done
}
snapshot_json() { snapshot "$@" | jq -Rn '[inputs | split("\t") | {(.[0]): .[1]}] | add // {}'; }

# fence_holds — each kind's neighbour fenced as its kind says (values, not just "changed").
fence_holds() {
  local d
  d="$(pod_dir nb-idle)"
  if ((IDLE_AS_WEIGHT)); then [[ "$(cat "$d/$WEIGHT_FILE")" == "$MIN_WEIGHT" ]] || return 1
  else [[ "$(cat "$d/cpu.idle")" == 1 ]] || return 1; fi
  d="$(pod_dir nb-weight)"; [[ "$(cat "$d/$WEIGHT_FILE")" == "$MIN_WEIGHT" ]] || return 1
  d="$(pod_dir nb-quota)"; [[ "$(cut -d' ' -f1 "$d/$QUOTA_FILE")" != max && "$(cat "$d/$QUOTA_FILE")" != -1 ]] || return 1
  cpuset_pinned "$(pod_dir trainer-cpuset)" || return 1
  cpuset_pinned "$(pod_dir nb-cpuset)" || return 1
  ((ARMS)) || return 0
  d="$(pod_dir nb-dbus)"; [[ "$(cat "$d/cpu.idle")" == 1 ]] || return 1
  d="$(pod_dir nb-both)"; [[ "$(cat "$d/cpu.idle")" == 1 ]] || return 1
}
# cpuset_pinned POD_DIR — the pod's Cpuset fence in place: every child cgroup's cpuset.cpus (the
# containers', the sandbox's) is non-empty; on v1 the pod dir's too. On v2 the agent never writes
# the pod dir's own set (docs/DESIGN.md §4), which stays empty ("the parent's").
cpuset_pinned() {
  local d f
  d="$(cpuset_dir "$1")"
  if [[ "$CGROUP" == v1 ]]; then [[ -n "$(cat "$d/cpuset.cpus")" ]] || return 1; fi
  for f in "$d"/*/cpuset.cpus; do [[ -n "$(cat "$f" 2>/dev/null)" ]] || return 1; done
}
# idle_held — nb-idle's Idle fence in place: cpu.idle=1, or (IDLE_AS_WEIGHT) the lowest weight.
idle_held() {
  local d
  d="$(pod_dir nb-idle)"
  [[ "$(cat "$d/cpu.idle")" == 1 ]] && { IDLE_AS_WEIGHT=0; return 0; }
  [[ "$(cat "$d/cpu.idle")" == 0 && "$(cat "$d/$WEIGHT_FILE")" == "$MIN_WEIGHT" ]] && { IDLE_AS_WEIGHT=1; return 0; }
  return 1
}
IDLE_AS_WEIGHT=0
# status_sane — kubelet's pod-level status of every pod of the scenario: no absurd CPU request
# read back from a fenced cgroup (kernel_facts.h kIdleWeightReadsZero: ~1.8e15m).
status_sane() {
  K -n "$NS" get pods -o json | jq -r '.items[] | [.metadata.name, (.status.resources.requests.cpu // "-")] | @tsv' >/tmp/status.tsv
  ! awk -F'\t' '$2 != "-" { v = $2; m = ((v ~ /m$/) ? substr(v, 1, length(v) - 1) : v * 1000) + 0; if (m > 1000000) { print; bad = 1 } } END { exit !bad }' /tmp/status.tsv
}
all_running() { [[ "$(K -n "$NS" get pods -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -cv Running)" == 0 ]]; }
policies_enforced() {
  local k
  for k in "${KINDS[@]}"; do
    [[ "$(K get fencepolicy "shape-$k" -o jsonpath='{.status.nodes.enforced}' 2>/dev/null)" == 1 ]] || return 1
  done
}

agent_metrics() {  # the agent pod's /metrics, over the pod network
  local ip
  ip="$(K -n "$RNS" get pods -l app.kubernetes.io/component=agent -o jsonpath='{.items[0].status.podIP}')"
  [[ -n "$ip" ]] || return 1
  exec 3<>"/dev/tcp/$ip/8081" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: agent\r\n\r\n' >&3
  cat <&3
  exec 3<&-
}
metric() { agent_metrics 2>/dev/null | awk -v m="$1" '$1 == m {print $2}'; }

CGW_PID=""
start_watch() {
  [[ -n "$CGW_PID" ]] && kill "$CGW_PID" 2>/dev/null && wait "$CGW_PID" 2>/dev/null
  # shellcheck disable=SC2046
  fg-cgwatch $(all_fenced_files) >>"$OUT/cgwatch.log" 2>>"$OUT/cgwatch.err" &
  CGW_PID=$!
  sleep 0.5
}
# segment NAME — a new measurement segment: the reference (fenced) values as they are now.
segment() {
  local m
  m="$(agent_metrics 2>/dev/null)"
  observe segment "$(jq -nc --arg n "$1" --argjson ref "$(snapshot_json $(all_fenced_files))" \
    --arg ow "$(awk '$1 == "feedguard_overwrites_total" {print $2}' <<<"$m")" \
    --arg rs "$(awk '$1 == "feedguard_restatements_total" {print $2}' <<<"$m")" \
    '{name: $n, ref: $ref, overwrites_total: $ow, restatements_total: $rs}')"
}
mark() { observe mark "$(jq -nc --arg n "$1" --arg p "$2" '{name: $n, phase: $p}')"; }
# settle SECONDS — wait until the fence holds again (or SECONDS pass), then a little more.
settle() {
  local t=$SECONDS
  until fence_holds; do
    if ((SECONDS - t >= $1)); then
      bad "fence not back within $1 s after $2: $(snapshot $(all_fenced_files) | tr '\n' ' ')"
      tail -n 30 "$(ls -d /var/log/pods/${RNS}_*agent*/*/ 2>/dev/null | head -1)"*.log 2>/dev/null
      return 1
    fi
    sleep 0.2
  done
  sleep 2
}

# ---- 1. install, pods --------------------------------------------------------------------------
if ((ARMS)); then helm_install --set agent.idleWhenWeightReadsZero=true; else helm_install; fi
K create namespace "$NS" >/dev/null
pods_yaml | K apply -f - >/dev/null || fail "pods"
wait_until 600 "$((${#KINDS[@]} * 2 + ${#ARM_KINDS[@]})) pods Running" all_running || fail "pods not Running: $(K -n "$NS" get pods -o wide)"
cache_pod_dirs
# Which weight map the runtime used: kubelet sets the pod slice's weight with the linear map
# (50m → 51 shares → 2); runc >= 1.3.2 sets the container's with the quadratic one (→ 11), runc
# 1.1 with the linear one (→ 2). The agent writes pod weights only (kubelet_facts.h).
# The container's own scope (the pod slice also holds the sandbox's, at the minimum weight).
d="$(pod_dir trainer-idle)"
main_id="$(K -n "$NS" get pod trainer-idle -o jsonpath='{.status.containerStatuses[0].containerID}')"
c="$d/cri-containerd-${main_id#containerd://}.scope"
[[ -d "$c" ]] || fail "no scope for trainer-idle's container at $c"
observe weights "$(jq -nc --arg p "$(cat "$d/$WEIGHT_FILE")" --arg c "$(cat "$c/$WEIGHT_FILE" 2>/dev/null)" \
  '{pod_50m: $p, container_50m: $c}')"
say "50m pod: pod slice $WEIGHT_FILE $(cat "$d/$WEIGHT_FILE"), its container's scope $(cat "$c/$WEIGHT_FILE" 2>/dev/null)"
knob_files >/tmp/knobs.before
snapshot $(cat /tmp/knobs.before) >"$OUT/before.tsv"
say "$(wc -l </tmp/knobs.before) knob files recorded before any fence"
for k in "${KINDS[@]}"; do say "unit $(unit_of "$(pod_dir "nb-$k")"): $(systemctl show "$(unit_of "$(pod_dir "nb-$k")")" -p CPUWeight -p CPUQuotaPerSecUSec -p AllowedCPUs | tr '\n' ' ')"; done

# ---- 2. fence ----------------------------------------------------------------------------------
t_apply=$(now_ns)
for k in "${KINDS[@]}"; do policy_yaml "$k"; done | K apply -f - >/dev/null || fail "policies"
if ((ARMS)); then
  set_unit_idle nb-dbus 1 || bad "CPUWeight=idle on nb-dbus's slice"
  set_unit_idle nb-both 1 || bad "CPUWeight=idle on nb-both's slice"
fi
until idle_held && fence_holds; do (( $(now_ns) - t_apply < 300000000000 )) || fail "fences not in place after 300 s"; sleep 0.1; done
t_fenced=$(now_ns)
observe fence_latency "{\"ms\": $(((t_fenced - t_apply) / 1000000))}"
say "every fence in place $(((t_fenced - t_apply) / 1000000)) ms after kubectl apply"
wait_until 180 "every policy Enforced on the node" policies_enforced || true
snapshot $(all_fenced_files) >"$OUT/fenced.tsv"
observe idle_fence "$(jq -nc --argjson w "$IDLE_AS_WEIGHT" --arg m "$(K get fencepolicy shape-idle -o json | jq -c '[.status.failures[]?.message] | first // ""')" \
  --arg weight "$(cat "$(pod_dir nb-idle)/$WEIGHT_FILE")" '{held_as_weight: ($w == 1), weight: $weight}')"
say "Idle fence on nb-idle: $( ((IDLE_AS_WEIGHT)) && echo "held as the lowest weight (this kernel's idle cpu.weight reads 0)" || echo "cpu.idle=1")"
if ((ARMS)); then
  observe arms "$(jq -nc --arg a "$(pod_dir nb-idle)/cpu.idle" --arg b "$(pod_dir nb-dbus)/cpu.idle" \
    --arg c "$(pod_dir nb-both)/cpu.idle" '{($a): "a_direct", ($b): "b_dbus", ($c): "c_both"}')"
else
  wait_until 60 "kubelet's pod status sane (no CPU request read back as ~1e15 from a fenced cgroup)" status_sane ||
    bad "absurd pod status: $(cat /tmp/status.tsv | tr '\n' ' ')"
fi
start_watch

# ---- 3. events ---------------------------------------------------------------------------------
RELOADS=0
segment daemon-reload-spaced
for i in $(seq 1 10); do
  mark daemon-reload start; systemctl daemon-reload; mark daemon-reload end
  RELOADS=$((RELOADS + 1)); sleep 3
done
settle 30 "spaced daemon-reloads"
segment daemon-reload-burst
mark daemon-reload-burst start
for i in $(seq 1 10); do systemctl daemon-reload; RELOADS=$((RELOADS + 1)); done
mark daemon-reload-burst end
settle 30 "a burst of daemon-reloads"
observe daemon_reloads "{\"count\": $RELOADS}"
if ((ARMS)); then SKIP_EVENTS=1; else SKIP_EVENTS=0; fi
if ((!SKIP_EVENTS)); then

segment containerd-restart
mark containerd-restart start; systemctl restart containerd; mark containerd-restart end
settle 60 "containerd restart"
sleep 5

segment kubelet-restart
mark kubelet-restart start; systemctl restart kubelet; mark kubelet-restart end
wait_until 300 "node Ready after the kubelet restart" node_ready
sleep 10  # kubelet re-admits every pod after its restart
all_running || bad "pods lost after the kubelet restart: $(K -n "$NS" get pods --no-headers | awk '$3 != "Running"' | tr '\n' ';')"
settle 60 "kubelet restart"
sleep 5

resize() {  # POD REQUEST LIMIT
  K -n "$NS" patch pod "$1" --subresource resize --type strategic \
    -p "{\"spec\":{\"containers\":[{\"name\":\"main\",\"resources\":{\"requests\":{\"cpu\":\"$2\"},\"limits\":{\"cpu\":\"$3\"}}}]}}" >/dev/null
}
resized() {  # POD REQUEST — kubelet reports the container's resources as resized
  [[ "$(K -n "$NS" get pod "$1" -o jsonpath='{.status.containerStatuses[0].resources.requests.cpu}')" == "$2" ]]
}
segment resize
mark resize start
resize nb-idle 1 1 || bad "resize nb-idle"
resize nb-weight 100m 1 || bad "resize nb-weight"
resize nb-quota 50m 1500m || bad "resize nb-quota"
resize nb-cpuset 100m 1 || bad "resize nb-cpuset"
mark resize end
for p in nb-idle:1 nb-weight:100m nb-quota:50m nb-cpuset:100m; do
  wait_until 180 "kubelet finished resizing ${p%%:*}" resized "${p%%:*}" "${p#*:}" || true
done
settle 120 "the resizes"
sleep 5

segment runtime-update
cid="$(K -n "$NS" get pod nb-cpuset -o jsonpath='{.status.containerStatuses[0].containerID}')"
mark runtime-update start
# What kubelet's CPU manager or a resize asks of the runtime (UpdateContainerResources): the
# shim runs `runc update` on the container (with the systemd driver runc also sets the scope's
# unit properties). ctr 2.x has no `tasks update`; runc is called as the shim calls it.
runc --root /run/containerd/runc/k8s.io update --cpu-share 102 --cpu-quota 100000 --cpu-period 100000 \
  "${cid#containerd://}" || bad "runc update"
mark runtime-update end
settle 60 "a runtime update"
sleep 3

segment new-pod-slice
mark new-pod-slice start
K -n "$NS" apply -f - >/dev/null <<YAML || bad "new pod"
apiVersion: v1
kind: Pod
metadata: {name: new-slice, labels: {fg-role: other}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: feedguard.local/busybox:1, imagePullPolicy: Never, command: [sleep, "86400"],
     resources: {requests: {cpu: 50m}}}
YAML
wait_until 180 "new pod Running" bash -c "[[ \$(kubectl -n $NS get pod new-slice -o jsonpath='{.status.phase}') == Running ]]"
mark new-pod-slice end
settle 30 "a new pod slice"

if [[ "$CGROUP" == v2 ]]; then
# A container of the Cpuset-fenced neighbour killed; kubelet starts it again in a new scope. On v2
# the fence lives in the pod's child cgroups, so the new scope starts with the pod's full set
# until the agent pins it (inotify IN_CREATE on the pod dir): measured here by polling every
# ~10 ms, from the scope's appearance to its cpuset.cpus holding the fence's set.
segment container-restart
pdir="$(pod_dir nb-cpuset)"
cid="$(K -n "$NS" get pod nb-cpuset -o jsonpath='{.status.containerStatuses[0].containerID}')"
old_scope="$(ls -d "$pdir"/*"${cid#containerd://}"*/ 2>/dev/null | head -1)"
want_cpus="$(cat "${old_scope}cpuset.cpus" 2>/dev/null)"
declare -A seen_scope=()
for d in "$pdir"/*/; do seen_scope[$d]=1; done
mark container-restart start
t_kill=$(now_ns)
runc --root /run/containerd/runc/k8s.io kill "${cid#containerd://}" KILL || bad "kill nb-cpuset's container"
new_scope="" t_seen=0 t_pinned=0
for ((i = 0; i < 12000 && t_pinned == 0; i++)); do
  if [[ -z "$new_scope" ]]; then
    for d in "$pdir"/*/; do
      [[ -n "${seen_scope[$d]:-}" ]] && continue
      new_scope="$d" t_seen=$(now_ns)
      break
    done
  fi
  if [[ -n "$new_scope" ]]; then
    v="$(cat "${new_scope}cpuset.cpus" 2>/dev/null)"
    [[ -n "$v" && "$v" == "$want_cpus" ]] && t_pinned=$(now_ns)
  fi
  ((t_pinned)) || sleep 0.01
done
mark container-restart end
if ((t_pinned)); then
  observe container_restart "$(jq -nc --arg s "$new_scope" --arg c "$want_cpus" \
    --argjson k "$(((t_seen - t_kill) / 1000000))" --argjson p "$(((t_pinned - t_seen) / 1000000))" \
    '{scope: $s, cpus: $c, kill_to_scope_ms: $k, scope_to_pinned_ms: $p}')"
  say "container restart: new scope after $(((t_seen - t_kill) / 1000000)) ms, pinned to $want_cpus $(((t_pinned - t_seen) / 1000000)) ms after it appeared"
else
  bad "the restarted container of nb-cpuset was not pinned to '$want_cpus' (new scope '${new_scope}': '$(cat "${new_scope}cpuset.cpus" 2>/dev/null)')"
fi
wait_until 180 "nb-cpuset Running again" bash -c "[[ \$(kubectl -n $NS get pod nb-cpuset -o jsonpath='{.status.phase}') == Running ]]"
settle 60 "a container restart"
fi
fi  # SKIP_EVENTS
segment end
kill "$CGW_PID" 2>/dev/null; wait "$CGW_PID" 2>/dev/null; CGW_PID=""

# ---- 4. nothing abandoned ----------------------------------------------------------------------
fence_holds || bad "a fence no longer holds after the events: $(snapshot $(all_fenced_files) | tr '\n' ' ')"
contested="$(K get fencepolicies -o json | jq -c '[.items[].status.failures[]? | select(.reason == "Contested")]')"
observe abandoned "$(jq -nc --argjson c "$contested" '{contested: $c}')"
[[ "$contested" == "[]" ]] || bad "fences abandoned (Contested): $contested"
K get fencepolicies -o wide >"$OUT/policies.txt" 2>&1
K get fencepolicies -o yaml >"$OUT/policies.yaml" 2>&1
agent_metrics >"$OUT/agent-metrics.txt" 2>&1

# ---- 5. revert ---------------------------------------------------------------------------------
t_del=$(now_ns)
arm_dirs=(/nonexistent/a /nonexistent/b)
((ARMS)) && arm_dirs=("$(pod_dir nb-dbus)" "$(pod_dir nb-both)")
K delete fencepolicies --all --wait=true --timeout=300s >/dev/null || bad "policies not deleted"
# The finalizer waits for the agents' restores; then every file should hold kubelet's value.
knob_files | grep -vF -e "${arm_dirs[0]}" -e "${arm_dirs[1]}" >/tmp/knobs.after
snapshot $(cat /tmp/knobs.after) >"$OUT/after.tsv"
# (c): the agent put nb-both's file back; systemd still holds CPUWeight=idle.
both_after_agent="$(cat "${arm_dirs[1]}/cpu.idle" 2>/dev/null)"
observe revert "{\"ms\": $((($(now_ns) - t_del) / 1000000))}"
systemctl daemon-reload
sleep 2
snapshot $(cat /tmp/knobs.after) >"$OUT/after-reload.tsv"
if ((ARMS)); then
observe dbus_revert "$(jq -nc --arg a "$both_after_agent" --arg b "$(cat "${arm_dirs[1]}/cpu.idle")" \
  --arg d "$(cat "${arm_dirs[0]}/cpu.idle")" \
  '{both_idle_after_agent_revert: $a, both_idle_after_reload: $b, dbus_idle_after_reload: $d}')"
say "(c) nb-both after the agent's revert: cpu.idle $both_after_agent; after a daemon-reload: $(cat "${arm_dirs[1]}/cpu.idle") (systemd still holds CPUWeight=idle)"
set_unit_idle nb-dbus 0 || bad "CPUWeight back on nb-dbus"
set_unit_idle nb-both 0 || bad "CPUWeight back on nb-both"
fi
# Expected: the pre-fence bytes, except where kubelet's resize changed them: the resized pods'
# values are what kubelet (systemd's unit properties) holds now — daemon-reload re-states them.
# Expected after the revert: kubelet's latest value. For the weight and bandwidth files that is
# what systemd re-states on a reload (kubelet set the unit's properties, a resize included); a
# reload leaves cpusets alone (no AllowedCPUs), so there it is the bytes before the fence (a file
# made since, such as a restarted container's, had none: empty). cgroup v2 refuses to empty a
# populated cgroup's cpuset.cpus (ENOSPC, kernel_facts.h); the agent then resets the pod dir's
# children (docs/DESIGN.md §4), else an empty original comes back as the set it inherited — the
# same CPUs, not the same bytes; counted apart.
exact=0 inherited=0 total=0 mism=()
while IFS=$'\t' read -r f v; do
  total=$((total + 1))
  case "$(basename "$f")" in
    cpuset.cpus | cpuset.mems) want="$(awk -F'\t' -v f="$f" '$1 == f {print $2}' "$OUT/before.tsv")" ;;
    *) want="$(awk -F'\t' -v f="$f" '$1 == f {print $2}' "$OUT/after-reload.tsv")" ;;
  esac
  if [[ "$v" == "$want" ]]; then
    exact=$((exact + 1))
  elif [[ "$CGROUP" == v2 && -z "$want" && "$(basename "$f")" == cpuset.* &&
          "$v" == "$(cat "$(dirname "$(dirname "$f")")/$(basename "$f").effective" 2>/dev/null)" ]]; then
    inherited=$((inherited + 1))
  else
    mism+=("$f: reverted '$v', kubelet's '$want'")
  fi
done <"$OUT/after.tsv"
observe revert_exact "$(jq -nc --argjson e "$exact" --argjson i "$inherited" --argjson t "$total" '{exact: $e, inherited: $i, total: $t}')"
say "revert: $exact/$total files byte-exact, $inherited empty cpusets restored as the inherited set (v2), ${#mism[@]} wrong"
((${#mism[@]} == 0)) || bad "revert wrong: $(printf '%s; ' "${mism[@]}")"
# Unresized pods: byte for byte what they held before the fence (cpusets: see above).
for p in trainer-idle trainer-weight trainer-quota; do
  d="$(pod_dir "$p")"
  diff <(grep -F "$d" "$OUT/before.tsv") <(grep -F "$d" "$OUT/after.tsv") >/dev/null ||
    bad "$p's files changed: $(diff <(grep -F "$d" "$OUT/before.tsv") <(grep -F "$d" "$OUT/after.tsv") | tr '\n' ' ')"
done

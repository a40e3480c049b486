#!/usr/bin/env bash
# lib.sh — shared bash library for the end-to-end tier (tests/e2e) and the demo: a private real
# API server (tests/testbed), the kubelet stand-in fixture, feedguard-controller / feedguard-agent
# processes, and "kubelet-like" pods that exist both as real cgroups + processes (stand-in) and as
# Pod objects whose status says what a kubelet would report.
#
#   source tests/e2e/lib.sh
#   fg_init WORKDIR                      # binaries from FG_CONTROLLER FG_AGENT FG_STANDIN (env)
#   fg_testbed_up; fg_install_crd; fg_create_node e2e-node nvidia.com/gpu.present=true
#   fg_standin_start systemd
#   fg_controller_start c1               # sets FG_GRPC_PORT[c1], FG_METRICS_PORT[c1]
#   fg_agent_start a1 e2e-node "127.0.0.1:${FG_GRPC_PORT[c1]}"
#   fg_create_pod ml trainer-1 e2e-node feedguard.io/role=trainer 500 0
#   (or in two steps: fg_prepare_pod ml trainer-1 LABELS 500 0; fg_bind_pod ml trainer-1 e2e-node)
#   fg_check_snapshot ml trainer-1       # every fence-relevant file holds its original bytes
#   fg_pod_file ml trainer-1 cpu cpu.idle  # → /sys/fs/cgroup/cpu/<root>/kubepods.slice/.../cpu.idle
#   fg_delete_pod ml trainer-1
#   fg_cleanup                           # (register with trap) stops everything we started
#
# Conventions: every function prints diagnostics to stderr and returns non-zero on failure (the
# caller decides whether that is fatal). Processes are signalled only by the pid we started, and
# only while /proc/<pid>/cmdline still mentions FG_WORK (no reused pid is ever signalled). Ports
# are 127.0.0.1:0; the bound ports are read back from the process's own listening sockets.
# Needs: bash ≥ 5, kubectl, jq, curl, ss, openssl, root for real cgroups.

# shellcheck disable=SC2034  # FG_GRPC_PORT, FG_METRICS_PORT are for the callers
FG_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FG_REPO="$(cd "$FG_LIB_DIR/../.." && pwd)"
FG_TESTBED_SH="$FG_REPO/tests/testbed/testbed.sh"
FG_CRD="$FG_REPO/crds/fencepolicy.yaml"
FG_STARVATION_CRD="$FG_REPO/crds/starvationreport.yaml"
# fence_policy NAME FENCE [TRAINER-CPU] (shared with the node tier).
# shellcheck source=../fixtures/fence_policy.sh
source "$FG_REPO/tests/fixtures/fence_policy.sh"
FG_KUBECTL="${FG_KUBECTL:-kubectl}"

declare -gA FG_PID=()          # name → pid of a process we started
declare -gA FG_LOG=()          # name → its log file
declare -gA FG_GRPC_PORT=()    # controller name → gRPC port (once it leads)
declare -gA FG_METRICS_PORT=() # controller name → metrics port
FG_WORK="" FG_KUBECONFIG="" FG_PODS_DIR="" FG_CGROUP_ROOT="" FG_DRIVER="" FG_TESTBED_DIR=""
FG_CPU_MOUNT="/sys/fs/cgroup/cpu" FG_CPUSET_MOUNT="/sys/fs/cgroup/cpuset"
# The files a fence may touch, per controller; what fg_snapshot records and fg_check_snapshot
# compares byte for byte.
FG_CPU_KNOBS=(cpu.idle cpu.shares cpu.cfs_quota_us cpu.cfs_period_us cpu.cfs_burst_us)
FG_CPUSET_KNOBS=(cpuset.cpus cpuset.mems)

fg_log() { printf '[e2e %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fg_now_ms() { date +%s%3N; }

# fg_init WORKDIR — creates WORKDIR (must not exist or be empty) and picks the binaries.
fg_init() {
  FG_WORK="$1"
  mkdir -p "$FG_WORK" || return 1
  FG_WORK="$(cd "$FG_WORK" && pwd)"
  FG_PODS_DIR="$FG_WORK/pods"
  FG_TESTBED_DIR="$FG_WORK/tb"
  mkdir -p "$FG_PODS_DIR" "$FG_WORK/logs" "$FG_WORK/orig"
  FG_CONTROLLER="${FG_CONTROLLER:-feedguard-controller}"
  FG_AGENT="${FG_AGENT:-feedguard-agent}"
  FG_STANDIN="${FG_STANDIN:-fg-kubelet-standin}"
}

# fg_check_prereqs — names every missing prerequisite; non-zero if any.
fg_check_prereqs() {
  local bad=0 b
  for b in "$FG_CONTROLLER" "$FG_AGENT" "$FG_STANDIN"; do
    [[ -x "$b" ]] || command -v "$b" >/dev/null || { fg_log "missing binary: $b (build it)"; bad=1; }
  done
  for b in "$FG_KUBECTL" jq curl ss openssl; do
    command -v "$b" >/dev/null || { fg_log "missing tool: $b"; bad=1; }
  done
  [[ -d "$FG_CPU_MOUNT" && -d "$FG_CPUSET_MOUNT" ]] ||
    { fg_log "cgroup v1 cpu/cpuset controllers not mounted at $FG_CPU_MOUNT, $FG_CPUSET_MOUNT"; bad=1; }
  [[ -e "$FG_CPU_MOUNT/cpu.idle" || -n "$(find "$FG_CPU_MOUNT" -maxdepth 2 -name cpu.idle -print -quit 2>/dev/null)" ]] ||
    { fg_log "this kernel has no v1 cpu.idle (needs >= 5.15)"; bad=1; }
  return $bad
}

# ---- waiting -----------------------------------------------------------------------------
# fg_wait TIMEOUT_S DESCRIPTION CMD... — polls CMD every 100 ms until it succeeds; on timeout
# prints DESCRIPTION and CMD's last output, returns 1.
fg_wait() {
  local timeout="$1" desc="$2" out deadline tmp="$FG_WORK/.wait.$BASHPID"
  shift 2
  deadline=$(($(fg_now_ms) + timeout * 1000))
  while :; do
    # In this shell (not a subshell), so CMD may set variables for the caller.
    if "$@" >"$tmp" 2>&1; then
      rm -f "$tmp"
      return 0
    fi
    out="$(cat "$tmp")"
    if (($(fg_now_ms) >= deadline)); then
      rm -f "$tmp"
      fg_log "timed out after ${timeout}s waiting for: $desc"
      [[ -n "$out" ]] && fg_log "  last output: ${out:0:600}"
      return 1
    fi
    sleep 0.1
  done
}

# fg_file_is FILE VALUE — the file's content (trailing newline dropped) is VALUE.
fg_file_is() {
  local got
  got="$(cat "$1" 2>/dev/null)" || { echo "cannot read $1"; return 1; }
  [[ "$got" == "$2" ]] || { echo "$1 = '$got', want '$2'"; return 1; }
}
fg_file_is_not() {
  local got
  got="$(cat "$1" 2>/dev/null)" || { echo "cannot read $1"; return 1; }
  [[ "$got" != "$2" ]] || { echo "$1 still '$got'"; return 1; }
}

# ---- processes ---------------------------------------------------------------------------
# fg_is_ours PID — alive, not a zombie, and its command line mentions FG_WORK.
fg_is_ours() {
  local pid="$1"
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/$pid/cmdline" ]] || return 1
  [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$FG_WORK"
}

# fg_spawn NAME CMD... — starts CMD in the background, its output in FG_WORK/logs/NAME.log;
# returns once the child runs CMD (or has exited). Until its exec the child is a copy of this
# shell, whose command line need not mention FG_WORK: fg_is_ours would call it gone, and a stop
# right then would leave it running (as tests/testbed/testbed.sh's spawn).
fg_spawn() {
  local name="$1" me shell i
  shift
  FG_LOG[$name]="$FG_WORK/logs/$name.log"
  "$@" </dev/null >>"${FG_LOG[$name]}" 2>&1 &
  FG_PID[$name]=$!
  me=$BASHPID
  shell="$(tr '\0' ' ' <"/proc/$me/cmdline")"
  for ((i = 0; i < 400; i++)); do
    [[ "$(tr '\0' ' ' <"/proc/${FG_PID[$name]}/cmdline" 2>/dev/null)" == "$shell" ]] || break
    sleep 0.005
  done
  fg_log "started $name (pid ${FG_PID[$name]})"
}

# fg_stop NAME [SIGNAL] — SIGTERM (or SIGNAL), wait ≤ 15 s, then SIGKILL; only our own pid.
fg_stop() {
  local name="$1" sig="${2:-TERM}" pid="${FG_PID[$1]:-}" i
  [[ -n "$pid" ]] || return 0
  if fg_is_ours "$pid"; then
    kill "-$sig" "$pid" 2>/dev/null
    for ((i = 0; i < 150; i++)); do
      fg_is_ours "$pid" || break
      sleep 0.1
    done
    if fg_is_ours "$pid"; then
      fg_log "$name (pid $pid) ignored SIG$sig for 15 s; SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  { wait "$pid"; } 2>/dev/null
  unset 'FG_PID[$name]'
  return 0
}

# fg_listen_ports PID — the TCP ports PID listens on, one per line.
fg_listen_ports() {
  ss -Hltnp 2>/dev/null | grep -F "pid=$1," | awk '{print $4}' | sed 's/.*://' | sort -u
}

# ---- test bed and API objects ------------------------------------------------------------
fg_testbed_up() {
  "$FG_TESTBED_SH" up "$FG_TESTBED_DIR" >"$FG_WORK/logs/testbed-up.log" 2>&1 ||
    { cat "$FG_WORK/logs/testbed-up.log" >&2; fg_log "testbed.sh up failed"; return 1; }
  FG_KUBECONFIG="$FG_TESTBED_DIR/kubeconfig"
}
fg_testbed_down() {
  [[ -d "$FG_TESTBED_DIR" ]] || return 0
  "$FG_TESTBED_SH" down "$FG_TESTBED_DIR" >>"$FG_WORK/logs/testbed-down.log" 2>&1
}
fg_kubectl() { "$FG_KUBECTL" --kubeconfig "$FG_KUBECONFIG" --request-timeout=30s "$@"; }

fg_install_crd() {  # both CRDs, as the chart installs them
  fg_kubectl apply -f "$FG_CRD" -f "$FG_STARVATION_CRD" >/dev/null || return 1
  fg_kubectl wait --for=condition=Established --timeout=60s crd/fencepolicies.feedguard.io \
    crd/starvationreports.feedguard.io >/dev/null
}

# fg_create_node NAME [LABEL=VALUE...]
fg_create_node() {
  local name="$1" labels='{}' kv
  shift
  for kv in "$@"; do labels="$(jq -c --arg k "${kv%%=*}" --arg v "${kv#*=}" '. + {($k): $v}' <<<"$labels")"; done
  jq -n --arg n "$name" --argjson l "$labels" \
    '{apiVersion: "v1", kind: "Node", metadata: {name: $n, labels: $l}}' | fg_kubectl create -f - >/dev/null
}

fg_create_namespace() { fg_kubectl create namespace "$1" >/dev/null; }

# ---- kubelet stand-in --------------------------------------------------------------------
# fg_standin_start DRIVER — a fresh cgroup root feedguard-e2e-<pid>-<rand> on every controller.
fg_standin_start() {
  FG_DRIVER="$1"
  FG_CGROUP_ROOT="feedguard-e2e-$$-$(openssl rand -hex 3)"
  fg_spawn standin "$FG_STANDIN" serve --root "$FG_CGROUP_ROOT" --driver "$FG_DRIVER" \
    --pods-dir "$FG_PODS_DIR"
  fg_wait 30 "stand-in serving under $FG_CGROUP_ROOT" grep -q "serving" "${FG_LOG[standin]}"
}
fg_standin_stop() {
  fg_stop standin TERM
  # The stand-in removes its root on SIGTERM; if it could not (crashed), remove only our root's
  # empty dirs, deepest first. Never touches anything outside FG_CGROUP_ROOT.
  local m
  [[ -n "$FG_CGROUP_ROOT" ]] || return 0
  for m in /sys/fs/cgroup/*/"$FG_CGROUP_ROOT"; do
    [[ -d "$m" ]] || continue
    fg_log "removing leftover cgroup dirs under $m"
    find "$m" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
}

# ---- pods --------------------------------------------------------------------------------
fg_pod_key() { echo "${1}_${2}"; }

# fg_create_pod NS NAME NODE LABELS CPU_REQUEST_MILLI CPU_LIMIT_MILLI
#   LABELS: "k=v,k2=v2" or "". QoS follows kubelet's rule: no request/limit → BestEffort,
#   request == limit (>0) → Guaranteed (memory request = limit is added), else Burstable.
#   Command run in the container: FG_POD_COMMAND (JSON array), default ["sleep","86400"].
#   Containers: FG_POD_CONTAINERS (default 1): "main", then "c1", "c2", … each running it.
# Order, so that a test can record the untouched cgroup values before anyone can fence them:
#   1. create the Pod unbound (the API server assigns its uid),
#   2. the stand-in creates the kubelet-shaped cgroups and starts the process (uid, container id),
#   3. snapshot the original cgroup bytes into FG_WORK/orig/NS_NAME,
#   4. bind it to NODE (pods/binding, as a scheduler does): spec.nodeName = NODE,
#   5. patch /status: phase Running, qosClass, containerStatuses[].containerID (what kubelet says).
fg_create_pod() {
  fg_prepare_pod "$1" "$2" "$4" "$5" "$6" && fg_bind_pod "$1" "$2" "$3"
}
# fg_prepare_pod NS NAME LABELS CPU_REQUEST_MILLI CPU_LIMIT_MILLI — steps 1–3 of fg_create_pod.
fg_prepare_pod() {
  local ns="$1" name="$2" labels_csv="$3" req="$4" lim="$5"
  local key labels='{}' kv qos res uid cid cmd pod_json status_file
  key="$(fg_pod_key "$ns" "$name")"
  if [[ -n "$labels_csv" ]]; then
    IFS=',' read -ra kvs <<<"$labels_csv"
    for kv in "${kvs[@]}"; do labels="$(jq -c --arg k "${kv%%=*}" --arg v "${kv#*=}" '. + {($k): $v}' <<<"$labels")"; done
  fi
  ((lim > 0 && req == 0)) && req="$lim"
  if ((req == 0 && lim == 0)); then
    qos=BestEffort res='{}'
  elif ((req == lim)); then
    qos=Guaranteed
    res="$(jq -nc --arg c "${req}m" '{requests: {cpu: $c, memory: "64Mi"}, limits: {cpu: $c, memory: "64Mi"}}')"
  else
    qos=Burstable
    res="$(jq -nc --arg r "${req}m" '{requests: {cpu: $r}}')"
    ((lim > 0)) && res="$(jq -c --arg l "${lim}m" '. + {limits: {cpu: $l}}' <<<"$res")"
  fi
  # FG_POD_GPUS=N: the pod holds N nvidia.com/gpu (a GPU pod: observed with no policy).
  if [[ -n "${FG_POD_GPUS:-}" ]]; then
    res="$(jq -c --arg g "$FG_POD_GPUS" '.limits = ((.limits // {}) + {"nvidia.com/gpu": $g})' <<<"$res")"
  fi
  local n_containers="${FG_POD_CONTAINERS:-1}" names
  names="$(jq -nc --argjson n "$n_containers" '["main"] + [range(1; $n) | "c\(.)"]')"
  uid="$(jq -n --arg ns "$ns" --arg n "$name" --argjson l "$labels" --argjson r "$res" \
    --argjson names "$names" '{
      apiVersion: "v1", kind: "Pod", metadata: {namespace: $ns, name: $n, labels: $l},
      spec: {containers: [$names[] | {name: ., image: "feedguard.invalid/standin:e2e", resources: $r}]}}' |
    fg_kubectl create -f - -o jsonpath='{.metadata.uid}')" || { fg_log "create pod $ns/$name failed"; return 1; }
  local got_qos
  got_qos="$(fg_kubectl -n "$ns" get pod "$name" -o jsonpath='{.status.qosClass}')"
  [[ "$got_qos" == "$qos" ]] || { fg_log "API server says $ns/$name is $got_qos, we computed $qos"; return 1; }
  cid="containerd://$(openssl rand -hex 32)"
  local cids="[\"$cid\"]" i
  for ((i = 1; i < n_containers; i++)); do
    cids="$(jq -c --arg id "containerd://$(openssl rand -hex 32)" '. + [$id]' <<<"$cids")"
  done
  cmd="${FG_POD_COMMAND:-[\"sleep\",\"86400\"]}"
  # The pod's CPU request and limit go to its first container (main), as before.
  pod_json="$(jq -nc --arg uid "$uid" --arg ns "$ns" --arg n "$name" --arg q "$qos" \
    --argjson names "$names" --argjson ids "$cids" \
    --argjson req "$req" --argjson lim "$lim" --argjson cmd "$cmd" '{uid: $uid, namespace: $ns,
      name: $n, qos: $q, containers: [range(0; $names | length) as $i | {name: $names[$i],
      id: $ids[$i], cpu_request_milli: (if $i == 0 then $req else 0 end),
      cpu_limit_milli: (if $i == 0 then $lim else 0 end), command: $cmd}]}')"
  printf '%s\n' "$pod_json" >"$FG_PODS_DIR/$key.pod.json.tmp" && mv "$FG_PODS_DIR/$key.pod.json.tmp" "$FG_PODS_DIR/$key.pod.json"
  status_file="$FG_PODS_DIR/$key.status.json"
  fg_wait 30 "stand-in started $ns/$name" test -s "$status_file" || return 1
  if jq -e 'has("error")' "$status_file" >/dev/null; then
    fg_log "stand-in could not start $ns/$name: $(jq -r .error "$status_file")"
    return 1
  fi
  fg_snapshot "$ns" "$name" >"$FG_WORK/orig/$key" || return 1
  printf '%s\n' "$cid" >"$FG_WORK/orig/$key.cid"
  printf '%s\n' "$names" >"$FG_WORK/orig/$key.names"
  printf '%s\n' "$cids" >"$FG_WORK/orig/$key.cids"
  printf '%s\n' "$qos" >"$FG_WORK/orig/$key.qos"
}

# fg_bind_pod NS NAME NODE — steps 4 and 5 of fg_create_pod.
fg_bind_pod() {
  local ns="$1" name="$2" node="$3" key cid qos
  key="$(fg_pod_key "$ns" "$name")"
  cid="$(cat "$FG_WORK/orig/$key.cid")" && qos="$(cat "$FG_WORK/orig/$key.qos")" || return 1
  local names='["main"]' cids
  [[ -e "$FG_WORK/orig/$key.names" ]] && names="$(cat "$FG_WORK/orig/$key.names")"
  cids="[\"$cid\"]"
  [[ -e "$FG_WORK/orig/$key.cids" ]] && cids="$(cat "$FG_WORK/orig/$key.cids")"
  jq -nc --arg n "$node" --arg name "$name" \
    '{apiVersion: "v1", kind: "Binding", metadata: {name: $name}, target: {apiVersion: "v1", kind: "Node", name: $n}}' |
    fg_kubectl create --raw "/api/v1/namespaces/$ns/pods/$name/binding" -f - >/dev/null ||
    { fg_log "binding $ns/$name to $node failed"; return 1; }
  local now
  now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  fg_kubectl -n "$ns" patch pod "$name" --subresource=status --type=merge -p "$(jq -nc \
    --arg q "$qos" --argjson names "$names" --argjson ids "$cids" --arg t "$now" '{status: {
      phase: "Running", qosClass: $q,
      startTime: $t, conditions: [{type: "Ready", status: "True", lastTransitionTime: $t}],
      containerStatuses: [range(0; $names | length) as $i | {name: $names[$i],
        containerID: $ids[$i], image: "feedguard.invalid/standin:e2e",
        imageID: "", ready: true, started: true, restartCount: 0,
        state: {running: {startedAt: $t}}}]}}')" >/dev/null ||
    { fg_log "status patch of $ns/$name failed"; return 1; }
}

# fg_delete_pod NS NAME — the Pod object (force, as no kubelet confirms) and the stand-in pod.
fg_delete_pod() {
  local ns="$1" name="$2" key
  key="$(fg_pod_key "$ns" "$name")"
  fg_kubectl -n "$ns" delete pod "$name" --grace-period=0 --force --wait=false >/dev/null 2>&1
  rm -f "$FG_PODS_DIR/$key.pod.json"
  fg_wait 30 "stand-in stopped $ns/$name" test ! -e "$FG_PODS_DIR/$key.status.json"
}

# fg_pod_dir NS NAME CONTROLLER [CONTAINER] — absolute cgroup dir (cpu | cpuacct | cpuset) of
# the pod, or of one of its containers.
fg_pod_dir() {
  local f
  f="$FG_PODS_DIR/$(fg_pod_key "$1" "$2").status.json"
  if [[ -n "${4:-}" ]]; then
    jq -er --arg c "$4" --arg k "$3" '.container_dirs[$c][$k]' "$f"
  else
    jq -er --arg k "$3" '.pod_dirs[$k]' "$f"
  fi
}
# fg_pod_file NS NAME CONTROLLER KNOB [CONTAINER]
fg_pod_file() { echo "$(fg_pod_dir "$1" "$2" "$3" "${5:-}")/$4"; }

# fg_snapshot NS NAME — "path<TAB>base64(bytes)" for every fence-relevant file of the pod and its
# containers that exists.
fg_snapshot() {
  local ns="$1" name="$2" f dir c containers
  containers="$(jq -r '.container_dirs | keys[]' "$FG_PODS_DIR/$(fg_pod_key "$ns" "$name").status.json")" || return 1
  for c in "" $containers; do
    dir="$(fg_pod_dir "$ns" "$name" cpu "$c")" || return 1
    for f in "${FG_CPU_KNOBS[@]}"; do
      [[ -e "$dir/$f" ]] && printf '%s\t%s\n' "$dir/$f" "$(base64 -w0 <"$dir/$f")"
    done
    dir="$(fg_pod_dir "$ns" "$name" cpuset "$c")" || return 1
    for f in "${FG_CPUSET_KNOBS[@]}"; do
      [[ -e "$dir/$f" ]] && printf '%s\t%s\n' "$dir/$f" "$(base64 -w0 <"$dir/$f")"
    done
  done
  return 0
}
# fg_check_snapshot NS NAME — every recorded file holds exactly its recorded bytes again.
fg_check_snapshot() {
  local path want got bad=0
  while IFS=$'\t' read -r path want; do
    got="$(base64 -w0 <"$path")"
    if [[ "$got" != "$want" ]]; then
      echo "$path: '$(base64 -d <<<"$got")' != original '$(base64 -d <<<"$want")'"
      bad=1
    fi
  done <"$FG_WORK/orig/$(fg_pod_key "$1" "$2")"
  return $bad
}

# ---- controller and agent ----------------------------------------------------------------
# fg_controller_start NAME [EXTRA FLAGS...] — --insecure, gRPC and metrics on 127.0.0.1:0.
# Sets FG_METRICS_PORT[NAME]; FG_GRPC_PORT[NAME] once it leads (fg_controller_wait_leading).
fg_controller_start() {
  local name="$1"
  shift
  fg_spawn "$name" "$FG_CONTROLLER" --insecure --kubeconfig "$FG_KUBECONFIG" \
    --listen-grpc 127.0.0.1:0 --metrics-addr 127.0.0.1:0 --agent-namespace feedguard-system \
    --status-interval-ms 500 --identity "$name" "$@"
  fg_wait 30 "$name listens for metrics" fg__find_metrics_port "$name"
}
# The metrics port is the listening port that is not the gRPC port (which the log names).
fg__find_metrics_port() {
  local name="$1" pid="${FG_PID[$1]}" ports grpc n
  fg_is_ours "$pid" || { echo "$name exited: $(tail -n 5 "${FG_LOG[$name]}")"; return 1; }
  ports="$(fg_listen_ports "$pid")"
  grpc="$(sed -n 's/.*leading: serving agents on port \([0-9]*\).*/\1/p' "${FG_LOG[$name]}" | tail -n1)"
  [[ -n "$grpc" ]] && ports="$(grep -vx "$grpc" <<<"$ports")"
  n="$(grep -c . <<<"$ports")"
  # The metrics server starts before the gRPC server, so a single listening port with no
  # "leading" line yet is the metrics port; two ports and no line yet: ask again.
  if ((n == 1)); then
    FG_METRICS_PORT[$name]="$ports"
    return 0
  fi
  echo "listening: $(fg_listen_ports "$pid" | tr '\n' ' ') grpc: ${grpc:-?}"
  return 1
}
fg__find_grpc_port() {
  local name="$1" grpc
  fg_is_ours "${FG_PID[$name]}" || { echo "$name exited"; return 1; }
  grpc="$(sed -n 's/.*leading: serving agents on port \([0-9]*\).*/\1/p' "${FG_LOG[$name]}" | tail -n1)"
  [[ -n "$grpc" ]] || return 1
  FG_GRPC_PORT[$name]="$grpc"
}
# fg_controller_wait_leading NAME TIMEOUT_S
fg_controller_wait_leading() { fg_wait "$2" "$1 leads and serves agents" fg__find_grpc_port "$1"; }

# fg_metric NAME METRIC — the value of an unlabelled metric on controller NAME.
fg_metric() {
  curl -fsS --max-time 5 "http://127.0.0.1:${FG_METRICS_PORT[$1]}/metrics" 2>/dev/null |
    awk -v m="$2" '$1 == m {print $2; found=1} END {exit !found}'
}
fg_metric_is() {
  local v
  v="$(fg_metric "$1" "$2")" || { echo "no metric $2 on $1"; return 1; }
  awk -v a="$v" -v b="$3" 'BEGIN {exit !(a + 0 == b + 0)}' || { echo "$2 = $v, want $3"; return 1; }
}
# fg_readyz NAME — HTTP status of /readyz.
fg_readyz() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:${FG_METRICS_PORT[$1]}/readyz"; }

# fg_agent_start NAME NODE CONTROLLER_ADDR [EXTRA FLAGS...] — same cgroup root and driver as the
# stand-in; state dir FG_WORK/state-NODE (kept across agent restarts: the checkpoint).
fg_agent_start() {
  local name="$1" node="$2" addr="$3"
  shift 3
  fg_spawn "$name" "$FG_AGENT" run --controller "$addr" --node-name "$node" --insecure \
    --cgroup-root "$FG_CGROUP_ROOT" --cgroup-driver "$FG_DRIVER" --state-dir "$FG_WORK/state-$node" \
    --cpu-manager-state= --verify-interval-ms 1000 --report-interval-ms 1000 "$@"
}

# ---- FencePolicy -------------------------------------------------------------------------
fg_policy_json() { fg_kubectl get fencepolicy "$1" -o json; }
# fg_policy_status_is NAME JQ_BOOL_EXPR — the policy's JSON satisfies the jq expression.
fg_policy_matches() {
  local j
  j="$(fg_policy_json "$1" 2>&1)" || { echo "$j"; return 1; }
  jq -e "$2" <<<"$j" >/dev/null || { echo "status: $(jq -c '{generation: .metadata.generation, nodes: .status.nodes, trainers: .status.trainers, neighbours: .status.neighbours, failures: .status.failures, status}' <<<"$j")"; return 1; }
}
fg_policy_gone() { ! fg_kubectl get fencepolicy "$1" >/dev/null 2>&1; }

# ---- cleanup -----------------------------------------------------------------------------
# fg_cleanup — stops every process we started (agents, controllers, samplers: TERM; stand-in
# last, which removes its cgroups), then the test bed. Safe to call twice.
fg_cleanup() {
  local name
  for name in "${!FG_PID[@]}"; do
    [[ "$name" == standin ]] && continue
    fg_stop "$name" TERM
  done
  fg_standin_stop
  fg_testbed_down
}

#!/usr/bin/env bash
# run.sh — feedguard's local demo, on one machine, as root (about 2 minutes after the first build).
#
#   examples/demo/run.sh [--neighbours N]  (as root) [--duration S] [--warmup S] [--no-build]
#                             [--build-dir DIR] [--root-shares N] [--keep-logs] [--check]
#
# What it does:
#   1. installs what it needs (tests/install_deps.sh: Debian packages; kube-apiserver, etcd and helm
#      built from Go modules into ~/.cache/feedguard/bin) and builds the five binaries it runs
#      (cmake --preset release; build/release);
#   2. starts a real kube-apiserver + etcd on 127.0.0.1 (tests/testbed/testbed.sh, under /tmp);
#   3. installs the Helm chart's CRD and the controller's RBAC (charts/feedguard) with helm;
#   4. runs feedguard-controller (as the chart's ServiceAccount, so the chart's RBAC is what it
#      gets) and feedguard-agent as local processes (--insecure, loopback) against the host's
#      real cgroup v1 hierarchy, under a cgroup root of the demo's own;
#   5. starts pods through the kubelet stand-in (a TEST FIXTURE: kubelet-shaped cgroups and real
#      processes, plus matching Pod objects in the API server): one trainer (fg-wedge-trainer,
#      Burstable, request 1000m, wants ~1.85 cores; its "GPU step" is a sleep) and N batch
#      neighbours (fg-wedge-spinner, one busy thread each, Burstable 100m);
#   6. measures the trainer three times: isolated, with the neighbours under plain CFS, and with
#      the neighbours fenced by examples/demo/policy.yaml (kubectl apply);
#   7. prints a before/after table, `kubectl get fencepolicies` and `kubectl describe`;
#   8. cleans up on exit and on Ctrl-C: deletes the policy (the agent restores every original
#      cgroup byte, checked), stops exactly the processes it started, removes its cgroups, the
#      API server and its temp dir.
#
# Flags:
#   --neighbours N    batch neighbour pods (default 8)
#   --duration S      measured seconds per phase (default 15)
#   --warmup S        trainer warm-up seconds per phase, not measured (default 3)
#   --no-build        skip step 1 (use already built binaries)
#   --build-dir DIR   where the binaries are built / found (default build/release)
#   --root-shares N   cpu.shares of the demo's cgroup root (default 8192): on a real node the
#                     kubepods tree out-weighs the few system daemons; here every process in the
#                     host's root cgroup would otherwise weigh as much as the whole "node"
#   --keep-logs       keep the logs (copied to /tmp/feedguard-demo-logs-*; kept anyway on failure)
#   --check           for CI: exit 3 unless the fenced phase beats plain CFS by >= 20% and every
#                     original cgroup value came back after the policy was deleted
#   --help            this text
#
# Needs: root, cgroup v1 cpu/cpuacct/cpuset mounted under /sys/fs/cgroup (kernel >= 5.15 for
# cpu.idle), Go >= 1.24 on PATH the first time (tests/testbed/build.sh builds the API server).
set -uo pipefail

DEMO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$DEMO_DIR/../.." && pwd)"
POLICY_FILE="$DEMO_DIR/policy.yaml"
POLICY_NAME="demo-trainers"
NODE="demo-node"
TRAINER_NS="ml"
BATCH_NS="batch"
HELM_RELEASE="feedguard"
SYSTEM_NS="feedguard-system"

# Options.
NEIGHBOURS=8
DURATION=15
WARMUP=3
DO_BUILD=1
BUILD_DIR="$REPO/build/release"
ROOT_SHARES=8192
KEEP_LOGS=0
CHECK=0

# State, for cleanup.
WORK=""
POLICY_APPLIED=0
CLEANED_UP=0
STARTED_NEIGHBOURS=0
REVERTED=0  # 1 once every neighbour's original cgroup bytes are back
CREATORS=() # pids of our background pod-creating subshells, while they run
declare -A RESULT_SPS=() RESULT_BUSY=() RESULT_TCORES=() RESULT_NCORES=()
PHASES=(isolated cfs feedguard)
declare -A PHASE_LABEL=([isolated]="isolated (no neighbours)" [cfs]="neighbours + plain CFS"
  [feedguard]="neighbours + feedguard")

# ---- output ------------------------------------------------------------------------------
BOLD="" RED="" PLAIN=""
if [[ -t 1 ]]; then BOLD=$'\033[1m' RED=$'\033[1;31m' PLAIN=$'\033[0m'; fi
say() { printf '%s==> [%3ds]%s %s\n' "$BOLD" "$SECONDS" "$PLAIN" "$*"; }
info() { printf '    %s\n' "$*"; }
die() {
  printf '%sdemo failed:%s %s\n' "$RED" "$PLAIN" "$*" >&2
  exit 1
}
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

# show_log NAME — the last lines of one of our processes' logs, to explain a failure.
show_log() {
  local f="${FG_LOG[$1]:-}"
  [[ -n "$f" && -s "$f" ]] || return 0
  printf '    --- last lines of %s (%s) ---\n' "$1" "$f" >&2
  tail -n 15 "$f" | sed 's/^/    /' >&2
}

# int_in FLAG VALUE MIN MAX — dies unless VALUE is an integer in [MIN, MAX].
int_in() {
  if [[ ! "$2" =~ ^[0-9]+$ ]] || (($2 < $3 || $2 > $4)); then die "$1 must be an integer from $3 to $4"; fi
}

parse_args() {
  while (($#)); do
    case "$1" in
      --neighbours) NEIGHBOURS="${2:-}"; shift 2 ;;
      --duration) DURATION="${2:-}"; shift 2 ;;
      --warmup) WARMUP="${2:-}"; shift 2 ;;
      --no-build) DO_BUILD=0; shift ;;
      --build-dir) BUILD_DIR="$(realpath -m "${2:-}")"; shift 2 ;;
      --root-shares) ROOT_SHARES="${2:-}"; shift 2 ;;
      --keep-logs) KEEP_LOGS=1; shift ;;
      --check) CHECK=1; shift ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
  done
  int_in --neighbours "$NEIGHBOURS" 1 64
  int_in --duration "$DURATION" 3 300
  int_in --warmup "$WARMUP" 0 60
  int_in --root-shares "$ROOT_SHARES" 2 262144
}

check_host() {
  ((EUID == 0)) || die "run as root (it writes cgroups)"
  [[ -d /sys/fs/cgroup/cpu && -d /sys/fs/cgroup/cpuacct && -d /sys/fs/cgroup/cpuset ]] ||
    die "needs the cgroup v1 cpu, cpuacct and cpuset controllers under /sys/fs/cgroup (this demo's host kind)"
  [[ -e /sys/fs/cgroup/cpu/cpu.idle ]] || die "this kernel has no v1 cpu.idle (needs Linux >= 5.15)"
}

# ---- step 1: dependencies and binaries -------------------------------------------------------
install_and_build() {
  local t0=$SECONDS
  say "Installing dependencies (tests/install_deps.sh; the first run builds kube-apiserver, etcd and helm)"
  "$REPO/tests/install_deps.sh" 2>&1 | sed 's/^/    /'
  ((PIPESTATUS[0] == 0)) || die "tests/install_deps.sh failed (see above)"
  say "Building the demo's binaries in $BUILD_DIR (only the five it runs)"
  mkdir -p "$BUILD_DIR" || die "cannot create $BUILD_DIR"
  if [[ "$BUILD_DIR" == "$REPO/build/release" ]]; then
    (cd "$REPO" && cmake --preset release >"$BUILD_DIR/demo-configure.log" 2>&1)
  else
    cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD_DIR/demo-configure.log" 2>&1
  fi || { tail -n 30 "$BUILD_DIR/demo-configure.log" >&2; die "cmake configure of $BUILD_DIR failed"; }
  local log="$BUILD_DIR/demo-build.log" rc
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target feedguard-controller feedguard-agent \
    fg-kubelet-standin fg-wedge-trainer fg-wedge-spinner 2>&1 | tee "$log" | build_counter
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    grep -B2 -A20 -m3 'FAILED\|error' "$log" | head -n 60 | sed 's/^/    /' >&2
    die "building the demo's binaries failed (full log: $log)"
  fi
  info "done in $((SECONDS - t0)) s"
}

# build_counter — Ninja's "[n/N] ..." lines on stdin, shown as one counter line (the first build
# takes minutes; a silent one looks hung).
build_counter() {
  local line last=""
  while IFS= read -r line; do
    [[ "$line" =~ ^\[([0-9]+/[0-9]+)\] ]] || continue
    if [[ -t 1 ]]; then
      printf '\r    compiling %s' "${BASH_REMATCH[1]}"
    elif [[ "${BASH_REMATCH[1]%%/*}" != "$last" ]] && ((${BASH_REMATCH[1]%%/*} % 10 == 0)); then
      printf '    compiling %s\n' "${BASH_REMATCH[1]}"
    fi
    last="${BASH_REMATCH[1]%%/*}"
  done
  [[ -t 1 && -n "$last" ]] && printf '\n'
  return 0
}

# find_binaries — FG_CONTROLLER / FG_AGENT / FG_STANDIN (read by tests/e2e/lib.sh), FG_TRAINER,
# FG_SPINNER: from the environment or the build dir.
find_binaries() {
  FG_CONTROLLER="${FG_CONTROLLER:-$BUILD_DIR/controller/feedguard-controller}"
  FG_AGENT="${FG_AGENT:-$BUILD_DIR/agent/feedguard-agent}"
  FG_STANDIN="${FG_STANDIN:-$BUILD_DIR/tests/fixtures/kubelet/fg-kubelet-standin}"
  FG_TRAINER="${FG_TRAINER:-$BUILD_DIR/bench/wedge/fg-wedge-trainer}"
  FG_SPINNER="${FG_SPINNER:-$BUILD_DIR/bench/wedge/fg-wedge-spinner}"
  local b
  for b in "$FG_CONTROLLER" "$FG_AGENT" "$FG_STANDIN" "$FG_TRAINER" "$FG_SPINNER"; do
    [[ -x "$b" ]] || die "$b is not built (run without --no-build, or pass --build-dir)"
  done
}

# own_session NAME BINARY — prints the path of a wrapper that execs BINARY in a session of its
# own (setsid(1) execs in place here: same pid). A Ctrl-C then reaches only this script, which
# stops the controller, agent and stand-in in order (delete the policy → the agent reverts →
# stop) instead of having them all die at once with fences in place.
own_session() {
  local w="$FG_WORK/bin/$1"
  mkdir -p "$FG_WORK/bin" || return 1
  printf '#!/bin/sh\nexec setsid %q "$@"\n' "$(realpath "$2")" >"$w" && chmod +x "$w" && echo "$w"
}

# ---- step 2 and 3: API server, CRD, RBAC ------------------------------------------------------
start_apiserver() {
  say "Starting a real kube-apiserver + etcd on 127.0.0.1 (tests/testbed/testbed.sh up $FG_TESTBED_DIR)"
  fg_testbed_up || die "the API server did not start (log: $FG_WORK/logs/testbed-up.log)"
  # shellcheck disable=SC1091
  source "$FG_TESTBED_DIR/env"
  info "API server $APISERVER_URL (kube-apiserver $K8S_VERSION, etcd $ETCD_VERSION)"
  export KUBECONFIG="$FG_KUBECONFIG"
}

# install_chart_parts — `helm install` of charts/feedguard with controller.enabled=false and
# agent.enabled=false: the CRD (from the chart's crds/), the controller's RBAC and the
# ServiceAccounts. The controller and agent run here as local processes instead (no kubelet, no
# images); the controller uses the chart's ServiceAccount, so the chart's RBAC is what it gets.
install_chart_parts() {
  local chart="$REPO/charts/feedguard" out
  say "Installing the chart's CRD and RBAC with helm ($chart, controller.enabled=false, agent.enabled=false)"
  [[ -x "$HELM" ]] || die "helm not found at $HELM (tests/testbed/build.sh builds it)"
  fg_create_namespace "$SYSTEM_NS" || die "kubectl create namespace $SYSTEM_NS failed"
  # helm's cache/config/data under the demo's temp dir: nothing left in root's home.
  if ! out="$(HELM_CACHE_HOME="$FG_WORK/helm/cache" HELM_CONFIG_HOME="$FG_WORK/helm/config" \
    HELM_DATA_HOME="$FG_WORK/helm/data" "$HELM" install "$HELM_RELEASE" "$chart" --kubeconfig "$KUBECONFIG" --namespace "$SYSTEM_NS" \
    --set controller.enabled=false --set agent.enabled=false --wait=false 2>&1)"; then
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    die "helm install of the chart's CRD and RBAC failed"
  fi
  printf '%s\n' "$out" | sed -n '1,/^NOTES:/p' | grep -v '^NOTES:' | sed 's/^/    /'
  fg_kubectl wait --for=condition=Established --timeout=60s crd/fencepolicies.feedguard.io >/dev/null ||
    die "the FencePolicy CRD did not become Established"
  info "installed: $(fg_kubectl get crd/fencepolicies.feedguard.io -o name)," \
    "$(fg_kubectl get clusterrole,clusterrolebinding -l app.kubernetes.io/instance="$HELM_RELEASE" -o name | tr '\n' ' ')"
}

# controller_kubeconfig — a kubeconfig holding a token of the chart's controller ServiceAccount,
# so the controller runs with exactly the chart's RBAC (not as cluster admin).
CONTROLLER_SA="" CONTROLLER_KUBECONFIG=""
controller_kubeconfig() {
  local sa token out="$FG_WORK/controller.kubeconfig"
  sa="$(fg_kubectl -n "$SYSTEM_NS" get serviceaccounts -l app.kubernetes.io/component=controller \
    -o jsonpath='{.items[0].metadata.name}')" || return 1
  [[ -n "$sa" ]] || { echo "no controller ServiceAccount in $SYSTEM_NS" >&2; return 1; }
  token="$(fg_kubectl -n "$SYSTEM_NS" create token "$sa" --duration=2h)" || return 1
  (umask 077 && cat >"$out" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: demo
  cluster: {server: "$APISERVER_URL", certificate-authority: "$CA_CERT"}
users:
- name: $sa
  user: {token: "$token"}
contexts:
- name: demo
  context: {cluster: demo, user: $sa}
current-context: demo
KCFG
  )
  CONTROLLER_SA="$sa" CONTROLLER_KUBECONFIG="$out"
}

# ---- step 4: stand-in, controller, agent ------------------------------------------------------
start_node() {
  say "Starting the node: kubelet stand-in (test fixture), feedguard-controller, feedguard-agent"
  fg_create_node "$NODE" nvidia.com/gpu.present=true || die "creating Node $NODE failed"
  fg_create_namespace "$TRAINER_NS" || die "creating namespace $TRAINER_NS failed"
  fg_create_namespace "$BATCH_NS" || die "creating namespace $BATCH_NS failed"
  fg_standin_start systemd || { show_log standin; die "the kubelet stand-in did not start"; }
  info "cgroup root: /sys/fs/cgroup/{cpu,cpuacct,cpuset}/$FG_CGROUP_ROOT (systemd driver, kubelet layout)"
  local shares="/sys/fs/cgroup/cpu/$FG_CGROUP_ROOT/cpu.shares"
  if [[ -w "$shares" ]]; then
    echo "$ROOT_SHARES" >"$shares" || die "cannot write $shares"
    info "demo root cpu.shares = $ROOT_SHARES (see --help)"
  fi

  controller_kubeconfig || die "could not make a token for the chart's controller ServiceAccount"
  # FG_KUBECONFIG=… applies to this call only; everything else stays cluster admin.
  FG_KUBECONFIG="$CONTROLLER_KUBECONFIG" fg_controller_start controller --agent-namespace "$SYSTEM_NS" ||
    { show_log controller; die "feedguard-controller did not start"; }
  fg_controller_wait_leading controller 30 || { show_log controller; die "feedguard-controller does not serve agents"; }
  info "controller pid ${FG_PID[controller]} (ServiceAccount $SYSTEM_NS/$CONTROLLER_SA), gRPC 127.0.0.1:${FG_GRPC_PORT[controller]}, metrics 127.0.0.1:${FG_METRICS_PORT[controller]}"
  fg_agent_start agent "$NODE" "127.0.0.1:${FG_GRPC_PORT[controller]}"
  sleep 1
  fg_is_ours "${FG_PID[agent]}" || { show_log agent; die "feedguard-agent exited"; }
  info "agent pid ${FG_PID[agent]}, node $NODE, state dir $FG_WORK/state-$NODE"
}

# ---- step 5: pods ----------------------------------------------------------------------------
# json_array ARG... — the arguments as a JSON array of strings (a pod's command).
# (No argument may hold a newline.)
json_array() { printf '%s\n' "$@" | jq -R . | jq -sc .; }

# start_trainer PHASE — a trainer pod that waits (gate) for DIR/GO before it starts, so the clock
# starts only once the phase is set up. Result JSON: $FG_WORK/phase-PHASE/trainer.json.
start_trainer() {
  local phase="$1" dir="$FG_WORK/phase-$1"
  mkdir -p "$dir"
  # shellcheck disable=SC2016  # expanded by the pod's /bin/sh, not here
  local gate='i=0; while [ ! -e "$GO" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; [ -e "$GO" ] || exit 1; exec "$0" "$@"'
  # Calibrated in bench/wedge/README.md: ~1.85 cores of demand, accelerator ~95% busy alone.
  local cmd
  cmd="$(json_array /usr/bin/env "GO=$dir/GO" /bin/sh -c "$gate" \
    "$FG_TRAINER" --workers 3 --batch 32 --step-ms 22 --image-size 512 --crop 224 \
    --duration "$DURATION" --warmup "$WARMUP" --out "$dir/trainer.json")" || die "jq failed"
  FG_POD_COMMAND="$cmd" fg_create_pod "$TRAINER_NS" "trainer-$phase" "$NODE" feedguard.io/role=trainer 1000 0 ||
    die "creating the trainer pod failed"
}

# start_neighbours — creates the neighbour pods, up to 4 at a time (each is a few kubectl calls).
start_neighbours() {
  local i j cmd failed=0
  local -a pids=()
  say "Starting $NEIGHBOURS batch neighbours (fg-wedge-spinner, Burstable 100m, no limit)"
  for ((i = 0; i < NEIGHBOURS; i += 4)); do
    pids=()
    for ((j = i; j < i + 4 && j < NEIGHBOURS; j++)); do
      cmd="$(json_array "$FG_SPINNER" --duration 900 --label "s$j")" || die "jq failed"
      FG_POD_COMMAND="$cmd" fg_create_pod "$BATCH_NS" "spinner-$j" "$NODE" app=batch-spinner 100 0 &
      pids+=($!)
    done
    CREATORS=("${pids[@]}")
    for j in "${pids[@]}"; do wait "$j" || failed=1; done
    CREATORS=()
    # Counted even on failure, so that cleanup checks and reverts every pod that may exist.
    STARTED_NEIGHBOURS=$((i + ${#pids[@]}))
    ((failed)) && die "creating neighbour pods failed (see above)"
    info "$STARTED_NEIGHBOURS/$NEIGHBOURS running"
  done
}

# neighbour_cpu_ns — total CPU time (ns) of every neighbour pod so far (cpuacct.usage).
neighbour_cpu_ns() {
  local i d total=0 v
  for ((i = 0; i < STARTED_NEIGHBOURS; i++)); do
    d="$(fg_pod_dir "$BATCH_NS" "spinner-$i" cpuacct)" || continue
    v="$(cat "$d/cpuacct.usage" 2>/dev/null)" || continue
    total=$((total + v))
  done
  echo "$total"
}

# ---- step 6: measure -------------------------------------------------------------------------
# progress LABEL ELAPSED TOTAL — a bar on a terminal, a line every 5 s otherwise.
PROGRESS_LAST=-1
progress() {
  local width=30 filled
  filled=$(($2 * width / $3))
  ((filled > width)) && filled=$width
  if [[ -t 1 ]]; then
    printf '\r    %-26s [%-*s] %3d/%d s' "$1" "$width" "$(printf '%*s' "$filled" '' | tr ' ' '#')" "$2" "$3"
  elif (($2 / 5 != PROGRESS_LAST)); then
    printf '    %s: %d/%d s\n' "$1" "$2" "$3"
  fi
  PROGRESS_LAST=$(($2 / 5))
}

# trainer_alive PHASE — the trainer pod's process is still running.
trainer_alive() {
  local pid
  pid="$(jq -r '.pids[0] // empty' "$FG_PODS_DIR/$(fg_pod_key "$TRAINER_NS" "trainer-$1").status.json" 2>/dev/null)"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]
}

# measure PHASE — opens the trainer's gate, shows progress, reads its result; then deletes it.
measure() {
  local phase="$1" dir="$FG_WORK/phase-$1" total=$((WARMUP + DURATION)) t0 n0=0 n1 t_w=0 t1 el
  local out="$dir/trainer.json" label="${PHASE_LABEL[$1]}"
  PROGRESS_LAST=-1
  touch "$dir/GO"
  t0=$(fg_now_ms)
  while [[ ! -s "$out" ]]; do
    el=$((($(fg_now_ms) - t0) / 1000))
    # Neighbour CPU: sampled when the trainer's warm-up ends and when its result appears.
    if ((t_w == 0 && $(fg_now_ms) - t0 >= WARMUP * 1000)); then
      n0=$(neighbour_cpu_ns)
      t_w=$(fg_now_ms)
    fi
    progress "$label" "$el" "$total"
    ((el > total + 60)) && { printf '\n'; die "the trainer gave no result within $((total + 60)) s ($dir)"; }
    if ! trainer_alive "$phase"; then
      sleep 0.5 # it may have written its result just before exiting
      [[ -s "$out" ]] && break
      printf '\n'
      die "the trainer exited without a result (its output: $(fg_pod_key "$TRAINER_NS" "trainer-$phase") in $FG_PODS_DIR)"
    fi
    sleep 0.5
  done
  n1=$(neighbour_cpu_ns)
  t1=$(fg_now_ms)
  progress "$label" "$total" "$total"
  printf '\n'
  jq -e '.samples_per_s' "$out" >/dev/null 2>&1 || die "unreadable trainer result: $(cat "$out")"
  RESULT_SPS[$phase]="$(jq -r '.samples_per_s' "$out")"
  RESULT_BUSY[$phase]="$(jq -r '.accelerator_busy' "$out")"
  RESULT_TCORES[$phase]="$(jq -r '.cpu_cores' "$out")"
  if ((STARTED_NEIGHBOURS > 0 && t_w > 0 && t1 > t_w)); then
    RESULT_NCORES[$phase]="$(awk -v n="$((n1 - n0))" -v ms="$((t1 - t_w))" 'BEGIN {printf "%.2f", n / 1e6 / ms}')"
  else
    RESULT_NCORES[$phase]="0"
  fi
  info "$(printf '%.0f samples/s, accelerator busy %.0f%%, trainer %.2f cores, neighbours %s cores' \
    "${RESULT_SPS[$phase]}" "$(awk -v b="${RESULT_BUSY[$phase]}" 'BEGIN {print b * 100}')" \
    "${RESULT_TCORES[$phase]}" "${RESULT_NCORES[$phase]}")"
  # The fenced phase's trainer stays until its status has been shown: feedguard fences
  # neighbours only while a trainer runs on the node.
  [[ "$phase" == feedguard ]] && return 0
  fg_delete_pod "$TRAINER_NS" "trainer-$phase" || die "deleting the trainer pod failed"
}

# fence_in_place — every neighbour pod's cpu.idle is 1, the trainer's is 0.
fence_in_place() {
  local i
  for ((i = 0; i < STARTED_NEIGHBOURS; i++)); do
    fg_file_is "$(fg_pod_file "$BATCH_NS" "spinner-$i" cpu cpu.idle)" 1 || return 1
  done
  fg_file_is "$(fg_pod_file "$TRAINER_NS" trainer-feedguard cpu cpu.idle)" 0
}

apply_policy() {
  say "kubectl apply -f examples/demo/policy.yaml   (trainer selector + Idle fence)"
  fg_kubectl apply -f "$POLICY_FILE" | sed 's/^/    /'
  ((PIPESTATUS[0] == 0)) || die "kubectl apply of the FencePolicy failed"
  POLICY_APPLIED=1
  local t0 el
  t0=$(fg_now_ms)
  fg_wait 60 "the agent fences the neighbours (cpu.idle=1)" fence_in_place ||
    { show_log controller; show_log agent; die "the fence was not enforced within 60 s"; }
  el=$(($(fg_now_ms) - t0))
  info "enforced after ${el} ms: cpu.idle=1 on all $STARTED_NEIGHBOURS neighbour pods, trainer untouched"
  # The status is written asynchronously; it only decorates the table, so do not insist.
  fg_wait 20 "status Ready" fg_policy_matches "$POLICY_NAME" \
    '.status.conditions // [] | map(select(.type == "Ready" and .status == "True")) | length == 1' ||
    info "(the policy's status is not Ready yet; measuring anyway)"
}

# ---- step 7: report --------------------------------------------------------------------------
print_table() {
  local iso="${RESULT_SPS[isolated]}" p
  say "Result: trainer throughput ($(nproc) CPUs, $NEIGHBOURS neighbours, ${DURATION} s per phase)"
  printf '\n    %-28s %10s %12s %11s %13s %16s\n' phase samples/s "% isolated" "accel busy" \
    "trainer CPU" "neighbours CPU"
  printf '    %s\n' "$(printf '%.0s-' {1..95})"
  for p in "${PHASES[@]}"; do
    awk -v l="${PHASE_LABEL[$p]}" -v s="${RESULT_SPS[$p]}" -v i="$iso" -v b="${RESULT_BUSY[$p]}" \
      -v t="${RESULT_TCORES[$p]}" -v n="${RESULT_NCORES[$p]}" 'BEGIN {
        printf "    %-28s %10.0f %11.1f%% %10.1f%% %8.2f cores %10.2f cores\n", l, s, 100 * s / i, 100 * b, t, n }'
  done
  printf '\n'
}

show_policy() {
  say "kubectl get fencepolicies"
  fg_kubectl get fencepolicies 2>&1 | sed 's/^/    /'
  say "kubectl describe fencepolicy $POLICY_NAME"
  fg_kubectl describe fencepolicy "$POLICY_NAME" 2>&1 | sed 's/^/    /'
}

# ---- step 8: cleanup -------------------------------------------------------------------------
# all_reverted — every neighbour's fence-relevant files hold their original bytes again.
all_reverted() {
  local i
  for ((i = 0; i < STARTED_NEIGHBOURS; i++)); do
    [[ -s "$FG_WORK/orig/$(fg_pod_key "$BATCH_NS" "spinner-$i")" ]] || continue # never started
    fg_check_snapshot "$BATCH_NS" "spinner-$i" || return 1
  done
}

cleanup() {
  local rc=$?
  ((CLEANED_UP)) && return
  CLEANED_UP=1
  trap '' INT TERM # finish cleaning up; every wait below is bounded
  [[ -n "$WORK" ]] || exit "$rc"
  say "Cleaning up"
  local p
  for p in "${CREATORS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if ((POLICY_APPLIED)) && [[ -n "${FG_KUBECONFIG:-}" ]]; then
    # The controller's finalizer holds the delete until the agents have reverted.
    local wait=false
    fg_is_ours "${FG_PID[controller]:-}" && fg_is_ours "${FG_PID[agent]:-}" && wait=true
    fg_kubectl delete fencepolicy "$POLICY_NAME" --wait="$wait" --timeout=30s 2>&1 | sed 's/^/    /'
    if ((STARTED_NEIGHBOURS)) && [[ "$wait" == true ]]; then
      if fg_wait 30 "the agent restores the neighbours' original cgroup values" all_reverted; then
        info "reverted: all $STARTED_NEIGHBOURS neighbours' cgroup files hold their original bytes again"
        REVERTED=1
      else
        info "WARNING: not every original value came back (the stand-in removes these cgroups anyway)"
      fi
    fi
  fi
  fg_cleanup 2>/dev/null
  info "stopped the agent, controller and stand-in (cgroup root $FG_CGROUP_ROOT removed); API server down"
  if ((KEEP_LOGS || (rc != 0 && rc != 130))) && [[ -d "$WORK/logs" ]]; then
    local keep
    keep="/tmp/feedguard-demo-logs-$(date +%Y%m%d-%H%M%S)"
    cp -r "$WORK/logs" "$keep" 2>/dev/null && info "logs kept in $keep"
  fi
  rm -rf -- "$WORK"
  if ((CHECK && rc == 0)); then
    if ((REVERTED)) && awk -v f="${RESULT_SPS[feedguard]:-0}" -v c="${RESULT_SPS[cfs]:-0}" 'BEGIN {exit !(c > 0 && f >= 1.2 * c)}'; then
      info "check passed: fenced ${RESULT_SPS[feedguard]} vs plain CFS ${RESULT_SPS[cfs]} samples/s; originals restored"
    else
      printf '%scheck failed:%s fenced %s vs plain CFS %s samples/s (need >= 1.2x), originals restored: %s\n' \
        "$RED" "$PLAIN" "${RESULT_SPS[feedguard]:-?}" "${RESULT_SPS[cfs]:-?}" "$REVERTED" >&2
      rc=3
    fi
  fi
  exit "$rc"
}

on_signal() {
  printf '\n'
  say "interrupted ($1)"
  exit 130
}

main() {
  parse_args "$@"
  check_host
  ((DO_BUILD)) && install_and_build
  find_binaries
  for t in kubectl jq curl ss openssl; do command -v "$t" >/dev/null || die "missing tool: $t"; done

  # shellcheck source=../../tests/e2e/lib.sh
  source "$REPO/tests/e2e/lib.sh" || die "tests/e2e/lib.sh missing"
  WORK="$(mktemp -d /tmp/feedguard-demo.XXXXXX)" || die "mktemp failed"
  trap cleanup EXIT
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM
  fg_init "$WORK" || die "cannot create $WORK"
  FG_CONTROLLER="$(own_session feedguard-controller "$FG_CONTROLLER")" || die "cannot write $WORK/bin"
  FG_AGENT="$(own_session feedguard-agent "$FG_AGENT")" || die "cannot write $WORK/bin"
  FG_STANDIN="$(own_session fg-kubelet-standin "$FG_STANDIN")" || die "cannot write $WORK/bin"
  local t0=$SECONDS

  start_apiserver
  install_chart_parts
  start_node

  say "Phase 1/3: the trainer alone (Burstable, request 1000m, wants ~1.85 cores)"
  start_trainer isolated
  measure isolated

  start_neighbours
  say "Phase 2/3: the trainer among $NEIGHBOURS neighbours, plain CFS weights"
  start_trainer cfs
  measure cfs

  say "Phase 3/3: the same, with a FencePolicy"
  start_trainer feedguard
  apply_policy
  measure feedguard

  print_table
  # Status is coalesced (at most one write a second): let it catch up with the agent's report.
  fg_wait 20 "status counts the protected trainer" fg_policy_matches "$POLICY_NAME" \
    '(.status.trainers.protected // 0) >= 1' || info "(status has not counted the trainer yet)"
  show_policy
  fg_delete_pod "$TRAINER_NS" trainer-feedguard || die "deleting the trainer pod failed"
  info "demo ran $((SECONDS - t0)) s (without install/build)"
}

main "$@"

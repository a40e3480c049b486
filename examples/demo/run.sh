#!/usr/bin/env bash
# run.sh — feedguard's local demo on a real one-node Kubernetes cluster, as root (about 3 minutes
# after the first build).
#
#   examples/demo/run.sh [--neighbours N] [--duration S] [--warmup S] [--no-build]
#                        [--build-dir DIR] [--root-shares N] [--keep-logs] [--check]
#                        [--rounds R] [--results FILE]
#
# What it does:
#   1. installs what it needs (tests/install_deps.sh: Debian's containerd, runc, CNI plugins ...;
#      kube-apiserver, etcd, kubelet, kube-scheduler, kube-controller-manager, kube-proxy, CoreDNS
#      and helm built from Go modules into ~/.cache/feedguard/bin) and builds the four binaries it
#      needs (cmake --preset release; build/release);
#   2. starts a real one-node cluster (tests/node/cluster.sh up): etcd + kube-apiserver,
#      kube-scheduler, kube-controller-manager, kubelet v1.33 with Debian's containerd + runc,
#      kube-proxy, CoreDNS, all inside a network namespace of its own, kubelet's cgroups under a
#      cgroup root of its own;
#   3. builds the images locally in seconds (no registry): the controller and agent images from
#      the release binaries (tests/node/images.sh), the workload image feedguard.local/wedge:1
#      (examples/demo/image.sh: the trainer and spinner binaries + busybox), imports them with ctr;
#   4. `helm install feedguard charts/feedguard`: the controller Deployment (2 replicas, leader
#      election) and the agent DaemonSet run as pods (pullPolicy Never; agent.cgroup.root/driver/version
#      set to the node's kubelet settings);
#   5. runs a trainer pod (Job ml/trainer-*: fg-wedge-trainer, Burstable, request 500m, wants ~1.85
#      cores; its "GPU step" is a sleep) and N batch neighbour pods (Deployment batch/spinner:
#      fg-wedge-spinner, one busy thread each, Burstable 100m);
#   6. measures the trainer three times: isolated, with the neighbours under plain CFS, and with
#      the neighbours fenced by examples/demo/policy.yaml (kubectl apply);
#   7. prints a before/after table, `kubectl get fencepolicies`, `kubectl describe fencepolicy`
#      and `kubectl get pods -n feedguard-system`;
#   8. cleans up on exit and on Ctrl-C: deletes the policy (the agent restores every original
#      cgroup byte of the neighbour pods, checked), `helm uninstall`, `cluster.sh down` (stops
#      exactly what it started, removes its cgroups, namespaces and files).
#
# Flags:
#   --neighbours N    batch neighbour pods (default 8)
#   --duration S      measured seconds per phase (default 15)
#   --warmup S        trainer warm-up seconds per phase, not measured (default 3)
#   --no-build        skip step 1 (use already built binaries)
#   --build-dir DIR   where the binaries are built / found (default build/release)
#   --root-shares N   cpu.shares of the node's cgroup root (default 8192): on a real node the
#                     kubepods tree out-weighs the few system daemons; here every process in the
#                     host's root cgroup would otherwise weigh as much as the whole "node".
#                     The cluster's daemons (control plane, kubelet, containerd: a cgroup of
#                     their own beside the node's) get the same weight, as a control plane on
#                     other machines and system.slice beside kubepods.slice would have
#   --keep-logs       keep the logs (copied to /tmp/feedguard-demo-logs-*; kept anyway on failure)
#   --check           for CI: exit 3 unless the fenced phase beats plain CFS by >= 20% and every
#                     original cgroup value came back after the policy was deleted
#   --rounds R        repeat the three phases R times, interleaved (default 1; the table shows
#                     medians); bench/node/real_node.sh uses this
#   --results FILE    also write every round's numbers, the versions and the machine as JSON
#   --help            this text
#
# Environment: FG_CONTROLLER, FG_AGENT, FG_TRAINER, FG_SPINNER override the binaries;
# FEEDGUARD_DEMO_TMP (default /tmp) is where the demo's temp dir goes.
# Exit status: 0 done, 1 failed, 3 --check failed, 77 this host cannot run it (not root, no cgroup
# v1 cpu/cpuacct/cpuset, no cpu.idle), 130 interrupted.
# Needs: root, a cgroup v1 (or hybrid) host with cpu.idle (Linux >= 5.15), Go >= 1.24 on PATH the
# first time (tests/testbed/build.sh builds the Kubernetes binaries).
set -uo pipefail

DEMO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$DEMO_DIR/../.." && pwd)"
POLICY_FILE="$DEMO_DIR/policy.yaml"
POLICY_NAME="demo-trainers"
TRAINER_NS="ml"
BATCH_NS="batch"
HELM_RELEASE="feedguard"
SYSTEM_NS="feedguard-system"
WEDGE_IMAGE="feedguard.local/wedge:1"
TRAINER_REQUEST_M=500
NEIGHBOUR_REQUEST_M=100
# Calibrated in bench/wedge/README.md: ~1.85 cores of demand, accelerator ~95% busy alone.
TRAINER_ARGS=(--workers 3 --batch 32 --step-ms 22 --image-size 512 --crop 224)

# Options.
NEIGHBOURS=8
DURATION=15
WARMUP=3
DO_BUILD=1
BUILD_DIR="$REPO/build/release"
ROOT_SHARES=8192
KEEP_LOGS=0
CHECK=0
ROUNDS=1
RESULTS=""

# State, for cleanup.
WORK=""
NODE_DIR=""
NODE_STARTED=0
HELM_INSTALLED=0
POLICY_APPLIED=0
POLICY_ROUND=1
CLEANED_UP=0
REVERT_FAILED=0   # rounds whose policy deletion did not restore every original byte
REVERT_CHECKED=0  # rounds whose restore was checked
BG_PIDS=()        # background kubectl applies, while they run
PHASES=(isolated cfs fenced)
declare -A PHASE_LABEL=([isolated]="isolated (no neighbours)" [cfs]="neighbours + plain CFS"
  [fenced]="neighbours + feedguard")
# Per round R and phase P: RES[R.P.sps|busy|tcores|ncores]; per round: FENCE_MS[R], ...
declare -A RES=() FENCE_MS=() FENCE_MS_RETURN=() REVERT_OK=() REVERT_MS=() OVERWRITES=()
declare -A FENCE_HELD=() LOAD=() DELETE_MS=() FENCE_MS_REQUEST=()
NB_UIDS=() # the running neighbour pods' UIDs
TRAINER_POD="" TRAINER_UID=""

# ---- output ------------------------------------------------------------------------------
BOLD="" RED="" PLAIN=""
if [[ -t 1 ]]; then BOLD=$'\033[1m' RED=$'\033[1;31m' PLAIN=$'\033[0m'; fi
say() { printf '%s==> [%3ds]%s %s\n' "$BOLD" "$SECONDS" "$PLAIN" "$*"; }
info() { printf '    %s\n' "$*"; }
indent() { sed 's/^/    /'; }
die() {
  printf '%sdemo failed:%s %s\n' "$RED" "$PLAIN" "$*" >&2
  # What a failure on a loaded machine needs to be told apart from a bug: the load, and the
  # processes that used the most CPU.
  printf '    load average: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >&2
  ps -eo pid,pcpu,cputimes,comm --sort=-cputimes 2>/dev/null | head -n 8 | sed 's/^/    /' >&2 || true
  exit 1
}
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
now_ms() { date +%s%3N; }

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
      --rounds) ROUNDS="${2:-}"; shift 2 ;;
      --results) RESULTS="$(realpath -m "${2:-}")"; shift 2 ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
  done
  int_in --neighbours "$NEIGHBOURS" 1 64
  int_in --duration "$DURATION" 3 300
  int_in --warmup "$WARMUP" 0 60
  int_in --root-shares "$ROOT_SHARES" 2 262144
  int_in --rounds "$ROUNDS" 1 20
}

# check_host — exit 77 (CTest's "skipped") where the demo cannot run at all.
check_host() {
  local why=""
  if ((EUID != 0)); then why="run as root (it starts containerd and kubelet, and writes cgroups)"
  elif [[ ! -d /sys/fs/cgroup/cpu || ! -d /sys/fs/cgroup/cpuacct || ! -d /sys/fs/cgroup/cpuset ]]; then
    why="needs the cgroup v1 cpu, cpuacct and cpuset controllers under /sys/fs/cgroup (tests/node/cluster.sh supports v1/hybrid hosts)"
  elif [[ ! -e /sys/fs/cgroup/cpu/cpu.idle ]]; then why="this kernel has no v1 cpu.idle (needs Linux >= 5.15)"
  fi
  [[ -z "$why" ]] && return 0
  printf '%sdemo cannot run here:%s %s\n' "$RED" "$PLAIN" "$why" >&2
  exit 77
}

# ---- step 1: dependencies and binaries -------------------------------------------------------
install_and_build() {
  local t0=$SECONDS
  say "Installing dependencies (tests/install_deps.sh; the first run builds the Kubernetes binaries, etcd, CoreDNS and helm)"
  "$REPO/tests/install_deps.sh" --demo 2>&1 | indent
  ((PIPESTATUS[0] == 0)) || die "tests/install_deps.sh failed (see above)"
  say "Building the demo's binaries in $BUILD_DIR (only the five it needs)"
  mkdir -p "$BUILD_DIR" || die "cannot create $BUILD_DIR"
  if [[ "$BUILD_DIR" == "$REPO/build/release" ]]; then
    (cd "$REPO" && cmake --preset release >"$BUILD_DIR/demo-configure.log" 2>&1)
  else
    cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD_DIR/demo-configure.log" 2>&1
  fi || { tail -n 30 "$BUILD_DIR/demo-configure.log" >&2; die "cmake configure of $BUILD_DIR failed"; }
  local log="$BUILD_DIR/demo-build.log" rc
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target feedguard-controller feedguard-agent \
    fg-wedge-trainer fg-wedge-spinner kubectl-feedguard 2>&1 | tee "$log" | build_counter
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    grep -B2 -A20 -m3 'FAILED\|error' "$log" | head -n 60 | indent >&2
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

find_binaries() {
  FG_CONTROLLER="${FG_CONTROLLER:-$BUILD_DIR/controller/feedguard-controller}"
  FG_AGENT="${FG_AGENT:-$BUILD_DIR/agent/feedguard-agent}"
  FG_TRAINER="${FG_TRAINER:-$BUILD_DIR/bench/wedge/fg-wedge-trainer}"
  FG_SPINNER="${FG_SPINNER:-$BUILD_DIR/bench/wedge/fg-wedge-spinner}"
  FG_PLUGIN="${FG_PLUGIN:-$BUILD_DIR/plugin/kubectl-feedguard}"
  local b
  for b in "$FG_CONTROLLER" "$FG_AGENT" "$FG_TRAINER" "$FG_SPINNER" "$FG_PLUGIN"; do
    [[ -x "$b" ]] || die "$b is not built (run without --no-build, or pass --build-dir)"
  done
}

# ---- step 2: the cluster ----------------------------------------------------------------------
K() { "$KUBECTL" "$@"; }

start_cluster() {
  say "Starting a real one-node cluster (tests/node/cluster.sh up $NODE_DIR)"
  NODE_STARTED=1
  local t0=$SECONDS
  if ! "$REPO/tests/node/cluster.sh" up "$NODE_DIR" >"$WORK/logs/cluster-up.log" 2>&1; then
    tail -n 25 "$WORK/logs/cluster-up.log" | indent >&2
    die "the cluster did not come up (log above; full: $WORK/logs/cluster-up.log)"
  fi
  # shellcheck disable=SC1091
  source "$NODE_DIR/env"
  CPU_CG="/sys/fs/cgroup/cpu$CGROUP_ROOT"
  CPUACCT_CG="/sys/fs/cgroup/cpuacct$CGROUP_ROOT"
  T_CLUSTER_UP=$((SECONDS - t0))
  info "node $NODE_NAME Ready in ${T_CLUSTER_UP} s: kubelet $KUBELET_VERSION, $CONTAINER_RUNTIME_VERSION" \
    "(containerd $CONTAINERD_VERSION), runc $RUNC_VERSION, kernel $KERNEL_VERSION"
  info "netns $NETNS, kubelet cgroup root $CGROUP_ROOT (cgroupfs driver), kubectl: $KUBECTL"
  if [[ -w "$CPU_CG/cpu.shares" ]]; then
    echo "$ROOT_SHARES" >"$CPU_CG/cpu.shares" || die "cannot write $CPU_CG/cpu.shares"
    # The cluster's own daemons (control plane, kubelet, containerd) weigh as much as the node.
    if [[ -n "${DAEMON_CGROUP:-}" && -w "$DAEMON_CGROUP/cpu.shares" ]]; then
      echo "$ROOT_SHARES" >"$DAEMON_CGROUP/cpu.shares" || die "cannot write $DAEMON_CGROUP/cpu.shares"
    fi
    info "node cgroup root cpu.shares = $ROOT_SHARES, and the same for the cluster's daemons beside it (see --help)"
  fi
}

build_images() {
  say "Building and importing the images (no registry): controller, agent, $WEDGE_IMAGE"
  local t0=$SECONDS list="$WORK/images/list" file name
  mkdir -p "$WORK/images"
  "$REPO/tests/node/images.sh" feedguard "$WORK/images" --controller "$FG_CONTROLLER" --agent "$FG_AGENT" \
    >"$list" 2>"$WORK/logs/images.log" || { tail -n 20 "$WORK/logs/images.log" >&2; die "tests/node/images.sh feedguard failed"; }
  "$DEMO_DIR/image.sh" "$WORK/images" "$FG_TRAINER" "$FG_SPINNER" >>"$list" 2>>"$WORK/logs/images.log" ||
    { tail -n 20 "$WORK/logs/images.log" >&2; die "examples/demo/image.sh failed"; }
  while read -r file name; do
    "$CTR" images import "$file" >>"$WORK/logs/images.log" 2>&1 || die "ctr images import $file failed"
    info "$name ($(du -m "$file" | cut -f1) MB)"
  done <"$list"
  rm -f "$WORK/images/"*.tar
  info "built and imported in $((SECONDS - t0)) s"
}

# ---- step 4: the chart ----------------------------------------------------------------------
install_chart() {
  local chart="$REPO/charts/feedguard" t0=$SECONDS w cgv=v1
  # With the cgroup version and driver given, the agent mounts kubelet's pod tree only.
  [[ "$(stat -fc %T /sys/fs/cgroup)" == cgroup2fs ]] && cgv=v2
  say "helm install $HELM_RELEASE charts/feedguard -n $SYSTEM_NS (controller Deployment + agent DaemonSet)"
  info "--set controller.image.pullPolicy=Never,agent.image.pullPolicy=Never,agent.cgroup.root=$CGROUP_ROOT,agent.cgroup.driver=cgroupfs,agent.cgroup.version=$cgv"
  info "--set observe.periodSeconds=2,observe.topK=8,observe.reportIntervalSeconds=2 (observation is on by default; sampled faster than its 10 s so a ${DURATION} s phase shows)"
  HELM_INSTALLED=1
  # helm's cache/config/data under the demo's temp dir: nothing left in root's home.
  if ! HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data" \
    "$HELM" install "$HELM_RELEASE" "$chart" --namespace "$SYSTEM_NS" --create-namespace \
    --set controller.image.pullPolicy=Never --set agent.image.pullPolicy=Never \
    --set "agent.cgroup.root=$CGROUP_ROOT" --set agent.cgroup.driver=cgroupfs \
    --set "agent.cgroup.version=$cgv" \
    --set observe.periodSeconds=2 --set observe.topK=8 --set observe.reportIntervalSeconds=2 \
    --wait --timeout 240s >"$WORK/logs/helm-install.log" 2>&1; then
    tail -n 20 "$WORK/logs/helm-install.log" | indent >&2
    die "helm install failed"
  fi
  # helm --wait counts a DaemonSet with maxUnavailable 1 as ready with 0 of 1 pods ready.
  local workloads
  workloads="$(K -n "$SYSTEM_NS" get deployments,daemonsets -l "app.kubernetes.io/instance=$HELM_RELEASE" -o name)" ||
    die "listing the release's workloads failed"
  [[ "$workloads" == *deployment* && "$workloads" == *daemonset* ]] || die "the release has no Deployment and DaemonSet: $workloads"
  for w in $workloads; do
    K -n "$SYSTEM_NS" rollout status "$w" --timeout=180s >/dev/null || die "$w did not become ready within 180 s"
  done
  T_HELM_INSTALL=$((SECONDS - t0))
  info "installed and rolled out in ${T_HELM_INSTALL} s:"
  K -n "$SYSTEM_NS" get pods -o wide 2>&1 | indent
  AGENT_POD="$(K -n "$SYSTEM_NS" get pods -l app.kubernetes.io/component=agent -o 'jsonpath={.items[0].metadata.name}')"
  K label node "$NODE_NAME" nvidia.com/gpu.present=true --overwrite >/dev/null || die "kubectl label node failed"
  # One GPU, advertised as Kubernetes documents for extended resources (no device plugin, no
  # NVML here): the trainer holds it, so it is a GPU pod and observed with no policy.
  K patch node "$NODE_NAME" --subresource=status --type=json -p \
    '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"},
      {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": "1"}]' >/dev/null ||
    die "advertising nvidia.com/gpu on the node failed"
  K create namespace "$TRAINER_NS" >/dev/null || die "kubectl create namespace $TRAINER_NS failed"
  K create namespace "$BATCH_NS" >/dev/null || die "kubectl create namespace $BATCH_NS failed"
  info "node labelled nvidia.com/gpu.present=true, 1 nvidia.com/gpu advertised; namespaces $TRAINER_NS (trainer) and $BATCH_NS (neighbours)"
}

# size_neighbours — the neighbours' CPU request: 100m each while everything fits the node's
# allocatable CPU beside the chart's pods and the trainer, else an equal share of what is left.
size_neighbours() {
  local alloc used=0 v free
  alloc="$(K get node "$NODE_NAME" -o 'jsonpath={.status.allocatable.cpu}')" || die "reading the node's allocatable CPU failed"
  [[ "$alloc" == *m ]] && alloc="${alloc%m}" || alloc=$((alloc * 1000))
  for v in $(K get pods -A --field-selector=status.phase=Running -o \
    'jsonpath={range .items[*]}{range .spec.containers[*]}{.resources.requests.cpu}{" "}{end}{end}'); do
    [[ "$v" == *m ]] && used=$((used + ${v%m})) || used=$((used + v * 1000))
  done
  free=$((alloc - used - TRAINER_REQUEST_M))
  if ((free < NEIGHBOURS * NEIGHBOUR_REQUEST_M)); then
    NEIGHBOUR_REQUEST_M=$((free / NEIGHBOURS))
    ((NEIGHBOUR_REQUEST_M >= 10)) || die "$NEIGHBOURS neighbours do not fit the node's ${alloc}m (used ${used}m)"
    info "($NEIGHBOURS neighbours at 100m would not fit the node's ${alloc}m allocatable CPU beside ${used}m of" \
      "running pods and the trainer's ${TRAINER_REQUEST_M}m: each requests ${NEIGHBOUR_REQUEST_M}m instead)"
  fi
}

# ---- step 5: pods ----------------------------------------------------------------------------
# trainer_job NAME — the trainer Job. Its pod waits (gate) for /tmp/GO, so the clock starts only
# once the phase is set up; after its one JSON line it stays up (the policy protects neighbours
# only while a trainer runs on the node) until the demo deletes the Job.
trainer_job() {
  local a args=""
  for a in "${TRAINER_ARGS[@]}" --duration "$DURATION" --warmup "$WARMUP"; do args+=", \"$a\""; done
  cat <<YAML
apiVersion: batch/v1
kind: Job
metadata: {name: $1, namespace: $TRAINER_NS}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {app: trainer, feedguard.io/role: trainer}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: trainer
        image: $WEDGE_IMAGE
        imagePullPolicy: Never
        command: ["/bin/sh", "-c", "i=0; while [ ! -e /tmp/GO ] && [ \$i -lt 12000 ]; do sleep 0.05; i=\$((i+1)); done; [ -e /tmp/GO ] || exit 1; fg-wedge-trainer \"\$@\"; echo \"trainer exit \$?\"; exec sleep 86400", "gate"$args]
        resources:
          requests: {cpu: ${TRAINER_REQUEST_M}m, memory: 256Mi}
          limits: {nvidia.com/gpu: 1}
YAML
}

# start_trainer PHASE ROUND — the trainer Job, its pod Running (gate closed).
start_trainer() {
  local job="trainer-$1-r$2"
  trainer_job "$job" | K apply -f - >/dev/null || die "creating the trainer Job $job failed"
  local i
  for ((i = 0; i < 120; i++)); do # `kubectl wait -l` fails at once while no pod matches yet
    [[ -n "$(K -n "$TRAINER_NS" get pods -l "job-name=$job" -o name 2>/dev/null)" ]] && break
    sleep 0.5
  done
  K -n "$TRAINER_NS" wait --for=condition=Ready pod -l "job-name=$job" --timeout=180s >/dev/null ||
    { K -n "$TRAINER_NS" describe pods -l "job-name=$job" 2>&1 | tail -n 20 | indent >&2; die "the trainer pod of $job did not start within 180 s"; }
  TRAINER_JOB="$job"
  TRAINER_POD="$(K -n "$TRAINER_NS" get pods -l "job-name=$job" -o 'jsonpath={.items[0].metadata.name}')"
  TRAINER_UID="$(K -n "$TRAINER_NS" get pods -l "job-name=$job" -o 'jsonpath={.items[0].metadata.uid}')"
  [[ -d "$CPU_CG/kubepods/burstable/pod$TRAINER_UID" ]] || die "no kubelet cgroup for the trainer pod ($CPU_CG/kubepods/burstable/pod$TRAINER_UID)"
}

delete_trainer() {
  K -n "$TRAINER_NS" delete job "$TRAINER_JOB" --cascade=foreground --wait=true --timeout=60s >/dev/null 2>&1 ||
    die "deleting the trainer Job $TRAINER_JOB failed"
  TRAINER_POD="" TRAINER_UID=""
}

neighbours_yaml() {
  cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: spinner, namespace: $BATCH_NS}
spec:
  replicas: $1
  selector: {matchLabels: {app: batch-spinner}}
  template:
    metadata:
      labels: {app: batch-spinner}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: spinner
        image: $WEDGE_IMAGE
        imagePullPolicy: Never
        command: [fg-wedge-spinner, --duration, "86400"]
        resources:
          requests: {cpu: ${NEIGHBOUR_REQUEST_M}m, memory: 16Mi}
YAML
}

# start_neighbours — the spinner Deployment at N replicas, rolled out; NB_UIDS.
start_neighbours() {
  local t0=$SECONDS
  say "Starting $NEIGHBOURS batch neighbours (Deployment $BATCH_NS/spinner: fg-wedge-spinner, Burstable ${NEIGHBOUR_REQUEST_M}m, no limit)"
  neighbours_yaml "$NEIGHBOURS" | K apply -f - >/dev/null || die "creating the neighbour Deployment failed"
  K -n "$BATCH_NS" rollout status deployment/spinner --timeout=240s >/dev/null ||
    die "the neighbour Deployment did not roll out within 240 s"
  mapfile -t NB_UIDS < <(K -n "$BATCH_NS" get pods -l app=batch-spinner --field-selector=status.phase=Running \
    -o 'jsonpath={range .items[*]}{.metadata.uid}{"\n"}{end}')
  ((${#NB_UIDS[@]} == NEIGHBOURS)) || die "expected $NEIGHBOURS running neighbour pods, found ${#NB_UIDS[@]}"
  local u
  for u in "${NB_UIDS[@]}"; do
    [[ -d "$CPU_CG/kubepods/burstable/pod$u" ]] || die "no kubelet cgroup for neighbour pod $u"
  done
  info "$NEIGHBOURS/$NEIGHBOURS Running in $((SECONDS - t0)) s"
}

# stop_neighbours — scales the Deployment to 0 and waits until every pod is gone.
stop_neighbours() {
  say "Scaling the neighbours to 0 for the isolated phase"
  K -n "$BATCH_NS" scale deployment/spinner --replicas=0 >/dev/null || die "scaling the neighbours down failed"
  K -n "$BATCH_NS" wait --for=delete pod -l app=batch-spinner --timeout=120s >/dev/null 2>&1 ||
    die "neighbour pods still there 120 s after scaling to 0"
  NB_UIDS=()
}

# neighbour_cpu_ns — total CPU time (ns) of every neighbour pod so far (kubelet's pod cgroups).
neighbour_cpu_ns() {
  local u v total=0
  for u in "${NB_UIDS[@]}"; do
    read -r v <"$CPUACCT_CG/kubepods/burstable/pod$u/cpuacct.usage" 2>/dev/null || continue
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

# sleep_until T_MS LABEL T0_MS TOTAL_S — sleeps until T_MS, showing progress. No kubectl here:
# the measurement runs on 2 CPUs and every client process would steal from it.
sleep_until() {
  while (($(now_ms) < $1)); do
    progress "$2" $((($(now_ms) - $3) / 1000)) "$4"
    sleep 0.5
  done
}

trainer_result() {
  K -n "$TRAINER_NS" logs "$TRAINER_POD" 2>/dev/null | grep '^{"samples_per_s"' | tail -n 1
}

# measure PHASE ROUND — opens the trainer's gate, waits out warm-up + duration, reads its result.
measure() {
  local phase="$1" r="$2" total=$((WARMUP + DURATION)) t0 n0 n1 tw t1 out="" label="${PHASE_LABEL[$1]}"
  PROGRESS_LAST=-1
  LOAD[$r.$phase]="$(cut -d' ' -f1 /proc/loadavg)"
  K -n "$TRAINER_NS" exec "$TRAINER_POD" -- touch /tmp/GO || die "opening the trainer's gate (kubectl exec) failed"
  t0=$(now_ms)
  sleep_until $((t0 + WARMUP * 1000)) "$label" "$t0" "$total"
  n0=$(neighbour_cpu_ns)
  tw=$(now_ms)
  sleep_until $((t0 + total * 1000)) "$label" "$t0" "$total"
  n1=$(neighbour_cpu_ns)
  t1=$(now_ms)
  while :; do
    out="$(trainer_result)"
    [[ -n "$out" ]] && break
    if (($(now_ms) - t0 > (total + 60) * 1000)); then
      printf '\n'
      K -n "$TRAINER_NS" logs "$TRAINER_POD" 2>&1 | tail -n 10 | indent >&2
      die "the trainer gave no result within $((total + 60)) s (pod $TRAINER_NS/$TRAINER_POD)"
    fi
    sleep 1
  done
  progress "$label" "$total" "$total"
  [[ -t 1 ]] && printf '\n'
  jq -e '.samples_per_s' <<<"$out" >/dev/null 2>&1 || die "unreadable trainer result: $out"
  RES[$r.$phase.sps]="$(jq -r '.samples_per_s' <<<"$out")"
  RES[$r.$phase.busy]="$(jq -r '.accelerator_busy' <<<"$out")"
  RES[$r.$phase.tcores]="$(jq -r '.cpu_cores' <<<"$out")"
  RES[$r.$phase.ncores]="$(awk -v n="$((n1 - n0))" -v ms="$((t1 - tw))" -v k="${#NB_UIDS[@]}" \
    'BEGIN {printf "%.2f", (k > 0 && ms > 0) ? n / 1e6 / ms : 0}')"
  info "$(printf '%.0f samples/s, accelerator busy %.0f%%, trainer %.2f cores, neighbours %s cores' \
    "${RES[$r.$phase.sps]}" "$(awk -v b="${RES[$r.$phase.busy]}" 'BEGIN {print b * 100}')" \
    "${RES[$r.$phase.tcores]}" "${RES[$r.$phase.ncores]}")"
}

# ---- observation (no policy needed) -----------------------------------------------------------
# KF ARGS — `kubectl feedguard ARGS` as a user runs it: the plugin found on PATH by kubectl, in the
# cluster's network namespace.
KF() {
  PATH="$(dirname "$FG_PLUGIN"):$PATH" KUBECONFIG="$KUBECONFIG" \
    nsenter --net="/run/netns/$NETNS" -- kubectl feedguard "$@"
}
# observe_trainer PHASE — what observation says of the trainer that just ran (its pod still up):
# `kubectl feedguard top`, then its minute as `explain` reports it (wait and its parts,
# contenders). Before the policy the contenders must be the neighbour pods. Sets OBS_WAIT[PHASE]
# (the trainer's wait over its last minute, a fraction; "" when it is not in the report: it did not
# starve) and OBS_PODS / OBS_NODE / OBS_OWN[PHASE], the parts of that wait behind other pods,
# behind the node's processes and behind its own threads.
declare -A OBS_WAIT OBS_NAMED OBS_PODS OBS_NODE OBS_OWN
pct() { awk -v f="$1" 'BEGIN {printf "%.0f%%", f * 100}'; }
observe_trainer() {
  local phase="$1" j="" i w named n
  # The report is rewritten every 2 s from the agent's 2 s samples: let it see the whole phase.
  for ((i = 0; i < 20; i++)); do
    j="$(KF explain "$TRAINER_POD" -n "$TRAINER_NS" -o json 2>/dev/null)"
    jq -e '.pod.windows[0].coveredSeconds >= 10' <<<"$j" >/dev/null 2>&1 && break
    j=""
    sleep 1
  done
  say "kubectl feedguard top -A   (observation: every GPU pod, policy or not)"
  KF top -A 2>&1 | indent
  if [[ -z "$j" ]]; then
    OBS_WAIT[$phase]=""
    info "kubectl feedguard explain $TRAINER_POD -n $TRAINER_NS: not in the StarvationReport (it did not starve)"
    return 0
  fi
  w="$(jq -r '.pod.windows[0]' <<<"$j")"
  OBS_WAIT[$phase]="$(jq -r '.waitFraction' <<<"$w")"
  OBS_PODS[$phase]="$(jq -r '(.waitBehindPodsSeconds // .waitSeconds) / .coveredSeconds' <<<"$w")"
  OBS_NODE[$phase]="$(jq -r '((.waitBehindOthersSeconds // .waitSeconds) - (.waitBehindPodsSeconds // .waitSeconds)) / .coveredSeconds' <<<"$w")"
  OBS_OWN[$phase]="$(jq -r '(.waitSeconds - (.waitBehindOthersSeconds // .waitSeconds)) / .coveredSeconds' <<<"$w")"
  named="$(jq -r '[.contenders[] | select(.kind == "Pod") | .name] | join(" ")' <<<"$w")"
  n="$(jq '[.contenders[] | select(.kind == "Pod" and ((.name // "") | startswith("spinner-")))] | length' <<<"$w")"
  OBS_NAMED[$phase]="$n"
  info "kubectl feedguard explain $TRAINER_POD -n $TRAINER_NS: over its last $(jq -r '.coveredSeconds' <<<"$w") s the trainer's" \
    "tasks waited $(pct "${OBS_WAIT[$phase]}") of the time ($(jq -r '.waitSource' <<<"$w")):" \
    "$(pct "${OBS_PODS[$phase]}") while other pods ran on its CPUs, $(pct "${OBS_NODE[$phase]}") while the node's own processes did," \
    "$(pct "${OBS_OWN[$phase]}") behind its own threads; no NVML here, so no GPU-time figure (the wait bounds it)"
  info "contenders (CPU-s on its CPUs while it waited): $(jq -r '[.contenders[] | "\(if .kind == "Node" then "node" else .name end) \(.cpuSeconds)s"] | join(", ")' <<<"$w")"
  if [[ "$phase" == cfs ]]; then
    local want=$((NEIGHBOURS < 8 ? NEIGHBOURS : 7))
    ((n >= want)) || die "observation named $n of the $NEIGHBOURS neighbour pods as the trainer's contenders (want >= $want): $named"
  fi
}

# ---- the fence -------------------------------------------------------------------------------
KNOBS=(cpu.shares cpu.cfs_quota_us cpu.cfs_period_us cpu.cfs_burst_us cpu.idle cpu.rt_runtime_us
  cpu.rt_period_us cpuset.cpus cpuset.mems cpuset.cpu_exclusive cpuset.mem_exclusive
  memory.limit_in_bytes memory.soft_limit_in_bytes memory.swappiness pids.max blkio.weight)
# snapshot OUT — "path<TAB>bytes" of every knob file (values a writer sets, not counters) of the
# neighbour pods' cgroups and their containers', in every v1 hierarchy.
snapshot() {
  local u m d k v
  for u in "${NB_UIDS[@]}"; do
    for m in /sys/fs/cgroup/*; do
      [[ -d "$m$CGROUP_ROOT/kubepods/burstable/pod$u" ]] || continue
      for d in "$m$CGROUP_ROOT/kubepods/burstable/pod$u" "$m$CGROUP_ROOT/kubepods/burstable/pod$u"/*/; do
        d="${d%/}"
        for k in "${KNOBS[@]}"; do
          [[ -f "$d/$k" ]] || continue
          v=""
          read -r v <"$d/$k" 2>/dev/null # builtins only: this runs every 0.1 s during a revert
          printf '%s\t%s\n' "$d/$k" "$v"
        done
      done
    done
  done | sort >"$1"
}

# fence_in_place — every neighbour pod's cpu.idle is 1, the trainer's is 0 (read on the node).
fence_in_place() {
  local u v
  for u in "${NB_UIDS[@]}"; do
    read -r v <"$CPU_CG/kubepods/burstable/pod$u/cpu.idle" 2>/dev/null || return 1
    [[ "$v" == 1 ]] || return 1
  done
  read -r v <"$CPU_CG/kubepods/burstable/pod$TRAINER_UID/cpu.idle" 2>/dev/null && [[ "$v" == 0 ]]
}

# agent_metric NAME — a value of the agent pod's /metrics (through the API server's pod proxy).
agent_metric() {
  K get --raw "/api/v1/namespaces/$SYSTEM_NS/pods/$AGENT_POD:8081/proxy/metrics" 2>/dev/null |
    awk -v n="$1" '$1 == n {print $2; exit}'
}

policy_ready() {
  [[ "$(K get fencepolicy "$POLICY_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}

# apply_policy ROUND — kubectl apply, then polls the neighbours' cgroup files on the node (20 ms)
# until the fence shows. Two latencies: from the start of `kubectl apply` (what a user waits:
# kubectl's own start-up and API discovery included, ~1.5 s on a busy 2-CPU machine), and from the
# moment kubectl sent the request that created the policy (its -v=6 log: the response's time
# stamp minus the request's duration) — the part that is feedguard's (controller watch, gRPC
# stream, agent, cgroup writes) plus the API server's.
apply_policy() {
  local r="$1" t0 t_ret="" el pid i
  snapshot "$WORK/snap.before.$r"
  [[ -s "$WORK/snap.before.$r" ]] || die "no cgroup files found for the neighbour pods"
  OVERWRITES[$r.before]="$(agent_metric feedguard_overwrites_total)"
  say "kubectl apply -f examples/demo/policy.yaml   (trainer selector + Idle fence)"
  POLICY_APPLIED=1 POLICY_ROUND="$r"
  t0=$(now_ms)
  # Not through K: a backgrounded function is a subshell, and $! would not be kubectl's pid.
  "$KUBECTL" apply -f "$POLICY_FILE" -v=6 >"$WORK/apply.out" 2>"$WORK/logs/apply.$r.log" &
  pid=$!
  BG_PIDS=("$pid")
  until fence_in_place; do
    if [[ -z "$t_ret" ]] && ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" || { indent <"$WORK/logs/apply.$r.log" >&2; die "kubectl apply of the FencePolicy failed"; }
      t_ret=$(now_ms)
    fi
    (($(now_ms) - t0 < 60000)) || die "the fence was not in place within 60 s (cpu.idle of the neighbour pods)"
    sleep 0.02
  done
  el=$(($(now_ms) - t0))
  if [[ -z "$t_ret" ]]; then
    wait "$pid" || { indent <"$WORK/logs/apply.$r.log" >&2; die "kubectl apply of the FencePolicy failed"; }
    t_ret=$(now_ms)
  fi
  BG_PIDS=()
  indent <"$WORK/apply.out"
  FENCE_MS[$r]=$el
  FENCE_MS_RETURN[$r]=$((t0 + el - t_ret)) # negative: fenced before kubectl had exited
  local t_req
  t_req="$(create_request_ms "$WORK/logs/apply.$r.log")"
  if [[ -n "$t_req" ]]; then
    FENCE_MS_REQUEST[$r]=$((t0 + el - t_req))
    info "fenced ${FENCE_MS_REQUEST[$r]} ms after kubectl sent the create request (${el} ms after the command began):" \
      "cpu.idle=1 in all $NEIGHBOURS neighbour pod cgroups (kubelet's), the trainer's 0"
  else
    FENCE_MS_REQUEST[$r]=null
    info "fenced ${el} ms after kubectl apply began: cpu.idle=1 in all $NEIGHBOURS neighbour pod cgroups (kubelet's), the trainer's 0"
  fi
  for ((i = 0; i < 40; i++)); do policy_ready && break; sleep 0.5; done
  policy_ready || info "(the policy's status is not Ready yet; measuring anyway)"
}

# create_request_ms LOG — epoch ms at which kubectl sent the POST that created the FencePolicy,
# from its -v=6 log line (klog time stamp of the response, local time, minus "milliseconds=N").
create_request_ms() {
  local line ts dur
  line="$(grep -m1 'verb="POST".*fencepolicies.*milliseconds=' "$1")" || return 0
  [[ "$line" =~ ^[IWE]([0-9]{2})([0-9]{2})\ ([0-9:.]+) ]] || return 0
  ts="$(date -d "$(date +%Y)-${BASH_REMATCH[1]}-${BASH_REMATCH[2]} ${BASH_REMATCH[3]}" +%s%3N)" || return 0
  [[ "$line" =~ milliseconds=([0-9]+) ]] || return 0
  dur="${BASH_REMATCH[1]}"
  echo $((ts - dur))
}

# withdraw_policy ROUND — kubectl delete (the controller's finalizer holds it until the agent has
# reverted), then every neighbour knob file must hold its pre-policy bytes again.
withdraw_policy() {
  local r="$1" t0 i
  t0=$(now_ms)
  K delete fencepolicy "$POLICY_NAME" --wait=true --timeout=90s 2>&1 | indent
  DELETE_MS[$r]=$(($(now_ms) - t0))
  POLICY_APPLIED=0
  REVERT_CHECKED=$((REVERT_CHECKED + 1))
  for ((i = 0; i < 300; i++)); do
    snapshot "$WORK/snap.after.$r"
    cmp -s "$WORK/snap.before.$r" "$WORK/snap.after.$r" && break
    sleep 0.1
  done
  REVERT_MS[$r]=$(($(now_ms) - t0))
  if cmp -s "$WORK/snap.before.$r" "$WORK/snap.after.$r"; then
    REVERT_OK[$r]=true
    info "reverted: all $(wc -l <"$WORK/snap.before.$r") knob files of the $NEIGHBOURS neighbour pods (pod and container cgroups) hold their original bytes again (${REVERT_MS[$r]} ms after kubectl delete began; it returned after ${DELETE_MS[$r]} ms)"
  else
    REVERT_OK[$r]=false
    REVERT_FAILED=$((REVERT_FAILED + 1))
    info "WARNING: not every original value came back:"
    diff "$WORK/snap.before.$r" "$WORK/snap.after.$r" | head -n 20 | indent
  fi
}

# ---- step 7: report --------------------------------------------------------------------------
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# med PHASE FIELD — the median over the rounds.
med() {
  local r v=()
  for ((r = 1; r <= ROUNDS; r++)); do v+=("${RES[$r.$1.$2]}"); done
  median "${v[@]}"
}

print_table() {
  local iso p what="${DURATION} s per phase"
  iso="$(med isolated sps)"
  ((ROUNDS > 1)) && what+=", medians of $ROUNDS rounds"
  say "Result: trainer throughput (node with $(nproc) CPUs, $NEIGHBOURS neighbour pods, $what)"
  printf '\n    %-28s %10s %12s %11s %13s %16s\n' phase samples/s "% isolated" "accel busy" \
    "trainer CPU" "neighbours CPU"
  printf '    %s\n' "$(printf '%.0s-' {1..95})"
  for p in "${PHASES[@]}"; do
    awk -v l="${PHASE_LABEL[$p]}" -v s="$(med "$p" sps)" -v i="$iso" -v b="$(med "$p" busy)" \
      -v t="$(med "$p" tcores)" -v n="$(med "$p" ncores)" 'BEGIN {
        printf "    %-28s %10.0f %11.1f%% %10.1f%% %8.2f cores %10.2f cores\n", l, s, 100 * s / i, 100 * b, t, n }'
  done
  printf '\n'
  local f=() fq=() r
  for ((r = 1; r <= ROUNDS; r++)); do f+=("${FENCE_MS[$r]}") fq+=("${FENCE_MS_REQUEST[$r]}"); done
  info "fence latency, until cpu.idle=1 in every neighbour pod cgroup: $(median "${fq[@]}") ms from kubectl's create request," \
    "$(median "${f[@]}") ms from the start of kubectl apply$( ((ROUNDS > 1)) && echo " (medians; rounds: ${fq[*]} / ${f[*]})")"
  info "agent feedguard_overwrites_total (values of ours kubelet/runc rewrote): ${OVERWRITES[$ROUNDS.before]:-?} before the policy, ${OVERWRITES[$ROUNDS.after]:-?} after the fenced phase"
  printf '\n'
}

show_status() {
  say "kubectl get fencepolicies"
  K get fencepolicies 2>&1 | indent
  say "kubectl describe fencepolicy $POLICY_NAME"
  K describe fencepolicy "$POLICY_NAME" 2>&1 | indent
  say "kubectl get pods -n $SYSTEM_NS -o wide"
  K get pods -n "$SYSTEM_NS" -o wide 2>&1 | indent
  say "kubectl get pods -n $TRAINER_NS,$BATCH_NS"
  K get pods -n "$TRAINER_NS" 2>&1 | indent
  K get pods -n "$BATCH_NS" 2>&1 | indent
}

# write_results FILE — every round's numbers, the versions and the machine, as JSON.
write_results() {
  local rounds="[]" r p ph
  for ((r = 1; r <= ROUNDS; r++)); do
    ph="{}"
    for p in "${PHASES[@]}"; do
      ph="$(jq -c --arg p "$p" --argjson sps "${RES[$r.$p.sps]}" --argjson busy "${RES[$r.$p.busy]}" \
        --argjson tc "${RES[$r.$p.tcores]}" --argjson nc "${RES[$r.$p.ncores]}" --argjson load "${LOAD[$r.$p]}" \
        '. + {($p): {samples_per_s: $sps, accelerator_busy: $busy, trainer_cores: $tc, neighbour_cores: $nc, loadavg_1m_at_start: $load}}' <<<"$ph")"
    done
    rounds="$(jq -c --argjson r "$r" --argjson ph "$ph" --argjson f "${FENCE_MS[$r]}" --argjson fr "${FENCE_MS_RETURN[$r]}" --argjson fq "${FENCE_MS_REQUEST[$r]}" \
      --argjson ok "${REVERT_OK[$r]:-null}" --argjson rm "${REVERT_MS[$r]:-null}" --argjson dm "${DELETE_MS[$r]:-null}" \
      --arg ob "${OVERWRITES[$r.before]:-}" --arg oa "${OVERWRITES[$r.after]:-}" --argjson held "${FENCE_HELD[$r]:-null}" \
      '. + [{round: $r, phases: $ph, fence_latency_ms: $f, fence_latency_after_apply_returned_ms: $fr, fence_latency_from_create_request_ms: $fq,
             fence_held_through_phase: $held, reverted_byte_exact: $ok, revert_ms: $rm, policy_delete_returned_ms: $dm,
             agent_overwrites_total_before: ($ob | tonumber? // null), agent_overwrites_total_after: ($oa | tonumber? // null)}]' <<<"$rounds")"
  done
  jq -n --argjson rounds "$rounds" --arg kubelet "$KUBELET_VERSION" --arg kubelet_bin "$("$KUBELET_BIN" --version 2>/dev/null | awk '{print $2}')" \
    --arg cri "$CONTAINER_RUNTIME_VERSION" --arg containerd "$CONTAINERD_VERSION" --arg runc "$RUNC_VERSION" \
    --arg kernel "$(uname -r)" --argjson cores "$(nproc)" --arg cpu "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)" \
    --arg cgroup "$(cgroup_kind)" --argjson n "$NEIGHBOURS" --argjson nreq "$NEIGHBOUR_REQUEST_M" --argjson treq "$TRAINER_REQUEST_M" \
    --argjson dur "$DURATION" --argjson warm "$WARMUP" --argjson shares "$ROOT_SHARES" --arg targs "${TRAINER_ARGS[*]}" \
    --argjson up "${T_CLUSTER_UP:-null}" --argjson inst "${T_HELM_INSTALL:-null}" --arg date "$(date -u +%FT%TZ)" \
    --arg policy "$(cat "$POLICY_FILE")" --arg mem "$(awk '/MemTotal/ {print $2}' /proc/meminfo)" \
    '{date: $date, rounds: $rounds,
      versions: {kubelet: $kubelet, kubelet_binary: $kubelet_bin, container_runtime_cri: $cri,
                 containerd: $containerd, runc: $runc},
      machine: {cores: $cores, cpu_model: $cpu, memory_kib: ($mem | tonumber), kernel: $kernel, cgroup: $cgroup},
      setup: {neighbours: $n, neighbour_request_m: $nreq, trainer_request_m: $treq, trainer_args: $targs,
              duration_s: $dur, warmup_s: $warm, node_root_cpu_shares: $shares,
              cluster_up_s: $up, helm_install_s: $inst, policy: $policy}}' >"$1"
}

cgroup_kind() {
  local v1 v2
  v1="$(awk '$9 == "cgroup" {n++} END {print n + 0}' /proc/self/mountinfo)"
  v2="$(awk '$9 == "cgroup2" {print $5; exit}' /proc/self/mountinfo)"
  if ((v1 > 0)) && [[ -n "$v2" ]]; then echo "v1 (hybrid: $v1 v1 hierarchies, cgroup2 at $v2)"
  elif ((v1 > 0)); then echo "v1"
  else echo "v2"; fi
}

# ---- step 8: cleanup -------------------------------------------------------------------------
cleanup() {
  local rc=$?
  ((CLEANED_UP)) && return
  CLEANED_UP=1
  trap '' INT TERM # finish cleaning up (children inherit the ignore); every wait below is bounded
  [[ -n "$WORK" ]] || exit "$rc"
  [[ -t 1 ]] && printf '\n'
  say "Cleaning up"
  local p
  for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  if ((POLICY_APPLIED)); then
    withdraw_policy "$POLICY_ROUND"
  fi
  if ((rc != 0 && rc != 130)) && [[ -n "${KUBECTL:-}" && -x "${KUBECTL:-}" ]]; then
    { K get pods -A -o wide; K -n "$SYSTEM_NS" logs -l app.kubernetes.io/component=agent --tail=50 --prefix
      K -n "$SYSTEM_NS" logs -l app.kubernetes.io/component=controller --tail=50 --prefix; } >"$WORK/logs/pods-at-failure.txt" 2>&1
  fi
  if ((HELM_INSTALLED)) && [[ -n "${HELM:-}" ]]; then
    if HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data" \
      timeout 150 "$HELM" uninstall "$HELM_RELEASE" --namespace "$SYSTEM_NS" --wait --timeout 120s >"$WORK/logs/helm-uninstall.log" 2>&1; then
      info "helm uninstall $HELM_RELEASE: done"
    else
      info "WARNING: helm uninstall failed ($WORK/logs/helm-uninstall.log); the cluster goes down anyway"
    fi
  fi
  local keep=""
  if ((KEEP_LOGS || (rc != 0 && rc != 130))); then keep="/tmp/feedguard-demo-logs-$(date +%Y%m%d-%H%M%S)"; fi
  if ((NODE_STARTED)); then
    if FEEDGUARD_NODE_KEEP_LOGS=$([[ -n "$keep" ]] && echo 1 || echo 0) \
      "$REPO/tests/node/cluster.sh" down "$NODE_DIR" >"$WORK/logs/cluster-down.log" 2>&1; then
      info "cluster down: kubelet, containerd, pods, control plane stopped; netns, mounts and cgroup root removed"
    else
      info "WARNING: cluster.sh down reported a problem:"
      tail -n 10 "$WORK/logs/cluster-down.log" | indent
      rc=$((rc ? rc : 1))
    fi
  fi
  if [[ -n "$keep" ]]; then
    mkdir -p "$keep" && cp -r "$WORK/logs" "$keep/demo" 2>/dev/null
    [[ -d "$NODE_DIR/logs" ]] && cp -r "$NODE_DIR/logs" "$keep/node" 2>/dev/null
    info "logs kept in $keep"
  fi
  [[ -d "$NODE_DIR/root" ]] || rm -rf --one-file-system -- "$WORK"
  if ((CHECK && rc == 0)); then
    check_verdict || rc=3
    check_observation || rc=3
  fi
  exit "$rc"
}

# check_observation — --check's rule for observation: under plain CFS the trainer's wait behind
# other pods (kubectl feedguard explain, its last minute) is at least 20 %, and with the policy it
# is at most a third of that and under 10 % — or the trainer is not starving at all. Skipped (0)
# when no phase was observed. (bench/node/demo_check_test.sh tests this rule.)
check_observation() {
  local c="${OBS_PODS[cfs]:-}" f="${OBS_PODS[fenced]:-}"
  [[ -z "${OBS_WAIT[cfs]+x}" ]] && return 0
  if [[ -n "$c" ]] && awk -v c="$c" -v f="${f:-0}" 'BEGIN {exit !(c >= 0.2 && f <= c / 3 && f < 0.1)}'; then
    info "check passed: the trainer's wait behind other pods $(pct "$c") under plain CFS," \
      "$( [[ -n "$f" ]] && pct "$f" || echo "not starving") fenced"
  else
    printf '%scheck failed:%s the trainer waited behind other pods %s under plain CFS (need >= 20%%), %s fenced (need <= a third of that, < 10%%)\n' \
      "$RED" "$PLAIN" "${c:-n/a (not in the report)}" "${f:-not starving}" >&2
    return 1
  fi
}

# check_verdict — --check's rule: the fenced phase's median throughput is at least 1.2x plain
# CFS's, and every round's policy deletion restored every original byte (checked).
# (bench/node/demo_check_test.sh tests this rule.)
check_verdict() {
  local f c
  f="$(med fenced sps)" c="$(med cfs sps)"
  if ((REVERT_CHECKED == ROUNDS && REVERT_FAILED == 0)) && awk -v f="$f" -v c="$c" 'BEGIN {exit !(c > 0 && f >= 1.2 * c)}'; then
    info "check passed: fenced $f vs plain CFS $c samples/s (>= 1.2x); originals restored in $REVERT_CHECKED/$ROUNDS round(s)"
  else
    printf '%scheck failed:%s fenced %s vs plain CFS %s samples/s (need >= 1.2x), originals restored in %s of %s round(s)\n' \
      "$RED" "$PLAIN" "$f" "$c" "$((REVERT_CHECKED - REVERT_FAILED))" "$ROUNDS" >&2
    return 1
  fi
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
  local t
  for t in kubectl jq curl ip nsenter containerd runc; do command -v "$t" >/dev/null || die "missing tool: $t (tests/install_deps.sh)"; done
  # shellcheck source=../../tests/testbed/versions.env
  source "$REPO/tests/testbed/versions.env" || die "tests/testbed/versions.env missing"
  KUBELET_BIN="$KUBELET"

  WORK="$(mktemp -d "${FEEDGUARD_DEMO_TMP:-/tmp}/feedguard-demo.XXXXXX")" || die "mktemp failed"
  NODE_DIR="$WORK/node"
  mkdir -p "$WORK/logs"
  # kubectl's discovery and HTTP caches (default ~/.kube/cache) in the temp dir: nothing left in
  # root's home for a cluster that is gone after the demo.
  export KUBECACHEDIR="$WORK/kube-cache"
  trap cleanup EXIT
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM
  local t0=$SECONDS

  start_cluster
  build_images
  install_chart
  size_neighbours

  for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    local tag=""
    ((ROUNDS > 1)) && tag=" (round $ROUND/$ROUNDS)"
    ((ROUND > 1)) && stop_neighbours
    say "Phase 1/3$tag: the trainer alone (Burstable, request ${TRAINER_REQUEST_M}m, wants ~1.85 cores)"
    start_trainer isolated "$ROUND"
    measure isolated "$ROUND"
    delete_trainer

    start_neighbours
    say "Phase 2/3$tag: the trainer among $NEIGHBOURS neighbour pods, plain CFS weights"
    start_trainer cfs "$ROUND"
    measure cfs "$ROUND"
    ((ROUND == 1)) && observe_trainer cfs
    delete_trainer

    say "Phase 3/3$tag: the same, with a FencePolicy"
    start_trainer fenced "$ROUND"
    apply_policy "$ROUND"
    measure fenced "$ROUND"
    ((ROUND == 1)) && observe_trainer fenced
    FENCE_HELD[$ROUND]=false
    fence_in_place && FENCE_HELD[$ROUND]=true
    OVERWRITES[$ROUND.after]="$(agent_metric feedguard_overwrites_total)"
    if ((ROUND < ROUNDS)); then
      withdraw_policy "$ROUND"
      delete_trainer
    fi
  done

  print_table
  if [[ -n "${OBS_WAIT[cfs]:-}" ]]; then
    info "observation, no policy needed (kubectl feedguard): under plain CFS the trainer's tasks waited" \
      "$(pct "${OBS_WAIT[cfs]}") of their last minute, $(pct "${OBS_PODS[cfs]}") of it while other pods ran on its CPUs," \
      "${OBS_NAMED[cfs]} neighbour pods named as contenders; fenced: $( [[ -n "${OBS_WAIT[fenced]:-}" ]] &&
        echo "waited $(pct "${OBS_WAIT[fenced]}"), $(pct "${OBS_PODS[fenced]}") while other pods ran, $(pct "${OBS_NODE[fenced]}") while the node's processes did, $(pct "${OBS_OWN[fenced]}") behind its own threads" ||
        echo "not starving (not in the report)")"
  fi
  # Status is coalesced (at most one write a second): let it catch up with the agent's report.
  for ((t = 0; t < 40; t++)); do
    [[ "$(K get fencepolicy "$POLICY_NAME" -o 'jsonpath={.status.trainers.protected}')" -ge 1 ]] 2>/dev/null && break
    sleep 0.5
  done
  show_status
  say "kubectl delete fencepolicy $POLICY_NAME"
  withdraw_policy "$ROUNDS"
  delete_trainer
  if [[ -n "$RESULTS" ]]; then
    write_results "$RESULTS" || die "writing $RESULTS failed"
    info "results: $RESULTS"
  fi
  info "demo ran $((SECONDS - t0)) s (without install/build)"
}

# Sourced (bench/node/demo_check_test.sh): define the functions only.
[[ "${BASH_SOURCE[0]}" != "$0" ]] || main "$@"

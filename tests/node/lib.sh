# lib.sh — shared steps of the `node` tier's chart tests (sourced, not run): the preamble (root,
# work dir, log helpers, a trap that dumps diagnostics and always runs `cluster.sh down`), the
# cluster + feedguard images, workload Deployments, cgroup-file snapshots, kubelet's QoS-tier
# settling, `helm install` of charts/feedguard as a user would, and metric reads through the API
# server's pod proxy.
#
#   source "$HERE/lib.sh"; node_init TAG "$@"      (the test's one argument is WORKDIR; sets WORK
#                                                   NODE REPO HERE T0 RNS WNS RELEASE FENCE_TIMEOUT_S)
#   node_up                                        (cluster up, env sourced, versions logged)
#   import_feedguard_images; helm_install_fg [--set ...]
# Callers run with `set -euo pipefail`.

# shellcheck disable=SC2034  # variables are for the sourcing test
node_init() {
  (($# == 2)) || { echo "usage: $0 WORKDIR" >&2; exit 2; }
  LIB_TAG="$1"
  HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  REPO="$(cd "$HERE/../.." && pwd)"
  if ((EUID != 0)); then
    echo "SKIPPED: the node tier needs root (network/mount namespaces, cgroups, containerd)"
    exit 77
  fi
  mkdir -p "$2"
  WORK="$(cd "$2" && pwd)"
  NODE="$WORK/node"
  rm -rf "$WORK/failed-logs" "$WORK/images" "$WORK/snap"
  mkdir -p "$WORK/snap"
  T0=$SECONDS
  RELEASE=fg
  FENCE_TIMEOUT_S="${FEEDGUARD_NODE_FENCE_TIMEOUT_S:-60}"
  RNS=feedguard-system
  WNS=fg-workload
  FG_CONTROLLER="${FG_CONTROLLER:-$REPO/build/release/controller/feedguard-controller}"
  FG_AGENT="${FG_AGENT:-$REPO/build/release/agent/feedguard-agent}"
  LIB_DOWN_DONE=0
  trap lib_on_exit EXIT
  trap 'exit 130' INT TERM
  [[ -x "$FG_CONTROLLER" && -x "$FG_AGENT" ]] ||
    fail "feedguard binaries not built ($FG_CONTROLLER, $FG_AGENT): cmake --build --preset release --target feedguard-agent feedguard-controller"
}

say() { printf '[node-%s %(%H:%M:%S)T +%3ds] %s\n' "$LIB_TAG" -1 "$((SECONDS - T0))" "$*"; }
fail() { say "FAIL: $*" >&2; exit 1; }
pass() { say "ok: $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs_since() { local d=$(($(now_ms) - $1)); printf '%d.%03d' $((d / 1000)) $((d % 1000)); }

lib_on_exit() {
  local rc=$?
  exec >&2  # a failure inside `... >/dev/null` must still show what follows
  # A test's own last words (diagnostics, undoing what it wrote outside the chart), if it
  # defines node_exit_hook RC; before the node goes down.
  if ((!LIB_DOWN_DONE)) && declare -F node_exit_hook >/dev/null; then node_exit_hook "$rc" || true; fi
  if ((!LIB_DOWN_DONE)); then
    if ((rc)) && [[ -d "$NODE/logs" ]]; then
      if [[ -x "$NODE/bin/kubectl" ]]; then
        "$NODE/bin/kubectl" get pods -A -o wide 2>&1 || true
        "$NODE/bin/kubectl" get fencepolicies -o yaml 2>&1 | tail -n 60 || true
        for c in controller agent; do
          "$NODE/bin/kubectl" -n "$RNS" logs -l "app.kubernetes.io/component=$c" --tail=60 --prefix 2>&1 || true
        done
        "$NODE/bin/kubectl" -n "$RNS" describe pods 2>&1 | tail -n 60 || true
      fi
      mkdir -p "$WORK/failed-logs" && cp -r "$NODE/logs" "$WORK/failed-logs/" 2>/dev/null || true
      say "logs copied to $WORK/failed-logs"
    fi
    "$HERE/cluster.sh" down "$NODE" || true
  fi
  exit "$rc"
}

# node_down — the last step of a passing test.
node_down() {
  local t1=$SECONDS
  LIB_DOWN_DONE=1
  "$HERE/cluster.sh" down "$NODE" || fail "cluster.sh down failed"
  rm -rf "$WORK/images" "$WORK/images.log"
  pass "down in $((SECONDS - t1))s"
}

node_up() {
  local t1=$SECONDS
  "$HERE/cluster.sh" up "$NODE"
  # shellcheck disable=SC1091
  source "$NODE/env"
  K="$KUBECTL"
  CPU="/sys/fs/cgroup/cpu$CGROUP_ROOT"
  CPUSET="/sys/fs/cgroup/cpuset$CGROUP_ROOT"
  T_UP=$((SECONDS - t1))
  say "cluster up in ${T_UP}s: kubelet $KUBELET_VERSION, $CONTAINER_RUNTIME_VERSION (containerd $CONTAINERD_VERSION), runc $RUNC_VERSION, crun ${CRUN_VERSION:-none} (RuntimeClass: ${CRUN_RUNTIMECLASS:-none}), kube-proxy ${KUBE_PROXY_VERSION:-?} (iptables ${IPTABLES_VERSION:-?}), CoreDNS ${COREDNS_VERSION:-?} on ${CLUSTER_DNS:-?}, kernel $KERNEL_VERSION, cgroup root $CGROUP_ROOT"
  say "versions: kubelet=$KUBELET_VERSION containerd=$CONTAINERD_VERSION runc=$RUNC_VERSION"
}

# import_feedguard_images — controller/agent images from the binaries CI built (images.sh).
import_feedguard_images() {
  local t1=$SECONDS file name comp
  mkdir -p "$WORK/images"
  "$HERE/images.sh" feedguard "$WORK/images" --controller "$FG_CONTROLLER" --agent "$FG_AGENT" >"$WORK/images/list" 2>"$WORK/images.log" ||
    { cat "$WORK/images.log"; fail "images.sh feedguard failed"; }
  declare -gA IMG
  while read -r file name; do
    "$CTR" images import "$file" >/dev/null || fail "ctr images import $file failed"
    comp="${name##*/feedguard-}"
    IMG[${comp%%:*}]="$name"
  done <"$WORK/images/list"
  pass "images ${IMG[controller]} and ${IMG[agent]} built and imported in $((SECONDS - t1))s"
}

# fence_policy NAME FENCE [TRAINER-CPU]: tests/fixtures/fence_policy.sh (shared with the e2e tier).
# shellcheck source=../fixtures/fence_policy.sh
source "$(dirname "${BASH_SOURCE[0]}")/../fixtures/fence_policy.sh"

# busybox_spec COMMAND RESOURCES [RESIZE-POLICY] — the pod spec (YAML, not indented) of one
# busybox container "main": the workloads of deploy and sleep_pod.
busybox_spec() {
  cat <<YAML
terminationGracePeriodSeconds: 1
containers:
- name: main
  image: $BUSYBOX_IMAGE
  imagePullPolicy: Never
  command: $1
  resources: $2
YAML
  [[ -z "${3:-}" ]] || echo "  resizePolicy: $3"
}
# deploy NAME ROLE RESOURCES [COMMAND] — a Deployment of one busybox pod in $WNS (YAML on stdout);
# COMMAND, a `sh -c` script, defaults to `sleep 86400`.
deploy() {
  local cmd='[sleep, "86400"]'
  [[ -z "${4:-}" ]] || cmd="[sh, -c, '$4']"
  cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $1, namespace: $WNS}
spec:
  replicas: 1
  selector: {matchLabels: {app: $1}}
  template:
    metadata:
      labels: {app: $1, feedguard.io/role: $2}
    spec:
$(busybox_spec "$cmd" "$3" | sed 's/^/      /')
---
YAML
}
# sleep_pod NAME NAMESPACE RESOURCES — a bare busybox `sleep 3600` Pod whose CPU kubelet may
# resize in place (restartPolicy NotRequired; YAML on stdout).
sleep_pod() {
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $2}
spec:
$(busybox_spec '[sleep, "3600"]' "$3" '[{resourceName: cpu, restartPolicy: NotRequired}]' | sed 's/^/  /')
---
YAML
}
# wait_rollouts DEPLOYMENT... — each of $WNS's Deployments rolled out (180 s each).
wait_rollouts() {
  local d
  for d in "$@"; do
    $K -n "$WNS" rollout status "deployment/$d" --timeout=180s >/dev/null || fail "deployment $d did not roll out"
  done
}
# deploy_trainer_and_neighbours TRAINER-RESOURCES — namespace $WNS with the Deployments trainer,
# neighbour-a (100m request, 500m limit) and neighbour-b (200m request), rolled out; REL[APP] is
# each pod's cgroup relative to the cgroup root (the dir checked to exist), pods_rel their dirs.
deploy_trainer_and_neighbours() {
  local t1=$SECONDS d uid qos
  $K create namespace "$WNS" >/dev/null
  {
    deploy trainer trainer "$1"
    deploy neighbour-a neighbour '{requests: {cpu: 100m, memory: 16Mi}, limits: {cpu: 500m, memory: 64Mi}}'
    deploy neighbour-b neighbour '{requests: {cpu: 200m, memory: 16Mi}}'
  } | $K apply -f - >/dev/null
  wait_rollouts trainer neighbour-a neighbour-b
  pass "trainer + 2 neighbour Deployments rolled out in $((SECONDS - t1))s"
  declare -gA REL
  for d in trainer neighbour-a neighbour-b; do
    read -r uid qos _ <<<"$(pod_of "$d")"
    REL[$d]="$(pod_rel "$uid" "$qos")"
    [[ -d "$CPU/${REL[$d]}" ]] || fail "pod cgroup $CPU/${REL[$d]} missing"
  done
}
pods_rel() { echo "${REL[trainer]}/*" "${REL[neighbour-a]}/*" "${REL[neighbour-b]}/*"; }

# pod_of APP — "UID QOS NAME" of the Deployment's (first) pod that is not being deleted; empty
# when there is none.
pod_of() {
  $K -n "$WNS" get pods -l "app=$1" -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null)][0]
    | select(. != null) | "\(.metadata.uid) \(.status.qosClass // "") \(.metadata.name)"'
}
# pod_rel UID QOS — the pod's cgroup relative to the cluster's cgroup root.
pod_rel() {
  case "$2" in
    Guaranteed) echo "kubepods/pod$1" ;;
    Burstable) echo "kubepods/burstable/pod$1" ;;
    BestEffort) echo "kubepods/besteffort/pod$1" ;;
    *) fail "unknown QoS class '$2'" ;;
  esac
}

# snapshot OUT REL... — "path<TAB>bytes" of every cgroup knob file (values a writer sets, not
# counters) of the given dirs (relative to the cgroup root; "REL/*" adds their subdirs), in
# every v1 hierarchy.
KNOBS='cpu.shares cpu.cfs_quota_us cpu.cfs_period_us cpu.cfs_burst_us cpu.idle cpu.rt_runtime_us
  cpu.rt_period_us cpuset.cpus cpuset.mems cpuset.cpu_exclusive cpuset.mem_exclusive
  memory.limit_in_bytes memory.soft_limit_in_bytes memory.memsw.limit_in_bytes memory.swappiness
  memory.use_hierarchy memory.move_charge_at_immigrate pids.max hugetlb.2MB.limit_in_bytes
  blkio.weight'
snapshot() {
  local out="$1" rel m f k depth d
  shift
  : >"$out"
  for rel in "$@"; do
    depth=0
    [[ "$rel" == *'*' ]] && { rel="${rel%/\*}"; depth=1; }
    for m in /sys/fs/cgroup/*/; do
      m="${m%/}"
      [[ -d "$m$CGROUP_ROOT/$rel" ]] || continue
      while read -r d; do
        for k in $KNOBS; do
          f="$d/$k"
          [[ -f "$f" ]] && printf '%s\t%s\n' "$f" "$(tr '\n' ' ' <"$f" 2>/dev/null)" >>"$out"
        done
      done < <(find "$m$CGROUP_ROOT/$rel" -mindepth 0 -maxdepth "$depth" -type d | sort)
    done
  done
  sort -o "$out" "$out"
  [[ -s "$out" ]] || fail "snapshot $out is empty"
}
# kubelet's QoS-tier cgroups (not the pods under them).
QOS=(kubepods kubepods/burstable kubepods/besteffort)
diff_snap() { # A B WHAT — fails with the differing lines.
  if ! diff -u "$1" "$2" >"$WORK/snap/diff.txt"; then
    cat "$WORK/snap/diff.txt"
    fail "$3: files differ (above)"
  fi
}

# kubelet keeps each QoS tier's cpu.shares at the sum of its pods' requests, on its own schedule.
shares() { local s=$(($1 * 1024 / 1000)); ((s < 2)) && s=2; echo "$s"; }
burstable_sum_m() {
  local sum=0 v
  for v in $($K get pods -A --field-selector=status.phase=Running -o \
    'jsonpath={range .items[?(@.status.qosClass=="Burstable")]}{range .spec.containers[*]}{.resources.requests.cpu}{" "}{end}{end}'); do
    [[ "$v" == *m ]] && sum=$((sum + ${v%m})) || sum=$((sum + v * 1000))
  done
  echo "$sum"
}
qos_settled() { [[ "$(cat "$CPU/kubepods/burstable/cpu.shares")" == "$(shares "$(burstable_sum_m)")" ]]; }
# wait_qos — prints the seconds it waited.
wait_qos() {
  local t=$SECONDS
  until qos_settled; do
    ((SECONDS - t < 120)) || fail "burstable QoS tier cpu.shares $(cat "$CPU/kubepods/burstable/cpu.shares") never reached $(shares "$(burstable_sum_m)")"
    sleep 1
  done
  echo $((SECONDS - t))
}

# qos_as_before_install WHAT — once kubelet has settled them (wait_qos; QOS_S: the seconds), the
# QoS tiers' files byte-identical to $WORK/snap/qos.0, the picture before the install.
qos_as_before_install() {
  QOS_S="$(wait_qos)"
  snapshot "$WORK/snap/qos.end" "${QOS[@]}"
  diff_snap "$WORK/snap/qos.0" "$WORK/snap/qos.end" "$1"
}

# helm_install_fg [HELM ARGS...] — charts/feedguard as it is, plus the node's cgroup root, driver
# and version (so the agent gets only kubelet's pod tree: agent.cgroup.hostMount's default) and
# the caller's --set flags; waits for both rollouts as kubectl sees them.
helm_install_fg() {
  local t1=$SECONDS w
  "$HELM" install "$RELEASE" "$REPO/charts/feedguard" --namespace "$RNS" --create-namespace \
    --set controller.image.pullPolicy=Never --set agent.image.pullPolicy=Never \
    --set "agent.cgroup.root=$CGROUP_ROOT" --set agent.cgroup.driver=cgroupfs \
    --set agent.cgroup.version=v1 "$@" \
    --wait --timeout 180s >"$WORK/helm-install.log" 2>&1 ||
    { cat "$WORK/helm-install.log"; fail "helm install failed"; }
  for w in "deployment/$RELEASE-feedguard-controller" "daemonset/$RELEASE-feedguard-agent"; do
    $K -n "$RNS" rollout status "$w" --timeout=120s >/dev/null || fail "$w did not become ready within 120 s"
  done
  T_INSTALL=$((SECONDS - t1))
  pass "helm install: controller and agent rolled out in ${T_INSTALL}s ($*)"
}

# agent_pod — name of the Running, Ready agent pod (empty when none).
agent_pod() {
  $K -n "$RNS" get pods -l app.kubernetes.io/component=agent -o \
    'jsonpath={range .items[*]}{.metadata.name}{" "}{.status.phase}{" "}{.metadata.deletionTimestamp}{"\n"}{end}' |
    awk '$2 == "Running" && NF == 2 {print $1; exit}'
}
# agent_pids — pids of feedguard-agent processes in this node's cgroups (not the host's others).
agent_pids() {
  local p
  for p in $(find "$CPU" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u); do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == feedguard-agen* ]] && echo "$p"
  done
  return 0
}
# pod_metric NAME PORT METRIC — a metric's value from a pod's /metrics (API server pod proxy).
pod_metric() {
  $K --request-timeout=5s get --raw "/api/v1/namespaces/$RNS/pods/$1:$2/proxy/metrics" 2>/dev/null | awk -v m="$3" '$1 == m {print $2}'
}
agent_metric() { pod_metric "$1" 8081 "$2"; }
# leader_pod — the controller pod holding the Lease (the identity is pod name + "-pid" or the name).
leader_pod() {
  local holder p
  holder="$($K -n "$RNS" get lease -o 'jsonpath={.items[0].spec.holderIdentity}')"
  for p in $($K -n "$RNS" get pods -l app.kubernetes.io/component=controller -o 'jsonpath={.items[*].metadata.name}'); do
    [[ "$holder" == "$p" || "$holder" == "$p"-* ]] && { echo "$p"; return 0; }
  done
  return 0
}

# policy_field POLICY JSONPATH
policy_field() { $K get fencepolicy "$1" -o "jsonpath=$2"; }
# wait_until SECONDS WHAT CMD... — polls CMD every 0.5 s, fails naming WHAT; prints the seconds.
wait_until() {
  local limit="$1" what="$2" t=$SECONDS
  shift 2
  until "$@"; do
    ((SECONDS - t < limit)) || fail "$what: not within ${limit}s"
    sleep 0.5
  done
  echo $((SECONDS - t))
}

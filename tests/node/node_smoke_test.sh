#!/usr/bin/env bash
# node_smoke_test.sh WORKDIR — the first test of the `node` tier, on a real one-node cluster
# (tests/node/cluster.sh): Burstable, BestEffort and Guaranteed pods reach Running; their pod and
# container cgroups exist under the node's cgroup root with kubelet's values; `kubectl exec` works
# (API server -> kubelet); the PodResources socket answers; an in-place resize of a pod's CPU
# request reaches the pod and container cpu.shares; `cluster.sh down` leaves nothing behind
# (cgroups, mounts, network namespace, processes, host sysctls).
# Exit: 0 pass, 1 fail, 77 skipped (not root).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
node_init smoke "$@"
NSP=fg-smoke
node_exit_hook() {  # RC — kubelet's last lines and the pods' events
  if (($1)) && [[ -d "$NODE/logs" ]]; then
    say "kubelet log tail:"; tail -n 25 "$NODE/logs/kubelet.log" 2>/dev/null || true
    [[ -x "$NODE/bin/kubectl" ]] && { "$NODE/bin/kubectl" -n "$NSP" describe pods 2>&1 | tail -n 40 || true; }
  fi
  return 0
}

# Host state the cluster must not change.
sysctls_before="$(cat /proc/sys/vm/overcommit_memory /proc/sys/vm/panic_on_oom /proc/sys/kernel/panic /proc/sys/kernel/panic_on_oops | tr '\n' ' ')"

# ---- up ----------------------------------------------------------------------------------
node_up
cp "$NODE/state" "$WORK/state.copy"

# ---- pods --------------------------------------------------------------------------------
$K create namespace "$NSP" >/dev/null
{
  sleep_pod burstable "$NSP" '{requests: {cpu: 250m, memory: 32Mi}, limits: {cpu: 500m, memory: 128Mi}}'
  sleep_pod besteffort "$NSP" '{}'
  sleep_pod guaranteed "$NSP" '{requests: {cpu: 500m, memory: 64Mi}, limits: {cpu: 500m, memory: 64Mi}}'
} | $K apply -f - >/dev/null
t1=$SECONDS
$K -n "$NSP" wait --for=condition=Ready pod --all --timeout=180s >/dev/null ||
  fail "pods did not become Ready within 180 s"
pass "3 pods Running after $((SECONDS - t1))s"

jp() { $K -n "$NSP" get pod "$1" -o "jsonpath=$2"; }
# shares MILLICPU (kubelet's MilliCPUToShares): lib.sh.
# expect FILE VALUE
expect() {
  [[ -f "$1" ]] || fail "$1 does not exist"
  local got
  got="$(cat "$1")"
  [[ "$got" == "$2" ]] || fail "$1 = $got, expected $2"
}
# eventually FILE VALUE TIMEOUT_S — prints the seconds it took.
eventually() {
  local t=$SECONDS got=""
  while ((SECONDS - t <= $3)); do
    got="$(cat "$1" 2>/dev/null || true)"
    [[ "$got" == "$2" ]] && { echo $((SECONDS - t)); return 0; }
    sleep 0.5
  done
  fail "$1 = $got after $3 s, expected $2"
}

MEM=/sys/fs/cgroup/memory$CGROUP_ROOT
alloc_cpu="$($K get node "$NODE_NAME" -o 'jsonpath={.status.allocatable.cpu}')"
[[ "$alloc_cpu" =~ ^[0-9]+$ ]] && alloc_m=$((alloc_cpu * 1000)) || alloc_m="${alloc_cpu%m}"
expect "$CPU/kubepods/cpu.shares" "$(shares "$alloc_m")"
pass "kubepods cpu.shares = $(shares "$alloc_m") (allocatable cpu $alloc_cpu)"

declare -A DIRREL
for p in burstable besteffort guaranteed; do
  uid="$(jp "$p" '{.metadata.uid}')"
  qos="$(jp "$p" '{.status.qosClass}')"
  cid="$(jp "$p" '{.status.containerStatuses[0].containerID}')"
  cid="${cid#containerd://}"
  case "$p:$qos" in
    burstable:Burstable) rel="kubepods/burstable/pod$uid" ;;
    besteffort:BestEffort) rel="kubepods/besteffort/pod$uid" ;;
    guaranteed:Guaranteed) rel="kubepods/pod$uid" ;;
    *) fail "pod $p has QoS class $qos" ;;
  esac
  DIRREL[$p]="$rel"
  [[ -d "$CPU/$rel/$cid" ]] || fail "container cgroup $CPU/$rel/$cid missing"
  # The pod cgroup holds the sandbox (pause) and the container.
  n="$(find "$CPU/$rel" -mindepth 1 -maxdepth 1 -type d | wc -l)"
  ((n == 2)) || fail "$CPU/$rel has $n child cgroups, expected 2 (sandbox + container)"
  pid="$(head -n1 "$CPU/$rel/$cid/cgroup.procs")"
  [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline")" == "sleep 3600 " ]] || fail "process $pid in $rel/$cid is not the container's sleep"
  [[ -d "$MEM/$rel/$cid" && -d "/sys/fs/cgroup/pids$CGROUP_ROOT/$rel/$cid" ]] || fail "memory/pids cgroups of $rel/$cid missing"
  case "$p" in
    burstable)
      expect "$CPU/$rel/cpu.shares" "$(shares 250)"; expect "$CPU/$rel/$cid/cpu.shares" "$(shares 250)"
      expect "$CPU/$rel/cpu.cfs_quota_us" 50000; expect "$CPU/$rel/$cid/cpu.cfs_quota_us" 50000
      expect "$MEM/$rel/$cid/memory.limit_in_bytes" $((128 << 20)) ;;
    besteffort)
      expect "$CPU/$rel/cpu.shares" 2; expect "$CPU/$rel/$cid/cpu.shares" 2
      expect "$CPU/$rel/$cid/cpu.cfs_quota_us" -1 ;;
    guaranteed)
      expect "$CPU/$rel/cpu.shares" "$(shares 500)"; expect "$CPU/$rel/$cid/cpu.shares" "$(shares 500)"
      expect "$CPU/$rel/cpu.cfs_quota_us" 50000; expect "$CPU/$rel/$cid/cpu.cfs_quota_us" 50000
      expect "$MEM/$rel/memory.limit_in_bytes" $((64 << 20)); expect "$MEM/$rel/$cid/memory.limit_in_bytes" $((64 << 20)) ;;
  esac
  pass "$p: $qos cgroups $CGROUP_ROOT/$rel{,/${cid:0:12}…} with kubelet's values (cpu.shares $(cat "$CPU/$rel/cpu.shares"), quota $(cat "$CPU/$rel/cpu.cfs_quota_us"))"
  eval "CID_$p=$cid"
done
s="$(eventually "$CPU/kubepods/burstable/cpu.shares" "$(shares 250)" 90)"
expect "$CPU/kubepods/besteffort/cpu.shares" 2
pass "QoS tiers: burstable cpu.shares $(shares 250) (sum of requests, after ${s}s), besteffort 2"

# API server -> kubelet (exec needs the kubelet client certificate).
out="$($K -n "$NSP" exec besteffort -- cat /proc/self/cgroup)" || fail "kubectl exec failed"
grep -q "cpu:$CGROUP_ROOT/${DIRREL[besteffort]}/" <<<"$out" || fail "kubectl exec: unexpected /proc/self/cgroup: $out"
pass "kubectl exec into besteffort: its cpu cgroup is $CGROUP_ROOT/${DIRREL[besteffort]}/…"

# PodResources.
[[ -S "$PODRESOURCES_SOCKET" ]] || fail "PodResources socket $PODRESOURCES_SOCKET missing"
# Inside the node's mount namespace the socket has kubelet's own short path (unix socket paths
# are limited to 107 bytes; the host path under the build tree can be longer).
pr="$("$NODE_EXEC" /usr/bin/python3 "$HERE/podresources_list.py" /var/lib/kubelet/pod-resources/kubelet.sock)" ||
  fail "PodResources List failed"
for p in burstable besteffort guaranteed; do
  grep -q "^$NSP/$p main " <<<"$pr" || fail "PodResources List lacks $NSP/$p: $pr"
done
pass "PodResources List answered ($(wc -l <<<"$pr") containers, incl. the 3 pods)"

# In-place resize of the Burstable pod's CPU request: 250m -> 400m.
t1=$SECONDS
$K -n "$NSP" patch pod burstable --subresource resize --type strategic \
  -p '{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"400m"}}}]}}' >/dev/null ||
  fail "kubectl patch --subresource resize failed"
rel="${DIRREL[burstable]}"
s1="$(eventually "$CPU/$rel/$CID_burstable/cpu.shares" "$(shares 400)" 60)"
s2="$(eventually "$CPU/$rel/cpu.shares" "$(shares 400)" 60)"
expect "$CPU/$rel/$CID_burstable/cpu.cfs_quota_us" 50000
[[ "$(jp burstable '{.status.containerStatuses[0].restartCount}')" == 0 ]] || fail "resize restarted the container"
pass "resize 250m -> 400m: container cpu.shares $(shares 400) after ${s1}s, pod after $((s1 + s2))s, no restart"
s="$(eventually "$CPU/kubepods/burstable/cpu.shares" "$(shares 400)" 90)"
pass "QoS tier burstable cpu.shares followed to $(shares 400) after $((SECONDS - t1))s"

# feedguard's own images, built from the binaries CI built (FG_CONTROLLER / FG_AGENT, set by
# CTest): imported into containerd, each runs its --help as a pod under runc as the image's user.
t1=$SECONDS
import_feedguard_images
while read -r file name; do
  size=$(($(stat -c %s "$file") / 1000000))
  ((size <= 60)) || fail "$name is $size MB (> 60 MB)"
  comp="${name##*/feedguard-}"; comp="${comp%%:*}"
  cat <<YAML | $K apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: image-$comp, namespace: $NSP}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: "$name", imagePullPolicy: Never, args: ["--help"]}
YAML
  say "  $name: $size MB uncompressed"
done <"$WORK/images/list"
for comp in controller agent; do
  $K -n "$NSP" wait --for=jsonpath='{.status.phase}'=Succeeded "pod/image-$comp" --timeout=60s >/dev/null ||
    fail "pod image-$comp did not succeed: $($K -n "$NSP" get pod "image-$comp" -o jsonpath='{.status.containerStatuses[0].state}')"
  # (no `| grep -q` under pipefail: grep's early exit would SIGPIPE the writer)
  out="$($K -n "$NSP" logs "image-$comp")" || fail "kubectl logs image-$comp failed"
  # CLI11's "Usage: feedguard-<comp> ..." (both binaries parse their flags with CLI11)
  grep -qi "^usage: feedguard-$comp" <<<"$out" || fail "image-$comp printed no usage: ${out:0:200}"
done
pass "controller and agent images built, imported, and ran --help as pods in $((SECONDS - t1))s"

# ---- down and leftovers ------------------------------------------------------------------
t1=$SECONDS
node_down
t_down=$((SECONDS - t1))
for m in $(awk '{ split($0, a, " - "); split(a[2], b, " "); if (b[1] ~ /^cgroup2?$/) print $5 }' /proc/self/mountinfo); do
  [[ ! -e "$m$CGROUP_ROOT" ]] || fail "cgroup $m$CGROUP_ROOT left behind"
done
netns_list="$(ip netns list)"
! grep -qw "$NETNS" <<<"$netns_list" || fail "network namespace $NETNS left behind"
! grep -qF "$NODE" /proc/self/mountinfo || fail "mounts under $NODE left behind"
# shellcheck disable=SC1091
source "$WORK/state.copy"
for v in holder containerd kubelet kube_scheduler kube_controller_manager; do
  pid="$(eval "echo \${${v}_PID:-}")"
  [[ -z "$pid" || ! -d "/proc/$pid" ]] || [[ "$(awk '{print $22}' "/proc/$pid/stat" 2>/dev/null)" != "$(eval "echo \${${v}_START}")" ]] ||
    [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" == Z ]] || fail "$v (pid $pid) still running"
done
for p in /proc/[0-9]*; do
  cmdline="$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null || true)"
  if [[ "$cmdline" == *"$NODE/"* ]]; then
    fail "process ${p#/proc/} ($cmdline) still mentions $NODE"
  fi
done
for d in /var/lib/kubelet /run/containerd /var/log/containers /var/log/pods /var/lib/cni /usr/libexec/kubernetes /etc/cni /var/lib/feedguard; do
  [[ ! -d "$d" || -z "$(ls -A "$d")" ]] || fail "host directory $d is not empty: $(ls -A "$d" | head -5 | tr '\n' ' ')"
done
sysctls_after="$(cat /proc/sys/vm/overcommit_memory /proc/sys/vm/panic_on_oom /proc/sys/kernel/panic /proc/sys/kernel/panic_on_oops | tr '\n' ' ')"
[[ "$sysctls_after" == "$sysctls_before" ]] || fail "host sysctls changed: $sysctls_before -> $sysctls_after"
[[ ! -e "$NODE" ]] || fail "$NODE not removed"
pass "down in ${t_down}s: no cgroups, netns, mounts, processes left; host sysctls unchanged ($sysctls_after)"
rm -f "$WORK/state.copy"
say "PASS (up ${T_UP}s, total $((SECONDS - T0))s)"

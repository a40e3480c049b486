#!/bin/sh
# kubelet_v2_guest.sh — the guest half of tests/vm/kubelet_v2.sh: runs inside the qemu VM (busybox
# sh, cgroup2 at /sys/fs/cgroup) as the node. Starts Debian's containerd + runc and kubelet
# (cgroupfs driver on cgroup v2, cgroup root /feedguard-v2) against the API server the host runs
# (10.0.2.2 over qemu's user-mode network), then drives the checks itself with kubectl and
# `feedguard-agent apply/revert` (CLI mode, as tests/node/resize_fenced_test.sh does on v1):
#   1. Burstable + BestEffort pods (hostNetwork: no CNI in the VM) reach Running with
#      kubelet-made cgroup v2 directories.
#   2. Weight and Idle fences on two neighbour pods: cpu.weight written; the Idle fence held as
#      the lowest weight (this kernel, 6.1, shows an idle group's cpu.weight as 0, which kubelet
#      >= 1.36 reads back into pod status as ~1.8e15 CPUs: kernel_facts.h); pod status stays
#      sane; revert → every file byte-identical.
#   3. Fence again; in-place resize of both fenced pods; kubelet's writes land (neither group is
#      idle), the next apply adopts them as the originals and fences again; revert leaves
#      kubelet's latest values. (The kernel's cpu.idle itself, under an operator's
#      --idle-when-weight-reads-zero, and kubelet's refused write on an idle group: the enforcer
#      integration tier in this VM, IdleFencedPodResizedInPlaceEndsWithKubeletsNewWeight/v2.)
# Inputs under /fg/v2 (put there by the host script). Exit 0 pass, 1 fail.
set -u
G=/fg/v2
export PATH=/fg/v2/bin:/bin:/sbin:/usr/bin:/usr/sbin
CGROOT=/feedguard-v2
CG=/sys/fs/cgroup$CGROOT
NODE=fg-v2-node
NS=fg-v2
now() { cut -d' ' -f1 /proc/uptime; }
T0=$(now)
LAST=$T0
say() { echo "[v2-guest $(awk -v a="$T0" -v b="$(now)" 'BEGIN{printf "+%6.1fs", b-a}')] $*"; }
# lap NAME — prints how long the step since the previous lap took.
lap() { t=$(now); say "TIMING $1: $(awk -v a="$LAST" -v b="$t" 'BEGIN{printf "%.1f", b-a}') s"; LAST=$t; }
fail() {
  say "FAIL: $*"
  echo "---- containerd log (tail) ----"; tail -n 25 /tmp/containerd.log 2>/dev/null
  echo "---- kubelet log (errors, tail) ----"; grep -E '^E|error|fail' /tmp/kubelet.log 2>/dev/null | tail -n 40
  exit 1
}
pass() { say "ok: $*"; }
# bad — a failed check after which the run can still go on: recorded, exit 1 at the end.
FAILED=0
bad() { say "FAIL (continuing): $*"; FAILED=$((FAILED + 1)); }
K() { kubectl --kubeconfig "$G/admin.kubeconfig" --request-timeout=60s "$@"; }

say "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB, $(awk '$2 == "/sys/fs/cgroup" {print $3}' /proc/mounts) at /sys/fs/cgroup"
# ---- kernel modules (the cloud kernel builds these as modules), network --------------------
while read -r m; do insmod "$G/modules/$m" || fail "insmod $m"; done <"$G/modules.list"
ip link set lo up
i=0
while ! ip link show eth0 >/dev/null 2>&1; do i=$((i + 1)); [ $i -lt 50 ] || fail "no eth0"; sleep 0.1; done
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 || fail "network setup"
lap modules+network

# ---- filesystem layout -----------------------------------------------------------------------
mkdir -p /var/lib/containerd /run/containerd /var/lib/kubelet /var/log/pods /var/log/containers /etc/cni/net.d \
  /var/lib/feedguard /root
mount -t tmpfs tmpfs /var/lib/containerd && mount -t tmpfs tmpfs /var/lib/kubelet || fail "tmpfs mounts"
: >/etc/resolv.conf
echo 'root:x:0:0:root:/root:/bin/sh' >/etc/passwd  # kubelet's user-namespace manager reads it
echo 'root:x:0:' >/etc/group
echo "127.0.0.1 localhost" >/etc/hosts
echo "$NODE" >/etc/hostname
hostname "$NODE"
printf '0123456789abcdef0123456789abcdef\n' >/etc/machine-id
mkdir -p "$CG"
for c in cpuset cpu io memory hugetlb pids; do echo "+$c" >"$CG/cgroup.subtree_control" || fail "enable $c in $CG"; done
say "cgroup root $CG: subtree_control '$(cat "$CG/cgroup.subtree_control")'"

# ---- containerd + images ---------------------------------------------------------------------
say "containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), kubelet $(kubelet --version | awk '{print $2}')"
containerd --config "$G/containerd.toml" >/tmp/containerd.log 2>&1 &
i=0
until ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 600 ] || fail "containerd did not answer"; sleep 0.2
done
lap containerd-start
for img in pause busybox; do
  ctr --address /run/containerd/containerd.sock -n k8s.io images import "$G/images/$img.tar" >/dev/null || fail "import $img"
done
lap image-import

# ---- kubelet ---------------------------------------------------------------------------------
kubelet --config="$G/kubelet.yaml" --kubeconfig="$G/kubelet.kubeconfig" --hostname-override="$NODE" \
  --node-ip=10.0.2.15 --root-dir=/var/lib/kubelet \
  --v=2 >/tmp/kubelet.log 2>&1 &
KUBELET_PID=$!
i=0
until K get node "$NODE" >/dev/null 2>&1; do
  kill -0 $KUBELET_PID 2>/dev/null || fail "kubelet exited"
  i=$((i + 1)); [ $i -lt 300 ] || fail "node $NODE never registered"; sleep 1
done
lap kubelet-register
say "node: $(K get node "$NODE" -o 'jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kernelVersion}')"

# ---- pods ------------------------------------------------------------------------------------
K create namespace "$NS" >/dev/null || fail "namespace"
pod() {  # NAME RESOURCES-JSON
  cat <<YAML
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  nodeName: $NODE
  hostNetwork: true
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  tolerations: [{operator: Exists}]
  containers:
  - name: main
    image: feedguard.local/busybox:1
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resizePolicy: [{resourceName: cpu, restartPolicy: NotRequired}]
    resources: $2
---
YAML
}
{
  for p in trainer nb-weight nb-idle; do pod $p '{requests: {cpu: 250m}, limits: {cpu: "1"}}'; done
  pod besteffort '{}'
} >/tmp/pods.yaml
K apply -f /tmp/pods.yaml >/dev/null || fail "kubectl apply pods"
K -n "$NS" wait --for=condition=Ready pod --all --timeout=600s >/dev/null || {
  K -n "$NS" get pods -o wide; fail "pods not Ready"; }
lap pods-running
jp() { K -n "$NS" get pod "$1" -o "jsonpath=$2"; }
for p in trainer nb-weight nb-idle besteffort; do
  uid=$(jp $p '{.metadata.uid}') cid=$(jp $p '{.status.containerStatuses[0].containerID}') qos=$(jp $p '{.status.qosClass}')
  cid=${cid#containerd://}
  tier=burstable; [ "$qos" = BestEffort ] && tier=besteffort
  d=$CG/kubepods/$tier/pod$uid
  [ -d "$d" ] && [ -d "$d/$cid" ] || fail "$p ($qos): $d/$cid missing: $(find "$CG" -maxdepth 4 -type d)"
  grep -q . "$d/$cid/cgroup.procs" || fail "$p: no process in $d/$cid"
  eval "UID_$(echo $p | tr -- - _)=$uid CID_$(echo $p | tr -- - _)=$cid DIR_$(echo $p | tr -- - _)=$d"
  say "$p $qos: $d  cpu.weight $(cat "$d/cpu.weight") cpu.max '$(cat "$d/cpu.max")' cpu.idle $(cat "$d/cpu.idle"); container cpu.weight $(cat "$d/$cid/cpu.weight") cpu.max '$(cat "$d/$cid/cpu.max")'"
done
pass "3 Burstable + 1 BestEffort pods Running with kubelet-made cgroup v2 pod and container directories"

# ---- fences ----------------------------------------------------------------------------------
podref() {  # NAME POLICY REQUEST_MILLI
  eval "u=\$UID_$(echo $1 | tr -- - _) c=\$CID_$(echo $1 | tr -- - _)"
  printf '{"policy":"%s","pod":{"uid":"%s","namespace":"%s","name":"%s","qosClass":"BURSTABLE","containers":[{"containerId":"containerd://%s"}],"cpuRequestMilli":"%s","cpuLimitMilli":"1000"}}' \
    "$2" "$u" "$NS" "$1" "$c" "$3"
}
fence() {  # VERSION NB_IDLE_REQUEST_MILLI NB_WEIGHT_REQUEST_MILLI > file
  printf '{"nodeName":"%s","version":"%s","policies":[{"name":"w","neighbourFence":"WEIGHT"},{"name":"i","neighbourFence":"IDLE"}],"trainers":[%s],"neighbours":[%s,%s]}\n' \
    "$NODE" "$1" "$(podref trainer w 250)" "$(podref nb-weight w "$3")" "$(podref nb-idle i "$2")"
}
agent() { feedguard-agent "$@" --cgroup-root "$CGROOT" --cgroup-driver cgroupfs --cgroup-version v2 \
  --cgroup-mount /sys/fs/cgroup --state-dir /var/lib/feedguard --cpu-manager-state "" --pod-resources "" \
  --kubelet-config "$G/kubelet.yaml"; }
# snap: every cpu.* file of the QoS tiers, pods and containers the test made, "path=value" lines.
snap() {
  for d in "$CG/kubepods" "$CG/kubepods/burstable" "$CG/kubepods/besteffort" \
    "$DIR_trainer" "$DIR_nb_weight" "$DIR_nb_idle" "$DIR_besteffort" \
    "$DIR_trainer/$CID_trainer" "$DIR_nb_weight/$CID_nb_weight" "$DIR_nb_idle/$CID_nb_idle"; do
    for f in cpu.weight cpu.weight.nice cpu.idle cpu.max cpuset.cpus; do
      [ -f "$d/$f" ] && printf '%s=%s\n' "$d/$f" "$(cat "$d/$f")"
    done
  done
}
W=$DIR_nb_weight I=$DIR_nb_idle
fence 1 250 250 >/tmp/fence1.json
snap >/tmp/snap0
agent apply --fence /tmp/fence1.json >/tmp/apply1.json 2>/tmp/apply1.err || fail "apply: $(cat /tmp/apply1.json /tmp/apply1.err | tail -n 5)"
lap agent-apply
snap >/tmp/snap-fenced
say "files the agent changed:"; diff /tmp/snap0 /tmp/snap-fenced | grep '^[<>] /' | sed 's/^/    /'
[ "$(cat "$I/cpu.idle")" = 0 ] && [ "$(cat "$I/cpu.weight")" = 1 ] ||
  fail "nb-idle not held as the lowest weight: cpu.idle $(cat "$I/cpu.idle") cpu.weight $(cat "$I/cpu.weight")"
[ "$(cat "$W/cpu.weight")" != "$(grep "^$W/cpu.weight=" /tmp/snap0 | cut -d= -f2)" ] || fail "nb-weight cpu.weight unchanged"
grep -q "lowest CPU weight" /tmp/apply1.json || fail "apply 1 does not say the Idle fence is held as the lowest weight: $(head -c 600 /tmp/apply1.json)"
pass "fenced on v2: nb-weight pod cpu.weight $(grep "^$W/cpu.weight=" /tmp/snap0 | cut -d= -f2) → $(cat "$W/cpu.weight"), nb-idle pod cpu.weight 1 (cpu.idle 0: the kernel shows an idle weight as 0)"
sleep 2
st=$(K -n "$NS" get pod nb-idle -o 'jsonpath=pod {.status.resources.requests.cpu} container {.status.containerStatuses[0].resources.requests.cpu}')
case "$st" in *[0-9][0-9][0-9][0-9][0-9][0-9][0-9]*) fail "nb-idle status reads a huge CPU request while fenced: $st" ;;
*) pass "nb-idle status while fenced: $st (no 0 weight read back)" ;; esac
agent revert >/tmp/revert1.json 2>/tmp/revert1.err || fail "revert: $(tail -n 5 /tmp/revert1.json /tmp/revert1.err)"
snap >/tmp/snap1
if diff /tmp/snap0 /tmp/snap1 >/tmp/diff1; then pass "revert: all $(wc -l </tmp/snap0) cpu.* files byte-identical to before the fence"
else cat /tmp/diff1; fail "revert left differences"; fi
lap agent-revert

# ---- in-place resize of fenced pods ----------------------------------------------------------
agent apply --fence /tmp/fence1.json >/tmp/apply2.json 2>&1 || fail "apply 2"
[ "$(cat "$I/cpu.weight")" = 1 ] || fail "not re-fenced"
eventually() {  # FILE VALUE TIMEOUT_S — echoes seconds waited
  s=0; while [ $s -le "$3" ]; do [ "$(cat "$1" 2>/dev/null)" = "$2" ] && { echo $s; return 0; }; sleep 1; s=$((s + 1)); done; return 1; }
resize() { K -n "$NS" patch pod "$1" --subresource resize --type strategic \
  -p '{"spec":{"containers":[{"name":"main","resources":{"requests":{"cpu":"400m"}}}]}}' >/dev/null; }
w_fenced=$(cat "$W/cpu.weight") i_weight_before=$(cat "$I/cpu.weight")
# A pod of 400m gets weight 1 + ((409 - 2) * 9999) / 262142 = 16 from kubelet (shares → weight).
resize nb-weight || fail "resize nb-weight"
s=$(eventually "$W/cpu.weight" 16 120) || fail "kubelet did not write nb-weight's resized cpu.weight (holds $(cat "$W/cpu.weight"))"
pass "kubelet resized fenced nb-weight: pod cpu.weight $w_fenced → 16 after ${s}s (container $(cat "$W/$CID_nb_weight/cpu.weight"))"
lap resize-weight
resize nb-idle || fail "resize nb-idle"
# The Idle fence held as weight 1 leaves the group non-idle: kubelet's write lands.
s=$(eventually "$I/cpu.weight" 16 120) || bad "kubelet did not write nb-idle's resized cpu.weight (holds $(cat "$I/cpu.weight"))"
say "nb-idle after the resize: pod cpu.weight $(cat "$I/cpu.weight") after ${s:-?}s (before $i_weight_before), container $(cat "$I/$CID_nb_idle/cpu.weight"), conditions: $(K -n "$NS" get pod nb-idle -o 'jsonpath={range .status.conditions[*]}{.type}={.status}:{.reason}:{.message}; {end}')"
fence 2 400 400 >/tmp/fence2.json
agent apply --fence /tmp/fence2.json >/tmp/apply3.json 2>&1 || fail "apply 3: $(head -c 600 /tmp/apply3.json)"
say "after apply with the new requests: nb-idle cpu.weight $(cat "$I/cpu.weight") cpu.idle $(cat "$I/cpu.idle") (ResizePending in output: $(grep -c ResizePending /tmp/apply3.json))"
[ "$(cat "$I/cpu.weight")" = 1 ] || bad "nb-idle not fenced again after the resize (cpu.weight $(cat "$I/cpu.weight"))"
grep -q ResizePending /tmp/apply3.json && bad "apply 3 reports ResizePending on v2: $(head -c 600 /tmp/apply3.json)"
[ -f /var/lib/feedguard/checkpoint.json ] && say "the agent's checkpoint entry for nb-idle pod cpu.weight: $(tr -d '\n ' </var/lib/feedguard/checkpoint.json | grep -o "{[^{}]*\"path\":\"$I/cpu.weight\"[^}]*}" | head -c 400)"
tr -d '\n ' </var/lib/feedguard/checkpoint.json | grep -o "{[^{}]*\"path\":\"$I/cpu.weight\"[^}]*}" | grep -q '"original":"16' ||
  bad "the checkpoint's original for nb-idle's pod cpu.weight is not kubelet's resized 16"
[ "$(cat "$I/cpu.weight")" = 1 ] && pass "fence held through the resize (nb-idle cpu.weight 1, nb-weight cpu.weight $(cat "$W/cpu.weight")); kubelet's weight 16 recorded as the original"
lap resize-idle
i=0
while K -n "$NS" get pod nb-idle -o 'jsonpath={.status.conditions[*].type}' | grep -qi resize; do
  i=$((i + 1)); [ $i -lt 60 ] || break; sleep 1; done
if [ $i -lt 60 ]; then pass "nb-idle resize completed (no Resize conditions)"
else bad "nb-idle resize conditions still set: $(K -n "$NS" get pod nb-idle -o 'jsonpath={range .status.conditions[*]}{.type}={.status}:{.reason}; {end}')"; fi
agent revert >/tmp/revert2.json 2>&1 || fail "revert 2: $(head -c 600 /tmp/revert2.json)"
[ "$(cat "$W/cpu.weight")" = 16 ] && [ "$(cat "$I/cpu.weight")" = 16 ] && [ "$(cat "$I/cpu.idle")" = 0 ] ||
  bad "after revert: nb-weight cpu.weight $(cat "$W/cpu.weight"), nb-idle cpu.weight $(cat "$I/cpu.weight") idle $(cat "$I/cpu.idle")"
[ "$FAILED" -gt 0 ] || pass "revert kept kubelet's resized values (both pods cpu.weight 16, cpu.idle 0)"
snap >/tmp/snap2
say "cpu.* files changed over the whole run (kubelet's resizes):"; diff /tmp/snap0 /tmp/snap2 | grep '^[<>] /' | sed 's/^/    /'
lap revert-after-resize
kill $KUBELET_PID 2>/dev/null
if [ "$FAILED" -gt 0 ]; then say "FAILED: $FAILED check(s) after $(awk -v a="$T0" -v b="$(now)" 'BEGIN{printf "%.0f", b-a}') s of guest time"; exit 1; fi
say "PASS in $(awk -v a="$T0" -v b="$(now)" 'BEGIN{printf "%.0f", b-a}') s of guest time"
exit 0

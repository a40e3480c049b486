#!/usr/bin/env bash
# kubelet_v2.sh [WORKDIR] — kubelet + containerd + runc on cgroup v2, seen once, with feedguard's
# agent fencing kubelet-made pod cgroups there. The host is cgroup v1, so the node runs in the qemu
# VM of run_in_vm.sh (Debian cloud kernel, cgroup2 at /sys/fs/cgroup, tcg):
#
#   host: network namespace fgv2-<id> (created here, deleted on exit) holding etcd +
#         kube-apiserver (tests/testbed/testbed.sh, advertising 10.0.2.2) and qemu, whose
#         user-mode network (slirp) makes the namespace's 127.0.0.1 the guest's 10.0.2.2.
#   VM:   kubelet_v2_guest.sh: containerd + runc, kubelet (cgroupfs driver, cgroup v2, cgroup
#         root /feedguard-v2), the pause/busybox images of tests/node/images.sh, kubectl, and
#         `feedguard-agent apply/revert` — the checks are listed in kubelet_v2_guest.sh.
#
# No scheduler/controller-manager: pods carry spec.nodeName; no CNI in the VM: pods use
# hostNetwork (the node stays NotReady for lack of a CNI config; kubelet still runs host-network
# pods). ~75 s under tcg on a 2-core machine (bench/results/real-node-v2.md); CTest vm_kubelet_v2
# (label vm). Exit: the guest's status (0 pass, 1 fail), 77 cannot run here (not root,
# no qemu/kernel, binaries not built), 124 VM timeout.
# Env: FEEDGUARD_V2_MEM (default 3G), FEEDGUARD_V2_SMP (2), FEEDGUARD_V2_TIMEOUT (1500 s),
#      FG_AGENT (default build/release/agent/feedguard-agent).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
TESTBED="$REPO/tests/testbed"
# shellcheck source=../testbed/versions.env
source "$TESTBED/versions.env"
T0=$SECONDS
say() { printf '[kubelet-v2 %(%H:%M:%S)T +%3ds] %s\n' -1 "$((SECONDS - T0))" "$*" >&2; }
skip() { say "SKIP: $*"; exit 77; }

((EUID == 0)) || skip "needs root (network namespace)"
AGENT="${FG_AGENT:-$REPO/build/release/agent/feedguard-agent}"
[[ -x "$AGENT" ]] || skip "$AGENT not built"
[[ -x "$KUBELET" && -x "$KUBE_APISERVER" && -x "$ETCD" ]] || skip "kubelet/kube-apiserver/etcd not built (tests/testbed/build.sh)"
for b in containerd containerd-shim-runc-v2 ctr runc kubectl ip qemu-system-x86_64 openssl gcc; do
  command -v "$b" >/dev/null || skip "$b not installed"
done
KVER="$(basename "$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n1)" | sed 's/^vmlinuz-//')"
[[ -n "$KVER" && -d "/lib/modules/$KVER" ]] || skip "no Debian cloud kernel with its modules"

WORK="${1:-$(mktemp -d /tmp/feedguard-kubelet-v2.XXXXXX)}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
ID="$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
NETNS="fgv2-$ID"
G="$WORK/guest"  # becomes /fg/v2 in the VM
in_net() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [[ -f "$WORK/apiserver/env" ]] && { in_net "$TESTBED/testbed.sh" down "$WORK/apiserver" >/dev/null 2>&1 || say "WARNING: testbed down failed"; }
  [[ -e "/run/netns/$NETNS" ]] && { ip netns del "$NETNS" || say "WARNING: could not delete netns $NETNS"; }
  rm -rf --one-file-system "$G"
  say "exit $rc after $((SECONDS - T0)) s (work dir $WORK)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NETNS"
ip -n "$NETNS" link set lo up
say "netns $NETNS; starting etcd + kube-apiserver (testbed.sh, advertising 10.0.2.2)"
FEEDGUARD_TESTBED_ADVERTISE_ADDRESS=10.0.2.2 in_net "$TESTBED/testbed.sh" up "$WORK/apiserver" 2>"$WORK/testbed.log" ||
  { tail -n 20 "$WORK/testbed.log" >&2; exit 1; }
# shellcheck disable=SC1091
PORT="$(source "$WORK/apiserver/env" && echo "$APISERVER_PORT")"
say "kube-apiserver up on :$PORT"

# ---- the guest's files -------------------------------------------------------------------------
mkdir -p "$G/bin" "$G/modules" "$G/images"
cp "$KUBELET" "$(command -v containerd)" "$(command -v containerd-shim-runc-v2)" "$(command -v ctr)" \
  "$(command -v runc)" "$(readlink -f "$(command -v kubectl)")" "$AGENT" "$G/bin/"
# The admin kubeconfig (O=system:masters) for both kubelet and kubectl, aimed at 10.0.2.2 (a name
# in the serving certificate: testbed.sh adds the advertise address).
sed "s#https://127.0.0.1:$PORT#https://10.0.2.2:$PORT#" "$WORK/apiserver/kubeconfig" >"$G/admin.kubeconfig"
cp "$G/admin.kubeconfig" "$G/kubelet.kubeconfig"
grep -q "10.0.2.2:$PORT" "$G/admin.kubeconfig" || { say "could not rewrite the kubeconfig"; exit 1; }
mkdir -p "$WORK/images"
"$REPO/tests/node/images.sh" base "$WORK/images" >"$WORK/images/list" 2>"$WORK/images.log" ||
  { cat "$WORK/images.log" >&2; exit 1; }
while read -r file name; do cp "$file" "$G/images/$(basename "$file")"; say "image $name"; done <"$WORK/images/list"
# Kernel modules in dependency order: virtio NIC (slirp) and overlayfs (containerd's snapshotter).
MODDIR="/lib/modules/$KVER"
: >"$G/modules.list"
add_module() {  # path relative to MODDIR, dependencies first
  local rel="$1" dep
  grep -qxF "$(basename "$rel")" "$G/modules.list" && return 0
  for dep in $(awk -v m="$rel:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' "$MODDIR/modules.dep"); do add_module "$dep"; done
  cp "$MODDIR/$rel" "$G/modules/"
  basename "$rel" >>"$G/modules.list"
}
for m in virtio_pci virtio_net overlay; do
  rel="$(awk -F: -v m="/$m.ko" 'index($1, m) && substr($1, length($1) - length(m) + 1) == m { print $1; exit }' "$MODDIR/modules.dep")"
  [[ -n "$rel" ]] || skip "module $m not found in $MODDIR"
  add_module "$rel"
done
say "modules: $(tr '\n' ' ' <"$G/modules.list")"
cat >"$G/containerd.toml" <<'TOML'
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "feedguard.local/pause:3.10"
    disable_apparmor = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "/fg/v2/bin/runc"
          SystemdCgroup = false
          # The VM's root is the initramfs (rootfs), where pivot_root(2) fails with EINVAL
          # ("error jailing process inside rootfs"): runc moves the root and chroots instead.
          NoPivotRoot = true
TOML
cat >"$G/kubelet.yaml" <<'YAML'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /feedguard-v2
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
runtimeRequestTimeout: 10m
maxPods: 20
cpuManagerPolicy: none
YAML
# Shared libraries of the dynamic binaries (runc: libseccomp; the agent: its C++ libraries).
files=(--file "$G:/fg/v2")
for b in "$G"/bin/*; do
  ldd "$b" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' || true
done | sort -u >"$WORK/libs"
while read -r lib; do files+=(--file "$(readlink -f "$lib"):$lib"); done <"$WORK/libs"
say "guest payload $(du -sh "$G" | cut -f1) + $(wc -l <"$WORK/libs") libraries; booting the VM (mem ${FEEDGUARD_V2_MEM:-3G}, smp ${FEEDGUARD_V2_SMP:-2})"

set +e
in_net "$HERE/run_in_vm.sh" --net user --mem "${FEEDGUARD_V2_MEM:-3G}" --smp "${FEEDGUARD_V2_SMP:-2}" \
  --timeout "${FEEDGUARD_V2_TIMEOUT:-1500}" --cache-dir "$WORK/vm-cache" --log "$WORK/console.log" \
  "${files[@]}" "$HERE/kubelet_v2_guest.sh"
rc=$?
set -e
rm -rf "$WORK/vm-cache"
say "guest exited $rc (console: $WORK/console.log)"
exit "$rc"

#!/usr/bin/env bash
# cluster.sh — a real one-node Kubernetes cluster for the `node` test tier, started and stopped as
# a unit: etcd + kube-apiserver (tests/testbed/testbed.sh), kube-scheduler,
# kube-controller-manager, kubelet (cgroupfs driver, a cgroup root of its own), kube-proxy
# (iptables mode: ClusterIP Services), CoreDNS (cluster DNS on the node address), Debian's
# containerd with runc (default) and crun (RuntimeClass "crun", where crun can run here), Debian's
# CNI bridge plugin.
#
#   cluster.sh up DIR        starts everything, waits for the node to be Ready; writes DIR/env
#   cluster.sh down DIR      stops exactly what `up` started, unmounts, deletes netns and cgroups
#   cluster.sh env DIR       prints DIR/env (shell KEY=VALUE)
#   cluster.sh exec DIR CMD  runs CMD in the node's network and mount namespaces (ctr, cat ...)
#   cluster.sh kubectl DIR ARGS   kubectl against the cluster (also: DIR/bin/kubectl ARGS)
#   cluster.sh restart-kubelet DIR     stops kubelet (SIGTERM) and starts it again; waits Ready
#   cluster.sh restart-containerd DIR  the same for containerd (containers survive in their shims)
#
# Isolation: everything runs in a network namespace `up` creates (`fgnode-<id>`): no pod, Service
# or node address exists outside it. kubelet and containerd run in a private mount namespace (held
# by one `sleep` process) whose /var/lib/kubelet, /run/containerd, /var/log/{containers,pods},
# /var/lib/cni, /usr/libexec/kubernetes, /etc/cni and /run/netns are bind mounts of DIR/root/...,
# and whose kubelet-tuned sysctls (vm.overcommit_memory, kernel.panic, ...) are files in DIR, so
# kubelet never changes the host's. Host side effects: the empty directories above are created as
# mount points when missing (and stay, empty), and cgroups /<ctrl>/feedguard-node-<id> in every
# cgroup v1 hierarchy (+ the copy runc makes under the cgroup2 mount) and /<cpu>/feedguard-node-
# <id>-daemons (the cluster's own daemons, see make_daemon_cgroup), removed by `down`.
# Needs root, a cgroup v1 (or hybrid) host, the binaries of tests/testbed/build.sh, and Debian's
# containerd, runc, crun, containernetworking-plugins, iproute2, util-linux, iptables, gcc,
# busybox-static.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTBED="$(cd "$HERE/../testbed" && pwd)"
# shellcheck source=../testbed/versions.env
source "$TESTBED/versions.env"

READY_TIMEOUT_S="${FEEDGUARD_NODE_READY_TIMEOUT_S:-240}"
NODE_IP=10.200.0.1
POD_SUBNET=10.88.0.0/16
# The bridge's own address: the pods' default gateway, through which they reach the node address
# (API server, CoreDNS) and Service addresses. Nothing is routed or masqueraded beyond the netns.
POD_GATEWAY=10.88.0.1
CLUSTER_DOMAIN=cluster.local
# CoreDNS listens on the node address (as NodeLocal DNSCache listens on a node-local address);
# kubelet's clusterDNS points pods at it.
CLUSTER_DNS="$NODE_IP"
PAUSE_IMAGE="feedguard.local/pause:3.10"
# Host paths kubelet/containerd/CNI use that are not (all) configurable: bind-mounted from DIR/root.
# /var/lib/feedguard: the chart's default agent.stateDir (a hostPath DirectoryOrCreate).
NS_PATHS=(/var/lib/kubelet /run/containerd /var/log/containers /var/log/pods /var/lib/cni
  /usr/libexec/kubernetes /etc/cni /run/netns /var/lib/feedguard)
# Sysctls kubelet's container manager sets when they differ (setupKernelTunables): shadowed by
# files holding exactly kubelet's values, so kubelet reads "already set" and writes nothing.
KUBELET_SYSCTLS=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

log() { printf '[node %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- state: DIR/state holds KEY=VALUE lines, later lines win ------------------------------
state_set() { printf '%s=%q\n' "$1" "$2" >>"$DIR/state"; printf -v "$1" '%s' "$2"; }
state_load() {
  [[ -f "$DIR/state" ]] || return 1
  # shellcheck disable=SC1091
  source "$DIR/state"
}

# ---- processes: identified by pid + start time (field 22 of /proc/PID/stat) ----------------
proc_start() {
  local s
  s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  s="${s##*) }"
  # shellcheck disable=SC2086
  set -- $s
  echo "${20}"
}
# alive PID START — the process runs (a zombie waiting for its reaper counts as gone).
alive() {
  [[ "$1" =~ ^[0-9]+$ && -n "$2" && "$(proc_start "$1" 2>/dev/null)" == "$2" ]] || return 1
  local s
  s="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  s="${s##*) }"
  [[ "${s:0:1}" != Z ]]
}

# launch NAME CMD... — detached (own session, stdio to DIR/logs/NAME.log); records NAME_PID and
# NAME_START in the state file. With no job control the child is not a group leader, so setsid
# and nsenter exec in place and $! is the daemon's own pid.
launch() {
  local name="$1" pid start
  shift
  setsid "$@" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
  pid=$!
  start="$(proc_start "$pid")" || die "$name exited at once (log: $DIR/logs/$name.log)"
  state_set "${name//-/_}_PID" "$pid"
  state_set "${name//-/_}_START" "$start"
  join_daemon_cgroup "$pid"
}

# stop NAME — TERM, up to 20 s, then KILL; only the recorded process.
stop() {
  local var="${1//-/_}" pid start i
  pid="$(eval "echo \${${var}_PID:-}")"
  start="$(eval "echo \${${var}_START:-}")"
  alive "$pid" "$start" || return 0
  log "stopping $1 (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    alive "$pid" "$start" || return 0
    sleep 0.1
  done
  log "$1 (pid $pid) ignored SIGTERM for 20 s; SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    alive "$pid" "$start" || return 0
    sleep 0.1
  done
  log "WARNING: $1 (pid $pid) survived SIGKILL"
}

# pids_in_ns TYPE NSLINK — every process whose /proc/PID/ns/TYPE is NSLINK (e.g. "mnt:[4026...]").
pids_in_ns() {
  local p
  for p in /proc/[0-9]*; do
    [[ "$(readlink "$p/ns/$1" 2>/dev/null)" == "$2" ]] && echo "${p#/proc/}"
  done
  return 0
}

# kill_all_in_ns TYPE NSLINK EXCEPT_PID — SIGKILL every process of the namespace but one.
kill_all_in_ns() {
  local type="$1" ns="$2" except="${3:-}" i p left
  [[ -n "$ns" ]] || return 0
  for ((i = 0; i < 50; i++)); do
    left=0
    for p in $(pids_in_ns "$type" "$ns"); do
      [[ "$p" == "$except" || "$p" == "$$" ]] && continue
      ((i == 0)) && log "killing leftover $(tr -d '\n' <"/proc/$p/comm" 2>/dev/null) (pid $p) in our $type namespace"
      kill -KILL "$p" 2>/dev/null || true
      left=1
    done
    ((left)) || return 0
    sleep 0.1
  done
  log "WARNING: processes remain in $type namespace $ns"
}

# ---- namespaces ----------------------------------------------------------------------------
in_net() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
in_node() { nsenter -t "$holder_PID" -m -n -- "$@"; }

# ---- cgroups -------------------------------------------------------------------------------
# Mount points of the cgroup v1 hierarchies and of the cgroup2 mount (hybrid: .../unified).
cgroup_v1_mounts() { awk '{ split($0, a, " - "); split(a[2], b, " "); if (b[1] == "cgroup") print $5 }' /proc/self/mountinfo; }
cgroup_v2_mounts() { awk '{ split($0, a, " - "); split(a[2], b, " "); if (b[1] == "cgroup2") print $5 }' /proc/self/mountinfo; }

make_cgroup_root() {
  local m d
  for m in $(cgroup_v1_mounts); do
    d="$m/$CGROUP_NAME"
    mkdir -p "$d"
    if [[ -f "$m/cpuset.cpus" ]]; then
      cat "$m/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$m/cpuset.mems" >"$d/cpuset.mems"
    fi
  done
}

# The cluster's own daemons (etcd, kube-apiserver, scheduler, controller-manager, kubelet,
# containerd and its shims, kube-proxy, CoreDNS) share one cgroup of their own in the cpu
# hierarchy, /<cpu>/feedguard-node-<id>-daemons, beside the node's cgroup root and weighing as
# much (cpu.shares equal to the root's; the demo raises both together). On a real node the
# control plane runs on other machines and kubelet/containerd sit in system.slice beside
# kubepods.slice at comparable weight. Left in the host's root cgroup, each daemon would be a
# 1024-weight autogroup (setsid) against a node root the demo weighs at 8192: with 8 spinning
# neighbour pods and the trainer on 2 cores, kube-apiserver then missed TLS handshakes (10 s) and
# the demo failed in CI (2026-11-29, twice in one run).
daemon_cgroup_dir() {
  local m
  for m in $(cgroup_v1_mounts); do
    [[ -f "$m/cpu.shares" ]] && { echo "$m/$CGROUP_NAME-daemons"; return 0; }
  done
  return 1
}
make_daemon_cgroup() {
  local d
  d="$(daemon_cgroup_dir)" || die "no cgroup v1 cpu hierarchy mounted"
  mkdir -p "$d"
  cat "$(dirname "$d")/$CGROUP_NAME/cpu.shares" >"$d/cpu.shares"
  state_set DAEMON_CGROUP "$d"
}
# join_daemon_cgroup PID — moves one process we started (every thread of it) into that cgroup.
join_daemon_cgroup() {
  [[ -n "${DAEMON_CGROUP:-}" && -d "$DAEMON_CGROUP" ]] || return 0
  echo "$1" >"$DAEMON_CGROUP/cgroup.procs" 2>/dev/null || log "WARNING: could not move pid $1 into $DAEMON_CGROUP"
}
# remove_daemon_cgroup — once every daemon is stopped: kills what is left in it (only processes
# this script started, and their children, e.g. containerd shims), then removes it.
remove_daemon_cgroup() {
  [[ -n "${DAEMON_CGROUP:-}" && -d "$DAEMON_CGROUP" ]] || return 0
  local try pids
  for ((try = 0; try < 100; try++)); do
    pids="$(cat "$DAEMON_CGROUP/cgroup.procs" 2>/dev/null)"
    if [[ -n "$pids" ]]; then
      ((try % 20 == 0)) && log "killing $(wc -w <<<"$pids") process(es) left in $DAEMON_CGROUP"
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    else
      rmdir "$DAEMON_CGROUP" 2>/dev/null && return 0
    fi
    sleep 0.2
  done
  log "WARNING: could not remove $DAEMON_CGROUP"
  return 1
}

# remove_cgroup_root — kills what is left in our cgroups (only kubelet's pods and runc's
# containers live there), then removes the trees depth-first in every hierarchy.
remove_cgroup_root() {
  [[ -n "${CGROUP_NAME:-}" ]] || return 0
  local m d try pids left
  for ((try = 0; try < 100; try++)); do
    left=0
    for m in $(cgroup_v1_mounts) $(cgroup_v2_mounts); do
      d="$m/$CGROUP_NAME"
      [[ -d "$d" ]] || continue
      left=1
      pids="$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)"
      if [[ -n "$pids" ]]; then
        ((try % 20 == 0)) && log "killing $(wc -w <<<"$pids") process(es) left in $d"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        continue
      fi
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    ((left)) || return 0
    sleep 0.2
  done
  log "WARNING: could not remove every $CGROUP_NAME cgroup"
  return 1
}

# ---- certificates --------------------------------------------------------------------------
# sign CA_DIR CA_NAME OUT SUBJECT EXTENSIONS
sign() {
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -new "${ec[@]}" -keyout "$3.key" -out "$3.csr" -subj "$4" 2>/dev/null
  printf '%s\n' "$5" >"$3.ext"
  openssl x509 -req -in "$3.csr" -CA "$1/$2.crt" -CAkey "$1/$2.key" -CAcreateserial -days 7 \
    -extfile "$3.ext" -out "$3.crt" 2>/dev/null
  rm -f "$3.csr" "$3.ext"
  chmod 600 "$3.key"
}

client_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

# Node CA: kubelet trusts it for client certificates; the API server presents a certificate
# from it when it calls kubelet (logs, exec, port-forward).
gen_node_pki() {
  local pki="$DIR/pki"
  mkdir -p "$pki"
  chmod 700 "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/node-ca.key" \
    -out "$pki/node-ca.crt" -days 7 -subj "/CN=feedguard-node-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  sign "$pki" node-ca "$pki/apiserver-kubelet-client" "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client_ext"
}

# kubeconfig OUT SERVER CA CERT KEY
kubeconfig() {
  cat >"$1" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: feedguard-node
  cluster:
    server: $2
    certificate-authority-data: $(base64 -w0 <"$3")
users:
- name: user
  user:
    client-certificate-data: $(base64 -w0 <"$4")
    client-key-data: $(base64 -w0 <"$5")
contexts:
- name: feedguard-node
  context: {cluster: feedguard-node, user: user}
current-context: feedguard-node
KCFG
  chmod 600 "$1"
}

# ---- configuration files -------------------------------------------------------------------
# crun_unusable_reason — empty when crun can run containers here. crun refuses a hybrid host whose
# cgroup2 mount has controllers (here hugetlb, bound to no v1 hierarchy): "cgroups in hybrid mode
# not supported, drop all controllers from cgroupv2".
crun_unusable_reason() {
  command -v crun >/dev/null || { echo "crun is not installed"; return 0; }
  local m
  for m in $(cgroup_v2_mounts); do
    if [[ "$m" != /sys/fs/cgroup && -n "$(cat "$m/cgroup.controllers" 2>/dev/null)" ]]; then
      echo "hybrid cgroup host with controllers on the cgroup2 mount $m ($(cat "$m/cgroup.controllers"))"
      return 0
    fi
  done
}

write_containerd_config() {
  local runc crun=""
  runc="$(command -v runc)"
  [[ -n "$(crun_unusable_reason)" ]] || crun="$(command -v crun)"
  mkdir -p "$DIR/containerd/root" "$DIR/containerd/opt"
  {
    cat <<TOML
version = 2
root = "$DIR/containerd/root"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$DIR/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # Root here lacks CAP_SYS_RESOURCE: runc cannot set an oom_score_adj below containerd's own,
    # and every sandbox fails ("can't get final child's PID from pipe: EOF") without this.
    restrict_oom_score_adj = true
    disable_apparmor = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "$runc"
          SystemdCgroup = false
TOML
    if [[ -n "$crun" ]]; then
      cat <<TOML
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
          BinaryName = "$crun"
          SystemdCgroup = false
TOML
    fi
    cat <<TOML
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1
TOML
  } >"$DIR/containerd/config.toml"
}

# A bridge whose address is the pods' gateway inside the namespace (pods reach the node address
# and Service addresses through it), no masquerading, no iptables rules of its own (kube-proxy
# writes the Service rules, in the namespace): nothing routes out of the namespace.
write_cni_config() {
  mkdir -p "$DIR/root/etc/cni/net.d"
  cat >"$DIR/root/etc/cni/net.d/10-feedguard.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "feedguard-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "fgbr0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "/var/lib/cni/networks"
      }
    }
  ]
}
JSON
}

write_kubelet_config() {
  mkdir -p "$DIR/kubelet"
  cat >"$DIR/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_NAME
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $DIR/pki/node-ca.crt}
authorization: {mode: AlwaysAllow}
failSwapOn: false
# kubelet >= 1.35 refuses cgroup v1 unless told otherwise (failCgroupV1 defaults to true); this
# host is cgroup v1, the node shape fleets are leaving (tests/vm/node_shape.sh runs v2 + systemd).
failCgroupV1: false
podLogsDir: /var/log/pods
volumePluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 50
cpuManagerPolicy: ${FEEDGUARD_NODE_CPU_MANAGER_POLICY:-none}
clusterDNS: [$CLUSTER_DNS]
clusterDomain: $CLUSTER_DOMAIN
YAML
  if [[ -n "${FEEDGUARD_NODE_KUBELET_CONFIG_EXTRA:-}" ]]; then
    printf '%s\n' "$FEEDGUARD_NODE_KUBELET_CONFIG_EXTRA" >>"$DIR/kubelet/config.yaml"
  fi
}

# kube-proxy in iptables mode. The conntrack settings 0 mean "leave as is": nf_conntrack_max is
# not namespaced (kube-proxy would raise the host's), the timeouts would be the netns's own but
# need not change. localhostNodePorts off: no route_localnet. NodePorts only on the node address.
write_kube_proxy_config() {
  mkdir -p "$DIR/kube-proxy"
  cat >"$DIR/kube-proxy/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $DIR/apiserver/kubeconfig}
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_SUBNET
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$NODE_IP/32]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, masqueradeAll: false, syncPeriod: 30s, minSyncPeriod: 0s}
YAML
}

# CoreDNS: the cluster.local zone from the API server (admin kubeconfig), on port 53 of every
# address of the namespace (pods use the node address); no forwarding (nothing outside exists).
write_corefile() {
  mkdir -p "$DIR/coredns"
  cat >"$DIR/coredns/Corefile" <<COREFILE
.:53 {
    errors
    health 127.0.0.1:10260
    ready 127.0.0.1:10261
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $DIR/kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    loadbalance
    cache 5
}
COREFILE
}

# ---- waiting -------------------------------------------------------------------------------
kc() { in_net kubectl --kubeconfig "$DIR/kubeconfig" --request-timeout=10s "$@"; }

# wait_for WHAT TIMEOUT_S CMD... — polls CMD every 0.5 s; on timeout fails naming WHAT.
wait_for() {
  local what="$1" timeout="$2" t0=$SECONDS
  shift 2
  until "$@"; do
    ((SECONDS - t0 < timeout)) || die "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
  log "$what after $((SECONDS - t0)) s"
}

daemon_alive() {
  local var="${1//-/_}" pid start
  pid="$(eval "echo \${${var}_PID:-}")"
  start="$(eval "echo \${${var}_START:-}")"
  alive "$pid" "$start"
}

# check_daemons — fails the wait at once (die) when one of our daemons died.
check_daemons() {
  local d
  for d in containerd kubelet kube-scheduler kube-controller-manager kube-proxy coredns; do
    if [[ -n "$(eval "echo \${${d//-/_}_PID:-}")" ]] && ! daemon_alive "$d"; then
      tail -n 30 "$DIR/logs/$d.log" >&2 || true
      die "$d exited (log: $DIR/logs/$d.log)"
    fi
  done
}
node_ready() {
  check_daemons
  [[ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]
}
node_untainted() {
  check_daemons
  local taints
  taints="$(kc get node "$NODE_NAME" -o 'jsonpath={.spec.taints[*].key}' 2>/dev/null)" || return 1
  [[ "$taints" != *node.kubernetes.io/not-ready* ]]
}
default_sa() {
  check_daemons
  kc -n default get serviceaccount default >/dev/null 2>&1
}
kube_proxy_synced() {
  check_daemons
  in_net curl -fsS --max-time 2 http://127.0.0.1:10256/healthz >/dev/null 2>&1 &&
    in_net iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- '-A KUBE-SERVICES .*default/kubernetes:https'
}
coredns_ready() {
  check_daemons
  in_net curl -fsS --max-time 2 http://127.0.0.1:10261/ready >/dev/null 2>&1
}
containerd_up() {
  check_daemons
  [[ -S "$DIR/root/run/containerd/containerd.sock" ]] &&
    in_node ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1
}

start_containerd() {
  launch containerd nsenter -t "$holder_PID" -m -n -- containerd --config "$DIR/containerd/config.toml" --log-level info
}
start_kubelet() {
  state_set KUBELET_V "${FEEDGUARD_NODE_KUBELET_V:-${KUBELET_V:-2}}"
  launch kubelet nsenter -t "$holder_PID" -m -n -- "$KUBELET" --config="$DIR/kubelet/config.yaml" \
    --kubeconfig="$DIR/kubelet/kubeconfig" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
    --root-dir=/var/lib/kubelet --v="$KUBELET_V"
}

# ---- restart: one daemon stopped (SIGTERM) and started again as `up` started it ------------
# kubelet: pods and their cgroups stay (kubelet adopts them); the node must be Ready again.
# containerd: containers keep running under their shims; the CRI socket must answer again and
# kubelet's PLEG must see the runtime healthy (node Ready).
cmd_restart() {
  state_load || die "no node in $DIR"
  local what="$1" t0=$SECONDS
  daemon_alive "$what" || die "$what is not running"
  stop "$what"
  case "$what" in
    kubelet) start_kubelet ;;
    containerd) start_containerd; wait_for "containerd ready" 60 containerd_up ;;
  esac
  wait_for "node $NODE_NAME Ready after the $what restart" "$READY_TIMEOUT_S" node_ready
  log "$what restarted in $((SECONDS - t0)) s (pid $(eval "echo \${${what}_PID}"))"
}

# ---- up ------------------------------------------------------------------------------------
cmd_up() {
  ((EUID == 0)) || die "must run as root (network/mount namespaces, cgroups, containerd)"
  local b
  for b in "$KUBE_APISERVER" "$ETCD" "$KUBELET" "$KUBE_SCHEDULER" "$KUBE_CONTROLLER_MANAGER" "$KUBE_PROXY" "$COREDNS"; do
    [[ -x "$b" ]] || die "$b is not built. Run: $TESTBED/build.sh   (Go modules, cached under $CACHE)"
  done
  for b in containerd containerd-shim-runc-v2 ctr runc ip nsenter unshare openssl kubectl gcc python3 curl iptables iptables-restore; do
    command -v "$b" >/dev/null || die "$b is not installed (tests/install_deps.sh installs it)"
  done
  CNI_BIN_DIR="${FEEDGUARD_CNI_BIN_DIR:-/usr/lib/cni}"
  [[ -x "$CNI_BIN_DIR/bridge" && -x "$CNI_BIN_DIR/host-local" && -x "$CNI_BIN_DIR/loopback" ]] ||
    die "CNI plugins not found in $CNI_BIN_DIR (Debian package containernetworking-plugins)"
  [[ -n "$(cgroup_v1_mounts)" ]] || die "no cgroup v1 hierarchy mounted: this script supports cgroup v1/hybrid hosts only (so far)"

  if [[ -f "$DIR/state" ]]; then
    log "$DIR holds an earlier node; tearing it down first"
    cmd_down
  fi
  mkdir -p "$DIR/logs"
  : >"$DIR/state"
  local t0=$SECONDS id
  id="$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
  state_set NODE_ID "$id"
  state_set NODE_NAME "feedguard-node-$id"
  state_set NETNS "fgnode-$id"
  state_set CGROUP_NAME "feedguard-node-$id"
  state_set CNI_BIN_DIR "$CNI_BIN_DIR"

  trap 'rc=$?; trap - EXIT INT TERM; if ((rc)); then log "up failed (rc $rc); tearing down"; cmd_down || true; fi; exit $rc' EXIT
  trap 'log "interrupted"; exit 130' INT TERM

  # Network namespace: loopback plus the node address (also on lo: this kernel has no dummy links).
  ip netns add "$NETNS"
  state_set NETNS_CREATED 1
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" addr add "$NODE_IP/32" dev lo
  # Namespaced sysctls: pods reach Service endpoints on the bridge through the namespace's routing.
  in_net sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'

  # cgroup root in every v1 hierarchy (kubelet refuses a --cgroup-root that does not exist), and
  # the daemons' cgroup beside it, before the first daemon starts.
  log "cgroup root /$CGROUP_NAME in $(cgroup_v1_mounts | wc -l) v1 hierarchies; daemons in /$CGROUP_NAME-daemons (cpu)"
  make_cgroup_root
  make_daemon_cgroup

  # etcd + kube-apiserver inside the namespace (testbed.sh with its node opt-ins: ServiceAccount
  # admission kept, bound to every address of the namespace, advertising the node address, which
  # becomes the endpoint of the `kubernetes` Service that pods dial).
  gen_node_pki
  log "starting etcd + kube-apiserver (tests/testbed/testbed.sh) in netns $NETNS"
  state_set APISERVER_DIR "$DIR/apiserver"
  FEEDGUARD_TESTBED_SA_ADMISSION=1 FEEDGUARD_TESTBED_ADVERTISE_ADDRESS="$NODE_IP" \
  FEEDGUARD_TESTBED_CGROUP="$DAEMON_CGROUP" \
  FEEDGUARD_APISERVER_FLAGS="--kubelet-client-certificate=$DIR/pki/apiserver-kubelet-client.crt \
--kubelet-client-key=$DIR/pki/apiserver-kubelet-client.key --kubelet-preferred-address-types=InternalIP \
${FEEDGUARD_APISERVER_FLAGS:-}" \
    in_net "$TESTBED/testbed.sh" up "$DIR/apiserver"
  # shellcheck disable=SC1091
  APISERVER_URL="$(source "$DIR/apiserver/env" && echo "$APISERVER_URL")"
  cp "$DIR/apiserver/kubeconfig" "$DIR/kubeconfig"
  sign "$DIR/apiserver/pki" ca "$DIR/pki/kubelet-client" "/O=system:masters/O=system:nodes/CN=system:node:$NODE_NAME" "$client_ext"
  mkdir -p "$DIR/kubelet"
  kubeconfig "$DIR/kubelet/kubeconfig" "$APISERVER_URL" "$DIR/apiserver/pki/ca.crt" \
    "$DIR/pki/kubelet-client.crt" "$DIR/pki/kubelet-client.key"

  # Private mount namespace, held by a sleep process that lives in the network namespace too.
  local p
  for p in "${NS_PATHS[@]}"; do
    mkdir -p "$DIR/root$p"
    [[ -d "$p" ]] || { mkdir -p "$p" && log "created empty mount point $p on the host"; }
  done
  mkdir -p "$DIR/sysctl"
  launch holder nsenter --net="/run/netns/$NETNS" -- unshare --mount --propagation private -- sleep infinity
  local i
  for ((i = 0; i < 50; i++)); do
    [[ "$(readlink "/proc/$holder_PID/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]] && break
    sleep 0.05
  done
  state_set MNTNS_ID "$(readlink "/proc/$holder_PID/ns/mnt")"
  [[ "$MNTNS_ID" != "$(readlink /proc/self/ns/mnt)" ]] || die "the mount namespace holder did not unshare"
  local script="set -e; mount --make-rprivate /"
  for p in "${NS_PATHS[@]}"; do script+="; mount --bind '$DIR/root$p' '$p'"; done
  local kv
  for kv in "${KUBELET_SYSCTLS[@]}"; do
    mkdir -p "$(dirname "$DIR/sysctl/${kv%%=*}")"
    printf '%s\n' "${kv#*=}" >"$DIR/sysctl/${kv%%=*}"
    script+="; mount --bind '$DIR/sysctl/${kv%%=*}' '/proc/sys/${kv%%=*}'"
  done
  in_node sh -c "$script" || die "setting up the node's mount namespace failed"

  # containerd + images.
  write_cni_config
  write_containerd_config
  log "starting containerd $(containerd --version | awk '{print $3}') (runc $(runc --version | awk 'NR==1{print $3}')$(command -v crun >/dev/null && crun --version | awk 'NR==1{print ", crun " $3}'))"
  start_containerd
  wait_for "containerd ready" 60 containerd_up
  mkdir -p "$DIR/images"
  "$HERE/images.sh" base "$DIR/images" >"$DIR/images/list" 2>>"$DIR/logs/images.log" ||
    die "building the pause/busybox images failed (log: $DIR/logs/images.log)"
  local file name
  while read -r file name; do
    in_node ctr --address /run/containerd/containerd.sock -n k8s.io images import "$file" >>"$DIR/logs/images.log" 2>&1 ||
      die "ctr images import $file failed (log: $DIR/logs/images.log)"
    log "imported $name"
  done <"$DIR/images/list"

  # kubelet, kube-scheduler, kube-controller-manager.
  write_kubelet_config
  log "starting kubelet $("$KUBELET" --version | awk '{print $2}') (node $NODE_NAME, cgroup root /$CGROUP_NAME)"
  start_kubelet
  local admin="$DIR/apiserver/kubeconfig"
  launch kube-scheduler nsenter --net="/run/netns/$NETNS" -- "$KUBE_SCHEDULER" --kubeconfig="$admin" \
    --authentication-kubeconfig="$admin" --authorization-kubeconfig="$admin" \
    --leader-elect=false --secure-port=0 --v=1
  mkdir -p "$DIR/kcm"
  launch kube-controller-manager nsenter --net="/run/netns/$NETNS" -- "$KUBE_CONTROLLER_MANAGER" \
    --kubeconfig="$admin" --authentication-kubeconfig="$admin" --authorization-kubeconfig="$admin" \
    --leader-elect=false --secure-port=0 --cert-dir="$DIR/kcm" --flex-volume-plugin-dir="$DIR/kcm/volume-plugins" \
    --service-account-private-key-file="$DIR/apiserver/pki/sa.key" --root-ca-file="$DIR/apiserver/pki/ca.crt" \
    --cluster-signing-cert-file="$DIR/apiserver/pki/ca.crt" --cluster-signing-key-file="$DIR/apiserver/pki/ca.key" \
    --use-service-account-credentials=false --allocate-node-cidrs=false --v=1
  write_kube_proxy_config
  log "starting kube-proxy $("$KUBE_PROXY" --version | awk '{print $2}') (iptables mode, $(iptables --version | awk '{print $2, $3}'), in netns $NETNS)"
  launch kube-proxy nsenter -t "$holder_PID" -m -n -- "$KUBE_PROXY" --config="$DIR/kube-proxy/config.yaml" --v=1
  write_corefile
  log "starting CoreDNS $("$COREDNS" -version | awk 'NR==1{print $1}') on $CLUSTER_DNS:53 (zone $CLUSTER_DOMAIN)"
  launch coredns nsenter --net="/run/netns/$NETNS" -- "$COREDNS" -conf "$DIR/coredns/Corefile"

  wait_for "node $NODE_NAME Ready" "$READY_TIMEOUT_S" node_ready
  wait_for "not-ready taint gone" 120 node_untainted
  wait_for "default ServiceAccount" 60 default_sa
  wait_for "kube-proxy synced (kubernetes Service rules in the netns)" 60 kube_proxy_synced
  wait_for "CoreDNS ready" 60 coredns_ready
  local why
  why="$(crun_unusable_reason)"
  if [[ -z "$why" ]]; then
    printf 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: crun}\nhandler: crun\n' |
      kc apply -f - >/dev/null
    log "RuntimeClass crun -> containerd handler crun ($(command -v crun))"
  else
    log "crun not offered as a runtime handler: $why"
  fi
  state_set CRUN_UNUSABLE "$why"

  mkdir -p "$DIR/bin"
  printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s -- kubectl --kubeconfig %s "$@"\n' "$NETNS" "$DIR/kubeconfig" >"$DIR/bin/kubectl"
  printf '#!/bin/sh\nexec nsenter -t %s -m -n -- ctr --address /run/containerd/containerd.sock -n k8s.io "$@"\n' "$holder_PID" >"$DIR/bin/ctr"
  printf '#!/bin/sh\nexec nsenter -t %s -m -n -- "$@"\n' "$holder_PID" >"$DIR/bin/node-exec"
  printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s -- %s --kubeconfig %s "$@"\n' "$NETNS" "$HELM" "$DIR/kubeconfig" >"$DIR/bin/helm"
  chmod +x "$DIR/bin/"*
  write_env
  trap - EXIT INT TERM
  log "versions: $(grep -E '^(KUBELET|CONTAINERD|RUNC|CRUN|KERNEL)_VERSION=' "$DIR/env" | tr '\n' ' ')"
  log "node up in $((SECONDS - t0)) s: KUBECTL=$DIR/bin/kubectl  (env: $DIR/env)"
}

write_env() {
  local info
  info="$(kc get node "$NODE_NAME" -o 'jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}')"
  cat >"$DIR/env.tmp" <<ENV
# Written by tests/node/cluster.sh; shell-sourceable KEY=VALUE.
NODE_DIR=$DIR
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
NETNS=$NETNS
CGROUP_ROOT=/$CGROUP_NAME
DAEMON_CGROUP=$DAEMON_CGROUP
KUBECONFIG=$DIR/kubeconfig
KUBECTL=$DIR/bin/kubectl
CTR=$DIR/bin/ctr
HELM=$DIR/bin/helm
NODE_EXEC=$DIR/bin/node-exec
APISERVER_URL=$APISERVER_URL
KUBELET_ROOT=$DIR/root/var/lib/kubelet
PODRESOURCES_SOCKET=$DIR/root/var/lib/kubelet/pod-resources/kubelet.sock
CONTAINERD_SOCKET=$DIR/root/run/containerd/containerd.sock
PAUSE_IMAGE=$PAUSE_IMAGE
BUSYBOX_IMAGE=feedguard.local/busybox:1
K8S_VERSION=$FEEDGUARD_K8S_VERSION
CLUSTER_DNS=$CLUSTER_DNS
CLUSTER_DOMAIN=$CLUSTER_DOMAIN
POD_GATEWAY=$POD_GATEWAY
KUBE_PROXY_VERSION=$("$KUBE_PROXY" --version | awk '{print $2}')
COREDNS_VERSION=$("$COREDNS" -version | awk 'NR==1{print $1}' | sed 's/^CoreDNS-//')
IPTABLES_VERSION="$(iptables --version | awk '{print $2, $3}')"
KUBELET_VERSION=${info%% *}
CONTAINER_RUNTIME_VERSION=${info#* }
CONTAINERD_VERSION=$(containerd --version | awk '{print $3}')
RUNC_VERSION=$(runc --version | awk 'NR==1{print $3}')
CRUN_VERSION=$(command -v crun >/dev/null && crun --version | awk 'NR==1{print $3}')
CRUN_RUNTIMECLASS=$([[ -z "$CRUN_UNUSABLE" ]] && echo crun)
CRUN_UNUSABLE="$CRUN_UNUSABLE"
KERNEL_VERSION=$(uname -r)
ENV
  mv -f "$DIR/env.tmp" "$DIR/env"
}

# ---- down ----------------------------------------------------------------------------------
cmd_down() {
  if ! state_load; then
    log "$DIR/state not found: nothing recorded, nothing to stop"
    return 0
  fi
  trap '' INT TERM
  local t0=$SECONDS rc=0
  stop kubelet
  stop kube-proxy
  stop coredns
  stop kube-controller-manager
  stop kube-scheduler
  # Containers: kill every task containerd knows, then whatever is left in our cgroups.
  if daemon_alive containerd; then
    local c
    for c in $(timeout 20 nsenter -t "$holder_PID" -m -n -- ctr --address /run/containerd/containerd.sock -n k8s.io tasks ls -q 2>/dev/null); do
      timeout 20 nsenter -t "$holder_PID" -m -n -- ctr --address /run/containerd/containerd.sock -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
    done
  fi
  remove_cgroup_root || rc=1
  stop containerd
  # containerd-shim processes (and anything else) still in the node's mount namespace, then the holder.
  kill_all_in_ns mnt "${MNTNS_ID:-}" "${holder_PID:-}"
  stop holder
  if [[ -d "${APISERVER_DIR:-}" ]]; then
    FEEDGUARD_TESTBED_KEEP_LOGS="${FEEDGUARD_NODE_KEEP_LOGS:-0}" "$TESTBED/testbed.sh" down "$APISERVER_DIR" || rc=1
  fi
  if [[ -n "${NETNS:-}" && -e "/run/netns/$NETNS" ]]; then
    kill_all_in_ns net "$(in_net readlink /proc/self/ns/net 2>/dev/null || true)"
    ip netns del "$NETNS" || rc=1
  fi
  remove_cgroup_root || rc=1
  remove_daemon_cgroup || rc=1
  # Nothing of ours may still be mounted before files are removed.
  if grep -qF " $DIR/" /proc/self/mountinfo; then
    log "ERROR: mounts under $DIR remain on the host:"
    grep -F " $DIR/" /proc/self/mountinfo >&2
    return 1
  fi
  if [[ "${FEEDGUARD_NODE_KEEP_LOGS:-0}" == 1 ]]; then
    rm -rf --one-file-system "${DIR:?}"/{root,containerd,images,kubelet,kube-proxy,coredns,pki,sysctl,kcm,bin,env,env.tmp,state,kubeconfig}
  else
    rm -rf --one-file-system "${DIR:?}"/{root,containerd,images,kubelet,kube-proxy,coredns,pki,sysctl,kcm,bin,env,env.tmp,state,kubeconfig,logs,apiserver}
    rmdir "$DIR" 2>/dev/null || true
  fi
  log "node down in $((SECONDS - t0)) s"
  return "$rc"
}

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[[ $# -ge 2 ]] || usage
cmd="$1"
if [[ "$cmd" == up ]]; then mkdir -p "$2"; fi
if [[ ! -d "$2" ]]; then
  [[ "$cmd" == down ]] && { log "$2 does not exist; nothing to do"; exit 0; }
  die "$2 does not exist"
fi
DIR="$(cd "$2" && pwd)"
shift 2
case "$cmd" in
  up) cmd_up ;;
  down) cmd_down ;;
  env) cat "$DIR/env" ;;
  exec) state_load || die "no node in $DIR"; in_node "$@" ;;
  kubectl) state_load || die "no node in $DIR"; kc "$@" ;;
  restart-kubelet) cmd_restart kubelet ;;
  restart-containerd) cmd_restart containerd ;;
  *) usage ;;
esac

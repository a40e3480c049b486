#!/bin/bash
# node_up.sh — sourced by run.sh: makes the VM a Kubernetes node as production nodes are made:
# containerd (SystemdCgroup = true) and kubelet (cgroupDriver: systemd) as systemd services,
# kube-proxy (iptables), the CNI bridge; then installs the chart with helm.

node_network() {
  ip link set lo up
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 ||
    fail "network setup"
  printf 'nameserver 10.0.2.2\n' >/run/fg-resolv.conf
}

write_configs() {
  mkdir -p /etc/cni/net.d /etc/containerd /var/lib/kubelet /etc/kubernetes
  cat >/etc/cni/net.d/10-fg.conflist <<'JSON'
{"cniVersion": "0.4.0", "name": "fg-node", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  # One containerd config for 1.6 and 2.x (2.x migrates version 2 on load).
  cat >/etc/containerd/config.toml <<TOML
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "feedguard.local/pause:3.10"
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$RUNTIME_BIN/runc"
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
  cat >/etc/kubernetes/kubelet.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
failCgroupV1: false
resolvConf: /run/fg-resolv.conf
clusterDNS: [10.0.2.2]
clusterDomain: cluster.local
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
runtimeRequestTimeout: 10m
maxPods: 30
cpuManagerPolicy: none
YAML
  cat >/etc/kubernetes/kube-proxy.yaml <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: /fg/etc/admin.kubeconfig}
hostnameOverride: $NODE
clusterCIDR: 10.88.0.0/16
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, syncPeriod: 30s, minSyncPeriod: 0s}
YAML
  # Units as distributions ship them (containerd: Delegate=yes, KillMode=process).
  cat >/etc/systemd/system/containerd.service <<UNIT
[Unit]
Description=containerd
After=network.target
[Service]
# containerd finds its shim on PATH: the one of the runtime under test, not the image's Debian one.
Environment=PATH=$RUNTIME_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStartPre=-/sbin/modprobe overlay
ExecStart=$RUNTIME_BIN/containerd --config /etc/containerd/config.toml
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=1
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999
UNIT
  cat >/etc/systemd/system/kubelet.service <<UNIT
[Unit]
Description=kubelet
After=containerd.service
Wants=containerd.service
[Service]
ExecStart=/fg/bin/kubelet --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/fg/etc/kubelet.kubeconfig --hostname-override=$NODE --node-ip=10.0.2.15 --v=2
Restart=always
RestartSec=1
UNIT
  cat >/etc/systemd/system/kube-proxy.service <<UNIT
[Unit]
Description=kube-proxy
After=network.target
[Service]
ExecStart=/fg/bin/kube-proxy --config=/etc/kubernetes/kube-proxy.yaml --v=1
Restart=always
RestartSec=1
UNIT
}

node_ready() { [[ "$(K get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; }

node_up() {
  say "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/{print int($2/1024)}' /proc/meminfo) MiB, $(stat -fc %T /sys/fs/cgroup) at /sys/fs/cgroup, $(systemctl --version | head -1)"
  node_network
  write_configs
  systemctl daemon-reload
  systemctl start containerd || fail "containerd did not start: $(journalctl -u containerd --no-pager | tail -n 20)"
  local f name
  while read -r f name; do
    ctr -n k8s.io images import "/fg/images/$f" >/dev/null || fail "import $name"
  done </fg/images/list
  say "containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'), images imported"
  systemctl start kubelet kube-proxy || fail "kubelet/kube-proxy did not start"
  wait_until 300 "node $NODE Ready" node_ready || fail "node never Ready: $(journalctl -u kubelet --no-pager | grep -E '^.*E[0-9]{4}' | tail -n 20)"
  observe node "$(K get node "$NODE" -o json | jq -c '{kubelet: .status.nodeInfo.kubeletVersion, runtime: .status.nodeInfo.containerRuntimeVersion, kernel: .status.nodeInfo.kernelVersion}' | sed "s/}\$/, \"runc\": \"$(runc --version | awk 'NR==1{print $3}')\", \"systemd\": \"$(systemctl --version | awk 'NR==1{print $2}')\"}/")"
}

helm_install() {
  local t=$SECONDS
  helm install "$RELEASE" /fg/chart --namespace "$RNS" --create-namespace \
    --set controller.image.pullPolicy=Never --set agent.image.pullPolicy=Never \
    --set controller.replicas=1 --set agent.cgroup.driver=systemd --set "agent.cgroup.version=$CGROUP" \
    "$@" --wait --timeout 600s >"$OUT/helm-install.log" 2>&1 || {
    cat "$OUT/helm-install.log"
    K get pods -A -o wide
    K -n "$RNS" describe pods | tail -n 60
    fail "helm install failed"
  }
  say "helm install: controller and agent ready in $((SECONDS - t)) s"
}

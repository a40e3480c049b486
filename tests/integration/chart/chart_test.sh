#!/usr/bin/env bash
# chart_test.sh — the Helm chart (charts/feedguard) and the example FencePolicies (examples/)
# against a real kube-apiserver with the real helm and kubectl:
#   helm lint --strict (defaults and every optional feature on), the rendered manifests
#   accepted by the server (kubectl apply --dry-run=server), the shape of what is rendered
#   (Deployment, DaemonSet, RBAC, TLS), `helm install` creating every object, RBAC checked by
#   impersonating the controller's and the agent's ServiceAccounts, `kubectl explain`, every
#   example validated by the CRD schema, `helm uninstall` removing every object.
# No kubelet runs in the test bed: the pods stay Pending, which is all this test needs.
#
# Usage: chart_test.sh TESTBED_DIR   (a dir set up by tests/testbed/testbed.sh up; CTest passes
#        ${CMAKE_BINARY_DIR}/testbed through the `apiserver` fixture)
# Environment: FEEDGUARD_HELM (helm binary; default: the test bed's env HELM, i.e. the build
#        pinned in tests/testbed/versions.env), KUBECTL.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CHART="$ROOT/charts/feedguard"
TESTBED_DIR="${1:?usage: chart_test.sh TESTBED_DIR}"

# shellcheck source=../testbed_client.sh
source "$HERE/../testbed_client.sh"
testbed_client_init "$TESTBED_DIR"
command -v openssl >/dev/null || fail "openssl is not installed"
HELM_BIN="${FEEDGUARD_HELM:-$HELM}"  # else the test bed's (the pinned build in the cache)
[[ -x "$HELM_BIN" ]] || fail "helm is not built. Run: tests/testbed/build.sh helm (or set FEEDGUARD_HELM)"

WORK="$(mktemp -d)"
SUFFIX="$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
NS="fg-chart-$SUFFIX"          # own namespace (a deleted one stays Terminating: no controllers)
REL="fgchart-$SUFFIX"          # own release: cluster-scoped names carry it, so runs never collide
FULL="$REL-feedguard"
CTRL_SA="system:serviceaccount:$NS:$FULL-controller"
AGENT_SA="system:serviceaccount:$NS:$FULL-agent"
INSTALLED=0
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"

kc() { "$KUBECTL" --cache-dir "$WORK/kcache" --request-timeout=30s "$@"; }
helm() { "$HELM_BIN" --kubeconfig "$KUBECONFIG" "$@"; }

PASSED=0 FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL - $*"; }
# check DESCRIPTION COMMAND... — passes when the command succeeds; shows its output when not.
check() {
  local desc="$1" out; shift
  if out="$("$@" 2>&1)"; then pass "$desc"; else bad "$desc: $(tail -n 15 <<<"$out")"; fi
}

cleanup() {
  if ((INSTALLED)); then helm uninstall "$REL" -n "$NS" --wait=false >/dev/null 2>&1; fi
  kc delete namespace "$NS" --ignore-not-found --wait=false >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "# helm $("$HELM_BIN" version --short), kubectl $("$KUBECTL" version --client -o json | jq -r .clientVersion.gitVersion), namespace $NS, release $REL"

# ---- the chart ships the repository's CRD unchanged -------------------------------------------
check "charts/feedguard/crds/fencepolicy.yaml is identical to crds/fencepolicy.yaml" \
  diff -u "$ROOT/crds/fencepolicy.yaml" "$CHART/crds/fencepolicy.yaml"
check "charts/feedguard/crds/starvationreport.yaml is identical to crds/starvationreport.yaml" \
  diff -u "$ROOT/crds/starvationreport.yaml" "$CHART/crds/starvationreport.yaml"

# ---- helm lint ----------------------------------------------------------------------------
ALL_ON=(--set tls.certManager.enabled=true --set metrics.serviceMonitor.enabled=true
        --set metrics.dashboard.enabled=true)
check "helm lint --strict (defaults)" helm lint --strict "$CHART"
check "helm lint --strict (cert-manager, ServiceMonitor, dashboard, identity cert, hostPath TLS)" \
  helm lint --strict "$CHART" "${ALL_ON[@]}" --set controller.agentIdentity=cert \
  --set agent.tls.hostPathDir=/etc/feedguard/pki
if out="$(helm lint --strict "$CHART" --set controller.agentIdentity=sometimes 2>&1)"; then
  bad "values.schema.json accepted controller.agentIdentity=sometimes"
elif grep -q "agentIdentity" <<<"$out"; then
  pass "values.schema.json rejects controller.agentIdentity=sometimes"
else
  bad "lint failed, but not naming agentIdentity: $out"
fi
if helm lint --strict "$CHART" --set controller.replicaz=2 >/dev/null 2>&1; then
  bad "values.schema.json accepted the misspelt key controller.replicaz"
else
  pass "values.schema.json rejects a misspelt key (controller.replicaz)"
fi

# ---- render and inspect -------------------------------------------------------------------
kc apply -f "$ROOT/crds/fencepolicy.yaml" >/dev/null || fail "kubectl apply -f crds/fencepolicy.yaml failed"
kc wait --for=condition=Established --timeout=60s crd/fencepolicies.feedguard.io >/dev/null ||
  fail "the CRD did not become Established"
kc create namespace "$NS" >/dev/null || fail "cannot create namespace $NS"

helm template "$REL" "$CHART" -n "$NS" >"$WORK/default.yaml" || fail "helm template (defaults) failed"
check "kubectl apply --dry-run=server accepts every rendered object (defaults)" \
  kc apply --dry-run=server -n "$NS" -f "$WORK/default.yaml"
kc apply --dry-run=server -n "$NS" -f "$WORK/default.yaml" -o json >"$WORK/default.json" 2>/dev/null
# `kubectl apply -o json` of several objects prints a List.
obj() { jq -c --arg k "$1" --arg n "$2" '.items[] | select(.kind == $k and .metadata.name == $n)' "$WORK/default.json"; }
kinds="$(jq -r '[.items[].kind] | sort | join(",")' "$WORK/default.json")"
want="ClusterRole,ClusterRoleBinding,DaemonSet,Deployment,PodDisruptionBudget,Role,RoleBinding,Secret,Secret,Service,Service,ServiceAccount,ServiceAccount"
if [[ "$kinds" == "$want" ]]; then pass "default render: $kinds"; else bad "default render has $kinds, want $want"; fi

DEP="$(obj Deployment "$FULL-controller")"
DS="$(obj DaemonSet "$FULL-agent")"
[[ -n "$DEP" && -n "$DS" ]] || fail "no Deployment $FULL-controller or DaemonSet $FULL-agent rendered"
# jqt DESCRIPTION JSON FILTER — passes when the filter yields true.
jqt() {
  local r; r="$(jq -r "$3" <<<"$2" 2>&1)"
  if [[ "$r" == true ]]; then pass "$1"; else bad "$1 (got: $(head -c 300 <<<"$r"))"; fi
}
C='.spec.template.spec.containers[0]'
jqt "controller: 2 replicas" "$DEP" '.spec.replicas == 2'
jqt "controller: leader election, gRPC :9443, metrics :8080, lease namespace from the downward API" "$DEP" \
  "$C.args as \$a | ([\"--leader-elect\", \"--listen-grpc=0.0.0.0:9443\", \"--metrics-addr=:8080\",
    \"--lease-namespace=\$(POD_NAMESPACE)\", \"--agent-namespace=\$(POD_NAMESPACE)\",
    \"--agent-identity=token\", \"--agent-token-audience=feedguard\",
    \"--agent-service-account=$FULL-agent\"] - \$a) == [] and ($C.env[] | select(.name == \"POD_NAMESPACE\")
    | .valueFrom.fieldRef.fieldPath == \"metadata.namespace\")"
jqt "controller: TLS files --tls-cert/--tls-key/--tls-client-ca from the controller Secret" "$DEP" \
  "([\"--tls-cert=/etc/feedguard/tls/tls.crt\", \"--tls-key=/etc/feedguard/tls/tls.key\",
     \"--tls-client-ca=/etc/feedguard/tls/ca.crt\"] - $C.args) == [] and
   (.spec.template.spec.volumes[] | select(.name == \"tls\") | .projected.sources[0].secret.name) == \"$FULL-controller-tls\""
# Readiness /healthz: /readyz is 200 on the leader only, and a never-Ready standby deadlocks
# rollouts (tests/node/README.md).
jqt "controller: liveness and readiness /healthz on the metrics port" "$DEP" \
  "$C.livenessProbe.httpGet == {\"path\": \"/healthz\", \"port\": \"metrics\", \"scheme\": \"HTTP\"} and
   $C.readinessProbe.httpGet == {\"path\": \"/healthz\", \"port\": \"metrics\", \"scheme\": \"HTTP\"} and
   ([$C.ports[] | {(.name): .containerPort}] | add) == {\"grpc\": 9443, \"metrics\": 8080}"
jqt "controller: non-root, read-only root fs, no privilege escalation, no capabilities, requests+limits" "$DEP" \
  ".spec.template.spec.securityContext.runAsNonRoot == true and $C.securityContext.readOnlyRootFilesystem == true
   and $C.securityContext.allowPrivilegeEscalation == false and $C.securityContext.capabilities.drop == [\"ALL\"]
   and ($C.resources.requests.cpu != null) and ($C.resources.limits.memory != null)"

A='.spec.template.spec'
jqt "agent: run --controller <svc>.<ns>.svc:9443 --node-name/--self-pod-uid from the downward API" "$DS" \
  "$A.containers[0] as \$c | \$c.args[0] == \"run\" and
   ([\"--controller=$FULL-controller.$NS.svc:9443\", \"--node-name=\$(NODE_NAME)\",
     \"--self-pod-uid=\$(POD_UID)\", \"--state-dir=/var/lib/feedguard\", \"--metrics-addr=:8081\",
     \"--pod-resources=unix:/var/lib/kubelet/pod-resources/kubelet.sock\",
     \"--tls-ca=/etc/feedguard/tls/ca.crt\", \"--tls-cert=/etc/feedguard/tls/tls.crt\",
     \"--tls-key=/etc/feedguard/tls/tls.key\"] - \$c.args) == [] and
   ([\$c.env[] | {(.name): .valueFrom.fieldRef.fieldPath}] | add) == {\"NODE_NAME\": \"spec.nodeName\", \"POD_UID\": \"metadata.uid\"}"
jqt "agent: unprivileged uid 0, SYS_NICE alone, RuntimeDefault seccomp, system-node-critical, tolerates nvidia.com/gpu taints" "$DS" \
  "$A.containers[0].securityContext as \$s | \$s.privileged == false and \$s.runAsUser == 0
   and \$s.capabilities.drop == [\"ALL\"] and \$s.capabilities.add == [\"SYS_NICE\"] and \$s.allowPrivilegeEscalation == false
   and \$s.seccompProfile.type == \"RuntimeDefault\" and \$s.readOnlyRootFilesystem == true
   and $A.priorityClassName == \"system-node-critical\"
   and ([$A.tolerations[] | select(.key == \"nvidia.com/gpu\" and .operator == \"Exists\" and (.effect // \"\") == \"\")] | length) == 1"
jqt "agent: hostPaths kubelet's pod cgroup tree (the defaults: v2 + systemd), pod-resources (ro), cpu_manager_state (ro, File), the host's /proc (ro, --host-proc; the NVIDIA files in it), state dir" "$DS" \
  "([$A.volumes[] | select(.hostPath) | {(.name): (.hostPath.path + \" \" + .hostPath.type)}] | add) ==
     {\"cgroup-kubepods\": \"/sys/fs/cgroup/kubepods.slice Directory\", \"state\": \"/var/lib/feedguard DirectoryOrCreate\",
      \"pod-resources\": \"/var/lib/kubelet/pod-resources Directory\",
      \"cpu-manager-state\": \"/var/lib/kubelet/cpu_manager_state File\",
      \"host-proc\": \"/proc Directory\"} and
   ([$A.containers[0].volumeMounts[] | select(.readOnly == true) | .name] | sort) ==
     [\"agent-token\", \"cpu-manager-state\", \"host-proc\", \"pod-resources\", \"tls\"] and
   ($A.containers[0].volumeMounts[] | select(.name == \"host-proc\") | .mountPath) == \"/host/proc\" and
   ([\"--host-proc=/host/proc\", \"--nvidia-proc-root=/host/proc/driver/nvidia/gpus\"] - $A.containers[0].args) == []"
jqt "agent: node-bound identity token (audience feedguard, 1 h, owner-only) passed by --token-file" "$DS" \
  "($A.volumes[] | select(.name == \"agent-token\") | .projected) as \$p |
   \$p.sources == [{\"serviceAccountToken\": {\"audience\": \"feedguard\", \"expirationSeconds\": 3600,
     \"path\": \"token\"}}] and \$p.defaultMode == 256 and
   ($A.containers[0].args | index(\"--token-file=/var/run/secrets/feedguard/token\")) != null"
jqt "agent: no API token mounted" "$DS" "$A.automountServiceAccountToken == false"
jqt "agent: liveness /healthz and readiness /readyz on the metrics port" "$DS" \
  "$C.livenessProbe.httpGet == {\"path\": \"/healthz\", \"port\": \"metrics\", \"scheme\": \"HTTP\"} and
   $C.readinessProbe.httpGet == {\"path\": \"/readyz\", \"port\": \"metrics\", \"scheme\": \"HTTP\"}"
jqt "agent ServiceAccount: automountServiceAccountToken false" "$(obj ServiceAccount "$FULL-agent")" \
  '.automountServiceAccountToken == false'
jqt "controller Service: gRPC 9443 to the controller pods" "$(obj Service "$FULL-controller")" \
  "([.spec.ports[] | {(.name): .port}] | add) == {\"grpc\": 9443, \"metrics\": 8080} and
   .spec.selector[\"app.kubernetes.io/component\"] == \"controller\""

# The chart's PKI: the server certificate carries the Service's DNS names, the agent's is a
# client certificate, both signed by the CA in ca.crt.
secret_file() { obj Secret "$1" | jq -r --arg k "$2" '.data[$k]' | base64 -d >"$WORK/$3"; }
secret_file "$FULL-controller-tls" ca.crt ca.pem
secret_file "$FULL-controller-tls" tls.crt server.pem
secret_file "$FULL-agent-tls" tls.crt agent.pem
secret_file "$FULL-agent-tls" ca.crt agent-ca.pem
check "TLS: server and agent certificates verify against the chart's CA" \
  openssl verify -CAfile "$WORK/ca.pem" "$WORK/server.pem" "$WORK/agent.pem"
check "TLS: both Secrets carry the same CA" cmp "$WORK/ca.pem" "$WORK/agent-ca.pem"
sans="$(openssl x509 -in "$WORK/server.pem" -noout -ext subjectAltName 2>/dev/null | tr -d ' \n')"
want_sans="X509v3SubjectAlternativeName:DNS:$FULL-controller,DNS:$FULL-controller.$NS,DNS:$FULL-controller.$NS.svc,DNS:$FULL-controller.$NS.svc.cluster.local"
if [[ "$sans" == "$want_sans" ]]; then pass "TLS: server SANs are the Service's DNS names"; else bad "TLS: server SANs $sans, want $want_sans"; fi
agent_info="$(openssl x509 -in "$WORK/agent.pem" -noout -subject -ext extendedKeyUsage 2>&1)"
if grep -q "CN *= *feedguard-agent" <<<"$agent_info" && grep -q "TLS Web Client Authentication" <<<"$agent_info"; then
  pass "TLS: agent certificate CN feedguard-agent, usable for client auth"
else
  bad "TLS: agent certificate: $agent_info"
fi
# ECDSA P-256 keys (cert-manager's Certificates ask the same): a P-256 signature costs the
# controller less per agent connection set up than Helm's default RSA 2048.
keys_ok=1
for f in ca server agent; do
  info="$(openssl x509 -in "$WORK/$f.pem" -noout -text 2>&1)"
  grep -q "Public Key Algorithm: id-ecPublicKey" <<<"$info" && grep -q "NIST CURVE: P-256" <<<"$info" || {
    keys_ok=0
    bad "TLS: $f certificate key is not ECDSA P-256: $(grep -m1 'Public Key Algorithm' <<<"$info")"
  }
done
((keys_ok)) && pass "TLS: CA, server and agent keys are ECDSA P-256"

# Every optional feature on: what is rendered (the server has no cert-manager or Prometheus
# Operator CRDs, so these kinds are checked as rendered, not by the server).
helm template "$REL" "$CHART" -n "$NS" "${ALL_ON[@]}" >"$WORK/all.yaml" || bad "helm template (all on) failed"
all_kinds="$(grep -E '^kind: ' "$WORK/all.yaml" | sort | uniq -c | awk '{printf "%s=%s ", $3, $1}')"
for k in "Certificate=3" "Issuer=2" "ServiceMonitor=2" "ConfigMap=1"; do
  if grep -qw -- "$k" <<<"$all_kinds"; then pass "all-on render has $k"; else bad "all-on render: $all_kinds (want $k)"; fi
done
if grep -qw "Secret=" <<<"$all_kinds"; then bad "cert-manager mode still renders chart-generated Secrets"; else pass "cert-manager mode renders no chart-generated Secret"; fi
python3 - "$WORK/all.yaml" <<'EOF' && pass "dashboard ConfigMap: grafana_dashboard label, valid JSON, a panel per metric" || bad "dashboard ConfigMap"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap"]
cm = docs[0]
assert cm["metadata"]["labels"]["grafana_dashboard"] == "1", cm["metadata"]["labels"]
dash = json.loads(cm["data"]["feedguard.json"])
exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
for m in ["feedguard_agents_connected", "feedguard_nodes{state=~\"enforced|failed|stale\"}",
          "feedguard_fence_apply_seconds_bucket", "feedguard_overwrites_total",
          "feedguard_trainer_cpu_pressure_ratio", "feedguard_neighbour_cpu_seconds_total",
          "feedguard_observed_pod_gpu_lost_seconds_total", "feedguard_observed_pod_wait_ratio",
          "feedguard_observed_pod_wait_behind_others_ratio",
          "feedguard_observed_contender_cpu_seconds"]:
    assert m in exprs, m
EOF

# Switches: controller.enabled=false / agent.enabled=false leave their workloads (and, with both
# off, the TLS material) out; the CRD, RBAC and ServiceAccounts stay (what the local demo installs).
kinds_of() { grep -E '^kind: ' | sort | uniq -c | awk '{printf "%s=%s ", $3, $1}'; }
rbac_only="$(helm template "$REL" "$CHART" -n "$NS" --set controller.enabled=false --set agent.enabled=false \
  --set metrics.serviceMonitor.enabled=true | kinds_of)"
if [[ "$rbac_only" == "ClusterRole=1 ClusterRoleBinding=1 Role=1 RoleBinding=1 ServiceAccount=2 " ]]; then
  pass "controller.enabled=false agent.enabled=false renders RBAC and ServiceAccounts only"
else
  bad "controller.enabled=false agent.enabled=false renders: $rbac_only"
fi
no_agent="$(helm template "$REL" "$CHART" -n "$NS" --set agent.enabled=false \
  --set metrics.serviceMonitor.enabled=true | kinds_of)"
if grep -qw "DaemonSet=" <<<"$no_agent" || ! grep -qw "Deployment=1" <<<"$no_agent" ||
  ! grep -qw "Secret=2" <<<"$no_agent" || ! grep -qw "ServiceMonitor=1" <<<"$no_agent"; then
  bad "agent.enabled=false renders: $no_agent"
else
  pass "agent.enabled=false: no DaemonSet, controller, TLS and its ServiceMonitor kept"
fi

# controller.gpuDraDrivers: by default the controller counts DRA-claimed GPUs (the flag, and the
# ClusterRole lets it list and watch resourceclaims); emptied, neither; a bad name is refused.
dra_rule='resources: \[resourceclaims\]'
if grep -q -- '--gpu-dra-drivers=gpu.nvidia.com,gpu.amd.com,gpu.intel.com$' "$WORK/default.yaml" &&
  grep -q "$dra_rule" "$WORK/default.yaml"; then
  pass "defaults: --gpu-dra-drivers=gpu.nvidia.com,gpu.amd.com,gpu.intel.com and resourceclaims list/watch"
else
  bad "defaults: no --gpu-dra-drivers or no resourceclaims rule"
fi
no_dra="$(helm template "$REL" "$CHART" -n "$NS" --set controller.gpuDraDrivers=null)"
if grep -q -- '--gpu-dra-drivers=$' <<<"$no_dra" && ! grep -q "$dra_rule" <<<"$no_dra"; then
  pass "controller.gpuDraDrivers=null: claims not read, no resourceclaims rule"
else
  bad "controller.gpuDraDrivers=null renders: $(grep -n -- 'gpu-dra\|resourceclaims' <<<"$no_dra")"
fi
if out="$(helm template "$REL" "$CHART" -n "$NS" --set 'controller.gpuDraDrivers={GPU.nvidia.com}' 2>&1)"; then
  bad "controller.gpuDraDrivers={GPU.nvidia.com} rendered"
else
  pass "controller.gpuDraDrivers={GPU.nvidia.com} refused by the schema"
fi

# agent.cgroup.hostMount: with the version and driver known the agent gets kubelet's pod tree
# only (each v1 hierarchy's <root>/kubepods, or v2's <root>/kubepods.slice), under /host/cgroup;
# "kubepods" without them is refused by name; "all" keeps the whole tree.
# ds_of VALUES... — the rendered agent DaemonSet as JSON.
ds_of() { helm template "$REL" "$CHART" -n "$NS" "$@" | python3 -c '
import json, sys, yaml
print(json.dumps(next(d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "DaemonSet")))'; }
cg_view='.spec.template.spec as $s |
  {v: ([$s.volumes[] | select(.hostPath and (.hostPath.path | startswith("/sys/fs/cgroup"))) | {(.name): .hostPath.path}] | add),
   m: ([$s.containers[0].volumeMounts[] | select(.name | startswith("cgroup")) | {(.name): .mountPath}] | add),
   a: [$s.containers[0].args[] | select(startswith("--cgroup-mount"))]}'
jqt "agent.cgroup.hostMount default, v1 cgroupfs root /k8s: only <hierarchy>/k8s/kubepods, under /host/cgroup" \
  "$(ds_of --set agent.cgroup.version=v1 --set agent.cgroup.driver=cgroupfs --set agent.cgroup.root=/k8s/)" \
  "$cg_view == {v: {\"cgroup-cpu\": \"/sys/fs/cgroup/cpu/k8s/kubepods\", \"cgroup-cpuacct\": \"/sys/fs/cgroup/cpuacct/k8s/kubepods\",
                   \"cgroup-cpuset\": \"/sys/fs/cgroup/cpuset/k8s/kubepods\"},
               m: {\"cgroup-cpu\": \"/host/cgroup/cpu/k8s/kubepods\", \"cgroup-cpuacct\": \"/host/cgroup/cpuacct/k8s/kubepods\",
                   \"cgroup-cpuset\": \"/host/cgroup/cpuset/k8s/kubepods\"},
               a: [\"--cgroup-mount=/host/cgroup\"]}"
jqt "agent.cgroup.hostMount default, v2 systemd: only /sys/fs/cgroup/kubepods.slice" \
  "$(ds_of --set agent.cgroup.version=v2 --set agent.cgroup.driver=systemd)" \
  "$cg_view == {v: {\"cgroup-kubepods\": \"/sys/fs/cgroup/kubepods.slice\"},
               m: {\"cgroup-kubepods\": \"/host/cgroup/kubepods.slice\"}, a: [\"--cgroup-mount=/host/cgroup\"]}"
jqt "agent.cgroup.hostMount=all with version and driver set: the whole tree, no --cgroup-mount" \
  "$(ds_of --set agent.cgroup.version=v2 --set agent.cgroup.driver=systemd --set agent.cgroup.hostMount=all)" \
  "$cg_view == {v: {\"cgroup\": \"/sys/fs/cgroup\"}, m: {\"cgroup\": \"/sys/fs/cgroup\"}, a: []}"
if out="$(helm template "$REL" "$CHART" -n "$NS" --set agent.cgroup.version= --set agent.cgroup.hostMount=kubepods 2>&1)"; then
  bad "agent.cgroup.hostMount=kubepods without version and driver rendered"
elif grep -q "agent.cgroup.version" <<<"$out"; then
  pass "agent.cgroup.hostMount=kubepods without version and driver is refused, naming agent.cgroup.version"
else
  bad "agent.cgroup.hostMount=kubepods failed without naming agent.cgroup.version: $out"
fi
# The chart's defaults (no values at all): v2 + systemd, kubelet's pod tree only — never the whole
# tree by default. Emptying the version or the driver (detect on the node) is refused until
# hostMount=all says the whole tree is meant.
jqt "chart defaults: v2 + systemd, only /sys/fs/cgroup/kubepods.slice, the flags passed" \
  "$(ds_of)" \
  "$cg_view == {v: {\"cgroup-kubepods\": \"/sys/fs/cgroup/kubepods.slice\"},
               m: {\"cgroup-kubepods\": \"/host/cgroup/kubepods.slice\"}, a: [\"--cgroup-mount=/host/cgroup\"]}
   and ([.spec.template.spec.containers[0].args[] | select(startswith(\"--cgroup-driver\") or startswith(\"--cgroup-version\"))]
        == [\"--cgroup-driver=systemd\", \"--cgroup-version=v2\"])"
for unset in agent.cgroup.version agent.cgroup.driver; do
  if out="$(helm template "$REL" "$CHART" -n "$NS" --set "$unset=" 2>&1)"; then
    bad "$unset emptied (detect) rendered without hostMount=all"
  elif grep -q "agent.cgroup.hostMount=all" <<<"$out"; then
    pass "$unset emptied (detect) is refused, naming agent.cgroup.hostMount=all"
  else
    bad "$unset emptied failed without naming agent.cgroup.hostMount=all: $out"
  fi
done
jqt "agent.cgroup.version emptied with hostMount=all: the whole tree, detection on the node" \
  "$(ds_of --set agent.cgroup.version= --set agent.cgroup.hostMount=all)" \
  "$cg_view == {v: {\"cgroup\": \"/sys/fs/cgroup\"}, m: {\"cgroup\": \"/sys/fs/cgroup\"}, a: []}"

if helm lint --strict "$CHART" --set agent.cgroup.hostMount=some >/dev/null 2>&1; then
  bad "values.schema.json accepted agent.cgroup.hostMount=some"
else
  pass "values.schema.json rejects agent.cgroup.hostMount=some"
fi

# ---- helm install into the real API server ------------------------------------------------
if out="$(helm install "$REL" "$CHART" -n "$NS" --set metrics.dashboard.enabled=true --wait=false 2>&1)"; then
  INSTALLED=1
  pass "helm install $REL"
  grep -q "feedguard.*is installed in namespace $NS" <<<"$out" && pass "NOTES.txt rendered" || bad "NOTES.txt missing: $out"
else
  fail "helm install failed: $out"
fi
helm get manifest "$REL" -n "$NS" >"$WORK/manifest.yaml"
mapfile -t objects < <(python3 - "$WORK/manifest.yaml" <<'EOF'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d:
        print(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))
EOF
)
missing=()
for o in "${objects[@]}"; do
  read -r kind name ns <<<"$o"
  if [[ -n "$ns" ]]; then kc get -n "$ns" "$kind" "$name" >/dev/null 2>&1 || missing+=("$kind/$name"); else
    kc get "$kind" "$name" >/dev/null 2>&1 || missing+=("$kind/$name"); fi
done
if ((${#objects[@]} >= 14 && ${#missing[@]} == 0)); then
  pass "every object of the release exists (${#objects[@]}: $(printf '%s\n' "${objects[@]}" | awk '{print $1}' | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}'))"
else
  bad "objects of the release: ${#objects[@]}, missing: ${missing[*]:-none}"
fi
# Upgrade keeps the PKI (looked up from the live Secrets), so running agents keep trusting it.
before="$(kc get secret -n "$NS" "$FULL-controller-tls" -o jsonpath='{.data.ca\.crt}')"
check "helm upgrade (same values)" helm upgrade "$REL" "$CHART" -n "$NS" --reuse-values --wait=false
after="$(kc get secret -n "$NS" "$FULL-controller-tls" -o jsonpath='{.data.ca\.crt}')"
if [[ -n "$before" && "$before" == "$after" ]]; then pass "helm upgrade keeps the CA"; else bad "helm upgrade replaced the CA"; fi

# ---- RBAC by impersonation ----------------------------------------------------------------
# can AS EXPECT VERB RESOURCE [flags] — `kubectl auth can-i` must answer EXPECT (yes|no).
can() {
  local as="$1" expect="$2" got; shift 2
  got="$(kc auth can-i --as "$as" "$@" 2>/dev/null)"
  if [[ "$got" == "$expect" ]]; then pass "can-i ${as##*:} $* -> $got"; else bad "can-i ${as##*:} $* -> '$got', want $expect"; fi
}
for v in get list watch update; do can "$CTRL_SA" yes "$v" fencepolicies.feedguard.io; done
can "$CTRL_SA" yes update fencepolicies.feedguard.io --subresource=status
can "$CTRL_SA" no patch fencepolicies.feedguard.io
for r in pods nodes namespaces; do for v in list watch; do can "$CTRL_SA" yes "$v" "$r" --all-namespaces; done; done
for v in create patch; do
  can "$CTRL_SA" yes "$v" events -n default
done
for v in get create update; do can "$CTRL_SA" yes "$v" leases.coordination.k8s.io -n "$NS"; done
can "$CTRL_SA" yes create tokenreviews.authentication.k8s.io  # node-bound agent identity
# ... and nothing else.
can "$CTRL_SA" no delete pods -n default
can "$CTRL_SA" no get pods -n default
can "$CTRL_SA" no create pods/eviction -n default
can "$CTRL_SA" no create fencepolicies.feedguard.io
can "$CTRL_SA" no delete fencepolicies.feedguard.io
can "$CTRL_SA" no get secrets -n "$NS"
can "$CTRL_SA" no list secrets --all-namespaces
can "$CTRL_SA" no update nodes
can "$CTRL_SA" no patch pods -n default
can "$CTRL_SA" no get leases.coordination.k8s.io -n kube-system
can "$CTRL_SA" no delete leases.coordination.k8s.io -n "$NS"
can "$CTRL_SA" no create subjectaccessreviews.authorization.k8s.io
can "$AGENT_SA" no list pods --all-namespaces
can "$AGENT_SA" no get nodes
can "$AGENT_SA" no get fencepolicies.feedguard.io
can "$AGENT_SA" no create tokenreviews.authentication.k8s.io

# ---- kubectl explain ----------------------------------------------------------------------
if out="$(kc explain fencepolicy.spec.trainers 2>&1)" && grep -q "podSelector" <<<"$out" && grep -q "cpu" <<<"$out"; then
  pass "kubectl explain fencepolicy.spec.trainers lists podSelector and cpu"
else
  bad "kubectl explain fencepolicy.spec.trainers: $out"
fi

# ---- examples -----------------------------------------------------------------------------
n_examples=0
for f in "$ROOT"/examples/*.yaml; do
  n_examples=$((n_examples + 1))
  name="$(basename "$f")"
  if ! grep -q '^# ' "$f"; then bad "$name has no explanatory comment"; fi
  if out="$(kc apply --dry-run=server -f "$f" 2>&1)"; then
    pass "example $name passes the CRD schema: $(tr '\n' ' ' <<<"$out")"
  else
    bad "example $name rejected: $out"
  fi
done
((n_examples >= 5)) || bad "only $n_examples examples (want >= 5)"

# ---- helm uninstall -----------------------------------------------------------------------
if out="$(helm uninstall "$REL" -n "$NS" --wait=false 2>&1)"; then
  INSTALLED=0
  pass "helm uninstall $REL"
else
  bad "helm uninstall: $out"
fi
left=()
for o in "${objects[@]}"; do
  read -r kind name ns <<<"$o"
  if [[ -n "$ns" ]]; then kc get -n "$ns" "$kind" "$name" >/dev/null 2>&1 && left+=("$kind/$name"); else
    kc get "$kind" "$name" >/dev/null 2>&1 && left+=("$kind/$name"); fi
done
if ((${#left[@]} == 0)); then pass "helm uninstall removed all ${#objects[@]} objects"; else bad "left after uninstall: ${left[*]}"; fi
kc get crd fencepolicies.feedguard.io >/dev/null 2>&1 && pass "the CRD stays after uninstall (Helm never deletes crds/)" ||
  bad "the CRD is gone after uninstall"

# ---- the trainer-label admission policy (issue 28, item 6) ----------------------------------
# Rendered alone (admission.trainerLabel.enabled) and applied: the API server itself evaluates its
# CEL. Pods are tried with --dry-run=server (admission runs; nothing is created, no kubelet needed).
TNS="$NS-trainers"
helm template "$REL" "$CHART" -n "$NS" --set admission.trainerLabel.enabled=true \
  --show-only templates/trainer-label-policy.yaml >"$WORK/vap.yaml" 2>&1 ||
  bad "helm template of the trainer-label policy: $(cat "$WORK/vap.yaml")"
check "ValidatingAdmissionPolicy + binding for the trainer label applied" kc apply -f "$WORK/vap.yaml"
kc create namespace "$TNS" >/dev/null 2>&1 && kc label namespace "$TNS" feedguard.io/trainers-allowed=true >/dev/null
# pod_dry_run NS LABEL — a Pod with the label ("" for none), server-side dry run.
pod_dry_run() {
  local labels='{}'
  [[ -n "$2" ]] && labels="{\"${2%%=*}\": \"${2#*=}\"}"
  kc create --dry-run=server -f - <<EOF_POD
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vap-probe", "namespace": "$1",
 "labels": $labels}, "spec": {"containers": [{"name": "c", "image": "feedguard.invalid/x"}]}}
EOF_POD
}
# The policy takes a moment to be loaded by the API server: wait for the first denial.
denied=0
for _ in $(seq 1 50); do
  if out="$(pod_dry_run "$NS" feedguard.io/role=trainer 2>&1)"; then sleep 0.2; continue; fi
  [[ "$out" == *"allowed only in namespaces labelled feedguard.io/trainers-allowed=true"* ]] && denied=1
  break
done
((denied)) && pass "a pod labelled a trainer is denied in a namespace not labelled for trainers" ||
  bad "a trainer-labelled pod was not denied in $NS: ${out:-admitted}"
check "a pod labelled a trainer is admitted where the namespace allows trainers" \
  pod_dry_run "$TNS" feedguard.io/role=trainer
check "a pod without the label is admitted anywhere" pod_dry_run "$NS" app=batch
kc delete -f "$WORK/vap.yaml" --ignore-not-found >/dev/null 2>&1
kc delete namespace "$TNS" --ignore-not-found --wait=false >/dev/null 2>&1

echo "# passed $PASSED, failed $FAILED"
((FAILED == 0))

#!/usr/bin/env bash
# observability_test.sh WORKDIR — the `node` tier's observability test (issue 11 item 6, issue 13
# items 5 and 6) on a real one-node cluster (tests/node/cluster.sh):
#   - the chart is `helm install`ed with its defaults (unprivileged agent, 0400 key files) plus
#     networkPolicy.enabled=true (the API server validates and stores both NetworkPolicies; the
#     test bed's bridge CNI does not enforce them — said, not claimed);
#   - Debian's Prometheus runs INSIDE the cluster's network namespace with a scrape config
#     translated, the way the Prometheus Operator does it, from the ServiceMonitors the chart
#     renders (metrics.serviceMonitor.enabled=true); targets are discovered from the real API
#     server's Endpoints with a ServiceAccount token bound to a ClusterRole that can only read
#     endpoints/services/pods (served over http_sd_configs with kubernetes_sd's role-endpoints
#     labels, because Debian's Prometheus is built without kubernetes_sd_configs);
#   - the controller (both replicas) and agent targets must be up; a FencePolicy is applied while
#     Prometheus scrapes (so rates and the apply-latency histogram have data in the window);
#   - EVERY panel query and template-variable query of the Grafana dashboard the chart ships
#     (metrics.dashboard.enabled=true ConfigMap) must return at least one series with a finite
#     value through /api/v1/query ($node = .*, $__rate_interval = 1m) — but one, named and
#     counted apart: "GPU time lost to CPU starvation (observed)" needs NVML on the node (no GPU
#     figure is made up without it), so here it is only checked to evaluate without error. The
#     trainer is a GPU pod (the node advertises 1 nvidia.com/gpu, no device plugin) with two busy
#     loops, so observation has a starving pod and contenders to export;
#   - the chart's alert rules (metrics.prometheusRule.enabled=true PrometheusRule, .spec) pass
#     `promtool check rules` and `promtool test rules` (synthetic series: each alert fires when it
#     should), load into that Prometheus with health ok, every series selector in them matches a
#     real series, and none is pending or firing on the healthy cluster;
#   - the agent container runs with CAP_SYS_NICE alone, no_new_privs and seccomp filtering, and its
#     key file is mode 0400; the fence lands on kubelet's pod cgroup and the policy deletion
#     reverts it; `helm uninstall` completes.
# Exit: 0 pass, 1 fail, 77 skipped (not root). Binaries: FG_CONTROLLER / FG_AGENT (CTest sets
# them), else build/release. Runtime about 1.5-2 minutes on 2 cores.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
node_init obs "$@"
rm -rf "$WORK/prom"
mkdir -p "$WORK/prom"
MNS=monitoring
SCRAPE=5s
RATE_INTERVAL=1m
CHART="$REPO/charts/feedguard"

PROM_PID=""
SD_PID=""
# Prometheus and its service discovery end with the test; on a failure its log is kept too.
node_exit_hook() {  # RC
  local p
  for p in "$PROM_PID" "$SD_PID"; do
    [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null || continue
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  if (($1)); then
    tail -n 30 "$WORK/prom/prometheus.log" 2>/dev/null || true
    mkdir -p "$WORK/failed-logs" && cp "$WORK/prom/prometheus.log" "$WORK/failed-logs/" 2>/dev/null || true
  fi
}

for b in prometheus promtool; do
  command -v "$b" >/dev/null || fail "$b is not installed (Debian package prometheus; tests/install_deps.sh)"
done
say "$(prometheus --version 2>&1 | head -n 1)"

# ---- alert rules: rendered from the chart, checked offline ---------------------------------
HELM_BIN="$(source "$REPO/tests/testbed/versions.env" && echo "$HELM")"
[[ -x "$HELM_BIN" ]] || fail "helm not built: tests/testbed/build.sh"
"$HELM_BIN" template "$RELEASE" "$CHART" -n "$RNS" --set metrics.prometheusRule.enabled=true \
  --show-only templates/prometheusrule.yaml >"$WORK/prom/prometheusrule.yaml" || fail "helm template (PrometheusRule) failed"
python3 - "$WORK/prom/prometheusrule.yaml" "$WORK/prom/rules.yaml" <<'EOF' || fail "PrometheusRule render"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
assert doc["kind"] == "PrometheusRule", doc["kind"]
yaml.safe_dump(doc["spec"], open(sys.argv[2], "w"), sort_keys=False)
# The unit tests below check when each alert fires; a copy without annotations keeps them
# independent of the wording (`promtool check rules` checks the annotation templates).
for g in doc["spec"]["groups"]:
    for r in g["rules"]:
        r.pop("annotations", None)
yaml.safe_dump(doc["spec"], open(sys.argv[2].replace(".yaml", "-noann.yaml"), "w"), sort_keys=False)
EOF
promtool check rules "$WORK/prom/rules.yaml" >"$WORK/prom/check-rules.log" 2>&1 ||
  { cat "$WORK/prom/check-rules.log"; fail "promtool check rules"; }
n_rules="$(grep -o 'SUCCESS: [0-9]* rules' "$WORK/prom/check-rules.log")"
# Unit tests of the alerts on synthetic series: each fires when it should and not before.
AJ="job=\"$RELEASE-feedguard-agent-metrics\", namespace=\"$RNS\""
CJ="job=\"$RELEASE-feedguard-controller\", namespace=\"$RNS\""
cat >"$WORK/prom/rules_test.yaml" <<YAML
rule_files: [rules-noann.yaml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'up{$AJ, node="n1", pod="a1"}'
    values: '1 1 0 0 0 0 0 0 0 0'
  - series: 'feedguard_agent_connected{$AJ, node="n1", pod="a1"}'
    values: '1 0 0 0 0 0 0 0 0 0'
  - series: 'feedguard_controller_leader{$CJ, pod="c1"}'
    values: '1 1 0 0 0 0 0 0 0 0'
  - series: 'feedguard_controller_leader{$CJ, pod="c2"}'
    values: '0 0 0 0 0 0 0 0 0 0'
  - series: 'feedguard_nodes{$CJ, pod="c1", state="stale"}'
    values: '0 1 1 1 1 1 1 1 1 1 1 1 1 1'
  - series: 'feedguard_nodes{$CJ, pod="c1", state="failed"}'
    values: '0 0 0 0 0 0 0 0 0 0 0 0 0 0'
  alert_rule_test:
  - {eval_time: 6m, alertname: FeedguardAgentDown, exp_alerts: []}
  - eval_time: 7m
    alertname: FeedguardAgentDown
    exp_alerts: [{exp_labels: {severity: warning, job: $RELEASE-feedguard-agent-metrics, namespace: $RNS, node: n1, pod: a1}}]
  - eval_time: 6m
    alertname: FeedguardAgentDisconnected
    exp_alerts: [{exp_labels: {severity: warning, job: $RELEASE-feedguard-agent-metrics, namespace: $RNS, node: n1, pod: a1}}]
  - {eval_time: 6m, alertname: FeedguardControllerNoLeader, exp_alerts: []}
  - {eval_time: 7m, alertname: FeedguardControllerNoLeader, exp_alerts: [{exp_labels: {severity: critical}}]}
  - {eval_time: 10m, alertname: FeedguardNodesStale, exp_alerts: []}
  - {eval_time: 11m, alertname: FeedguardNodesStale, exp_alerts: [{exp_labels: {severity: warning}}]}
  - {eval_time: 13m, alertname: FeedguardFenceFailures, exp_alerts: []}
YAML
(cd "$WORK/prom" && promtool test rules rules_test.yaml) >"$WORK/prom/test-rules.log" 2>&1 ||
  { cat "$WORK/prom/test-rules.log"; fail "promtool test rules"; }
pass "alert rules: promtool check rules ($n_rules), promtool test rules (agent down/disconnected, no leader, stale nodes fire on time)"

# ---- cluster, images, workloads ------------------------------------------------------------
node_up
in_net() { nsenter --net="/run/netns/$NETNS" -- "$@"; }
import_feedguard_images
# The release path and the test images describe the same image: each Dockerfile's /rootfs RUN
# step, run here against the same binary, yields exactly the file list (and modes) of the
# image images.sh built, and its USER is the image's user.
python3 - "$REPO" "$WORK/images" "$FG_CONTROLLER" "$FG_AGENT" <<'EOF' || fail "Dockerfiles and images.sh disagree"
import json, os, re, shutil, subprocess, sys, tarfile, tempfile
repo, imgdir, bins = sys.argv[1], sys.argv[2], {"controller": sys.argv[3], "agent": sys.argv[4]}
for comp, binary in bins.items():
    text = open(f"{repo}/{comp}/Dockerfile").read().replace("\\\n", " ")
    run = [l for l in text.splitlines() if l.startswith("RUN ") and "/rootfs" in l]
    assert len(run) == 1, run
    user = re.search(r"^USER (\S+)$", text, re.M).group(1)
    with tempfile.TemporaryDirectory(dir=imgdir) as tmp:
        root = os.path.join(tmp, "rootfs")
        script = run[0][4:].replace("/rootfs", root)
        script = re.sub(r"bin=\S+;", f"bin={binary};", script, count=1)
        subprocess.run(["sh", "-c", script], check=True)
        docker = {}
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                p = os.path.join(d, n)
                docker[os.path.relpath(p, root)] = oct(os.lstat(p).st_mode & 0o7777)
    with tarfile.open(f"{imgdir}/{comp}.tar") as t:
        manifest = json.load(t.extractfile("manifest.json"))[0]
        config = json.load(t.extractfile(manifest["Config"]))
        with tarfile.open(fileobj=t.extractfile(manifest["Layers"][0])) as layer:
            test = {m.name.rstrip("/"): oct(m.mode & 0o7777) for m in layer.getmembers()}
    if docker != test:
        only_d = sorted(set(docker) - set(test)); only_t = sorted(set(test) - set(docker))
        modes = sorted(k for k in set(docker) & set(test) if docker[k] != test[k])
        print(f"{comp}: only in the Dockerfile's root {only_d}; only in images.sh's {only_t}; modes differ {[(k, docker[k], test[k]) for k in modes]}")
        sys.exit(1)
    if config["config"].get("User") != user:
        print(f"{comp}: Dockerfile USER {user}, image user {config['config'].get('User')}"); sys.exit(1)
    size = sum(m.size for m in tarfile.open(f"{imgdir}/{comp}.tar").getmembers() if m.name.endswith("layer.tar"))
    print(f"{comp}: {len(test)} entries ({size / 1e6:.1f} MB uncompressed layer), user {user}: the same from {comp}/Dockerfile and images.sh")
EOF

$K create namespace "$WNS" >/dev/null
OBS_RESOURCES='{requests: {cpu: 100m, memory: 16Mi}, limits: {cpu: 200m, memory: 64Mi}}'
$K patch node "$NODE_NAME" --subresource=status --type=json -p \
  '[{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"},
    {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": "1"}]' >/dev/null ||
  fail "cannot advertise nvidia.com/gpu on the node"
# The neighbour burns (at most 0.2 CPU) so that feedguard_neighbour_cpu_seconds_total grows; the
# trainer, a GPU pod, runs two busy loops on the 2-CPU node so that it waits (the observation
# panels: its wait, its contenders).
{
  deploy trainer trainer '{requests: {cpu: 100m, memory: 16Mi}, limits: {memory: 64Mi, nvidia.com/gpu: 1}}' \
    'while :; do :; done & while :; do :; done'
  deploy neighbour neighbour "$OBS_RESOURCES" 'while :; do :; done'
} | $K apply -f - >/dev/null

# ---- helm install: chart defaults + NetworkPolicies ----------------------------------------
VALUES=(--set controller.image.pullPolicy=Never --set agent.image.pullPolicy=Never
  --set "agent.cgroup.root=$CGROUP_ROOT" --set agent.cgroup.driver=cgroupfs
  --set agent.cgroup.version=v1 --set networkPolicy.enabled=true --set observe.periodSeconds=2)
t1=$SECONDS
"$HELM" install "$RELEASE" "$CHART" --namespace "$RNS" --create-namespace "${VALUES[@]}" \
  --wait --timeout 180s >"$WORK/helm-install.log" 2>&1 || { cat "$WORK/helm-install.log"; fail "helm install failed"; }
for w in "deployment/$RELEASE-feedguard-controller" "daemonset/$RELEASE-feedguard-agent"; do
  $K -n "$RNS" rollout status "$w" --timeout=120s >/dev/null || fail "$w did not become ready within 120 s"
done
for d in trainer neighbour; do
  $K -n "$WNS" rollout status "deployment/$d" --timeout=120s >/dev/null || fail "deployment $d did not roll out"
done
pass "helm install (chart defaults + networkPolicy.enabled) and rollouts in $((SECONDS - t1))s"

# NetworkPolicies: stored by the real API server (validation), selecting the right pods.
np="$($K -n "$RNS" get networkpolicy -o 'jsonpath={range .items[*]}{.metadata.name}:{.spec.podSelector.matchLabels.app\.kubernetes\.io/component}:{range .spec.ingress[*]}{.ports[0].port}/{end} {end}')"
[[ "$np" == "$RELEASE-feedguard-agent:agent:8081/ $RELEASE-feedguard-controller:controller:9443/8080/ " ]] ||
  fail "NetworkPolicies: '$np'"
pass "NetworkPolicies accepted by the API server: $np(not enforced by the test bed's bridge CNI)"

# The unprivileged agent: CAP_SYS_NICE alone (bit 23; cgroup v2's exact cpuset revert, see the
# chart's values.yaml), no_new_privs, seccomp filter, key file 0400.
sc="$($K -n "$RNS" get ds "$RELEASE-feedguard-agent" -o 'jsonpath={.spec.template.spec.containers[0].securityContext}')"
[[ "$sc" == *'"privileged":false'* && "$sc" == *'"drop":["ALL"]'* && "$sc" == *RuntimeDefault* ]] ||
  fail "agent securityContext is not the least-privilege default: $sc"
agent_uid="$($K -n "$RNS" get pods -l app.kubernetes.io/component=agent -o 'jsonpath={.items[0].metadata.uid}')"
agent_pid=""
for p in $(pgrep -x feedguard-agent); do
  grep -q "pod$agent_uid" "/proc/$p/cgroup" 2>/dev/null && agent_pid="$p"
done
[[ -n "$agent_pid" ]] || fail "the agent process of this cluster was not found"
st="$(grep -E '^(Uid|CapEff|CapBnd|NoNewPrivs|Seccomp):' "/proc/$agent_pid/status" | tr -s '\t ' ' ' | tr '\n' ' ')"
grep -q 'CapEff: 0000000000800000' <<<"$st" && grep -q 'CapBnd: 0000000000800000' <<<"$st" &&
  grep -q 'NoNewPrivs: 1' <<<"$st" && grep -q 'Seccomp: 2' <<<"$st" || fail "agent process: $st"
kmode="$(stat -L -c '%a %u' "/proc/$agent_pid/root/etc/feedguard/tls/tls.key")"
[[ "$kmode" == "400 0" ]] || fail "agent tls.key mode/owner '$kmode', want '400 0'"
pass "agent pid $agent_pid: $st; tls.key $kmode"

# ---- Prometheus in the cluster's network namespace -----------------------------------------
# RBAC as a user's Prometheus gets it: read endpoints, services, pods; a bound token.
$K apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $MNS}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: $MNS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: feedguard-test-prometheus}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: feedguard-test-prometheus}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: feedguard-test-prometheus}
subjects: [{kind: ServiceAccount, name: prometheus, namespace: $MNS}]
YAML
$K -n "$MNS" create token prometheus --duration=1h >"$WORK/prom/token"
chmod 600 "$WORK/prom/token"

# The ServiceMonitors and the dashboard exactly as the chart renders them for this release.
"$HELM_BIN" template "$RELEASE" "$CHART" -n "$RNS" "${VALUES[@]}" --set metrics.serviceMonitor.enabled=true \
  --set "metrics.serviceMonitor.interval=$SCRAPE" --set metrics.serviceMonitor.scrapeTimeout=4s \
  --show-only templates/servicemonitor.yaml >"$WORK/prom/servicemonitors.yaml" || fail "helm template (ServiceMonitors)"
"$HELM_BIN" template "$RELEASE" "$CHART" -n "$RNS" --set metrics.dashboard.enabled=true \
  --show-only templates/dashboard.yaml >"$WORK/prom/dashboard-cm.yaml" || fail "helm template (dashboard)"

# ServiceMonitor -> scrape config, as the Prometheus Operator generates it (role endpoints:
# keep the selected Services' endpoints on the named port; namespace/service/pod/container/job/
# endpoint target labels; then the ServiceMonitor's own relabelings; honorLabels). Debian's
# Prometheus is built without kubernetes_sd_configs ("field kubernetes_sd_configs not found"), so
# the discovery itself comes over http_sd_configs from kube_sd.py below: it lists Endpoints and
# Pods from the real API server with Prometheus' ServiceAccount token and returns each endpoint
# port with the __meta_kubernetes_* labels kubernetes_sd (role endpoints) gives it; the
# relabelings are the ones the Operator would write for kubernetes_sd.
python3 - "$WORK/prom/servicemonitors.yaml" "$WORK/prom/prometheus.yml" "http://127.0.0.1:9091" \
  "$WORK/prom/rules.yaml" "$SCRAPE" <<'EOF' || fail "scrape config"
import re, sys, yaml
sms_file, out, sd, rules, scrape = sys.argv[1:]
def san(k): return re.sub(r"[^a-zA-Z0-9_]", "_", k)
def snake(k): return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k)
jobs = []
for sm in yaml.safe_load_all(open(sms_file)):
    if not sm:
        continue
    assert sm["kind"] == "ServiceMonitor"
    spec = sm["spec"]
    for i, ep in enumerate(spec["endpoints"]):
        rl = []
        for k, v in spec["selector"]["matchLabels"].items():
            rl.append({"source_labels": [f"__meta_kubernetes_service_label_{san(k)}",
                                         f"__meta_kubernetes_service_labelpresent_{san(k)}"],
                       "regex": f"({re.escape(v)});true", "action": "keep"})
        rl.append({"source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"], "action": "keep"})
        rl.append({"source_labels": ["__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"],
                   "separator": ";", "regex": "Pod;(.*)", "target_label": "pod", "replacement": "${1}"})
        for src, dst in [("namespace", "namespace"), ("service_name", "service"), ("pod_name", "pod"),
                         ("pod_container_name", "container"), ("service_name", "job")]:
            rl.append({"source_labels": [f"__meta_kubernetes_{src}"], "target_label": dst})
        rl.append({"target_label": "endpoint", "replacement": ep["port"]})
        for r in ep.get("relabelings", []):
            rl.append({snake(k): v for k, v in r.items()})
        job = {"job_name": f"serviceMonitor/{sm['metadata']['namespace']}/{sm['metadata']['name']}/{i}",
               "honor_labels": bool(ep.get("honorLabels", False)),
               "scrape_interval": ep.get("interval", scrape), "scrape_timeout": ep.get("scrapeTimeout", "4s"),
               "metrics_path": ep.get("path", "/metrics"),
               "http_sd_configs": [{"url": f"{sd}/endpoints?namespaces={','.join(spec['namespaceSelector']['matchNames'])}",
                                    "refresh_interval": scrape}],
               "relabel_configs": rl}
        jobs.append(job)
assert len(jobs) == 2, jobs
cfg = {"global": {"scrape_interval": scrape, "evaluation_interval": scrape},
       "rule_files": [rules], "scrape_configs": jobs}
yaml.safe_dump(cfg, open(out, "w"), sort_keys=False)
EOF
promtool check config "$WORK/prom/prometheus.yml" >"$WORK/prom/check-config.log" 2>&1 ||
  { cat "$WORK/prom/check-config.log"; fail "promtool check config"; }

cat >"$WORK/prom/kube_sd.py" <<'EOF'
# kube_sd.py APISERVER CA TOKEN — http_sd endpoint on 127.0.0.1:9091: GET /endpoints?namespaces=a,b
# returns the Endpoints of those namespaces as kubernetes_sd role "endpoints" does: one target per
# address and port, labelled __meta_kubernetes_{namespace,service_name,service_label_*,
# service_labelpresent_*,endpoint_port_name,endpoint_ready,endpoint_address_target_kind,
# endpoint_address_target_name,pod_name,pod_node_name,pod_container_name}.
import http.server, json, re, ssl, sys, urllib.parse, urllib.request
api, ca, token_file = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
def get(path):
    req = urllib.request.Request(api + path, headers={"Authorization": "Bearer " + open(token_file).read().strip()})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
        return json.load(r)
def san(k): return re.sub(r"[^a-zA-Z0-9_]", "_", k)
def groups(ns):
    out = []
    svcs = {s["metadata"]["name"]: s for s in get(f"/api/v1/namespaces/{ns}/services")["items"]}
    pods = {p["metadata"]["name"]: p for p in get(f"/api/v1/namespaces/{ns}/pods")["items"]}
    for ep in get(f"/api/v1/namespaces/{ns}/endpoints")["items"]:
        svc = svcs.get(ep["metadata"]["name"])
        base = {"__meta_kubernetes_namespace": ns, "__meta_kubernetes_service_name": ep["metadata"]["name"]}
        for k, v in ((svc or {}).get("metadata", {}).get("labels") or {}).items():
            base[f"__meta_kubernetes_service_label_{san(k)}"] = v
            base[f"__meta_kubernetes_service_labelpresent_{san(k)}"] = "true"
        for sub in ep.get("subsets") or []:
            for ready, addrs in (("true", sub.get("addresses") or []), ("false", sub.get("notReadyAddresses") or [])):
                for a in addrs:
                    for port in sub.get("ports") or []:
                        l = dict(base)
                        l["__meta_kubernetes_endpoint_port_name"] = port.get("name", "")
                        l["__meta_kubernetes_endpoint_ready"] = ready
                        ref = a.get("targetRef") or {}
                        if ref:
                            l["__meta_kubernetes_endpoint_address_target_kind"] = ref.get("kind", "")
                            l["__meta_kubernetes_endpoint_address_target_name"] = ref.get("name", "")
                        pod = pods.get(ref.get("name")) if ref.get("kind") == "Pod" else None
                        if pod:
                            l["__meta_kubernetes_pod_name"] = pod["metadata"]["name"]
                            l["__meta_kubernetes_pod_node_name"] = pod["spec"].get("nodeName", "")
                            for c in pod["spec"]["containers"]:
                                if any(cp["containerPort"] == port["port"] for cp in c.get("ports") or []):
                                    l["__meta_kubernetes_pod_container_name"] = c["name"]
                        out.append({"targets": [f'{a["ip"]}:{port["port"]}'], "labels": l})
    return out
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        try:
            nss = urllib.parse.parse_qs(u.query)["namespaces"][0].split(",")
            body = json.dumps([g for ns in nss for g in groups(ns)]).encode()
            self.send_response(200)
        except Exception as e:
            body = str(e).encode()
            self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", 9091), H).serve_forever()
EOF
setsid nsenter --net="/run/netns/$NETNS" -- python3 "$WORK/prom/kube_sd.py" "$APISERVER_URL" \
  "$NODE_DIR/apiserver/pki/ca.crt" "$WORK/prom/token" </dev/null >"$WORK/prom/kube_sd.log" 2>&1 &
SD_PID=$!
setsid nsenter --net="/run/netns/$NETNS" -- prometheus --config.file="$WORK/prom/prometheus.yml" \
  --storage.tsdb.path="$WORK/prom/data" --web.listen-address=127.0.0.1:9090 \
  --storage.tsdb.retention.time=1h </dev/null >"$WORK/prom/prometheus.log" 2>&1 &
PROM_PID=$!
say "prometheus pid $PROM_PID in netns $NETNS (127.0.0.1:9090 there only)"

# Every check against Prometheus' HTTP API runs in the netns (python, urllib).
promcheck() { in_net python3 "$WORK/prom/check.py" "$@"; }
cat >"$WORK/prom/check.py" <<'EOF'
import json, math, re, sys, time, urllib.parse, urllib.request, yaml
BASE = "http://127.0.0.1:9090/api/v1/"
def api(path, **params):
    url = BASE + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        d = json.load(r)
    assert d["status"] == "success", d
    return d["data"]
def query(q):
    return api("query", query=q)["result"]
cmd = sys.argv[1]
if cmd == "targets":  # wants N: all active targets up and at least N of them
    want = int(sys.argv[2])
    try:
        t = api("targets")["activeTargets"]
    except Exception as e:
        print(f"not yet: {e}"); sys.exit(1)
    up = [x for x in t if x["health"] == "up"]
    print(" ".join(f'{x["labels"].get("job")}/{x["labels"].get("pod")}@{x["labels"].get("node", "-")}={x["health"]}' for x in t))
    sys.exit(0 if len(up) >= want and len(up) == len(t) else 1)
if cmd == "samples":  # wants N samples of up per target
    want = int(sys.argv[2])
    r = query("count_over_time(up[5m])")
    sys.exit(0 if r and min(float(x["value"][1]) for x in r) >= want else 1)
if cmd == "dashboard":
    cm = yaml.safe_load(open(sys.argv[2]))
    dash = json.loads(cm["data"]["feedguard.json"])
    rate = sys.argv[3]
    exprs = []
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q.strip())
            assert m, q
            exprs.append((f"variable ${v['name']}", f"count by ({m.group(2)}) ({m.group(1)})"))
    for p in dash["panels"]:
        for t in p.get("targets", []):
            exprs.append((f'panel "{p["title"]}" {t.get("legendFormat", "")}', t["expr"]))
    # Panels whose series exist only where NVML reads the GPUs: evaluated, not required to return.
    needs_nvml = {"GPU time lost to CPU starvation (observed)"}
    bad = 0
    nvml_only = 0
    for name, e in exprs:
        q = e.replace("$__rate_interval", rate).replace("$node", ".*")
        if any(f'panel "{t}"' in name for t in needs_nvml):
            try:
                r = query(q)
                print(f"ok   {name}: {len(r)} series (needs NVML: this node has none, so none are required)  <- {q}")
            except Exception as ex:
                print(f"FAIL {name}: {q}: {ex}"); bad += 1
            nvml_only += 1
            continue
        try:
            r = query(q)
        except Exception as ex:
            print(f"FAIL {name}: {q}: {ex}"); bad += 1; continue
        vals = [x["value"][1] for x in r]
        finite = [v for v in vals if not math.isnan(float(v))]
        labels = ["{" + ",".join(f"{k}={v}" for k, v in sorted(x["metric"].items())) + "}" for x in r][:4]
        ok = bool(r) and bool(finite)
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(r)} series, values {vals[:4]} {' '.join(labels)}  <- {q}")
    print(f"{len(exprs)} queries ({nvml_only} needing NVML evaluated only), {bad} without a finite series")
    sys.exit(1 if bad else 0)
if cmd == "rules":
    groups = api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    bad = [f'{r["name"]}: health {r["health"]} {r.get("lastError", "")}' for r in rules if r["health"] != "ok"]
    active = [f'{r["name"]}: {a["state"]} {a["labels"]}' for r in rules for a in r.get("alerts", [])]
    # Every vector selector of every rule must match a real series (not a misspelt job label).
    sel = re.compile(r"\b([a-z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
    empty = []
    n_sel = 0
    for r in rules:
        for m in sel.finditer(r["query"]):
            n_sel += 1
            if not query(f"{m.group(1)}{{{m.group(2)}}}"):
                empty.append(f'{r["name"]}: {m.group(0)}')
    print(f"{len(rules)} rules loaded, {n_sel} selectors; health not ok: {bad}; pending/firing: {active}; selectors without series: {empty}")
    sys.exit(0 if rules and not bad and not active and not empty else 1)
sys.exit(2)
EOF

t1=$SECONDS
until out="$(promcheck targets 3 2>&1)"; do
  kill -0 "$PROM_PID" 2>/dev/null || { tail -n 20 "$WORK/prom/prometheus.log"; fail "prometheus exited"; }
  ((SECONDS - t1 < 90)) || { echo "$out"; tail -n 20 "$WORK/prom/prometheus.log"; fail "targets not all up within 90 s"; }
  sleep 2
done
pass "discovery (Endpoints via the API server, ServiceAccount token; http_sd) found and scraped in $((SECONDS - t1))s: $out"

# ---- the fence, applied while Prometheus scrapes -------------------------------------------
$K label node "$NODE_NAME" nvidia.com/gpu.present=true --overwrite >/dev/null
POLICY=obs-trainers
fence_policy "$POLICY" Idle | $K apply -f - >/dev/null
nuid="$($K -n "$WNS" get pods -l app=neighbour -o 'jsonpath={.items[0].metadata.uid}')"
tuid="$($K -n "$WNS" get pods -l app=trainer -o 'jsonpath={.items[0].metadata.uid}')"
t1=$SECONDS
until [[ "$(cat "$CPU/kubepods/burstable/pod$nuid/cpu.idle" 2>/dev/null)" == 1 ]]; do
  ((SECONDS - t1 < 60)) || fail "neighbour not fenced (cpu.idle=1) within 60 s by the unprivileged agent"
  sleep 0.2
done
[[ "$(cat "$CPU/kubepods/burstable/pod$tuid/cpu.idle")" == 0 ]] || fail "trainer cpu.idle is not 0"
pass "unprivileged agent fenced the neighbour's kubelet-made pod cgroup (cpu.idle=1) $((SECONDS - t1))s after kubectl apply"
t1=$SECONDS
until [[ "$($K get fencepolicy "$POLICY" -o 'jsonpath={.status.nodes.enforced}')" == 1 ]]; do
  ((SECONDS - t1 < 60)) || fail "policy status: $($K get fencepolicy "$POLICY" -o 'jsonpath={.status}')"
  sleep 1
done

# Let a few scrapes cover the fence (the rate windows need two samples after it).
sleep 12
until promcheck samples 6 >/dev/null 2>&1; do
  ((SECONDS - t1 < 90)) || fail "too few scrapes"
  sleep 2
done

# ---- dashboard queries and rules through the HTTP API --------------------------------------
promcheck dashboard "$WORK/prom/dashboard-cm.yaml" "$RATE_INTERVAL" | tee "$WORK/prom/dashboard.txt" ||
  fail "dashboard queries without series (above)"
pass "every dashboard query returned series ($(tail -n 1 "$WORK/prom/dashboard.txt"))"
out="$(promcheck rules)" || { echo "$out"; fail "alert rules in Prometheus"; }
pass "alert rules in Prometheus: $out"

# ---- withdraw and uninstall ----------------------------------------------------------------
$K delete fencepolicy "$POLICY" --timeout=90s >/dev/null || fail "policy deletion did not finish in 90 s"
[[ "$(cat "$CPU/kubepods/burstable/pod$nuid/cpu.idle")" == 0 ]] || fail "neighbour still cpu.idle=1 after the policy deletion"
pass "policy deleted: the unprivileged agent reverted the neighbour (cpu.idle=0)"
t1=$SECONDS
"$HELM" uninstall "$RELEASE" --namespace "$RNS" --wait --timeout 120s >"$WORK/helm-uninstall.log" 2>&1 ||
  { cat "$WORK/helm-uninstall.log"; fail "helm uninstall failed"; }
pass "helm uninstall in $((SECONDS - t1))s"

node_exit_hook 0
node_down
rm -rf "$WORK/prom/data"
say "PASS (total $((SECONDS - T0))s)"

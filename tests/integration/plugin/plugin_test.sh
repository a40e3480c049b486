#!/usr/bin/env bash
# plugin_test.sh — kubectl-feedguard against a real kube-apiserver with the real kubectl: installs
# crds/starvationreport.yaml and crds/fencepolicy.yaml, checks the "no report" answer, creates the
# pods of plugin/testdata/pods.json (with nodeName: no kubelet runs them) and StarvationReport
# `cluster` (created, then its status PUT from plugin/testdata/starvation_report.json naming
# those pods), then checks `top` (rows, order, -n, -A, -o json), `explain` (windows, the policy
# `kubectl apply --dry-run=server` accepts, -o json, pods outside the report), --context and the
# context's namespace, kubectl's plugin lookup (`kubectl feedguard` from PATH), and RBAC: a
# ServiceAccount's token without, then with, get on starvationreports and on pods; a bad token.
#
# Usage: plugin_test.sh TESTBED_DIR KUBECTL_FEEDGUARD
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
TESTBED_DIR="${1:?usage: plugin_test.sh TESTBED_DIR KUBECTL_FEEDGUARD}"
PLUGIN="${2:?usage: plugin_test.sh TESTBED_DIR KUBECTL_FEEDGUARD}"
[[ -x "$PLUGIN" ]] || { echo "FATAL: no plugin binary at $PLUGIN" >&2; exit 1; }

# The test bed's kubectl (built at the server's version) first on PATH.
# shellcheck source=../../testbed/versions.env
source "$ROOT/tests/testbed/versions.env"
# shellcheck source=../testbed_client.sh
source "$HERE/../testbed_client.sh"
testbed_client_init "$TESTBED_DIR"

WORK="$(mktemp -d)"
trap 'cleanup' EXIT
kc() { "$KUBECTL" --cache-dir "$WORK/kcache" --request-timeout=30s "$@"; }

PASSED=0 FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL - $*"; }

# Namespaces of this test only (the server is shared; the fixtures' ml, batch, etl and vision
# become fgp-ml, …). Namespaces are left behind: no controller finalises a deleted one here.
NS_PREFIX=fgp-
SA=fgp-viewer
RBAC_OBJECTS=(clusterrole/fgp-read-reports clusterrole/fgp-read-pods
  clusterrolebinding/fgp-read-reports clusterrolebinding/fgp-read-pods)

cleanup() {
  kc delete starvationreport cluster --ignore-not-found --wait=false >/dev/null 2>&1
  kc delete "${RBAC_OBJECTS[@]}" --ignore-not-found >/dev/null 2>&1
  kc delete serviceaccount "$SA" -n fgp-ml --ignore-not-found >/dev/null 2>&1
  for ns in ml batch etl vision; do
    kc delete pods --all -n "$NS_PREFIX$ns" --grace-period=0 --force --wait=false >/dev/null 2>&1
  done
  rm -rf "$WORK"
}

# plugin ARGS... — the binary; its stdout in $OUT, stderr in $ERR, exit code in $RC.
plugin() {
  OUT="$(timeout 60 "$PLUGIN" "$@" 2>"$WORK/stderr")"
  RC=$?
  ERR="$(cat "$WORK/stderr")"
}

# ---- CRDs --------------------------------------------------------------------------------
for crd in starvationreport fencepolicy; do
  kc apply -f "$ROOT/crds/$crd.yaml" >/dev/null || fail "kubectl apply -f crds/$crd.yaml failed"
done
kc wait --for=condition=Established --timeout=60s crd/starvationreports.feedguard.io \
  crd/fencepolicies.feedguard.io >/dev/null || fail "the CRDs did not become Established"
pass "CRDs installed and Established"

# ---- no report yet -----------------------------------------------------------------------
kc delete starvationreport cluster --ignore-not-found >/dev/null 2>&1
want="kubectl-feedguard: no StarvationReport yet: is feedguard installed with observation on (helm value observe.enabled) and has an agent reported?"
for cmd in "top" "explain trainer-a"; do
  # shellcheck disable=SC2086 # the command's words
  plugin $cmd
  if [[ $RC -eq 1 && "$ERR" == "$want" && -z "$OUT" ]]; then
    pass "$cmd without a StarvationReport: exit 1, '$ERR'"
  else
    bad "$cmd without a StarvationReport: exit $RC, stdout '$OUT', stderr '$ERR'"
  fi
done

# ---- the pods and the report -------------------------------------------------------------
for ns in ml batch etl vision; do
  kc create namespace "$NS_PREFIX$ns" --dry-run=client -o yaml | kc apply -f - >/dev/null ||
    fail "namespace $NS_PREFIX$ns"
done
jq --arg p "$NS_PREFIX" '.items |= map(.metadata.namespace = $p + .metadata.namespace)' \
  "$ROOT/plugin/testdata/pods.json" >"$WORK/pods.json"
kc apply -f "$WORK/pods.json" >/dev/null || fail "creating the fixture pods failed"
n_pods="$(kc get pods -A -o json | jq --arg p "$NS_PREFIX" '[.items[] | select(.metadata.namespace | startswith($p))] | length')"
[[ "$n_pods" == "$(jq '.items | length' "$WORK/pods.json")" ]] || fail "expected every fixture pod, got $n_pods"
pass "$n_pods pods created (nodeName set, never run)"

kc create -f - >/dev/null <<'EOF' || fail "creating StarvationReport/cluster failed"
apiVersion: feedguard.io/v1alpha1
kind: StarvationReport
metadata: {name: cluster}
spec: {}
EOF
# The report as a controller writes it: the fixture's status, the test's namespaces, the pods'
# real uids, updated 30 s ago; PUT to /status (kubectl replace --subresource=status).
uids="$(kc get pods -A -o json | jq -c '[.items[] | {key: (.metadata.namespace + "/" + .metadata.name), value: .metadata.uid}] | from_entries')"
updated="$(date -u -d '30 seconds ago' +%Y-%m-%dT%H:%M:%SZ)"
kc get starvationreport cluster -o json |
  jq --slurpfile fx "$ROOT/plugin/testdata/starvation_report.json" --arg p "$NS_PREFIX" \
    --argjson uids "$uids" --arg updated "$updated" '
    def ns: if . == null then null else $p + . end;
    .status = ($fx[0].status
      | .updated = $updated
      | .pods |= map(.namespace |= ns
          | .uid = ($uids[.namespace + "/" + .name] // .uid)
          | .windows |= map(.contenders |= map(if .kind == "Pod" then
              (.namespace |= ns | .uid = ($uids[.namespace + "/" + .name] // .uid)) else . end)))
      | .namespaces |= map(.name |= ns))' >"$WORK/report.json"
if out="$(kc replace --subresource=status -f "$WORK/report.json" 2>&1)"; then
  pass "StarvationReport/cluster status written through /status: $out"
else
  fail "PUT /status refused: $out"
fi
got="$(kc get starvationreports --no-headers 2>&1)"
if [[ "$(awk '{print $1, $2, $3, $4, $5}' <<<"$got")" == "cluster 4 3 92 2" ]]; then
  pass "kubectl get starvationreports: $got"
else
  bad "kubectl get starvationreports: $got (want cluster 4 3 92 2 …)"
fi

# ---- top -----------------------------------------------------------------------------------
plugin top
if [[ $RC -eq 0 && "$OUT" == *"no GPU pod is starving in namespace default"* &&
      "$OUT" == *"3 starving pods in other namespaces (-A shows every namespace)"* ]]; then
  pass "top in the context's namespace (default): none there, 3 elsewhere"
else
  bad "top: exit $RC, $OUT $ERR"
fi
head_re='^StarvationReport/cluster \(updated [0-9]+s ago\): 2 nodes reporting, 4 GPU pods, 3 starving \(waited behind others >= 5% of 10 min\), GPU time lost over 10 min: 92\.0s$'
plugin top -A
rows="$(sed -n '3,$p' <<<"$OUT" | awk '$1 ~ /^fgp-/ {print $1 "/" $2}' | paste -sd' ')"
if [[ $RC -eq 0 && "$(head -1 <<<"$OUT")" =~ $head_re &&
      "$(sed -n 2p <<<"$OUT")" =~ ^NAMESPACE\ +POD\ +NODE\ +WAIT%\ +BY-PODS\ +BY-NODE\ +OWN\ +GPU-LOST-10M\ +GPU-LOST-1H\ +TOP\ CONTENDERS$ &&
      "$rows" == "fgp-vision/trainer-c fgp-ml/trainer-a fgp-ml/trainer-b" &&
      "$OUT" == *"n/a: no NVML on some nodes: wait only"* ]]; then
  pass "top -A: $rows, worst first (GPU time lost; trainer-c, with no NVML figure, by its wait, which bounds its loss)"
else
  bad "top -A: exit $RC, rows '$rows':
$OUT
$ERR"
fi
a_row="$(grep '^fgp-ml  *trainer-a ' <<<"$OUT")"
if [[ "$a_row" =~ gpu-node-1\ +20\.0%\ +13\.3%\ +3\.3%\ +3\.3%\ +80\.0s\ +534\.5s\ +fgp-batch/spin-a\ \(60\.0s\),\ fgp-batch/spin-c\ \(40\.0s\),\ fgp-etl/loader-0\ \(30\.0s\)$ ]]; then
  pass "top -A: trainer-a's row: $a_row"
else
  bad "top -A: trainer-a's row: '$a_row'"
fi
plugin top -n fgp-ml -o json
if [[ $RC -eq 0 ]] && jq -e '[.pods[].name] == ["trainer-a", "trainer-b"] and .namespace == "fgp-ml"
    and .starvingElsewhere == 1 and .pods[0].gpuLostSeconds10m == 80 and .pods[0].gpuSampled
    and .cluster.gpuPods == 4 and (.ageSeconds | type) == "number"' <<<"$OUT" >/dev/null; then
  pass "top -n fgp-ml -o json parses: $(jq -c '[.pods[].name]' <<<"$OUT")"
else
  bad "top -n fgp-ml -o json: exit $RC, $OUT $ERR"
fi
plugin top -A -o json --limit 1
if [[ $RC -eq 0 ]] && jq -e '[.pods[].name] == ["trainer-c"] and .pods[0].gpuLostSeconds10m == null
    and (.pods[0].gpuSampled | not) and .omittedByLimit == 2 and .namespace == null' <<<"$OUT" >/dev/null; then
  pass "top -A -o json --limit 1: trainer-c, 2 omitted"
else
  bad "top -A -o json --limit 1: exit $RC, $OUT $ERR"
fi

# ---- explain -------------------------------------------------------------------------------
# explain_applies NS POD — explain's whole output goes to the API server's dry run.
explain_applies() {
  plugin explain "$2" -n "$1"
  [[ $RC -eq 0 ]] || { bad "explain $2: exit $RC: $ERR"; return 1; }
  printf '%s\n' "$OUT" >"$WORK/explain-$2.yaml"
  local applied
  if applied="$(kc apply --dry-run=server -f "$WORK/explain-$2.yaml" 2>&1)"; then
    pass "explain $2 | kubectl apply --dry-run=server -f -: $applied"
  else
    bad "explain $2: the API server refused the policy: $applied
$OUT"
    return 1
  fi
}
explain_applies fgp-ml trainer-a
for want in "# GPU pod fgp-ml/trainer-a on node gpu-node-1, CPU request 4.00 cores." \
  "# 1m       60.0s     12.0s (20.0%)    20.0%     0.0%      0.0%   psi      3.10 cores of 4.00 requested" \
  "# 10m      10m0s     120.0s (20.0%)   13.3%     3.3%      3.3%   psi      3.10 cores of 4.00 requested   0.0s        50%        80.0s (20.0s..100.0s)" \
  "# 1h       1h0m      11m40s (19.4%)   19.4%     0.0%      0.0%   psi      3.06 cores of 4.00 requested" \
  "#   10m: fgp-batch/spin-a (60.0s), fgp-batch/spin-c (40.0s), fgp-etl/loader-0 (30.0s), node (10.0s)" \
  "# Contender pods that no longer exist (not considered): fgp-batch/spin-gone." \
  "  mode: DryRun"; do
  if grep -qF -- "$want" "$WORK/explain-trainer-a.yaml"; then pass "explain trainer-a says: $want"; else bad "explain trainer-a lacks: $want"; fi
done
# The policy as the API server would store it (dry run: defaults filled, nothing kept).
stored="$(kc apply --dry-run=server -f "$WORK/explain-trainer-a.yaml" -o json 2>&1)"
if jq -e '.metadata.name == "fence-trainer-a" and .spec.mode == "DryRun"
    and .spec.trainers.podSelector.matchLabels == {"app": "trainer", "job-name": "resnet", "team": "vision"}
    and .spec.trainers.namespaceSelector.matchLabels == {"kubernetes.io/metadata.name": "fgp-ml"}
    and .spec.trainers.requireGPU == true
    and .spec.neighbours == {"fence": "Idle", "podSelector": {"matchLabels": {"tier": "batch"}}}' \
  <<<"$stored" >/dev/null; then
  pass "explain trainer-a's policy: per-instance labels dropped, neighbours by the shared tier=batch"
else
  bad "explain trainer-a's policy as stored: $stored"
fi
[[ "$(kc get fencepolicy fence-trainer-a -o name 2>/dev/null)" == "" ]] && pass "the dry run stored nothing"
explain_applies fgp-ml trainer-b &&
  grep -qF 'neighbours: the 2 contender pods found all carry app=spin, tier=batch.' "$WORK/explain-trainer-b.yaml" &&
  pass "explain trainer-b: neighbours app=spin, tier=batch"
explain_applies fgp-vision trainer-c
for want in "# FencePolicy vision-trainers covers it as a trainer." "n/a: no NVML on its node: wait only." \
  "# The main contender is the node itself" "A FencePolicy cannot fence host processes" \
  "--system-reserved" "reservedSystemCPUs" \
  "# kubectl label pod -n fgp-vision trainer-c feedguard.io/role=trainer"; do
  if grep -qF -- "$want" "$WORK/explain-trainer-c.yaml"; then pass "explain trainer-c says: $want"; else bad "explain trainer-c lacks: $want"; fi
done
plugin explain trainer-a -n fgp-ml -o json
if [[ $RC -eq 0 ]] && jq -e '.pod.name == "trainer-a" and (.pod.windows | length) == 3
    and .suggestedPolicy.kind == "FencePolicy" and .mainContender.name == "spin-a"' <<<"$OUT" >/dev/null; then
  jq '.suggestedPolicy' <<<"$OUT" >"$WORK/policy.json"
  if applied="$(kc apply --dry-run=server -f "$WORK/policy.json" 2>&1)"; then
    pass "explain -o json parses; its suggestedPolicy applies too: $applied"
  else
    bad "explain -o json: suggestedPolicy refused: $applied"
  fi
else
  bad "explain -o json: exit $RC, $OUT $ERR"
fi
plugin explain -A trainer-c -o json
[[ $RC -eq 0 && "$(jq -r .pod.namespace <<<"$OUT")" == fgp-vision ]] && pass "explain -A finds trainer-c in fgp-vision" ||
  bad "explain -A trainer-c: exit $RC, $ERR"

plugin explain trainer-e -n fgp-ml
[[ $RC -eq 0 && "$OUT" == "pod fgp-ml/trainer-e is not in the StarvationReport: it did not starve noticeably (waited behind others less than 5% of the last 10 min; its node gpu-node-2 reports 2 GPU pods, 1 starving)." ]] &&
  pass "explain trainer-e (its node reports): $OUT" || bad "explain trainer-e: exit $RC, $OUT $ERR"
plugin explain trainer-f -n fgp-ml -o json
[[ $RC -eq 0 && "$(jq -r .absence <<<"$OUT")" == NotObserved ]] &&
  pass "explain trainer-f (its node reports nothing): $(jq -r .message <<<"$OUT")" || bad "explain trainer-f: exit $RC, $OUT $ERR"
plugin explain notebook -n fgp-ml
[[ $RC -eq 0 && "$OUT" == *"it is not a GPU pod"* ]] && pass "explain notebook: $OUT" || bad "explain notebook: exit $RC, $OUT $ERR"
plugin explain ghost -n fgp-ml
[[ $RC -eq 1 && "$ERR" == "kubectl-feedguard: pod fgp-ml/ghost not found" ]] && pass "explain ghost: exit 1, $ERR" ||
  bad "explain ghost: exit $RC, $OUT $ERR"

# ---- --context, and the context's namespace ------------------------------------------------
# A kubeconfig whose current context is a dead server and whose `testbed` context (namespace
# fgp-ml) is the test bed.
cp "$KUBECONFIG" "$WORK/two-contexts"
cluster="$(kc config view --raw -o jsonpath='{.contexts[0].context.cluster}')"
user="$(kc config view --raw -o jsonpath='{.contexts[0].context.user}')"
{
  kc --kubeconfig "$WORK/two-contexts" config set-cluster dead --server=https://127.0.0.1:1 --insecure-skip-tls-verify=true &&
    kc --kubeconfig "$WORK/two-contexts" config set-context dead --cluster=dead --user="$user" &&
    kc --kubeconfig "$WORK/two-contexts" config set-context testbed --cluster="$cluster" --user="$user" --namespace=fgp-ml &&
    kc --kubeconfig "$WORK/two-contexts" config use-context dead
} >/dev/null || fail "writing the two-context kubeconfig"
plugin --kubeconfig "$WORK/two-contexts" top
[[ $RC -eq 1 && "$ERR" == "kubectl-feedguard: cannot reach the API server at https://127.0.0.1:1:"* ]] &&
  pass "current context (dead): $ERR" || bad "current context dead: exit $RC, $OUT $ERR"
plugin --kubeconfig "$WORK/two-contexts" --context testbed top
[[ $RC -eq 0 && "$OUT" == *"fgp-ml      trainer-a"* && "$OUT" != *trainer-c* ]] &&
  pass "--context testbed: its namespace fgp-ml by default" || bad "--context testbed: exit $RC, $OUT $ERR"
OUT="$(KUBECONFIG="$WORK/two-contexts" timeout 60 "$PLUGIN" top --context=testbed -o json 2>&1)"
[[ "$(jq -c '[.pods[].name]' <<<"$OUT" 2>/dev/null)" == '["trainer-a","trainer-b"]' ]] &&
  pass "--context from \$KUBECONFIG" || bad "--context with \$KUBECONFIG: $OUT"
plugin --kubeconfig "$WORK/two-contexts" --context nope top
[[ $RC -eq 1 && "$ERR" == *"kubeconfig has no context named 'nope'"* ]] && pass "--context nope: $ERR" || bad "--context nope: exit $RC, $ERR"

# ---- as a kubectl plugin -------------------------------------------------------------------
mkdir -p "$WORK/bin" && ln -s "$(realpath "$PLUGIN")" "$WORK/bin/kubectl-feedguard"
listed="$(PATH="$WORK/bin:$PATH" kc plugin list 2>/dev/null)"
# kubectl looks a plugin up only when no flag comes before its name.
OUT="$(PATH="$WORK/bin:$PATH" "$KUBECTL" feedguard top -A 2>&1)"
if [[ "$listed" == *"$WORK/bin/kubectl-feedguard"* && "$OUT" =~ fgp-vision\ +trainer-c ]]; then
  pass "kubectl plugin list finds it; kubectl feedguard top -A runs it"
else
  bad "kubectl feedguard: plugin list '$listed'; top: $OUT"
fi

# ---- RBAC --------------------------------------------------------------------------------
kc create serviceaccount "$SA" -n fgp-ml --dry-run=client -o yaml | kc apply -f - >/dev/null || fail "serviceaccount"
token="$(kc create token "$SA" -n fgp-ml --duration=10m)" || fail "kubectl create token"
server="$(kc config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
ca="$(kc config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
write_token_kubeconfig() {  # FILE TOKEN
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
current-context: viewer
clusters: [{name: tb, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: viewer, user: {token: "$2"}}]
contexts: [{name: viewer, context: {cluster: tb, user: viewer, namespace: fgp-ml}}]
EOF
}
write_token_kubeconfig "$WORK/viewer" "$token"
write_token_kubeconfig "$WORK/stranger" "not-a-token"
plugin --kubeconfig "$WORK/stranger" top
[[ $RC -eq 1 && "$ERR" == *"did not accept your credentials (401 Unauthorized)"* ]] && pass "bad token: $ERR" ||
  bad "bad token: exit $RC, $ERR"
plugin --kubeconfig "$WORK/viewer" top
[[ $RC -eq 1 && "$ERR" == "kubectl-feedguard: forbidden: you need RBAC permission to get starvationreports.feedguard.io cluster-wide"* ]] &&
  pass "no RBAC: $ERR" || bad "no RBAC: exit $RC, $ERR"
kc create clusterrole fgp-read-reports --verb=get --resource=starvationreports.feedguard.io >/dev/null &&
  kc create clusterrolebinding fgp-read-reports --clusterrole=fgp-read-reports --serviceaccount="fgp-ml:$SA" >/dev/null ||
  fail "granting get starvationreports"
ok_top=0
for ((i = 0; i < 30; i++)); do  # RBAC caches: a grant is seen within moments
  plugin --kubeconfig "$WORK/viewer" top
  [[ $RC -eq 0 ]] && { ok_top=1; break; }
  sleep 1
done
[[ $ok_top == 1 && "$OUT" == *"fgp-ml      trainer-a"* ]] && pass "get starvationreports granted: top works" ||
  bad "after the grant: exit $RC, $ERR"
plugin --kubeconfig "$WORK/viewer" explain trainer-a
[[ $RC -eq 1 && "$ERR" == "kubectl-feedguard: forbidden: you need RBAC permission to get pods in namespace fgp-ml"* ]] &&
  pass "explain without get pods: $ERR" || bad "explain without get pods: exit $RC, $ERR"
kc create clusterrole fgp-read-pods --verb=get --resource=pods >/dev/null &&
  kc create clusterrolebinding fgp-read-pods --clusterrole=fgp-read-pods --serviceaccount="fgp-ml:$SA" >/dev/null ||
  fail "granting get pods"
ok_explain=0
for ((i = 0; i < 30; i++)); do
  plugin --kubeconfig "$WORK/viewer" explain trainer-a
  [[ $RC -eq 0 ]] && { ok_explain=1; break; }
  sleep 1
done
[[ $ok_explain == 1 && "$OUT" == *"name: fence-trainer-a"* ]] &&
  pass "get starvationreports + get pods (the README's RBAC) is enough for explain" ||
  bad "explain with both grants: exit $RC, $ERR"

echo "plugin_test: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]

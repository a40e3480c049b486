#!/usr/bin/env bash
# testbed_selftest.sh — exercises testbed.sh on a private instance in DIR: up, both kubeconfigs,
# restart-apiserver (same port, data kept, new pid), compact (old resourceVersions answer 410),
# down (exactly our processes gone, DIR removed), and that `up` fails loudly without binaries.
# shellcheck disable=SC2015,SC1091,SC2153  # pass/bad always succeed; env files exist at run time
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TB="$HERE/testbed.sh"
DIR="${1:?usage: testbed_selftest.sh DIR}"
KUBECTL="${KUBECTL:-$(command -v kubectl)}" || { echo "FATAL: kubectl is not installed"; exit 1; }

PASSED=0 FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL - $*"; }
trap '"$TB" down "$DIR" >/dev/null 2>&1' EXIT
# gone PID — the process exited (a zombie not yet reaped by init counts as exited); waits <= 5 s.
gone() {
  local i
  for ((i = 0; i < 50; i++)); do
    [[ ! -e "/proc/$1" || "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" == Z ]] && return 0
    sleep 0.1
  done
  return 1
}

"$TB" up "$DIR" || { echo "FATAL: testbed.sh up failed"; exit 1; }
DIR="$(cd "$DIR" && pwd)"
# shellcheck disable=SC1091
source "$DIR/env"
kc() { "$KUBECTL" --kubeconfig "$1" --request-timeout=20s "${@:2}"; }
curl_api() { curl -sS --max-time 10 --cacert "$CA_CERT" --cert "$ADMIN_CERT" --key "$ADMIN_KEY" "$@"; }

[[ "$(kc "$KUBECONFIG" get --raw /readyz 2>&1)" == ok ]] && pass "readyz via kubeconfig" || bad "readyz via kubeconfig"
[[ "$(kc "$KUBECONFIG_PATHS" get --raw /readyz 2>&1)" == ok ]] && pass "readyz via kubeconfig-paths" || bad "readyz via kubeconfig-paths"
ver="$(curl_api "$APISERVER_URL/version" | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p')"
[[ "$ver" == "$K8S_VERSION" ]] && pass "server version $ver" || bad "server version '$ver', want $K8S_VERSION"
who="$(kc "$KUBECONFIG" auth whoami -o jsonpath='{.status.userInfo.groups}' 2>&1)"
[[ "$who" == *system:masters* ]] && pass "admin user is in system:masters" || bad "whoami groups: $who"
# RBAC is on: an unauthenticated request may read /readyz but not list namespaces.
code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 --cacert "$CA_CERT" "$APISERVER_URL/api/v1/namespaces")"
[[ "$code" == 401 || "$code" == 403 ]] && pass "anonymous list refused ($code)" || bad "anonymous list answered $code"
# Pods can be created without a ServiceAccount token controller.
if kc "$KUBECONFIG" run selftest-pod --image=busybox --restart=Never >/dev/null 2>&1; then
  pass "pod created without the ServiceAccount admission plugin"
else
  bad "pod creation failed"
fi

kc "$KUBECONFIG" create configmap selftest-cm --from-literal=a=1 >/dev/null || bad "create configmap"
rv1="$(kc "$KUBECONFIG" get configmap selftest-cm -o jsonpath='{.metadata.resourceVersion}')"

old_pid="$APISERVER_PID"
if "$TB" restart-apiserver "$DIR"; then
  source "$DIR/env"
  [[ "$APISERVER_PID" != "$old_pid" ]] && gone "$old_pid" && pass "restart: new pid $APISERVER_PID, old $old_pid gone" || bad "restart: pid $old_pid -> $APISERVER_PID"
  got="$(kc "$KUBECONFIG" get configmap selftest-cm -o jsonpath='{.data.a}' 2>&1)"
  [[ "$got" == 1 ]] && pass "restart: same port, data kept" || bad "restart: configmap read '$got'"
else
  bad "restart-apiserver failed"
fi

for i in 2 3 4; do kc "$KUBECONFIG" patch configmap selftest-cm --type=merge -p "{\"data\":{\"a\":\"$i\"}}" >/dev/null; done
if rev="$("$TB" compact "$DIR")" && [[ "$rev" -gt "$rv1" ]]; then pass "compact at revision $rev"; else bad "compact failed ($rev)"; fi
out="$(curl_api -w '\nHTTP %{http_code}' "$APISERVER_URL/api/v1/namespaces/default/configmaps?resourceVersion=$rv1&resourceVersionMatch=Exact")"
[[ "$out" == *"HTTP 410"* ]] && pass "list at compacted resourceVersion $rv1: 410 Gone" || bad "list at $rv1: $out"
out="$(curl_api -w '\nHTTP %{http_code}' "$APISERVER_URL/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=$rv1&timeoutSeconds=3")"
if [[ "$out" == *"HTTP 410"* || "$out" == *'"code":410'* ]]; then
  pass "watch from $rv1: 410 ($(grep -o 'too old resource version[^"]*' <<<"$out" | head -1))"
else
  bad "watch from $rv1: $out"
fi

etcd_pid="$ETCD_PID" api_pid="$APISERVER_PID"
"$TB" down "$DIR" && pass "down" || bad "down failed"
gone "$etcd_pid" && gone "$api_pid" && pass "down: pids $etcd_pid and $api_pid gone" || bad "down: processes remain"
[[ ! -e "$DIR" ]] && pass "down: $DIR removed" || bad "down: $DIR remains"

out="$(FEEDGUARD_KUBE_APISERVER=/nonexistent/kube-apiserver "$TB" up "$DIR.nobin" 2>&1)"
rc=$?
[[ $rc -ne 0 && "$out" == *build.sh* ]] && pass "up without binaries fails: $(tail -1 <<<"$out" | cut -c1-120)" || bad "up without binaries: rc $rc: $out"

echo "testbed_selftest: $PASSED passed, $FAILED failed"
((FAILED == 0))

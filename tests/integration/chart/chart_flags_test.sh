#!/usr/bin/env bash
# chart_flags_test.sh — every command-line flag the chart passes to the binaries exists in them:
# renders charts/feedguard (defaults, and with every optional switch flipped), takes the
# controller's and the agent's container args and checks each --flag against
# `feedguard-controller --help` and `feedguard-agent run --help`. Catches a chart and a binary
# drifting apart (an unknown flag makes the binary exit at start: a crash-looping pod).
#
# Usage: chart_flags_test.sh CONTROLLER_BINARY AGENT_BINARY
# Environment: FEEDGUARD_HELM (default: the helm build pinned in tests/testbed/versions.env, made
#        by tests/testbed/build.sh helm).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CHART="$(cd "$HERE/../../.." && pwd)/charts/feedguard"
CONTROLLER="${1:?usage: chart_flags_test.sh CONTROLLER_BINARY AGENT_BINARY}"
AGENT="${2:?usage: chart_flags_test.sh CONTROLLER_BINARY AGENT_BINARY}"

fail() { echo "FATAL: $*" >&2; exit 1; }
# shellcheck source=../../testbed/versions.env
source "$HERE/../../testbed/versions.env"
HELM_BIN="$HELM"  # FEEDGUARD_HELM, else the pinned build in the cache
[[ -x "$HELM_BIN" ]] || fail "helm is not built. Run: tests/testbed/build.sh helm (or set FEEDGUARD_HELM)"
[[ -x "$CONTROLLER" ]] || fail "$CONTROLLER is not built (cmake --build ... --target feedguard-controller)"
[[ -x "$AGENT" ]] || fail "$AGENT is not built (cmake --build ... --target feedguard-agent)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"

"$CONTROLLER" --help >"$WORK/controller.help" 2>&1
"$AGENT" run --help >"$WORK/agent.help" 2>&1
grep -q -- '--' "$WORK/controller.help" || fail "feedguard-controller --help lists no flags: $(cat "$WORK/controller.help")"
grep -q -- '--' "$WORK/agent.help" || fail "feedguard-agent run --help lists no flags: $(cat "$WORK/agent.help")"

PASSED=0 FAILED=0
render() {
  "$HELM_BIN" template fg "$CHART" -n feedguard "$@" >"$WORK/render.yaml" || fail "helm template $* failed"
  python3 - "$WORK/render.yaml" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] in ("Deployment", "DaemonSet"):
        c = d["spec"]["template"]["spec"]["containers"][0]
        for a in c.get("args", []):
            if a.startswith("--"):
                print(d["kind"], a.split("=", 1)[0])
PY
}
VARIANTS=(
  ""
  "--set controller.agentIdentity=cert --set agent.tls.hostPathDir=/etc/feedguard/pki"
  "--set agent.kubelet.cpuManagerState=false --set agent.kubelet.podResources=false --set agent.nvidiaProcDriver=false --set agent.hostProc=false"
  "--set agent.kubelet.reservedCPUs=0-1 --set agent.cgroup.driver=systemd --set agent.cgroup.version=v2 --set agent.cgroup.root=/k --set agent.cgroup.runtime=containerd"
  "--set controller.leaderElection.enabled=false --set controller.replicas=1"
  "--set observe.enabled=false"
)
declare -A seen=()
for v in "${VARIANTS[@]}"; do
  # shellcheck disable=SC2086
  while read -r kind flag; do
    [[ -n "${seen[$kind $flag]:-}" ]] && continue
    seen[$kind $flag]=1
    if [[ "$kind" == Deployment ]]; then help="$WORK/controller.help" bin=feedguard-controller; else help="$WORK/agent.help" bin="feedguard-agent run"; fi
    if grep -qE -- "(^|[[:space:]])$flag([[:space:]=]|$)" "$help"; then
      PASSED=$((PASSED + 1)); echo "ok   - $bin knows $flag"
    else
      FAILED=$((FAILED + 1)); echo "FAIL - the chart passes $flag, but $bin --help does not list it"
    fi
  done < <(render $v)
done
((PASSED + FAILED >= 20)) || { echo "FAIL - only $((PASSED + FAILED)) flags found in the rendered chart"; FAILED=$((FAILED + 1)); }
echo "# passed $PASSED, failed $FAILED"
((FAILED == 0))

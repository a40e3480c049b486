#!/usr/bin/env bash
# run.sh — control-plane latency benchmark, one node (docs/DESIGN.md §8: policy change or new trainer
# pod → cgroups written, p99 ≤ 100 ms). Real kube-apiserver + etcd (private test bed), the kubelet
# stand-in on real cgroup v1, feedguard-controller and one feedguard-agent; the cluster helpers
# are tests/e2e/lib.sh, the timing is measure.py.
#
#   bench/control_plane/run.sh BUILD_DIR [POLICY_RUNS=40] [POD_RUNS=30]
#   → bench/results/control-plane.json and bench/results/control-plane.md
#   env: FG_BENCH_GAP_S (pause between policy edits, default 0.3), FG_BENCH_WORK (default /tmp/fg-bench-control-plane-$$), FG_BENCH_OUT (results dir)
# Needs root (real cgroups) and the test bed binaries (tests/testbed/build.sh).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="$(cd "${1:?usage: run.sh BUILD_DIR [POLICY_RUNS] [POD_RUNS]}" && pwd)"
POLICY_RUNS="${2:-40}"
POD_RUNS="${3:-30}"
GAP_S="${FG_BENCH_GAP_S:-0.3}"  # pause between policy edits
OUT="${FG_BENCH_OUT:-$REPO/bench/results}"
export FG_CONTROLLER="${FG_CONTROLLER:-$BUILD/controller/feedguard-controller}"
export FG_AGENT="${FG_AGENT:-$BUILD/agent/feedguard-agent}"
export FG_STANDIN="${FG_STANDIN:-$BUILD/tests/fixtures/kubelet/fg-kubelet-standin}"
# shellcheck source=tests/e2e/lib.sh
source "$REPO/tests/e2e/lib.sh"

[[ "$(id -u)" == 0 ]] || { echo "run.sh needs root (real cgroup v1 dirs)" >&2; exit 1; }
WORK="${FG_BENCH_WORK:-/tmp/fg-bench-control-plane-$$}"
rm -rf "$WORK"
fg_init "$WORK" || exit 1
trap 'fg_cleanup; [[ "${FG_BENCH_KEEP:-0}" == 1 ]] || rm -rf "$WORK"' EXIT
fg_check_prereqs || exit 1

NODE=bench-node
fg_testbed_up || exit 1
fg_install_crd || exit 1
fg_create_node "$NODE" nvidia.com/gpu.present=true || exit 1
for ns in ml batch feedguard-system; do fg_create_namespace "$ns" || exit 1; done
fg_standin_start systemd || exit 1
fg_create_pod ml trainer-1 "$NODE" feedguard.io/role=trainer 500 0 || exit 1
for i in 1 2 3; do fg_create_pod batch spin-$i "$NODE" app=spin 250 0 || exit 1; done
fg_controller_start ctl || exit 1
fg_controller_wait_leading ctl 30 || exit 1
fg_agent_start agent "$NODE" "127.0.0.1:${FG_GRPC_PORT[ctl]}"
fg_wait 30 "agent connected" fg_metric_is ctl feedguard_agents_connected 1 || exit 1
fg_kubectl apply -f - >/dev/null <<EOF || exit 1
apiVersion: feedguard.io/v1alpha1
kind: FencePolicy
metadata: {name: bench}
spec:
  nodeSelector: {matchLabels: {nvidia.com/gpu.present: "true"}}
  trainers:
    podSelector: {matchLabels: {feedguard.io/role: trainer}}
  neighbours:
    fence: Idle
EOF
IDLE="$(fg_pod_file batch spin-1 cpu cpu.idle)"
fg_wait 30 "policy enforced" fg_file_is "$IDLE" 1 || exit 1

echo "# policy edits: $POLICY_RUNS runs" >&2
python3 "$HERE/measure.py" policy --env "$FG_TESTBED_DIR/env" --policy bench --file "$IDLE" \
  --runs "$POLICY_RUNS" --gap-s "$GAP_S" --out "$WORK/policy.json" || exit 1
# Leave the policy on Idle for the new-pod runs.
fg_kubectl patch fencepolicy bench --type merge -p '{"spec":{"neighbours":{"fence":"Idle"}}}' >/dev/null
fg_wait 30 "back on Idle" fg_file_is "$IDLE" 1 || exit 1

echo "# new neighbour pods: $POD_RUNS runs" >&2
for ((i = 1; i <= POD_RUNS; i++)); do
  fg_prepare_pod batch "new-$i" app=spin 100 0 || exit 1
  key="$(fg_pod_key batch "new-$i")"
  python3 "$HERE/measure.py" bind --env "$FG_TESTBED_DIR/env" --ns batch --name "new-$i" \
    --node "$NODE" --cid "$(cat "$WORK/orig/$key.cid")" --qos "$(cat "$WORK/orig/$key.qos")" \
    --file "$(fg_pod_file batch "new-$i" cpu cpu.idle)" --out "$WORK/pods.json" || exit 1
  fg_delete_pod batch "new-$i" || exit 1
done

cp "$FG_WORK/logs/ctl.log" "$WORK/ctl.log.keep" 2>/dev/null
mkdir -p "$OUT"
python3 "$HERE/measure.py" report --policy-samples "$WORK/policy.json" --pod-samples "$WORK/pods.json" \
  --command "FG_BENCH_GAP_S=$GAP_S bench/control_plane/run.sh $BUILD $POLICY_RUNS $POD_RUNS" --gap-s "$GAP_S" \
  --json "$OUT/control-plane.json" --md "$OUT/control-plane.md" --notes "$HERE/NOTES.md"

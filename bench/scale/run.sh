#!/usr/bin/env bash
# run.sh — the controller scale ladder (issue 14 item 2): for each NODES:PODS:AGENTS step, a real
# kube-apiserver + etcd (tests/testbed, one private instance grown step by step), nodes and pods
# through the API server (load.py), the real feedguard-controller (--insecure) and fg-agent-sim;
# measures what driver.py describes and writes bench/results/scale.{json,md,png}.
#
#   bench/scale/run.sh BUILD_DIR [STEP...]      STEP = NODES:PODS:AGENTS
#   default ladder: 100:3000:100 250:7500:250 500:15000:500 1000:30000:1000 2000:60000:2000
#   env: FG_SCALE_WORK (default /tmp/fg-scale-$$), FG_SCALE_OUT (results dir, default
#        bench/results), FG_SCALE_EDITS (10), FG_SCALE_THREADS (loader connections, 8),
#        FG_SCALE_FRESH=1 (a fresh API server per step instead of growing one),
#        FG_SCALE_TRANSPORT (mtls: as installs run it, the default since 2026-11-29;
#        plaintext: the ladders before; FG_SCALE_TLS=1 still means mtls), FG_SCALE_IDENTITY
#        (with mtls — token: the chart's default, a pod-bound token per agent checked by
#        TokenReview; shared-cert: the certificate alone, the mTLS ladders before 2026-11-29),
#        FG_SCALE_ROWS (append rows to this file instead of WORK/rows.jsonl; the report
#        is written from every row in it), FG_SCALE_SHAPE (realistic: copies of the real
#        cluster's pods, shapes/pods.json — the default; lean: the ladders before 2026-11-29),
#        FG_SCALE_NAME (results file name, default scale), FG_SCALE_ARGS (more driver.py step
#        flags, e.g. "--controller-args=--max-observed-pods=0")
# Steps must be in growing order with the same pods/node when the API server is grown.
# Needs: the test bed binaries (tests/testbed/build.sh), kubectl, /usr/bin/python3 (+ matplotlib).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BUILD="$(cd "${1:?usage: run.sh BUILD_DIR [NODES:PODS:AGENTS...]}" && pwd)"
shift
STEPS=("$@")
((${#STEPS[@]})) || STEPS=(100:3000:100 250:7500:250 500:15000:500 1000:30000:1000 2000:60000:2000)
WORK="${FG_SCALE_WORK:-/tmp/fg-scale-$$}"
OUT="${FG_SCALE_OUT:-$REPO/bench/results}"
ROWS="${FG_SCALE_ROWS:-$WORK/rows.jsonl}"
mkdir -p "$WORK" "$OUT" || exit 1
TB="$WORK/tb"
cleanup() { [[ -f "$TB/env" ]] && "$REPO/tests/testbed/testbed.sh" down "$TB" >/dev/null 2>&1; }
trap cleanup EXIT
for b in "$BUILD/controller/feedguard-controller" "$BUILD/bench/scale/fg-agent-sim"; do
  [[ -x "$b" ]] || { echo "run.sh: missing $b (cmake --build … --target feedguard-controller fg-agent-sim)" >&2; exit 1; }
done
TRANSPORT="${FG_SCALE_TRANSPORT:-mtls}"
[[ "${FG_SCALE_TLS:-}" == 1 ]] && TRANSPORT=mtls
case "$TRANSPORT" in
  mtls) transport_args=(--tls --identity "${FG_SCALE_IDENTITY:-token}") ;;
  plaintext) transport_args=() ;;
  *) echo "run.sh: FG_SCALE_TRANSPORT must be mtls or plaintext" >&2; exit 2 ;;
esac
rc=0
for step in "${STEPS[@]}"; do
  IFS=: read -r n p a <<<"$step"
  tbarg=(--testbed "$TB")
  if [[ "${FG_SCALE_FRESH:-0}" == 1 ]]; then cleanup; tbarg=(); fi
  echo "# step $step ($(uptime | sed 's/.*load/load/'))" >&2
  /usr/bin/python3 "$HERE/driver.py" step --build "$BUILD" --nodes "$n" --pods "$p" --agents "$a" \
    --work "$WORK/step-$n" --rows "$ROWS" --edits "${FG_SCALE_EDITS:-10}" \
    --threads "${FG_SCALE_THREADS:-8}" "${tbarg[@]}" "${transport_args[@]}" \
    --pod-shape "${FG_SCALE_SHAPE:-realistic}" ${FG_SCALE_ARGS:-} || { echo "run.sh: step $step failed" >&2; rc=1; }
done
NAME="${FG_SCALE_NAME:-scale}"
/usr/bin/python3 "$HERE/driver.py" report --rows "$ROWS" --out-json "$OUT/$NAME.json" \
  --out-md "$OUT/$NAME.md" --out-png "$OUT/$NAME.png" \
  --command "FG_SCALE_SHAPE=${FG_SCALE_SHAPE:-realistic} FG_SCALE_TRANSPORT=$TRANSPORT${FG_SCALE_IDENTITY:+ FG_SCALE_IDENTITY=$FG_SCALE_IDENTITY}${FG_SCALE_ARGS:+ FG_SCALE_ARGS='$FG_SCALE_ARGS'} bench/scale/run.sh BUILD ${STEPS[*]}" || rc=1
exit $rc

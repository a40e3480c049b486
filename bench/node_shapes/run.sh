#!/usr/bin/env bash
# run.sh — the node-shape matrix: tests/vm/node_shape.sh's fences scenario on every shape, one row
# each, into bench/results/node-shapes.json (+ .md and README's compatibility table, render.py).
#
#   bench/node_shapes/run.sh [SHAPE ...]     (default: every shape node_shape.sh knows)
#
# Builds what a shape needs first (tests/testbed/build.sh: the oldest supported kubelet for
# v2-systemd-oldest). Each shape costs one VM run: 4.2-4.7 min on this 2-core machine under tcg (2026-11-29).
# Rows of shapes not run this time are kept from the existing JSON. Needs root.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SHAPES=("$@")
((${#SHAPES[@]})) || SHAPES=(v2-systemd v2-systemd-debian v2-systemd-oldest v1-systemd)
OUT="$REPO/bench/results/node-shapes.json"
WORK="${FEEDGUARD_SHAPES_WORK:-/tmp/feedguard-node-shapes}"
mkdir -p "$WORK"
rows="$WORK/rows.jsonl"
: >"$rows"
# shellcheck source=../../tests/testbed/versions.env
source "$REPO/tests/testbed/versions.env"
for s in "${SHAPES[@]}"; do
  if [[ "$s" == v2-systemd-oldest ]]; then
    FEEDGUARD_K8S_VERSION="$FEEDGUARD_K8S_OLDEST_VERSION" "$REPO/tests/testbed/build.sh" kubelet kube-apiserver \
      kube-scheduler kube-controller-manager kube-proxy kubectl
  fi
  t0=$SECONDS
  rc=0
  "$REPO/tests/vm/node_shape.sh" --shape "$s" --scenario fences --results "$rows" "$WORK/$s" || rc=$?
  echo "[node-shapes] $s: exit $rc in $((SECONDS - t0)) s" >&2
  if ! grep -q "\"shape\": \"$s\"" "$rows"; then
    printf '{"shape": "%s", "cgroup": "%s", "driver": "systemd", "error": "run failed (exit %s) before any observation; see %s"}\n' \
      "$s" "${s%%-*}" "$rc" "$WORK/$s" >>"$rows"
  fi
  python3 - "$rows" "$s" "$rc" "$((SECONDS - t0))" <<'PY'
import json, sys
path, shape, rc, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(path) if l.strip()]
for r in lines:
    if r["shape"] == shape:
        r["exit"] = rc
        r["seconds"] = secs
open(path, "w").write("".join(json.dumps(r) + "\n" for r in lines))
PY
done
python3 - "$OUT" "$rows" <<'PY'
import datetime, json, sys
out, rows = sys.argv[1], sys.argv[2]
try:
    doc = json.load(open(out))
except FileNotFoundError:
    doc = {"rows": []}
new = [json.loads(l) for l in open(rows) if l.strip()]
keep = [r for r in doc["rows"] if r["shape"] not in {n["shape"] for n in new}]
doc["rows"] = sorted(keep + new, key=lambda r: r["shape"])
doc["measured"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
doc["how"] = ("tests/vm/node_shape.sh --scenario fences per shape (bench/node_shapes/run.sh): a qemu (tcg) VM "
              "with systemd as PID 1, kubelet's systemd driver, the chart installed with helm; 4 policies "
              "(Idle, Weight, Quota, Cpuset + pinned trainer) on 10 Burstable pods; 20 daemon-reloads, containerd "
              "and kubelet restarts, in-place resizes, a runtime update, a new pod slice; every write to a fenced "
              "file recorded (fg-cgwatch). Unfenced window: a write moving a file off its fence until the write "
              "putting it back. 2 vCPUs emulated on a 2-core machine: windows are slower than on hardware.")
json.dump(doc, open(out, "w"), indent=1)
open(out, "a").write("\n")
PY
python3 "$REPO/bench/node_shapes/render.py"
echo "[node-shapes] wrote $OUT, bench/results/node-shapes.md and README's table" >&2

#!/usr/bin/env bash
# real_node.sh — the real-node results: feedguard's demo (examples/demo/run.sh) on the one-node
# cluster of tests/node/cluster.sh (kubelet, containerd, runc; the chart installed with helm),
# its three phases (trainer alone / among neighbour pods under plain CFS / with the FencePolicy)
# repeated and interleaved, written as bench/results/real-node.{json,md,png}. As root.
#
#   bench/node/real_node.sh [--rounds R] [--neighbours N] [--duration S] [--warmup S]
#                           [--out-dir DIR] [--note TEXT] [--build] [--build-dir DIR]
#
#   --rounds R      rounds of the three phases (default 5)
#   --neighbours N  neighbour pods (default 8)
#   --duration S    measured seconds per phase (default 15); --warmup S (default 3)
#   --out-dir DIR   where real-node.* go (default bench/results)
#   --note TEXT     a note carried into the results (e.g. that the machine was busy)
#   --build         let the demo install dependencies and build (default: use build/release as is)
#   --build-dir DIR the binaries' build dir (default build/release)
#
# The per-round numbers (JSON from `run.sh --results`) go through bench/node/report.py: medians
# and min..max over the rounds, ratios to isolated paired within each round, fence latency after
# `kubectl apply`, the agent's overwrite counter, the versions read from the running kubelet, CRI
# and the runc binary, and the machine. One round takes about 1.5 min + 3 x (warmup + duration).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"

ROUNDS=5 NEIGHBOURS=8 DURATION=15 WARMUP=3 OUT_DIR="$REPO/bench/results" NOTE="" BUILD=0
BUILD_DIR="$REPO/build/release"
while (($#)); do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --neighbours) NEIGHBOURS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out-dir) OUT_DIR="$(realpath -m "$2")"; shift 2 ;;
    --note) NOTE="$2"; shift 2 ;;
    --build) BUILD=1; shift ;;
    --build-dir) BUILD_DIR="$(realpath -m "$2")"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "real_node.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
((EUID == 0)) || { echo "real_node.sh: run as root (the demo starts kubelet and containerd)" >&2; exit 1; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/feedguard-real-node.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
args=(--rounds "$ROUNDS" --neighbours "$NEIGHBOURS" --duration "$DURATION" --warmup "$WARMUP"
  --build-dir "$BUILD_DIR" --results "$tmp/raw.json")
((BUILD)) || args+=(--no-build)
cmd="bench/node/real_node.sh --rounds $ROUNDS --neighbours $NEIGHBOURS --duration $DURATION --warmup $WARMUP"
echo "real_node.sh: examples/demo/run.sh ${args[*]}"
"$REPO/examples/demo/run.sh" "${args[@]}"
[[ -s "$tmp/raw.json" ]] || { echo "real_node.sh: the demo wrote no results" >&2; exit 1; }
/usr/bin/python3 "$HERE/report.py" "$tmp/raw.json" "$OUT_DIR" --note "$NOTE" --command "$cmd"

#!/usr/bin/env bash
# run_on_gpu.sh — one device-tool command of the GPU wedge proof (see README.md).
#
#   bash .gpukit/kit/run_on_gpu.sh quick   # facts + calibration + all arms at 0 and 2×CPUs, 1 rep
#   bash .gpukit/kit/run_on_gpu.sh rest    # main arms over the full ladder, 2 reps; merged report
#   bash .gpukit/kit/run_on_gpu.sh check   # 1-minute sanity check: GPU, torch, agent, cgroups
#
# Runs from the repository root (the device tool's working directory), uses the bundled agent
# (.gpukit/agent/feedguard-agent, made by bench/gpu/bundle.sh) and writes into $OUT (at most 8
# files come back): gpu-wedge-*.{json,md,png}, the log, the machine's facts. Each part stops
# starting runs at 540 s and is interrupted (cleanly: fence reverted, cgroups removed, partial
# results written) at 575 s, inside the tool's 600 s.
set -uo pipefail
part=${1:-quick}
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$kit/../.." && pwd)
cd "$root"
out=${OUT:-/tmp/gpu-wedge-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
agent=${AGENT:-$root/.gpukit/agent/feedguard-agent}
[ -x "$agent" ] || agent=$root/build/release/agent/feedguard-agent
quick_json=bench/results/gpu-wedge-quick.json   # part 1's result, committed before part 2

case $part in
  check)
    {
      nvidia-smi || echo "nvidia-smi failed"
      "$py" -c 'import torch, torchvision; print("torch", torch.__version__, "tv", torchvision.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
      "$agent" topology || echo "agent topology failed"
      "$py" "$kit/gpu_wedge.py" facts
    } 2>&1 | tee "$out/gpu-wedge-check.log"
    ;;
  quick)
    "$py" "$kit/gpu_wedge.py" facts >"$out/gpu-wedge-facts.json" 2>&1
    timeout -s INT -k 15 575 "$py" "$kit/gpu_wedge.py" run --part quick --agent "$agent" \
      --out-dir "$out" "${@:2}" 2>&1 | tee "$out/gpu-wedge-quick.log"
    ;;
  rest)
    cal=()
    if [ -f "$quick_json" ]; then cal=(--calibration "$quick_json"); fi
    timeout -s INT -k 15 560 "$py" "$kit/gpu_wedge.py" run --part rest --agent "$agent" \
      --out-dir "$out" "${cal[@]}" "${@:2}" 2>&1 | tee "$out/gpu-wedge-rest.log"
    if [ -f "$quick_json" ] && [ -f "$out/gpu-wedge-rest.json" ]; then
      "$py" "$kit/gpu_wedge.py" report --in "$quick_json" "$out/gpu-wedge-rest.json" \
        --out-dir "$out" --name gpu-wedge 2>&1 | tee -a "$out/gpu-wedge-rest.log"
    fi
    ;;
  *) echo "usage: run_on_gpu.sh quick|rest|check" >&2; exit 2 ;;
esac
ls -la "$out"

#!/usr/bin/env bash
# torch_venv.sh — the PyTorch the kit's CPU-only mode runs here: a venv of /usr/bin/python3 (with
# Debian's site packages: Pillow, numpy, matplotlib) plus torch and torchvision from the package
# index pip is configured with, pinned to the versions the GPU machine has (KINDS.md: torch 2.11.0,
# torchvision 0.26.0), cached under ${FEEDGUARD_CACHE:-~/.cache/feedguard}/torch-<torch>-tv<tv>-cp<py>.
#
#   bench/gpu/torch_venv.sh          # prints the venv's python; installs only if missing
#
# PyPI's Linux torch wheel is the CUDA build: it pulls the nvidia-* CUDA libraries. Measured here
# (2026-11-23): 82 s, 4.6 GiB installed. The CUDA parts are never used by --cpu-only.
set -euo pipefail
torch_v=${TORCH_VERSION:-2.11.0}
tv_v=${TORCHVISION_VERSION:-0.26.0}
py=/usr/bin/python3
pytag=$($py -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
v=${FEEDGUARD_CACHE:-$HOME/.cache/feedguard}/torch-$torch_v-tv$tv_v-cp$pytag
if [ -x "$v/bin/python" ] && "$v/bin/python" -c 'import torch, torchvision' 2>/dev/null; then
  echo "$v/bin/python"
  exit 0
fi
mkdir -p "$(dirname "$v")"
tmp=$v.tmp.$$
trap 'rm -rf "$tmp"' EXIT
$py -m venv --system-site-packages "$tmp" >&2
"$tmp/bin/python" -m pip install --progress-bar off "torch==$torch_v" "torchvision==$tv_v" >&2
"$tmp/bin/python" -c 'import torch, torchvision, PIL, numpy' >&2
rm -rf "$v"
mv "$tmp" "$v"
trap - EXIT
echo "$v/bin/python"

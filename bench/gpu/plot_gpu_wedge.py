#!/usr/bin/env python3
"""plot_gpu_wedge.py — the GPU wedge kit's plot, from a results .json (runs anywhere matplotlib is).

    /usr/bin/python3 bench/gpu/plot_gpu_wedge.py bench/results/gpu-wedge.json [OUT.png]

Left: trainer samples/s ÷ isolated (the cfs arm with no neighbours; a control arm ÷ its own
0-neighbour run) over the neighbour ladder; right: the device busy fraction (CUDA events) and, dotted, the sampled GPU utilisation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def plot(doc: dict, path: Path) -> str | None:
    """Writes the figure; returns None, or a note saying why it was skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"plot skipped: matplotlib unavailable for {sys.executable} ({e}); run " \
               "bench/gpu/plot_gpu_wedge.py on the .json where it is"
    rows = doc.get("rows") or []
    if not rows:
        return "plot skipped: no rows"
    arms = []
    for r in rows:
        if r["arm"] not in arms:
            arms.append(r["arm"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = plt.get_cmap("tab10").colors
    for i, arm in enumerate(arms):
        rs = [r for r in rows if r["arm"] == arm]
        style = {"marker": "o", "label": arm, "color": colours[i % 10],
                 "ls": "--" if arm.startswith("control") else "-"}
        xs = [r["neighbours"] for r in rs]
        # Main arms against isolated (cfs, 0 neighbours); a control is another trainer, so
        # against its own 0-neighbour run.
        key = "ratio_to_isolated" if arm.startswith("control") else "ratio_to_cfs_isolated"
        ax1.plot(xs, [r[key] for r in rs], **style)
        ax2.plot(xs, [r["accelerator_busy"] for r in rs], **style)
        g = [(r["neighbours"], r["gpu_util_sampled"]) for r in rs
             if r.get("gpu_util_sampled") is not None]
        if g:
            ax2.plot([x for x, _ in g], [y for _, y in g], color=colours[i % 10], ls=":",
                     marker=".")
    cpu_only = doc.get("meta", {}).get("cpu_only")
    ax1.axhline(0.97, color="grey", ls="--", lw=0.8)
    ax1.set(xlabel="batch neighbours",
            ylabel="samples/s ÷ isolated (cfs @0; controls: own @0)",
            title="Trainer throughput" + (" — CPU-ONLY MODE" if cpu_only else ""),
            ylim=(0, 1.15))
    ax2.set(xlabel="batch neighbours",
            ylabel="busy fraction (solid: CUDA events; dotted: NVML)" if not cpu_only
            else "emulated device busy fraction",
            title="Device busy", ylim=(0, 1.05))
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else src.with_suffix(".png")
    note = plot(json.loads(src.read_text()), out)
    if note:
        print(note, file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

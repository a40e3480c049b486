#!/usr/bin/env python3
"""plot_ab.py — one figure of a same-run A/B: per arm, each row's value of a few scale fields
(bench/scale/ab.py rows) and, optionally, the control-plane latencies of an interleaved run.

  plot_ab.py --rows R.jsonl --arm before=BIN_OR_SHA[::FLAGS] ... [--control-plane CP.json] --out F.png
"""
import argparse
import hashlib
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIELDS = [("controller_rss_peak_mb", "RSS peak, MB"),
          ("edit_controller_cpu_ms_per_edit", "controller CPU per edit, ms"),
          ("edit_ack_p99_ms", "edit → every agent p99, ms"),
          ("relist_to_all_fenced_s", "relist → all fenced, s")]


def sha_of(x):
    if os.path.exists(x):
        with open(x, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()[:16]
    return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", required=True)
    p.add_argument("--arm", action="append", required=True, metavar="LABEL=BINARY_OR_SHA")
    p.add_argument("--control-plane")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    arms = []
    for lbl, x in (s.split("=", 1) for s in a.arm):
        binary, _, args = x.partition("::")  # flags after "::", as ab.py takes them
        arms.append((lbl, sha_of(binary), args))
    rows = [json.loads(line) for line in open(a.rows) if line.strip()]
    panels = len(FIELDS) + (2 if a.control_plane else 0)
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels, 3.4))
    for ax, (field, title) in zip(axes, FIELDS):
        for i, (lbl, h, args) in enumerate(arms):
            ys = [r[field] for r in rows if r.get("controller_sha256") == h and
                  r.get("controller_args", "") == args and r.get(field) is not None]
            ax.scatter([i] * len(ys), ys, s=18)
            if ys:
                ys = sorted(ys)
                ax.hlines(ys[len(ys) // 2], i - 0.25, i + 0.25)
        ax.set_xticks(range(len(arms)), [lbl for lbl, _, _ in arms], rotation=20, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(bottom=0)
    if a.control_plane:
        cp = json.load(open(a.control_plane))
        for ax, key, title in ((axes[-2], "policy_ms", "policy edit → cgroup, ms"),
                               (axes[-1], "pod_ms", "new pod → cgroup, ms")):
            data = [arm.get(key, []) for arm in cp["arms"]]
            ax.boxplot(data, labels=[arm["arm"] for arm in cp["arms"]])
            ax.set_title(title, fontsize=9)
            ax.set_ylim(bottom=0)
    fig.suptitle(os.path.basename(a.rows), fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

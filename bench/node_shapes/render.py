#!/usr/bin/env python3
"""render.py — bench/results/node-shapes.json → node-shapes.md and README's compatibility table.

  render.py [--json bench/results/node-shapes.json] [--md bench/results/node-shapes.md]
            [--readme README.md]

The README table sits between the lines `<!-- node-shapes:begin -->` and `<!-- node-shapes:end -->`
and is replaced whole; nothing else in README changes.
"""
import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ms(d):
    if not d:
        return "—"
    if not d.get("n"):
        return "never unfenced"
    return f"{d['median']:.0f} / {d['max']:.0f}" + (f" ({d['open']} open)" if d.get("open") else "")


def row_cells(r):
    return [
        r["cgroup"], r["driver"], r.get("runtime", ""), r.get("runc", ""), r.get("kubelet", ""),
        str(r.get("fence_latency_ms", "—")),
        ms(r.get("unfenced_after_reload_ms")), str(r.get("daemon_reloads", 0)),
        ms(r.get("unfenced_after_resize_ms")), ms(r.get("unfenced_after_runtime_restart_ms")),
        ms(r.get("unfenced_after_kubelet_restart_ms")),
        (f"{r['unfenced_after_container_restart_ms']}³" if r.get("unfenced_after_container_restart_ms")
         is not None else "—"),
        f"{r.get('files_restored_exact', '—')}/{r.get('files_total', '—')}"
        + (f" (+{r['files_restored_inherited']} same CPUs)" if r.get("files_restored_inherited") else ""),
        "yes" if r.get("revert_exact") else ("same CPUs¹" if r.get("revert_same_cpus") else "**no**"),
        str(r.get("abandoned_fences", "—")),
        "held as weight 1²" if r.get("idle_held_as_weight") else "cpu.idle",
    ]


HEAD = ["cgroup", "driver", "runtime", "runc", "kubelet", "fence after apply (ms)",
        "unfenced after daemon-reload ms (median / max)", "reloads", "after resize", "after runtime restart",
        "after kubelet restart", "container restart: new scope pinned after (ms)", "files restored byte-exact", "revert exact", "fences abandoned",
        "Idle fence"]

FOOTNOTES = [
    "¹ cgroup v2 refuses to write a populated cgroup's empty `cpuset.cpus` back (ENOSPC; measured "
    "on 6.1 here and on 6.18 on the GPU machine). Since 2026-11-29 the agent pins a pod's child "
    "cgroups only and gets their empty sets back by turning `cpuset` off and on in the pod dir's "
    "`cgroup.subtree_control` (docs/DESIGN.md §4); \"same CPUs\" marks a row where some file still "
    "came back as the inherited set (the same CPUs, not the same bytes), as every v2 row did before.",
    "² this kernel shows an idle cgroup's `cpu.weight` as 0, which kubelet ≥ 1.36 reads back as "
    "~1.8·10¹⁵ CPUs requested; the agent holds Idle fences as the lowest weight there "
    "(docs/DESIGN.md §4).",
    "Not in these rows: the demo workload's `fenced_ratio` / `cfs_ratio`. Each shape's node is a "
    "qemu guest whose 2 vCPUs are emulated (tcg) on the same 2 host cores, so a trainer-vs-"
    "neighbours throughput ratio there measures the emulator's scheduling as much as the guest's; "
    "the ratios come from the host node instead (cgroup v1, cgroupfs driver: "
    "bench/results/real-node.md) and, on cgroup v2 hardware, from the GPU kit (one H200, 16 "
    "cores, kernel 6.18, kubelet's cgroupfs layout without a kubelet: cfs 0.445×, Idle fence "
    "1.04×, Cpuset fence 1.03× of isolated at 32 neighbours; bench/results/gpu-wedge.md).",
    "³ cgroup v2 only: a container of the Cpuset-fenced neighbour killed, kubelet starting it again "
    "in a new scope, which holds the pod's full set until the agent pins it (inotify IN_CREATE on "
    "the pod dir); from the scope's appearance to its `cpuset.cpus` holding the fence, polled every "
    "~10 ms inside the emulated guest. v1 copies the pod dir's set into a new cgroup.",
    "The v1 row's resize maximum (seconds, not ms) is the Idle fence stepping aside on cgroup v1 until "
    "kubelet's resized weight has landed (kubelet retries its refused write there; docs/DESIGN.md "
    "§4); reloads, restarts and updates never open a window that long.",
]


def table(rows):
    out = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    out += [""] + FOOTNOTES
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=ROOT / "bench/results/node-shapes.json", type=Path)
    ap.add_argument("--md", default=ROOT / "bench/results/node-shapes.md", type=Path)
    ap.add_argument("--readme", default=ROOT / "README.md", type=Path)
    a = ap.parse_args()
    doc = json.loads(a.json.read_text())
    rows = doc["rows"]
    md = [f"# Node shapes — {doc.get('measured', '')}", "", doc.get("how", ""), "", table(rows), ""]
    for r in rows:
        md.append(f"## {r['shape']}: {r['cgroup']} + {r['driver']}, {r.get('runtime', '')}, runc {r.get('runc', '')}, kubelet {r.get('kubelet', '')}")
        md.append("")
        md.append("| event | unfenced ms (median / max) | windows |")
        md.append("|---|---|---|")
        for k in ("reload", "resize", "runtime_restart", "kubelet_restart", "runtime_update", "new_pod"):
            d = r.get(f"unfenced_after_{k}_ms", {})
            md.append(f"| {k.replace('_', ' ')} | {ms(d)} | {d.get('n', 0)} |")
        arms = r.get("idle_arms") or {}
        if arms:
            md.append("")
            md.append("Idle fence held three ways (docs/DESIGN.md §4, \"Fencing a systemd slice\"): unfenced ms (median / max, windows)")
            md.append("")
            md.append("| arm | daemon-reload | resize | runtime restart | kubelet restart |")
            md.append("|---|---|---|---|---|")
            for arm, ev in sorted(arms.items()):
                md.append(f"| {arm} | " + " | ".join(f"{ms(ev.get(k))} ({ev.get(k, {}).get('n', 0)})" for k in ("reload", "resize", "runtime_restart", "kubelet_restart")) + " |")
        if r.get("dbus_revert"):
            md.append("")
            md.append(f"After the agent's revert, systemd's own CPUWeight=idle: `{json.dumps(r['dbus_revert'])}`")
        if r.get("notes"):
            md.append("")
            md.extend(f"- {n}" for n in r["notes"])
        md.append("")
    a.md.write_text("\n".join(md) + "\n")
    readme = a.readme.read_text()
    begin, end = "<!-- node-shapes:begin -->", "<!-- node-shapes:end -->"
    if begin in readme and end in readme:
        pre, rest = readme.split(begin, 1)
        _, post = rest.split(end, 1)
        gen = f"{begin}\n<!-- generated by bench/node_shapes/render.py from bench/results/node-shapes.json -->\n{table(rows)}\n{end}"
        a.readme.write_text(pre + gen + post)


if __name__ == "__main__":
    main()

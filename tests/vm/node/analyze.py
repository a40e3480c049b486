#!/usr/bin/env python3
"""analyze.py OUT_DIR --shape NAME — one row of bench/results/node-shapes.json from a VM node run.

Reads what tests/vm/node/guest/scenario_fences.sh left in OUT_DIR:
  observations.jsonl  node versions, fence latency, segment starts (with each fenced file's
                      reference value), event marks, reload count, abandoned fences, revert tally
  cgwatch.log         every write to a fenced file: "<ns> event|initial|gone <path> <value>"
Unfenced window: within a segment, from a write that leaves a file off its fenced value until the
write that puts it back (the agent's); a window still open at the segment's end counts to the end.
Writes: each inotify event is one write(2) or more (the kernel merges identical unread events),
so counts are lower bounds; "foreign" = writes that moved a file off its fence, "restored" = the
writes that put it back.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path


def load(out):
    obs = [json.loads(l) for l in (out / "observations.jsonl").read_text().splitlines() if l.strip()]
    events = []
    log = out / "cgwatch.log"
    if log.exists():
        for line in log.read_text().splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[1] == "event":
                events.append((int(parts[0]), parts[2], parts[3]))
    events.sort()
    return obs, events


def windows(segments, events):
    """segment name -> list of (file, ms, closed) and write tallies."""
    res = {}
    for i, seg in enumerate(segments):
        t0 = seg["t_ns"]
        t1 = segments[i + 1]["t_ns"] if i + 1 < len(segments) else None
        ref = seg["data"]["ref"]
        name = seg["data"]["name"]
        r = res.setdefault(name, {"windows": [], "foreign": 0, "restored": 0, "other": 0})
        off = {}  # file -> time it left its fence
        for t, path, value in events:
            if t < t0 or (t1 is not None and t >= t1) or path not in ref:
                continue
            fenced = value == ref[path].replace(" ", "_") or (value == "<empty>" and ref[path] == "")
            if not fenced and path not in off:
                off[path] = t
                r["foreign"] += 1
            elif fenced and path in off:
                r["windows"].append((path, (t - off.pop(path)) / 1e6, True))
                r["restored"] += 1
            else:
                r["other"] += 1
        end = t1 if t1 is not None else (events[-1][0] if events else t0)
        for path, t in off.items():
            r["windows"].append((path, (end - t) / 1e6, False))
    return res


def stat(ws):
    ms = [w[1] for w in ws]
    if not ms:
        return {"median": 0.0, "max": 0.0, "n": 0, "open": 0}
    return {"median": round(statistics.median(ms), 1), "max": round(max(ms), 1), "n": len(ms),
            "open": sum(1 for w in ws if not w[2])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    obs, events = load(out)
    first = {}
    for o in obs:
        first.setdefault(o["kind"], o)
    node = first.get("node", {}).get("data", {})
    segments = [o for o in obs if o["kind"] == "segment"]
    w = windows(segments, events)

    # The D-Bus arms' files (b, c) are reported apart; everything else is the agent's fence (a).
    arms = first.get("arms", {}).get("data", {})
    side = {p for p, arm in arms.items() if arm != "a_direct"}

    def seg(*names, keep=lambda p: p not in side):
        ws = [x for n in names for x in w.get(n, {}).get("windows", []) if keep(x[0])]
        return stat(ws)

    events_of = {"reload": ("daemon-reload-spaced", "daemon-reload-burst"),
                 "runtime_restart": ("containerd-restart",), "kubelet_restart": ("kubelet-restart",),
                 "resize": ("resize",), "runtime_update": ("runtime-update",),
                 "new_pod": ("new-pod-slice",)}
    arm_rows = {arm: {ev: seg(*names, keep=lambda p, arm=arm: arms.get(p) == arm)
                      for ev, names in events_of.items()}
                for arm in sorted(set(arms.values()))}

    ow = [int(float(s["data"]["overwrites_total"])) for s in segments if s["data"].get("overwrites_total")]
    revert = first.get("revert_exact", {}).get("data", {})
    abandoned = first.get("abandoned", {}).get("data", {}).get("contested", None)
    cgroup, _, driver = a.shape.partition("-")
    row = {
        "shape": a.shape,
        "cgroup": cgroup,
        "driver": driver.split("-")[0] if driver else "",
        "runtime": node.get("runtime", ""),
        "runc": node.get("runc", ""),
        "kubelet": node.get("kubelet", ""),
        "systemd": node.get("systemd", ""),
        "kernel": node.get("kernel", ""),
        "fence_latency_ms": first.get("fence_latency", {}).get("data", {}).get("ms"),
        "daemon_reloads": first.get("daemon_reloads", {}).get("data", {}).get("count", 0),
        "unfenced_after_reload_ms": seg("daemon-reload-spaced", "daemon-reload-burst"),
        "unfenced_after_runtime_restart_ms": seg("containerd-restart"),
        "unfenced_after_kubelet_restart_ms": seg("kubelet-restart"),
        "unfenced_after_resize_ms": seg("resize"),
        "unfenced_after_runtime_update_ms": seg("runtime-update"),
        "unfenced_after_new_pod_ms": seg("new-pod-slice"),
        # v2: a Cpuset-fenced neighbour's container killed and started again by kubelet; from the
        # new scope's appearance until it holds the fence's set (polled every ~10 ms).
        "unfenced_after_container_restart_ms":
        first.get("container_restart", {}).get("data", {}).get("scope_to_pinned_ms"),
        "writes": {n: {k: v for k, v in r.items() if k != "windows"} for n, r in w.items()},
        "idle_held_as_weight": first.get("idle_fence", {}).get("data", {}).get("held_as_weight"),
        "weights_50m": first.get("weights", {}).get("data"),
        "idle_arms": arm_rows,
        "dbus_revert": first.get("dbus_revert", {}).get("data"),
        "overwrites_seen": (ow[-1] - ow[0]) if len(ow) >= 2 else None,
        "abandoned_fences": len(abandoned) if abandoned is not None else None,
        "files_restored_exact": revert.get("exact"),
        "files_restored_inherited": revert.get("inherited", 0),
        "files_total": revert.get("total"),
        # Byte-exact for every file. An empty v2 cpuset (inherit) the kernel refuses to restore on
        # a populated cgroup comes back as the inherited set: counted apart, never as exact.
        "revert_exact": bool(revert) and revert.get("exact") == revert.get("total"),
        "revert_same_cpus": bool(revert) and
        revert.get("exact", 0) + revert.get("inherited", 0) == revert.get("total"),
    }
    json.dump(row, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

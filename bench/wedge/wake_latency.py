#!/usr/bin/env python3
"""wake_latency.py — where an Idle-fenced neighbour still costs a feeder time (root, cgroup v1).

Feeder-shaped probes (fg-wake-latency: spin, sleep, spin, ...) in one cgroup, batch spinners
(fg-wedge-spinner) each in its own cgroup beside it, under one benchmark root made for the run
(/sys/fs/cgroup/cpu/feedguard-wakelat-<pid>, removed after). Cases, each repeated --reps times,
interleaved and rotated:

  one CPU (everything pinned to the last CPU), 1 probe at --one-busy/--one-sleep µs:
    alone | 8 idle neighbours (cpu.idle=1) | 8 idle, probe cpu.shares 262144 |
    8 neighbours at cpu.shares 2 (the Weight fence) | the same, probe 262144
  every CPU, --probes probes at --all-busy/--all-sleep µs (together about as much CPU as the
  machine has, like the wedge trainer's four processes on two CPUs):
    alone | 16 idle | 16 idle, probe 262144 | 16 idle kept off the first CPU

The figure of merit is the probes' wall time over the same case alone (busy time is wall time,
so only waiting to get back on a CPU after a sleep stretches it) and their late wake-ups.
Writes <out-dir>/<name>.json (every run) and <name>.md (medians, min–max).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CPU_MOUNT = Path("/sys/fs/cgroup/cpu")
CPUSET_MOUNT = Path("/sys/fs/cgroup/cpuset")
BOOST_SHARES = 262144  # v1 cpu.shares maximum (trainers.cpu.weight 10000)


def case_list(ncpu: int) -> list[dict]:
    last = [ncpu - 1]
    every = list(range(ncpu))
    rest = list(range(1, ncpu))
    one = {"topology": "one-cpu", "cpus": last, "probes": 1}
    allc = {"topology": "all-cpus", "cpus": every}
    return [
        {**one, "name": "1cpu-alone", "neighbours": 0, "mode": "none", "probe_shares": 1024},
        {**one, "name": "1cpu-8idle", "neighbours": 8, "mode": "idle", "probe_shares": 1024},
        {**one, "name": "1cpu-8idle-boost", "neighbours": 8, "mode": "idle",
         "probe_shares": BOOST_SHARES},
        {**one, "name": "1cpu-8weight", "neighbours": 8, "mode": "shares2", "probe_shares": 1024},
        {**one, "name": "1cpu-8weight-boost", "neighbours": 8, "mode": "shares2",
         "probe_shares": BOOST_SHARES},
        {**allc, "name": "all-alone", "neighbours": 0, "mode": "none", "probe_shares": 1024},
        {**allc, "name": "all-16idle", "neighbours": 16, "mode": "idle", "probe_shares": 1024},
        {**allc, "name": "all-16idle-boost", "neighbours": 16, "mode": "idle",
         "probe_shares": BOOST_SHARES},
        {**allc, "name": "all-16idle-off-cpu0", "neighbours": 16, "mode": "idle",
         "probe_shares": 1024, "neighbour_cpus": rest},
    ]


class Root:
    """The run's own cgroup root under the cpu (and cpuset, for pinning) mounts."""

    def __init__(self, shares: int):
        self.name = f"feedguard-wakelat-{os.getpid()}"
        self.cpu = CPU_MOUNT / self.name
        self.cpu.mkdir()
        (self.cpu / "cpu.shares").write_text(str(shares))
        self.made: list[Path] = []

    def group(self, name: str, shares: int | None, idle: bool) -> Path:
        g = self.cpu / name
        g.mkdir()
        self.made.append(g)
        if idle:
            (g / "cpu.idle").write_text("1")
        elif shares is not None:
            (g / "cpu.shares").write_text(str(shares))
        return g

    def clear_groups(self) -> None:
        for g in reversed(self.made):
            for _ in range(50):  # tasks leave a cgroup shortly after they are reaped
                try:
                    g.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
        self.made = []

    def remove(self) -> None:
        self.clear_groups()
        try:
            self.cpu.rmdir()
        except OSError as e:
            print(f"wake_latency: could not remove {self.cpu}: {e}", file=sys.stderr)


def start_in(group: Path, cpus: list[int], argv: list[str], **kw) -> subprocess.Popen:
    procs = str(group / "cgroup.procs")

    def enter() -> None:  # in the child, before exec
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
        os.sched_setaffinity(0, cpus)

    return subprocess.Popen(argv, preexec_fn=enter, **kw)


def run_case(root: Root, c: dict, a: argparse.Namespace) -> dict:
    busy, sleep = ((a.one_busy, a.one_sleep) if c["topology"] == "one-cpu"
                   else (a.all_busy, a.all_sleep))
    probes = c.get("probes") or a.probes
    nbs: list[subprocess.Popen] = []
    feeders: list[subprocess.Popen] = []
    try:
        for i in range(c["neighbours"]):
            g = root.group(f"nb{i}", 2 if c["mode"] == "shares2" else None, c["mode"] == "idle")
            nbs.append(start_in(g, c.get("neighbour_cpus", c["cpus"]),
                                [str(a.spinner), "--duration", "120"],
                                stdout=subprocess.DEVNULL))
        time.sleep(0.5)
        fg = root.group("probes", c["probe_shares"], False)
        for _ in range(probes):
            feeders.append(start_in(fg, c["cpus"],
                                    [str(a.probe), "--busy-us", str(busy), "--sleep-us",
                                     str(sleep), "--cycles", str(a.cycles)],
                                    stdout=subprocess.PIPE, text=True))
        outs = []
        for p in feeders:
            out, _ = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"probe exited {p.returncode}")
            outs.append(json.loads(out))
    finally:
        for p in feeders + nbs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in feeders + nbs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        root.clear_groups()
    return {"case": c["name"], "wall_s": statistics.mean(o["wall_s"] for o in outs),
            "late_mean_us": statistics.mean(o["late_mean_us"] for o in outs),
            "late_p99_us": max(o["late_p99_us"] for o in outs),
            "late_max_us": max(o["late_max_us"] for o in outs),
            "late_over_1ms": sum(o["late_over_1ms"] for o in outs),
            "run_delay_s": sum(o["run_delay_s"] for o in outs), "probes": outs}


def summarise(runs: list[dict], cases: list[dict]) -> list[dict]:
    rows = []
    alone: dict[str, float] = {}
    for c in cases:
        rs = [r for r in runs if r["case"] == c["name"]]
        if not rs:
            continue
        walls = [r["wall_s"] for r in rs]
        row = {"case": c["name"], "topology": c["topology"], "runs": len(rs),
               "wall_s_median": statistics.median(walls), "wall_s_min": min(walls),
               "wall_s_max": max(walls),
               "late_mean_us_median": statistics.median(r["late_mean_us"] for r in rs),
               "late_over_1ms_median": statistics.median(r["late_over_1ms"] for r in rs),
               "late_max_us_max": max(r["late_max_us"] for r in rs),
               "run_delay_s_median": statistics.median(r["run_delay_s"] for r in rs)}
        if c["neighbours"] == 0:
            alone[c["topology"]] = row["wall_s_median"]
        base = alone.get(c["topology"])
        row["wall_over_alone"] = row["wall_s_median"] / base if base else None
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    build = REPO / "build" / "release" / "bench" / "wedge"
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", type=Path, default=build / "fg-wake-latency")
    ap.add_argument("--spinner", type=Path, default=build / "fg-wedge-spinner")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=2500)
    ap.add_argument("--probes", type=int, default=3, help="probes in the all-CPU cases")
    ap.add_argument("--one-busy", type=int, default=1700)
    ap.add_argument("--one-sleep", type=int, default=300)
    ap.add_argument("--all-busy", type=int, default=1000)
    ap.add_argument("--all-sleep", type=int, default=500)
    ap.add_argument("--root-shares", type=int, default=65536)
    ap.add_argument("--cases", default="", help="comma-separated subset of the case names")
    ap.add_argument("--out-dir", type=Path, default=REPO / "bench" / "results" / "wedge-spill")
    ap.add_argument("--name", default="wake-latency")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("needs root (it makes cgroups under /sys/fs/cgroup/cpu)")
    if not (CPU_MOUNT / "cpu.shares").exists():
        ap.error("needs the cgroup v1 cpu controller at /sys/fs/cgroup/cpu")
    for b in (a.probe, a.spinner):
        if not b.exists():
            ap.error(f"{b} not built (cmake --build --preset release)")
    ncpu = len(os.sched_getaffinity(0))
    if ncpu < 2:
        ap.error("needs at least 2 CPUs")
    cases = case_list(ncpu)
    if a.cases:
        want = a.cases.split(",")
        unknown = [w for w in want if w not in {c["name"] for c in cases}]
        if unknown:
            ap.error(f"unknown case(s) {unknown}; known: {[c['name'] for c in cases]}")
        cases = [c for c in cases if c["name"] in want]
    root = Root(a.root_shares)
    runs: list[dict] = []
    try:
        for rep in range(a.reps):
            k = rep % len(cases)
            for c in cases[k:] + cases[:k]:
                load = os.getloadavg()[0]
                r = run_case(root, c, a)
                r.update({"rep": rep, "loadavg1_before": load})
                runs.append(r)
                print(f"  rep {rep} {c['name']}: wall {r['wall_s']:.3f} s, late mean "
                      f"{r['late_mean_us']:.0f} µs, >1 ms {r['late_over_1ms']}, "
                      f"max {r['late_max_us'] / 1000:.1f} ms", flush=True)
    finally:
        root.remove()
    rows = summarise(runs, cases)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"generated": time.strftime("%Y-%m-%d %H:%M:%S %z"), "argv": sys.argv[1:],
           "ncpu": ncpu, "kernel": os.uname().release, "cases": cases, "rows": rows,
           "runs": runs}
    (a.out_dir / f"{a.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Wake-up latency beside Idle-fenced neighbours ({a.name})", "",
             f"Generated by `bench/wedge/wake_latency.py` on {doc['generated']}; {ncpu} CPUs, "
             f"kernel {doc['kernel']}; {a.reps} interleaved repetitions, {a.cycles} cycles per "
             f"probe; one CPU: 1 probe {a.one_busy} µs busy / {a.one_sleep} µs sleep; all CPUs: "
             f"{a.probes} probes {a.all_busy} / {a.all_sleep} µs.", "",
             "| case | runs | probe wall s (median) | min | max | ÷ alone | late wake-up mean µs "
             "| wake-ups > 1 ms | worst wake-up ms | run-queue wait s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = f"{r['wall_over_alone']:.3f}" if r["wall_over_alone"] else "–"
        lines.append(f"| {r['case']} | {r['runs']} | {r['wall_s_median']:.3f} | "
                     f"{r['wall_s_min']:.3f} | {r['wall_s_max']:.3f} | {ratio} | "
                     f"{r['late_mean_us_median']:.0f} | {r['late_over_1ms_median']:.0f} | "
                     f"{r['late_max_us_max'] / 1000:.1f} | {r['run_delay_s_median']:.3f} |")
    (a.out_dir / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

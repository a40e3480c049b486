#!/usr/bin/env python3
"""sched_trace.py — where the trainer's feeders wait for a CPU, from the kernel's own events.

The wedge driver reports how long the trainer's processes were runnable but not running
(`run_delay_seconds`). This tool says *why*: it records the scheduler's tracepoints
(sched_switch, sched_wakeup, sched_migrate_task) while a wedge run is in its measurement window
and attributes every wait of a trainer process to what held the CPU it was queued on.

  record   wait for processes named --wait-comm (each), sleep --delay, record --seconds of tracepoints
           into --out (mounts tracefs at /sys/kernel/tracing if it is not, unmounts it after).
  analyse  read a recorded trace, print a JSON summary (and a table with --table).

A wait starts when a trainer process becomes runnable — woken (sched_wakeup, with the CPU the
kernel chose) or preempted (sched_switch with prev_state R) — and ends when it is switched in.
Each wait is classed by what ran on its queued CPU at the moment it started:
  idle        the CPU was idle (the wake-up found a free CPU; the wait is wake-up latency)
  trainer     another trainer process held the CPU
  neighbour   a neighbour (--neighbour-comm) held the CPU
  other       anything else (kthreads, the driver, the agent)
plus what held the *other* CPUs at that moment (was a free or neighbour-only CPU available?).

Only Python 3 stdlib. Needs root for `record`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_wakeup_new",
          "sched/sched_migrate_task")

# One trace line: "<task>-<pid> [cpu] flags timestamp: event: fields".
LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+"
                  r"(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s+(?P<body>.*)$")
SWITCH = re.compile(r"prev_comm=(?P<prev_comm>.+?) prev_pid=(?P<prev_pid>\d+) "
                    r"prev_prio=\d+ prev_state=(?P<prev_state>\S+) ==> "
                    r"next_comm=(?P<next_comm>.+?) next_pid=(?P<next_pid>\d+) next_prio=\d+")
WAKEUP = re.compile(r"comm=(?P<comm>.+?) pid=(?P<pid>\d+) prio=\d+ target_cpu=(?P<cpu>\d+)")
MIGRATE = re.compile(r"comm=(?P<comm>.+?) pid=(?P<pid>\d+) prio=\d+ orig_cpu=(?P<orig>\d+) "
                     r"dest_cpu=(?P<dest>\d+)")


def find_pids(comm: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == comm:
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def record(args: argparse.Namespace) -> int:
    mounted_here = False
    if not (TRACEFS / "events").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
        mounted_here = True
    try:
        deadline = time.monotonic() + args.wait_timeout
        while not all(find_pids(c) for c in args.wait_comm):
            if time.monotonic() > deadline:
                print(f"sched_trace: no processes named {args.wait_comm} within "
                      f"{args.wait_timeout} s", file=sys.stderr)
                return 1
            time.sleep(0.05)
        time.sleep(args.delay)
        (TRACEFS / "tracing_on").write_text("0")
        (TRACEFS / "buffer_size_kb").write_text(str(args.buffer_kb))
        (TRACEFS / "trace").write_text("")  # clear
        for e in EVENTS:
            (TRACEFS / "events" / e / "enable").write_text("1")
        (TRACEFS / "tracing_on").write_text("1")
        time.sleep(args.seconds)
        (TRACEFS / "tracing_on").write_text("0")
        Path(args.out).write_text((TRACEFS / "trace").read_text())
        return 0
    finally:
        for e in EVENTS:
            try:
                (TRACEFS / "events" / e / "enable").write_text("0")
            except OSError:
                pass
        try:
            (TRACEFS / "trace").write_text("")
        except OSError:
            pass
        if mounted_here:
            subprocess.run(["umount", str(TRACEFS)], check=False)


def classify(comm: str, pid: int, trainer: str, neighbour: str) -> str:
    if pid == 0:
        return "idle"
    if comm == trainer:
        return "trainer"
    if comm == neighbour:
        return "neighbour"
    return "other"


def analyse_lines(lines, trainer: str, neighbour: str) -> dict:
    curr: dict[int, tuple[str, int]] = {}     # cpu -> (comm, pid) running now
    ncpu = 0
    waiting: dict[int, dict] = {}              # pid -> open wait
    comm_of: dict[int, str] = {}
    waits = defaultdict(lambda: {"count": 0, "seconds": 0.0})
    trainer_run = 0.0
    run_since: dict[int, float] = {}           # trainer pid -> switched in at
    first_ts = last_ts = None
    dropped_open = 0
    truncated = False

    def open_wait(pid: int, ts: float, cpu: int, why: str):
        holder = curr.get(cpu, ("?", -1))
        others = [classify(*curr[c], trainer, neighbour) if c in curr else "?"
                  for c in range(ncpu) if c != cpu]
        waiting[pid] = {"ts": ts, "cpu": cpu, "why": why,
                        "holder": classify(holder[0], holder[1], trainer, neighbour),
                        "others": "+".join(sorted(others)) or "-", "migrated": False}

    for raw in lines:
        if raw.startswith("#"):
            if "LOST" in raw:
                truncated = True
            continue
        m = LINE.match(raw)
        if not m:
            if "LOST" in raw:
                truncated = True
            continue
        ts = float(m["ts"])
        cpu = int(m["cpu"])
        ncpu = max(ncpu, cpu + 1)
        first_ts = ts if first_ts is None else first_ts
        last_ts = ts
        ev, body = m["event"], m["body"]
        if ev == "sched_switch":
            s = SWITCH.match(body)
            if not s:
                continue
            prev_pid, next_pid = int(s["prev_pid"]), int(s["next_pid"])
            prev_comm, next_comm = s["prev_comm"], s["next_comm"]
            comm_of[prev_pid], comm_of[next_pid] = prev_comm, next_comm
            if prev_comm == trainer and prev_pid in run_since:
                trainer_run += ts - run_since.pop(prev_pid)
            curr[cpu] = (next_comm, next_pid)
            if prev_comm == trainer and s["prev_state"].startswith("R"):
                # Preempted: runnable from now on, queued on this CPU; what took the CPU is
                # the "holder".
                open_wait(prev_pid, ts, cpu, "preempted")
            if next_comm == trainer:
                run_since[next_pid] = ts
                w = waiting.pop(next_pid, None)
                if w is not None:
                    key = (w["why"], w["holder"], w["others"],
                           "migrated" if w["migrated"] or cpu != w["cpu"] else "stayed")
                    waits[key]["count"] += 1
                    waits[key]["seconds"] += ts - w["ts"]
        elif ev in ("sched_wakeup", "sched_wakeup_new"):
            w = WAKEUP.match(body)
            if w and w["comm"] == trainer:
                open_wait(int(w["pid"]), ts, int(w["cpu"]), "woken")
        elif ev == "sched_migrate_task":
            mg = MIGRATE.match(body)
            if mg and int(mg["pid"]) in waiting:
                waiting[int(mg["pid"])]["migrated"] = True
    dropped_open = len(waiting)
    window = (last_ts - first_ts) if first_ts is not None else 0.0
    for pid, since in run_since.items():
        trainer_run += last_ts - since
    rows = [{"why": k[0], "holder": k[1], "other_cpus": k[2], "placement": k[3],
             "count": v["count"], "seconds": round(v["seconds"], 6)}
            for k, v in sorted(waits.items(), key=lambda kv: -kv[1]["seconds"])]
    total = sum(r["seconds"] for r in rows)
    by = defaultdict(float)
    for r in rows:
        by[f'{r["why"]}/{r["holder"]}'] += r["seconds"]
    return {
        "window_s": round(window, 6),
        "cpus": ncpu,
        "truncated": truncated,
        "trainer_cpu_s": round(trainer_run, 6),
        "trainer_wait_s": round(total, 6),
        "trainer_wait_per_cpu_s": round(total / trainer_run, 4) if trainer_run else None,
        "wait_by_cause_s": {k: round(v, 6) for k, v in sorted(by.items(), key=lambda kv: -kv[1])},
        "open_waits_at_end": dropped_open,
        "rows": rows,
    }


def analyse(args: argparse.Namespace) -> int:
    with open(args.trace, errors="replace") as f:
        res = analyse_lines(f, args.trainer_comm, args.neighbour_comm)
    res["trace"] = os.path.basename(args.trace)
    if args.table:
        print(f"# {res['trace']}: window {res['window_s']:.2f} s, trainer CPU "
              f"{res['trainer_cpu_s']:.3f} s, wait {res['trainer_wait_s']:.3f} s "
              f"({res['trainer_wait_per_cpu_s']} per CPU-s), truncated={res['truncated']}")
        print("| why | holder of its CPU | other CPUs | placement | waits | seconds | per CPU-s |")
        print("|---|---|---|---|---:|---:|---:|")
        for r in res["rows"]:
            per = r["seconds"] / res["trainer_cpu_s"] if res["trainer_cpu_s"] else 0.0
            print(f'| {r["why"]} | {r["holder"]} | {r["other_cpus"]} | {r["placement"]} | '
                  f'{r["count"]} | {r["seconds"]:.3f} | {per:.3f} |')
    else:
        print(json.dumps(res, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", required=True)
    r.add_argument("--seconds", type=float, default=5.0)
    r.add_argument("--delay", type=float, default=0.0,
                   help="seconds to wait (after --wait-comm appeared) before recording")
    r.add_argument("--wait-comm", action="append", default=[],
                   help="start only once a process with this comm exists (repeatable: all)")
    r.add_argument("--wait-timeout", type=float, default=600.0)
    r.add_argument("--buffer-kb", type=int, default=65536, help="per-CPU trace buffer")
    a = sub.add_parser("analyse")
    a.add_argument("trace")
    a.add_argument("--trainer-comm", default="fg-wedge-traine")
    a.add_argument("--neighbour-comm", default="fg-wedge-spinne")
    a.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    return record(args) if args.cmd == "record" else analyse(args)


if __name__ == "__main__":
    sys.exit(main())

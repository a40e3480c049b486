#!/usr/bin/python3
"""Per-agent memory of the Distributor (issue 14 item 3): fg-distributor-bench with N simulated
agents (fg-agent-sim) connected, fenced, ACKed and reporting; RSS and malloc'd heap per agent.

usage: agent_memory.py BUILD_DIR [--agents 1000,2000] [--config NAME:ARGS ...] [--out FILE]
  ARGS: extra fg-distributor-bench flags, space-separated (e.g. "--memory-quota-mb 512").
Prints one JSON row per (config, agents) and writes them all to --out when given.
"""
import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time


class Proc:
    """A child with JSON lines on stdout, read by a thread of its own (no buffering surprises)."""

    def __init__(self, argv, keep=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.q = queue.Queue()
        self.keep = keep  # event names worth queueing (None: all)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if self.keep is None or j.get("ev") in self.keep:
                self.q.put(j)
        self.q.put(None)

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def read_json(self, ev, timeout=30.0):
        end = time.time() + timeout
        while time.time() < end:
            try:
                j = self.q.get(timeout=max(0.01, end - time.time()))
            except queue.Empty:
                break
            if j is None:
                break
            if j.get("ev") == ev:
                return j
        raise RuntimeError(f"no {ev} line within {timeout}s")

    def stop(self):
        try:
            self.send("quit")
        except (BrokenPipeError, OSError):
            pass
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def measure(build, agents, extra, settle_s, sim_extra=()):
    sim_extra = list(sim_extra)
    server = Proc([f"{build}/bench/flood/fg-distributor-bench", "--nodes", str(agents)] + extra)
    port = server.read_json("ready")["port"]
    base = server.read_json("stats")
    sim = Proc([f"{build}/bench/scale/fg-agent-sim", "--target", f"127.0.0.1:{port}",
                "--agents", str(agents), "--report-interval-ms", "30000"] + sim_extra, keep={"stats"})
    t0 = time.time()
    fenced_s = None
    st = base
    while time.time() - t0 < 120:
        server.send("stats")
        st = server.read_json("stats")
        if st["acks"] >= agents and st["connected"] >= agents:
            fenced_s = time.time() - t0
            break
        time.sleep(0.5)
    samples = []
    end = time.time() + settle_s
    while time.time() < end:
        time.sleep(1.0)
        server.send("stats")
        samples.append(server.read_json("stats"))
    sim.stop()
    server.stop()
    last = samples[-1] if samples else st
    rss = sorted(s["rss_kb"] for s in samples)[len(samples) // 2] if samples else st["rss_kb"]
    heap = sorted(s["heap_in_use"] for s in samples)[len(samples) // 2] if samples else 0
    return {
        "agents": agents,
        "args": " ".join(extra),
        "all_fenced_s": round(fenced_s, 2) if fenced_s is not None else None,
        "connected": last["connected"],
        "rss_base_kb": base["rss_kb"],
        "rss_steady_kb": rss,
        "rss_per_agent_kb": round((rss - base["rss_kb"]) / agents, 2),
        "heap_base_b": base["heap_in_use"],
        "heap_steady_b": heap,
        "heap_per_agent_b": round((heap - base["heap_in_use"]) / agents),
    }


def config_rows(configs, out, rows_of):
    """For each --config NAME:ARGS (none given: one named "default" without ARGS), the rows
    rows_of(ARGS split) yields, each tagged with its config name and printed as a JSON line; all
    of them with the load average to the file out, when given (agent_memory.py, storm.py)."""
    rows = []
    for name, args in [c.split(":", 1) for c in configs] or [["default", ""]]:
        for row in rows_of(args.split()):
            row["config"] = name
            print(json.dumps(row), flush=True)
            rows.append(row)
    if out:
        with open(out, "w") as f:
            json.dump({"rows": rows, "load_avg": os.getloadavg()}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--agents", default="1000,2000")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--settle-s", type=float, default=8.0)
    ap.add_argument("--sim-args", default="", help="extra fg-agent-sim flags (e.g. --tls-*)")
    ap.add_argument("--out")
    a = ap.parse_args()
    agents = [int(x) for x in a.agents.split(",")]
    config_rows(a.config, a.out,
                lambda args: (measure(a.build, n, args, a.settle_s, a.sim_args.split()) for n in agents))


if __name__ == "__main__":
    sys.exit(main())

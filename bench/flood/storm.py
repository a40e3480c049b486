#!/usr/bin/python3
"""Reconnect storm against the Distributor alone (issue 14 item 5): fg-distributor-bench with N
simulated agents (fg-agent-sim, the real agent's backoff); once all are fenced, every stream is
cancelled at once ("storm"); measured: time until every agent is connected again and has ACKed
its fence on the new stream, and how many attempts the server refused (by grpc code).

usage: storm.py BUILD_DIR [--agents 2000] [--config NAME:ARGS ...] [--out FILE]
"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_memory import Proc, config_rows  # noqa: E402


def storm(build, agents, extra, timeout_s=120, sim_extra=()):
    sim_extra = list(sim_extra)
    server = Proc([f"{build}/bench/flood/fg-distributor-bench", "--nodes", str(agents)] + extra)
    port = server.read_json("ready")["port"]
    server.read_json("stats")
    sim = Proc([f"{build}/bench/scale/fg-agent-sim", "--target", f"127.0.0.1:{port}",
                "--agents", str(agents), "--report-interval-ms", "30000"] + sim_extra, keep={"end", "storm"})

    def stats():
        server.send("stats")
        return server.read_json("stats")

    def until(done, period):
        """Seconds until done(stats()) holds; None after timeout_s."""
        t = time.time()
        while time.time() - t < timeout_s:
            if done(stats()):
                return time.time() - t
            time.sleep(period)
        return None

    def end_codes():
        """The grpc codes of the stream ends the simulator reported since the last call."""
        codes = collections.Counter()
        while not sim.q.empty():
            j = sim.q.get()
            if j and j.get("ev") == "end":
                codes[j["code"]] += 1
        return codes

    start_s = until(lambda st: st["acks"] >= agents and st["connected"] >= agents, 0.2)
    # Drop the start's end events (refusals during the start are counted separately).
    start_codes = end_codes()
    acks_before = stats()["acks"]
    sim.send("storm")
    peak_rss = 0

    def converged(st):
        nonlocal peak_rss
        peak_rss = max(peak_rss, st["rss_kb"])
        return st["acks"] >= acks_before + agents and st["connected"] >= agents

    converged_s = until(converged, 0.1)
    codes = end_codes()
    sim.stop()
    server.stop()
    return {
        "agents": agents,
        "args": " ".join(extra),
        "start_all_fenced_s": round(start_s, 2) if start_s is not None else None,
        "start_refused_by_code": dict(start_codes),
        "storm_all_fenced_s": round(converged_s, 2) if converged_s is not None else None,
        # code 1 (CANCELLED) = the storm itself, one per agent; others are refusals
        "storm_stream_ends_by_code": dict(codes),
        "storm_rss_peak_kb": peak_rss,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--agents", type=int, default=2000)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--sim-args", default="", help="extra fg-agent-sim flags (e.g. --tls-*)")
    ap.add_argument("--out")
    a = ap.parse_args()
    config_rows(a.config, a.out,
                lambda args: [storm(a.build, a.agents, args, sim_extra=a.sim_args.split())])


if __name__ == "__main__":
    sys.exit(main())

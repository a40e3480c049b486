#!/usr/bin/python3
"""tls_frame_cpu.py — what a smaller TLS frame costs the controller's agent port in CPU.

  tls_frame_cpu.py --build BUILD --work DIR --out ROWS.jsonl [--agents 500]
                   [--pods-per-node 30,250] [--frames 4096,1024] [--bumps 10] [--rounds 3]

The Distributor alone (bench/flood's fg-distributor-bench, mTLS, MALLOC_ARENA_MAX=2 as the
controller's main() sets) with AGENTS simulated mTLS agents (fg-agent-sim, the bench CA of
driver.make_tls); for each fence shape (pods per node) and TLS frame size
(--tsi-max-frame-bytes, i.e. GRPC_ARG_TSI_MAX_FRAME_SIZE), arms alternating within each round:
`bump` (a new fence version for every node) BUMPS times, each waited for until every agent has
ACKed it; the server's CPU (utime+stime from /proc) per bump, and per MB of fences sent. The
simulator ACKs on receipt and sends a report per fence (one PodReport per pod), which the server
parses: that is in the server's CPU too, the same for every frame size.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "flood"))
sys.dont_write_bytecode = True
import driver  # noqa: E402
from agent_memory import Proc  # noqa: E402


def cpu_s(pid):
    v = driver.proc_cpu_rss(pid)
    return v[0] if v else None


def wait_acks(server, target, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        server.send("stats")
        st = server.read_json("stats")
        if st["acks"] >= target:
            return st
        time.sleep(0.05)
    raise RuntimeError(f"acks did not reach {target}")


def one(a, tls, frame, ppn, rnd):
    ctl, sim_args = tls
    tls_args = ["--tls-ca", ctl[5], "--tls-cert", ctl[1], "--tls-key", ctl[3]]
    os.environ["MALLOC_ARENA_MAX"] = "2"  # as the controller's main() sets; Proc inherits it
    server = Proc([os.path.join(a.build, "bench", "flood", "fg-distributor-bench"), "--nodes",
                   str(a.agents), "--pods-per-node", str(ppn), "--tsi-max-frame-bytes",
                   str(frame)] + tls_args, keep={"ready", "stats", "bumped"})
    ready = server.read_json("ready")
    sim = Proc([os.path.join(a.build, "bench", "scale", "fg-agent-sim"), "--target",
                f"127.0.0.1:{ready['port']}", "--agents", str(a.agents),
                "--report-interval-ms", "600000"] + sim_args, keep={"stats"})
    try:
        acks = wait_acks(server, a.agents)["acks"]
        time.sleep(2.0)
        acks = wait_acks(server, acks)["acks"]
        c0, t0 = cpu_s(server.p.pid), time.time()
        for _ in range(a.bumps):
            server.send("bump")
            server.read_json("bumped")
            acks = wait_acks(server, acks + a.agents)["acks"]
        c1, t1 = cpu_s(server.p.pid), time.time()
        per_bump = (c1 - c0) / a.bumps
        mb = ready["fence_bytes"] * a.agents / 1e6
        return {"frame": frame, "pods_per_node": ppn, "round": rnd, "agents": a.agents,
                "fence_bytes": ready["fence_bytes"], "bumps": a.bumps,
                "server_cpu_ms_per_bump": round(1000 * per_bump, 1),
                "server_cpu_ms_per_mb": round(1000 * per_bump / mb, 1),
                "bump_wall_ms": round(1000 * (t1 - t0) / a.bumps, 1),
                "load_avg": driver.loadavg()}
    finally:
        sim.stop()
        server.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--pods-per-node", default="30,250")
    ap.add_argument("--frames", default="4096,1024")
    ap.add_argument("--bumps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--summary", action="store_true", help="only summarise --out")
    a = ap.parse_args()
    if not a.summary:
        os.makedirs(a.work, exist_ok=True)
        tls = driver.make_tls(a.work)
        frames = [int(x) for x in a.frames.split(",")]
        for rnd in range(a.rounds):
            for ppn in [int(x) for x in a.pods_per_node.split(",")]:
                order = frames if rnd % 2 == 0 else frames[::-1]
                for frame in order:
                    row = one(a, tls, frame, ppn, rnd)
                    print(json.dumps(row), flush=True)
                    with open(a.out, "a") as f:
                        f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in open(a.out) if line.strip()]
    groups = {}
    for r in rows:
        groups.setdefault((r["pods_per_node"], r["fence_bytes"], r["frame"]), []).append(r)
    print("| pods per node | fence bytes | TLS frame | server CPU ms per bump: median (min–max, n) "
          "| per MB of fences |")
    print("|---|---|---|---|---|")
    for (ppn, fb, frame), rs in sorted(groups.items()):
        xs = [r["server_cpu_ms_per_bump"] for r in rs]
        ys = [r["server_cpu_ms_per_mb"] for r in rs]
        print(f"| {ppn} | {fb} | {frame} | {statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f}, "
              f"{len(xs)}) | {statistics.median(ys):.1f} |")


if __name__ == "__main__":
    sys.exit(main())

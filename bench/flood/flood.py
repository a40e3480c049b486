#!/usr/bin/python3
"""Flood bound (issue 13): the Distributor (fg-distributor-bench, the controller's defaults) with
R real simulated agents (fg-agent-sim) connected and fenced, then fg-flood for D seconds:
invented node names, oversize hellos, oversize reports, half-open streams that never say hello,
and raw TCP connections that never speak HTTP/2. Measured: RSS before/peak/after, and every
--probe-interval-s a new fence version for every node: the time until all R real agents ACKed it
(every real agent still served), and real-agent streams that ended during the flood.

usage: flood.py BUILD_DIR [--agents 500] [--duration-s 30] [--threads 16] [--raw 1000]
                [--server-args "..."] [--bound-mb 200] [--out bench/results/flood-bound]
Exit status 1 when a real agent was not served within --serve-timeout-s in some round, a real
stream ended, or the RSS peak exceeded --bound-mb.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_memory import Proc  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--duration-s", type=float, default=30)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--raw", type=int, default=1000)
    ap.add_argument("--halfopen-batch", type=int, default=300)
    ap.add_argument("--probe-interval-s", type=float, default=3)
    ap.add_argument("--serve-timeout-s", type=float, default=10)
    ap.add_argument("--server-args", default="--memory-quota-mb 512")
    ap.add_argument("--bound-mb", type=float, default=200)
    ap.add_argument("--out")
    a = ap.parse_args()
    R = a.agents
    server = Proc([f"{a.build}/bench/flood/fg-distributor-bench", "--nodes", str(R)] +
                  a.server_args.split())
    port = server.read_json("ready")["port"]
    server.read_json("stats")
    lock = threading.Lock()

    def stats(cmd="stats", ev="stats"):
        with lock:
            server.send(cmd)
            return server.read_json(ev)

    sim = Proc([f"{a.build}/bench/scale/fg-agent-sim", "--target", f"127.0.0.1:{port}",
                "--agents", str(R), "--report-interval-ms", "5000"], keep={"end"})
    t0 = time.time()
    while time.time() - t0 < 60:
        st = stats()
        if st["acks"] >= R and st["connected"] >= R:
            break
        time.sleep(0.2)
    else:
        print("real agents never all fenced", file=sys.stderr)
        return 1
    time.sleep(2)
    before = stats()
    ends_before = sim.q.qsize()

    peak = {"rss_kb": before["rss_kb"]}
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            peak["rss_kb"] = max(peak["rss_kb"], stats()["rss_kb"])
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    flood = subprocess.Popen([f"{a.build}/bench/flood/fg-flood", "--port", str(port),
                              "--threads", str(a.threads), "--duration-s", str(a.duration_s),
                              "--raw-connections", str(a.raw),
                              "--halfopen-batch", str(a.halfopen_batch)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rounds = []
    t_flood = time.time()
    while flood.poll() is None:
        time.sleep(a.probe_interval_s)
        if flood.poll() is not None:
            break
        acks0 = stats()["acks"]
        t1 = time.time()
        b = stats("bump", "bumped")
        served = None
        while time.time() - t1 < a.serve_timeout_s:
            st = stats()
            if st["acks"] >= acks0 + R:
                served = time.time() - t1
                break
            time.sleep(0.05)
        rounds.append({"t_s": round(t1 - t_flood, 1), "all_acked_s":
                       round(served, 3) if served is not None else None,
                       "connected": st["connected"], "rss_kb": b["rss_kb"]})
    out, _ = flood.communicate(timeout=60)
    flood_summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    time.sleep(12)  # past the hello deadline: what the flood left behind
    sampling.set()
    sampler.join()
    after = stats()
    real_ends = sim.q.qsize() - ends_before
    sim.stop()
    server.stop()
    ok_rounds = [r for r in rounds if r["all_acked_s"] is not None]
    result = {
        "agents": R,
        "server_args": a.server_args,
        "flood": {"duration_s": a.duration_s, "threads": a.threads, "raw_connections": a.raw,
                  "summary": flood_summary},
        "rss_before_mb": round(before["rss_kb"] / 1024, 1),
        "rss_peak_mb": round(peak["rss_kb"] / 1024, 1),
        "rss_after_mb": round(after["rss_kb"] / 1024, 1),
        "heap_in_use_before_mb": round(before["heap_in_use"] / 2**20, 1),
        "heap_in_use_after_mb": round(after["heap_in_use"] / 2**20, 1),
        "bound_mb": a.bound_mb,
        "nodes_after": after["nodes"],
        "connected_after": after["connected"],
        "probe_rounds": rounds,
        "rounds_all_served": len(ok_rounds),
        "rounds_total": len(rounds),
        "max_all_acked_s": max((r["all_acked_s"] for r in ok_rounds), default=None),
        "real_agent_streams_ended": real_ends,
        "load_avg": os.getloadavg(),
    }
    passed = (len(rounds) > 0 and len(ok_rounds) == len(rounds) and real_ends == 0 and
              after["connected"] == R and result["rss_peak_mb"] <= a.bound_mb and
              after["nodes"] == R)
    result["passed"] = passed
    print(json.dumps(result, indent=1))
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(a.out + ".md", "w") as f:
            f.write(markdown(result))
    return 0 if passed else 1


def markdown(r):
    fl = r["flood"]
    codes = fl["summary"].get("codes", {})
    lines = [
        "# Flood bound (issue 13) — bench/flood/flood.py",
        "",
        f"{r['agents']} real simulated agents (fg-agent-sim) connected and fenced to the Distributor "
        f"(fg-distributor-bench `{r['server_args']}`, otherwise the controller's defaults), then "
        f"{fl['duration_s']:.0f} s of fg-flood on {fl['threads']} threads plus "
        f"{fl['raw_connections']} raw TCP connections that never speak HTTP/2.",
        "",
        "| | |",
        "|---|---|",
        f"| flood attempts (streams) | {fl['summary'].get('attempts')} |",
    ]
    names = {"0": "OK", "4": "DEADLINE_EXCEEDED", "8": "RESOURCE_EXHAUSTED",
             "9": "FAILED_PRECONDITION", "14": "UNAVAILABLE", "3": "INVALID_ARGUMENT"}
    for kind, by in sorted(codes.items()):
        txt = ", ".join(f"{names.get(c, c)} {n}" for c, n in sorted(by.items()))
        lines.append(f"| {kind} | {txt} |")
    lines += [
        f"| controller RSS before / peak / after (MB) | {r['rss_before_mb']} / "
        f"{r['rss_peak_mb']} / {r['rss_after_mb']} |",
        f"| malloc'd heap in use before / after (MB) | {r['heap_in_use_before_mb']} / "
        f"{r['heap_in_use_after_mb']} |",
        f"| stated bound (MB) | {r['bound_mb']} |",
        f"| probe rounds (new fence to every real agent) all ACKed | {r['rounds_all_served']} of "
        f"{r['rounds_total']}, slowest {r['max_all_acked_s']} s |",
        f"| real-agent streams ended during the flood | {r['real_agent_streams_ended']} |",
        f"| node entries after (= real nodes) | {r['nodes_after']} |",
        f"| passed | {r['passed']} |",
        "",
        f"Load average during the run: {', '.join(f'{x:.1f}' for x in r['load_avg'])} "
        "(shared 2-core machine).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

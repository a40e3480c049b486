#!/usr/bin/env python3
"""ab.py — controller binaries, one API server, steps interleaved (A B C A B C ...).

Same-run A/B of the controller alone: one private test bed loaded once (driver.py --testbed),
then `driver.py step` with each binary in turn, the same simulator and phases, rows appended to
one file; `--summary` prints each arm's values per field (rows grouped by controller sha256).

  bench/scale/ab.py --arm before=OLD_BIN --arm after=NEW_BIN --build build/release --rounds 2 \\
      --nodes 1000 --pods 30000 --agents 1000 --rows bench/results/scale-ab-DATE.jsonl
  bench/scale/ab.py --summary bench/results/scale-ab-DATE.jsonl --arm before=OLD_BIN ...

An arm may carry controller flags after "::" (LABEL=BINARY::FLAGS): one binary, two settings,
e.g. --arm on=BIN --arm off=BIN::--max-observed-pods=0; rows are then told apart by the flags too.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIELDS = ["controller_rss_steady_mb", "controller_rss_peak_mb", "controller_idle_cpu_percent",
          "start_to_all_fenced_s", "start_cpu_s", "edit_ack_p50_ms", "edit_ack_p99_ms",
          "edit_controller_cpu_ms_per_edit", "edit_sim_cpu_ms_per_edit", "relist_to_all_fenced_s",
          "relist_cpu_s", "relist_then_edit_all_acked_s", "drops_total", "load_avg"]


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def summary(rows_file, arms):
    rows = [json.loads(line) for line in open(rows_file) if line.strip()]
    by = {label: [r for r in rows if r.get("controller_sha256") == h and
                  r.get("controller_args", "") == args]
          for label, h, args in arms}
    out = {}
    for field in FIELDS:
        out[field] = {label: [r.get(field) for r in rs] for label, rs in by.items()}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arm", action="append", required=True, metavar="LABEL=BINARY",
                   help="a controller binary and its label (two or more, run in this order)")
    p.add_argument("--build", default=os.path.join(REPO, "build", "release"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=30000)
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--phases", default="edits,relist")
    p.add_argument("--pod-shape", default="realistic", choices=["realistic", "lean"])
    p.add_argument("--rows")
    p.add_argument("--work", default=None)
    p.add_argument("--summary", metavar="ROWS", help="print the arms' values from ROWS and exit")
    a = p.parse_args()
    binaries = []
    for x in a.arm:
        label, rest = x.split("=", 1)
        binary, _, args = rest.partition("::")
        binaries.append((label, binary, args))
    arms = [(label, sha(binary), args) for label, binary, args in binaries]
    if a.summary:
        json.dump(summary(a.summary, arms), sys.stdout, indent=1)
        print()
        return 0
    if not a.rows:
        p.error("--rows is required to run")
    work = a.work or tempfile.mkdtemp(prefix="fg-scale-ab-")
    tb = os.path.join(work, "tb")
    rc = 0
    try:
        for i in range(a.rounds):
            for label, binary, args in binaries:
                step_work = os.path.join(work, f"r{i}-{label}")
                cmd = [sys.executable, os.path.join(HERE, "driver.py"), "step", "--build", a.build,
                       "--nodes", str(a.nodes), "--pods", str(a.pods), "--agents", str(a.agents),
                       "--work", step_work, "--rows", a.rows, "--controller", binary,
                       "--phases", a.phases, "--testbed", tb, "--controller-args=" + args,
                       "--pod-shape", a.pod_shape]
                print(f"ab: round {i} arm {label}: {' '.join(cmd)}", flush=True)
                r = subprocess.run(cmd)
                if r.returncode != 0:
                    print(f"ab: round {i} arm {label} failed (rc {r.returncode})", flush=True)
                    rc = 1
    finally:
        subprocess.run([os.path.join(REPO, "tests", "testbed", "testbed.sh"), "down", tb])
    json.dump(summary(a.rows, arms), sys.stdout, indent=1)
    print()
    return rc


if __name__ == "__main__":
    sys.exit(main())

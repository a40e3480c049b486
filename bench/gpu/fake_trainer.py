#!/usr/bin/env python3
"""fake_trainer.py — test double of trainer.py for vm_v2_check.sh (no torch, stdlib only).

Takes trainer.py's flags, honours its file contract (--make-data makes a folder; --ready, --go,
--out with the fields gpu_wedge.py reads) and burns CPU in --workers forked children plus a
main loop that "steps" every --cpu-step-ms ms. It exists so that the driver's cgroup v2 path
(tree, weights, agent apply/revert, usage sampling, cleanup) can run in a VM that has no torch;
its numbers mean nothing.
"""

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def spin_until(t_end: float) -> None:
    x = 1
    while time.monotonic() < t_end:
        for _ in range(5000):
            x = (x * 48271) % 2147483647


def cpu_s(pids: list[int]) -> float:
    tot = 0.0
    for pid in pids:
        try:
            f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            tot += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return tot


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--make-data", action="store_true")
    p.add_argument("--out", type=Path)
    p.add_argument("--ready")
    p.add_argument("--go")
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--duration", type=float, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--cpu-step-ms", type=float, default=50)
    p.add_argument("--mode", default="train")
    a, _ = p.parse_known_args()
    if a.make_data:
        a.data.mkdir(parents=True, exist_ok=True)
        (a.data / "img0000.jpg").write_bytes(b"\xff\xd8fake")
        return 0
    t_launch = time.monotonic()
    if a.ready:
        Path(a.ready).touch()
    if a.go:
        while not os.path.exists(a.go):
            time.sleep(0.02)
    end = time.monotonic() + a.warmup + a.duration + 1
    kids = []
    for _ in range(max(1, a.workers)):
        pid = os.fork()
        if pid == 0:
            spin_until(end)
            os._exit(0)
        kids.append(pid)
    time.sleep(a.warmup)
    pids = [os.getpid()] + kids
    c0, t0 = cpu_s(pids), time.monotonic()
    step = max(a.cpu_step_ms, 1) / 1000
    batches = 0
    while time.monotonic() < t0 + a.duration:
        time.sleep(step)
        batches += 1
    t1 = time.monotonic()
    c1 = cpu_s(pids)
    for pid in kids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    w = t1 - t0
    res = {"samples_per_s": batches * a.batch / w, "batches": batches, "duration_s": w,
           "accelerator_busy": 0.5, "cpu_seconds": c1 - c0, "cpu_cores": (c1 - c0) / w,
           "run_delay_seconds": 0.0, "cpu_s_per_sample": (c1 - c0) / max(1, batches * a.batch),
           "t_start_mono": t0, "t_end_mono": t1, "startup_s": time.monotonic() - t_launch,
           "torch": "fake", "torchvision": "fake", "gpu": None}
    a.out.write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

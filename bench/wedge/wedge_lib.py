"""wedge_lib.py — what the wedge driver (bench/wedge/run_wedge.py) and the GPU wedge kit
(bench/gpu/gpu_wedge.py) share: cgroup-file and cpulist helpers and the CPU-usage sampler.
bench/gpu/bundle.sh copies it into the kit beside gpu_wedge.py. Only Python 3 stdlib.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from typing import Callable


def write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def parse_cpulist(s: str) -> list[int]:
    out: list[int] = []
    for part in s.strip().split(","):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def rmdir_retry(d: Path) -> None:
    """rmdir a cgroup, retrying for up to 2 s while its last tasks leave (gone already: fine)."""
    for _ in range(100):
        try:
            d.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(0.02)


def med(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec: str = ".3f") -> str:
    return "–" if v is None else format(v, spec)


def aggregate_ladder(runs: list[dict], arms: list[str], ladder: list[int],
                     fields: Callable[[list[dict]], dict]) -> list[dict]:
    """One row per arm and neighbour count that has runs: samples/s median, min and max, the ratio
    to the arm's own 0-neighbour median, then fields(those runs); last, ratio_to_cfs_isolated (to
    the cfs arm's 0-neighbour median) on every row."""
    rows, base = [], {}
    for arm in arms:
        for n in ladder:
            rs = [r for r in runs if r["arm"] == arm and r["neighbours"] == n]
            if not rs:
                continue
            sps = [r["samples_per_s"] for r in rs]
            m = statistics.median(sps)
            if n == 0:
                base[arm] = m
            rows.append({
                "arm": arm, "neighbours": n, "runs": len(rs), "samples_per_s_median": m,
                "samples_per_s_min": min(sps), "samples_per_s_max": max(sps),
                "ratio_to_isolated": m / base[arm] if base.get(arm) else None,
                **fields(rs),
            })
    iso = base.get("cfs")
    for r in rows:
        r["ratio_to_cfs_isolated"] = r["samples_per_s_median"] / iso if iso else None
    return rows


class UsageSampler(threading.Thread):
    """Cumulative CPU seconds of groups of cgroups (and the machine's busy time), every `period` s.
    A subclass says how to read one cgroup's usage in seconds (usage_s; None when unreadable)."""

    def __init__(self, groups: dict[str, list[Path]], period: float = 0.1):
        super().__init__(daemon=True)
        self.groups, self.period = groups, period
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stop_ev = threading.Event()

    def usage_s(self, path: Path) -> float | None:
        raise NotImplementedError

    @staticmethod
    def machine_busy_s() -> float:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def take(self) -> None:
        row: dict[str, float] = {"machine": self.machine_busy_s()}
        for key, paths in self.groups.items():
            row[key] = sum(self.usage_s(p) or 0.0 for p in paths)
        self.samples.append((time.monotonic(), row))

    def run(self) -> None:
        while not self.stop_ev.is_set():
            self.take()
            self.stop_ev.wait(self.period)

    def stop(self) -> None:
        self.stop_ev.set()
        self.join()
        self.take()

    def at(self, key: str, t: float) -> float | None:
        s = self.samples
        if not s or t < s[0][0] or t > s[-1][0]:
            return None
        for (t0, r0), (t1, r1) in zip(s, s[1:]):
            if t0 <= t <= t1:
                f = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
                return r0[key] + f * (r1[key] - r0[key])
        return s[-1][1][key]

    def delta(self, key: str, t0: float, t1: float) -> float | None:
        a, b = self.at(key, t0), self.at(key, t1)
        return None if a is None or b is None else b - a

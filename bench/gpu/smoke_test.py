#!/usr/bin/env python3
"""smoke_test.py — ctest gpu_wedge_smoke (label bench): the GPU wedge kit, end to end, CPU-only.

    smoke_test.py --agent build/release/agent/feedguard-agent

1. bundle.sh packs the agent + its libraries + the kit into a scratch dir (≤ 64 MiB), the bundle
   is copied elsewhere and its agent runs (`--help`, `topology`) with LD_LIBRARY_PATH unset.
2. From that copy, gpu_wedge.py runs in --cpu-only mode (real cgroups under its own root, the
   bundled agent applying and reverting fences): arms cfs, fence-idle, fence-cpuset, ladder 0,2.
3. Checks the .json/.md/.png it wrote: every arm × rung ran, the fences were applied by the agent
   and reverted, fence-cpuset pinned the trainer to fewer CPUs than the machine has, no cgroup of
   the run is left; `report` re-aggregates the .json and plot_gpu_wedge.py re-plots it.
Needs root and a python with torch (bench/gpu/torch_venv.sh); exits 77 (skip) without them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_wedge as gw  # noqa: E402

KIT = Path(__file__).resolve().parent
SKIP = 77
failures: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def torch_python() -> str | None:
    """A cached torch venv first (newest), else python3 (gpu_wedge.first_with_torch)."""
    return gw.first_with_torch(gw.torch_venvs() + ["python3"])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--agent", type=Path, required=True)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    if os.geteuid() != 0:
        print("SKIP: needs root (cgroups)")
        return SKIP
    py = torch_python()
    if py is None:
        print("SKIP: no python with torch + torchvision (run bench/gpu/torch_venv.sh once)")
        return SKIP
    if not os.access(a.agent, os.X_OK):
        print(f"FAIL: no agent at {a.agent}")
        return 1
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="fg-gpu-smoke-"))
    try:
        # 1. Bundle, move it, run its agent with no LD_LIBRARY_PATH.
        r = subprocess.run(["bash", str(KIT / "bundle.sh"), "--agent", str(a.agent),
                            "--out", str(tmp / "made" / ".gpukit")],
                           capture_output=True, text=True, timeout=120)
        print(r.stdout + r.stderr)
        check(r.returncode == 0, "bundle.sh succeeded")
        if r.returncode != 0:
            return 1
        size = sum(f.stat().st_size for f in (tmp / "made").rglob("*") if f.is_file())
        check(size <= 64 * 2**20, f"bundle ≤ 64 MiB ({size / 2**20:.1f} MiB)")
        # The copy sits where the device tool puts a carried path: <repo>/.gpukit.
        repo = tmp / "repo"
        (repo / "bench" / "gpu").mkdir(parents=True)
        shutil.copytree(tmp / "made" / ".gpukit", repo / ".gpukit", symlinks=True)
        shutil.rmtree(tmp / "made")
        bagent = repo / ".gpukit" / "agent" / "feedguard-agent"
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
        r = subprocess.run([str(bagent), "--help"], capture_output=True, text=True, env=env,
                           timeout=30)
        check(r.returncode == 0 and "feedguard-agent" in r.stdout, "bundled agent --help")
        r = subprocess.run([str(bagent), "topology", "--json"], capture_output=True, text=True,
                           env=env, timeout=30)
        ok = r.returncode == 0
        try:
            topo = json.loads(r.stdout) if ok else {}
        except ValueError:
            topo, ok = {}, False
        check(ok and topo.get("summary", {}).get("pus") == len(os.sched_getaffinity(0)),
              f"bundled agent topology (pus {topo.get('summary', {}).get('pus')})")
        libs = sorted(x.name for x in (repo / ".gpukit" / "agent" / "lib").iterdir())
        r = subprocess.run([str(bagent), "apply", "--help"], capture_output=True, text=True,
                           env=env, timeout=30)
        check(r.returncode == 0 and "--fence" in r.stdout,
              f"bundled agent apply --help ({len(libs)} libraries: {' '.join(libs)})")

        # 2. The kit from the bundle copy, CPU-only, with the bundled agent.
        out = tmp / "out"
        cmd = [sys.executable, str(repo / ".gpukit" / "kit" / "gpu_wedge.py"), "run",
               "--cpu-only", "--arms", "cfs,fence-idle,fence-cpuset", "--ladder", "0,2",
               "--reps", "1", "--warmup", "1", "--duration", "2.5", "--cal-duration", "2",
               "--python", py, "--agent", str(bagent), "--out-dir", str(out),
               "--name", "smoke", "--time-budget", "150"]
        print("$ " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, env=env, timeout=200)
        check(r.returncode == 0, f"gpu_wedge.py run --cpu-only exited {r.returncode}")

        # 3. Results.
        js, md, png = out / "smoke.json", out / "smoke.md", out / "smoke.png"
        check(js.exists() and md.exists(), "smoke.json and smoke.md written")
        if not js.exists():
            return 1
        doc = json.loads(js.read_text())
        runs = doc["runs"]
        want = {(arm, n) for arm in ("cfs", "fence-idle", "fence-cpuset") for n in (0, 2)}
        got = {(r["arm"], r["neighbours"]) for r in runs}
        check(got == want, f"every arm × rung ran ({sorted(got)})")
        check(all(r["samples_per_s"] > 0 and r["trainer"]["batches"] > 0 for r in runs),
              "every run trained (samples/s > 0)")
        check(all(r["trainer_cpu_cores"] and r["trainer_cpu_cores"] > 0.05 for r in runs),
              "trainer CPU read from its cgroup")
        check(all(r["neighbour_cpu_cores"] and r["neighbour_cpu_cores"] > 0.1
                  for r in runs if r["neighbours"]), "neighbour CPU read from their cgroups")
        cal = doc["meta"]["calibration"]["config"]
        check(cal["request_milli"] < cal["demand_cores_est"] * 1000,
              f"trainer request {cal['request_milli']}m < its demand "
              f"{cal['demand_cores_est']:.2f} cores")
        for r in runs:
            if r["arm"] == "cfs":
                check(r["agent_apply"] is None, f"{r['tag']}: no fence on the cfs arm")
                continue
            ap, rv = r["agent_apply"] or {}, r["agent_revert"] or {}
            if r["neighbours"] or r["arm"] == "fence-cpuset":
                check((ap.get("filesWritten") or 0) > 0 and not ap.get("failed"),
                      f"{r['tag']}: agent applied ({ap.get('filesWritten')} files)")
                # Writing v1 cpu.idle also moves cpu.shares: the agent restores both.
                check((rv.get("filesReverted") or 0) >= ap.get("filesWritten", 0)
                      and rv.get("reverts_failed") == [],
                      f"{r['tag']}: agent reverted {rv.get('filesReverted')} files, "
                      f"failed {rv.get('reverts_failed')}")
            if r["arm"] == "fence-idle" and r["neighbours"]:
                check(any("cpu.idle=1" in w for w in ap.get("writes", [])),
                      f"{r['tag']}: neighbours got cpu.idle=1")
        allc = len(os.sched_getaffinity(0))
        for r in runs:
            if r["arm"] == "fence-cpuset":
                n = len(parse_cpulist(r["trainer_cpus"]))
                check(0 < n < allc, f"{r['tag']}: trainer pinned to {r['trainer_cpus']} "
                      f"({n} of {allc} CPUs)")
        rows = {(x["arm"], x["neighbours"]): x for x in doc["rows"]}
        check(rows[("cfs", 0)]["ratio_to_cfs_isolated"] == 1.0, "isolated ratio is 1 by definition")
        text = md.read_text()
        check("CPU-ONLY MODE" in text and "## Headline" in text and "| fence-idle | 2 |" in text,
              "smoke.md: CPU-only banner, headline, table")
        try:
            import matplotlib  # noqa: F401
            check(png.exists() and png.stat().st_size > 1000, "smoke.png written")
        except ImportError:
            print("note: no matplotlib for this python; png not expected")
        left = [d for d in Path("/sys/fs/cgroup").glob("*/" + doc["meta"]["cgroup_root"] + "*")]
        left += list(Path("/sys/fs/cgroup").glob(doc["meta"]["cgroup_root"] + "*"))
        check(not left, f"no cgroup of the run left ({left})")
        # report (merge/re-aggregate) and the separate plot step.
        r = subprocess.run([sys.executable, str(KIT / "gpu_wedge.py"), "report", "--in",
                            str(js), "--out-dir", str(tmp / "rep"), "--name", "again"],
                           capture_output=True, text=True, timeout=60)
        again = tmp / "rep" / "again.json"
        check(r.returncode == 0 and again.exists()
              and json.loads(again.read_text())["rows"] == doc["rows"],
              "report re-aggregates to the same rows")
        r = subprocess.run([sys.executable, str(KIT / "plot_gpu_wedge.py"), str(js),
                            str(tmp / "rep" / "p.png")], capture_output=True, text=True,
                           timeout=60)
        if (tmp / "rep" / "p.png").exists() or r.returncode != 1:
            check(r.returncode == 0, "plot_gpu_wedge.py re-plots from the json")
        for line in text.splitlines():
            if line.startswith("| ") or line.startswith("- cfs @") or line.startswith("- fence"):
                print(line)
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s), {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


def parse_cpulist(s: str) -> list[int]:
    out: list[int] = []
    for part in s.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out.extend(range(int(a), int(b or a) + 1))
    return out


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""run_wedge.py — driver of the wedge benchmark (docs/DESIGN.md §1 and §8).

Puts one DataLoader-heavy trainer (fg-wedge-trainer) on this node next to a ladder of batch
neighbours (fg-wedge-spinner) in kubelet-shaped cgroups, under several arms, and measures the
trainer's samples/s, its accelerator-busy fraction and how much of the CPU the trainer leaves idle
the neighbours actually get.

Arms
  cfs                   kubelet values only (trainer Burstable: request, no limit)
  cfs-quota             as cfs, neighbours also carry a CPU limit (→ kubelet CFS quota)
  cfs-cpuset            trainer Guaranteed with integer CPUs, pinned kubelet-static style
                        (exclusive CPUs for the trainer's container, the shared pool for the rest)
  fence-idle|weight|cpuset|quota
                        as cfs, plus a NodeFence applied by `feedguard-agent apply` (or emulated,
                        --fence-impl emulate) and reverted after the run
  fence-idle-boost      fence-idle plus the policy's trainers.cpu.weight = 10000 (the trainer pod's
                        weight raised while protected; not in the default arm list)
  fence-idle-spill      fence-idle plus the neighbours' containers kept off the first CPU (the
                        driver writes their cpuset.cpus, not the agent): an experiment asking
                        whether one neighbour-free CPU helps the trainer; not in the default list,
                        see bench/results/wedge-spill/
  control-gpubound-cfs, control-gpubound-fence-idle
                        a GPU-bound trainer (little CPU): the fence must not hurt it
  control-fits-cfs, control-fits-fence-idle
                        a Guaranteed trainer whose CPU demand fits its request

Setups
  --setup standin (default): pods are files for fg-kubelet-standin (tests/fixtures), which creates
      the cgroups with kubelet's values and runs the commands.
  --setup builtin: the driver makes a minimal kubelet-shaped cgroup v1 tree itself (same paths and
      values) and starts the processes in it. Meant for calibration before the stand-in exists.

Outputs (default bench/results/): wedge.json, wedge.md, wedge.png.
Only Python 3 stdlib; the plot needs python3-matplotlib (Debian), skipped with a note otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from wedge_lib import (UsageSampler, aggregate_ladder, fmt, med, parse_cpulist, rmdir_retry,
                       write)

REPO = Path(__file__).resolve().parents[2]
CG = Path("/sys/fs/cgroup")
PERIOD_US = 100000

# ----------------------------------------------------------------------------------------------
# kubelet facts the driver needs (docs/DESIGN.md §4). The agent has its own copy in agent/cgroup/.


def shares_for(milli: int) -> int:
    return max(2, min(262144, milli * 1024 // 1000))


def quota_for(milli: int) -> int:
    return max(milli * PERIOD_US // 1000, 1000)


@dataclasses.dataclass
class Container:
    name: str
    cid: str  # 64 hex
    request_milli: int
    limit_milli: int  # 0 = none
    command: list[str]


@dataclasses.dataclass
class Pod:
    name: str
    uid: str
    namespace: str
    containers: list[Container]
    role: str  # "trainer" | "neighbour"

    @property
    def qos(self) -> str:
        reqs = [c.request_milli for c in self.containers]
        lims = [c.limit_milli for c in self.containers]
        if all(l > 0 and r == l for r, l in zip(reqs, lims)):
            return "Guaranteed"
        if any(r > 0 or l > 0 for r, l in zip(reqs, lims)):
            return "Burstable"
        return "BestEffort"

    @property
    def request_milli(self) -> int:
        return sum(c.request_milli for c in self.containers)

    @property
    def limit_milli(self) -> int:
        lims = [c.limit_milli for c in self.containers]
        return sum(lims) if all(l > 0 for l in lims) else 0


class Layout:
    """Pod and container cgroup paths (relative to a controller mount), docs/DESIGN.md §4 table."""

    def __init__(self, root: str, driver: str):
        self.root, self.driver = root, driver

    def pod(self, p: Pod) -> str:
        q = p.qos
        if self.driver == "systemd":
            u = p.uid.replace("-", "_")
            if q == "Guaranteed":
                rel = f"kubepods.slice/kubepods-pod{u}.slice"
            else:
                t = q.lower()
                rel = f"kubepods.slice/kubepods-{t}.slice/kubepods-{t}-pod{u}.slice"
        else:
            rel = f"kubepods/pod{p.uid}" if q == "Guaranteed" else f"kubepods/{q.lower()}/pod{p.uid}"
        return f"{self.root}/{rel}"

    def container(self, p: Pod, c: Container) -> str:
        leaf = f"cri-containerd-{c.cid}.scope" if self.driver == "systemd" else c.cid
        return f"{self.pod(p)}/{leaf}"

    def tiers(self) -> dict[str, str]:
        if self.driver == "systemd":
            return {"kubepods": f"{self.root}/kubepods.slice",
                    "burstable": f"{self.root}/kubepods.slice/kubepods-burstable.slice",
                    "besteffort": f"{self.root}/kubepods.slice/kubepods-besteffort.slice"}
        return {"kubepods": f"{self.root}/kubepods", "burstable": f"{self.root}/kubepods/burstable",
                "besteffort": f"{self.root}/kubepods/besteffort"}


def cgpath(ctrl: str, rel: str) -> Path:
    return CG / ctrl / rel


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def fmt_cpulist(cpus: list[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


# ----------------------------------------------------------------------------------------------
# Setups: who creates the cgroups and runs the pods.


class Setup:
    layout: Layout

    def pod_dir(self, ctrl: str, p: Pod) -> Path:
        return cgpath(ctrl, self.layout.pod(p))

    def container_dir(self, ctrl: str, p: Pod, i: int) -> Path:
        return cgpath(ctrl, self.layout.container(p, p.containers[i]))

    def start(self) -> None: ...
    def create(self, pods: list[Pod]) -> None: ...
    def wait_running(self, pods: list[Pod], timeout: float) -> None: ...
    def delete(self, pods: list[Pod], timeout: float) -> None: ...
    def stop(self) -> None: ...


class StandinSetup(Setup):
    """Pods as files for fg-kubelet-standin (the default)."""

    def __init__(self, binary: Path, root: str, driver: str, workdir: Path, extra: list[str]):
        self.binary, self.root, self.driver = binary, root, driver
        self.pods_dir = workdir / "pods"
        self.layout = Layout(root, driver)
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.log = workdir / "standin.log"
        self.status: dict[str, dict] = {}  # pod name → its status.json

    # The stand-in reports the dirs it made; trust those over our own idea of the layout.
    def pod_dir(self, ctrl: str, p: Pod) -> Path:
        d = self.status.get(p.name, {}).get("pod_dirs", {}).get(ctrl)
        return Path(d) if d else super().pod_dir(ctrl, p)

    def container_dir(self, ctrl: str, p: Pod, i: int) -> Path:
        # status.json: "container_dirs": {"<container name>": {"cpu": …, "cpuacct": …, …}}
        cds = self.status.get(p.name, {}).get("container_dirs", {})
        d = cds.get(p.containers[i].name, {}).get(ctrl) if isinstance(cds, dict) else None
        return Path(d) if d else super().container_dir(ctrl, p, i)

    def start(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise SystemExit(f"kubelet stand-in not found: {self.binary} (build it, pass --standin, "
                             "or use --setup builtin)")
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        cmd = [str(self.binary), "serve", "--root", self.root, "--driver", self.driver,
               "--pods-dir", str(self.pods_dir)] + self.extra
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        time.sleep(0.5)
        if self.proc.poll() is not None:
            raise SystemExit(f"stand-in exited with {self.proc.returncode}; see {self.log}")

    def create(self, pods: list[Pod]) -> None:
        for p in pods:
            doc = {"uid": p.uid, "namespace": p.namespace, "name": p.name, "qos": p.qos,
                   "containers": [{"name": c.name, "id": f"containerd://{c.cid}",
                                   "cpu_request_milli": c.request_milli,
                                   "cpu_limit_milli": c.limit_milli, "command": c.command}
                                  for c in p.containers]}
            tmp = self.pods_dir / f".{p.name}.pod.json.tmp"
            tmp.write_text(json.dumps(doc))
            tmp.rename(self.pods_dir / f"{p.name}.pod.json")

    def wait_running(self, pods: list[Pod], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = {p.name for p in pods}
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                try:
                    st = json.loads((self.pods_dir / f"{name}.status.json").read_text())
                    if st.get("error"):  # the stand-in could not start the pod
                        raise RuntimeError(f"stand-in refused {name}: {st['error']}")
                    if st.get("pids"):
                        self.status[name] = st
                        waiting.discard(name)
                except (OSError, ValueError):
                    pass
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"stand-in died (rc {self.proc.returncode}); see {self.log}")
            time.sleep(0.05)
        if waiting:
            raise RuntimeError(f"pods not running after {timeout}s: {sorted(waiting)}")

    def delete(self, pods: list[Pod], timeout: float) -> None:
        for p in pods:
            try:
                (self.pods_dir / f"{p.name}.pod.json").unlink()
            except FileNotFoundError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = [p for p in pods if self.pod_dir("cpu", p).exists()
                    or (self.pods_dir / f"{p.name}.status.json").exists()]
            if not left:
                for p in pods:
                    self.status.pop(p.name, None)
                return
            time.sleep(0.05)
        raise RuntimeError(f"pods not removed after {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class BuiltinSetup(Setup):
    """A minimal kubelet-shaped cgroup v1 tree made by the driver (for calibration)."""

    CTRLS = ("cpu", "cpuacct", "cpuset")

    def __init__(self, root: str, driver: str, alloc_milli: int):
        self.root = root
        self.layout = Layout(root, driver)
        self.alloc_milli = alloc_milli
        self.procs: dict[str, list[subprocess.Popen]] = {}
        self.made: list[str] = []  # relative dirs we created, in creation order
        self.burstable: dict[str, int] = {}  # pod name → request

    def _mkdir(self, rel: str) -> None:
        for ctrl in self.CTRLS:
            d = cgpath(ctrl, rel)
            if not d.exists():
                d.mkdir()
                if ctrl == "cpuset":  # v1: a new cpuset is empty until cpus and mems are set
                    write(d / "cpuset.cpus", (d.parent / "cpuset.cpus").read_text().strip())
                    write(d / "cpuset.mems", (d.parent / "cpuset.mems").read_text().strip())
        if rel not in self.made:
            self.made.append(rel)

    def start(self) -> None:
        for ctrl in self.CTRLS:
            if not (CG / ctrl / "cgroup.procs").exists():
                raise SystemExit(f"--setup builtin needs the cgroup v1 {ctrl} controller at {CG/ctrl}")
        self._mkdir(self.root)
        t = self.layout.tiers()
        for key in ("kubepods", "burstable", "besteffort"):
            parts = t[key].split("/")
            for i in range(1, len(parts) + 1):
                self._mkdir("/".join(parts[:i]))
        write(cgpath("cpu", t["kubepods"]) / "cpu.shares", str(shares_for(self.alloc_milli)))
        write(cgpath("cpu", t["besteffort"]) / "cpu.shares", "2")
        self._update_burstable()

    def _update_burstable(self) -> None:
        t = self.layout.tiers()
        write(cgpath("cpu", t["burstable"]) / "cpu.shares",
              str(shares_for(sum(self.burstable.values()))))

    def create(self, pods: list[Pod]) -> None:
        for p in pods:
            prel = self.layout.pod(p)
            self._mkdir(prel)
            write(cgpath("cpu", prel) / "cpu.shares",
                  str(2 if p.qos == "BestEffort" else shares_for(p.request_milli)))
            write(cgpath("cpu", prel) / "cpu.cfs_quota_us",
                  str(quota_for(p.limit_milli) if p.limit_milli else -1))
            if p.qos == "Burstable":
                self.burstable[p.name] = p.request_milli
                self._update_burstable()
            self.procs[p.name] = []
            for c in p.containers:
                crel = self.layout.container(p, c)
                self._mkdir(crel)
                write(cgpath("cpu", crel) / "cpu.shares", str(shares_for(c.request_milli)))
                write(cgpath("cpu", crel) / "cpu.cfs_quota_us",
                      str(quota_for(c.limit_milli) if c.limit_milli else -1))
                procs_files = [cgpath(ctrl, crel) / "cgroup.procs" for ctrl in self.CTRLS]

                def enter(files=procs_files) -> None:  # runs in the child, before exec
                    for f in files:
                        with open(f, "w") as fh:
                            fh.write(str(os.getpid()))

                self.procs[p.name].append(subprocess.Popen(
                    c.command, preexec_fn=enter, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))

    def wait_running(self, pods: list[Pod], timeout: float) -> None:
        return

    def delete(self, pods: list[Pod], timeout: float) -> None:
        for p in pods:
            for pr in self.procs.get(p.name, []):
                if pr.poll() is None:
                    pr.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in pods:
            for pr in self.procs.pop(p.name, []):
                try:
                    pr.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pr.kill()
                    pr.wait()
            for c in p.containers:
                self._rmdir(self.layout.container(p, c))
            self._rmdir(self.layout.pod(p))
            if self.burstable.pop(p.name, None) is not None:
                self._update_burstable()

    def _rmdir(self, rel: str) -> None:
        for ctrl in self.CTRLS:
            rmdir_retry(cgpath(ctrl, rel))
        if rel in self.made:
            self.made.remove(rel)

    def stop(self) -> None:
        for name in list(self.procs):
            for pr in self.procs.pop(name):
                if pr.poll() is None:
                    pr.kill()
                pr.wait()
        for rel in reversed(list(self.made)):
            self._rmdir(rel)


# ----------------------------------------------------------------------------------------------
# Fences: the NodeFence document, applied by the agent (default) or emulated by direct writes.


def node_fence(kind: str, trainer: Pod, neighbours: list[Pod], version: int, trainer_cores: int,
               max_cpu_percent: int, trainer_weight: int = 0) -> dict:
    def podref(p: Pod) -> dict:
        return {"uid": p.uid, "namespace": p.namespace, "name": p.name,
                "qosClass": {"Guaranteed": "GUARANTEED", "Burstable": "BURSTABLE",
                             "BestEffort": "BEST_EFFORT"}[p.qos],
                "containers": [{"name": c.name, "containerId": f"containerd://{c.cid}"}
                               for c in p.containers],
                "cpuRequestMilli": str(p.request_milli), "cpuLimitMilli": str(p.limit_milli)}

    trainer_cpu: dict = ({"cores": trainer_cores, "placement": "WHOLE_CORES", "numa": "IGNORE"}
                         if trainer_cores > 0 else {})
    if trainer_weight > 0:
        trainer_cpu["weight"] = trainer_weight  # FencePolicy trainers.cpu.weight
    policy = {"name": "wedge", "generation": "1", "priority": 100, "mode": "ENFORCE",
              "trainerCpu": trainer_cpu, "neighbourFence": kind}
    if kind == "QUOTA":
        policy["neighbourMaxCpuPercent"] = max_cpu_percent
    return {"nodeName": platform.node(), "version": str(version), "policies": [policy],
            "trainers": [{"pod": podref(trainer), "policy": "wedge"}],
            "neighbours": [{"pod": podref(n), "policy": "wedge"} for n in neighbours]}


class AgentFence:
    """`feedguard-agent apply` / `revert` (the agent's local commands, the real engine path).

    The agent prints a JSON report on stdout and exits 0; bad input (unknown pod, malformed
    fence) exits 2 with a message on stderr and writes nothing; a failed write exits 1."""

    def __init__(self, binary: Path, root: str, driver: str, state_dir: Path, extra: list[str],
                 log: Path, cgroup: Path | None = None):
        self.binary, self.root, self.driver, self.state_dir, self.extra, self.log = (
            binary, root, driver, state_dir, extra, log)
        # The cpu cgroup the agent's commands run in (made by the driver, beside the benchmark
        # root and weighted like it). A node's agent is a pod with its own CPU request; left in
        # the host's root cgroup (1024 shares) against a benchmark root of --root-shares with
        # 16 busy spinners, `apply` got ~1.5 % of a CPU and sometimes took over 60 s.
        self.cgroup = cgroup
        self.last_apply: dict = {}
        self.last_revert: dict = {}

    def check(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise SystemExit(f"feedguard-agent not found: {self.binary} (pass --agent, or "
                             "--fence-impl emulate, or leave the fence arms out)")

    def _run(self, args: list[str]) -> dict:
        # No kubelet CPU manager on this node (the stand-in has none): --cpu-manager-state "".
        cmd = [str(self.binary)] + args + ["--cgroup-root", self.root,
                                           "--cgroup-driver", self.driver,
                                           "--state-dir", str(self.state_dir),
                                           "--cpu-manager-state", ""] + self.extra
        procs = self.cgroup / "cgroup.procs" if self.cgroup else None

        def enter_cgroup() -> None:
            if procs is not None:
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           preexec_fn=enter_cgroup)
        wall = time.monotonic() - t0
        with open(self.log, "a") as lf:
            lf.write("$ " + " ".join(repr(c) if not c else c for c in cmd) +
                     f"\n[rc {r.returncode}, {wall:.2f} s]\n{r.stdout}{r.stderr}\n")
        if r.returncode != 0:
            msg = (r.stderr.strip() or r.stdout.strip())[-400:]
            raise RuntimeError(f"feedguard-agent {args[0]} exited {r.returncode}: {msg}")
        try:
            rep = json.loads(r.stdout)
        except ValueError as e:
            raise RuntimeError(f"feedguard-agent {args[0]}: report is not JSON ({e})")
        rep["_wall_s"] = round(wall, 3)
        return rep

    @staticmethod
    def summary(rep: dict) -> dict:
        return {k: rep.get(k) for k in ("fenceVersion", "enforced", "failed", "filesWritten",
                                        "filesReverted", "_wall_s")} | {
            "writes": [f"{w.get('file')}={w.get('value')}" for w in rep.get("writes", [])]}

    def apply(self, fence_file: Path, doc: dict, setup: Setup) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        rep = self._run(["apply", "--fence", str(fence_file)])
        self.last_apply = self.summary(rep)
        # A fence with nothing to fence (no neighbours, no trainer cores) rightly writes nothing.
        must_write = bool(doc.get("neighbours")) or bool(doc["policies"][0].get("trainerCpu"))
        if rep.get("failed") or (must_write and not rep.get("filesWritten")):
            raise RuntimeError(f"agent apply enforced nothing: {json.dumps(self.last_apply)}")

    def revert(self) -> None:
        self.last_revert = self.summary(self._run(["revert"]))


class EmulatedFence:
    """Writes what a fence would write, straight to the pod cgroups; restores the exact bytes.

    A reference point only (to calibrate before the agent exists); results are labelled so."""

    def __init__(self, cpus: list[int]):
        self.cpus = cpus
        self.saved: list[tuple[Path, str]] = []

    def check(self) -> None:
        pass

    def _set(self, path: Path, value: str) -> None:
        self.saved.append((path, path.read_text()))
        write(path, value)

    def apply(self, fence_file: Path, doc: dict, setup: Setup) -> None:
        kind = doc["policies"][0]["neighbourFence"]
        tr = doc["_trainer"]
        nbs = doc["_neighbours"]
        if doc["policies"][0]["trainerCpu"].get("weight"):
            w = doc["policies"][0]["trainerCpu"]["weight"]
            # kubelet's linear map, v2 weight → v1 shares (the agent's cgroup layer does the same).
            self._set(setup.pod_dir("cpu", tr) / "cpu.shares", str(2 + (w - 1) * 262142 // 9999))
        if kind == "IDLE":
            for n in nbs:
                self._set(setup.pod_dir("cpu", n) / "cpu.idle", "1")
        elif kind == "WEIGHT":
            for n in nbs:
                self._set(setup.pod_dir("cpu", n) / "cpu.shares", "2")
        elif kind == "QUOTA":
            cores = doc["_quota_cores"]
            per = max(1000, int(cores * PERIOD_US / max(1, len(nbs))))
            for n in nbs:
                self._set(setup.pod_dir("cpu", n) / "cpu.cfs_quota_us", str(per))
        elif kind == "CPUSET":
            k = doc["_trainer_cores"]
            mine, rest = fmt_cpulist(self.cpus[:k]), fmt_cpulist(self.cpus[k:])
            for p, cpus in [(tr, mine)] + [(n, rest) for n in nbs]:
                for i in range(len(p.containers)):  # v1: shrink children first
                    self._set(setup.container_dir("cpuset", p, i) / "cpuset.cpus", cpus)
                self._set(setup.pod_dir("cpuset", p) / "cpuset.cpus", cpus)

    def revert(self) -> None:
        # Restore in reverse; cpuset parents grow before their children do.
        for path, value in reversed(self.saved):
            try:
                write(path, value.strip() or "\n")
            except OSError as e:
                print(f"warning: cannot restore {path}: {e}", file=sys.stderr)
        self.saved.clear()


# ----------------------------------------------------------------------------------------------
# Arms.


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    profile: str = "wedge"  # wedge | gpubound | fits | pinned
    fence: str | None = None  # IDLE | WEIGHT | CPUSET | QUOTA
    neighbour_limit: bool = False
    static_cpuset: bool = False
    trainer_weight: int = 0  # FencePolicy trainers.cpu.weight (v2 scale), 0 = unset
    # Experiment: the driver keeps every neighbour container off the first K CPUs after the
    # fence is applied (the trainer keeps all CPUs). Not a feedguard fence.
    neighbour_skip_cpus: int = 0


ARMS = {a.name: a for a in [
    Arm("cfs"),
    Arm("cfs-quota", neighbour_limit=True),
    Arm("cfs-cpuset", profile="pinned", static_cpuset=True),
    Arm("fence-idle", fence="IDLE"),
    Arm("fence-idle-boost", fence="IDLE", trainer_weight=10000),
    Arm("fence-idle-spill", fence="IDLE", neighbour_skip_cpus=1),
    Arm("fence-weight", fence="WEIGHT"),
    Arm("fence-cpuset", fence="CPUSET"),
    Arm("fence-quota", fence="QUOTA"),
    Arm("control-gpubound-cfs", profile="gpubound"),
    Arm("control-gpubound-fence-idle", profile="gpubound", fence="IDLE"),
    Arm("control-fits-cfs", profile="fits"),
    Arm("control-fits-fence-idle", profile="fits", fence="IDLE"),
]}


# The full run's arms (the follow-up experiments fence-idle-boost and fence-idle-spill are asked
# for by name).
DEFAULT_ARMS = ["cfs", "cfs-quota", "cfs-cpuset", "fence-idle", "fence-weight", "fence-cpuset",
                "fence-quota", "control-gpubound-cfs", "control-gpubound-fence-idle",
                "control-fits-cfs", "control-fits-fence-idle"]


def rand_hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def rand_uid(rng: random.Random) -> str:
    h = rand_hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ----------------------------------------------------------------------------------------------
# Sampling cgroup CPU counters while a run is in flight.


class Sampler(UsageSampler):
    """Samples cumulative CPU ns of groups of cgroups (and the whole machine) every `period` s."""

    def usage_s(self, path: Path) -> float | None:
        v = read_int(path)
        return None if v is None else v / 1e9


# ----------------------------------------------------------------------------------------------
# One run.


class Bench:
    def __init__(self, args: argparse.Namespace, setup: Setup, fence_impl, workdir: Path,
                 cpus: list[int]):
        self.a, self.setup, self.fence_impl, self.workdir, self.cpus = (
            args, setup, fence_impl, workdir, cpus)
        self.rng = random.Random(args.seed)
        self.version = int(time.time() * 1000)
        self.counter = 0

    def trainer_args(self, profile: str) -> list[str]:
        a = self.a
        base = ["--image-size", str(a.image_size), "--crop", str(a.crop),
                "--duration", str(a.duration), "--warmup", str(a.warmup)]
        if profile == "gpubound":
            return base + ["--gpu-bound"]
        if profile == "fits":
            return base + ["--workers", str(a.fits_workers), "--batch", str(a.batch),
                           "--step-ms", str(a.fits_step_ms)]
        return base + ["--workers", str(a.workers), "--batch", str(a.batch),
                       "--step-ms", str(a.step_ms)]

    def make_pods(self, arm: Arm, n: int, tag: str) -> tuple[Pod, list[Pod], Path]:
        a = self.a
        out = self.workdir / tag
        out.mkdir(parents=True)
        go = out / "GO"
        if arm.profile in ("pinned", "fits"):
            req, lim = a.trainer_request_milli, a.trainer_request_milli
        else:
            req, lim = a.trainer_request_milli, 0
        gate = ('i=0; while [ ! -e "$GO" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; '
                '[ -e "$GO" ] || exit 1; exec "$0" "$@"')
        tcmd = ["/usr/bin/env", f"GO={go}", "/bin/sh", "-c", gate, str(a.trainer)] + \
            self.trainer_args(arm.profile) + ["--out", str(out / "trainer.json")]
        trainer = Pod(f"wedge-trainer-{tag}", rand_uid(self.rng), "wedge",
                      [Container("trainer", rand_hex(self.rng, 64), req, lim, tcmd)], "trainer")
        spin_s = a.warmup + a.duration + 60
        nbs = []
        for i in range(n):
            lim_n = a.neighbour_limit_milli if arm.neighbour_limit else 0
            cmd = [str(a.spinner), "--duration", str(spin_s), "--out", str(out / f"spinner-{i}.json"),
                   "--label", f"s{i}"]
            nbs.append(Pod(f"wedge-spinner-{tag}-{i}", rand_uid(self.rng), "batch",
                           [Container("spin", rand_hex(self.rng, 64), a.neighbour_request_milli,
                                      lim_n, cmd)], "neighbour"))
        return trainer, nbs, go

    def static_cpuset(self, trainer: Pod, nbs: list[Pod]) -> None:
        """kubelet static CPU manager: exclusive CPUs for the Guaranteed integer container, the
        shared pool for every other container (written at container level, as runc does)."""
        k = max(1, self.a.trainer_request_milli // 1000)
        mine, rest = fmt_cpulist(self.cpus[:k]), fmt_cpulist(self.cpus[k:])
        for p, cpus in [(trainer, mine)] + [(n, rest) for n in nbs]:
            for i in range(len(p.containers)):
                write(self.setup.container_dir("cpuset", p, i) / "cpuset.cpus", cpus)

    def neighbours_off_first_cpus(self, nbs: list[Pod], k: int) -> None:
        """The fence-idle-spill experiment: every neighbour container on cpus[k:] only (the
        stand-in's containers start with the full set; they are deleted after the run)."""
        if k >= len(self.cpus):
            raise RuntimeError(f"cannot keep neighbours off {k} of {len(self.cpus)} CPUs")
        rest = fmt_cpulist(self.cpus[k:])
        for p in nbs:
            for i in range(len(p.containers)):
                write(self.setup.container_dir("cpuset", p, i) / "cpuset.cpus", rest)

    def run_one(self, arm: Arm, n: int, rep: int) -> dict:
        a = self.a
        self.counter += 1
        tag = f"r{rep}-{arm.name}-n{n}-{self.counter}"
        trainer, nbs, go = self.make_pods(arm, n, tag)
        pods = nbs + [trainer]
        load_before = os.getloadavg()
        agent_apply: dict | None = None
        agent_revert: dict | None = None
        fence_applied = False
        sampler = None
        try:
            self.setup.create(pods)
            self.setup.wait_running(pods, timeout=30)
            if arm.static_cpuset:
                self.static_cpuset(trainer, nbs)
            if arm.fence:
                doc = node_fence(arm.fence, trainer, nbs, self.version + self.counter,
                                 a.fence_trainer_cores if arm.fence == "CPUSET" else 0,
                                 a.fence_max_cpu_percent, arm.trainer_weight)
                f = self.workdir / tag / "nodefence.json"
                f.write_text(json.dumps(doc, indent=1))
                doc.update({"_trainer": trainer, "_neighbours": nbs,
                            "_trainer_cores": a.fence_trainer_cores,
                            "_quota_cores": len(self.cpus) * a.fence_max_cpu_percent / 100.0})
                fence_applied = True  # revert even after a partial apply
                self.fence_impl.apply(f, doc, self.setup)
            if arm.neighbour_skip_cpus:
                self.neighbours_off_first_cpus(nbs, arm.neighbour_skip_cpus)
            st = self.setup
            groups = {"neighbours": [st.pod_dir("cpuacct", p) / "cpuacct.usage" for p in nbs],
                      "trainer": [st.pod_dir("cpuacct", trainer) / "cpuacct.usage"]}
            sampler = Sampler(groups)
            sampler.start()
            time.sleep(0.3)
            go.touch()
            res_file = self.workdir / tag / "trainer.json"
            deadline = time.monotonic() + a.warmup + a.duration + 60
            while not res_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.2)
            sampler.stop()
            if not res_file.exists():
                raise RuntimeError(f"trainer produced no result ({tag})")
            tr = json.loads(res_file.read_text())
        finally:
            if sampler is not None and sampler.is_alive():
                sampler.stop()
            if fence_applied:
                agent_apply = getattr(self.fence_impl, "last_apply", None)
                self.fence_impl.revert()
                agent_revert = getattr(self.fence_impl, "last_revert", None)
            self.setup.delete(pods, timeout=30)
        load_after = os.getloadavg()
        t0, t1 = tr["t_start_mono"], tr["t_end_mono"]
        dur = t1 - t0
        nb_cpu = sampler.delta("neighbours", t0, t1) if n else 0.0
        tr_cpu_cg = sampler.delta("trainer", t0, t1)
        machine = sampler.delta("machine", t0, t1)
        spin_reports = []
        for i in range(n):
            try:
                spin_reports.append(json.loads((self.workdir / tag / f"spinner-{i}.json").read_text()))
            except (OSError, ValueError):
                pass
        tr_cpu = tr["cpu_seconds"]
        capacity = len(self.cpus) * dur
        slack = capacity - tr_cpu
        bg = (None if machine is None or nb_cpu is None or tr_cpu_cg is None
              else max(0.0, machine - nb_cpu - tr_cpu_cg))
        row = {"arm": arm.name, "neighbours": n, "rep": rep, "samples_per_s": tr["samples_per_s"],
               "accelerator_busy": tr["accelerator_busy"], "duration_s": dur,
               "trainer_cpu_s": tr_cpu, "trainer_cpu_cgroup_s": tr_cpu_cg,
               "neighbour_cpu_s": nb_cpu, "machine_busy_s": machine,
               "background_cpu_s": bg,
               "slack_cpu_s": slack,
               "neighbour_share_of_slack": (nb_cpu / slack if n and nb_cpu is not None and slack > 0
                                            else None),
               # Undefined when the other load left (almost) no slack: < 5 % of capacity.
               "neighbour_share_of_available_slack": (
                   nb_cpu / (slack - bg) if n and nb_cpu is not None and bg is not None
                   and slack - bg > 0.05 * capacity else None),
               "loadavg1_before": load_before[0], "loadavg1_after": load_after[0],
               "background_cores": (bg / dur if bg is not None else None),
               # The trainer's own report: time its runnable feeders (main loop + workers)
               # waited for a CPU in the window, per second of CPU they got.
               "trainer_wait_per_cpu_s": (tr["run_delay_seconds"] / tr_cpu
                                          if tr.get("run_delay_seconds") is not None
                                          and tr_cpu > 0 else None),
               "agent_apply": agent_apply, "agent_revert": agent_revert,
               "spinner_reports": len(spin_reports),
               "spinner_cpu_s": sum(r.get("cpu_seconds", 0) for r in spin_reports),
               "trainer": tr}
        print(f"  {tag}: {tr['samples_per_s']:.1f} samples/s busy {tr['accelerator_busy']:.3f} "
              f"trainer {tr_cpu / dur:.2f} cores, neighbours "
              f"{(nb_cpu or 0) / dur:.2f} cores, share of slack "
              f"{fmt(row['neighbour_share_of_slack'])}, background {fmt(row['background_cores'], '.2f')}"
              f" cores, trainer waited {fmt(row['trainer_wait_per_cpu_s'], '.3f')} s/CPU-s"
              f", load {load_before[0]:.1f}"
              + (f", agent wrote {agent_apply.get('filesWritten')}" if agent_apply else ""),
              flush=True)
        return row


# ----------------------------------------------------------------------------------------------
# Aggregation and reports.


def aggregate(runs: list[dict], arms: list[str], ladder: list[int]) -> list[dict]:
    return aggregate_ladder(runs, arms, ladder, lambda rs: {
        "accelerator_busy": med([r["accelerator_busy"] for r in rs]),
        "neighbour_share_of_slack": med([r["neighbour_share_of_slack"] for r in rs]),
        "neighbour_share_of_available_slack": med(
            [r.get("neighbour_share_of_available_slack") for r in rs]),
        "trainer_cpu_cores": med([r["trainer_cpu_s"] / r["duration_s"] for r in rs]),
        "neighbour_cpu_cores": med([(r["neighbour_cpu_s"] or 0) / r["duration_s"]
                                    for r in rs]),
        "trainer_wait_per_cpu_s": med([r.get("trainer_wait_per_cpu_s") for r in rs]),
        "background_cpu_cores": med([r["background_cpu_s"] / r["duration_s"]
                                     if r["background_cpu_s"] is not None else None
                                     for r in rs]),
    })


def machine_info() -> dict:
    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"nproc": sh(["nproc"]), "kernel": platform.release(), "lscpu": sh(["lscpu"]),
            "loadavg": Path("/proc/loadavg").read_text().strip()}


def noise_summary(runs: list[dict]) -> dict:
    """How loaded the (shared) machine was while the runs measured."""
    def stats(xs: list) -> dict | None:
        xs = sorted(x for x in xs if x is not None)
        if not xs:
            return None
        return {"min": xs[0], "median": statistics.median(xs), "max": xs[-1]}
    return {"loadavg1_before": stats([r.get("loadavg1_before") for r in runs]),
            "background_cores": stats([r.get("background_cores") for r in runs]),
            "runs_background_over_0_2_cores": sum(1 for r in runs
                                                  if (r.get("background_cores") or 0) > 0.2),
            "runs": len(runs)}


def target_check(rows: list[dict], ladder: list[int]) -> list[str]:
    """The brief's targets at the top of the ladder, stated as met / not met with the numbers."""
    top = max(ladder)
    by = {(r["arm"], r["neighbours"]): r for r in rows}
    out = []
    cfs = by.get(("cfs", top))
    for arm in ("fence-idle", "fence-weight", "fence-cpuset", "fence-quota"):
        r = by.get((arm, top))
        if not r or r["ratio_to_isolated"] is None:
            continue
        ok_t = r["ratio_to_isolated"] >= 0.97
        sh = r["neighbour_share_of_slack"]
        out.append(f"{arm} @ {top}: ratio to isolated {fmt(r['ratio_to_isolated'])} "
                   f"({'≥' if ok_t else '<'} 0.97: {'met' if ok_t else 'NOT met'}), ratio to cfs "
                   f"isolated {fmt(r['ratio_to_cfs_isolated'])}, neighbour share of slack "
                   f"{fmt(sh)} ({'met' if sh is not None and sh >= 0.90 else 'NOT met'} vs 0.90; "
                   f"of the slack left by background load: "
                   f"{fmt(r['neighbour_share_of_available_slack'])})")
    if cfs and cfs["ratio_to_isolated"] is not None:
        out.append(f"cfs @ {top}: ratio to isolated {fmt(cfs['ratio_to_isolated'])}")
    return out


def write_md(path: Path, rows: list[dict], meta: dict) -> None:
    L = ["# Wedge benchmark results", "",
         f"Generated by `bench/wedge/run_wedge.py` on {meta['started']} "
         f"({'QUICK smoke mode — not a result' if meta['quick'] else 'full mode'}).", "",
         "| arm | neighbours | runs | samples/s median | min | max | ratio to isolated | "
         "ratio to cfs isolated | accelerator busy | neighbour share of slack | "
         "share of slack left by background | trainer cores | neighbour cores | background cores | "
         "trainer wait (s per CPU-s) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['arm']} | {r['neighbours']} | {r['runs']} | "
                 f"{fmt(r['samples_per_s_median'], '.1f')} | {fmt(r['samples_per_s_min'], '.1f')} | "
                 f"{fmt(r['samples_per_s_max'], '.1f')} | {fmt(r['ratio_to_isolated'])} | "
                 f"{fmt(r['ratio_to_cfs_isolated'])} | {fmt(r['accelerator_busy'])} | "
                 f"{fmt(r['neighbour_share_of_slack'])} | "
                 f"{fmt(r['neighbour_share_of_available_slack'])} | "
                 f"{fmt(r['trainer_cpu_cores'], '.2f')} | "
                 f"{fmt(r['neighbour_cpu_cores'], '.2f')} | {fmt(r['background_cpu_cores'], '.2f')} | "
                 f"{fmt(r.get('trainer_wait_per_cpu_s'))} |")
    a = meta["args"]
    L += ["", "## How it was run", "",
          f"- Command: `{meta['command']}`",
          f"- Setup: `{a['setup']}` (cgroup driver `{a['driver']}`), fence implementation: "
          f"`{a['fence_impl']}`" + (" — **emulated writes by the driver, not the agent**"
                                    if a["fence_impl"] == "emulate" else ""),
          f"- Trainer (wedge profile): `fg-wedge-trainer {' '.join(meta['trainer_args'])}`, "
          f"Burstable, request {a['trainer_request_milli']}m, no limit.",
          f"- Neighbours: fg-wedge-spinner, one busy thread each, Burstable request "
          f"{a['neighbour_request_milli']}m, no limit (cfs-quota: limit "
          f"{a['neighbour_limit_milli']}m).",
          f"- Ladder {a['ladder']}, {a['reps']} repetition(s), arms round-robin per repetition "
          f"(order rotated each repetition); warm-up {a['warmup']} s, measured {a['duration']} s.",
          f"- Benchmark root cgroup cpu.shares: {a['root_shares']} (so that other processes on this "
          "shared machine, which sit in the root cgroup, weigh less than the node's pods).",
          "- ratio to isolated = median samples/s / the same arm's 0-neighbour median; "
          "neighbour share of slack = neighbours' cpuacct CPU in the trainer's measurement window / "
          "(CPUs × window − trainer CPU). background cores = machine busy CPU (/proc/stat) − "
          "trainer − neighbours: other load on this shared machine; \"share of slack left by "
          "background\" = neighbour CPU / (slack − background CPU), the same ratio with the other "
          "load's CPU taken out (SCHED_IDLE neighbours yield to it as they would to the trainer). "
          "trainer wait = the trainer's `run_delay_seconds` (run_delay of /proc/<pid>/schedstat, "
          "main loop + workers, in its window) per second of its CPU: how long its runnable "
          "feeders waited for a CPU.",
          "", "## Machine", "",
          f"- nproc {meta['machine']['nproc']}, kernel {meta['machine']['kernel']}, "
          f"loadavg at start `{meta['machine']['loadavg']}`, at end `{meta['loadavg_end']}`",
          "", "```", meta["machine"]["lscpu"], "```", ""]
    nz = meta.get("noise")
    if nz and nz.get("loadavg1_before"):
        la, bg = nz["loadavg1_before"], nz["background_cores"] or {}
        L += ["## Noise (shared machine)", "",
              f"- 1-min load average when each run started: min {la['min']:.1f}, median "
              f"{la['median']:.1f}, max {la['max']:.1f} ({nz['runs']} runs; 2 CPUs).",
              f"- Foreign CPU (background cores) in each trainer window: min "
              f"{fmt(bg.get('min'), '.2f')}, median {fmt(bg.get('median'), '.2f')}, max "
              f"{fmt(bg.get('max'), '.2f')}; {nz['runs_background_over_0_2_cores']} run(s) over "
              "0.2 cores. Per run: `loadavg1_before`, `background_cores` in wedge.json `runs`.", ""]
    if meta.get("targets"):
        L += ["## Targets (computed)", ""] + [f"- {t}" for t in meta["targets"]] + [""]
    if meta.get("notes"):
        L += ["## Notes", ""] + [f"- {n}" for n in meta["notes"]] + [""]
    path.write_text("\n".join(L))


def plot(path: Path, rows: list[dict], arms: list[str]) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"plot skipped: matplotlib unavailable for {sys.executable} ({e})"
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    colours = plt.get_cmap("tab20").colors
    for i, arm in enumerate(arms):
        rs = [r for r in rows if r["arm"] == arm]
        if not rs:
            continue
        style = {"marker": "o", "label": arm, "color": colours[(2 * i) % 20 + (i >= 10)],
                 "ls": "--" if arm.startswith("control") else "-"}
        xs = [r["neighbours"] for r in rs]
        ax1.plot(xs, [r["ratio_to_isolated"] for r in rs], **style)
        rs2 = [r for r in rs if r["neighbour_share_of_slack"] is not None]
        ax2.plot([r["neighbours"] for r in rs2], [r["neighbour_share_of_slack"] for r in rs2],
                 **style)
    ax1.axhline(0.97, color="grey", ls="--", lw=0.8)
    ax2.axhline(0.90, color="grey", ls="--", lw=0.8)
    ax1.set(xlabel="batch neighbours", ylabel="trainer samples/s ÷ same arm isolated",
            title="Trainer throughput", ylim=(0, 1.1))
    ax2.set(xlabel="batch neighbours", ylabel="neighbour CPU ÷ trainer's idle CPU",
            title="Neighbours' share of the slack", ylim=(0, 1.05), xlim=ax1.get_xlim())
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return None


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    build = REPO / "build" / "release"
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS))
    p.add_argument("--ladder", default="0,2,4,8,16")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1 run, short durations, ladder 0,4")
    p.add_argument("--setup", choices=["standin", "builtin"], default="standin")
    p.add_argument("--driver", choices=["cgroupfs", "systemd"], default="cgroupfs")
    p.add_argument("--fence-impl", choices=["agent", "emulate"], default="agent")
    p.add_argument("--trainer", type=Path, default=build / "bench/wedge/fg-wedge-trainer")
    p.add_argument("--spinner", type=Path, default=build / "bench/wedge/fg-wedge-spinner")
    p.add_argument("--standin", type=Path,
                   default=build / "tests/fixtures/kubelet/fg-kubelet-standin")
    p.add_argument("--agent", type=Path, default=build / "agent/feedguard-agent")
    p.add_argument("--standin-arg", action="append", default=[], help="extra stand-in flag")
    p.add_argument("--agent-arg", action="append", default=[], help="extra agent flag")
    p.add_argument("--out-dir", type=Path, default=REPO / "bench/results")
    p.add_argument("--name", default="wedge", help="output file stem")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=3.0)
    # Trainer calibration (see README.md).
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--step-ms", type=float, default=26.0)
    p.add_argument("--image-size", type=int, default=512)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--fits-workers", type=int, default=2)
    p.add_argument("--fits-step-ms", type=float, default=80.0)
    p.add_argument("--trainer-request-milli", type=int, default=1000)
    p.add_argument("--neighbour-request-milli", type=int, default=100)
    p.add_argument("--neighbour-limit-milli", type=int, default=250)
    p.add_argument("--fence-trainer-cores", type=int, default=1)
    p.add_argument("--fence-max-cpu-percent", type=int, default=50)
    p.add_argument("--root-shares", type=int, default=8192,
                   help="cpu.shares of the benchmark's root cgroup (0: leave alone)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--keep-workdir", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.reps, a.ladder = 1, "0,4"
        a.duration, a.warmup = min(a.duration, 3.0), min(a.warmup, 1.5)
    arms = [x for x in a.arms.split(",") if x]
    for x in arms:
        if x not in ARMS:
            p.error(f"unknown arm {x}; known: {', '.join(ARMS)}")
    ladder = [int(x) for x in a.ladder.split(",")]
    if 0 not in ladder:
        ladder = [0] + ladder
    for b in (a.trainer, a.spinner):
        if not os.access(b, os.X_OK):
            p.error(f"not executable: {b} (build it or pass its path)")
    if os.geteuid() != 0:
        p.error("needs root (writes cgroups under its own root)")

    root = f"feedguard-wedge-{os.getpid()}-{random.randrange(1 << 30):08x}"
    workdir = Path(f"/tmp/{root}")
    workdir.mkdir(parents=True)
    cpus = parse_cpulist((CG / "cpuset/cpuset.effective_cpus").read_text()
                         if (CG / "cpuset/cpuset.effective_cpus").exists()
                         else (CG / "cpuset/cpuset.cpus").read_text())
    if a.setup == "standin":
        setup: Setup = StandinSetup(a.standin, root, a.driver, workdir, a.standin_arg)
    else:
        setup = BuiltinSetup(root, a.driver, alloc_milli=1000 * len(cpus))
    need_fence = any(ARMS[x].fence for x in arms)
    agent_cg = CG / "cpu" / f"{root}-agent"
    fence_impl = (AgentFence(a.agent, root, a.driver, workdir / "agent-state", a.agent_arg,
                             workdir / "agent.log", agent_cg)
                  if a.fence_impl == "agent" else EmulatedFence(cpus))
    if need_fence:
        fence_impl.check()
        if isinstance(fence_impl, AgentFence):
            agent_cg.mkdir(exist_ok=True)
            write(agent_cg / "cpu.shares", str(a.root_shares or 1024))
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "quick": a.quick,
            "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None
                                                            else sys.argv[1:])),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
            "machine": machine_info(), "cpus": cpus, "cgroup_root": root, "notes": []}
    bench = Bench(a, setup, fence_impl, workdir, cpus)
    meta["trainer_args"] = bench.trainer_args("wedge")
    runs: list[dict] = []
    failures: list[str] = []
    interrupted = False
    try:
        setup.start()
        if a.root_shares:
            rs = CG / "cpu" / root / "cpu.shares"
            for _ in range(100):
                if rs.exists():
                    break
                time.sleep(0.05)
            if rs.exists():
                write(rs, str(a.root_shares))
            else:
                meta["notes"].append(f"root cgroup {rs} did not appear; cpu.shares left alone")
        for rep in range(a.reps):
            order = arms[rep % len(arms):] + arms[:rep % len(arms)]
            for n in ladder:
                for arm in order:
                    try:
                        runs.append(bench.run_one(ARMS[arm], n, rep))
                    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                        msg = f"{arm} n={n} rep={rep}: {e}"
                        print(f"  FAILED {msg}", file=sys.stderr, flush=True)
                        failures.append(msg)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        setup.stop()
        if agent_cg.exists():
            try:
                agent_cg.rmdir()  # empty: every agent command has exited
            except OSError as e:
                print(f"could not remove {agent_cg}: {e}", file=sys.stderr)
        if not a.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["loadavg_end"] = Path("/proc/loadavg").read_text().strip()
    meta["failures"] = failures
    if failures:
        meta["notes"].append(f"{len(failures)} run(s) failed: " + "; ".join(failures[:10]))
    if interrupted:
        meta["notes"].append("interrupted before the end")
    rows = aggregate(runs, arms, ladder)
    meta["noise"] = noise_summary(runs)
    meta["targets"] = target_check(rows, ladder)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    note = plot(a.out_dir / f"{a.name}.png", rows, arms)
    if note:
        meta["notes"].append(note)
    (a.out_dir / f"{a.name}.json").write_text(json.dumps(
        {"rows": rows, "meta": meta,
         "runs": [{k: v for k, v in r.items() if k != "trainer"} | {"trainer": r["trainer"]}
                  for r in runs]}, indent=1))
    write_md(a.out_dir / f"{a.name}.md", rows, meta)
    print(f"wrote {a.out_dir / (a.name + '.json')}, .md, .png; {len(runs)} runs, "
          f"{len(failures)} failed")
    return 1 if failures or interrupted or not runs else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""gpu_wedge.py — the GPU wedge proof kit: a real PyTorch trainer next to batch neighbours, fenced
by feedguard-agent or left to plain CFS, on a node with an NVIDIA GPU (or CPU-only, --cpu-only).

    gpu_wedge.py run [--cpu-only] [--part quick|rest] [--arms A,B] [--ladder 0,8,16,32]
                     [--reps N] [--agent PATH] [--python PATH] [--out-dir DIR] [--name STEM]
                     [--calibration auto|FILE] [--time-budget S] ...
    gpu_wedge.py report --in A.json [B.json ...] --out-dir DIR --name STEM   (merge, re-aggregate)
    gpu_wedge.py facts                                                       (machine facts, JSON)

What one `run` does (root needed):
  1. Detects cgroup v1 or v2 (mount table), builds a kubelet-shaped tree of its own under
     <mount>/feedguard-gpu-<pid>-<rand> (cgroupfs layout: kubepods/{burstable,besteffort}/pod<uid>/
     <container id>, kubelet's cpu.shares / cpu.weight and quota values), v2: enables +cpu +cpuset
     in subtree_control on the way down.
  2. Calibrates the trainer (unless --calibration FILE): the device's own rate, the input
     pipeline's CPU per sample, and from them JPEG size, DataLoader workers, the trainer's CPU
     request (demand ≈ 2 × request) and the controls' settings.
  3. Runs the arms over the neighbour ladder, interleaved (arm order rotated each repetition):
     pods start, the trainer builds its model and waits; the fence is applied with
     `feedguard-agent apply`; CPU (cgroup usage) and GPU utilisation (NVML, or nvidia-smi) are
     sampled; the trainer measures; the fence is reverted with `feedguard-agent revert`; pods go.
  4. Writes <out-dir>/<name>.{json,md} and .png (if matplotlib is there; else run
     plot_gpu_wedge.py on the .json elsewhere).
Every process the kit starts lives in a cgroup it made; on exit, Ctrl-C or SIGTERM it kills them,
reverts the fence and removes its cgroups. Only Python 3 stdlib here; the trainer needs torch.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

# wedge_lib: bench/wedge in the repository, beside this file in the bundle's kit/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "wedge"))
from wedge_lib import (UsageSampler, aggregate_ladder, fmt, med, parse_cpulist,  # noqa: E402
                       rmdir_retry, write)

KIT = Path(__file__).resolve().parent
REPO = KIT.parents[1] if (KIT.parents[1] / "bench" / "gpu").is_dir() else None
PERIOD_US = 100000
POLICY = "gpu-wedge"


def log(msg: str) -> None:
    print(f"[gpu-wedge {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(cmd: list[str], timeout: float = 20) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# ----------------------------------------------------------------------------------------------
# kubelet's formulas (agent/cgroup/kubelet_facts.h has the agent's copy).


def shares_for(milli: int) -> int:
    return max(2, min(262144, milli * 1024 // 1000))


def shares_to_weight(shares: int) -> int:
    shares = max(2, min(262144, shares))
    return 1 + (shares - 2) * 9999 // 262142


def quota_for(milli: int) -> int:
    return max(milli * PERIOD_US // 1000, 1000)


# ----------------------------------------------------------------------------------------------
# cgroup v1 / v2.


class Cgroups:
    """The cpu, cpuacct and cpuset hierarchies: v1 (a mount per controller, possibly co-mounted)
    or v2 (the unified mount). Detected from /proc/self/mounts, as the agent does from
    mountinfo: a v1 cpu controller wins (a hybrid host's cgroup2 mount has no cpu controller)."""

    def __init__(self) -> None:
        v1: dict[str, Path] = {}
        unified: Path | None = None
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 4:
                    continue
                mnt = Path(parts[1].replace("\\040", " "))
                if parts[2] == "cgroup":
                    for opt in parts[3].split(","):
                        if opt in ("cpu", "cpuacct", "cpuset") and opt not in v1:
                            v1[opt] = mnt
                elif parts[2] == "cgroup2" and unified is None:
                    unified = mnt
        if "cpu" in v1:
            missing = [c for c in ("cpuacct", "cpuset") if c not in v1]
            if missing:
                raise SystemExit(f"cgroup v1 without {missing} controller mount(s)")
            self.version, self.mounts = "v1", v1
        elif unified is not None:
            ctrls = (unified / "cgroup.controllers").read_text().split()
            for c in ("cpu", "cpuset"):
                if c not in ctrls:
                    raise SystemExit(f"cgroup v2 at {unified} lacks the {c} controller ({ctrls})")
            self.version = "v2"
            self.mounts = {"cpu": unified, "cpuacct": unified, "cpuset": unified}
        else:
            raise SystemExit("no cgroup cpu controller mounted")
        self.enabled_top: list[str] = []  # v2: controllers we enabled in the top subtree_control

    @property
    def v2(self) -> bool:
        return self.version == "v2"

    def dirs(self, rel: str) -> list[Path]:
        seen, out = set(), []
        for c in ("cpu", "cpuacct", "cpuset"):
            d = self.mounts[c] / rel
            if d not in seen:
                seen.add(d)
                out.append(d)
        return out

    def path(self, ctrl: str, rel: str) -> Path:
        return self.mounts[ctrl] / rel

    def prepare_top(self) -> None:
        """v2: the cpu and cpuset controllers must be enabled in the top cgroup's subtree_control
        for our root to have them (the top is exempt from the no-internal-processes rule)."""
        if not self.v2:
            return
        top = self.mounts["cpu"] / "cgroup.subtree_control"
        have = top.read_text().split()
        for c in ("cpu", "cpuset"):
            if c not in have:
                try:
                    write(top, f"+{c}")
                except OSError as e:
                    raise SystemExit(f"cannot enable +{c} in {top}: {e} (is this process in a "
                                     "non-root cgroup namespace whose top holds processes?)")
                self.enabled_top.append(c)

    def mkdir(self, rel: str, leaf: bool) -> None:
        for d in self.dirs(rel):
            if d.exists():
                continue
            d.mkdir()
            if not self.v2 and (d.parent / "cpuset.cpus").exists():
                # v1: a new cpuset is empty until cpus and mems are set.
                write(d / "cpuset.cpus", (d.parent / "cpuset.cpus").read_text().strip())
                write(d / "cpuset.mems", (d.parent / "cpuset.mems").read_text().strip())
        if self.v2 and not leaf:
            write(self.mounts["cpu"] / rel / "cgroup.subtree_control", "+cpu +cpuset")

    def rmdir(self, rel: str) -> None:
        for d in reversed(self.dirs(rel)):
            rmdir_retry(d)

    def set_shares(self, rel: str, shares: int) -> None:
        if self.v2:
            write(self.path("cpu", rel) / "cpu.weight", str(shares_to_weight(shares)))
        else:
            write(self.path("cpu", rel) / "cpu.shares", str(shares))

    def set_limit(self, rel: str, limit_milli: int) -> None:
        if self.v2:
            write(self.path("cpu", rel) / "cpu.max",
                  f"{quota_for(limit_milli) if limit_milli else 'max'} {PERIOD_US}")
        else:
            write(self.path("cpu", rel) / "cpu.cfs_quota_us",
                  str(quota_for(limit_milli) if limit_milli else -1))

    def usage_file(self, rel: str) -> Path:
        return (self.path("cpu", rel) / "cpu.stat" if self.v2
                else self.path("cpuacct", rel) / "cpuacct.usage")

    def read_usage_s(self, f: Path) -> float | None:
        try:
            text = f.read_text()
        except OSError:
            return None
        if self.v2:
            for line in text.splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
            return None
        return int(text.split()[0]) / 1e9

    def procs_files(self, rel: str) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs(rel)]

    def pids(self, rel: str) -> list[int]:
        try:
            return [int(x) for x in (self.path("cpu", rel) / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def cpus_of(self, rel: str) -> str:
        d = self.path("cpuset", rel)
        for name in ("cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"):
            if (d / name).exists():
                v = (d / name).read_text().strip()
                if v:
                    return v
        return ""


# ----------------------------------------------------------------------------------------------
# Pods and the kubelet-shaped node (a minimal kubelet: cgroups with its values, processes in them).


@dataclasses.dataclass
class Pod:
    name: str
    uid: str
    namespace: str
    cid: str
    request_milli: int
    limit_milli: int
    command: list[str]
    role: str  # trainer | neighbour | calibration
    log: Path | None = None

    @property
    def qos(self) -> str:
        if self.limit_milli > 0 and self.limit_milli == self.request_milli:
            return "Guaranteed"
        if self.request_milli > 0 or self.limit_milli > 0:
            return "Burstable"
        return "BestEffort"


def rand_hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def rand_uid(rng: random.Random) -> str:
    h = rand_hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Node:
    def __init__(self, cg: Cgroups, root: str, alloc_milli: int, root_shares: int):
        self.cg, self.root, self.alloc_milli, self.root_shares = cg, root, alloc_milli, root_shares
        self.kubepods = f"{root}/kubepods"
        self.tiers = {"Burstable": f"{root}/kubepods/burstable",
                      "BestEffort": f"{root}/kubepods/besteffort"}
        self.made: list[str] = []
        self.procs: dict[str, subprocess.Popen] = {}
        self.pods: dict[str, Pod] = {}
        self.burstable: dict[str, int] = {}

    def pod_rel(self, p: Pod) -> str:
        return (f"{self.kubepods}/pod{p.uid}" if p.qos == "Guaranteed"
                else f"{self.tiers[p.qos]}/pod{p.uid}")

    def container_rel(self, p: Pod) -> str:
        return f"{self.pod_rel(p)}/{p.cid}"

    def _mk(self, rel: str, leaf: bool = False) -> None:
        self.cg.mkdir(rel, leaf)
        self.made.append(rel)

    def start(self) -> None:
        self.cg.prepare_top()
        self._mk(self.root)
        if self.root_shares:
            self.cg.set_shares(self.root, self.root_shares)
        self._mk(self.kubepods)
        self.cg.set_shares(self.kubepods, shares_for(self.alloc_milli))
        for t in ("Burstable", "BestEffort"):
            self._mk(self.tiers[t])
        self.cg.set_shares(self.tiers["BestEffort"], 2)
        self._update_burstable()

    def _update_burstable(self) -> None:
        self.cg.set_shares(self.tiers["Burstable"], shares_for(sum(self.burstable.values())))

    def create(self, p: Pod) -> None:
        prel, crel = self.pod_rel(p), self.container_rel(p)
        self._mk(prel)
        self.cg.set_shares(prel, 2 if p.qos == "BestEffort" else shares_for(p.request_milli))
        self.cg.set_limit(prel, p.limit_milli)
        if p.qos == "Burstable":
            self.burstable[p.name] = p.request_milli
            self._update_burstable()
        self._mk(crel, leaf=True)
        self.cg.set_shares(crel, 2 if p.qos == "BestEffort" else shares_for(p.request_milli))
        self.cg.set_limit(crel, p.limit_milli)
        files = self.cg.procs_files(crel)

        def enter() -> None:  # in the child, before exec
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        out = open(p.log, "ab") if p.log else subprocess.DEVNULL
        try:
            self.procs[p.name] = subprocess.Popen(p.command, preexec_fn=enter, stdout=out,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                  start_new_session=True)
        finally:
            if p.log:
                out.close()
        self.pods[p.name] = p

    def delete(self, p: Pod, grace: float = 5.0) -> None:
        """SIGTERM the pod's processes (all of them: whatever is in its container cgroup), wait,
        SIGKILL what is left, remove its cgroups."""
        crel = self.container_rel(p)
        pr = self.procs.pop(p.name, None)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            pids = self.cg.pids(crel)
            if pr is not None and pr.poll() is None and pr.pid not in pids:
                pids.append(pr.pid)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.monotonic() + wait
            while time.monotonic() < end:
                if pr is not None:
                    pr.poll()
                if not self.cg.pids(crel) and (pr is None or pr.returncode is not None):
                    break
                time.sleep(0.05)
            else:
                continue
            break
        if pr is not None:
            try:
                pr.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for rel in (crel, self.pod_rel(p)):
            self.cg.rmdir(rel)
            if rel in self.made:
                self.made.remove(rel)
        self.pods.pop(p.name, None)
        if self.burstable.pop(p.name, None) is not None:
            self._update_burstable()

    def stop(self) -> None:
        for p in list(self.pods.values()):
            self.delete(p, grace=2.0)
        for rel in reversed(list(self.made)):
            self.cg.rmdir(rel)
        self.made.clear()


# ----------------------------------------------------------------------------------------------
# feedguard-agent: apply / revert / topology.


def pod_ref(p: Pod) -> dict:
    return {"uid": p.uid, "namespace": p.namespace, "name": p.name,
            "qosClass": {"Guaranteed": "GUARANTEED", "Burstable": "BURSTABLE",
                         "BestEffort": "BEST_EFFORT"}[p.qos],
            "containers": [{"name": "main", "containerId": f"containerd://{p.cid}"}],
            "cpuRequestMilli": str(p.request_milli), "cpuLimitMilli": str(p.limit_milli)}


def node_fence(kind: str, trainer: Pod, nbs: list[Pod], version: int, trainer_cores: int,
               gpu_ids: list[str]) -> dict:
    tcpu: dict = {}
    if trainer_cores > 0:
        tcpu = {"cores": trainer_cores, "placement": "WHOLE_CORES", "numa": "PREFER_GPU_LOCAL"}
    policy = {"name": POLICY, "generation": "1", "priority": 100, "mode": "ENFORCE",
              "trainerCpu": tcpu, "neighbourFence": kind}
    tr = {"pod": pod_ref(trainer), "policy": POLICY}
    if gpu_ids:
        tr["gpuIds"] = gpu_ids
    return {"nodeName": platform.node(), "version": str(version), "policies": [policy],
            "trainers": [tr], "neighbours": [{"pod": pod_ref(n), "policy": POLICY} for n in nbs]}


class Agent:
    def __init__(self, binary: Path, root: str, state_dir: Path, logf: Path, cg: Cgroups,
                 cg_rel: str, extra: list[str]):
        self.binary, self.root, self.state_dir, self.logf = binary, root, state_dir, logf
        self.cg, self.cg_rel, self.extra = cg, cg_rel, extra
        self.made_cg = False

    def check(self) -> None:
        if not os.access(self.binary, os.X_OK):
            raise SystemExit(f"feedguard-agent not found: {self.binary} (pass --agent; "
                             "bench/gpu/bundle.sh makes .gpukit/agent/feedguard-agent)")

    def make_cgroup(self, shares: int) -> None:
        """The agent's commands run in a cgroup of their own beside the benchmark root, weighted
        like it (a node's agent is a pod with its own request); in the host's root cgroup a busy
        ladder starves `apply` (see bench/wedge/run_wedge.py)."""
        self.cg.mkdir(self.cg_rel, leaf=True)
        self.made_cg = True
        self.cg.set_shares(self.cg_rel, shares)

    def remove_cgroup(self) -> None:
        if self.made_cg:
            self.cg.rmdir(self.cg_rel)

    def _run(self, args: list[str], node_flags: bool = True, timeout: float = 60) -> dict:
        cmd = [str(self.binary)] + args
        if node_flags:
            cmd += ["--cgroup-root", self.root, "--cgroup-driver", "cgroupfs",
                    "--state-dir", str(self.state_dir), "--cpu-manager-state", ""] + self.extra
        files = self.cg.procs_files(self.cg_rel) if self.made_cg else []

        def enter() -> None:
            for f in files:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))

        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=enter)
        wall = time.monotonic() - t0
        with open(self.logf, "a") as lf:
            lf.write("$ " + " ".join(c if c else "''" for c in cmd) +
                     f"\n[rc {r.returncode}, {wall:.2f} s]\n{r.stdout}{r.stderr}\n")
        if r.returncode != 0:
            msg = (r.stderr.strip() or r.stdout.strip())[-600:]
            try:  # a JSON report: name what failed
                rep = json.loads(r.stdout)
                bad = [f"{v.get('file')}: {v.get('outcome')} {v.get('message')}"
                       for v in rep.get("reverts", []) if v.get("outcome") == "RevertFailed"]
                bad += [f"{p.get('pod')}: {p.get('reason')} {p.get('message')}"
                        for p in rep.get("pods", []) if not p.get("enforced")]
                if bad:
                    msg = "; ".join(bad)[-1500:]
            except (ValueError, AttributeError):
                pass
            raise RuntimeError(f"feedguard-agent {args[0]} exited {r.returncode}: {msg}")
        try:
            rep = json.loads(r.stdout)
        except ValueError as e:
            raise RuntimeError(f"feedguard-agent {args[0]}: output is not JSON ({e})")
        if isinstance(rep, dict):
            rep["_wall_s"] = round(wall, 3)
        return rep

    def topology(self) -> dict | None:
        try:
            return self._run(["topology", "--json"], node_flags=False)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            return {"error": str(e)}

    @staticmethod
    def summary(rep: dict) -> dict:
        out = {k: rep.get(k) for k in ("fenceVersion", "enforced", "failed", "filesWritten",
                                       "filesReverted", "_wall_s")}
        out["writes"] = [f"{w.get('file')}={w.get('value')}" for w in rep.get("writes", [])]
        out["reverts_failed"] = [f"{v.get('file')}: {v.get('message')}"
                                 for v in rep.get("reverts", [])
                                 if v.get("outcome") == "RevertFailed"]
        out["trainer_cpus"] = [p.get("cpus") for p in rep.get("pods", [])
                               if p.get("role") == "trainer" and p.get("cpus")]
        return out

    def apply(self, fence_file: Path, doc: dict) -> dict:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        rep = self._run(["apply", "--fence", str(fence_file)])
        s = self.summary(rep)
        must_write = bool(doc["neighbours"]) or bool(doc["policies"][0].get("trainerCpu"))
        if rep.get("failed") or (must_write and not rep.get("filesWritten")):
            raise RuntimeError(f"agent apply enforced nothing: {json.dumps(s)}")
        return s

    def revert(self) -> dict:
        return self.summary(self._run(["revert"]))


# ----------------------------------------------------------------------------------------------
# Samplers.


class CpuSampler(UsageSampler):
    """Cumulative CPU seconds of groups of cgroups (and the machine's busy time), every 100 ms."""

    def __init__(self, cg: Cgroups, groups: dict[str, list[Path]], period: float = 0.1):
        super().__init__(groups, period)
        self.cg = cg

    def usage_s(self, path: Path) -> float | None:
        return self.cg.read_usage_s(path)


class _NvmlUtil(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class GpuSampler:
    """GPU utilisation every 100 ms: NVML (libnvidia-ml.so.1 via ctypes) or, failing that,
    `nvidia-smi --query-gpu=utilization.gpu -lms 100`. NVML's utilization.gpu is the percentage
    of time, over the driver's last sample period (1/6 s to 1 s), during which one or more
    kernels ran on the GPU: a kernel that occupies one SM counts as 100 %. It says whether the
    GPU waited for the host, not how full its SMs were."""

    def __init__(self, index: int = 0, enabled: bool = True):
        self.index = index
        self.backend = "none"
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None
        self.lib = None
        self.handle = ctypes.c_void_p()
        self.error = ""
        if not enabled:
            self.backend = "none (CPU-only mode)"
            return
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit_v2 failed")
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index),
                                                 ctypes.byref(self.handle)) != 0:
                raise OSError("nvmlDeviceGetHandleByIndex_v2 failed")
            self.lib, self.backend = lib, "nvml"
        except (OSError, AttributeError) as e:
            self.error = f"NVML: {e}"
            if shutil.which("nvidia-smi"):
                self.backend = "nvidia-smi"

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        if self.backend == "nvml":
            self._thread = threading.Thread(target=self._nvml_loop, daemon=True)
        elif self.backend == "nvidia-smi":
            self._proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(self.index), "--query-gpu=utilization.gpu",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self._thread = threading.Thread(target=self._smi_loop, daemon=True)
        else:
            return
        self._thread.start()

    def _nvml_loop(self) -> None:
        u = _NvmlUtil()
        while not self._stop.is_set():
            if self.lib.nvmlDeviceGetUtilizationRates(self.handle, ctypes.byref(u)) == 0:
                self.samples.append((time.monotonic(), float(u.gpu)))
            self._stop.wait(0.1)

    def _smi_loop(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                self.samples.append((time.monotonic(), float(line.strip())))
            except ValueError:
                pass
            if self._stop.is_set():
                break

    def stop(self) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def mean(self, t0: float, t1: float) -> float | None:
        xs = [u for t, u in self.samples if t0 <= t <= t1]
        return statistics.mean(xs) / 100.0 if xs else None

    def uuid(self) -> str | None:
        if self.backend.startswith("none"):
            return None
        if self.backend == "nvml":
            buf = ctypes.create_string_buffer(96)
            if self.lib.nvmlDeviceGetUUID(self.handle, buf, ctypes.c_uint(96)) == 0:
                return buf.value.decode()
        out = sh(["nvidia-smi", "-i", str(self.index), "--query-gpu=uuid",
                  "--format=csv,noheader"]) if shutil.which("nvidia-smi") else ""
        return out or None


# ----------------------------------------------------------------------------------------------
# Machine facts.


def machine_facts(cg: Cgroups | None = None, agent: Agent | None = None) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    sib = set()
    for c in cpus:
        try:
            sib.add(Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
                    .read_text().strip())
        except OSError:
            pass
    nodes = sorted(p.name for p in Path("/sys/devices/system/node").glob("node[0-9]*"))
    gpu = sh(["nvidia-smi", "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total",
              "--format=csv,noheader"]) if shutil.which("nvidia-smi") else ""
    facts = {
        "hostname": platform.node(), "kernel": platform.release(), "nproc": len(cpus),
        "cpus": cpus, "physical_cores": len(sib) or len(cpus),
        "threads_per_core": (len(cpus) // len(sib)) if sib else 1,
        "smt": bool(sib) and len(sib) < len(cpus),
        "numa_nodes": {n: (Path("/sys/devices/system/node") / n / "cpulist").read_text().strip()
                       for n in nodes},
        "lscpu_model": next((ln.split(":", 1)[1].strip() for ln in sh(["lscpu"]).splitlines()
                             if ln.startswith("Model name")), ""),
        "loadavg": Path("/proc/loadavg").read_text().strip(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "nvidia_smi": gpu, "python": sys.version.split()[0],
    }
    try:
        with open("/proc/driver/nvidia/version") as f:
            facts["nvidia_driver"] = f.readline().strip()
    except OSError:
        facts["nvidia_driver"] = None
    if cg is not None:
        facts["cgroup_version"] = cg.version
        facts["cgroup_mounts"] = {k: str(v) for k, v in cg.mounts.items()}
        if cg.v2:
            facts["cgroup_top_subtree_control"] = (
                cg.mounts["cpu"] / "cgroup.subtree_control").read_text().strip()
        try:
            facts["self_cgroup"] = Path("/proc/self/cgroup").read_text().strip()
        except OSError:
            pass
        probe = cg.mounts["cpu"] / f"feedguard-gpu-probe-{os.getpid()}"
        try:  # can we make our own cgroups here?
            probe.mkdir()
            probe.rmdir()
            facts["cgroup_writable"] = True
        except OSError as e:
            facts["cgroup_writable"] = f"no: {e}"
    if agent is not None:
        facts["agent_topology"] = agent.topology()
    return facts


# ----------------------------------------------------------------------------------------------
# Arms.


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    profile: str = "wedge"  # wedge | gpubound | fits
    fence: str | None = None  # IDLE | CPUSET
    pin: bool = False  # trainers.cpu {cores, WholeCores, PreferGPULocal}
    what: str = ""


ARMS = {a.name: a for a in [
    Arm("cfs", what="kubelet values only; the trainer is Burstable (request < demand, no limit)"),
    Arm("fence-idle", fence="IDLE", what="cfs + NodeFence: neighbours cpu.idle=1 (feedguard Idle)"),
    Arm("fence-cpuset", fence="CPUSET", pin=True,
        what="cfs + NodeFence: trainer pinned to whole GPU-local cores (trainers.cpu: cores, "
             "WholeCores, PreferGPULocal), neighbours confined to the other CPUs"),
    Arm("control-gpubound-cfs", profile="gpubound",
        what="GPU-bound trainer (device work ×repeat per sample, few workers), plain CFS"),
    Arm("control-gpubound-fence-idle", profile="gpubound", fence="IDLE",
        what="GPU-bound trainer, Idle fence: must not hurt"),
    Arm("control-fits-cfs", profile="fits",
        what="Guaranteed trainer whose demand fits its request (limit = request), plain CFS"),
    Arm("control-fits-fence-idle", profile="fits", fence="IDLE",
        what="Guaranteed fits-its-request trainer, Idle fence: must not hurt"),
]}
MAIN_ARMS = ["cfs", "fence-idle", "fence-cpuset"]
ALL_ARMS = list(ARMS)


# ----------------------------------------------------------------------------------------------
# The benchmark.


class Bench:
    def __init__(self, a: argparse.Namespace, cg: Cgroups, node: Node, agent: Agent | None,
                 gpu: GpuSampler, workdir: Path, facts: dict):
        self.a, self.cg, self.node, self.agent, self.gpu = a, cg, node, agent, gpu
        self.workdir, self.facts = workdir, facts
        self.rng = random.Random(a.seed)
        self.version = int(time.time() * 1000)
        self.counter = 0
        self.gpu_ids = [u for u in [gpu.uuid()] if u] if not a.cpu_only else []
        self.cfg: dict = {}

    # -- trainer command lines --------------------------------------------------------------
    def data_dir(self, width: int) -> Path:
        d = self.workdir / f"jpeg-{width}"
        if not d.exists():
            tmp = self.workdir / f".jpeg-{width}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run([self.a.python, str(self.a.trainer_script), "--make-data", "--data",
                            str(tmp), "--width", str(width), "--count", str(self.a.images)],
                           check=True, timeout=300)
            tmp.rename(d)
        return d

    def trainer_cmd(self, cfg: dict, profile: str, mode: str, out: Path, ready: Path | None,
                    go: Path | None, warmup: float, duration: float) -> list[str]:
        workers, repeat = cfg["workers"], 1
        if profile == "gpubound":
            workers, repeat = cfg["gpubound_workers"], cfg["gpubound_repeat"]
        cmd = [self.a.python, str(self.a.trainer_script), "--data",
               str(self.data_dir(cfg["width"])),
               "--device", cfg["device"], "--model", cfg["model"], "--batch", str(cfg["batch"]),
               "--workers", str(workers), "--repeat", str(repeat), "--mode", mode,
               "--cpu-step-ms", str(cfg.get("cpu_step_ms", 0)), "--warmup", str(warmup),
               "--duration", str(duration), "--out", str(out)]
        if ready:
            cmd += ["--ready", str(ready)]
        if go:
            cmd += ["--go", str(go)]
        return cmd

    def new_pod(self, name: str, role: str, req: int, lim: int, cmd: list[str],
                logf: Path | None) -> Pod:
        return Pod(name, rand_uid(self.rng), "gpu-wedge" if role != "neighbour" else "batch",
                   rand_hex(self.rng, 64), req, lim, cmd, role, logf)

    # -- one trainer alone (calibration) ----------------------------------------------------
    def solo(self, cfg: dict, mode: str, profile: str = "wedge", duration: float | None = None,
             warmup: float | None = None) -> dict:
        self.counter += 1
        d = self.workdir / f"cal-{self.counter}-{mode}"
        d.mkdir()
        out = d / "trainer.json"
        dur = duration if duration is not None else self.a.cal_duration
        wu = warmup if warmup is not None else self.a.warmup
        p = self.new_pod(f"cal-{self.counter}", "calibration", 1000, 0,
                         self.trainer_cmd(cfg, profile, mode, out, None, None, wu, dur),
                         d / "trainer.log")
        try:
            self.node.create(p)
            pr = self.node.procs[p.name]
            try:
                pr.wait(timeout=self.a.startup_timeout + wu + dur + 60)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"calibration trainer ({mode}) timed out")
        finally:
            self.node.delete(p)
        if not out.exists():
            raise RuntimeError(f"calibration trainer ({mode}) wrote nothing: "
                               + tail(d / "trainer.log"))
        return json.loads(out.read_text())

    def calibrate(self) -> dict:
        a, f = self.a, self.facts
        ncpu = f["nproc"]
        target = a.target_demand_frac * ncpu
        cal: dict = {"target_demand_cores": target, "measurements": []}
        base = {"device": "cpu" if a.cpu_only else "cuda", "batch": a.batch,
                "workers": max(2, min(ncpu, ncpu // 2)), "gpubound_workers": 2,
                "gpubound_repeat": a.gpubound_repeat}

        def note(kind: str, cfg: dict, r: dict) -> None:
            m = {"kind": kind, "model": cfg["model"], "width": cfg["width"],
                 "workers": cfg["workers"], "cpu_step_ms": cfg.get("cpu_step_ms", 0),
                 "samples_per_s": r["samples_per_s"], "cpu_cores": r["cpu_cores"],
                 "cpu_s_per_sample": r["cpu_s_per_sample"],
                 "accelerator_busy": r["accelerator_busy"], "startup_s": r["startup_s"]}
            cal["measurements"].append(m)
            log(f"  calibration {kind}: " + ", ".join(f"{k}={fmt(v) if isinstance(v, float) else v}"
                                                       for k, v in m.items() if k != "kind"))

        if a.cpu_only:
            # The device is a sleep: its rate is chosen (the step), the pipeline's cost measured.
            width = a.width or 320
            cfg = dict(base, model="tiny", width=width, cpu_step_ms=0)
            r = self.solo(cfg, "loader")
            note("loader", cfg, r)
            c = r["cpu_s_per_sample"]
            rate = target / c
            cfg["cpu_step_ms"] = round(a.batch / rate * 1000.0, 1)
            demand = target
        else:
            widths = (a.width, a.width) if a.width else (192, 640)
            cs = []
            for w in sorted(set(widths)):
                cfg = dict(base, model=a.models[0], width=w)
                r = self.solo(cfg, "loader")
                note("loader", cfg, r)
                cs.append((w * w * 0.75, r["cpu_s_per_sample"]))
            if len(cs) == 2:
                (p0, c0), (p1, c1) = cs
                beta = max(1e-12, (c1 - c0) / (p1 - p0))
                alpha = max(0.0, c0 - beta * p0)
            else:
                alpha, beta = 0.0, cs[0][1] / cs[0][0]
            cal["cpu_per_sample_fit"] = {"alpha_s": alpha, "beta_s_per_px": beta}
            chosen = None
            for model in a.models:
                cfg = dict(base, model=model, width=192)  # synthetic: no JPEGs read
                r = self.solo(cfg, "synthetic")
                note("synthetic", cfg, r)
                rate = r["samples_per_s"]
                c_star = target / rate
                px = (c_star - alpha) / beta
                w = int(math.sqrt(max(px, 1) / 0.75))
                if w < a.min_width:
                    log(f"  {model}: the device needs {rate:.0f} samples/s; even {a.min_width}px "
                        f"JPEGs would make demand > {target:.1f} cores — trying the next model")
                    continue
                chosen = (model, min(w, a.max_width), rate)
                break
            if chosen is None:
                model, rate = a.models[-1], rate
                chosen = (model, a.min_width, rate)
                cal["note"] = ("the device outruns the host pipeline with every model tried; "
                               "using the smallest JPEGs: the trainer may be CPU-bound alone")
            model, width, rate = chosen
            w16 = max(16, width // 16 * 16)
            cfg = dict(base, model=model, width=w16)
            demand = rate * (alpha + beta * w16 * w16 * 0.75)
            cal["device_rate_samples_per_s"] = rate
        cfg["workers"] = max(2, min(ncpu, math.ceil(1.5 * demand) + 1))
        cfg["gpubound_workers"] = max(2, math.ceil(cfg["workers"] / a.gpubound_repeat))
        cfg["demand_cores_est"] = demand
        # The trainer's demand exceeds its request (the wedge precondition): request ≈ demand/2.
        cfg["request_milli"] = max(100, int(round(demand * 1000 / a.demand_over_request / 100)) * 100)
        cfg["fits_request_milli"] = min((ncpu - 1) * 1000,
                                        max(1000, math.ceil(demand * 1.3) * 1000))
        tpc = f["threads_per_core"]
        cfg["pin_cores"] = max(1, min(f["physical_cores"] - 1,
                                      math.ceil(demand * a.pin_headroom / tpc)))
        # Verify: the trainer alone, as the ladder will run it.
        r = self.solo(cfg, "train", duration=a.duration)
        note("verify", cfg, r)
        cal["verify"] = {k: r[k] for k in ("samples_per_s", "accelerator_busy", "cpu_cores",
                                           "cpu_s_per_sample", "startup_s")}
        if r["accelerator_busy"] is not None and r["accelerator_busy"] < 0.85 \
                and cfg["workers"] < ncpu:
            cfg["workers"] = min(ncpu, cfg["workers"] + max(1, ncpu // 8))
            log(f"  device busy {r['accelerator_busy']:.2f} < 0.85 alone: workers → {cfg['workers']}")
            r = self.solo(cfg, "train", duration=a.duration)
            note("verify2", cfg, r)
            cal["verify"] = {k: r[k] for k in ("samples_per_s", "accelerator_busy", "cpu_cores",
                                               "cpu_s_per_sample", "startup_s")}
        cfg["demand_cores_measured"] = r["cpu_cores"]
        cal["config"] = cfg
        return cal

    # -- one run of the ladder --------------------------------------------------------------
    def run_one(self, arm: Arm, n: int, rep: int) -> dict:
        a, cfg = self.a, self.cfg
        self.counter += 1
        tag = f"r{rep}-{arm.name}-n{n}-{self.counter}"
        d = self.workdir / tag
        d.mkdir()
        out, ready, go = d / "trainer.json", d / "READY", d / "GO"
        if arm.profile == "fits":
            req = lim = cfg["fits_request_milli"]
        else:
            req, lim = cfg["request_milli"], 0
        trainer = self.new_pod(f"trainer-{tag}", "trainer", req, lim,
                               self.trainer_cmd(cfg, arm.profile, "train", out, ready, go,
                                                a.warmup, a.duration), d / "trainer.log")
        spin_s = a.startup_timeout + a.warmup + a.duration + 90
        # The scheduler admits pods while their requests fit the node's allocatable CPU: the
        # neighbours' requests shrink on the dense rungs so that trainer + neighbours ≤ CPUs.
        nb_req = 0
        if a.neighbour_qos == "burstable" and n:
            room = self.node.alloc_milli - req
            nb_req = max(10, min(a.neighbour_request_milli, room // n // 10 * 10))
        nbs = [self.new_pod(f"spinner-{tag}-{i}", "neighbour", nb_req, 0,
                            [a.python, str(KIT / "spinner.py"), "--duration", str(spin_s),
                             "--out", str(d / f"spinner-{i}.json")], None) for i in range(n)]
        load_before = os.getloadavg()[0]
        t_begin = time.monotonic()
        applied = reverted = None
        revert_error = None
        fence_on = False
        sampler: CpuSampler | None = None
        gpu_on = False
        try:
            # The trainer first: it imports torch and builds its model (not measured) before the
            # neighbours arrive, so a dense rung does not slow its start-up.
            self.node.create(trainer)
            tpr = self.node.procs[trainer.name]
            end = time.monotonic() + a.startup_timeout
            while not ready.exists():
                if tpr.poll() is not None:
                    raise RuntimeError(f"trainer exited {tpr.returncode} before it was ready: "
                                       + tail(d / "trainer.log"))
                if time.monotonic() > end:
                    raise RuntimeError(f"trainer not ready after {a.startup_timeout} s")
                time.sleep(0.05)
            for p in nbs:
                self.node.create(p)
            if nbs:
                time.sleep(0.5)  # the spinners are running
            if arm.fence:
                assert self.agent is not None
                # A state dir per run: each run is one fence's whole life (apply … revert), and
                # whatever a failed revert leaves in the checkpoint stays with that run.
                self.agent.state_dir = d / "agent-state"
                doc = node_fence(arm.fence, trainer, nbs, self.version + self.counter,
                                 cfg["pin_cores"] if arm.pin else 0, self.gpu_ids)
                ff = d / "nodefence.json"
                ff.write_text(json.dumps(doc, indent=1))
                fence_on = True  # revert even after a partial apply
                applied = self.agent.apply(ff, doc)
            groups = {"trainer": [self.cg.usage_file(self.node.pod_rel(trainer))],
                      "neighbours": [self.cg.usage_file(self.node.pod_rel(p)) for p in nbs]}
            sampler = CpuSampler(self.cg, groups)
            sampler.start()
            self.gpu.start()
            gpu_on = True
            trainer_cpus = self.cg.cpus_of(self.node.container_rel(trainer))
            time.sleep(0.2)
            go.touch()
            try:
                tpr.wait(timeout=a.warmup + a.duration + 120)
            except subprocess.TimeoutExpired:
                raise RuntimeError("trainer did not finish in time")
            time.sleep(0.15)
            sampler.stop()
            self.gpu.stop()
            gpu_on = False
            if not out.exists():
                raise RuntimeError(f"trainer exited {tpr.returncode} without a result: "
                                   + tail(d / "trainer.log"))
            tr = json.loads(out.read_text())
        finally:
            if sampler is not None and sampler.is_alive():
                sampler.stop()
            if gpu_on:
                self.gpu.stop()
            try:
                if fence_on:
                    reverted = self.agent.revert()
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                # The measurement stands; the failed revert is reported with the run (and the
                # pods' cgroups go away with the pods below).
                revert_error = str(e)
                log(f"  agent revert FAILED ({tag}): {revert_error[:800]}")
            finally:
                for p in [trainer] + nbs:
                    self.node.delete(p)
        t0, t1 = tr["t_start_mono"], tr["t_end_mono"]
        dur = t1 - t0
        nb_cpu = sampler.delta("neighbours", t0, t1) if n else 0.0
        tr_cg = sampler.delta("trainer", t0, t1)
        machine = sampler.delta("machine", t0, t1)
        ncpu = self.facts["nproc"]
        bg = (None if None in (machine, nb_cpu, tr_cg) else max(0.0, machine - nb_cpu - tr_cg))
        slack = ncpu * dur - (tr_cg if tr_cg is not None else tr["cpu_seconds"])
        row = {"arm": arm.name, "neighbours": n, "rep": rep, "tag": tag,
               "samples_per_s": tr["samples_per_s"], "accelerator_busy": tr["accelerator_busy"],
               "gpu_util_sampled": self.gpu.mean(t0, t1), "gpu_util_samples": len(
                   [1 for t, _ in self.gpu.samples if t0 <= t <= t1]),
               "duration_s": dur, "trainer_cpu_cores": (tr_cg / dur if tr_cg is not None
                                                        else None),
               "trainer_cpu_cores_procs": tr["cpu_cores"],
               "neighbour_cpu_cores": (nb_cpu / dur if nb_cpu is not None else None),
               "background_cpu_cores": (bg / dur if bg is not None else None),
               "neighbour_share_of_slack": (nb_cpu / slack if n and nb_cpu is not None
                                            and slack > 0 else None),
               "trainer_wait_per_cpu_s": (tr["run_delay_seconds"] / tr["cpu_seconds"]
                                          if tr["cpu_seconds"] > 0 else None),
               "trainer_cpus": trainer_cpus, "loadavg1_before": load_before,
               "trainer_request_milli": req, "neighbour_request_milli": nb_req,
               "wall_s": time.monotonic() - t_begin, "agent_apply": applied,
               "agent_revert": reverted, "agent_revert_error": revert_error, "trainer": tr}
        log(f"  {tag}: {tr['samples_per_s']:.1f} samples/s, device busy "
            f"{fmt(tr['accelerator_busy'])}, GPU util {fmt(row['gpu_util_sampled'])}, trainer "
            f"{fmt(row['trainer_cpu_cores'], '.2f')} cores on {trainer_cpus}, neighbours "
            f"{fmt(row['neighbour_cpu_cores'], '.2f')} cores, wait "
            f"{fmt(row['trainer_wait_per_cpu_s'])} s/CPU-s, {row['wall_s']:.0f} s"
            + (f", agent wrote {applied.get('filesWritten')}" if applied else ""))
        return row


def tail(path: Path, n: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


# ----------------------------------------------------------------------------------------------
# Aggregation and reports.


def aggregate(runs: list[dict], arms: list[str], ladder: list[int]) -> list[dict]:
    return aggregate_ladder(runs, arms, ladder, lambda rs: {
        "accelerator_busy": med(r["accelerator_busy"] for r in rs),
        "gpu_util_sampled": med(r["gpu_util_sampled"] for r in rs),
        "trainer_cpu_cores": med(r["trainer_cpu_cores"] for r in rs),
        "neighbour_cpu_cores": med(r["neighbour_cpu_cores"] for r in rs),
        "background_cpu_cores": med(r["background_cpu_cores"] for r in rs),
        "neighbour_share_of_slack": med(r["neighbour_share_of_slack"] for r in rs),
        "trainer_wait_per_cpu_s": med(r["trainer_wait_per_cpu_s"] for r in rs),
        "trainer_cpus": sorted({r["trainer_cpus"] for r in rs}),
    })


def target_check(rows: list[dict], ladder: list[int], device_word: str) -> list[str]:
    top = max(ladder)
    by = {(r["arm"], r["neighbours"]): r for r in rows}
    out = []
    iso = by.get(("cfs", 0))
    for arm in ("fence-idle", "fence-cpuset", "cfs"):
        r = by.get((arm, top))
        if not r:
            continue
        rc = r["ratio_to_cfs_isolated"]
        s = (f"{arm} @ {top} neighbours: {fmt(r['samples_per_s_median'], '.1f')} samples/s = "
             f"{fmt(rc)} of isolated (cfs, 0 neighbours), {fmt(r['ratio_to_isolated'])} of its own "
             f"0-neighbour run")
        if arm != "cfs" and rc is not None:
            s += f" — {'≥' if rc >= 0.97 else '<'} 0.97: {'met' if rc >= 0.97 else 'NOT met'}"
        if arm == "cfs" and rc is not None:
            s += f" — plain CFS {'loses' if rc < 0.97 else 'does NOT lose'} (< 0.97)"
        if iso and r["accelerator_busy"] is not None and iso["accelerator_busy"]:
            held = r["accelerator_busy"] / iso["accelerator_busy"]
            s += (f"; {device_word} busy {fmt(r['accelerator_busy'])} vs isolated "
                  f"{fmt(iso['accelerator_busy'])} ({fmt(held)}×, "
                  f"{'held' if held >= 0.95 else 'NOT held'} at ≥ 0.95×")
            if r["gpu_util_sampled"] is not None and iso["gpu_util_sampled"]:
                s += (f"; sampled utilisation {fmt(r['gpu_util_sampled'])} vs "
                      f"{fmt(iso['gpu_util_sampled'])}")
            s += ")"
        out.append(s)
    for c in ("control-gpubound", "control-fits"):
        a, b = by.get((f"{c}-cfs", top)), by.get((f"{c}-fence-idle", top))
        if a and b and a["samples_per_s_median"]:
            out.append(f"{c} @ {top}: fence-idle ÷ cfs = "
                       f"{fmt(b['samples_per_s_median'] / a['samples_per_s_median'])} "
                       f"(ratios to own isolated: cfs {fmt(a['ratio_to_isolated'])}, fence-idle "
                       f"{fmt(b['ratio_to_isolated'])})")
    return out


def write_md(path: Path, rows: list[dict], doc: dict) -> None:
    meta, cfg = doc["meta"], doc["meta"]["calibration"]["config"]
    f = meta["machine"]
    cpu_only = meta["cpu_only"]
    dev = "emulated device (CPU-only mode)" if cpu_only else "GPU"
    L = [f"# GPU wedge — {'CPU-ONLY MODE: no GPU, not a GPU result' if cpu_only else 'results'}",
         "",
         f"Generated by `bench/gpu/gpu_wedge.py` on {meta['started']} ({meta['part']}); "
         f"{len(doc['runs'])} runs, wall time {meta.get('wall_s', 0):.0f} s.", ""]
    if meta.get("sources"):
        L += [f"{'Merged from' if len(meta['sources']) > 1 else 'Re-reported from'}: "
              f"{', '.join(meta['sources'])}.", ""]
    if meta.get("targets"):
        L += ["## Headline (computed at the densest step)", ""]
        L += [f"- {t}" for t in meta["targets"]] + [""]
    L += ["| arm | neighbours | runs | samples/s median | min | max | ratio to isolated (cfs @0) "
          "| ratio to own @0 | device busy | GPU util sampled | trainer cores | neighbour cores "
          "| background cores | neighbour share of slack | trainer wait s/CPU-s | trainer CPUs |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        L.append(f"| {r['arm']} | {r['neighbours']} | {r['runs']} | "
                 f"{fmt(r['samples_per_s_median'], '.1f')} | {fmt(r['samples_per_s_min'], '.1f')} "
                 f"| {fmt(r['samples_per_s_max'], '.1f')} | {fmt(r['ratio_to_cfs_isolated'])} | "
                 f"{fmt(r['ratio_to_isolated'])} | {fmt(r['accelerator_busy'])} | "
                 f"{fmt(r['gpu_util_sampled'])} | {fmt(r['trainer_cpu_cores'], '.2f')} | "
                 f"{fmt(r['neighbour_cpu_cores'], '.2f')} | "
                 f"{fmt(r['background_cpu_cores'], '.2f')} | "
                 f"{fmt(r['neighbour_share_of_slack'])} | {fmt(r['trainer_wait_per_cpu_s'])} | "
                 f"{' / '.join(r['trainer_cpus'])} |")
    a = meta["args"]
    L += ["", "## Setup", "",
          f"- Command: `{meta['command']}`",
          f"- Trainer: torch {meta.get('torch')}, torchvision {meta.get('torchvision')}, device "
          f"`{cfg['device']}`" + (f" ({meta.get('gpu')})" if meta.get("gpu") else "") +
          f", model `{cfg['model']}`, batch {cfg['batch']}, DataLoader workers {cfg['workers']}, "
          f"JPEGs {cfg['width']}×{cfg['width'] * 3 // 4} (Pillow decode, RandomResizedCrop(224), "
          "RandomHorizontalFlip, ToTensor, Normalize)"
          + (f", device step = tiny CNN on the host + sleep to {cfg['cpu_step_ms']} ms"
             if cpu_only else ", ResNet step in bf16 autocast, channels_last, SGD") + ".",
          f"- Trainer pod: Burstable, request {cfg['request_milli']}m, no limit; measured demand "
          f"alone {fmt(cfg.get('demand_cores_measured'), '.2f')} cores (estimated "
          f"{fmt(cfg['demand_cores_est'], '.2f')}).",
          f"- Controls: GPU-bound = ×{cfg['gpubound_repeat']} device steps per batch with "
          f"{cfg['gpubound_workers']} workers; fits = Guaranteed {cfg['fits_request_milli']}m "
          "(request = limit).",
          f"- fence-cpuset: trainers.cpu = {{cores: {cfg['pin_cores']}, placement: WholeCores, "
          f"numa: PreferGPULocal}}" + (f", gpuIds {meta.get('gpu_ids')}" if meta.get("gpu_ids")
                                       else ", no GPU id (CPU-only)") +
          ", neighbours Cpuset-fenced.",
          f"- Neighbours: spinner.py (one busy Python thread), {a['neighbour_qos']}"
          + (f", request {a['neighbour_request_milli']}m, lowered on dense rungs so that the "
             "pods' requests fit the node's CPUs as the scheduler requires (per rung: "
             + ", ".join(f"{n}: {m}m" for n, m in sorted({
                 (r["neighbours"], r["neighbour_request_milli"]) for r in doc["runs"]
                 if r["neighbours"] and r["arm"] == "cfs"})) + ")"
             if a["neighbour_qos"] == "burstable" else "") + ", no limit.",
          f"- Ladder {meta['ladder']}, {a['reps']} repetition(s) per invocation, arms interleaved "
          f"(order rotated each repetition); warm-up {a['warmup']} s, measured {a['duration']} s.",
          f"- Benchmark root cgroup weight: cpu.shares {a['root_shares']} (v2: cpu.weight by "
          "kubelet's map).",
          "",
          "Columns: *ratio to isolated* = median samples/s ÷ the cfs arm's 0-neighbour median, "
          "same invocation; *ratio to own @0* = ÷ the same arm's 0-neighbour median. *device "
          "busy* = " + ("Σ step time ÷ window (emulated device)" if cpu_only else
                        "Σ GPU time of the training steps (CUDA events) ÷ window") +
          ". *GPU util sampled* = mean of NVML utilization.gpu (or nvidia-smi) sampled every "
          "100 ms in the window — the fraction of the driver's sample period in which *any* "
          "kernel ran, not SM occupancy: it shows the GPU waiting for its input, not how full it "
          "was. Trainer / neighbour cores = cgroup CPU usage in the trainer's window ÷ window; "
          "background = machine busy (/proc/stat) − both. Trainer wait = run delay "
          "(/proc/<pid>/task/*/schedstat) of the trainer's processes per CPU-second.", "",
          "## Machine", "",
          f"- {f['nproc']} CPUs ({f['physical_cores']} cores, {f['threads_per_core']} thread(s) "
          f"per core, SMT {'on' if f['smt'] else 'off'}), NUMA {f['numa_nodes']}, "
          f"{f['lscpu_model']}, {f['memory_gib']} GiB",
          f"- kernel {f['kernel']}, cgroup {f.get('cgroup_version')}, NVIDIA driver: "
          f"{f.get('nvidia_driver') or '–'}",
          f"- GPU: {f.get('nvidia_smi') or '–'}",
          f"- GPU utilisation sampler: {meta.get('gpu_sampler')}",
          f"- load average at start `{f['loadavg']}`, at end `{meta.get('loadavg_end')}`", ""]
    cal = meta["calibration"]
    L += ["## Calibration", "", f"Target demand alone: {fmt(cal.get('target_demand_cores'), '.2f')} "
          "cores. Measurements:", ""]
    for m in cal.get("measurements", []):
        L.append("- " + ", ".join(f"{k} {fmt(v) if isinstance(v, float) else v}"
                                  for k, v in m.items()))
    if cal.get("note"):
        L.append(f"- note: {cal['note']}")
    if cal.get("source"):
        L.append(f"- taken from {cal['source']}")
    L.append("")
    if meta.get("notes"):
        L += ["## Notes", ""] + [f"- {n}" for n in meta["notes"]] + [""]
    path.write_text("\n".join(L))


def write_outputs(out_dir: Path, name: str, doc: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = doc["meta"]
    arms = [x for x in ALL_ARMS if any(r["arm"] == x for r in doc["runs"])]
    ladder = sorted({r["neighbours"] for r in doc["runs"]})
    meta["ladder"] = ladder
    doc["rows"] = aggregate(doc["runs"], arms, ladder)
    meta["targets"] = target_check(doc["rows"], ladder, "device" if meta["cpu_only"] else "GPU") \
        if doc["rows"] else []
    png = out_dir / f"{name}.png"
    try:
        sys.path.insert(0, str(KIT))
        from plot_gpu_wedge import plot
        note = plot(doc, png)
    except ImportError as e:
        note = f"plot skipped ({e}); run bench/gpu/plot_gpu_wedge.py on the .json"
    if note:
        meta["notes"] = [n for n in meta.get("notes", []) if not n.startswith("plot")] + [note]
    (out_dir / f"{name}.json").write_text(json.dumps(doc, indent=1))
    write_md(out_dir / f"{name}.md", doc["rows"], doc)
    log(f"wrote {out_dir / name}.json, .md" + ("" if note else ", .png"))


# ----------------------------------------------------------------------------------------------


def torch_venvs() -> list[str]:
    """The cached venvs' interpreters, newest first ($FEEDGUARD_CACHE or ~/.cache/feedguard:
    torch-*/bin/python, made by torch_venv.sh)."""
    cache = Path(os.environ.get("FEEDGUARD_CACHE", Path.home() / ".cache" / "feedguard"))
    return sorted((str(p) for p in cache.glob("torch-*/bin/python")), reverse=True)


def first_with_torch(cands: list[str]) -> str | None:
    """The first interpreter of cands that imports torch, torchvision, Pillow and numpy."""
    for c in cands:
        try:
            if subprocess.run([c, "-c", "import torch, torchvision, PIL, numpy"],
                              capture_output=True, timeout=120).returncode == 0:
                return c
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


def find_python() -> str:
    """An interpreter with torch and torchvision: this one, else a cached venv (torch_venvs)."""
    py = first_with_torch([sys.executable, "python3"] + torch_venvs())
    if py is None:
        raise SystemExit("no python with torch + torchvision + Pillow + numpy found (pass --python, "
                         "or make the CPU venv with bench/gpu/torch_venv.sh)")
    return py


def default_agent() -> Path:
    for p in [KIT.parents[1] / ".gpukit" / "agent" / "feedguard-agent",
              (REPO or KIT) / "build" / "release" / "agent" / "feedguard-agent"]:
        if os.access(p, os.X_OK):
            return p
    return Path("feedguard-agent")


def cmd_run(a: argparse.Namespace) -> int:
    t_begin = time.monotonic()
    if os.geteuid() != 0:
        raise SystemExit("needs root (builds cgroups under its own root)")
    ncpu = len(os.sched_getaffinity(0))
    if a.part:  # the 10-minute parts: shorter windows (both parts alike, so they merge)
        a.warmup = a.warmup if a.warmup is not None else 3.0
        a.duration = a.duration if a.duration is not None else 6.0
    a.warmup = a.warmup if a.warmup is not None else 4.0
    a.duration = a.duration if a.duration is not None else 8.0
    if a.part == "quick":
        a.arms = a.arms or ",".join(ALL_ARMS)
        a.ladder = a.ladder or f"0,{2 * ncpu}"
        a.reps = a.reps or 1
        a.name = a.name or "gpu-wedge-quick"
        a.time_budget = a.time_budget or 540
    elif a.part == "rest":
        a.arms = a.arms or ",".join(MAIN_ARMS)
        a.reps = a.reps or 2
        a.name = a.name or "gpu-wedge-rest"
        a.time_budget = a.time_budget or 540
    a.arms = a.arms or ",".join(ALL_ARMS)
    a.ladder = a.ladder or ("0,2,4" if a.cpu_only and ncpu <= 4 else
                            f"0,{max(1, ncpu // 2)},{ncpu},{2 * ncpu}")
    a.reps = a.reps or (1 if a.cpu_only else 3)
    a.name = a.name or ("gpu-wedge-cpu-only" if a.cpu_only else "gpu-wedge")
    if a.out_dir is None:
        a.out_dir = (Path("/tmp/feedguard-gpu-wedge-cpu-only") if a.cpu_only
                     else (REPO or KIT) / "bench" / "results")
    arms = [x for x in a.arms.split(",") if x]
    for x in arms:
        if x not in ARMS:
            raise SystemExit(f"unknown arm {x}; known: {', '.join(ARMS)}")
    ladder = sorted({int(x) for x in a.ladder.split(",")} | {0})
    a.models = [m for m in a.model.split(",") if m]
    a.python = a.python or find_python()
    if a.agent is None:
        a.agent = default_agent()

    cg = Cgroups()
    root = f"feedguard-gpu-{os.getpid()}-{random.randrange(1 << 24):06x}"
    workdir = Path(a.workdir or "/tmp") / root
    workdir.mkdir(parents=True)
    node = Node(cg, root, alloc_milli=1000 * ncpu, root_shares=a.root_shares)
    need_agent = any(ARMS[x].fence for x in arms)
    agent = (Agent(a.agent, root, workdir / "agent-state", workdir / "agent.log", cg,
                   f"{root}-agent", a.agent_arg) if need_agent else None)
    if agent:
        agent.check()
    gpu = GpuSampler(enabled=not a.cpu_only)
    if not a.cpu_only and gpu.backend == "none":
        raise SystemExit("no NVML and no nvidia-smi: is there a GPU? (--cpu-only to run without)")

    def on_term(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    facts = machine_facts(cg, agent)
    log(f"cgroup {cg.version} at {cg.mounts['cpu']}; {ncpu} CPUs, {facts['physical_cores']} "
        f"cores; python {a.python}; agent {a.agent if agent else '(not needed)'}; "
        f"GPU sampler {gpu.backend}")
    meta: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "cpu_only": a.cpu_only,
                  "part": a.part or "full", "command": " ".join(sys.argv),
                  "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                  "machine": facts, "cgroup_root": root, "notes": [],
                  "gpu_sampler": gpu.backend + (f" ({gpu.error})" if gpu.error else "")}
    if a.cpu_only:
        meta["notes"].append("CPU-only mode: the device step is a tiny CNN on the host padded "
                             "with a sleep; no GPU was used. This checks the kit, not the claim.")
    runs: list[dict] = []
    failures: list[str] = []
    bench = Bench(a, cg, node, agent, gpu, workdir, facts)
    meta["gpu_ids"] = bench.gpu_ids
    interrupted = False
    try:
        node.start()
        if agent:
            agent.make_cgroup(a.root_shares or 1024)
        if a.calibration not in ("auto", ""):
            src = json.loads(Path(a.calibration).read_text())
            cal = src["meta"]["calibration"]
            cal = dict(cal, source=str(a.calibration))
            log(f"calibration from {a.calibration}: {cal['config']}")
        else:
            log("calibrating …")
            cal = bench.calibrate()
            log(f"calibrated: {cal['config']}")
        bench.cfg = cal["config"]
        meta["calibration"] = cal
        per_run: list[float] = []
        stop_all = False
        for rep in range(a.reps):
            order = arms[rep % len(arms):] + arms[:rep % len(arms)]
            for n in ladder:
                for arm in order:
                    est = (statistics.median(per_run) if per_run
                           else a.startup_timeout / 4 + a.warmup + a.duration + 5)
                    if a.time_budget and time.monotonic() - t_begin + est * 1.2 > a.time_budget:
                        left = (a.reps - rep) * len(ladder) * len(arms)
                        meta["notes"].append(f"time budget {a.time_budget} s reached: stopped "
                                             f"before rep {rep} n={n} {arm} (≤ {left} runs left)")
                        stop_all = True
                        break
                    try:
                        row = bench.run_one(ARMS[arm], n, rep)
                        runs.append(row)
                        per_run.append(row["wall_s"])
                    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                        msg = f"{arm} n={n} rep={rep}: {e}"
                        log(f"  FAILED {msg}")
                        failures.append(msg)
                        if len(failures) >= a.max_failures:
                            meta["notes"].append(f"stopped after {len(failures)} failures")
                            stop_all = True
                            break
                if stop_all:
                    break
            if stop_all:
                break
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: cleaning up")
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        failures.append(f"setup/calibration: {e}")
        log(f"FAILED: {e}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            gpu.stop()
            node.stop()
            if agent:
                agent.remove_cgroup()
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if not a.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["loadavg_end"] = Path("/proc/loadavg").read_text().strip()
    meta["failures"] = failures
    meta["wall_s"] = time.monotonic() - t_begin
    if failures:
        meta["notes"].append(f"{len(failures)} failure(s): " + "; ".join(failures[:8]))
    rev_bad = [r for r in runs if r.get("agent_revert_error")]
    if rev_bad:
        meta["notes"].append(
            f"feedguard-agent revert FAILED after {len(rev_bad)} run(s) (measurements kept): "
            + "; ".join(f"{r['tag']}: {r['agent_revert_error'][:300]}" for r in rev_bad[:3]))
    meta["revert_failures"] = len(rev_bad)
    if interrupted:
        meta["notes"].append("interrupted before the end")
    if "calibration" not in meta:
        log("no calibration, no results")
        return 1
    if runs:
        t = runs[0]["trainer"]
        meta.update(torch=t.get("torch"), torchvision=t.get("torchvision"), gpu=t.get("gpu"))
    doc = {"meta": meta, "runs": runs}
    write_outputs(a.out_dir, a.name, doc)
    log(f"{len(runs)} runs, {len(failures)} failed, {meta['wall_s']:.0f} s")
    return 1 if failures or interrupted or rev_bad or not runs else 0


def cmd_report(a: argparse.Namespace) -> int:
    docs = [json.loads(Path(p).read_text()) for p in a.inputs]
    cfgs = [json.dumps(d["meta"]["calibration"]["config"], sort_keys=True) for d in docs]
    if len(set(cfgs)) > 1:
        raise SystemExit("inputs were run with different trainer configurations (calibration); "
                         "ratios across them would mix trainers — not merging. Give the second "
                         "part --calibration FIRST.json.")
    base = docs[-1]
    meta = dict(base["meta"])
    meta["sources"] = [str(p) for p in a.inputs]
    meta["part"] = "merged" if len(docs) > 1 else f"re-reported {base['meta'].get('part')} run"
    meta["wall_s"] = sum(d["meta"].get("wall_s", 0) for d in docs)
    meta["notes"] = [n for d in docs for n in d["meta"].get("notes", []) if not n.startswith("plot")]
    runs = [r for d in docs for r in d["runs"]]
    write_outputs(a.out_dir, a.name, {"meta": meta, "runs": runs})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="calibrate and run the arms × ladder")
    r.add_argument("--cpu-only", action="store_true",
                   help="no GPU: the device step is a tiny CNN on the host + a sleep")
    r.add_argument("--part", choices=["quick", "rest"], default=None,
                   help="quick: all arms, ladder 0,2×CPUs, 1 rep, ≤ 540 s; rest: main arms, "
                        "full ladder, 2 reps, ≤ 540 s (give it --calibration QUICK.json)")
    r.add_argument("--arms", default=None, help=f"comma list of {', '.join(ARMS)}")
    r.add_argument("--ladder", default=None, help="neighbour counts (default 0,N/2,N,2N)")
    r.add_argument("--reps", type=int, default=None)
    r.add_argument("--calibration", default="auto", help="auto, or a results .json to reuse")
    r.add_argument("--agent", type=Path, default=None)
    r.add_argument("--agent-arg", action="append", default=[])
    r.add_argument("--python", default=None, help="interpreter with torch for the trainer")
    r.add_argument("--trainer-script", type=Path, default=KIT / "trainer.py",
                   help="the trainer (tests: fake_trainer.py)")
    r.add_argument("--out-dir", type=Path, default=None)
    r.add_argument("--name", default=None)
    r.add_argument("--workdir", default=None, help="parent of the scratch dir (default /tmp)")
    r.add_argument("--keep-workdir", action="store_true")
    r.add_argument("--time-budget", type=float, default=None,
                   help="seconds: start no run that would end after this")
    r.add_argument("--warmup", type=float, default=None, help="s (default 4; parts 3)")
    r.add_argument("--duration", type=float, default=None, help="s (default 8; parts 6)")
    r.add_argument("--cal-duration", type=float, default=5.0)
    r.add_argument("--startup-timeout", type=float, default=120.0)
    r.add_argument("--model", default="resnet18,resnet50",
                   help="models to try in calibration, in order")
    r.add_argument("--batch", type=int, default=None)
    r.add_argument("--width", type=int, default=None, help="fix the JPEG width (no size search)")
    r.add_argument("--min-width", type=int, default=160)
    r.add_argument("--max-width", type=int, default=1024)
    r.add_argument("--images", type=int, default=128)
    r.add_argument("--target-demand-frac", type=float, default=0.4,
                   help="trainer's CPU demand alone as a fraction of the CPUs")
    r.add_argument("--demand-over-request", type=float, default=2.0)
    r.add_argument("--pin-headroom", type=float, default=1.25,
                   help="fence-cpuset: pinned CPUs ÷ demand")
    r.add_argument("--gpubound-repeat", type=int, default=4)
    r.add_argument("--neighbour-qos", choices=["burstable", "besteffort"], default="burstable")
    r.add_argument("--neighbour-request-milli", type=int, default=500)
    r.add_argument("--root-shares", type=int, default=8192)
    r.add_argument("--max-failures", type=int, default=3)
    r.add_argument("--seed", type=int, default=42)
    rp = sub.add_parser("report", help="merge result .json files (same calibration) and rewrite")
    rp.add_argument("--in", dest="inputs", nargs="+", required=True)
    rp.add_argument("--out-dir", type=Path, required=True)
    rp.add_argument("--name", default="gpu-wedge")
    sub.add_parser("facts", help="print this machine's facts as JSON")
    a = p.parse_args(argv)
    if a.cmd == "facts":
        cg = None
        try:
            cg = Cgroups()
        except SystemExit:
            pass
        print(json.dumps(machine_facts(cg), indent=1))
        return 0
    if a.cmd == "report":
        return cmd_report(a)
    if a.batch is None:
        a.batch = 32 if a.cpu_only else 256
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""fake_standin.py — TEST DOUBLE of fg-kubelet-standin's pods-dir contract, for wedge_smoke only.

`fake_standin.py serve --root NAME --driver D --pods-dir DIR [--dirs-base BASE]`: for every
DIR/<name>.pod.json it makes plain directories (no cgroups) standing for the pod and container
dirs under BASE, starts each container's command, and writes DIR/<name>.status.json
{"uid","pids","pod_dirs":{ctrl:path},"container_dirs":{container name:{ctrl:path}}}; when the pod file goes
away it kills the pod's processes (only the ones it started), removes the dirs and the status
file. SIGTERM: the same for every pod, then exit. It checks the pod file's fields and refuses
(exit 3) a malformed one, so the driver's pod files are checked against the contract."""

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

CTRLS = ("cpu", "cpuacct", "cpuset")


def validate(doc: dict) -> None:
    for k in ("uid", "namespace", "name", "qos", "containers"):
        if k not in doc:
            raise ValueError(f"pod file lacks {k}")
    if doc["qos"] not in ("Guaranteed", "Burstable", "BestEffort"):
        raise ValueError(f"bad qos {doc['qos']}")
    for c in doc["containers"]:
        for k in ("name", "id", "cpu_request_milli", "cpu_limit_milli", "command"):
            if k not in c:
                raise ValueError(f"container lacks {k}")
        if not c["id"].startswith("containerd://") or len(c["id"]) != len("containerd://") + 64:
            raise ValueError(f"bad container id {c['id']}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("verb", choices=["serve"])
    p.add_argument("--root", required=True)
    p.add_argument("--driver", required=True)
    p.add_argument("--pods-dir", type=Path, required=True)
    p.add_argument("--dirs-base", type=Path, required=True)
    a = p.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    running: dict[str, tuple[list[subprocess.Popen], Path]] = {}

    def remove(name: str) -> None:
        procs, base = running.pop(name)
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
            pr.wait()
        shutil.rmtree(base, ignore_errors=True)
        (a.pods_dir / f"{name}.status.json").unlink(missing_ok=True)

    deadline = time.monotonic() + 600  # a test double never lives long
    while not stop and time.monotonic() < deadline:
        present = {f.name[:-len(".pod.json")] for f in a.pods_dir.glob("*.pod.json")}
        for name in sorted(present - running.keys()):
            doc = json.loads((a.pods_dir / f"{name}.pod.json").read_text())
            try:
                validate(doc)
            except ValueError as e:
                print(f"fake_standin: {name}: {e}", file=sys.stderr)
                for n in list(running):
                    remove(n)
                return 3
            base = a.dirs_base / a.root / f"pod{doc['uid']}"
            pod_dirs = {c: str(base / c) for c in CTRLS}
            cdirs, procs = {}, []
            for i, c in enumerate(doc["containers"]):
                cdirs[c["name"]] = {ctrl: str(base / ctrl / f"c{i}") for ctrl in CTRLS}
                for d in cdirs[c["name"]].values():
                    Path(d).mkdir(parents=True, exist_ok=True)
                procs.append(subprocess.Popen(c["command"], stdout=subprocess.DEVNULL))
            running[name] = (procs, base)
            st = {"uid": doc["uid"], "pids": [pr.pid for pr in procs], "pod_dirs": pod_dirs,
                  "container_dirs": cdirs}
            tmp = a.pods_dir / f".{name}.status.tmp"
            tmp.write_text(json.dumps(st))
            tmp.rename(a.pods_dir / f"{name}.status.json")
        for name in sorted(running.keys() - present):
            remove(name)
        time.sleep(0.05)
    for n in list(running):
        remove(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())

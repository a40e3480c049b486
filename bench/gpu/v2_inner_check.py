#!/usr/bin/env python3
"""v2_inner_check.py — runs inside vm_v2_check.sh's VM (cgroup v2, root): the kit's v2 path.

1. Node: a Burstable and a Guaranteed pod; the values kubelet would write (cpu.weight by its map,
   cpu.max), subtree_control, the process in its container cgroup, removal.
2. gpu_wedge.py run --cpu-only with fake_trainer.py and the bundled agent: cfs, fence-idle,
   fence-cpuset at 0 and 2 neighbours; the agent's writes, usage from cpu.stat, no cgroup left.
"""

import json
import os
import random
import sys
import time
from pathlib import Path

KIT = Path(__file__).resolve().parent
sys.path.insert(0, str(KIT))
import gpu_wedge as gw  # noqa: E402

fails = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        fails.append(what)


def main() -> int:
    cg = gw.Cgroups()
    check(cg.version == "v2", f"detected cgroup {cg.version} at {cg.mounts['cpu']}")
    root = f"feedguard-gpu-v2check-{os.getpid()}"
    node = gw.Node(cg, root, alloc_milli=2000, root_shares=8192)
    rng = random.Random(1)
    try:
        node.start()
        top = cg.mounts["cpu"]
        check("cpu" in (top / root / "kubepods" / "cgroup.subtree_control").read_text().split(),
              "subtree_control enables cpu below kubepods")
        check((top / root / "cpu.weight").read_text().strip() == str(gw.shares_to_weight(8192)),
              "benchmark root weight")
        pods = [gw.Pod("b", gw.rand_uid(rng), "t", gw.rand_hex(rng, 64), 400, 0,
                       [sys.executable, str(KIT / "spinner.py"), "--duration", "30"], "t"),
                gw.Pod("g", gw.rand_uid(rng), "t", gw.rand_hex(rng, 64), 1000, 1000,
                       [sys.executable, str(KIT / "spinner.py"), "--duration", "30"], "t")]
        for p in pods:
            node.create(p)
        time.sleep(1.0)
        b, g = pods
        bd, gd = top / node.pod_rel(b), top / node.pod_rel(g)
        check(str(bd).endswith(f"kubepods/burstable/pod{b.uid}") and
              str(gd).endswith(f"kubepods/pod{g.uid}"), "cgroupfs pod paths by QoS")
        check((bd / "cpu.weight").read_text().strip() == str(gw.shares_to_weight(409)),
              f"Burstable 400m pod cpu.weight {(bd / 'cpu.weight').read_text().strip()}")
        check((bd / "cpu.max").read_text().split()[0] == "max", "Burstable pod cpu.max max")
        check((gd / "cpu.max").read_text().split() == ["100000", "100000"],
              f"Guaranteed 1000m cpu.max {(gd / 'cpu.max').read_text().strip()}")
        tier = top / root / "kubepods" / "burstable" / "cpu.weight"
        check(tier.read_text().strip() == str(gw.shares_to_weight(409)), "burstable tier weight")
        pid = node.procs["b"].pid
        check(str(pid) in (bd / b.cid / "cgroup.procs").read_text().split(),
              "the pod's process is in its container cgroup")
        u = cg.read_usage_s(cg.usage_file(node.pod_rel(b)))
        check(u is not None and u > 0.1, f"cpu.stat usage of the spinning pod {u}")
    finally:
        node.stop()
    check(not (cg.mounts["cpu"] / root).exists(), "Node.stop removed its tree")

    out = Path("/tmp/v2out")
    rc = gw.main(["run", "--cpu-only", "--python", sys.executable, "--trainer-script",
                  str(KIT / "fake_trainer.py"), "--agent", "/gpukit/agent/feedguard-agent",
                  "--arms", "cfs,fence-idle,fence-cpuset", "--ladder", "0,2", "--reps", "1",
                  "--warmup", "0.5", "--duration", "1.5", "--cal-duration", "1", "--width", "64",
                  "--out-dir", str(out), "--name", "v2", "--startup-timeout", "60"])
    check(rc == 0, f"gpu_wedge.py run exited {rc}")
    doc0 = json.loads((out / "v2.json").read_text())
    for r in doc0["runs"]:
        if r.get("agent_revert_error"):
            print(f"     revert error after {r['tag']}: {r['agent_revert_error'][:400]}")
    doc = json.loads((out / "v2.json").read_text())
    check(doc["meta"]["machine"]["cgroup_version"] == "v2", "results say cgroup v2")
    got = {(r["arm"], r["neighbours"]) for r in doc["runs"]}
    check(len(got) == 6, f"6 arm × rung runs ({sorted(got)})")
    for r in doc["runs"]:
        check((r["trainer_cpu_cores"] or 0) > 0.05, f"{r['tag']}: trainer usage from cpu.stat "
              f"{r['trainer_cpu_cores']}")
        ap, rv = r["agent_apply"] or {}, r["agent_revert"] or {}
        if r["arm"] == "fence-idle" and r["neighbours"]:
            check(any(w.endswith("cpu.idle=1") for w in ap.get("writes", [])),
                  f"{r['tag']}: agent wrote cpu.idle=1 ({ap.get('writes')})")
        if r["arm"] == "fence-cpuset":
            check(r["trainer_cpus"] not in ("", "0-1"), f"{r['tag']}: trainer on "
                  f"{r['trainer_cpus']}; writes {ap.get('writes')}")
        if r["arm"] != "cfs" and (r["neighbours"] or r["arm"] == "fence-cpuset"):
            check(rv.get("reverts_failed") == [] and (rv.get("filesReverted") or 0) > 0,
                  f"{r['tag']}: reverted {rv.get('filesReverted')}")
    left = list(cg.mounts["cpu"].glob("feedguard-gpu-*"))
    check(not left, f"no cgroup left ({left})")
    print(f"{len(fails)} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

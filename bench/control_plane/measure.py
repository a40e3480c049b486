#!/usr/bin/env python3
"""measure.py — timing half of the control-plane latency benchmark (run.sh sets the cluster up).

  measure.py policy  --env TB/env --policy NAME --file CPU_IDLE --runs N --out SAMPLES.json
      Flips the FencePolicy's neighbours.fence Idle <-> Weight with a merge PATCH (one kept-alive
      HTTPS connection, admin client certificate) and polls a neighbour's cpu.idle every 1 ms
      until it holds the new value ("1" under Idle, "0" under Weight).
  measure.py bind    --env TB/env --ns NS --name POD --node NODE --cid ID --qos Q --file CPU_IDLE
                     --out SAMPLES.json
      One new neighbour pod: POST its Binding to NODE (as a scheduler would), PATCH its status to
      Running (as a kubelet would), and poll its cpu.idle at 1 ms until it reads "1". Appends
      one sample.
  measure.py report  --policy-samples A.json --pod-samples B.json --command CMD --json OUT.json
                     --md OUT.md
      p50/p99/min/max (nearest-rank percentiles) into the results files.

t0 is taken immediately before the HTTP request is written, so each sample also contains the
API server's own write (etcd) and the request's round trip; the request's own duration is
recorded per sample (api_ms) so the two can be told apart.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import ssl
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scale"))
from load import read_env_file  # noqa: E402


class Api:
    def __init__(self, env):
        ctx = ssl.create_default_context(cafile=env["CA_CERT"])
        ctx.load_cert_chain(env["ADMIN_CERT"], env["ADMIN_KEY"])
        u = urllib.parse.urlparse(env["APISERVER_URL"])
        self.conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=30)

    def request(self, method, path, body, content_type):
        data = json.dumps(body).encode()
        self.conn.request(method, path, body=data,
                          headers={"Content-Type": content_type, "Accept": "application/json"})
        resp = self.conn.getresponse()
        text = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {text[:300]!r}")
        return json.loads(text)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def poll(path, want, t0, timeout_s=30.0):
    """Polls every 1 ms; returns ms from t0 to the first read of `want`."""
    deadline = t0 + timeout_s
    while True:
        now = time.monotonic()
        if read(path) == want:
            return (now - t0) * 1000.0
        if now > deadline:
            raise RuntimeError(f"{path} did not become {want!r} within {timeout_s} s "
                               f"(holds {read(path)!r})")
        time.sleep(0.001)


def append_samples(path, samples):
    old = []
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    with open(path, "w") as f:
        json.dump(old + samples, f)


def cmd_policy(a):
    api = Api(read_env_file(a.env))
    path = f"/apis/feedguard.io/v1alpha1/fencepolicies/{a.policy}"
    current = read(a.file)
    fence = "Weight" if current == "1" else "Idle"
    samples = []
    for i in range(a.runs):
        want = "1" if fence == "Idle" else "0"
        t0 = time.monotonic()
        api.request("PATCH", path, {"spec": {"neighbours": {"fence": fence}}},
                    "application/merge-patch+json")
        api_ms = (time.monotonic() - t0) * 1000.0
        ms = poll(a.file, want, t0)
        samples.append({"run": i, "fence": fence, "ms": round(ms, 2), "api_ms": round(api_ms, 2)})
        print(f"policy run {i:3d} -> {fence:6s} {ms:8.1f} ms (api {api_ms:.1f} ms)", flush=True)
        fence = "Weight" if fence == "Idle" else "Idle"
        time.sleep(a.gap_s)  # pause between edits (not measured)
    append_samples(a.out, samples)


def cmd_bind(a):
    api = Api(read_env_file(a.env))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": a.name},
               "target": {"apiVersion": "v1", "kind": "Node", "name": a.node}}
    status = {"status": {"phase": "Running", "qosClass": a.qos, "startTime": now,
                         "conditions": [{"type": "Ready", "status": "True",
                                         "lastTransitionTime": now}],
                         "containerStatuses": [{"name": "main", "containerID": a.cid,
                                                "image": "feedguard.invalid/standin:e2e",
                                                "imageID": "", "ready": True, "started": True,
                                                "restartCount": 0,
                                                "state": {"running": {"startedAt": now}}}]}}
    base = f"/api/v1/namespaces/{a.ns}/pods/{a.name}"
    t0 = time.monotonic()
    api.request("POST", base + "/binding", binding, "application/json")
    api.request("PATCH", base + "/status", status, "application/merge-patch+json")
    api_ms = (time.monotonic() - t0) * 1000.0
    ms = poll(a.file, "1", t0)
    print(f"pod {a.ns}/{a.name}: {ms:8.1f} ms (api {api_ms:.1f} ms)", flush=True)
    append_samples(a.out, [{"pod": f"{a.ns}/{a.name}", "ms": round(ms, 2),
                            "api_ms": round(api_ms, 2)}])


def stats(values):
    v = sorted(values)
    if not v:
        return None

    def rank(p):  # nearest-rank percentile
        k = max(1, -(-len(v) * p // 100))
        return v[int(k) - 1]

    return {"p50": round(rank(50), 2), "p99": round(rank(99), 2), "min": round(v[0], 2),
            "max": round(v[-1], 2)}


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
            "loadavg_at_report": open("/proc/loadavg").read().split()[:3],
            "cgroup": "v1 (cpu, cpuacct, cpuset mounted separately)"}


def cmd_report(a):
    with open(a.policy_samples) as f:
        pol = json.load(f)
    pod = []
    if a.pod_samples and os.path.exists(a.pod_samples):
        with open(a.pod_samples) as f:
            pod = json.load(f)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    out = {
        "policy_to_cgroup_ms": stats([s["ms"] for s in pol]),
    "policy_gap_s": a.gap_s,
        "runs": len(pol),
        "policy_api_request_ms": stats([s["api_ms"] for s in pol]),
        "new_pod_to_cgroup_ms": stats([s["ms"] for s in pod]),
        "new_pod_runs": len(pod),
        "new_pod_api_requests_ms": stats([s["api_ms"] for s in pod]),
        "command": a.command,
        "machine": machine(),
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "method": ("t0 just before the HTTP request (merge PATCH of spec.neighbours.fence; for a "
                   "new pod: Binding POST + status PATCH) on a kept-alive connection; t1 the "
                   "first 1 ms poll that reads the new value from the neighbour's pod-level "
                   "cpu.idle. One node, one agent, real kube-apiserver + etcd on loopback."),
        "samples": {"policy": pol, "new_pod": pod},
    }
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")

    def row(name, s, n):
        if not s:
            return f"| {name} | 0 | – | – | – | – |\n"
        return f"| {name} | {n} | {s['p50']} | {s['p99']} | {s['min']} | {s['max']} |\n"

    md = "# Control-plane latency: change → cgroup file holds the new value (one node)\n\n"
    md += f"Command: `{a.command}`  \nMachine: {out['machine']}  \nCommit: {commit}, {out['date']}\n\n"
    md += "| what | runs | p50 ms | p99 ms | min ms | max ms |\n|---|---|---|---|---|---|\n"
    md += row("policy edit (fence Idle↔Weight) → neighbour cpu.idle", out["policy_to_cgroup_ms"],
              len(pol))
    md += row("  of which: the PATCH request itself", out["policy_api_request_ms"], len(pol))
    md += row("new neighbour pod (bind + Running) → its cpu.idle = 1", out["new_pod_to_cgroup_ms"],
              len(pod))
    md += row("  of which: Binding POST + status PATCH", out["new_pod_api_requests_ms"], len(pod))
    md += "\n" + out["method"] + "\n"
    if a.notes and os.path.exists(a.notes):
        with open(a.notes) as f:
            md += "\n" + f.read()
    with open(a.md, "w") as f:
        f.write(md)
    print(json.dumps({k: out[k] for k in ("policy_to_cgroup_ms", "runs", "new_pod_to_cgroup_ms",
                                          "new_pod_runs")}, indent=2))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("policy")
    s.add_argument("--env", required=True)
    s.add_argument("--policy", required=True)
    s.add_argument("--file", required=True)
    s.add_argument("--runs", type=int, default=40)
    s.add_argument("--gap-s", type=float, default=0.3, help="pause between edits")
    s.add_argument("--out", required=True)
    s = sub.add_parser("bind")
    for k in ("env", "ns", "name", "node", "cid", "qos", "file", "out"):
        s.add_argument("--" + k, required=True)
    s = sub.add_parser("report")
    s.add_argument("--policy-samples", required=True)
    s.add_argument("--pod-samples", default="")
    s.add_argument("--command", required=True)
    s.add_argument("--json", required=True)
    s.add_argument("--md", required=True)
    s.add_argument("--notes", default="")
    s.add_argument("--gap-s", type=float, default=0.3)
    a = p.parse_args()
    {"policy": cmd_policy, "bind": cmd_bind, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError, KeyError) as e:
        print(f"measure.py: {e}", file=sys.stderr)
        sys.exit(1)

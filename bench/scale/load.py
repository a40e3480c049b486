#!/usr/bin/python3
"""load.py — bulk loader for the scale benchmark: Nodes and running Pods through the real API server.

Creates NODES Node objects (node-00000 …, label nvidia.com/gpu.present=true) and, per node,
TRAINERS trainer pods (label feedguard.io/role=trainer, Guaranteed 4 CPU) and the rest of
PODS/NODES as neighbour pods (label app=batch, Burstable 100m), each created with
spec.nodeName set (as if scheduled) and then given a kubelet-like status through /status
(phase Running, qosClass, Ready, containerStatuses[].containerID). Everything goes through
kube-apiserver's REST API (admin client certificate from a tests/testbed dir), from THREADS
keep-alive connections; it reports objects/s so the results can say where it keeps up.

  load.py --testbed DIR --nodes N --pods P [--trainers-per-node 1] [--threads 8]
          [--namespace scale] [--first-node K] [--pod-shape lean|realistic] [--trainer-gpus 1]
          [--json OUT]

--pod-shape realistic: the pods are copies of the real cluster's (shapes/pods.json, made by
shapes/dump.sh on the node tier's kubelet): per node the training-operator worker as its trainer
and the other dumped pods in turn as neighbours, with fresh names, uids, container ids and IPs.
PODS must be a multiple of NODES. --first-node K: nodes 0..K-1 and their pods exist already
(a ladder grows one API server step by step).
"""
import argparse
import http.client
import json
import os
import queue
import secrets
import ssl
import sys
import threading
import time
import urllib.parse


def read_env(testbed):
    return read_env_file(os.path.join(testbed, "env"))


def read_env_file(path):
    """A test bed's env file (tests/testbed/testbed.sh: KEY='value' lines) as a dict."""
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                env[k] = v.strip("'\"")
    return env


class Api:
    """One keep-alive HTTPS connection to kube-apiserver with the admin client certificate."""

    def __init__(self, env):
        u = urllib.parse.urlparse(env["APISERVER_URL"])
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=env["CA_CERT"])
        self.ctx.load_cert_chain(env["ADMIN_CERT"], env["ADMIN_KEY"])
        self.conn = None

    def request(self, method, path, body=None, content_type="application/json", tries=5):
        data = None if body is None else json.dumps(body).encode()
        last = None
        for attempt in range(tries):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                            timeout=120)
                headers = {"Content-Type": content_type, "Accept": "application/json"}
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                payload = r.read()
                if r.status == 429 or r.status >= 500:
                    last = f"{method} {path}: HTTP {r.status} {payload[:200]!r}"
                    time.sleep(0.2 * (attempt + 1))
                    continue
                return r.status, (json.loads(payload) if payload else {})
            except (OSError, http.client.HTTPException) as e:
                last = f"{method} {path}: {e}"
                try:
                    self.conn.close()
                except Exception:  # noqa: BLE001 — a broken connection is replaced
                    pass
                self.conn = None
                time.sleep(0.2 * (attempt + 1))
        raise RuntimeError(last)


def node_name(i):
    return f"node-{i:05d}"


def ensure(api, method, path, body, ok=(200, 201, 409)):
    status, resp = api.request(method, path, body)
    if status not in ok:
        raise RuntimeError(f"{method} {path}: HTTP {status}: {json.dumps(resp)[:300]}")
    return status, resp


def pod_bodies(ns, node, name, trainer, trainer_gpus=1):
    if trainer:
        res = {"requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1Gi"}}
        if trainer_gpus > 0:  # a GPU trainer: observed by the agents (NodeFence.observe)
            res["requests"]["nvidia.com/gpu"] = res["limits"]["nvidia.com/gpu"] = str(trainer_gpus)
        labels, qos = {"feedguard.io/role": "trainer", "app": "train"}, "Guaranteed"
    else:
        res = {"requests": {"cpu": "100m"}}
        labels, qos = {"app": "batch"}, "Burstable"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"nodeName": node,
                    "containers": [{"name": "main", "image": "feedguard.invalid/scale:1",
                                    "resources": res}]}}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"status": {
        "phase": "Running", "qosClass": qos, "startTime": now,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [{"name": "main", "containerID": "containerd://" + secrets.token_hex(32),
                               "image": "feedguard.invalid/scale:1", "imageID": "", "ready": True,
                               "started": True, "restartCount": 0,
                               "state": {"running": {"startedAt": now}}}]}}
    return pod, status


# ---- the realistic shape: pods as the real cluster holds them (bench/scale/shapes/pods.json) ----
SHAPES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shapes", "pods.json")
# Label values that name one object (a pod, its Job, its controller), made fresh per pod.
PER_POD_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")
NAME_LABELS = ("statefulset.kubernetes.io/pod-name",)
JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")


def realistic_templates(path=SHAPES):
    """(trainer, others): the dumped training-operator worker (its GPU trainer) and the rest."""
    with open(path) as f:
        items = json.load(f)["items"]
    trainer = [p for p in items if "training.kubeflow.org/job-name" in p["metadata"].get("labels", {})]
    if len(trainer) != 1:
        raise ValueError(f"{path}: want exactly one training-operator pod, found {len(trainer)}")
    others = [p for p in items if p is not trainer[0]]
    others.sort(key=lambda p: p["metadata"]["name"])
    return trainer[0], others


def _fresh_uid():
    h = secrets.token_hex(16)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def realistic_bodies(ns, node, name, template, trainer, trainer_gpus, index, pod_ip):
    """A copy of a dumped pod under a new name on `node`: its spec, labels, annotations, owner
    and status as the API server held them, with the per-instance values made fresh (uid-bearing
    labels, owner uids, container ids, pod name labels, IPs). The trainer keeps
    feedguard.io/role=trainer and gets `trainer_gpus` nvidia.com/gpu (0: none); the other shapes
    keep whatever GPUs their workload asked for."""
    t = json.loads(json.dumps(template))
    meta, spec, st = t["metadata"], t["spec"], t.get("status", {})
    labels = meta.get("labels", {})
    for k in ("uid", "resourceVersion", "creationTimestamp", "generateName", "managedFields"):
        meta.pop(k, None)
    meta["name"], meta["namespace"] = name, ns
    job = name.rsplit("-", 1)[0]
    fresh = _fresh_uid()
    for k in PER_POD_LABELS:
        if k in labels:
            labels[k] = fresh
    for k in JOB_NAME_LABELS:
        if k in labels:
            labels[k] = job
    for k in NAME_LABELS:
        if k in labels:
            labels[k] = name
    if "apps.kubernetes.io/pod-index" in labels:
        labels["apps.kubernetes.io/pod-index"] = str(index)
    if trainer:
        labels["feedguard.io/role"] = "trainer"
    else:
        labels.pop("feedguard.io/role", None)
    for o in meta.get("ownerReferences", []):
        o["uid"] = fresh if o.get("kind") == "Job" else _fresh_uid()
        if o.get("kind") == "Job":
            o["name"] = job
    spec["nodeName"] = node
    if "hostname" in spec:
        spec["hostname"] = name
    if trainer:
        for c in spec.get("containers", []):
            res = c.setdefault("resources", {})
            for part in ("requests", "limits"):
                if trainer_gpus > 0 and "nvidia.com/gpu" in res.get(part, {}):
                    res[part]["nvidia.com/gpu"] = str(trainer_gpus)
                elif trainer_gpus <= 0:
                    res.get(part, {}).pop("nvidia.com/gpu", None)
    for lst in ("containerStatuses", "initContainerStatuses"):
        for cs in st.get(lst, []):
            if cs.get("containerID"):
                cs["containerID"] = "containerd://" + secrets.token_hex(32)
    st["podIP"] = pod_ip
    st["podIPs"] = [{"ip": pod_ip}]
    st["hostIP"] = "10.0.0.1"
    st["hostIPs"] = [{"ip": "10.0.0.1"}]
    t.pop("status", None)
    return t, {"status": st}


def run_parallel(env, threads, items, fn):
    """fn(api, item) over items from `threads` connections; returns (seconds, errors)."""
    q = queue.Queue()
    for it in items:
        q.put(it)
    errors = []
    lock = threading.Lock()

    def worker():
        api = Api(env)
        while True:
            try:
                it = q.get_nowait()
            except queue.Empty:
                return
            try:
                fn(api, it)
            except Exception as e:  # noqa: BLE001 — collected and reported
                with lock:
                    errors.append(str(e))

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0, errors


AGENT_NS = "feedguard-system"
AGENT_SA = "feedguard-agent"
TOKEN_AUDIENCE = "feedguard"


def mint_agent_tokens(testbed, first_node, nodes, out_dir, threads=8, log=sys.stderr):
    """The chart's token identity for nodes first_node..nodes-1: per node, the agent's
    DaemonSet pod (namespace feedguard-system, ServiceAccount feedguard-agent, bound to the node:
    the controller never fences that namespace) and a TokenRequest bound to that pod for
    feedguard's audience — what the kubelet projects into the real agent — written to
    out_dir/<node>. The API server puts the node's name in such a token's extra
    (authentication.kubernetes.io/node-name), which the controller's TokenReview checks against
    the hello. Returns {"pods": created, "seconds": s, "errors": [...]}."""
    env = read_env(testbed)
    os.makedirs(out_dir, exist_ok=True)
    api = Api(env)
    ensure(api, "POST", "/api/v1/namespaces",
           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NS}})
    ensure(api, "POST", f"/api/v1/namespaces/{AGENT_NS}/serviceaccounts",
           {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_SA}})

    def one(a, i):
        node = node_name(i)
        name = f"feedguard-agent-{node}"
        status, pod = a.request("POST", f"/api/v1/namespaces/{AGENT_NS}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "feedguard",
                                                  "app.kubernetes.io/component": "agent"}},
            "spec": {"nodeName": node, "serviceAccountName": AGENT_SA,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "agent", "image": "ghcr.io/feedguard/feedguard-agent:0.1.0"}]}})
        if status == 409:
            status, pod = a.request("GET", f"/api/v1/namespaces/{AGENT_NS}/pods/{name}")
        if status not in (200, 201):
            raise RuntimeError(f"agent pod {name}: HTTP {status}: {json.dumps(pod)[:300]}")
        status, tr = a.request(
            "POST", f"/api/v1/namespaces/{AGENT_NS}/serviceaccounts/{AGENT_SA}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"audiences": [TOKEN_AUDIENCE], "expirationSeconds": 6 * 3600,
                      "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                         "uid": pod["metadata"]["uid"]}}})
        token = tr.get("status", {}).get("token", "") if status in (200, 201) else ""
        if not token:
            raise RuntimeError(f"TokenRequest for {name}: HTTP {status}: {json.dumps(tr)[:300]}")
        tmp = os.path.join(out_dir, f".{node}.tmp")
        with open(tmp, "w") as f:
            f.write(token)
        os.replace(tmp, os.path.join(out_dir, node))

    secs, errors = run_parallel(env, threads, range(first_node, nodes), one)
    print(f"load: {nodes - first_node} agent pods + tokens in {secs:.1f} s, {len(errors)} errors",
          file=log)
    return {"pods": nodes - first_node, "seconds": secs, "errors": errors[:5]}


def load(testbed, nodes, pods, trainers_per_node=1, threads=8, ns="scale", log=sys.stderr,
         first_node=0, trainer_gpus=1, pod_shape="lean"):
    """Nodes first_node..nodes-1 and their pods (pods/nodes per node, which must divide)."""
    if nodes <= 0 or pods % nodes:
        raise ValueError(f"pods ({pods}) must be a multiple of nodes ({nodes})")
    ppn = pods // nodes
    if pod_shape not in ("lean", "realistic"):
        raise ValueError(f"pod shape {pod_shape!r}: lean or realistic")
    if pod_shape == "realistic":
        tr_tpl, others = realistic_templates()
    env = read_env(testbed)
    api = Api(env)
    for n in (ns, "feedguard-system"):
        ensure(api, "POST", "/api/v1/namespaces",
               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}})

    def mk_node(a, i):
        ensure(a, "POST", "/api/v1/nodes",
               {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node_name(i), "labels": {"nvidia.com/gpu.present": "true",
                                                               "kubernetes.io/hostname": node_name(i)}}})

    new_nodes = range(first_node, nodes)
    node_s, node_err = run_parallel(env, threads, new_nodes, mk_node)
    print(f"load: {len(new_nodes)} nodes in {node_s:.1f} s ({len(new_nodes) / max(node_s, 1e-9):.0f}/s), "
          f"{len(node_err)} errors", file=log)

    # Pod k of node i: the first trainers_per_node of each node are trainers. Created in rounds
    # over the nodes (k outer), so a partial load is spread evenly.
    def mk_pod(a, ik):
        node_i, k = ik
        trainer = k < trainers_per_node
        if pod_shape == "realistic":
            tpl = tr_tpl if trainer else others[(k - trainers_per_node) % len(others)]
            base = tpl["metadata"]["name"].rsplit("-", 1)[0] if "generateName" in tpl["metadata"] \
                else tpl["metadata"]["name"].rstrip("0123456789").rstrip("-")
            name = f"{base}-{node_i:05d}-{k:03d}"
            ip = f"10.{(node_i >> 8) & 255}.{node_i & 255}.{k + 2}"
            pod, status = realistic_bodies(ns, node_name(node_i), name, tpl, trainer, trainer_gpus,
                                           k, ip)
        else:
            name = f"{'train' if trainer else 'batch'}-{node_i:05d}-{k:03d}"
            pod, status = pod_bodies(ns, node_name(node_i), name, trainer, trainer_gpus)
        ensure(a, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
        code, resp = a.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status", status,
                               content_type="application/merge-patch+json")
        if code != 200:
            raise RuntimeError(f"status of {name}: HTTP {code}: {json.dumps(resp)[:300]}")

    items = [(i, k) for k in range(ppn) for i in new_nodes]
    pod_s, pod_err = run_parallel(env, threads, items, mk_pod)
    n = len(items)
    print(f"load: {n} pods in {pod_s:.1f} s ({n / max(pod_s, 1e-9):.0f} pods/s, "
          f"{2 * n / max(pod_s, 1e-9):.0f} requests/s, {threads} connections), "
          f"{len(pod_err)} errors", file=log)
    for e in (node_err + pod_err)[:5]:
        print(f"load: error: {e}", file=log)
    tr = min(trainers_per_node, ppn)
    return {"nodes": nodes, "pods": pods, "first_node": first_node, "pods_loaded": n,
            "threads": threads, "node_seconds": node_s, "pod_seconds": pod_s,
            "trainer_gpus": trainer_gpus, "pod_shape": pod_shape,
            "pods_per_s": n / max(pod_s, 1e-9), "errors": len(node_err) + len(pod_err),
            "expected": {node_name(i): [tr, ppn - tr] for i in range(nodes)}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--testbed", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--pods", type=int, required=True)
    ap.add_argument("--trainers-per-node", type=int, default=1)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--namespace", default="scale")
    ap.add_argument("--first-node", type=int, default=0, help="nodes below this exist already")
    ap.add_argument("--pod-shape", choices=["lean", "realistic"], default="lean",
                    help="lean: one container, 1-2 labels (the ladders before 2026-11-29); "
                         "realistic: copies of the real cluster's pods in shapes/pods.json")
    ap.add_argument("--trainer-gpus", type=int, default=1,
                    help="nvidia.com/gpu of each trainer (0: none, as the ladders before 2026-11-29)")
    ap.add_argument("--json")
    a = ap.parse_args()
    r = load(a.testbed, a.nodes, a.pods, a.trainers_per_node, a.threads, a.namespace,
             first_node=a.first_node, trainer_gpus=a.trainer_gpus, pod_shape=a.pod_shape)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)
    return 1 if r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

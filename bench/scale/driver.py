#!/usr/bin/python3
"""driver.py — one ladder step of the controller scale benchmark, and the report over all steps.

  driver.py step --build BUILD --nodes N --pods P --agents A --work DIR --rows ROWS.jsonl
                 [--edits 10] [--controller BIN] [--sim BIN] [--threads 8] [--phases ...]
  driver.py report --rows ROWS.jsonl --out-json scale.json --out-md scale.md [--out-png scale.png]

A step: a private real API server (tests/testbed/testbed.sh up DIR/tb), the FencePolicy CRD,
N nodes and P running pods through the API server (load.py), a FencePolicy "bench"
(trainers: feedguard.io/role=trainer; neighbours: every other pod, fence Idle), then the real
feedguard-controller (--insecure, as tests/e2e/lib.sh starts it) and A simulated agents
(fg-agent-sim). Measured (controller RSS and CPU from /proc/<pid>, sampled every 200 ms):
  start      controller exec → every agent holds a fence with its node's trainers + neighbours
  steady     RSS median over 5 s once all are fenced
  edits      PATCH spec.priority → every agent has a fence with the new generation (per edit)
  relist     a probe pod is created, fenced and deleted through the API server; kube-apiserver
             is stopped, the probe's etcd value written back (no watch can carry it), the API
             server started and etcd compacted → the pods reflector gets 410 and relists;
             measured from its "relisting" log line until both the probe's node holds a fence
             with the probe (relist + redistribute) and the controller's CPU is back at its
             steady level (first 2 s below it), every agent still holding its full fence; then a
             policy edit → every agent (relist_then_edit)
  storm      the simulator cancels every stream at once; done when every agent has received a
             fence on a new stream (agents reconnect with the real agent's backoff)
  failover   a standby replica (--leader-elect, same gRPC port) lists and watches; the leader is
             SIGKILLed; the standby takes the Lease once it expires and serves: any agent that
             received a fence with fewer pods than before counts (must be 0)
  restart    SIGTERM the controller and start a new one while the agents stay: any agent that
             receives a fence with fewer trainers+neighbours than its previous one (a withdrawn
             policy) is counted; done when all are fenced again from the new process
One JSON row per step is appended to ROWS; the event log of the simulator stays in DIR.
"""
import argparse
import base64
import datetime
import hashlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import load as loader  # noqa: E402

TESTBED = os.path.join(REPO, "tests", "testbed", "testbed.sh")
CRD = os.path.join(REPO, "crds", "fencepolicy.yaml")
STARVATION_CRD = os.path.join(REPO, "crds", "starvationreport.yaml")
POLICY_PATH = "/apis/feedguard.io/v1alpha1/fencepolicies"


def log(msg):
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now_ms():
    return time.time() * 1000.0


# ---- /proc sampling ----------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_rss(pid):
    """(cpu seconds user+sys, rss MB) of pid, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        fields = st[st.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        rss = None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024.0
        return cpu, rss
    except (OSError, ValueError, IndexError):
        return None


class Sampler:
    """Samples one pid every `period` s: list of (ms, cpu_s, rss_mb)."""

    def __init__(self, pid, period=0.2):
        self.pid, self.period, self.samples = pid, period, []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop_ev.is_set():
            v = proc_cpu_rss(self.pid)
            if v is None:
                return
            with self.lock:
                self.samples.append((now_ms(), v[0], v[1]))
            self.stop_ev.wait(self.period)

    def stop(self):
        self.stop_ev.set()
        self.t.join()

    def window(self, t0, t1=None):
        with self.lock:
            return [s for s in self.samples if s[0] >= t0 and (t1 is None or s[0] <= t1)]

    def last(self):
        with self.lock:
            return self.samples[-1] if self.samples else None

    def peak_rss(self, t0=0, t1=None):
        w = self.window(t0, t1)
        return max((s[2] for s in w), default=None)

    def cpu_between(self, t0, t1=None):
        w = self.window(t0, t1)
        return (w[-1][1] - w[0][1]) if len(w) >= 2 else None

    def quiet_since(self, t0, window_ms=1000, max_cpu=0.1):
        """First time ≥ t0 at which the pid used < max_cpu CPU-s over the preceding window."""
        w = self.window(t0 - window_ms)
        j = 0
        for i, s in enumerate(w):
            if s[0] < t0 + window_ms:
                continue
            while w[j][0] < s[0] - window_ms:
                j += 1
            if s[1] - w[j][1] < max_cpu * (s[0] - w[j][0]) / 1000.0:
                return s[0]
        return None


# ---- the simulator -----------------------------------------------------------------------
class Sim:
    extra_args = []  # the TLS flags of make_tls (--tls)
    observe_args = []  # --observe-starving-percent

    def __init__(self, binary, target, agents, events_path, report_interval_ms=30000,
                 spread_ms=0):
        self.agents = agents
        self.lock = threading.Lock()
        self.fences = [[] for _ in range(agents)]  # per agent: (t, stream, v, g, tr, nb, drop)
        self.streams = [0] * agents
        self.ends = [[] for _ in range(agents)]
        self.drops = []
        self.nacks = []
        self.misc = []
        self.out = open(events_path, "a")
        self.p = subprocess.Popen(
            [binary, "--target", target, "--agents", str(agents), "--report-interval-ms",
             str(report_interval_ms), "--start-spread-ms", str(spread_ms)] + Sim.extra_args +
            Sim.observe_args,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.out.write(line)
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ev = e.get("ev")
            with self.lock:
                if ev == "fence":
                    a = e["a"]
                    self.fences[a].append((e["t"], e["s"], e["v"], e["g"], e["tr"], e["nb"],
                                           e.get("drop")))
                    if e.get("drop"):
                        self.drops.append(e)
                    if e.get("ack") == 0:
                        self.nacks.append(e)
                elif ev == "hello":
                    self.streams[e["a"]] = e["s"]
                elif ev == "end":
                    self.ends[e["a"]].append((e["t"], e["s"], e["code"], e["msg"]))
                else:
                    self.misc.append(e)
        self.out.flush()

    def send(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def wait_misc(self, ev, timeout=10, after=0.0):
        end = time.time() + timeout
        while time.time() < end:
            with self.lock:
                for e in self.misc:
                    if e.get("ev") == ev and e.get("t", 0) >= after:
                        return e
            time.sleep(0.05)
        return None

    def close(self):
        if self.p.poll() is None:
            try:
                self.send("quit")
                self.p.stdin.close()
            except OSError:
                pass
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.reader.join(5)
        self.out.close()


def wait_for(pred, timeout, period=0.05):
    end = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() >= end:
            return None
        time.sleep(period)


# ---- controller --------------------------------------------------------------------------
# The key of every certificate make_tls issues, by the name rows carry (`tls_key`): "ec" is what
# the chart issues (ECDSA P-256, its own PKI and cert-manager's), "rsa" what Helm's genCA and
# genSignedCert give (RSA 2048; the chart's own PKI until 2026-11-29).
TLS_KEYS = {"ec": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            "rsa": ["-newkey", "rsa:2048"]}


def make_tls(work, identity="token", key="ec"):
    """A CA, a server certificate for the controller (127.0.0.1, feedguard-controller) and one
    client certificate every simulated agent presents (the chart's shape), made with the openssl
    CLI, every key of kind `key` (TLS_KEYS). identity "token" (the chart's default): the agents
    also send their node-bound token (work/tokens/<node>, load.mint_agent_tokens) and the
    controller checks it by TokenReview; "shared-cert": the certificate alone. Returns
    (controller flags, simulator flags)."""
    d = os.path.join(work, "tls" if key == "ec" else f"tls-{key}")
    os.makedirs(d, exist_ok=True)
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    run("req", "-x509", *TLS_KEYS[key], "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=fg-scale-ca")
    for name, ext in (("server", "subjectAltName=DNS:feedguard-controller,IP:127.0.0.1"),
                      ("client", "extendedKeyUsage=clientAuth")):
        run("req", *TLS_KEYS[key], "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=fg-scale-{name}")
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    p = lambda n: os.path.join(d, n)  # noqa: E731
    ctl = ["--tls-cert", p("server.crt"), "--tls-key", p("server.key"), "--tls-client-ca",
           p("ca.crt"), "--agent-identity", identity]
    sim = ["--tls-ca", p("ca.crt"), "--tls-cert", p("client.crt"), "--tls-key", p("client.key"),
           "--tls-server-name", "feedguard-controller"]
    if identity == "token":
        ctl += ["--agent-token-audience", loader.TOKEN_AUDIENCE,
                "--agent-service-account", loader.AGENT_SA]
        sim += ["--token-dir", os.path.join(work, "tokens")]
    return ctl, sim


def chart_leader_election_args():
    """The controller's leader-election flags as the chart renders them from its values.yaml
    (controller.leaderElection: the Lease timing and the armed standby)."""
    with open(os.path.join(REPO, "charts", "feedguard", "values.yaml")) as f:
        le = yaml.safe_load(f)["controller"]["leaderElection"]
    return [f"--lease-duration-ms={le['leaseDurationSeconds'] * 1000}",
            f"--renew-deadline-ms={le['renewDeadlineSeconds'] * 1000}",
            f"--retry-period-ms={le['retryPeriodSeconds'] * 1000}",
            f"--standby-arm-after-ms={le['standbyArmAfterMilliseconds']}"]


class Controller:
    # ["--insecure"], or the TLS flags of make_tls (--tls): set once per step.
    transport_args = ["--insecure"]
    extra_args = []  # --controller-args

    def __init__(self, binary, kubeconfig, logpath, grpc_port, name="ctl", leader_elect=False):
        self.logpath = logpath
        self.logf = open(logpath, "a")
        self.start_ms = now_ms()
        self.log_offset = os.path.getsize(logpath)
        # Leader election only for the failover phase: a leader that cannot renew its Lease while
        # the API server restarts (relist phase) exits, as it must. The Lease timing and the armed
        # standby as the chart sets them (--controller-args, after these, overrides).
        le = (["--leader-elect", "--lease-namespace", "feedguard-system", "--lease-name",
               "feedguard-scale"] + chart_leader_election_args() if leader_elect else [])
        self.p = subprocess.Popen(
            [binary] + Controller.transport_args +
            ["--kubeconfig", kubeconfig, "--listen-grpc", f"127.0.0.1:{grpc_port}",
             "--metrics-addr", "127.0.0.1:0", "--agent-namespace", "feedguard-system",
             "--status-interval-ms", "500", "--identity", name] + le + Controller.extra_args,
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.sampler = Sampler(self.p.pid)
        self.port = None

    def log_text(self):
        with open(self.logpath, errors="replace") as f:
            f.seek(self.log_offset)
            return f.read()

    def wait_port(self, timeout=60):
        def find():
            if self.p.poll() is not None:
                raise RuntimeError(f"controller exited rc={self.p.returncode}: "
                                   f"{self.log_text()[-800:]}")
            m = re.search(r"leading: serving agents on port (\d+)", self.log_text())
            return m and int(m.group(1))
        self.port = wait_for(find, timeout)
        if not self.port:
            raise RuntimeError("controller did not serve agents within "
                               f"{timeout}s: {self.log_text()[-800:]}")
        return self.port

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.sampler.stop()
        self.logf.close()


# ---- one step ----------------------------------------------------------------------------
def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    f, c = math.floor(k), math.ceil(k)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def b64(text):
    return base64.b64encode(text.encode()).decode()


def etcd_kv(env, op, body):
    """etcd's v3 HTTP/JSON gateway (the test bed's etcd, loopback): /v3/kv/<op> → its JSON."""
    req = urllib.request.Request(f"{env['ETCD_URL']}/v3/kv/{op}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def sh(cmd, timeout=300, **kw):
    return subprocess.run(cmd, timeout=timeout, capture_output=True, text=True, **kw)


def policy_body(priority=0):
    return {"apiVersion": "feedguard.io/v1alpha1", "kind": "FencePolicy",
            "metadata": {"name": "bench"},
            "spec": {"priority": priority,
                     "nodeSelector": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
                     "trainers": {"podSelector": {"matchLabels": {"feedguard.io/role": "trainer"}}},
                     "neighbours": {"fence": "Idle"}}}


def patch_priority(api, k):
    t = now_ms()
    code, resp = api.request("PATCH", f"{POLICY_PATH}/bench", {"spec": {"priority": k}},
                             content_type="application/merge-patch+json")
    if code != 200:
        raise RuntimeError(f"policy patch: HTTP {code}: {resp}")
    return t, now_ms(), resp["metadata"]["generation"]


def read_starvation_report(kubeconfig, wait_s):
    """StarvationReport/cluster's headline and size once it names every reporting node's pods."""
    out = None

    def get():
        nonlocal out
        r = sh(["kubectl", "--kubeconfig", kubeconfig, "get", "starvationreports", "cluster",
                "-o", "json"])
        if r.returncode:
            return False
        obj = json.loads(r.stdout)
        st = obj.get("status") or {}
        c = st.get("cluster") or {}
        # bytes: kubectl's indented JSON; compact_bytes: the object as the API server stores it
        # (compact JSON; no managedFields either way).
        out = {"bytes": len(r.stdout),
               "compact_bytes": len(json.dumps(obj, separators=(",", ":"))),
               "nodes_reporting": c.get("nodesReporting"),
               "gpu_pods": c.get("gpuPods"), "starving_pods": c.get("starvingPods"),
               "pods_listed": len(st.get("pods") or []), "updated": st.get("updated")}
        return bool(c.get("gpuPods"))
    wait_for(get, wait_s, period=1.0)
    return out


def run_step(a):
    row = {"nodes": a.nodes, "pods": a.pods, "agents": a.agents, "load_avg": loadavg(),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "notes": []}
    os.makedirs(a.work, exist_ok=True)
    row["transport"] = "mtls" if a.tls else "plaintext"
    row["agent_identity"] = a.identity if a.tls else "none"
    row["tls_key"] = a.tls_key if a.tls else "none"
    # Observation (docs/DESIGN.md §4b): GPU trainers are observed by their agents, whose reports
    # carry the windows (observe_starving_percent % of them starving; < 0: no observations).
    row["trainer_gpus"] = a.trainer_gpus
    row["pod_shape"] = a.pod_shape
    row["observe_starving_percent"] = a.observe_starving_percent
    row["controller_args"] = a.controller_args
    # How the controller asks for the Pods list (--list-encoding; protobuf since 2026-11-29).
    row["list_encoding"] = "json" if "--list-encoding=json" in a.controller_args else "protobuf"
    Controller.extra_args = a.controller_args.split()
    Sim.observe_args = ["--observe-starving-percent", str(a.observe_starving_percent)]
    if a.tls:
        Controller.transport_args, Sim.extra_args = make_tls(a.work, a.identity, a.tls_key)
    row["sim_args"] = a.sim_args
    Sim.extra_args = Sim.extra_args + a.sim_args.split()
    tb = a.testbed or os.path.join(a.work, "tb")
    loaded_file = os.path.join(tb, "fg-scale-loaded.json")
    ctl_bin = os.path.join(a.work, "feedguard-controller")
    shutil.copy2(a.controller, ctl_bin)  # a stable copy: others may rebuild the tree meanwhile
    with open(ctl_bin, "rb") as f:
        row["controller_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    ctl_log = os.path.join(a.work, "controller.log")
    events = os.path.join(a.work, "sim-events.jsonl")
    ctl = sim = None
    tb_up = False
    probe_pods = []
    probe_delete_drops = 0
    phases = set(a.phases.split(","))
    try:
        log(f"step {a.nodes}/{a.pods}/{a.agents}: load average {row['load_avg']}")
        loaded = {"nodes": 0, "pods": 0}
        if a.testbed and os.path.exists(os.path.join(tb, "env")) and \
                sh([TESTBED, "status", tb]).returncode == 0:
            if os.path.exists(loaded_file):
                with open(loaded_file) as f:
                    loaded = json.load(f)
            if loaded["nodes"] and loaded["pods"] * a.nodes != a.pods * loaded["nodes"]:
                raise RuntimeError(f"{tb} holds {loaded}: pods/node differs from this step")
            if loaded["nodes"] > a.nodes:
                raise RuntimeError(f"{tb} holds {loaded}: more nodes than this step")
            if loaded["nodes"] and loaded.get("trainer_gpus", 0) != a.trainer_gpus:
                raise RuntimeError(f"{tb} holds {loaded}: trainers with other GPUs than this step")
            if loaded["nodes"] and loaded.get("pod_shape", "lean") != a.pod_shape:
                raise RuntimeError(f"{tb} holds {loaded}: pods of another shape than this step")
            log(f"reusing API server {tb} with {loaded['nodes']} nodes / {loaded['pods']} pods")
        else:
            r = sh([TESTBED, "up", tb], timeout=180)
            if r.returncode != 0:
                raise RuntimeError(f"testbed up failed: {r.stderr[-800:]}")
        tb_up = True
        kubeconfig = os.path.join(tb, "kubeconfig")
        env = loader.read_env(tb)
        r = sh(["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", CRD])
        r2 = sh(["kubectl", "--kubeconfig", kubeconfig, "wait", "--for=condition=Established",
                 "--timeout=60s", "crd/fencepolicies.feedguard.io"])
        if r.returncode or r2.returncode:
            raise RuntimeError(f"CRD: {r.stderr} {r2.stderr}")
        r = sh(["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", STARVATION_CRD])
        if r.returncode:
            raise RuntimeError(f"StarvationReport CRD: {r.stderr}")
        ld = loader.load(tb, a.nodes, a.pods, a.trainers_per_node, a.threads,
                         first_node=loaded["nodes"], trainer_gpus=a.trainer_gpus,
                         pod_shape=a.pod_shape)
        row["load_pods_per_s"] = round(ld["pods_per_s"], 1)
        row["load_pods_loaded"] = ld["pods_loaded"]
        row["load_seconds"] = round(ld["pod_seconds"], 1)
        row["load_errors"] = ld["errors"]
        if ld["errors"]:
            raise RuntimeError(f"loader: {ld['errors']} errors")
        if a.tls and a.identity == "token":
            # Tokens for every node of this step (the earlier steps' agent pods exist: 409).
            tk = loader.mint_agent_tokens(tb, 0, a.nodes, os.path.join(a.work, "tokens"),
                                          a.threads)
            row["agent_pods"] = a.nodes
            row["token_mint_seconds"] = round(tk["seconds"], 1)
            if tk["errors"]:
                raise RuntimeError(f"agent tokens: {tk['errors']}")
        with open(loaded_file, "w") as f:
            json.dump({"nodes": a.nodes, "pods": a.pods, "trainer_gpus": a.trainer_gpus,
                       "pod_shape": a.pod_shape}, f)
        expected = [ld["expected"][loader.node_name(i)] for i in range(a.agents)]
        api = loader.Api(env)
        code, resp = api.request("POST", POLICY_PATH, policy_body(0))
        if code == 409:
            code, resp = api.request("GET", f"{POLICY_PATH}/bench")
        if code not in (200, 201):
            raise RuntimeError(f"create policy: HTTP {code}: {resp}")
        gen = resp["metadata"]["generation"]
        prio = resp["spec"].get("priority", 0)

        # ---- start → all fenced
        ctl = Controller(ctl_bin, kubeconfig, ctl_log, free_port())
        port = ctl.wait_port()
        sim = Sim(a.sim, f"127.0.0.1:{port}", a.agents, events, a.report_interval_ms)
        sim_sampler = Sampler(sim.p.pid, period=0.5)

        def fenced_count(min_gen, min_stream=None, after=0.0):
            n = 0
            latest = 0.0
            with sim.lock:
                for i in range(a.agents):
                    fs = sim.fences[i]
                    if not fs:
                        continue
                    t, s, _v, g, tr, nb, _d = fs[-1]
                    if g < min_gen or [tr, nb] != expected[i] or t < after:
                        continue
                    if min_stream is not None and s <= min_stream[i]:
                        continue
                    n += 1
                    latest = max(latest, t)
            return n, latest

        def all_fenced(min_gen, min_stream=None, after=0.0):
            n, latest = fenced_count(min_gen, min_stream, after)
            return latest if n == a.agents else None

        def mark():
            """Each agent's current stream and the drops so far: what a handover is judged from."""
            with sim.lock:
                return [f[-1][1] if f else 0 for f in sim.fences], len(sim.drops)

        def judge_handover(phase, streams, ndrops, t0):
            """Waits until every agent has a full fence on a newer stream; records the time since t0
            and the agents that got a fence with fewer pods meanwhile (a withdrawn fence)."""
            done = wait_for(lambda: all_fenced(0, streams), a.timeout)
            with sim.lock:
                drops = sim.drops[ndrops:]
            row[f"{phase}_to_all_fenced_s"] = round((done - t0) / 1000.0, 2) if done else None
            row[f"{phase}_agents_with_withdrawn_fence"] = len({d["a"] for d in drops})
            row[f"{phase}_drop_examples"] = [d.get("drop") for d in drops[:3]]

        t_all = wait_for(lambda: all_fenced(gen), a.timeout)
        if t_all is None:
            n, _ = fenced_count(gen)
            row["notes"].append(f"start: only {n}/{a.agents} agents fenced after {a.timeout}s")
            row["start_to_all_fenced_s"] = None
        else:
            row["start_to_all_fenced_s"] = round((t_all - ctl.start_ms) / 1000.0, 2)
        with sim.lock:
            first = [f[0][0] for f in sim.fences if f]
            row["start_first_fence_empty_agents"] = sum(
                1 for f in sim.fences if f and (f[0][4], f[0][5]) == (0, 0))
        log(f"start → all fenced: {row['start_to_all_fenced_s']} s "
            f"(first fence at +{(min(first) - ctl.start_ms) / 1000.0 if first else -1:.2f} s)")

        # ---- steady RSS
        time.sleep(a.settle_s)
        later = ctl.sampler.window(t_all or now_ms())
        row["start_cpu_s"] = later[0][1] if later else None  # cumulative since exec
        t0 = now_ms()
        time.sleep(5)
        w = ctl.sampler.window(t0)
        row["controller_rss_steady_mb"] = round(statistics.median(s[2] for s in w), 1) if w else None
        row["controller_idle_cpu_percent"] = round(
            100.0 * (w[-1][1] - w[0][1]) / ((w[-1][0] - w[0][0]) / 1000.0), 2) if len(w) > 1 else None

        # Where the peak comes from: the RSS peak of each phase.
        row["controller_rss_peak_start_mb"] = ctl.sampler.peak_rss(0, now_ms())

        # ---- edits
        t_phase = now_ms()
        lat_all, lat_agent, api_ms = [], [], []
        if "edits" in phases and t_all is not None:
            c0, s0, t_e0 = ctl.sampler.last(), sim_sampler.last(), now_ms()
            for k in range(a.edits):
                prio += 1
                t_edit, t_api, g = patch_priority(api, prio)
                api_ms.append(t_api - t_edit)
                done = wait_for(lambda: all_fenced(g), a.edit_timeout, period=0.02)
                with sim.lock:
                    per = []
                    for i in range(a.agents):
                        ts = [f[0] for f in sim.fences[i] if f[3] >= g]
                        if ts:
                            per.append(min(ts) - t_edit)
                lat_agent.extend(per)
                if done is None:
                    row["notes"].append(f"edit {k + 1}: only {len(per)}/{a.agents} agents got "
                                        f"generation {g} within {a.edit_timeout}s")
                    break
                lat_all.append(done - t_edit)
                gen = g
                time.sleep(a.edit_gap_s)
            row["edits"] = len(lat_all)
            # CPU per edit above the idle rate: the controller's share of an edit's work (in a
            # real cluster the agents' share runs on their own nodes; here on the same 2 cores).
            time.sleep(0.6)
            c1, s1, t_e1 = ctl.sampler.last(), sim_sampler.last(), now_ms()
            idle = (row.get("controller_idle_cpu_percent") or 0) / 100.0
            if lat_all and c0 and c1 and s0 and s1:
                busy = (c1[1] - c0[1]) - idle * (t_e1 - t_e0) / 1000.0
                row["edit_controller_cpu_ms_per_edit"] = round(1000.0 * busy / len(lat_all), 1)
                row["edit_sim_cpu_ms_per_edit"] = round(1000.0 * (s1[1] - s0[1]) / len(lat_all), 1)
        row["edit_ack_p50_ms"] = round(pct(lat_all, 0.5), 1) if lat_all else None
        row["edit_ack_p99_ms"] = round(pct(lat_all, 0.99), 1) if lat_all else None
        row["edit_ack_max_ms"] = round(max(lat_all), 1) if lat_all else None
        row["edit_per_agent_p50_ms"] = round(pct(lat_agent, 0.5), 1) if lat_agent else None
        row["edit_per_agent_p99_ms"] = round(pct(lat_agent, 0.99), 1) if lat_agent else None
        row["edit_api_patch_p50_ms"] = round(pct(api_ms, 0.5), 1) if api_ms else None
        log(f"edits: all-agents p50 {row['edit_ack_p50_ms']} p99 {row['edit_ack_p99_ms']} "
            f"max {row['edit_ack_max_ms']} ms over {len(lat_all)}")

        row["controller_rss_peak_edits_mb"] = ctl.sampler.peak_rss(t_phase, now_ms())

        # ---- NACK (on request): agents 0..K-1 NACK the next fence; then an edit still reaches all
        if "nack" in phases and t_all is not None:
            k = max(1, a.agents // 5)
            t_n = now_ms()
            sim.send(f"nack {k}")
            sim.wait_misc("nack_armed", after=t_n - 1)
            prio += 1
            t_edit, _t_api, g = patch_priority(api, prio)

            def nacked():
                with sim.lock:
                    got = {e["a"] for e in sim.nacks if e["t"] >= t_edit and e["g"] >= g}
                return len(got) >= k or None
            row["nack_agents"] = k
            row["nack_seen"] = bool(wait_for(nacked, a.edit_timeout))
            prio += 1
            t_edit, _t_api, g = patch_priority(api, prio)
            done = wait_for(lambda: all_fenced(g), a.edit_timeout)
            row["nack_then_edit_all_acked_s"] = round((done - t_edit) / 1000.0, 2) if done else None
            gen = g

        # ---- observation: what the controller made of the agents' observations (the
        # StarvationReport it wrote, waited for up to one --observe-interval-ms and a bit)
        if a.trainer_gpus > 0 and a.observe_starving_percent >= 0 and t_all is not None:
            row["observe_report"] = read_starvation_report(kubeconfig, a.observe_wait_s)

        # ---- relist forced by compaction
        row["relist_to_all_fenced_s"] = None
        if "relist" in phases and t_all is not None:
            # A probe pod the controller can learn of only through the relist: created, fenced
            # and deleted through the API server (its etcd value kept), then written back into
            # etcd while the API server is down, so no watch ever carries it. The relist's
            # window ends when the probe's node receives a fence holding it.
            probe_node = a.agents - 1
            t_r = now_ms()
            probe = f"zz-relist-probe-{int(t_r)}"
            pod, status = loader.pod_bodies("scale", loader.node_name(probe_node), probe, False)
            base_count = expected[probe_node][1]
            loader.ensure(api, "POST", "/api/v1/namespaces/scale/pods", pod, ok=(201,))
            code, resp = api.request("PATCH", f"/api/v1/namespaces/scale/pods/{probe}/status",
                                     status, content_type="application/merge-patch+json")
            if code != 200:
                raise RuntimeError(f"probe pod status: HTTP {code}: {resp}")

            def probe_count_seen(count, after):
                with sim.lock:
                    for f in reversed(sim.fences[probe_node]):
                        if f[0] < after:
                            break
                        if f[5] == count:
                            return f[0]
                return None
            if wait_for(lambda: probe_count_seen(base_count + 1, t_r), a.timeout) is None:
                raise RuntimeError("relist: the probe pod never reached its agent via the watch")
            etcd_key = f"/registry/pods/scale/{probe}"
            stored = etcd_kv(env, "range", {"key": b64(etcd_key)}).get("kvs") or []
            if len(stored) != 1:
                raise RuntimeError(f"relist: etcd holds no value at {etcd_key}")
            n_drops = len(sim.drops)
            t_d = now_ms()
            code, resp = api.request("DELETE", f"/api/v1/namespaces/scale/pods/{probe}",
                                     {"gracePeriodSeconds": 0})
            if code not in (200, 202):
                raise RuntimeError(f"relist: delete probe pod: HTTP {code}: {resp}")
            if wait_for(lambda: probe_count_seen(base_count, t_d), a.timeout) is None:
                raise RuntimeError("relist: the probe pod's deletion never reached its agent")
            time.sleep(0.5)  # the delete's fence ACKed before the API server goes
            with sim.lock:  # the probe's deletion shrinks one fence on purpose
                probe_delete_drops += len(sim.drops) - n_drops

            t_r = now_ms()
            stop = sh([TESTBED, "stop-apiserver", tb], timeout=120)
            put = etcd_kv(env, "put", {"key": b64(etcd_key), "value": stored[0]["value"]})
            start = sh([TESTBED, "start-apiserver", tb], timeout=180)
            t_up = now_ms()
            c1 = sh([TESTBED, "compact", tb])
            api = loader.Api(loader.read_env(tb))  # the restarted API server
            code, _ = api.request("POST", "/api/v1/namespaces/scale/configmaps",
                                   {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": f"churn-{int(t_r)}"},
                                    "data": {"a": "1"}})  # moves the revision on
            c2 = sh([TESTBED, "compact", tb])
            if stop.returncode or start.returncode or c1.returncode or c2.returncode or \
                    "header" not in put:
                row["notes"].append(f"relist: restart/compact failed: {stop.stderr[-300:]} "
                                    f"{start.stderr[-300:]} {c1.stderr[-300:]} "
                                    f"{c2.stderr[-300:]} {put}")
            row["relist_apiserver_restart_s"] = round((t_up - t_r) / 1000.0, 2)
            expected[probe_node] = [expected[probe_node][0], base_count + 1]
            probe_pods.append(probe)

            def relist_start():
                # The pods reflector's relist from scratch ("… compacted, listing from scratch"),
                # else its last "watch expired … relisting" line after t_r (spdlog's timestamps,
                # local time).
                found = {}
                for m in re.finditer(r"^\[([0-9-]+ [0-9:.]+)\] \[\w+\] reflector pods: "
                                     r"(watch expired|resourceVersion \S+ compacted)",
                                     ctl.log_text(), re.M):
                    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
                    ms = t.timestamp() * 1000.0
                    if ms >= t_r:
                        found["scratch" if "compacted" in m.group(2) else "expired"] = ms
                return found or None
            wait_for(relist_start, 60)
            time.sleep(2)  # a "listing from scratch" may follow the first "relisting"
            found = relist_start() or {}
            t_rel = found.get("scratch", found.get("expired"))
            row["relist_observed"] = t_rel is not None
            row["relist_from_scratch"] = "scratch" in found

            t_probe = wait_for(lambda: probe_count_seen(base_count + 1, t_r), a.timeout)
            if t_rel is not None:
                # And the controller's CPU back at its steady level (reports and status keep it
                # busy at rest): the first 2 s below 1.3 × steady + 5 % of a core.
                idle = (row.get("controller_idle_cpu_percent") or 0.0) / 100.0
                thr = idle * 1.3 + 0.05
                row["relist_quiet_threshold_cores"] = round(thr, 3)
                quiet = wait_for(lambda: ctl.sampler.quiet_since(t_rel, 2000, thr), a.timeout)
                still = all_fenced(gen)
                if quiet is not None:
                    row["relist_cpu_quiet_s"] = round((quiet - 2000 - t_rel) / 1000.0, 2)
                    row["relist_cpu_s"] = ctl.sampler.cpu_between(t_rel - 200, quiet)
                if t_probe is not None:
                    row["relist_probe_seen_s"] = round((t_probe - t_rel) / 1000.0, 2)
                if quiet is not None and t_probe is not None and still:
                    t_end = max(t_probe, quiet - 2000)
                    row["relist_to_all_fenced_s"] = round((t_end - t_rel) / 1000.0, 2)
                    # CPU over the whole window, and above the steady rate (reports, status).
                    cpu = ctl.sampler.cpu_between(t_rel - 200, t_end + 200)
                    if cpu is not None:
                        row["relist_cpu_s"] = round(cpu, 2)
                        row["relist_cpu_above_steady_s"] = round(
                            cpu - idle * (t_end - t_rel + 400) / 1000.0, 2)
                if not still:
                    row["notes"].append("relist: not every agent held its full fence afterwards")
                if t_probe is None:
                    row["notes"].append("relist: the probe pod never reached its agent")
            row["controller_rss_peak_relist_mb"] = ctl.sampler.peak_rss(t_r)
            # And a change after the relist reaches every agent.
            prio += 1
            t_edit, _t_api, g = patch_priority(api, prio)
            done_edit = wait_for(lambda: all_fenced(g), a.timeout)
            row["relist_then_edit_all_acked_s"] = round((done_edit - t_edit) / 1000.0, 2) \
                if done_edit else None
            gen = g
            log(f"relist: observed={row['relist_observed']} relist→quiet "
                f"{row['relist_to_all_fenced_s']} s, cpu {row.get('relist_cpu_s')}, "
                f"edit after it {row['relist_then_edit_all_acked_s']} s")

        # ---- reconnect storm
        row["reconnect_storm_all_connected_s"] = None
        if "storm" in phases and t_all is not None:
            before, _ = mark()
            t_s = now_ms()
            c0, s0 = ctl.sampler.last(), sim_sampler.last()
            sim.send("storm")
            st = sim.wait_misc("storm", after=t_s - 1)
            t_s = st["t"] if st else t_s
            done = wait_for(lambda: all_fenced(gen, before), a.timeout)
            if done is None:
                n, _ = fenced_count(gen, before)
                row["notes"].append(f"storm: {n}/{a.agents} reconnected in {a.timeout}s")
            else:
                row["reconnect_storm_all_connected_s"] = round((done - t_s) / 1000.0, 2)
                # CPU of the storm (one connection set-up per agent): the controller's and the
                # simulator's, sampled before the storm and once everything is quiet again.
                time.sleep(1.0)
                c1, s1 = ctl.sampler.last(), sim_sampler.last()
                if c0 and c1 and s0 and s1:
                    idle = (row.get("controller_idle_cpu_percent") or 0) / 100.0
                    busy = (c1[1] - c0[1]) - idle * (c1[0] - c0[0]) / 1000.0
                    row["storm_controller_cpu_ms_per_agent"] = round(1000.0 * busy / a.agents, 3)
                    row["storm_sim_cpu_ms_per_agent"] = round(1000.0 * (s1[1] - s0[1]) / a.agents,
                                                              3)
            with sim.lock:
                row["storm_stream_errors"] = sum(
                    1 for e in sim.ends for x in e if x[0] > t_s and x[2] not in (0, 1))
            row["controller_rss_peak_storm_mb"] = ctl.sampler.peak_rss(t_s)
            log(f"storm → all connected: {row['reconnect_storm_all_connected_s']} s")

        row["controller_rss_peak_mb"] = ctl.sampler.peak_rss()
        row["controller_cpu_s"] = (ctl.sampler.last() or (0, None))[1]

        # ---- controller restart: is any fence withdrawn?
        if "restart" in phases and t_all is not None:
            streams, ndrops = mark()
            ctl.stop(signal.SIGTERM)
            # Same gRPC port: the agents keep dialling it with their backoff.
            ctl = Controller(ctl_bin, kubeconfig, ctl_log, port, name="ctl2")
            ctl.wait_port()
            judge_handover("restart", streams, ndrops, ctl.start_ms)
            log(f"restart: {row['restart_agents_with_withdrawn_fence']} agents got a fence "
                f"with fewer pods; all fenced again after {row['restart_to_all_fenced_s']} s")

        # ---- leader failover: a standby replica, the leader SIGKILLed (issue 14 item 1)
        if "failover" in phases and t_all is not None:
            # Two replicas with leader election: the current controller hands over (SIGTERM) to
            # a leader, a standby starts beside it, then the leader is killed.
            streams0, _ = mark()
            ctl.stop(signal.SIGTERM)
            ctl = Controller(ctl_bin, kubeconfig, os.path.join(a.work, "controller-leader.log"),
                             port, name="leader", leader_elect=True)
            ctl.wait_port()
            if not wait_for(lambda: all_fenced(0, streams0), a.timeout):
                row["notes"].append("failover: the leader did not fence every agent")
            standby_log = os.path.join(a.work, "controller-standby.log")
            standby = Controller(ctl_bin, kubeconfig, standby_log, port, name="standby",
                                 leader_elect=True)
            # The standby lists and watches like the leader (its informers run before it leads),
            # as a standby that has been up for a while has: the kill waits for every informer's
            # initial list, the pods' (the longest) included. Until 2026-11-29 this counted 4
            # "initial list delivered" lines, which the DRA claims' informer (a fifth) let through
            # before the pods' list had ended: every failover measured since included the rest of
            # the standby's pod list (6.4 s at 2,000 realistic nodes).
            def standby_synced():
                text = standby.log_text()
                done = set(re.findall(r"informer (\w+): initial list delivered", text))
                need = {"fencepolicies", "pods", "nodes", "namespaces"}
                if "reflector resourceclaims" in text:
                    need.add("resourceclaims")
                return need <= done or None
            if not wait_for(standby_synced, a.timeout):
                row["notes"].append("failover: standby never delivered its initial lists")
            streams, ndrops = mark()
            t_k = now_ms()
            ctl.stop(signal.SIGKILL)
            ctl = standby
            try:
                ctl.wait_port(timeout=90)  # the Lease must expire first (15 s)
                row["failover_leading_after_s"] = round((now_ms() - t_k) / 1000.0, 2)
            except RuntimeError as e:
                row["notes"].append(f"failover: {e}"[:300])
            judge_handover("failover", streams, ndrops, t_k)
            # An armed standby (--standby-arm-after-ms) holds the agents' streams before it leads.
            text = standby.log_text()
            m = re.search(r"\[(\S+ \S+)\] \[info\] standby: the leader has not renewed", text)
            if m:
                t_arm = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(
                    tzinfo=datetime.timezone.utc).timestamp() * 1000.0
                row["failover_armed_after_s"] = round((t_arm - t_k) / 1000.0, 2)
            m = re.search(r"leading: (\d+) agents' streams already held", text)
            row["failover_streams_held_at_leading"] = int(m.group(1)) if m else 0
            log(f"failover (SIGKILL, standby takes the Lease): "
                f"{row['failover_agents_with_withdrawn_fence']} agents got a fence with fewer "
                f"pods; all fenced again {row['failover_to_all_fenced_s']} s after the kill")

        # Counted before the probe pods are deleted: their removal from the probe node's fence
        # is a real change, not a withdrawn fence.
        with sim.lock:
            row["drops_total"] = len(sim.drops) - probe_delete_drops
        row["drops_probe_deletes"] = probe_delete_drops
        for name in probe_pods:  # the next step expects exactly the loaded pods
            code, resp = api.request("DELETE", f"/api/v1/namespaces/scale/pods/{name}",
                                     {"gracePeriodSeconds": 0})
            if code not in (200, 202, 404):
                row["notes"].append(f"could not delete probe pod {name}: HTTP {code}")
        row["sim_cpu_s"] = (sim_sampler.last() or (0, None))[1]
        row["sim_rss_mb"] = sim_sampler.peak_rss()
        sim_sampler.stop()
    finally:
        if sim is not None:
            sim.close()
        if ctl is not None:
            ctl.stop()
        if tb_up and not a.keep and not a.testbed:
            sh([TESTBED, "down", tb], timeout=120)
    for k, v in list(row.items()):
        if isinstance(v, float):
            row[k] = round(v, 3)
    row["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(a.rows, "a") as f:
        f.write(json.dumps(row) + "\n")
    log(f"row: {json.dumps(row)}")
    return 0


def main():
    # SIGTERM (a CTest timeout, Ctrl-C of a wrapper) ends the step through its `finally`: the
    # controller, the simulator and the step's own API server are stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("--build", required=True)
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--pods", type=int, required=True)
    s.add_argument("--agents", type=int, required=True)
    s.add_argument("--work", required=True)
    s.add_argument("--rows", required=True)
    s.add_argument("--controller")
    s.add_argument("--sim")
    s.add_argument("--threads", type=int, default=8)
    s.add_argument("--trainers-per-node", type=int, default=1)
    s.add_argument("--edits", type=int, default=10)
    s.add_argument("--edit-gap-s", type=float, default=1.0)
    s.add_argument("--edit-timeout", type=float, default=60)
    s.add_argument("--timeout", type=float, default=None)
    s.add_argument("--settle-s", type=float, default=5)
    s.add_argument("--report-interval-ms", type=int, default=30000)
    s.add_argument("--pod-shape", choices=["realistic", "lean"], default="realistic",
                   help="realistic: copies of the real cluster's pods (shapes/pods.json); lean: "
                        "one container, 1-2 labels (the ladders before 2026-11-29)")
    s.add_argument("--trainer-gpus", type=int, default=1,
                   help="nvidia.com/gpu per trainer pod (0: none: nothing observed)")
    s.add_argument("--observe-starving-percent", type=int, default=20,
                   help="of the observed GPU pods, how many the simulated agents report starving "
                        "(< 0: reports carry no observations)")
    s.add_argument("--observe-wait-s", type=float, default=40,
                   help="how long to wait for the StarvationReport after the edits")
    s.add_argument("--controller-args", default="",
                   help="extra controller flags, e.g. --max-observed-pods=0 (in the row)")
    s.add_argument("--sim-args", default="",
                   help="extra fg-agent-sim flags, e.g. '--tls-session-cache 1' (in the row)")
    s.add_argument("--phases", default="edits,relist,storm,restart,failover")
    s.add_argument("--tls", action="store_true",
                   help="mTLS between controller and agents (as installs run it) instead of "
                        "--insecure; the row says so (transport)")
    s.add_argument("--identity", choices=["token", "shared-cert"], default="token",
                   help="with --tls: the agents' identity — token (the chart's default: a "
                        "pod-bound ServiceAccount token per node, checked by TokenReview) or "
                        "shared-cert (the certificate alone; the ladders before 2026-11-29)")
    s.add_argument("--tls-key", choices=sorted(TLS_KEYS), default="ec",
                   help="with --tls: the key of every certificate — ec (ECDSA P-256, what the "
                        "chart issues) or rsa (RSA 2048); the row says so (tls_key)")
    s.add_argument("--keep", action="store_true")
    s.add_argument("--testbed", help="reuse (or create) this API server dir; left running")
    r = sub.add_parser("report")
    r.add_argument("--rows", required=True, action="append",
                   help="rows file (JSON lines); repeat to report several ladders, one arm each")
    r.add_argument("--out-json", required=True)
    r.add_argument("--out-md", required=True)
    r.add_argument("--out-png")
    r.add_argument("--command", default="")
    r.add_argument("--notes", help="notes to embed (default: bench/scale/NOTES.md)")
    a = ap.parse_args()
    if a.cmd == "step":
        a.controller = a.controller or os.path.join(a.build, "controller", "feedguard-controller")
        a.sim = a.sim or os.path.join(a.build, "bench", "scale", "fg-agent-sim")
        if a.timeout is None:
            a.timeout = 120 + a.pods / 200.0
        if a.agents > a.nodes:
            ap.error("--agents must be ≤ --nodes (one agent per node)")
        return run_step(a)
    import report
    return report.main(a)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""tls_memory.py — the controller's RSS per idle connected agent, plaintext vs mTLS (issue 31).

  tls_memory.py run --build BUILD --work DIR --rows ROWS.jsonl [--testbed DIR]
                    [--nodes 500] [--pods 15000] [--agents 100,250,500] [--rounds 3]
                    [--transports plaintext,mtls] [--arm NAME=BINARY[,VAR=VALUE...]] ...
                    [--edits 5] [--sites LIB]
  tls_memory.py report --rows ROWS.jsonl --out-json F --out-md F [--sites-rows ROWS.jsonl]

`run`: one private API server (tests/testbed, reused with --testbed) loaded once with NODES
Nodes and PODS running pods (bench/scale/load.py) and the FencePolicy "bench"; then, per round,
for each agent count, transport and arm (the order of arms rotates each round), the real
feedguard-controller started as bench/scale/driver.py starts it (a copy of the arm's binary,
the arm's extra environment), and once it has listed and gone quiet:
  base      controller RSS, median over 3 s, before any agent has connected
  steady    A simulated agents (fg-agent-sim; mTLS: a client certificate of the bench CA, the
            chart's shared-certificate shape) connect; once every agent holds its node's fence
            and --settle-s has passed: RSS median over 5 s
  per agent (steady - base) / A
  edits     E policy edits (spec.priority), each waited for at every agent: controller CPU per
            edit above its idle rate, the simulator's CPU per edit, edit → every agent time
  storm     (--storm) every stream cancelled at once, the agents reconnect with the real
            agent's backoff (mTLS: a handshake each): RSS peak until all are fenced again,
            controller CPU meanwhile, RSS once settled
One JSON row per run. --sites LIB: the controller runs under LD_PRELOAD=LIB
(libfg-rss-sites.so, bench/scale/rss_sites.c), which writes the live heap blocks and their
resident bytes per allocation site at `base` and at `steady` (DIR/sites-*.jsonl, named in the
row; RSS and CPU of such a run are the tool's, not the controller's).

`report`: medians and spread per (arm, transport, agents), the mTLS - plaintext difference per
agent; with --sites-rows, the per-agent difference per component from the site dumps.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import driver  # noqa: E402
import load as loader  # noqa: E402

log = driver.log


def parse_arm(spec):
    name, rest = spec.split("=", 1)
    parts = rest.split(",")
    env = dict(p.split("=", 1) for p in parts[1:])
    return {"name": name, "binary": parts[0], "env": env}


def wait_quiet(sampler, t0, timeout=60, window_ms=2000, max_cpu=0.05):
    return driver.wait_for(lambda: sampler.quiet_since(t0, window_ms=window_ms, max_cpu=max_cpu),
                           timeout, period=0.2)


def trigger_sites(path, label, timeout=60):
    with open(path, "w") as f:
        f.write(label)
    end = time.time() + timeout
    while os.path.exists(path) and time.time() < end:
        time.sleep(0.1)
    return not os.path.exists(path)


def one_run(a, arm, transport, agents, rnd, tls, api, expected, gen_prio, bins):
    row = {"arm": arm["name"], "transport": transport, "agents": agents, "round": rnd,
           "nodes": a.nodes, "pods": a.pods, "load_avg": driver.loadavg(),
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "controller_sha256": bins[arm["name"]][1], "env": arm["env"], "notes": []}
    ctl_bin = bins[arm["name"]][0]
    driver.Controller.transport_args = tls[0] if transport == "mtls" else ["--insecure"]
    driver.Sim.extra_args = tls[1] if transport == "mtls" else []
    tag = f"{arm['name']}-{transport}-{agents}-r{rnd}"
    env = dict(arm["env"])
    sites_out = trigger = None
    if a.sites:
        sites_out = os.path.join(a.work, f"sites-{tag}.jsonl")
        trigger = os.path.join(a.work, f"sites-{tag}.trigger")
        for p in (sites_out, trigger):
            if os.path.exists(p):
                os.unlink(p)
        env.update({"LD_PRELOAD": a.sites, "FG_RSS_SITES_OUT": sites_out,
                    "FG_RSS_SITES_TRIGGER": trigger})
        row["sites_file"] = sites_out
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        ctl = driver.Controller(ctl_bin, a.kubeconfig, os.path.join(a.work, f"ctl-{tag}.log"),
                                driver.free_port())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    sim = None
    try:
        port = ctl.wait_port()
        q = wait_quiet(ctl.sampler, driver.now_ms())
        if q is None:
            row["notes"].append("controller not quiet within 60 s before the agents")
        time.sleep(1.0)
        t0 = driver.now_ms()
        time.sleep(3.0)
        w = ctl.sampler.window(t0)
        row["rss_base_mb"] = round(statistics.median(s[2] for s in w), 2)
        if trigger:
            trigger_sites(trigger, "base")
        gen, prio = gen_prio
        sim = driver.Sim(bins["sim"], f"127.0.0.1:{port}", agents,
                         os.path.join(a.work, f"sim-{tag}.jsonl"), a.report_interval_ms)
        sim_sampler = driver.Sampler(sim.p.pid, period=0.5)
        t_sim = driver.now_ms()

        def fenced(min_gen):
            n, latest = 0, 0.0
            with sim.lock:
                for i in range(agents):
                    fs = sim.fences[i]
                    if not fs:
                        continue
                    t, _s, _v, g, tr, nb, _d = fs[-1]
                    if g >= min_gen and [tr, nb] == expected[i]:
                        n += 1
                        latest = max(latest, t)
            return latest if n == agents else None

        t_all = driver.wait_for(lambda: fenced(gen), a.timeout)
        if t_all is None:
            row["notes"].append(f"not all {agents} agents fenced within {a.timeout}s")
            return row, gen_prio
        row["start_to_all_fenced_s"] = round((t_all - t_sim) / 1000.0, 2)
        time.sleep(a.settle_s)
        # Controller CPU from the simulator's start until every agent is fenced and settled:
        # the connection setup (handshakes), hellos and first fences of every agent.
        row["start_controller_cpu_s"] = round(ctl.sampler.cpu_between(t_sim), 3)
        t0 = driver.now_ms()
        time.sleep(5.0)
        w = ctl.sampler.window(t0)
        row["rss_steady_mb"] = round(statistics.median(s[2] for s in w), 2)
        row["rss_per_agent_kb"] = round(
            (row["rss_steady_mb"] - row["rss_base_mb"]) * 1024.0 / agents, 2)
        idle = (w[-1][1] - w[0][1]) / ((w[-1][0] - w[0][0]) / 1000.0) if len(w) > 1 else 0.0
        row["idle_cpu_percent"] = round(100.0 * idle, 2)
        if trigger:
            trigger_sites(trigger, "steady")
        # Edits: controller CPU above idle per edit, the simulator's, edit → every agent.
        lat = []
        if a.edits:
            c0, s0, t_e0 = ctl.sampler.last(), sim_sampler.last(), driver.now_ms()
            for _ in range(a.edits):
                prio += 1
                t_edit, _t_api, g = driver.patch_priority(api, prio)
                done = driver.wait_for(lambda: fenced(g), a.edit_timeout, period=0.02)
                if done is None:
                    row["notes"].append(f"edit to generation {g} not at every agent")
                    break
                lat.append(done - t_edit)
                gen = g
                time.sleep(a.edit_gap_s)
            time.sleep(0.6)
            c1, s1, t_e1 = ctl.sampler.last(), sim_sampler.last(), driver.now_ms()
            if lat:
                busy = (c1[1] - c0[1]) - idle * (t_e1 - t_e0) / 1000.0
                row["edit_controller_cpu_ms"] = round(1000.0 * busy / len(lat), 1)
                row["edit_sim_cpu_ms"] = round(1000.0 * (s1[1] - s0[1]) / len(lat), 1)
                row["edit_all_acked_p50_ms"] = round(driver.pct(lat, 0.5), 1)
                row["edit_all_acked_max_ms"] = round(max(lat), 1)
            row["edits"] = len(lat)
            row["rss_after_edits_mb"] = ctl.sampler.last()[2]
        if a.storm:
            # Every stream cancelled at once; the agents reconnect with the real agent's backoff
            # (a new connection and, with mTLS, a new handshake each). RSS peak until every
            # agent holds its fence on a new stream, and RSS once settled again.
            with sim.lock:
                streams0 = [f[-1][1] if f else 0 for f in sim.fences]
            t_s = driver.now_ms()
            sim.send("storm")

            def reconnected():
                with sim.lock:
                    for i in range(agents):
                        fs = sim.fences[i]
                        if not fs or fs[-1][1] <= streams0[i] or [fs[-1][4], fs[-1][5]] != \
                                expected[i]:
                            return None
                return driver.now_ms()

            done = driver.wait_for(reconnected, a.timeout, period=0.05)
            if done is None:
                row["notes"].append("storm: not every agent fenced again")
            else:
                row["storm_to_all_fenced_s"] = round((done - t_s) / 1000.0, 2)
                row["storm_controller_cpu_s"] = round(ctl.sampler.cpu_between(t_s, done), 3)
            time.sleep(a.settle_s)
            row["rss_peak_storm_mb"] = ctl.sampler.peak_rss(t_s)
            t0 = driver.now_ms()
            time.sleep(3.0)
            w = ctl.sampler.window(t0)
            row["rss_after_storm_mb"] = round(statistics.median(s[2] for s in w), 2)
        sim_sampler.stop()
        return row, (gen, prio)
    finally:
        if sim:
            sim.close()
        ctl.stop()


def cmd_run(a):
    os.makedirs(a.work, exist_ok=True)
    arms = [parse_arm(s) for s in a.arm] or [
        {"name": "head", "binary": os.path.join(a.build, "controller", "feedguard-controller"),
         "env": {}}]
    bins = {}
    for arm in arms:  # stable copies: others may rebuild the tree meanwhile
        dst = os.path.join(a.work, f"feedguard-controller-{arm['name']}")
        shutil.copy2(arm["binary"], dst)
        with open(dst, "rb") as f:
            import hashlib
            bins[arm["name"]] = (dst, hashlib.sha256(f.read()).hexdigest()[:16])
    sim_bin = os.path.join(a.work, "fg-agent-sim")
    shutil.copy2(a.sim or os.path.join(a.build, "bench", "scale", "fg-agent-sim"), sim_bin)
    bins["sim"] = sim_bin
    tls = driver.make_tls(a.work)
    tb = a.testbed or os.path.join(a.work, "tb")
    if not (os.path.exists(os.path.join(tb, "env")) and
            driver.sh([driver.TESTBED, "status", tb]).returncode == 0):
        r = driver.sh([driver.TESTBED, "up", tb], timeout=180)
        if r.returncode != 0:
            raise RuntimeError(f"testbed up failed: {r.stderr[-800:]}")
    a.kubeconfig = os.path.join(tb, "kubeconfig")
    r = driver.sh(["kubectl", "--kubeconfig", a.kubeconfig, "apply", "-f", driver.CRD])
    r2 = driver.sh(["kubectl", "--kubeconfig", a.kubeconfig, "wait",
                    "--for=condition=Established", "--timeout=60s",
                    "crd/fencepolicies.feedguard.io"])
    if r.returncode or r2.returncode:
        raise RuntimeError(f"CRD: {r.stderr} {r2.stderr}")
    loaded_file = os.path.join(tb, "fg-scale-loaded.json")
    loaded = {"nodes": 0, "pods": 0}
    if os.path.exists(loaded_file):
        with open(loaded_file) as f:
            loaded = json.load(f)
    if loaded["nodes"] != a.nodes or loaded["pods"] != a.pods:
        if loaded["nodes"]:
            raise RuntimeError(f"{tb} holds {loaded}, not {a.nodes}/{a.pods}")
        ld = loader.load(tb, a.nodes, a.pods, 1, a.threads)
        if ld["errors"]:
            raise RuntimeError(f"loader: {ld['errors']} errors")
        with open(loaded_file, "w") as f:
            json.dump({"nodes": a.nodes, "pods": a.pods}, f)
    ppn = a.pods // a.nodes
    expected = [[1, ppn - 1] for _ in range(a.nodes)]
    env = loader.read_env(tb)
    api = loader.Api(env)
    code, resp = api.request("POST", driver.POLICY_PATH, driver.policy_body(0))
    if code == 409:
        code, resp = api.request("GET", f"{driver.POLICY_PATH}/bench")
    if code not in (200, 201):
        raise RuntimeError(f"policy: HTTP {code}: {resp}")
    gen_prio = (resp["metadata"]["generation"], resp["spec"].get("priority", 0))
    agents_list = [int(x) for x in a.agents.split(",")]
    transports = a.transports.split(",")
    for rnd in range(a.rounds):
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
        for agents in agents_list:
            for transport in transports:
                for arm in order:
                    log(f"round {rnd} {arm['name']} {transport} {agents} agents")
                    row, gen_prio = one_run(a, arm, transport, agents, rnd, tls, api,
                                            expected, gen_prio, bins)
                    log(json.dumps({k: row.get(k) for k in (
                        "rss_base_mb", "rss_steady_mb", "rss_per_agent_kb",
                        "edit_controller_cpu_ms", "edit_all_acked_p50_ms", "notes")}))
                    with open(a.rows, "a") as f:
                        f.write(json.dumps(row) + "\n")


# ---- report -------------------------------------------------------------------------------
def med_spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": round(statistics.median(xs), 2), "min": round(min(xs), 2),
            "max": round(max(xs), 2), "n": len(xs)}


# Components of the per-connection memory, by allocation site (rss_sites.c). OpenSSL's sites are
# its own file:line; grpc's are told by the exported symbols of their backtraces (libgrpc.so.29
# has no symbols for its static functions: the TSI frame protector's buffer, allocated by one,
# is told by its size, GRPC_ARG_TSI_MAX_FRAME_SIZE - 100 bytes of protection overhead).
FRAME_PROTECTOR_SIZES = {f - 100 for f in (1024, 2048, 4096, 8192, 16384)}


def component(site):
    f = site.get("openssl")
    if f:
        if "bss_bio.c" in f:
            return "OpenSSL BIO pair buffers (2 x 17 KiB)"
        if "ssl3_buffer.c" in f:
            return "OpenSSL record buffers (read + write)"
        if "ssl/ssl_lib.c" in f:
            return "OpenSSL SSL object"
        return "OpenSSL other: peer certificate, keys, cipher state, session"
    frames = [f for f in site.get("frames", []) if not f.startswith("libfg-rss-sites")]
    text = " ".join(frames)
    if "grpc_secure_endpoint_create" in text and "MakeSlice" in text:
        return "grpc secure endpoint staging buffers (2 x 8 KiB)"
    if "grpc_secure_endpoint_create" in text:
        return "grpc secure endpoint"
    if frames and "gpr_malloc" in frames[0] and site["count"] and \
            site["bytes"] // site["count"] in FRAME_PROTECTOR_SIZES and \
            site["bytes"] % site["count"] == 0:
        return "grpc TSI frame protector buffer"
    if "auth_context" in text or "tsi_" in text or "Security" in text:
        return "grpc TLS: auth context, TSI, security handshake"
    if "Arena" in text:
        return "grpc call arena"
    if "chttp2" in text:
        return "grpc HTTP/2 transport"
    if "grpc_tcp" in text or "PosixTcp" in text:
        return "grpc TCP endpoint"
    if "grpc" in text:
        return "grpc other (channel, server call, metadata)"
    return "other (feedguard, libstdc++)"


def sites_delta(path):
    """Per-site (steady - base) of one run's dump file, keyed by site id."""
    dumps = {}
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            dumps[d["label"]] = d
    if "base" not in dumps or "steady" not in dumps:
        return None
    base = {s["site"]: s for s in dumps["base"]["by_site"]}
    out = []
    for s in dumps["steady"]["by_site"]:
        b = base.get(s["site"], {"count": 0, "bytes": 0, "resident": 0})
        out.append(dict(s, d_count=s["count"] - b["count"], d_bytes=s["bytes"] - b["bytes"],
                        d_resident=s["resident"] - b["resident"]))
    return dumps, out


def cmd_report(a):
    rows = [json.loads(line) for line in open(a.rows) if line.strip()]
    groups = {}
    for r in rows:
        if r.get("rss_per_agent_kb") is None:
            continue
        groups.setdefault((r["arm"], r["transport"], r["agents"]), []).append(r)
    summary = []
    for (arm, tr, n), rs in sorted(groups.items()):
        summary.append({
            "arm": arm, "transport": tr, "agents": n,
            "rss_per_agent_kb": med_spread([r["rss_per_agent_kb"] for r in rs]),
            "rss_base_mb": med_spread([r["rss_base_mb"] for r in rs]),
            "rss_steady_mb": med_spread([r["rss_steady_mb"] for r in rs]),
            "edit_controller_cpu_ms": med_spread([r.get("edit_controller_cpu_ms") for r in rs]),
            "edit_sim_cpu_ms": med_spread([r.get("edit_sim_cpu_ms") for r in rs]),
            "edit_all_acked_p50_ms": med_spread([r.get("edit_all_acked_p50_ms") for r in rs]),
            "start_controller_cpu_s": med_spread([r.get("start_controller_cpu_s") for r in rs]),
            "storm_to_all_fenced_s": med_spread([r.get("storm_to_all_fenced_s") for r in rs]),
            "storm_controller_cpu_s": med_spread([r.get("storm_controller_cpu_s") for r in rs]),
            "rss_peak_storm_mb": med_spread([r.get("rss_peak_storm_mb") for r in rs]),
            "rss_after_storm_mb": med_spread([r.get("rss_after_storm_mb") for r in rs]),
            "load_avg_1m": med_spread([r["load_avg"][0] for r in rs]),
            "controller_sha256": sorted({r["controller_sha256"] for r in rs}),
        })
    out = {"rows": rows, "summary": summary}
    if a.sites_rows:
        srows = [json.loads(line) for line in open(a.sites_rows) if line.strip()]
        comp = {}
        for r in srows:
            if not r.get("sites_file") or not os.path.exists(r["sites_file"]):
                continue
            got = sites_delta(r["sites_file"])
            if not got:
                continue
            dumps, delta = got
            key = (r["arm"], r["transport"], r["agents"])
            c = comp.setdefault(key, {})
            for s in delta:
                name = component(s)
                e = c.setdefault(name, [0, 0, 0])
                e[0] += s["d_bytes"] / r["agents"]
                e[1] += s["d_resident"] / r["agents"]
                e[2] += 1
            tot = c.setdefault("total (all live heap blocks)", [0, 0, 0])
            tot[0] += (dumps["steady"]["heap_bytes"] - dumps["base"]["heap_bytes"]) / r["agents"]
            tot[1] += (dumps["steady"]["heap_resident_bytes"] -
                       dumps["base"]["heap_resident_bytes"]) / r["agents"]
        out["sites"] = [{"arm": k[0], "transport": k[1], "agents": k[2],
                         "per_agent": {n: {"heap_bytes": round(v[0]), "resident_bytes": round(v[1])}
                                       for n, v in sorted(c.items(), key=lambda x: -x[1][1])}}
                        for k, c in sorted(comp.items())]
    with open(a.out_json, "w") as f:
        json.dump(out, f, indent=1)
    lines = ["| arm | transport | agents | RSS per agent KB: median (min–max, n) | "
             "edit CPU ms (controller) | edit → all p50 ms |", "|---|---|---|---|---|---|"]
    for s in summary:
        m = s["rss_per_agent_kb"]
        e = s["edit_controller_cpu_ms"]
        p = s["edit_all_acked_p50_ms"]
        lines.append(f"| {s['arm']} | {s['transport']} | {s['agents']} | {m['median']} "
                     f"({m['min']}–{m['max']}, {m['n']}) | "
                     f"{e['median'] if e else '—'} ({e['min'] if e else ''}–{e['max'] if e else ''}) | "
                     f"{p['median'] if p else '—'} |")
    def cell(m):
        return f"{m['median']} ({m['min']}–{m['max']})" if m else "—"

    if any(s["rss_peak_storm_mb"] or s["start_controller_cpu_s"] for s in summary):
        lines += ["", "| arm | transport | agents | start: controller CPU-s until all fenced | "
                  "storm → all fenced s | storm: controller CPU-s | RSS peak in storm MB | "
                  "RSS after storm MB |", "|---|---|---|---|---|---|---|---|"]
        for s in summary:
            lines.append(f"| {s['arm']} | {s['transport']} | {s['agents']} | "
                         f"{cell(s['start_controller_cpu_s'])} | "
                         f"{cell(s['storm_to_all_fenced_s'])} | "
                         f"{cell(s['storm_controller_cpu_s'])} | {cell(s['rss_peak_storm_mb'])} | "
                         f"{cell(s['rss_after_storm_mb'])} |")
    for c in out.get("sites", []):
        lines += ["", f"Per agent by component, {c['arm']} {c['transport']} {c['agents']} agents "
                  "(live heap blocks, steady - base, divided by agents; rss_sites.c):", "",
                  "| component | heap bytes | resident bytes |", "|---|---|---|"]
        for name, v in c["per_agent"].items():
            lines.append(f"| {name} | {v['heap_bytes']} | {v['resident_bytes']} |")
    with open(a.out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--rows", required=True)
    r.add_argument("--testbed")
    r.add_argument("--nodes", type=int, default=500)
    r.add_argument("--pods", type=int, default=15000)
    r.add_argument("--agents", default="100,250,500")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--transports", default="plaintext,mtls")
    r.add_argument("--arm", action="append", default=[])
    r.add_argument("--sim")
    r.add_argument("--edits", type=int, default=5)
    r.add_argument("--edit-gap-s", type=float, default=1.0)
    r.add_argument("--edit-timeout", type=float, default=60)
    r.add_argument("--settle-s", type=float, default=5)
    r.add_argument("--timeout", type=float, default=120)
    r.add_argument("--report-interval-ms", type=int, default=30000)
    r.add_argument("--threads", type=int, default=4)
    r.add_argument("--storm", action="store_true",
                   help="after the edits: every stream cancelled at once (RSS peak, CPU)")
    r.add_argument("--sites", help="LD_PRELOAD this libfg-rss-sites.so into the controller")
    p = sub.add_parser("report")
    p.add_argument("--rows", required=True)
    p.add_argument("--sites-rows")
    p.add_argument("--out-json", required=True)
    p.add_argument("--out-md", required=True)
    a = ap.parse_args()
    if a.cmd == "run":
        if max(int(x) for x in a.agents.split(",")) > a.nodes:
            ap.error("more agents than nodes")
        cmd_run(a)
    else:
        cmd_report(a)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""report.py RAW_JSON OUT_DIR [--note TEXT] [--command TEXT]

Turns the per-round numbers examples/demo/run.sh --results wrote (the demo's three phases on the
real one-node cluster of tests/node/cluster.sh, repeated and interleaved) into
OUT_DIR/real-node.json, real-node.md and real-node.png.

Ratios are paired: each round's phase throughput over the same round's isolated throughput, then
the median over the rounds (the phases of one round run back to back, so slow drift of the
machine's other load cancels). Spread: min..max over the rounds.
"""
import argparse
import json
import os
import statistics
import sys

PHASES = ("isolated", "cfs", "fenced")
LABELS = {"isolated": "isolated (no neighbours)", "cfs": "neighbours + plain CFS",
          "fenced": "neighbours + feedguard (Idle fence)"}


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4), "values": [round(v, 4) for v in values]}


def build(raw, note, command):
    rounds = raw["rounds"]
    phases = {}
    for p in PHASES:
        sps = [r["phases"][p]["samples_per_s"] for r in rounds]
        ratio = [r["phases"][p]["samples_per_s"] / r["phases"]["isolated"]["samples_per_s"] for r in rounds]
        phases[p] = {
            "label": LABELS[p],
            "samples_per_s": summary(sps),
            "ratio_to_isolated": summary(ratio),
            "accelerator_busy": summary([r["phases"][p]["accelerator_busy"] for r in rounds]),
            "trainer_cores": summary([r["phases"][p]["trainer_cores"] for r in rounds]),
            "neighbour_cores": summary([r["phases"][p]["neighbour_cores"] for r in rounds]),
            "loadavg_1m_at_start": [r["phases"][p]["loadavg_1m_at_start"] for r in rounds],
        }
    fence = summary([r.get("fence_latency_from_create_request_ms") for r in rounds])
    fence_from_start = summary([r["fence_latency_ms"] for r in rounds])
    fence_after_return = summary([r["fence_latency_after_apply_returned_ms"] for r in rounds])
    before = [r["agent_overwrites_total_before"] for r in rounds]
    after = [r["agent_overwrites_total_after"] for r in rounds]
    deltas = [a - b for a, b in zip(after, before) if a is not None and b is not None]
    loads = [x for p in PHASES for x in phases[p]["loadavg_1m_at_start"]]
    out = {
        "what": "feedguard's demo on a real one-node cluster (tests/node/cluster.sh: kubelet, containerd, "
                "runc), the chart installed with helm; a trainer pod measured alone, among batch neighbour "
                "pods under plain CFS, and with examples/demo/policy.yaml applied (kubectl apply)",
        "date": raw["date"],
        "command": command,
        "note": note,
        "cfs_ratio": phases["cfs"]["ratio_to_isolated"]["median"],
        "fenced_ratio": phases["fenced"]["ratio_to_isolated"]["median"],
        "kubelet_version": raw["versions"]["kubelet"],
        "containerd_version": raw["versions"]["containerd"],
        "runc_version": raw["versions"]["runc"],
        "container_runtime_cri": raw["versions"]["container_runtime_cri"],
        "kubelet_binary_version": raw["versions"]["kubelet_binary"],
        "fence_latency_ms": fence["median"] if fence else None,
        "fence_latency_definition": "kubectl apply -f examples/demo/policy.yaml creates the policy; from the moment "
                                    "kubectl sent that create request (its -v=6 log: response time stamp minus the "
                                    "request's duration) until cpu.idle reads 1 in every neighbour's kubelet-made pod "
                                    "cgroup (polled every 20 ms on the node); median over the rounds",
        "fence_latency_ms_spread": fence,
        "fence_latency_from_kubectl_apply_start_ms": fence_from_start,
        "fence_latency_after_apply_returned_ms": fence_after_return,
        "overwrites": {
            "source": "the agent pod's /metrics feedguard_overwrites_total (cgroup values the agent wrote "
                      "that someone else rewrote; on this node only kubelet and runc write pod cgroups "
                      "besides the agent), read before each kubectl apply and after each fenced phase",
            "agent_overwrites_total_before_fence": before,
            "agent_overwrites_total_after_fenced_phase": after,
            "during_fenced_phases": sum(deltas) if deltas else None,
            "fence_held_through_every_fenced_phase": all(r.get("fence_held_through_phase") is True for r in rounds),
        },
        "revert": {
            "byte_exact_every_round": all(r.get("reverted_byte_exact") is True for r in rounds),
            "revert_ms": summary([r.get("revert_ms") for r in rounds]),
            "policy_delete_returned_ms": summary([r.get("policy_delete_returned_ms") for r in rounds]),
        },
        "phases": phases,
        "rounds": len(rounds),
        "machine": dict(raw["machine"], loadavg_1m_at_phase_starts=summary(loads)),
        "setup": raw["setup"],
        "raw_rounds": rounds,
    }
    return out


def markdown(res):
    m = res["machine"]
    s = res["setup"]
    lines = [
        "# feedguard on a real node: trainer throughput among batch neighbours",
        "",
        f"{res['date']} · `{res['command']}`",
        "",
    ]
    if res["note"]:
        lines += [f"**Note:** {res['note']}", ""]
    lines += [
        f"One-node cluster of `tests/node/cluster.sh`: kubelet {res['kubelet_version']}, "
        f"{res['container_runtime_cri']} (containerd {res['containerd_version']}), runc {res['runc_version']}; "
        f"{m['cores']} CPUs ({m['cpu_model']}), kernel {m['kernel']}, cgroup {m['cgroup']}. "
        f"The chart installed with `helm install` (controller 2 replicas + agent DaemonSet, images built "
        f"from the release binaries). A trainer Job pod (`fg-wedge-trainer {s['trainer_args']}`, Burstable "
        f"{s['trainer_request_m']}m, its accelerator step a sleep) among {s['neighbours']} neighbour pods "
        f"(Deployment of `fg-wedge-spinner`, one busy thread each, Burstable {s['neighbour_request_m']}m); "
        f"{s['warmup_s']} s warm-up + {s['duration_s']} s measured per phase, {res['rounds']} rounds, the "
        f"three phases interleaved in each round; the fence is `examples/demo/policy.yaml` (`fence: Idle`). "
        f"Medians over the rounds, spread min–max; ratios paired within a round.",
        "",
        "| phase | samples/s | ratio to isolated | accelerator busy | trainer CPU | neighbours CPU |",
        "|---|---|---|---|---|---|",
    ]
    for p in PHASES:
        ph = res["phases"][p]
        sp, ra = ph["samples_per_s"], ph["ratio_to_isolated"]
        lines.append(
            f"| {ph['label']} | {sp['median']:.0f} ({sp['min']:.0f}–{sp['max']:.0f}) | "
            f"{ra['median']:.2f} ({ra['min']:.2f}–{ra['max']:.2f}) | {100 * ph['accelerator_busy']['median']:.0f}% | "
            f"{ph['trainer_cores']['median']:.2f} cores | {ph['neighbour_cores']['median']:.2f} cores |")
    f = res["fence_latency_ms_spread"]
    fs = res["fence_latency_from_kubectl_apply_start_ms"]
    fr = res["fence_latency_after_apply_returned_ms"]
    ow = res["overwrites"]
    rv = res["revert"]
    lines += [
        "",
        f"- **cfs_ratio {res['cfs_ratio']:.2f}, fenced_ratio {res['fenced_ratio']:.2f}** (trainer samples/s over "
        f"isolated).",
        f"- **Fence latency** after `kubectl apply`, until `cpu.idle` reads 1 in every neighbour's kubelet-made pod "
        f"cgroup (polled every 20 ms on the node): median **{f['median']:.0f} ms** ({f['min']:.0f}–{f['max']:.0f}; "
        f"rounds: {', '.join(str(int(v)) for v in f['values'])}) from the moment kubectl sent the request that "
        f"created the policy (API server, controller watch, gRPC stream, agent, cgroup writes); "
        f"{fs['median']:.0f} ms ({fs['min']:.0f}–{fs['max']:.0f}) from the start of the `kubectl apply` command "
        f"(kubectl's own start-up and API discovery on this machine included); relative to kubectl's exit "
        f"{fr['median']:.0f} ms ({fr['min']:.0f}–{fr['max']:.0f}; negative: in place before kubectl had exited).",
        f"- **Overwrites** (agent `feedguard_overwrites_total`): {ow['agent_overwrites_total_before_fence']} before "
        f"each apply, {ow['agent_overwrites_total_after_fenced_phase']} after each fenced phase "
        f"({ow['during_fenced_phases']} during the fenced phases); the fence held through every fenced phase: "
        f"{'yes' if ow['fence_held_through_every_fenced_phase'] else 'NO'}. So kubelet and runc rewrote none of the "
        f"agent's values while the fences were held (about {res['rounds'] * (s['duration_s'] + s['warmup_s'])} s "
        f"fenced in all, every pod Running); no pod was resized or re-created during a "
        f"fenced phase here — kubelet's in-place resize of a fenced pod is tests/node/resize_fenced_test.sh's case.",
        f"- **Revert**: `kubectl delete fencepolicy` → every knob file of the neighbour pods' pod and container "
        f"cgroups byte-identical to before the apply in every round: {'yes' if rv['byte_exact_every_round'] else 'NO'} "
        f"(median {rv['revert_ms']['median']:.0f} ms after the delete began).",
        f"- Load average (1 min) at the phase starts: median {m['loadavg_1m_at_phase_starts']['median']}, "
        f"{m['loadavg_1m_at_phase_starts']['min']}–{m['loadavg_1m_at_phase_starts']['max']}.",
        "",
        "Reproduce: `sudo bench/node/real_node.sh` (see its --help); raw per-round numbers are in "
        "real-node.json (`raw_rounds`).",
        "",
    ]
    return "\n".join(lines)


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # the json and md are the results; the plot is a view of them
        print(f"plot skipped: {e}", file=sys.stderr)
        return False
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    colours = {"isolated": "tab:grey", "cfs": "tab:red", "fenced": "tab:green"}
    for i, p in enumerate(PHASES):
        ph = res["phases"][p]
        a.bar(i, ph["samples_per_s"]["median"], color=colours[p], alpha=0.6)
        vals = ph["samples_per_s"]["values"]
        a.plot([i + (k - (len(vals) - 1) / 2) * 0.08 for k in range(len(vals))], vals, "ko", ms=3)
        a.text(i, max(vals) * 1.03, f"{ph['ratio_to_isolated']['median']:.2f}x",
               ha="center", va="bottom", fontsize=9)
    a.set_xticks(range(len(PHASES)), [res["phases"][p]["label"].replace(" (", "\n(") for p in PHASES], fontsize=8)
    top = max(v for p in PHASES for v in res["phases"][p]["samples_per_s"]["values"])
    a.set(ylabel="trainer samples/s", ylim=(0, top * 1.15),
          title=f"trainer pod, {res['setup']['neighbours']} neighbour pods, {res['rounds']} rounds")
    f = res["fence_latency_ms_spread"]["values"]
    fs = res["fence_latency_from_kubectl_apply_start_ms"]["values"]
    xs = list(range(1, len(f) + 1))
    b.plot(xs, fs, "s--", color="tab:grey", label="from the start of the kubectl apply command")
    b.plot(xs, f, "o-", color="tab:blue", label="from kubectl's create request")
    b.axhline(0, color="grey", lw=0.5)
    b.set_xticks(xs)
    b.set(xlabel="round", ylabel="ms", title="fence latency after kubectl apply")
    b.legend(fontsize=8)
    fig.suptitle(f"kubelet {res['kubelet_version']}, containerd {res['containerd_version']}, runc "
                 f"{res['runc_version']}, {res['machine']['cores']} CPUs" + ("  [noisy run]" if res["note"] else ""),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("out_dir")
    ap.add_argument("--note", default="")
    ap.add_argument("--command", default="bench/node/real_node.sh")
    args = ap.parse_args()
    with open(args.raw) as fh:
        raw = json.load(fh)
    res = build(raw, args.note, args.command)
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.join(args.out_dir, "real-node")
    with open(base + ".json", "w") as fh:
        json.dump(res, fh, indent=2)
        fh.write("\n")
    with open(base + ".md", "w") as fh:
        fh.write(markdown(res))
    wrote = [base + ".json", base + ".md"]
    if plot(res, base + ".png"):
        wrote.append(base + ".png")
    print("\n".join(wrote))


if __name__ == "__main__":
    main()

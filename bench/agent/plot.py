#!/usr/bin/env python3
"""plot.py RESULTS_JSON — agent-overhead.png beside it: CPU % and RSS per repetition and phase."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

res = json.load(open(sys.argv[1]))
rows = res["rows"]
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
for phase, colour in (("steady", "tab:blue"), ("churn", "tab:orange")):
    xs = [r["rep"] for r in rows if r["phase"] == phase]
    a.plot(xs, [r["cpu_percent"] for r in rows if r["phase"] == phase], "o-", color=colour, label=phase)
    b.plot(xs, [r["rss_mb"] for r in rows if r["phase"] == phase], "o-", color=colour, label=phase)
a.axhline(res["targets"]["cpu_percent"], color="grey", ls="--", label="target")
b.axhline(res["targets"]["rss_mb"], color="grey", ls="--", label="target")
a.set(title=f"agent CPU, {res['pods']} pods", xlabel="repetition", ylabel="% of one core", ylim=(0, None))
b.set(title="agent RSS", xlabel="repetition", ylabel="MB", ylim=(0, None))
a.legend(fontsize=8)
b.legend(fontsize=8)
fig.tight_layout()
out = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "agent-overhead.png")
fig.savefig(out, dpi=110)
print(out)

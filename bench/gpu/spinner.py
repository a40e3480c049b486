#!/usr/bin/env python3
"""spinner.py — a batch neighbour for the GPU wedge kit: one busy thread, bounded.

    python3 spinner.py --duration S [--out FILE]

Spins (integer arithmetic) until --duration seconds have passed or SIGTERM arrives, then writes
{"work_units", "cpu_seconds", "wall_seconds"} to --out. Python stdlib only.
"""

import json
import os
import signal
import sys
import time


def main() -> int:
    duration, out = 60.0, None
    args = sys.argv[1:]
    while args:
        k = args.pop(0)
        if k == "--duration":
            duration = float(args.pop(0))
        elif k == "--out":
            out = args.pop(0)
        else:
            print(f"spinner.py: unknown argument {k}", file=sys.stderr)
            return 2
    stop = [False]

    def on_term(signum, frame):  # noqa: ARG001
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    t0 = time.monotonic()
    end = t0 + duration
    units = 0
    x = 1
    while not stop[0]:
        for _ in range(20000):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        units += 1
        if time.monotonic() >= end:
            break
    if out:
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"work_units": units, "cpu_seconds": time.process_time(),
                       "wall_seconds": time.monotonic() - t0}, f)
        os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

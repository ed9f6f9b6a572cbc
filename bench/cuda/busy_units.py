"""Units a second of one of the workload suite's busy programs (bench/workloads.py: train,
eagerloop), a sync after each, as bench/compute_prog.py runs them.

    busy_units.py PROGRAM [SECONDS]

Runs PROGRAM for a second untimed (past a new process's first service on a
card with turns, GS_PACE_GUEST_MAX_NS), then SECONDS (default 2) timed, and
prints the units a second as its last line.
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import workloads  # noqa: E402  (bench/, on the path above)

WARM_S = 1.0

program = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
unit = workloads.Models([program]).busy(program, torch.device("cuda"))


def run_for(s: float) -> int:
    n, end = 0, time.perf_counter() + s
    while time.perf_counter() < end:
        unit()
        torch.cuda.synchronize()
        n += 1
    return n


run_for(WARM_S)
t0 = time.perf_counter()
units = run_for(seconds)
print(f"{units / (time.perf_counter() - t0):.3f}")

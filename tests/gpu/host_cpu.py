"""How steady this host's CPUs are: what a CPU-bound program's 100 % rests on.

A loop of tiny launches (bench/compute_share's `tiny`) is bound by the CPU
that launches, so its share can only be judged against a CPU whose speed
holds. On a virtual machine a vCPU may share its physical core with another
guest and run at half speed for seconds, invisibly (no steal time). This
runs a pure-Python counter pinned on every CPU at once for a few seconds and
reports, per CPU, its slowest and median 100 ms against its fastest.
Measured, not judged: it says whether the tiny rows can be.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import List, Tuple

import table

SECONDS = 6.0
BIN_S = 0.1


def count(cpu: int, seconds: float, out: "mp.Queue[Tuple[int, List[int]]]") -> None:
    os.sched_setaffinity(0, {cpu})
    end = time.monotonic() + seconds
    bins: List[int] = []
    while time.monotonic() < end:
        stop, n = time.monotonic() + BIN_S, 0
        while time.monotonic() < stop:
            for _ in range(100):
                n += 1
        bins.append(n)
    out.put((cpu, bins))


def main() -> int:
    cpus = sorted(os.sched_getaffinity(0))
    q: "mp.Queue[Tuple[int, List[int]]]" = mp.Queue()
    procs = [mp.Process(target=count, args=(c, SECONDS, q)) for c in cpus]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=SECONDS + 60) for _ in procs)
    for p in procs:
        p.join()
    unsteady = 0
    for c in cpus:
        bins = got[c]
        best = max(bins)
        low = min(bins) / best
        unsteady += low < 0.9
        table.measured(f"cpu {c}: slowest / median 100 ms, of its best",
                       f"{100 * low:.0f}% / {100 * statistics.median(bins) / best:.0f}%")
    table.measured("CPUs that fell below 90% of their best", f"{unsteady} of {len(cpus)}")
    return table.report()


if __name__ == "__main__":
    sys.exit(main())

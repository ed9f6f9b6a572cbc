"""Shared by the bench/shim_* commands: build, then time native against the shim.

Each command runs the same program natively and under libgpuslice.so (a cap
set high enough never to bind), alternating the two so that drift in clocks
or load hits both alike, and prints medians and their ratio.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Sequence

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / "native" / "shim" / "build" / "libgpuslice.so"
CUDA_SRC = Path(__file__).resolve().parent / "cuda"


def refuse_missing_libs(ap: argparse.ArgumentParser, libs: Sequence[Optional[Path]]) -> None:
    """An --ab LIB that is no file: one line naming it and how to build one, exit 2."""
    for lib in libs:
        if lib is not None and not lib.is_file():
            ap.error(f"--ab {lib}: no such file; give the libgpuslice.so of the build to "
                     "compare with (make -C <tree>/native/shim)")


def refuse_below_one(ap: argparse.ArgumentParser, **counts: int) -> None:
    """A count option (given as its dest name) under 1: one line naming it, exit 2."""
    for dest, value in counts.items():
        if value < 1:
            ap.error(f"--{dest.replace('_', '-')} {value}: must be at least 1")


def build_shim() -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)


def build_cuda(name: str, out_dir: Path, libs: Sequence[str] = ()) -> Path:
    """nvcc-compile bench/cuda/<name>.cu (runtime linked statically, nvcc's default;
    `libs` such as "cuda" for the driver API)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    exe = out_dir / name
    subprocess.run([nvcc, "-O2", "-o", str(exe), str(CUDA_SRC / f"{name}.cu"),
                    *(f"-l{lib}" for lib in libs)], check=True)
    return exe


def shim_env(state_dir: Path, limit: str = "96GiB") -> Dict[str, str]:
    env = dict(os.environ)
    env.update(LD_PRELOAD=str(SHIM), GPUSLICE_MEMORY_LIMIT=limit,
               GPUSLICE_STATE_DIR=str(state_dir))
    return env


def native_env() -> Dict[str, str]:
    env = dict(os.environ)
    for key in ("LD_PRELOAD", "GPUSLICE_MEMORY_LIMIT", "GPUSLICE_STATE_DIR"):
        env.pop(key, None)
    return env


def output_number(cmd: List[str], env: Dict[str, str]) -> float:
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {res.stderr.strip()}")
    return float(res.stdout.strip().splitlines()[-1])


def wall_ms(cmd: List[str], env: Dict[str, str]) -> float:
    start = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = (time.perf_counter() - start) * 1000
    if res.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {res.stderr.strip()}")
    return elapsed


def alternate(measure: Callable[[Dict[str, str]], float], rounds: int) -> Tuple[float, float]:
    """Medians (native, shim) over alternating runs; see variants()."""
    med = variants(measure, {"native": native_env(), "shim": None}, rounds)
    return med["native"][0], med["shim"][0]


def variants(measure: Callable[[Dict[str, str]], float], envs: Dict[str, Optional[Dict[str, str]]],
             rounds: int, best: Optional[Callable[[List[float]], float]] = None
             ) -> Dict[str, Tuple[float, float]]:
    """name -> (median value, median of its per-round ratio to the first variant).

    Every round runs each variant once, back to back, so a drift in clocks or
    load hits all of them alike; the ratio of neighbours cancels most of it.
    With `best` (max for a rate, min for a time) each variant's value is its
    best round instead, and the ratio that of the best rounds: for a
    CPU-bound measure on a host whose CPUs lose half their speed for seconds
    at a time (tests/gpu/host_cpu.py), interference only ever makes a round
    worse, and the best rounds are the ones it spared.
    An env of None means the shim with a cap that never binds, in a state
    dir of this run's own (on /dev/shm when there is one: production keeps
    the region on tmpfs, /run/gpuslice).
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    state = Path(tempfile.mkdtemp(prefix="gpuslice-bench-", dir=base))
    resolved = {k: (v if v is not None else shim_env(state)) for k, v in envs.items()}
    values: Dict[str, List[float]] = {k: [] for k in envs}
    try:
        for _ in range(rounds):
            for name, env in resolved.items():
                values[name].append(measure(env))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    first = next(iter(envs))
    if best is not None:
        return {name: (best(v), best(v) / best(values[first])) for name, v in values.items()}
    return {name: (statistics.median(v),
                   statistics.median(x / y for x, y in zip(v, values[first])))
            for name, v in values.items()}


def report(name: str, unit: str, results: Dict[str, Tuple[float, float]], target: str,
           ok: Callable[[float], bool], added: bool = False,
           judged: Optional[Sequence[str]] = None) -> None:
    """One line per variant: its value and ratio to native (see variants())."""
    print(name)
    native = results["native"][0]
    for variant, (value, ratio) in results.items():
        extra = f"  added {value - native:8.2f} ms" if added else f"  ratio {ratio:6.3f}"
        print(f"  {variant:26s} {value:14.2f} {unit}{extra}")
    for variant, (value, ratio) in results.items():
        if variant == "native" or (judged is not None and variant not in judged):
            continue
        measure = value - native if added else ratio
        print(f"  target {target} ({variant}): {'met' if ok(measure) else 'MISSED'}")


# The shim's account of what pacing cost a process's host (launch.c, at exit,
# with GPUSLICE_LOG=debug; its fields: native/shim/src/pace.h, spent_*).
PACER_SPENT = re.compile(r"pacing's host time: (\d+) launches \((\d+) on tickets\), (\d+) fences; "
                         r"(\d+) us at fence points, (\d+) us waiting for its queue \((\d+) "
                         r"waits\), (\d+) us asleep for its cap, (\d+) us at the card")
SPENT_FIELDS = ("launches", "ticketed", "fences", "fence_us", "queue_us", "queue_waits",
                "sleep_us", "card_us")


def first_account(pattern: "re.Pattern[str]", fields: Sequence[str],
                  stderr: str) -> Optional[Dict[str, int]]:
    """The first line of a process's stderr (device 0's) that `pattern` matches, its
    numbers by `fields`; or None."""
    found = pattern.findall(stderr)
    return dict(zip(fields, map(int, found[0]))) if found else None


def pacer_spent(stderr: str) -> Optional[Dict[str, int]]:
    return first_account(PACER_SPENT, SPENT_FIELDS, stderr)


# Its account of what it was charged, the line after (pace.h, charged_*): the
# parts sum to what it moved into its container's bucket, less what its
# drains before standing aside took that was others' work.
PACER_CHARGED = re.compile(r"pacing's charges: (\d+) us in (\d+) first intervals of busy "
                           r"periods \((\d+) launches\), (\d+) us in later ones \((\d+) "
                           r"launches\), (\d+) us at the estimate; (\d+) stand-asides, (\d+) us "
                           r"of others' work")
CHARGED_FIELDS = ("first_us", "firsts", "first_launches", "later_us", "later_launches",
                  "estimated_us", "asides", "others_us")


def pacer_charged(stderr: str) -> Optional[Dict[str, int]]:
    return first_account(PACER_CHARGED, CHARGED_FIELDS, stderr)


# What its container's bucket earned at its settles and did not keep, over the burst (pace.h,
# credit_cut_ns): what an idle or host-bound tenant did not use, or what others' turns kept
# from a GPU-bound one, short of its cap though its bucket had credit.
PACER_CUT = re.compile(r"its bucket: (\d+) us of credit earned and not kept \(over its burst\) "
                       r"in (\d+) refills")
CUT_FIELDS = ("cut_us", "cuts")


def pacer_cut(stderr: str) -> Optional[Dict[str, int]]:
    return first_account(PACER_CUT, CUT_FIELDS, stderr)


# Side by side at exit (pace.h, epochs*; docs/compute-limit.md, Side by side): its epochs,
# those it went side by side in (uncapped), and those it said it was short in (capped), why.
PACER_SIDE = re.compile(r"side by side: (\d+) of (\d+) epochs side by side, its own waits "
                        r"(\d+) per mille of its time; said it was short in (\d+) while it "
                        r"learned its time a launch, (\d+) for long kernels, (\d+) for a cap "
                        r"over half the card, (\d+) short of its cap \((-?\d+) per mille at "
                        r"exit\)")
SIDE_FIELDS = ("side", "epochs", "waiting_pm", "learning", "long", "high", "owed", "owed_pm")


def pacer_side(stderr: str) -> Optional[Dict[str, int]]:
    return first_account(PACER_SIDE, SIDE_FIELDS, stderr)


# A capped one's holds for running short (pace.h, hold_*): how many, and when the first
# ones began (ms after its first epoch) with how short it ran then (per mille); its first
# epoch on CLOCK_MONOTONIC (time.monotonic()'s clock), where the shim printed it.
PACER_HOLDS = re.compile(r"side by side: (\d+) holds for running short, from (.*?)"
                         r"(?:; its first epoch at (\d+\.\d+) s)?$", re.M)
HOLD = re.compile(r"(\d+) ms \((-?\d+) per mille\)")


def pacer_holds(stderr: str) -> Optional[Dict[str, Any]]:
    found = PACER_HOLDS.search(stderr)
    if not found:
        return None
    got: Dict[str, Any] = {"holds": int(found.group(1)),
                           "at": [[int(ms), int(pm)] for ms, pm in HOLD.findall(found.group(2))]}
    if found.group(3):
        got["first_s"] = float(found.group(3))
    return got


# What its queue's bound rested on at exit (pace.h, gs_pace_host_bound): how many of its
# last fence points found the GPU behind it.
PACER_BOUND = re.compile(r"at exit (host|GPU)-bound: (\d+) of (\d+) at its last fence points")


def pacer_bound(stderr: str) -> Optional[Dict[str, object]]:
    """{'bound': 'host' or 'GPU', 'behind': n, 'of': m} from a process's stderr, or None."""
    found = PACER_BOUND.findall(stderr)
    if not found:
        return None
    bound, behind, of = found[0]
    return {"bound": bound, "behind": int(behind), "of": int(of)}

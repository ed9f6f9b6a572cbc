"""Shared by the bench/shim_* commands: build, then time native against the shim.

Each command runs the same program natively and under libgpuslice.so (a cap
set high enough never to bind), alternating the two so that drift in clocks
or load hits both alike, and prints medians and their ratio.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / "native" / "shim" / "build" / "libgpuslice.so"
CUDA_SRC = Path(__file__).resolve().parent / "cuda"


def build_shim() -> None:
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)


def build_cuda(name: str, out_dir: Path) -> Path:
    """nvcc-compile bench/cuda/<name>.cu (runtime linked statically, nvcc's default)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    exe = out_dir / name
    subprocess.run([nvcc, "-O2", "-o", str(exe), str(CUDA_SRC / f"{name}.cu")], check=True)
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
    """Medians (native, shim) over alternating runs."""
    state = Path(tempfile.mkdtemp(prefix="gpuslice-bench-"))
    try:
        native: List[float] = []
        shimmed: List[float] = []
        for _ in range(rounds):
            native.append(measure(native_env()))
            shimmed.append(measure(shim_env(state)))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return statistics.median(native), statistics.median(shimmed)


def report(name: str, unit: str, native: float, shim: float, target: str, ok: bool,
           ratio: bool = True) -> None:
    print(f"{name}")
    print(f"  native  {native:14.2f} {unit}")
    print(f"  shim    {shim:14.2f} {unit}")
    if ratio:
        print(f"  ratio   {shim / native:14.3f}   (target {target}: {'met' if ok else 'MISSED'})")
    else:
        print(f"  added   {shim - native:14.2f} ms (target {target}: {'met' if ok else 'MISSED'})")

"""libgpuslice.so on a real GPU: memory caps seen and enforced, measured from outside.

Each scenario runs in child processes with the shim preloaded and its own
state dir; this process (no shim) watches the card through NVML, as any
host tool would. Prints a table; exits 1 if any check failed.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pynvml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from table import check, measured, report  # noqa: E402
SHIM = REPO / "native" / "shim" / "build" / "libgpuslice.so"
GIB = 1024 ** 3
MIB = 1024 ** 2
def shim_env(limit: str, state: Optional[Path] = None, **extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(LD_PRELOAD=str(SHIM), GPUSLICE_MEMORY_LIMIT=limit,
               GPUSLICE_STATE_DIR=str(state or tempfile.mkdtemp(prefix="gs-state-")))
    env.update(extra)
    return env


def py(code: str, env: Dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def last_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stdout.strip().splitlines()
    return lines[-1] if lines else f"rc={res.returncode} {res.stderr.strip()[-200:]}"


def nvml_used_by(pids: List[int]) -> int:
    """Bytes NVML says the given (host) pids hold on GPU 0, from outside the shim."""
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    total = 0
    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid in pids and p.usedGpuMemory:
            total += p.usedGpuMemory
    return total


TORCH_CAP = """
import torch
free, total = torch.cuda.mem_get_info()
a = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
fits = True
try:
    b = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    refused = False
except torch.cuda.OutOfMemoryError:
    refused = True
print(total, fits, refused)
"""

CUPY_CAP = """
import cupy
POOL
free, total = cupy.cuda.runtime.memGetInfo()
a = cupy.empty(3 * 2**30, dtype=cupy.uint8)
try:
    b = cupy.empty(2 * 2**30, dtype=cupy.uint8)
    refused = False
except cupy.cuda.memory.OutOfMemoryError:
    refused = True
print(total, True, refused)
"""


def scenario_caps() -> None:
    cases = [
        ("torch", TORCH_CAP, {}),
        ("torch expandable_segments", TORCH_CAP,
         {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
        ("cupy default pool", CUPY_CAP.replace("POOL", ""), {}),
        ("cupy async pool", CUPY_CAP.replace(
            "POOL", "cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)"), {}),
    ]
    for name, code, extra in cases:
        res = py(code, shim_env("4GiB", **extra))
        parts = last_line(res).split()
        ok = len(parts) == 3 and parts[0] == str(4 * GIB) and parts[1] == "True" and parts[2] == "True"
        check(f"{name}: 4 GiB cap: total, 3 GiB fits, +2 GiB OOM", f"{4 * GIB} True True",
              " ".join(parts) if len(parts) == 3 else last_line(res), ok)


HOLDER = """
import os, sys, time, torch
chunks = []
while True:
    try:
        chunks.append(torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda"))
    except RuntimeError:  # OutOfMemoryError, or the plain error without the caching allocator
        break
open(sys.argv[1], "w").write(str(len(chunks)))
time.sleep(float(sys.argv[2]))
"""


def start_holders(n: int, env: Dict[str, str], hold_s: float, tmp: Path) -> List[Tuple[subprocess.Popen, Path]]:
    procs = []
    for i in range(n):
        done = tmp / f"done-{i}"
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(done), str(hold_s)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append((p, done))
    return procs


def scenario_shared_cap() -> None:
    tmp = Path(tempfile.mkdtemp())
    env = shim_env("8GiB", PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    procs = start_holders(4, env, 8.0, tmp)
    pids = [p.pid for p, _ in procs]
    peak = 0
    deadline = time.time() + 120
    while time.time() < deadline and any(p.poll() is None for p, _ in procs):
        peak = max(peak, nvml_used_by(pids))
        if all(d.exists() for _, d in procs):
            for _ in range(10):  # all hold their share now: sample a while longer
                peak = max(peak, nvml_used_by(pids))
                time.sleep(0.2)
            break
        time.sleep(0.05)
    chunks = sum(int(d.read_text()) for _, d in procs if d.exists())
    for p, _ in procs:
        p.kill()
        _, err = p.communicate()
        if err.strip():
            print(f"holder {p.pid}: {err.strip()[-300:]}", file=sys.stderr)
    check("4 procs, one 8 GiB cap: NVML peak from outside (MiB)", "<= 8192",
          peak // MIB, 0 < peak <= 8 * GIB)
    check("4 procs, one 8 GiB cap: 256 MiB chunks granted", "< 32", chunks, 0 < chunks < 32)


def scenario_fill_one() -> None:
    tmp = Path(tempfile.mkdtemp())
    env = shim_env("4GiB", PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    [(p, done)] = start_holders(1, env, 4.0, tmp)
    peak = 0
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        peak = max(peak, nvml_used_by([p.pid]))
        if done.exists():
            for _ in range(10):
                peak = max(peak, nvml_used_by([p.pid]))
                time.sleep(0.1)
            break
        time.sleep(0.05)
    p.kill()
    p.wait()
    check("one proc fills 4 GiB cap: NVML from outside (MiB)", "< 4096", peak // MIB,
          0 < peak < 4 * GIB)


POOL_KEEPS = """
import sys, time, cupy
pool = cupy.cuda.MemoryAsyncPool()
cupy.cuda.set_allocator(pool.malloc)
a = cupy.empty(3 * 2**30, dtype=cupy.uint8)
del a  # back to the pool, which may keep it
cupy.cuda.Device().synchronize()
try:
    p = cupy.cuda.runtime.malloc(3 * 2**30)  # a plain cudaMalloc beside the pool
    verdict = "granted"
except cupy.cuda.runtime.CUDARuntimeError:
    verdict = "refused"
open(sys.argv[1], "w").write(verdict)
time.sleep(10)
"""


def scenario_pool_keeps() -> None:
    """Whatever the pool does with freed memory, the process never holds more than the cap."""
    done = Path(tempfile.mkdtemp()) / "verdict"
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(POOL_KEEPS), str(done)],
                         env=shim_env("4GiB"), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not done.exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    used = nvml_used_by([p.pid])
    verdict = done.read_text() if done.exists() else "no verdict"
    p.kill()
    p.communicate()
    check(f"cupy async pool, then cudaMalloc 3 GiB ({verdict}): NVML (MiB)", "< 4096",
          used // MIB, verdict != "no verdict" and 0 < used < 4 * GIB)


def scenario_smi() -> None:
    q = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    res = subprocess.run(q, env=shim_env("4GiB"), capture_output=True, text=True)
    got = res.stdout.strip()
    check("nvidia-smi under the shim: memory.total (MiB)", "4096", got, got == "4096")
    res = subprocess.run(["nvidia-smi"], env=shim_env("4GiB"), capture_output=True, text=True)
    check("nvidia-smi table shows '/ 4096MiB'", "present", "4096MiB" in res.stdout,
          "4096MiB" in res.stdout)


def scenario_sigkill() -> None:
    state = Path(tempfile.mkdtemp(prefix="gs-state-"))
    env = shim_env("4GiB", state, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    flag = state.parent / f"{state.name}-ready"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time, torch
        a = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
        open(sys.argv[1], "w").write("1")
        time.sleep(120)
        """), str(flag)], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not flag.exists() and time.time() < deadline and holder.poll() is None:
        time.sleep(0.05)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    res = py("""
        import torch
        a = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
        print("got 3 GiB")
        """, env)
    check("SIGKILL holder of 3 of 4 GiB: next gets 3 GiB", "got 3 GiB", last_line(res),
          last_line(res) == "got 3 GiB")


def measure_context() -> None:
    """What one CUDA context costs on this card: the shim's default reservation must cover it."""
    tmp = Path(tempfile.mkdtemp())
    flag = tmp / "ready"
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time, torch
        torch.zeros(1, device="cuda"); torch.cuda.synchronize()
        open(sys.argv[1], "w").write("1"); time.sleep(30)
        """), str(flag)], env=dict(os.environ), stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not flag.exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    used = nvml_used_by([p.pid])
    p.kill()
    p.wait()
    measured("context + 1 tensor, torch, no shim (MiB)", used // MIB)


PRESENCE = """
import time, torch
a = torch.ones(1024, 1024, device="cuda")
(a @ a).sum().item()
print("ready", flush=True)
time.sleep(3)
"""


def scenario_presence() -> None:
    """A high-priority process idle past a second still says it is on the card
    (presence.c): its thread stamps managed_ns every 250 ms on the real driver."""
    sys.path.insert(0, str(REPO))
    from ocihook import region  # the shim's card file, as the exporter reads it

    state = Path(tempfile.mkdtemp(prefix="gs-state-"))
    cards = state / "cards"
    cards.mkdir()
    cards.chmod(0o1777)
    env = shim_env("4GiB", state, GPUSLICE_PRIORITY="high", GPUSLICE_CARD_DIR=str(cards))
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PRESENCE)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = p.stdout.readline().strip() == "ready"
        time.sleep(1.5)  # idle past GS_PACE_STALE_NS (1 s)
        uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        age_ms = (time.monotonic_ns() - region.read_card(str(cards / uuid)).managed_ns) / 1e6
    finally:
        p.wait(timeout=60)
    ok = ready and p.returncode == 0 and age_ms < 750
    check("presence: high, idle 1.5 s: its card stamp's age", "< 750 ms",
          f"{age_ms:.0f} ms" if ready else f"not ready: {p.stderr.read()[-200:]}", ok)


LET_GO = """
import time, torch
x = torch.ones(1024, 1024, device="cuda")
for _ in range({n}):
    float((x @ x).sum().item())
    time.sleep({gap})
print("done", flush=True)
"""


def scenario_let_go() -> None:
    """An answered request lets its neighbours go (pace.c, gs_pace_waited): a
    high tenant serving requests 5 ms apart (PyTorch, `.item()` each) bumps
    the card's seq at their answers from its fourth request on (a new
    process holds its stamp over its first three); one whose waits are each
    followed at once by launches (a decode loop's tokens) never does.
    Nothing else changes a lone high tenant's card seq."""
    sys.path.insert(0, str(REPO))
    from ocihook import region  # the shim's card file, as the exporter reads it

    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    runs = (("10 requests 5 ms apart", 10, 0.005, ">= 3", lambda d: d >= 3),
            ("30 tokens back to back", 30, 0, "0", lambda d: d == 0))
    for name, n, gap, want, ok_of in runs:
        state = Path(tempfile.mkdtemp(prefix="gs-state-"))
        cards = state / "cards"
        cards.mkdir()
        env = shim_env("4GiB", state, GPUSLICE_PRIORITY="high", GPUSLICE_CARD_DIR=str(cards))
        res = py(LET_GO.format(n=n, gap=gap), env, timeout=180)
        path = cards / uuid
        seq = region.read_card(str(path)).seq if path.exists() else None
        check(f"high, {name}: stamps let go (the card's seq)", want,
              str(seq) if seq is not None else last_line(res)[-60:],
              res.returncode == 0 and seq is not None and ok_of(seq))


# How a program waits for the GPU, and which of the shim's wait wrappers
# (launch.c) must see it: syncs, blocking copies to the host, polls (a
# query told "not ready", then "done"); None: any of them (other
# frameworks: the route they take is what the row shows).
WAIT_ROUTES: Dict[str, Tuple[str, str, Optional[str]]] = {
    # PyTorch: a copy to the host (an async copy, then a stream sync), the
    # device sync, an event's; a loop on a stream's or an event's query
    # behind a 0.1 s kernel (torch.cuda._sleep).
    "PyTorch .item()": ("torch", "float((x @ x).sum().item())", "syncs"),
    "PyTorch torch.cuda.synchronize()": ("torch", "x @ x; torch.cuda.synchronize()", "syncs"),
    "PyTorch Event.synchronize()": (
        "torch", "e = torch.cuda.Event(); x @ x; e.record(); e.synchronize()", "syncs"),
    "PyTorch Stream.query() loop": (
        "torch", "s = torch.cuda.current_stream(); torch.cuda._sleep(200_000_000); "
                 "n = sum(1 for _ in iter(s.query, True))", "polls"),
    "PyTorch Event.query() loop": (
        "torch", "e = torch.cuda.Event(); torch.cuda._sleep(200_000_000); e.record(); "
                 "n = sum(1 for _ in iter(e.query, True))", "polls"),
    "CuPy .get()": ("cupy", "float((x @ x).sum().get())", None),
    "CuPy cudaMemcpy to the host": (
        "cupy", "import numpy; h = numpy.empty(4, numpy.float32); y = x @ x; "
                "cupy.cuda.runtime.memcpy(h.ctypes.data, y.data.ptr, 16, 2)", "blocking copies"),
    "JAX block_until_ready()": ("jax", "(x @ x).block_until_ready()", None),
}
WAIT_SETUP = {
    "torch": 'import torch\nx = torch.ones(1024, 1024, device="cuda")',
    "cupy": "import cupy\nx = cupy.ones((1024, 1024), dtype=cupy.float32)",
    "jax": "import jax, jax.numpy as jnp\nx = jnp.ones((1024, 1024))",
}
SEEN = re.compile(r"the application's (syncs|blocking copies|polls) are seen")


def scenario_syncs() -> None:
    """The pacer counts idling from the end of a wait for the GPU (pace.c,
    guest): each route of WAIT_ROUTES, in a process capped at 50, must reach
    the shim's wrappers (launch.c), which say so once per kind at debug
    level. A framework this host lacks is skipped, and says so."""
    missing = {fw for fw in WAIT_SETUP
               if subprocess.run([sys.executable, "-c", f"import {fw}"],
                                 capture_output=True).returncode != 0}
    for fw in sorted(missing):
        print(f"skipped: {fw} is not importable here (its wait routes are not checked)")
    for route, (fw, code, want) in WAIT_ROUTES.items():
        if fw in missing:
            continue
        env = shim_env("4GiB", GPUSLICE_CORE_LIMIT="50", GPUSLICE_LOG="debug",
                       XLA_PYTHON_CLIENT_PREALLOCATE="false")
        res = py(WAIT_SETUP[fw] + "\n" + code + '\nprint("done")\n', env, timeout=180)
        seen = sorted(set(SEEN.findall(res.stderr)))
        ok = res.returncode == 0 and (want in seen if want else bool(seen))
        check(f"capped 50, {route}: the shim sees the wait", want or "any",
              ", ".join(seen) if seen else last_line(res)[-60:], ok)


def main() -> int:
    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)
    pynvml.nvmlInit()
    for scenario in (measure_context, scenario_caps, scenario_pool_keeps, scenario_smi,
                     scenario_fill_one,
                     scenario_shared_cap, scenario_sigkill, scenario_presence, scenario_syncs,
                     scenario_let_go):
        try:
            scenario()
        except Exception as e:  # one broken scenario must not hide the others' results
            check(f"{scenario.__name__} ran", "no exception", repr(e)[:60], False)
    return report()


if __name__ == "__main__":
    sys.exit(main())

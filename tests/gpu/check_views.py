"""A container's whole cap, and what it sees of the card, on a real GPU.

Runc containers made by `gpuslice-runtime run`, as check_runtime.py makes
one; NVML from this process (no shim) is the outside view.

1. Usable memory: 1, 4 and 8 PyTorch processes in one container with an
   8 GiB slice (GPUSLICE=0-8g) fill it (256 MiB chunks until refused, then
   halving down to 2 MiB). NVML from outside must report at least 97 % of
   the cap for the container's processes, and never more than the cap.
2. nvidia-smi inside container A (GPUSLICE=0-8g-50: PyTorch holding 2 GiB
   and multiplying matrices) while a neighbour B (a plain process, no shim)
   holds 3 GiB: the process table and --query-compute-apps list A's
   process and never B's (the driver gives pids in the caller's namespace;
   on driver 580 the driver itself lists only the caller's namespace);
   memory.total is the slice, memory.used what A is charged; GPU-Util is A's own card time (about 50 %);
   pynvml's process list is A's.

Prints a table; exits 1 on a failure.

    python3 tests/gpu/check_views.py OUT
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_runtime import (REPO, out_dir, slice_process, stack_node,  # noqa: E402
                           start_container)
from table import check, measured, report  # noqa: E402

MIB = 1 << 20
CAP_MIB = 8192

FILL = r"""
import os, subprocess, sys, time
n = int(sys.argv[1])
if n > 1 and len(sys.argv) == 2:
    kids = [subprocess.Popen([sys.executable, "-c", open("/go/fill.py").read(), str(n), str(i)])
            for i in range(n)]
    for k in kids:
        k.wait()
    sys.exit(0)
me = sys.argv[2] if len(sys.argv) > 2 else "0"
os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
import torch
torch.zeros(1, device="cuda")
# Every process holds its context before any fills: the cap is shared, not
# taken by whoever starts first.
open(f"/out/ctx-{me}", "w").write("1")
deadline = time.time() + 120
while len([f for f in os.listdir("/out") if f.startswith("ctx-")]) < n and time.time() < deadline:
    time.sleep(0.02)
held, size = [], 256 << 20
while size >= 2 << 20:
    try:
        held.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    except RuntimeError:
        size //= 2
open(f"/out/granted-{me}", "w").write(str(sum(t.numel() for t in held)))
while not os.path.exists("/go/stop"):
    time.sleep(0.05)
"""

VIEW = r"""
import json, os, subprocess, threading, time, torch
a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
x = torch.randn(4096, 4096, device="cuda")
stop = threading.Event()
def work():
    while not stop.is_set():
        y = x @ x
        torch.cuda.synchronize()
t = threading.Thread(target=work)
t.start()
time.sleep(3)
def smi(*args, env=None):
    r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, env=env)
    return r.stdout if r.returncode == 0 else "rc=%d %s" % (r.returncode, r.stderr.strip())
apps = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
raw = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
out = {"apps": smi(*apps), "apps_raw": smi(*apps, env=raw),
       "gpu": smi("--query-gpu=memory.total,memory.used,utilization.gpu",
                  "--format=csv,noheader,nounits"),
       "table": smi()}
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
out["pynvml_procs"] = [[p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
out["pynvml_util"] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
try:
    out["pynvml_proc_util"] = [s.pid for s in pynvml.nvmlDeviceGetProcessUtilization(h, 0)]
except pynvml.NVMLError as e:
    out["pynvml_proc_util"] = str(e)
out["own_pid"] = os.getpid()
stop.set()
t.join()
print("VIEW " + json.dumps(out), flush=True)
"""

TABLE_ROW = re.compile(r"^\|\s+\d+\s+\S+\s+\S+\s+(\d+)\s+[CGM+]+\s")


def outside() -> Dict[int, int]:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {p.pid: p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}


def container(stack, bundle: Path, cid: str, device: str, code: str, args: List[str],
              mounts: List[Tuple[Path, str, str]]) -> subprocess.Popen:
    """A container running Python `code` with `args`, asking for `device`."""
    # GPUSLICE_LOG: to see what the shim decides inside.
    env = [f"GPUSLICE_LOG={os.environ['GPUSLICE_LOG']}"] if os.environ.get("GPUSLICE_LOG") else []
    return start_container(
        stack, bundle, cid,
        lambda spec: slice_process(spec, spec["process"]["args"][:2] + [code, *args], device,
                                   mounts, env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p: subprocess.Popen, timeout: float = 60) -> str:
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    if p.returncode or os.environ.get("GPUSLICE_LOG"):
        print(f"container exited {p.returncode}: {err.strip()[-3000:]}", file=sys.stderr)
    return out


def usable(stack, out: Path, n: int) -> None:
    go, res = out / f"go-{n}", out / f"out-{n}"
    for d in (go, res):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    (go / "fill.py").write_text(FILL)
    before = set(outside())
    p = container(stack, out / f"bundle-fill-{n}", f"gpuslice-fill-{n}", "0-8g", FILL, [str(n)],
                  [(go, "/go", "ro"), (res, "/out", "rw")])
    peak, deadline = 0, time.monotonic() + 90
    while time.monotonic() < deadline and p.poll() is None:
        now = sum(v for pid, v in outside().items() if pid not in before)
        peak = max(peak, now)
        if len(list(res.glob("granted-*"))) == n:
            break
        time.sleep(0.02)
    settled = 0
    for _ in range(20):  # all hold what they got: read a while longer
        settled = sum(v for pid, v in outside().items() if pid not in before)
        peak = max(peak, settled)
        time.sleep(0.1)
    granted = sum(int(f.read_text()) for f in res.glob("granted-*"))
    (go / "stop").write_text("1")
    finish(p)
    pct = 100.0 * settled / (CAP_MIB * MIB)
    check(f"{n} proc(s), one 8 GiB slice: NVML from outside at fill (MiB, % of cap)",
          ">= 97 %", f"{settled // MIB} ({pct:.1f} %)", pct >= 97.0)
    check(f"{n} proc(s), one 8 GiB slice: NVML peak (MiB)", f"<= {CAP_MIB}", peak // MIB,
          0 < peak <= CAP_MIB * MIB)
    measured(f"{n} proc(s): allocations granted (MiB)", granted // MIB)


def views(stack, out: Path) -> None:
    neighbour = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time, torch
        b = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
        print("ready", flush=True)
        time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True)
    neighbour.stdout.readline()
    before = set(outside())
    p = container(stack, out / "bundle-view", "gpuslice-view", "0-8g-50", VIEW, [], [])
    watchdog = threading.Timer(150, p.kill)
    watchdog.start()
    a_used = 0  # what A's processes hold, seen from outside while it runs
    charged = 0  # what A is charged, as `gpuslice status` reads its region
    env = stack.env
    while p.poll() is None:
        a_used = max(a_used, sum(v for pid, v in outside().items() if pid not in before))
        doc = subprocess.run([sys.executable, "-m", "ocihook.cli", "status", "--json"],
                             env=env, capture_output=True, text=True, cwd=REPO).stdout
        for card in json.loads(doc or "{}").get("cards", []):
            for c in card["containers"]:
                if c["id"] == "gpuslice-view" and c["used_mib"]:
                    charged = max(charged, c["used_mib"])
        time.sleep(0.1)
    text = finish(p, 150)
    watchdog.cancel()
    neighbour.kill()
    neighbour.wait()
    line = next((ln[5:] for ln in text.splitlines() if ln.startswith("VIEW ")), "")
    if not line:
        check("the view container ran", "VIEW line", text[-200:], False)
        return
    v = json.loads(line)

    def pids_of(csv: str) -> List[int]:
        return sorted(int(r.split(",")[0]) for r in csv.strip().splitlines()
                      if r.split(",")[0].strip().isdigit())

    own = v["own_pid"]  # the driver gives pids in the caller's namespace (driver 580)
    apps, raw = pids_of(v["apps"]), pids_of(v["apps_raw"])
    measured("inside A without the shim: processes nvidia-smi lists", len(raw))
    check("inside A, --query-compute-apps: A's process only", [own],
          apps if apps or "," in v["apps"] else v["apps"].strip()[:60], apps == [own])
    table = sorted(int(m.group(1)) for m in map(TABLE_ROW.match, v["table"].splitlines()) if m)
    check("inside A, nvidia-smi's process table: A's process only", [own], table, table == [own])
    gpu = [s.strip() for s in v["gpu"].strip().split(",")]
    check("inside A, memory.total (MiB)", CAP_MIB, gpu[0] if gpu else v["gpu"][:60],
          gpu[:1] == [str(CAP_MIB)])
    used = int(gpu[1]) if len(gpu) > 1 and gpu[1].isdigit() else -1
    # What counts against the cap: far from it a context is charged up to
    # GPUSLICE_CONTEXT_RESERVE, above what the driver holds (native/shim/README.md).
    check("inside A, memory.used (MiB): what A is charged", f"~{charged}", used,
          abs(used - charged) <= max(0.02 * charged, 16))
    measured("A's use seen from outside (MiB)", a_used // MIB)
    util = gpu[2] if len(gpu) > 2 else ""
    check("inside A, utilization.gpu: A's own card time (cap 50)", "40-60 %", util,
          util.isdigit() and 40 <= int(util) <= 60)
    check("inside A, pynvml compute processes: A's own", [own],
          [p[0] for p in v["pynvml_procs"]], [p[0] for p in v["pynvml_procs"]] == [own])
    pu = v["pynvml_proc_util"]
    check("inside A, pynvml process utilization: A's own or none", f"[{own}] or []", pu,
          isinstance(pu, list) and set(pu) <= {own})


def main() -> int:
    out = out_dir()
    stack = stack_node(out)
    if stack is None:
        return report()
    pynvml.nvmlInit()
    for n in (1, 4, 8):
        try:
            usable(stack, out, n)
        except Exception as e:  # one broken row must not hide the others
            check(f"usable memory, {n} procs, ran", "no exception", repr(e)[:60], False)
    try:
        views(stack, out)
    except Exception as e:
        check("nvidia-smi views ran", "no exception", repr(e)[:60], False)
    return report()


if __name__ == "__main__":
    sys.exit(main())

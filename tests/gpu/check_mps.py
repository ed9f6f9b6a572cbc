"""A card in MPS mode on a real GPU: two runc containers made by
gpuslice-runtime, each an MPS client in an 8 GiB slice at 50 % of the SMs
(GPUSLICE=0-8g-50), with card 0 in MPS mode (card_modes: {0: mps}).

1. With the card's MPS daemon down, a container is refused, its line
   naming `gpuslice mps start 0`.
2. `gpuslice mps start 0` starts nvidia-cuda-mps-control for the card, its
   folders under the node's state dir.
3. Containers A and B start together. Inside each: the MPS env the spec
   gave, PyTorch sees an 8 GiB card, 6 GiB fits and 4 GiB more is refused;
   nvidia-smi lists only the container's own process. In A, a process with
   the shim switched off (GPUSLICE_DISABLE=1) meets MPS's own limit
   (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, the second guard): 6 GiB fits, 4 GiB
   more is refused. From outside, an MPS server runs and NVML never shows a
   container's processes above the cap.
4. The fault: A multiplies matrices in a loop; B's process writes to an
   illegal address (a PTX kernel through the driver API; a device-side
   assert through PyTorch where that cannot load). What happens to A's
   loop is measured and printed (kept running or died), not judged, and so
   is what B saw.
5. `gpuslice mps stop 0`: the daemon goes, its pipe with it.

Prints a table; exits 1 on a failed check. Under 4 minutes.

    python3 tests/gpu/check_mps.py OUT
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_runtime import out_dir, stack_node  # noqa: E402
from check_views import container, finish  # noqa: E402
from node import gpuslice  # noqa: E402
from table import check, measured, report  # noqa: E402

MIB = 1 << 20
CAP_MIB = 8192
DEVICE = "0-8g-50"  # a default profile: 8 GiB, 50 % of the SMs

INSIDE = r"""
import ctypes, json, os, subprocess, sys, time
role = sys.argv[1]
def put(name, value):
    with open(f"/out/{role}-{name}.tmp", "w") as f:
        f.write(json.dumps(value))
    os.rename(f"/out/{role}-{name}.tmp", f"/out/{role}-{name}")
put("env", {k: v for k, v in os.environ.items() if k.startswith("CUDA_MPS")})
if role == "A":  # MPS's own limit, the shim switched off in a process of its own
    guard = subprocess.run([sys.executable, "-c", open("/go/guard.py").read()],
                           env=dict(os.environ, GPUSLICE_DISABLE="1"),
                           capture_output=True, text=True, timeout=120)
    put("guard", guard.stdout.strip().splitlines()[-1:] or [guard.stderr.strip()[-300:]])
import torch
free, total = torch.cuda.mem_get_info()
put("total", total)
a = torch.empty(6 << 30, dtype=torch.uint8, device="cuda")
try:
    b = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    put("oom", False)
    del b
except torch.OutOfMemoryError:
    put("oom", True)
smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True)
put("smi", {"rc": smi.returncode, "out": smi.stdout, "err": smi.stderr[-300:],
            "own": os.getpid()})
put("ready", True)
while not os.path.exists("/go/go"):
    time.sleep(0.05)
if role == "A":
    x = torch.randn(4096, 4096, device="cuda")
    n = 0
    try:
        while not os.path.exists("/go/stop"):
            y = x @ x
            torch.cuda.synchronize()
            n += 1
            if n % 10 == 0:
                put("progress", [n, time.time()])
        put("end", {"iterations": n, "error": None})
    except Exception as e:
        put("end", {"iterations": n, "error": repr(e)[:300]})
        sys.exit(3)
else:
    r = subprocess.run([sys.executable, "-c", open("/go/fault.py").read()],
                       capture_output=True, text=True, timeout=60)
    lines = r.stdout.strip().splitlines()
    put("fault", json.loads(lines[-1]) if lines else {"rc": r.returncode,
                                                      "stderr": r.stderr[-300:]})
"""

GUARD = r"""
import torch
a = torch.empty(6 << 30, dtype=torch.uint8, device="cuda")
try:
    b = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    print("granted")
except torch.OutOfMemoryError:
    print("refused")
"""

# A store to an address no allocation holds (the null page: on the H200 a
# store to 1<<40 completed without error under MPS): CUDA_ERROR_ILLEGAL_ADDRESS,
# a fatal fault of the context. PTX, which the driver compiles: no NVRTC needed.
# If the store still completes, PyTorch's device-side assert follows.
FAULT = r"""
import ctypes, json
import torch
torch.zeros(1, device="cuda")  # the primary context, current on this thread
PTX = b'''
.version 7.0
.target sm_70
.address_size 64
.visible .entry bad(.param .u64 p)
{
  .reg .u64 %rd<2>;
  .reg .u32 %r<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 1;
  st.global.u32 [%rd1], %r1;
  ret;
}
'''
out = {}
try:
    cu = ctypes.CDLL("libcuda.so.1")
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    rc = cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX))
    if rc == 0:
        rc = cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"bad")
    if rc != 0:
        raise RuntimeError(f"PTX not loaded: CUresult {rc}")
    addr = ctypes.c_uint64(8)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(addr), ctypes.c_void_p))
    out["how"] = "ptx store to address 8"
    out["launch"] = cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, params, None)
    out["sync"] = cu.cuCtxSynchronize()
    if out["sync"] == 0:
        raise RuntimeError("the store completed")
except Exception as e:
    out["how"] = f"torch index assert ({e})"
    try:
        x = torch.tensor([1 << 40], device="cuda")
        torch.zeros(10, device="cuda")[x]
        torch.cuda.synchronize()
        out["sync"] = "no error"
    except Exception as e2:
        out["sync"] = repr(e2)[:200]
print(json.dumps(out), flush=True)
"""


def host_pids(runc: str, cid: str) -> List[int]:
    res = subprocess.run([runc, "ps", "--format", "json", cid], capture_output=True, text=True)
    try:
        return [int(p) for p in json.loads(res.stdout or "[]")]
    except (ValueError, TypeError):
        return []


def mps_servers() -> List[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"nvidia-cuda-mps-server" in f.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def outside() -> Dict[int, int]:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return {p.pid: p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}


def read(res: Path, name: str) -> Optional[object]:
    path = res / name
    return json.loads(path.read_text()) if path.exists() else None


def wait_for(cond, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def refused_while_down(stack, out: Path) -> None:
    p = container(stack, out / "bundle-down", "gpuslice-mps-down", DEVICE, "print(1)", [], [])
    try:
        _, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    said = "MPS control daemon is not running" in err and "gpuslice mps start 0" in err
    check("daemon down: refused, naming `gpuslice mps start 0`", "refused, said",
          f"exit {p.returncode}, {'said' if said else err.strip()[-40:]}",
          p.returncode != 0 and said)
    subprocess.run([stack.runc, "delete", "-f", "gpuslice-mps-down"], capture_output=True)


def clients(stack, out: Path) -> None:
    go, res = out / "go", out / "res"
    for d in (go, res):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    (go / "guard.py").write_text(GUARD)
    (go / "fault.py").write_text(FAULT)
    mounts = [(go, "/go", "ro"), (res, "/out", "rw")]
    procs = {r: container(stack, out / f"bundle-{r}", f"gpuslice-mps-{r}", DEVICE, INSIDE, [r],
                          mounts) for r in ("A", "B")}
    watchdog = [threading.Timer(170, p.kill) for p in procs.values()]
    for w in watchdog:
        w.start()
    ready = wait_for(lambda: all((res / f"{r}-ready").exists() for r in "AB") or
                     any(p.poll() is not None for p in procs.values()), 120)
    check("both containers ready (MPS clients, caps checked)", True, ready and all(
        (res / f"{r}-ready").exists() for r in "AB"), ready and all(
        (res / f"{r}-ready").exists() for r in "AB"))
    servers = mps_servers()
    check("an MPS server runs for the clients", ">= 1 pid", servers, len(servers) >= 1)
    peak = {r: 0 for r in "AB"}
    for _ in range(10):
        seen = outside()
        for r in "AB":
            pids = host_pids(stack.runc, f"gpuslice-mps-{r}")
            peak[r] = max(peak[r], sum(seen.get(pid, 0) for pid in pids))
        time.sleep(0.1)
    env = {r: read(res, f"{r}-env") or {} for r in "AB"}
    check("A's MPS env: pipe, 50 % SMs, 8 GiB pinned limit",
          "/run/nvidia-mps, 50, 0=8192M",
          ", ".join(str(env["A"].get(k)) for k in (
              "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
              "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")),
          env["A"].get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "50" and
          env["A"].get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == "0=8192M")
    for r in "AB":
        total = read(res, f"{r}-total")
        check(f"{r}: torch sees an 8 GiB card", CAP_MIB * MIB, total, total == CAP_MIB * MIB)
        oom = read(res, f"{r}-oom")
        check(f"{r}: 6 GiB fits, 4 GiB more refused", True, oom, oom is True)
        smi = read(res, f"{r}-smi") or {}
        pids = sorted(int(x) for x in (smi.get("out") or "").split() if x.strip().isdigit())
        check(f"{r}: nvidia-smi inside lists its own process only", [smi.get("own")],
              pids or (smi.get("err") or "")[:40], pids == [smi.get("own")])
        check(f"{r}: NVML from outside, its processes (MiB)", f"<= {CAP_MIB}",
              peak[r] // MIB, peak[r] <= CAP_MIB * MIB)
    guard = read(res, "A-guard")
    check("A, shim off: MPS's own limit refuses 4 GiB beyond 6", ["refused"], guard,
          guard == ["refused"])
    fault(procs, go, res)
    (go / "stop").write_text("1")
    for r, p in procs.items():
        finish(p, 30)
        # A runc killed in the foreground leaves its container: not ours to keep.
        subprocess.run([stack.runc, "delete", "-f", f"gpuslice-mps-{r}"], capture_output=True)
    for w in watchdog:
        w.cancel()


def fault(procs, go: Path, res: Path) -> None:
    (go / "go").write_text("1")
    wait_for(lambda: (res / "A-progress").exists(), 30)
    before = read(res, "A-progress") or [0, 0]
    wait_for(lambda: (res / "B-fault").exists() or procs["B"].poll() is not None, 60)
    what = read(res, "B-fault")
    measured("B's fault: how, and what B saw", what)
    print(f"B's fault, whole: {what}")  # the table cuts its cell
    at = time.time()
    time.sleep(5)
    after = read(res, "A-progress") or [0, 0]
    end = read(res, "A-end")
    print(f"A's progress before / after the fault, and its end: {before} {after} {end}")
    if end and end.get("error"):
        measured("A's matmul loop after B's fault", f"died: {end['error']}")
    elif after[1] > at:
        measured("A's matmul loop after B's fault",
                 f"kept running: {after[0] - before[0]} iterations since the fault began")
    else:
        measured("A's matmul loop after B's fault",
                 f"stalled: last progress {at - after[1]:.1f} s before the check; "
                 f"A exited {procs['A'].poll()}")


def main() -> int:
    out = out_dir()
    stack = stack_node(out, "card_modes: {0: mps}\n")
    if stack is None:
        return report()
    if not shutil.which("nvidia-cuda-mps-control"):
        check("nvidia-cuda-mps-control present", "in PATH", "missing", False)
        return report()
    pynvml.nvmlInit()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    state = out / "state"
    gpuslice(stack.env, "mps", "stop", "0")  # one left by a killed run
    try:
        refused_while_down(stack, out)
    except Exception as e:
        check("refusal while down ran", "no exception", repr(e)[:60], False)
    started = gpuslice(stack.env, "mps", "start", "0")
    check("gpuslice mps start 0", 0, started.returncode or started.stderr.strip()[-60:],
          started.returncode == 0)
    control = state / "mps" / uuid / "pipe" / "control"
    check("the daemon's control pipe under the state dir", "present", control.exists(),
          control.exists())
    try:
        if started.returncode == 0:
            clients(stack, out)
    except Exception as e:  # the daemon is stopped below whatever happened
        check("the MPS clients ran", "no exception", repr(e)[:60], False)
    stopped = gpuslice(stack.env, "mps", "stop", "0")
    check("gpuslice mps stop 0", 0, stopped.returncode or stopped.stderr.strip()[-60:],
          stopped.returncode == 0)
    check("the control pipe is gone", "absent", control.exists(), not control.exists())
    log = state / "mps" / uuid / "log" / "control.log"
    if log.exists():
        lines = log.read_text(errors="replace").splitlines()
        measured("control.log: lines naming a client", sum("client" in ln.lower() for ln in lines))
    return report()


if __name__ == "__main__":
    sys.exit(main())

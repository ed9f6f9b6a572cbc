"""`gpuslice resize` of a running PyTorch container on a real GPU: a runc
container made by `gpuslice-runtime run` with a 4 GiB slice (GPUSLICE=0-4g),
as check_runtime.py makes one, whose program stops at three points and waits
for the host. At each the host resizes it with `gpuslice resize`:

1. 4 GiB, 3 GiB held, 2 GiB more is OutOfMemoryError; grown to 8 GiB:
   mem_get_info says 8 GiB and the 2 GiB now fit.
2. Holding 5 GiB, a shrink to 4 GiB is refused with the numbers; the slice
   stays 8 GiB.
3. The 2 GiB freed (empty_cache); shrunk to 6 GiB: mem_get_info says 6 GiB
   and 4 GiB more is OutOfMemoryError.

Prints a table; exits 1 on a failure.

    python3 tests/gpu/check_resize.py OUT
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_runtime import bundle_config, out_dir, rootfs, stack_node  # noqa: E402
from table import check, report  # noqa: E402

GIB = 1 << 30
CID = "gpuslice-resize-check"

INSIDE = r"""
import os, time, torch
def wait(n):
    print("ready", n, flush=True)
    while not os.path.exists(f"/go/{n}"):
        time.sleep(0.05)
def oom(gib):
    try:
        torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
        return False
    except torch.OutOfMemoryError:
        return True
print("total1", torch.cuda.mem_get_info()[1], flush=True)
a = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
print("oom1", oom(2), flush=True)
wait(1)
print("total2", torch.cuda.mem_get_info()[1], flush=True)
b = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
print("fits2", True, flush=True)
wait(2)
del b
torch.cuda.empty_cache()
wait(3)
print("total3", torch.cuda.mem_get_info()[1], flush=True)
print("oom3", oom(4), flush=True)
"""


def gpuslice(env: Dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ocihook.cli", *args], env=env,
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def slice_mib(env: Dict[str, str]) -> Optional[int]:
    doc = json.loads(gpuslice(env, "status", "--json").stdout or "{}")
    held = [c["memory_mib"] for card in doc.get("cards", []) for c in card["containers"]
            if c["id"] == CID]
    return held[0] if held else None


def main() -> int:
    out = out_dir()
    stack = stack_node(out)
    if stack is None:
        return report()
    runc, runtime, tool, env = stack
    go = out / "go"
    shutil.rmtree(go, ignore_errors=True)
    go.mkdir()
    bundle = out / "bundle"
    rootfs(bundle / "rootfs")
    spec = bundle_config(runc, bundle)
    spec["process"]["args"][-1] = INSIDE
    spec["mounts"].append({"destination": "/go", "type": "bind", "source": str(go),
                           "options": ["rbind", "ro"]})
    (bundle / "config.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([runtime, "--gpuslice-runtime", runc, "--gpuslice-cache-tool",
                             str(tool), "run", "--bundle", str(bundle), CID], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got: Dict[str, str] = {}
    deadline = time.monotonic() + 120
    # A program that hangs before its next line must not hang the check.
    watchdog = threading.Timer(150, proc.kill)
    watchdog.start()

    def until_ready(n: str) -> bool:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                return False
            key, _, value = line.strip().partition(" ")
            if key == "ready" and value == n:
                return True
            got[key] = value
        return False

    try:
        if until_ready("1"):
            check("torch sees a 4 GiB card", 4 * GIB, got.get("total1"),
                  got.get("total1") == str(4 * GIB))
            check("torch: 3 GiB held, 2 GiB more is OutOfMemoryError", True, got.get("oom1"),
                  got.get("oom1") == "True")
            res = gpuslice(env, "resize", CID, "--memory", "8GiB")
            check("gpuslice resize --memory 8GiB", 0, res.returncode, res.returncode == 0)
            (go / "1").touch()
        if until_ready("2"):
            check("torch sees the grown card", 8 * GIB, got.get("total2"),
                  got.get("total2") == str(8 * GIB))
            check("torch: the 2 GiB fit after the grow", True, got.get("fits2"),
                  got.get("fits2") == "True")
            res = gpuslice(env, "resize", CID, "--memory", "4GiB")
            line = res.stderr.strip()
            check("a shrink to 4 GiB below 5 GiB held is refused", "exit 1, 'hold ... MiB now'",
                  f"exit {res.returncode}: {line[-120:]}",
                  res.returncode == 1 and "processes hold" in line and
                  "4096 MiB asked" in line)
            check("the slice stays 8 GiB", 8192, slice_mib(env), slice_mib(env) == 8192)
            (go / "2").touch()
        if until_ready("3"):
            res = gpuslice(env, "resize", CID, "--memory", "6GiB")
            check("gpuslice resize --memory 6GiB (3 GiB held)", 0, res.returncode,
                  res.returncode == 0)
            if res.returncode:
                print(res.stderr)
            check("gpuslice status shows 6 GiB", 6144, slice_mib(env), slice_mib(env) == 6144)
            (go / "3").touch()
        rest, errs = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, errs = proc.communicate()
    finally:
        watchdog.cancel()
    for line in rest.splitlines():
        key, _, value = line.strip().partition(" ")
        got[key] = value
    check("gpuslice-runtime run exits 0", 0, proc.returncode, proc.returncode == 0)
    if proc.returncode:
        print(rest[-3000:], errs[-3000:])
    check("torch sees the shrunk card", 6 * GIB, got.get("total3"),
          got.get("total3") == str(6 * GIB))
    check("torch: 4 GiB more is OutOfMemoryError", True, got.get("oom3"),
          got.get("oom3") == "True")
    from ocihook import accountant

    books = accountant.Accountant(str(out / "state.db"))
    kinds = [e["kind"] for e in books.events()][::-1]
    books.close()
    check("events: admit, resize, resize, release", "admit, resize, resize, release",
          ", ".join(kinds[-4:]), kinds[-4:] == ["admit", "resize", "resize", "release"])
    return report()


if __name__ == "__main__":
    sys.exit(main())

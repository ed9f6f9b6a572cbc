"""Every path to device memory on a real GPU, against a 4 GiB cap (issue 26).

For each path of the table in native/shim/README.md ("GPU: <path>"), the
test program tests/shim/cuprog (built here with gcc against the real
libcuda.so.1; no toolkit) runs with the shim preloaded in a state dir of
its own: the first allocation through the path fits, the next one is
refused with CUDA_ERROR_OUT_OF_MEMORY, and this process (no shim) samples
NVML's figure for it from outside every 20 ms: never above 4 GiB. A
neighbour without the shim holds 1 GiB on the card throughout; its figure
must not move. Then the table against the driver: every export of
libcuda.so.1 (and, with the toolkit, every function of cuda.h) in the
memory families must be accounted for. Prints a table; exits 1 if any
check failed.

    python3 tests/gpu/check_memory_paths.py
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests"))
from table import check, measured, report  # noqa: E402
import memory_paths  # noqa: E402

SHIM = REPO / "native" / "shim" / "build" / "libgpuslice.so"
CUPROG_SRC = REPO / "tests" / "shim" / "cuprog.c"
GIB = 1024 ** 3
MIB = 1024 ** 2
CAP = 4 * GIB
OOM = 2

# A module whose one global takes SIZE bytes of the card (PTX: the driver
# compiles it; nothing of the toolkit is needed).
PTX = (".version 7.0\n.target sm_50\n.address_size 64\n"
       ".visible .global .align 8 .b8 big[SIZE];\n")


def libcuda() -> Optional[Path]:
    """The driver's libcuda.so.1, as the dynamic loader finds it."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        entry = line.strip()
        if entry.startswith("libcuda.so.1 ") and ("x86-64" in entry or "AArch64" in entry):
            return Path(entry.split("=>", 1)[1].strip())
    return None


def build_cuprog(lib: Path, out: Path) -> subprocess.CompletedProcess:
    """tests/shim/cuprog linked to `lib` (a libcuda.so.1), with gcc alone."""
    return subprocess.run(
        ["gcc", "-std=c11", "-O1", "-g", "-pthread", f"-I{REPO / 'native' / 'shim' / 'include'}",
         f"-I{REPO / 'native' / 'include'}", "-o", str(out), str(CUPROG_SRC), str(lib), "-ldl",
         f"-Wl,-rpath,{lib.parent}"], capture_output=True, text=True)


def nvml_used(pid: int) -> int:
    """What NVML says `pid` holds on GPU 0, read from outside the shim."""
    import pynvml

    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
               if p.pid == pid)


class Run:
    """cuprog with its ops (the last one `hold`), watched from outside."""

    def __init__(self, cuprog: Path, ops: List[str], shim: bool, **env: str) -> None:
        e = dict(os.environ)
        if shim:
            e.update(LD_PRELOAD=str(SHIM), GPUSLICE_MEMORY_LIMIT=str(CAP),
                     GPUSLICE_STATE_DIR=tempfile.mkdtemp(prefix="gs-paths-"))
        e.update(env)
        self.proc = subprocess.Popen([str(cuprog), "dlsym", *ops, "hold"], env=e,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: List[str] = []
        self.held = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.peak = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.strip() == "held":
                self.held.set()
        self.held.set()  # exited: nothing more to wait for

    def watch(self, timeout: float = 120, after: float = 1.0) -> "Run":
        """Sample NVML until the program holds (or ends), then `after` s more."""
        deadline = time.time() + timeout
        while not self.held.is_set() and time.time() < deadline:
            self.peak = max(self.peak, nvml_used(self.proc.pid))
            time.sleep(0.02)
        end = time.time() + after
        while self.proc.poll() is None and time.time() < end:
            self.peak = max(self.peak, nvml_used(self.proc.pid))
            time.sleep(0.02)
        return self

    def release(self) -> str:
        _, err = self.proc.communicate(timeout=60)
        self.reader.join(timeout=10)
        return err

    def rcs(self, op: str) -> List[int]:
        return [int(line.split()[1]) for line in self.lines
                if line.split() and line.split()[0] == op and len(line.split()) > 1]

    def values(self, op: str) -> List[List[int]]:
        return [[int(x) for x in line.split()[1:]] for line in self.lines
                if line.split() and line.split()[0] == op]


# Each path: the ops, then the codes expected of the op that makes memory
# through it (first fits, next refused), and extra environment.
PathCase = Tuple[List[str], str, List[int], Dict[str, str]]
PATHS: Dict[str, PathCase] = {
    "cuMemAlloc": (["alloc", "3G", "alloc", "2G"], "alloc", [0, OOM], {}),
    "cuMemAllocPitch": (["pitch", "65536", "49152", "pitch", "65536", "32768"], "pitch",
                        [0, OOM], {}),
    "cuMemAllocManaged": (["managed", "3G", "managed", "2G"], "managed", [0, OOM], {}),
    "view": (["info", "total", "0", "alloc", "1G", "info"], "alloc", [0], {}),
    "cuMemHostAlloc": (["hostalloc", "2G", "alloc", "3G"], "alloc", [0], {}),
    "cuMemCreate": (["vmm", "0", "3G", "vmmmap", "3G", "vmmforget", "vmm", "0", "2G"], "vmm",
                    [0, OOM], {}),
    "cuMemAllocAsync": (["async", "3G", "sync", "async", "2G"], "async", [0, OOM], {}),
    "pool": (["mkpool", "async-on", "3G", "sync", "async-on", "2G"], "async-on", [0, OOM], {}),
    "cuArray3DCreate": (["array3d", "1024", "1024", "192", "array3d", "1024", "1024", "128"],
                        "array3d", [0, OOM], {}),
    "cuCtxSetLimit": (["limit", "heap", "3G", "limit", "heap", "5G"], "limit", [0, OOM], {}),
    "contexts": (["ctx", "0", "ctx", "0", "alloc", "2G", "alloc", "2G"], "alloc", [0, OOM], {}),
    # The case: 3 GiB, then a graph of 2 GiB; then one of 256 MiB runs.
    "graph": (["alloc", "3G", "gnode", "0", "2G", "ginst", "gnew", "gnode", "0", "256M", "gfree",
               "ginst", "glaunch", "sync", "glaunch", "sync", "greserved", "0"], "ginst",
              [OOM, 0], {}),
    "graph capture": (["alloc", "3G", "gcapture", "2G", "0", "ginst", "gnew", "gcapture", "256M",
                       "0", "ginst", "glaunch", "sync", "greserved", "0"], "ginst", [OOM, 0], {}),
    "graph trim": (["gnode", "0", "2G", "gfree", "ginst", "glaunch", "sync", "gexecdestroy",
                    "alloc", "3G", "greserved", "0"], "alloc", [0], {}),
    "module": (["alloc", "3G", "module", PTX.replace("SIZE", str(GIB)), "module",
                PTX.replace("SIZE", str(64 * MIB))], "module", [OOM, 0],
               {"CUDA_MODULE_LOADING": "EAGER"}),
}


def run_path(cuprog: Path, name: str, neighbour: Run, before: int) -> None:
    ops, op, want, env = PATHS[name]
    run = Run(cuprog, ["init", "pctx", "0", *ops], True, **env).watch()
    held_now = nvml_used(run.proc.pid)
    err = run.release()
    got = run.rcs(op)
    check(f"{name}: {op} codes", want, got, got == want)
    if name == "module":
        # The load is checked right after it: for that moment the driver
        # holds more; what it holds afterwards is within the cap.
        measured(f"{name}: NVML peak around the refused load (MiB)", run.peak // MIB)
        check(f"{name}: NVML after (MiB)", f"<= {CAP // MIB}", held_now // MIB,
              0 < held_now <= CAP)
    else:
        check(f"{name}: NVML peak from outside (MiB)", f"<= {CAP // MIB}", run.peak // MIB,
              0 < run.peak <= CAP)
    if name == "view":
        info = run.values("info")
        check("view: cuMemGetInfo total", CAP, info[0][2] if info else None,
              bool(info) and info[0][2] == CAP)
        total = run.values("total")
        check("view: cuDeviceTotalMem", CAP, total[0][1] if total else None,
              bool(total) and total[0][1] == CAP)
    if name.startswith("graph"):
        reserved = run.values("greserved")
        measured(f"{name}: graph pool reserved (MiB)", reserved[0][1] // MIB if reserved else "?")
    after = nvml_used(neighbour.proc.pid)
    check(f"{name}: neighbour's NVML (MiB)", before // MIB, after // MIB, after == before)
    if err.strip():
        print(f"{name}: {err.strip()[-300:]}", file=sys.stderr)


def driver_names(lib: Path) -> List[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True).stdout
    return [line.split()[-1].split("@")[0] for line in out.splitlines()
            if line.split() and line.split()[-1].startswith("cu")]


def header_names() -> Optional[List[str]]:
    """Every function cuda.h declares, with the toolkit; None without it."""
    from check_decls import toolkit_include

    inc = toolkit_include()
    if inc is None:
        return None
    text = (inc / "cuda.h").read_text(errors="replace")
    declared = re.findall(r"CUresult CUDAAPI (cu\w+)\s*\(", text)
    # cuda.h renames the current variant of each entry point with #define.
    renamed = re.findall(r"#define\s+cu\w+\s+(cu\w+)", text)
    return sorted(set(declared + renamed))


def main() -> int:
    import pynvml

    subprocess.run(["make", "-s", "-C", str(REPO / "native" / "shim")], check=True)
    rows = memory_paths.table()
    lib = libcuda()
    check("libcuda.so.1 found (ldconfig -p)", "present", lib, lib is not None)
    if lib is None:
        return report()
    exports = driver_names(lib)
    missing = memory_paths.unaccounted(exports, rows)
    check("libcuda.so.1's memory entry points in the README table", "all",
          ", ".join(missing) or f"all {sum(1 for e in exports if memory_paths.MEMORY_API.match(e))}",
          not missing)
    declared = header_names()
    if declared is None:
        measured("cuda.h's memory entry points in the README table", "no toolkit here")
    else:
        missing = memory_paths.unaccounted(declared, rows)
        check("cuda.h's memory entry points in the README table", "all",
              ", ".join(missing) or "all", not missing)
    work = Path(tempfile.mkdtemp(prefix="gs-paths-"))
    cuprog = work / "cuprog"
    res = build_cuprog(lib, cuprog)
    check("cuprog built against libcuda.so.1", "0 errors",
          (res.stderr.strip().splitlines() or ["0 errors"])[0], res.returncode == 0)
    if res.returncode:
        return report()
    pynvml.nvmlInit()
    neighbour = Run(cuprog, ["init", "pctx", "0", "alloc", "1G"], False).watch(after=0.5)
    before = nvml_used(neighbour.proc.pid)
    check("neighbour (no shim) holds 1 GiB and its context (MiB)", "> 1024", before // MIB,
          before > GIB)
    for name in PATHS:
        try:
            run_path(cuprog, name, neighbour, before)
        except Exception as e:  # one broken path must not hide the others' results
            check(f"{name} ran", "no exception", repr(e)[:60], False)
    neighbour.release()
    check("neighbour's own allocation", [0], neighbour.rcs("alloc"), neighbour.rcs("alloc") == [0])
    return report()


if __name__ == "__main__":
    sys.exit(main())

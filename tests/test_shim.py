"""libgpuslice.so against the fake driver: caps enforced and reported, on every path.

Each test drives tests/shim/cuprog (the CUDA driver API the way programs use
it) with the shim preloaded, in its own state dir, and reads the shared
region from outside through ocihook.region, as the host tools do. The whole
suite runs three times: against the plain, the ASan+UBSan and the TSan build
of the shim (test programs built with the same sanitizer); a sanitizer
report fails the test.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ocihook import cheader, region  # noqa: E402

SHIM_DIR = REPO / "native" / "shim"
PROGS_DIR = REPO / "tests" / "shim"
MIB = 1 << 20
GIB = 1 << 30
OOM = 2
VIAS = ["direct", "dlsym", "gpa", "gpa2", "gpa-pt"]
SAN_MARKERS = ("ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:",
               "ERROR: LeakSanitizer")


class Variant:
    def __init__(self, name: str) -> None:
        self.name = name
        build = {"plain": "build", "asan": "build-asan", "tsan": "build-tsan"}[name]
        self.shim = SHIM_DIR / build / "libgpuslice.so"
        self.bin = PROGS_DIR / f"build-{name}"

    def preload(self, instrumented: bool = True) -> str:
        # ASan must come first in the library list; into an uninstrumented
        # program (python) either runtime is preloaded ahead of the shim.
        if self.name == "asan" or (self.name == "tsan" and not instrumented):
            lib = "libasan.so" if self.name == "asan" else "libtsan.so"
            rt = subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True,
                                text=True, check=True).stdout.strip()
            return f"{os.path.realpath(rt)}:{self.shim}"
        return str(self.shim)

    def sanitizer_env(self, instrumented: bool = True) -> Dict[str, str]:
        return {
            "ASAN_OPTIONS": "exitcode=66:detect_leaks=%d" % (1 if instrumented else 0),
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=66",
            "TSAN_OPTIONS": "halt_on_error=1:exitcode=66",
        }


@pytest.fixture(scope="session", params=["plain", "asan", "tsan"])
def variant(request, fakedriver: Path) -> Variant:
    v = Variant(request.param)
    subprocess.run(["make", "-s", "-C", str(PROGS_DIR), f"VARIANT={v.name}"], check=True)
    assert v.shim.exists() and (v.bin / "cuprog").exists()
    return v


class Shim:
    """Runs cuprog with the shim in one state dir."""

    def __init__(self, variant: Variant, env: Dict[str, str], state: Path) -> None:
        self.variant = variant
        self.state = state
        self.env = dict(env)
        self.env.update(variant.sanitizer_env())
        self.env.update(LD_PRELOAD=variant.preload(), GPUSLICE_STATE_DIR=str(state),
                        GPUSLICE_CONTEXT_RESERVE="0", GPUSLICE_MEMORY_LIMIT_0="1GiB",
                        GPUSLICE_MEMORY_LIMIT_1="2GiB")
        for k in ("GPUSLICE_MEMORY_LIMIT", "GPUSLICE_DISABLE", "GPUSLICE_LOG"):
            self.env.pop(k, None)

    def with_env(self, **kw: Optional[str]) -> "Shim":
        s = Shim.__new__(Shim)
        s.variant, s.state, s.env = self.variant, self.state, dict(self.env)
        for k, v in kw.items():
            if v is None:
                s.env.pop(k, None)
            else:
                s.env[k] = v
        return s

    def argv(self, via: str, *ops: str) -> List[str]:
        return [str(self.variant.bin / "cuprog"), via, *ops]

    def run(self, via: str, *ops: str, timeout: float = 60) -> subprocess.CompletedProcess:
        res = subprocess.run(self.argv(via, *ops), env=self.env, capture_output=True,
                             text=True, timeout=timeout)
        clean(res.stderr)
        assert res.returncode == 0, res.stderr
        return res

    def start(self, via: str, *ops: str) -> subprocess.Popen:
        """Ops ending in `hold`: returns once the program holds (or has failed)."""
        p = subprocess.Popen(self.argv(via, *ops), env=self.env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.lines = []  # type: ignore[attr-defined]
        return p

    def region(self) -> region.Region:
        return region.read(str(self.state / "region"))


def clean(stderr: str) -> None:
    for marker in SAN_MARKERS:
        assert marker not in stderr, stderr


def wait_held(p: subprocess.Popen, timeout: float = 60) -> List[str]:
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"exited early: {out} {p.stderr.read()}")
        out.append(line.strip())
        if line.strip() == "held":
            return out
    raise AssertionError(f"not held in time: {out}")


def release(p: subprocess.Popen) -> str:
    _, err = p.communicate(timeout=60)
    clean(err)
    assert p.returncode == 0, err
    return err


def results(res_or_lines) -> List[List[str]]:
    text = res_or_lines.stdout if hasattr(res_or_lines, "stdout") else \
        res_or_lines if isinstance(res_or_lines, str) else "\n".join(res_or_lines)
    return [line.split() for line in text.splitlines() if line.strip()]


def rc_of(rows: List[List[str]], op: str, nth: int = 0) -> int:
    return int([r for r in rows if r[0] == op][nth][1])


def value_of(rows: List[List[str]], op: str, nth: int = 0) -> List[int]:
    return [int(x) for x in [r for r in rows if r[0] == op][nth][1:]]


@pytest.fixture
def shim(variant: Variant, fake_env, tmp_path: Path) -> Shim:
    return Shim(variant, fake_env(2), tmp_path / "state")


# ----------------------------------------------------------------- C units


def test_unit_parts(variant: Variant, tmp_path: Path) -> None:
    env = dict(os.environ, **variant.sanitizer_env())
    res = subprocess.run([str(variant.bin / "unit_shim"), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    clean(res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split() == ["ok", "parse_size", "ok", "config", "ok", "ptrmap", "ok",
                                  "region", "ok", "layout_mismatch", "ok", "rm_filter"]


def test_dlsym_override_keeps_rtld_next(variant: Variant) -> None:
    # A library that interposes getpid via dlsym(RTLD_NEXT) must get libc's.
    env = dict(os.environ, LD_PRELOAD=variant.preload(), **variant.sanitizer_env())
    res = subprocess.run([str(variant.bin / "rtld_next")], env=env, capture_output=True,
                         text=True, timeout=60)
    clean(res.stderr)
    assert res.returncode == 0, res.stderr


# -------------------------------------------------------------------- caps


@pytest.mark.parametrize("via", VIAS)
def test_caps_per_device(shim: Shim, via: str) -> None:
    rows = results(shim.run(via, "init", "pctx", "0", "info", "total", "0", "total", "1",
                            "fill", "64M", "alloc", "1", "info", "freeall", "info",
                            "pctx", "1", "fill", "128M", "alloc", "1", "info", "total", "1"))
    assert rc_of(rows, "init") == 0 and rc_of(rows, "pctx") == 0
    assert value_of(rows, "info", 0) == [0, GIB, GIB]        # free, total = the cap
    assert value_of(rows, "total", 0) == [0, GIB]
    assert value_of(rows, "total", 1) == [0, 2 * GIB]
    assert value_of(rows, "fill", 0) == [OOM, GIB]          # up to the cap exactly
    assert rc_of(rows, "alloc", 0) == OOM                   # one more byte
    assert value_of(rows, "info", 1) == [0, 0, GIB]
    assert value_of(rows, "info", 2) == [0, GIB, GIB]       # free restores
    assert value_of(rows, "fill", 1) == [OOM, 2 * GIB]      # device 1: its own cap
    assert rc_of(rows, "alloc", 1) == OOM
    assert value_of(rows, "info", 3) == [0, 0, 2 * GIB]


def test_get_proc_address_of_itself_is_the_shims(shim: Shim) -> None:
    rows = results(shim.run("direct", "init", "gpaself"))
    assert value_of(rows, "gpaself") == [0, 1]


def test_uncapped_device_passes_through(shim: Shim) -> None:
    s = shim.with_env(GPUSLICE_MEMORY_LIMIT_1=None)
    rows = results(s.run("direct", "init", "pctx", "1", "alloc", "3G", "info", "total", "1"))
    assert rc_of(rows, "alloc") == 0
    assert value_of(rows, "total") == [0, 143771 * MIB]
    assert value_of(rows, "info")[2] == 143771 * MIB


def test_region_records_devices_and_usage(shim: Shim) -> None:
    p = shim.start("direct", "init", "pctx", "0", "alloc", "300M", "pitch", "1000", "1024",
                   "hold")
    rows = results(wait_held(p))
    pitch = value_of(rows, "pitch")
    assert pitch[0] == 0 and pitch[1] >= 1000
    reg = shim.region()
    assert reg.devices[0].uuid == "GPU-000000a0-1111-2222-3333-000000000000"
    assert reg.devices[0].limit_bytes == GIB and reg.devices[1].limit_bytes == 2 * GIB
    assert reg.devices[0].total_bytes == 143771 * MIB
    assert reg.devices[0].used_bytes == 300 * MIB + pitch[1] * 1024  # settled on pitch*height
    (proc,) = reg.procs
    assert proc.pid == p.pid and proc.used[0][1] == reg.devices[0].used_bytes
    release(p)


# ------------------------------------------------------------------- races


def test_four_processes_race_for_one_cap(shim: Shim, tmp_path: Path) -> None:
    for rnd in range(3):
        go = tmp_path / f"go{rnd}"
        procs = [shim.start("direct", "init", "pctx", "0", "waitfile", str(go), "fill", "64M",
                            "hold") for _ in range(4)]
        time.sleep(0.2)
        go.touch()
        granted = [value_of(results(wait_held(p)), "fill")[1] for p in procs]
        assert sum(granted) == GIB, granted  # every chunk fits exactly: no more, no less
        reg = shim.region()
        assert reg.devices[0].used_bytes == sum(granted)
        by_pid = {pr.pid: pr.used[0][1] for pr in reg.procs}
        assert sorted(by_pid[p.pid] for p in procs) == sorted(granted)
        for p in procs:
            release(p)  # exits holding its memory: the next round reclaims it


def test_two_processes_race_for_the_last_600mib(shim: Shim, tmp_path: Path) -> None:
    for rnd in range(5):
        go = tmp_path / f"go{rnd}"
        procs = [shim.start("direct", "init", "pctx", "0", "waitfile", str(go), "alloc",
                            "600M", "hold") for _ in range(2)]
        time.sleep(0.1)
        go.touch()
        rcs = sorted(rc_of(results(wait_held(p)), "alloc") for p in procs)
        assert rcs == [0, OOM]
        assert shim.region().devices[0].used_bytes == 600 * MIB
        for p in procs:
            release(p)


def test_64_threads_first_call_at_once(shim: Shim) -> None:
    rows = results(shim.run("direct", "threads", "64", "32M", timeout=120))
    errors, granted = value_of(rows, "threads")
    assert errors == 0 and granted == 32  # 32 x 32 MiB = the 1 GiB cap


# ------------------------------------------------------------- API families


@pytest.mark.parametrize("via", ["direct", "gpa", "gpa-pt"])
def test_vmm_and_pools_capped(shim: Shim, via: str) -> None:
    rows = results(shim.run(via, "init", "pctx", "0",
                            "vmm", "0", "512M", "vmm", "0", "512M", "vmm", "0", "2M",
                            "vmmrel", "vmm", "0", "512M", "vmmrel", "vmmrel", "info",
                            "async", "512M", "pool", "512M", "async", "2M", "asyncfree",
                            "pool", "512M", "asyncfree", "asyncfree", "info", "sync", "info"))
    vmm = [int(r[1]) for r in rows if r[0] == "vmm"]
    assert vmm == [0, 0, OOM, 0]
    assert value_of(rows, "info", 0) == [0, GIB, GIB]
    assert rc_of(rows, "async", 0) == 0 and rc_of(rows, "pool", 0) == 0
    assert rc_of(rows, "async", 1) == OOM
    assert rc_of(rows, "pool", 1) == 0  # served from what the pool already holds
    # Freed but still held by the pool (no sync yet): still charged.
    assert value_of(rows, "info", 1) == [0, 0, GIB]
    # The sync let the pool give it back; the next look settles the charge.
    assert value_of(rows, "info", 2) == [0, GIB, GIB]


def test_a_released_handle_stays_charged_while_mapped(shim: Shim, tmp_path: Path) -> None:
    """cuMemCreate, cuMemMap, cuMemRelease at once: the driver keeps the
    memory until the unmap, and so does the charge."""
    rows = results(procs_shim(shim, tmp_path).run(
        "gpa", "init", "pctx", "0", "vmm", "0", "512M", "vmmmap", "512M", "vmmforget",
        "vmm", "0", "512M", "resident", "0", "vmmunmap", "vmm", "0", "512M", "resident", "0"))
    assert [int(r[1]) for r in rows if r[0] == "vmm"] == [0, OOM, 0]
    assert rc_of(rows, "vmmforget") == 0 and rc_of(rows, "vmmunmap") == 0
    assert [int(r[2]) for r in rows if r[0] == "resident"] == [812 * MIB, 812 * MIB]


def test_memory_a_pool_keeps_is_charged(shim: Shim) -> None:
    """A pool that keeps what it frees (CuPy's async pool does) still counts:
    without this, async-free then cudaMalloc would hold more than the cap."""
    rows = results(shim.run("direct", "init", "pctx", "0", "keepall",
                            "async", "512M", "asyncfree", "sync", "alloc", "768M",
                            "async", "512M", "asyncfree", "info",
                            "trim", "0", "alloc", "768M", "info"))
    assert rc_of(rows, "alloc", 0) == OOM  # the pool still holds 512 MiB of the 1 GiB
    assert rc_of(rows, "async", 1) == 0  # reuses what the pool holds: no new charge
    assert value_of(rows, "info", 0) == [0, GIB - 512 * MIB, GIB]
    assert rc_of(rows, "trim", 0) == 0
    assert rc_of(rows, "alloc", 1) == 0  # trimmed: the 512 MiB are free again
    assert value_of(rows, "info", 1) == [0, GIB - 768 * MIB, GIB]


def test_every_allocation_family_settles_pools_before_refusing(shim: Shim) -> None:
    # The pool gave its 512 MiB back at the sync; only a settle can tell.
    for family in (["alloc", "768M"], ["vmm", "0", "768M"]):
        rows = results(shim.run("direct", "init", "pctx", "0", "async", "512M", "asyncfree",
                                "sync", *family))
        assert rc_of(rows, family[0], 0) == 0, family


def test_destroyed_pool_gives_its_charge_back(shim: Shim) -> None:
    rows = results(shim.run("direct", "init", "pctx", "0", "mkpool", "async-on", "512M",
                            "asyncfree", "info", "rmpool", "info"))
    assert value_of(rows, "info", 0) == [0, GIB - 512 * MIB, GIB]
    assert rc_of(rows, "rmpool", 0) == 0
    assert value_of(rows, "info", 1) == [0, GIB, GIB]


def test_managed_memory_counts(shim: Shim) -> None:
    # Managed memory can live on the device: it is charged like cuMemAlloc.
    rows = results(shim.run("direct", "init", "pctx", "0", "managed", "1G", "managed", "1"))
    assert [int(r[1]) for r in rows if r[0] == "managed"] == [0, OOM]  # managed counts


def test_arrays_capped(shim: Shim) -> None:
    rows = results(shim.run("direct", "init", "pctx", "0",
                            "array", "8192", "8192", "array", "1", "1", "arrdestroy",
                            "array3d", "1024", "1024", "64", "arrdestroy",
                            "mipmap", "8192", "8192", "2", "mipmap", "4096", "4096", "2",
                            "info", "mipdestroy", "info"))
    arrays = [int(r[1]) for r in rows if r[0] in ("array", "array3d")]
    assert arrays == [0, OOM, 0]          # 8192*8192 float4 = 1 GiB
    mips = [int(r[1]) for r in rows if r[0] == "mipmap"]
    assert mips == [OOM, 0]               # 1 GiB + 256 MiB > cap; 256 + 64 MiB fits
    assert value_of(rows, "info", 0) == [0, GIB - 320 * MIB, GIB]
    assert value_of(rows, "info", 1) == [0, GIB, GIB]


@pytest.mark.parametrize("via", ["direct", "dlsym"])
def test_cuda_2_arrays_and_pitch_are_capped(shim: Shim, via: str) -> None:
    rows = results(shim.run(via, "init", "pctx", "0", "array1", "8192", "8192",
                            "array1", "1", "1", "arrdestroy", "array3d1", "1024", "1024", "64",
                            "array3d1", "1024", "1024", "1", "info", "arrdestroy", "pitch1", "1536M", "1",
                            "pitch1", "1024", "1"))
    assert [int(r[1]) for r in rows if r[0] in ("array1", "array3d1")] == [0, OOM, 0, OOM]
    assert value_of(rows, "info") == [0, 0, GIB]  # the 3D one holds the whole cap
    # The 32-bit pointer form is refused by a 64-bit driver; the cap is checked first.
    assert [int(r[1]) for r in rows if r[0] == "pitch1"] == [OOM, 801]


def test_context_reservation(shim: Shim) -> None:
    s = shim.with_env(GPUSLICE_CONTEXT_RESERVE="256MiB")
    p = s.start("direct", "init", "pctx", "0", "ctx", "0", "fill", "64M", "hold")
    rows = results(wait_held(p))
    assert value_of(rows, "fill") == [OOM, GIB - 256 * MIB]  # one reservation per device
    (proc,) = s.region().procs
    assert proc.used[0][0] == 256 * MIB
    release(p)
    rows = results(s.run("direct", "init", "ctx", "0", "ctxdestroy", "pctx", "0",
                         "pctxrel", "0", "ctx", "0", "fill", "256M"))
    assert value_of(rows, "fill") == [OOM, 3 * 256 * MIB]


@pytest.mark.parametrize("via", ["direct", "dlsym", "gpa"])
def test_green_and_legacy_contexts_are_contexts(shim: Shim, via: str) -> None:
    s = shim.with_env(GPUSLICE_CONTEXT_RESERVE="256MiB")
    p = s.start(via, "init", "green", "0", "hold")  # a green context is not made current
    rows = results(wait_held(p))
    assert rc_of(rows, "green") == 0
    (proc,) = s.region().procs
    assert proc.used[0][0] == 256 * MIB
    release(p)
    rows = results(s.run(via, "init", "green", "0", "greendestroy", "ctx1", "0",
                         "fill", "64M", "freeall", "ctx1destroy", "pctx", "0", "info"))
    assert rc_of(rows, "greendestroy") == 0 and rc_of(rows, "ctx1") == 0
    assert value_of(rows, "fill") == [OOM, GIB - 256 * MIB]
    assert rc_of(rows, "ctx1destroy") == 0
    assert value_of(rows, "info") == [0, GIB - 256 * MIB, GIB]  # the primary's only


@pytest.mark.parametrize("kind", ["glctx", "vdpauctx"])
def test_interop_contexts_are_contexts(shim: Shim, kind: str) -> None:
    s = shim.with_env(GPUSLICE_CONTEXT_RESERVE="256MiB")
    rows = results(s.run("dlsym", "init", kind, "0", "fill", "64M", "freeall", "ctxdestroy",
                         "pctx", "0", "info"))
    assert rc_of(rows, kind) == 0 and rc_of(rows, "ctxdestroy") == 0
    assert value_of(rows, "fill") == [OOM, GIB - 256 * MIB]
    assert value_of(rows, "info") == [0, GIB - 256 * MIB, GIB]


@pytest.mark.parametrize("op", ["module", "library"])
def test_a_module_whose_globals_pass_the_cap_is_unloaded_and_refused(shim: Shim, tmp_path: Path,
                                                                   op: str) -> None:
    # 300 MiB context + 300 MiB: 256 MiB of globals fit, 512 MiB more do not.
    rows = results(procs_shim(shim, tmp_path).run(
        "dlsym", "init", "pctx", "0", "alloc", "300M", op, f"globals={256 * MIB}",
        op, f"globals={512 * MIB}", "resident", "0", "info", "alloc", "100M"))
    assert [int(r[1]) for r in rows if r[0] == op] == [0, OOM]
    assert [int(r[2]) for r in rows if r[0] == "resident"] == [856 * MIB]  # undone
    assert value_of(rows, "info") == [0, GIB - 856 * MIB, GIB]
    assert rc_of(rows, "alloc", 1) == 0


def test_limits_that_reserve_memory_are_capped(shim: Shim, tmp_path: Path) -> None:
    # 300 MiB context + 300 MiB: a 264 MiB heap (256 more than the default)
    # fits, a stack of 1 KiB more per resident thread (264 MiB) does not.
    rows = results(procs_shim(shim, tmp_path).run(
        "gpa", "init", "pctx", "0", "alloc", "300M", "limit", "heap", "264M",
        "limit", "stack", "2048", "limit", "printf", "100M", "launch", "kernel", "1",
        "resident", "0", "info"))
    assert [int(r[1]) for r in rows if r[0] == "limit"] == [0, OOM, 0]
    used = 300 * MIB + 300 * MIB + 256 * MIB + 99 * MIB
    assert [int(r[2]) for r in rows if r[0] == "resident"] == [used]  # the heap since the launch
    assert value_of(rows, "info") == [0, GIB - used, GIB]


def test_a_heap_the_driver_has_not_made_resident_stays_charged(shim: Shim,
                                                                tmp_path: Path) -> None:
    # The driver makes a raised malloc heap resident at the next launch, not
    # at cuCtxSetLimit: a settle in between (the module load after each
    # raise) must not give its charge back. 300 MiB context: a 400 MiB heap
    # fits, raising it to 800 MiB does not, though nothing of it is resident.
    rows = results(procs_shim(shim, tmp_path).run(
        "direct", "init", "pctx", "0", "limit", "heap", "408M", "module", "globals=0", "resident", "0",
        "limit", "heap", "808M", "module", "globals=0", "launch", "kernel", "1", "resident", "0",
        "info"))
    assert [int(r[1]) for r in rows if r[0] == "limit"] == [0, OOM]
    assert [int(r[2]) for r in rows if r[0] == "resident"] == [300 * MIB, 700 * MIB]
    assert value_of(rows, "info") == [0, GIB - 700 * MIB, GIB]


def test_code_a_module_loads_at_its_first_launch_stays_within_the_reserve(
        shim: Shim, tmp_path: Path) -> None:
    # Kernels load lazily: a module's code (32 MiB here) reaches the context
    # at its first launch, when no call of ours looks. The fixed charge
    # (350 MiB over a 300 MiB context) is the headroom for it: the load must
    # not settle it away. A second process then fills the cap; what the
    # driver holds for both never exceeds it (on the H200 it did, by ~90 MiB
    # a process, while loads lowered the charge).
    s = procs_shim(shim, tmp_path, GPUSLICE_CONTEXT_RESERVE="350MiB")
    p = s.start("direct", "init", "pctx", "0", "module", f"globals=0,code={32 * MIB}",
                "launch", "kernel", "1", "resident", "0", "hold")
    try:
        held = results(wait_held(p))
        assert [int(r[2]) for r in held if r[0] == "resident"] == [332 * MIB]
        q = s.start("direct", "init", "pctx", "0", "fill", "8M", "hold")
        try:
            assert value_of(results(wait_held(q)), "fill")[1] > 0
            # What the driver holds, read without the shim (NVML inside shows charges).
            (nv,) = results(s.with_env(LD_PRELOAD=None).run("direct", "nvprocs", "0"))
            assert int(nv[1]) == 0 and int(nv[2]) == 2, nv
            assert sum(int(x.split(":")[1]) for x in nv[3:]) <= GIB, nv
        finally:
            release(q)
    finally:
        release(p)


def fake_driver_pid(pid: int) -> int:
    """The pid the fake driver reports for a process of ours (tests/fakedriver/fakeprocs.h)."""
    ino = os.stat("/proc/self/ns/pid").st_ino
    return pid + 1000000 * (1 + ino % 2000)


def procs_shim(shim: Shim, tmp_path: Path, **kw: Optional[str]) -> Shim:
    folder = tmp_path / "fake-procs"
    folder.mkdir(exist_ok=True)
    return shim.with_env(GPUSLICE_FAKE_PROCS=str(folder), **kw)


@pytest.mark.parametrize("reserve", ["768MiB", "100MiB"])
def test_context_is_charged_what_the_driver_holds(shim: Shim, tmp_path: Path,
                                                  reserve: str) -> None:
    # The fake's context costs 300 MiB; the fixed charge, above or below it,
    # is only the estimate checked at creation.
    s = procs_shim(shim, tmp_path, GPUSLICE_CONTEXT_RESERVE=reserve)
    p = s.start("direct", "init", "pctx", "0", "alloc", "128M", "fill", "64M", "hold")
    rows = results(wait_held(p))
    assert value_of(rows, "fill") == [OOM, (1024 - 300 - 128) // 64 * 64 * MIB]
    (proc,) = s.region().procs
    assert proc.used[0][0] == 300 * MIB
    assert proc.host_pid == fake_driver_pid(p.pid)
    release(p)


def test_far_from_the_cap_the_fixed_charge_covers_a_growing_context(shim: Shim,
                                                                      tmp_path: Path) -> None:
    s = procs_shim(shim, tmp_path, GPUSLICE_CONTEXT_RESERVE="768MiB")
    p = s.start("direct", "init", "pctx", "0", "alloc", "64M", "hold")
    wait_held(p)
    (proc,) = s.region().procs
    assert proc.used[0][0] == 768 * MIB  # above the 300 MiB held: not lowered yet
    release(p)
    # Near the cap it comes down to what the driver holds.
    rows = results(s.run("direct", "init", "pctx", "0", "alloc", "64M", "fill", "64M"))
    assert value_of(rows, "fill") == [OOM, (1024 - 300 - 64) // 64 * 64 * MIB]


def test_without_the_drivers_figures_the_fixed_charge_stays(shim: Shim) -> None:
    s = shim.with_env(GPUSLICE_CONTEXT_RESERVE="512MiB")
    p = s.start("direct", "init", "pctx", "0", "fill", "64M", "hold")
    rows = results(wait_held(p))
    assert value_of(rows, "fill") == [OOM, 512 * MIB]
    (proc,) = s.region().procs
    assert proc.used[0][0] == 512 * MIB and proc.host_pid == 0
    release(p)


def test_processes_of_one_cap_share_it_at_their_real_cost(shim: Shim, tmp_path: Path) -> None:
    s = procs_shim(shim, tmp_path)
    first = s.start("direct", "init", "pctx", "0", "alloc", "64M", "hold")
    wait_held(first)
    second = s.start("direct", "init", "pctx", "0", "fill", "16M", "hold")
    rows = results(wait_held(second))
    # 1 GiB - two 300 MiB contexts - 64 MiB
    assert value_of(rows, "fill") == [OOM, (1024 - 600 - 64) // 16 * 16 * MIB]
    procs = s.region().procs
    assert sorted(pr.used[0][0] for pr in procs) == [300 * MIB, 300 * MIB]
    assert sorted(pr.host_pid for pr in procs) == sorted(
        fake_driver_pid(x.pid) for x in (first, second))
    release(second)
    release(first)


def test_near_the_cap_room_is_kept_for_the_drivers_own_share(shim: Shim, tmp_path: Path) -> None:
    # 1 GiB - 300 MiB context - 84 MiB leaves exactly 40 chunks of 16 MiB; the
    # last one needs 2 MiB more for what the driver takes beside it.
    s = procs_shim(shim, tmp_path)
    rows = results(s.run("direct", "init", "pctx", "0", "alloc", "84M", "fill", "16M"))
    assert value_of(rows, "fill") == [OOM, 39 * 16 * MIB]


def test_processes_starting_at_once_each_find_their_pid(shim: Shim, tmp_path: Path) -> None:
    # A driver that gives pids in the caller's namespace (580) lists each as
    # its getpid(): several contexts made at the same moment do not confuse them.
    s = procs_shim(shim, tmp_path, GPUSLICE_FAKE_PIDS="caller")
    ps = [s.start("direct", "init", "pctx", "0", "alloc", "16M", "hold") for _ in range(4)]
    for p in ps:
        wait_held(p)
    procs = s.region().procs
    assert sorted(pr.host_pid for pr in procs) == sorted(p.pid for p in ps)
    assert [pr.used[0][0] for pr in procs] == [300 * MIB] * 4
    for p in ps:
        release(p)


def test_a_forked_child_learns_its_own_driver_pid(shim: Shim, tmp_path: Path) -> None:
    s = procs_shim(shim, tmp_path)
    rows = results(s.run("direct", "init", "pctx", "0", "alloc", "128M", "fork", "256M"))
    assert [int(r[1]) for r in rows if r[0] == "fork"] == [0]


# ------------------------------------------------------- graph memory nodes
#
# The fake card has 140 GiB: every refusal below is the shim's. The context
# is charged what the fake driver holds (300 MiB), so "resident", what the
# fake driver holds on the card, is what NVML would show from outside.

INSTANTIATIONS = ["ginst", "ginst-params", "ginst-upload", "ginst-legacy"]


def graph_shim(shim: Shim, tmp_path: Path) -> Shim:
    return procs_shim(shim, tmp_path)


def residents(rows: List[List[str]]) -> List[int]:
    got = [int(r[2]) for r in rows if r[0] == "resident"]
    assert got and all(int(r[1]) == 0 for r in rows if r[0] == "resident"), rows
    return got


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("inst", INSTANTIATIONS)
def test_graph_alloc_nodes_are_capped(shim: Shim, tmp_path: Path, via: str, inst: str) -> None:
    # 300 MiB context + 300 MiB: a 256 MiB graph fits, a second does not.
    rows = results(graph_shim(shim, tmp_path).run(
        via, "init", "pctx", "0", "alloc", "300M", "gnode", "0", "256M", "gfree", inst,
        "glaunch", "glaunch", "resident", "0", "gnew", "gnode", "0", "256M", inst,
        "resident", "0", "info"))
    assert rc_of(rows, inst, 0) == 0 and rc_of(rows, "glaunch", 1) == 0
    assert rc_of(rows, inst, 1) == OOM
    assert residents(rows) == [856 * MIB, 856 * MIB]  # the launch made it resident
    assert value_of(rows, "info") == [0, GIB - 856 * MIB, GIB]


@pytest.mark.parametrize("keep", ["0", "1"])
def test_captured_async_allocations_are_charged_at_instantiation(shim: Shim, tmp_path: Path,
                                                                 keep: str) -> None:
    # Captured, cuMemAllocAsync makes a node, not memory: never refused then.
    rows = results(graph_shim(shim, tmp_path).run(
        "gpa-pt", "init", "pctx", "0", "alloc", "300M", "gcapture", "512M", keep, "ginst",
        "gnew", "gcapture", "256M", keep, "ginst", "glaunch", "resident", "0", "info"))
    assert [int(r[1]) for r in rows if r[0] == "gcapture"] == [0, 0]
    assert [int(r[1]) for r in rows if r[0] == "ginst"] == [OOM, 0]
    assert rc_of(rows, "glaunch") == 0
    assert residents(rows) == [856 * MIB]
    assert value_of(rows, "info") == [0, GIB - 856 * MIB, GIB]


def test_alloc_nodes_of_child_graphs_count(shim: Shim, tmp_path: Path) -> None:
    rows = results(graph_shim(shim, tmp_path).run(
        "direct", "init", "pctx", "0", "gnode", "0", "256M", "gchild", "ginst", "glaunch",
        "gnew", "gnode", "0", "512M", "gchild", "gchild", "ginst", "resident", "0"))
    assert [int(r[1]) for r in rows if r[0] == "ginst"] == [0, OOM]
    assert residents(rows) == [556 * MIB]


def test_graph_update_charges_what_it_adds(shim: Shim, tmp_path: Path) -> None:
    rows = results(graph_shim(shim, tmp_path).run(
        "gpa", "init", "pctx", "0", "alloc", "300M", "gnode", "0", "128M", "ginst", "glaunch",
        "gnew", "gnode", "0", "256M", "gupdate", "resident", "0",
        "gnew", "gnode", "0", "512M", "gupdate", "resident", "0", "glaunch", "info"))
    assert [int(r[1]) for r in rows if r[0] == "gupdate"] == [0, OOM]
    assert residents(rows) == [856 * MIB, 856 * MIB]
    assert value_of(rows, "info") == [0, GIB - 856 * MIB, GIB]


def test_graph_memory_is_released_at_trim_not_at_destroy(shim: Shim, tmp_path: Path) -> None:
    rows = results(graph_shim(shim, tmp_path).run(
        "direct", "init", "pctx", "0", "alloc", "300M", "gnode", "0", "256M", "ginst",
        "glaunch", "gexecdestroy", "resident", "0", "info", "gtrim", "0", "resident", "0",
        "info"))
    assert residents(rows) == [856 * MIB, 600 * MIB]  # the pool kept it until the trim
    assert value_of(rows, "info", 0) == [0, GIB - 856 * MIB, GIB]
    assert value_of(rows, "info", 1) == [0, GIB - 600 * MIB, GIB]


def test_an_allocation_that_needs_it_trims_what_destroyed_graphs_left(shim: Shim,
                                                                      tmp_path: Path) -> None:
    rows = results(graph_shim(shim, tmp_path).run(
        "direct", "init", "pctx", "0", "alloc", "300M", "gnode", "0", "256M", "ginst",
        "glaunch", "gexecdestroy", "alloc", "300M", "resident", "0", "greserved", "0"))
    assert rc_of(rows, "alloc", 1) == 0
    assert residents(rows) == [900 * MIB]
    assert value_of(rows, "greserved") == [0, 0]


def test_a_trimmed_live_graph_keeps_its_charge_for_its_next_launch(shim: Shim,
                                                                     tmp_path: Path) -> None:
    # The trim unmaps the live graph; its next launch maps it again, so the
    # room must still be its: without that the last launch would take the
    # card's 1,056 MiB, past the cap.
    rows = results(graph_shim(shim, tmp_path).run(
        "direct", "init", "pctx", "0", "alloc", "300M", "gnode", "0", "256M", "ginst",
        "glaunch", "gtrim", "0", "resident", "0", "alloc", "200M", "glaunch", "resident", "0"))
    assert rc_of(rows, "alloc", 1) == OOM
    assert rc_of(rows, "glaunch", 1) == 0
    assert residents(rows) == [600 * MIB, 856 * MIB]


def test_graphs_instantiated_from_many_threads_at_once_share_the_cap(shim: Shim,
                                                                     tmp_path: Path) -> None:
    # 1 GiB less the 300 MiB context: room for five 128 MiB graphs of 16.
    rows = results(graph_shim(shim, tmp_path).run("direct", "init", "pctx", "0",
                                                  "gthreads", "16", "128M", "resident", "0"))
    assert value_of(rows, "gthreads") == [0, 5, 11]
    assert residents(rows) == [300 * MIB + 5 * 128 * MIB]


def test_graph_memory_on_an_uncapped_device_passes_through(shim: Shim, tmp_path: Path) -> None:
    s = graph_shim(shim, tmp_path).with_env(GPUSLICE_MEMORY_LIMIT_1=None)
    rows = results(s.run("direct", "init", "pctx", "1", "gnode", "1", "3G", "ginst", "glaunch",
                         "resident", "1"))
    assert rc_of(rows, "ginst") == 0 and rc_of(rows, "glaunch") == 0
    assert residents(rows) == [300 * MIB + 3 * GIB]
    assert all(p.used[1][3] == 0 for p in s.region().procs)


# --------------------------------------------------------- process lifetime


def test_reclaim_after_sigkill(shim: Shim) -> None:
    p = shim.start("direct", "init", "pctx", "0", "alloc", "768M", "hold")
    assert rc_of(results(wait_held(p)), "alloc") == 0
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    p.stdout.close(), p.stderr.close(), p.stdin.close()
    rows = results(shim.run("direct", "init", "pctx", "0", "alloc", "768M"))
    assert rc_of(rows, "alloc") == 0
    assert [pr.pid for pr in shim.region().procs] != [p.pid]


def test_fork_child_within_the_same_cap(shim: Shim) -> None:
    rows = results(shim.run("direct", "init", "pctx", "0", "alloc", "768M",
                            "fork", "256M", "fork", "257M", "fork", "256M"))
    assert [int(r[1]) for r in rows if r[0] == "fork"] == [0, OOM, 0]


# ----------------------------------------------------------------- config


def test_malformed_limit_fails_closed(shim: Shim) -> None:
    s = shim.with_env(GPUSLICE_MEMORY_LIMIT="12parsecs", GPUSLICE_MEMORY_LIMIT_0=None,
                      GPUSLICE_MEMORY_LIMIT_1=None)
    res = s.run("direct", "init", "pctx", "0", "alloc", "1", "vmm", "0", "2M", "async", "1M",
                "managed", "1", "array", "1", "1", "info")
    rows = results(res)
    assert rc_of(rows, "init") == 0
    for op in ("pctx", "alloc", "vmm", "async", "managed", "array"):
        assert rc_of(rows, op) == OOM, op
    errors = [line for line in res.stderr.splitlines() if "gpuslice" in line]
    assert len(errors) == 1, res.stderr
    assert "GPUSLICE_MEMORY_LIMIT" in errors[0] and '"12parsecs"' in errors[0]
    assert "at least 1MiB" in errors[0]


def test_hami_alias_and_small_cap(shim: Shim) -> None:
    # Any size of at least 1 MiB is a cap (the 128 MiB rule is the accountant's).
    s = shim.with_env(GPUSLICE_MEMORY_LIMIT_0=None, CUDA_DEVICE_MEMORY_LIMIT_0="100m")
    rows = results(s.run("direct", "init", "pctx", "0", "fill", "32M", "info"))
    assert value_of(rows, "fill") == [OOM, 96 * MIB]
    assert value_of(rows, "info")[2] == 100 * MIB


def test_disable_passes_through(shim: Shim) -> None:
    s = shim.with_env(GPUSLICE_DISABLE="1")
    rows = results(s.run("gpa", "init", "pctx", "0", "alloc", "3G", "info"))
    assert rc_of(rows, "alloc") == 0
    assert value_of(rows, "info")[2] == 143771 * MIB
    assert not (shim.state / "region").exists()


def test_process_without_cuda_never_loads_libcuda(variant: Variant, shim: Shim) -> None:
    res = subprocess.run(["cat", "/proc/self/maps"], env=shim.with_env(
        LD_PRELOAD=variant.preload(instrumented=False)).env, capture_output=True, text=True)
    assert "libgpuslice" in res.stdout and "libcuda" not in res.stdout


# ------------------------------------------------------------------- NVML


NVML_SCRIPT = textwrap.dedent("""
    import pynvml, json
    pynvml.nvmlInit()
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        procs = [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        out.append([m.total, m.used, m.free, m2.total, m2.used, procs])
    pynvml.nvmlShutdown()
    print(json.dumps(out))
""")


def pynvml_run(variant: Variant, shim: Shim, script: str):
    """What a pynvml script under the shim prints last, as JSON."""
    env = shim.with_env(LD_PRELOAD=variant.preload(instrumented=False)).env
    env.update(variant.sanitizer_env(instrumented=False))
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120)
    clean(res.stderr)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def nvml_view(variant: Variant, shim: Shim):
    return pynvml_run(variant, shim, NVML_SCRIPT)


def test_nvml_sees_the_cap_and_the_containers_processes(variant: Variant, shim: Shim) -> None:
    p = shim.start("direct", "init", "pctx", "0", "alloc", "256M", "hold")
    wait_held(p)
    dev0, dev1 = nvml_view(variant, shim)
    assert dev0[:5] == [GIB, 256 * MIB, GIB - 256 * MIB, GIB, 256 * MIB]
    assert dev0[5] == [[p.pid, 256 * MIB]]
    assert dev1[0] == 2 * GIB and dev1[1] == 0 and dev1[5] == []
    release(p)


def test_nvml_before_any_cuda_process_uses_the_index(variant: Variant, shim: Shim) -> None:
    s = shim.with_env(GPUSLICE_MEMORY_LIMIT_1=None)
    dev0, dev1 = nvml_view(variant, s)
    assert dev0[:3] == [GIB, 0, GIB]
    assert dev1[0] == 143771 * MIB  # uncapped: the fake's own numbers


UTIL_SCRIPT = textwrap.dedent("""
    import pynvml, json
    pynvml.nvmlInit()
    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        try:
            out.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
        except pynvml.NVMLError as e:
            out.append(e.value)
        for call in (lambda: pynvml.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total >> 20,
                     lambda: pynvml.nvmlDeviceGetEncoderUtilization(h)[0],
                     lambda: pynvml.nvmlDeviceGetDecoderUtilization(h)[0]):
            try:
                out.append(call())
            except pynvml.NVMLError as e:
                out.append(e.value)
    print(json.dumps(out))
""")


NVML_NOT_SUPPORTED = 3


def test_utilization_is_the_containers_card_time_or_nothing(variant: Variant, shim: Shim,
                                                             fake_env, tmp_path: Path) -> None:
    # Card 0: a memory cap only, so no card time is measured: not shown (the
    # card's 77 % would tell of the neighbours). Card 1 paced at 50: the
    # container's card time, 0 while nothing runs. Card 2 uncapped: the card's.
    from fakehost import fake_gpu
    gpus = [dict(fake_gpu(i), utilization_pct=77) for i in range(3)]
    s = Shim(variant, fake_env(3, gpus), tmp_path / "state").with_env(
        GPUSLICE_CORE_LIMIT_1="50", GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    s.run("direct", "init", "pctx", "0", "pctx", "1")
    # Each card: utilization, then BAR1 and the video engines (every tenant's:
    # hidden where capped).
    hidden = [NVML_NOT_SUPPORTED] * 3
    assert pynvml_run(variant, s, UTIL_SCRIPT) == [NVML_NOT_SUPPORTED, *hidden, 0, *hidden,
                                                   77, 262144, 0, 0]
    # While it runs on card 1 it has card time there.
    busy = s.with_env(FAKECUDA_KERNEL_NS=str(KERNEL_NS))
    p = busy.start("direct", "init", "pctx", "1", "launch", "kernel", "4000", "hold")
    try:
        busy_util = pynvml_run(variant, s, UTIL_SCRIPT)
    finally:
        wait_held(p)
        release(p)
    assert busy_util[0] == NVML_NOT_SUPPORTED and busy_util[8] == 77
    assert 0 < busy_util[4] <= 100, busy_util


# ------------------------------------------------------------ compute caps

LAUNCH_KINDS = ["kernel", "ex", "coop", "graph"]
KERNEL_NS = 500_000  # what each fake launch occupies the fake GPU for: tens of launches
                     # outrun the 12 ms a new bucket starts with


def launch_ops(n: int) -> List[str]:
    ops = ["init", "pctx", "0"]
    for kind in LAUNCH_KINDS:
        ops += ["launch", kind, str(n)]
    return ops


def card_path(shim: Shim, cards: Path, dev: int = 0) -> Path:
    uuid = shim.region().devices[dev].uuid
    assert uuid.startswith("GPU-"), uuid
    return cards / uuid


@pytest.mark.parametrize("via", VIAS)
def test_every_launch_entry_point_is_paced(shim: Shim, via: str, tmp_path: Path) -> None:
    # gpa-pt hands out the _ptsz variants; direct is the shim's own exports.
    s = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    n = 30
    res = s.run(via, *launch_ops(n))
    rows = results(res)
    assert all(rc_of(rows, "launch", i) == 0 for i in range(len(LAUNCH_KINDS))), rows
    d = s.region().devices[0]
    assert d.core_limit == 50
    assert d.compute_launches == n * len(LAUNCH_KINDS)
    # The fake GPU's time was charged (how exactly: tests/test_pace_sim.py,
    # whose clock is its own); at 50% the process had to sleep.
    assert d.compute_charged_ns > 0, d
    assert d.compute_throttled_ns > 0, d
    assert s.region().devices[1].compute_launches == 0


def test_cap_binds_the_container_not_the_process(shim: Shim, tmp_path: Path) -> None:
    s = shim.with_env(GPUSLICE_CORE_LIMIT="20", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    procs = [subprocess.Popen(s.argv("gpa", "init", "pctx", "0", "launch", "kernel", "40"),
                              env=s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        clean(err)
        assert p.returncode == 0, err
    d = s.region().devices[0]
    # One bucket for the three: every launch counted in it, all of them slept.
    assert d.compute_launches == 120
    assert d.compute_throttled_ns > 0


def test_uncapped_process_launches_straight_into_the_driver(shim: Shim,
                                                            tmp_path: Path) -> None:
    # The waits too: syncs, queries, blocking copies (wrapped only to tell
    # the pacer of them, launch.c).
    s = shim.with_env(GPUSLICE_CORE_LIMIT=None, CUDA_DEVICE_SM_LIMIT=None,
                      GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    for via in ("dlsym", "gpa", "gpa2", "gpa-pt"):
        res = s.run(via, "init", "pctx", "0", "launchfrom", *WAITS_FROM, *launch_ops(5)[3:])
        for op in ("launchfrom", *WAITS_FROM):
            assert value_of_word(results(res), op) == "driver", (via, op)
        # Handed out on purpose: not a pointer the shim failed to recognise.
        assert "unknown pointer" not in res.stderr, (via, res.stderr)
    assert s.region().devices[0].compute_launches == 0


WAITS_FROM = ("syncfrom", "pollfrom", "copyfrom")


def run_polled(shim: Shim, via: str, *ops: str) -> subprocess.CompletedProcess:
    """Run cuprog until its last poll heard "not ready" at least once, 5 runs at most.

    The pacer keeps about 1 ms queued past a paced process's last launch: a
    test process the host puts aside that long between its launch and its
    poll finds the work done, and the poll never waited (2 runs in a clean
    clone's suite of 1767 tests, 2026-12-06). That run says nothing of the
    shim; the next one does."""
    for _ in range(5):
        res = shim.run(via, *ops)
        if int([r for r in results(res) if r[0] == ops[-1]][0][2]) > 0:
            break
    return res


def test_a_paced_process_syncs_through_the_shim(shim: Shim, tmp_path: Path) -> None:
    # A wait for the GPU is no idling: the pacer counts first service from
    # its end (pace.c, guest; tests/test_pace_sim.py for what it changes).
    # Each route says once, at debug level, that it was seen.
    capped = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                           GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"), GPUSLICE_LOG="debug")
    routes = {"syncs": ["ssync", "sync"], "blocking copies": ["dtoh", "copy"],
              "polls": ["poll", "epoll"]}
    for via in VIAS:
        res = capped.run(via, "init", "pctx", "0", *WAITS_FROM)
        assert [value_of_word(results(res), op) for op in WAITS_FROM] == ["shim"] * 3, via
        for what, ops in routes.items():
            for op in ops:
                cmd = ("init", "pctx", "0", "launch", "kernel", "3", op)
                res = run_polled(capped, via, *cmd) if what == "polls" else capped.run(via, *cmd)
                rows = results(res)
                assert rc_of(rows, op) == 0, (via, op, rows)
                seen = f"the application's {what} are seen" in res.stderr
                assert seen, (via, op, res.stderr)
                # Only the route that waited says so.
                assert res.stderr.count("are seen") == 1, (via, op, res.stderr)
        # 3 launches of 0.5 ms were queued: the poll was told "not ready" first.
        poll = [r for r in results(res) if r[0] == "epoll"][0]
        assert int(poll[2]) > 0, (via, poll)


def test_a_query_that_waited_for_nothing_is_no_wait(shim: Shim, tmp_path: Path) -> None:
    # Asked only once the work is done (a sync first): the query heard no
    # "not ready", as an allocator or a watchdog asking for done work does,
    # and must not cut the idling a server earns between its requests. Nor
    # does a poller that sleeps 5 ms between its looks wait, as far as the
    # pacer can tell (launches that far apart are idling too).
    capped = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                           GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"), GPUSLICE_LOG="debug")
    for via in VIAS:
        res = run_polled(capped, via, "init", "pctx", "0", "launch", "kernel", "3", "ssync",
                         "poll", "epoll", "launch", "kernel", "3", "lazypoll")
        rows = results(res)
        assert [r[1:] for r in rows if r[0] in ("poll", "epoll")] == [["0", "0"]] * 2, (via, rows)
        lazy = [r for r in rows if r[0] == "lazypoll"][0]
        assert lazy[1] == "0" and int(lazy[2]) > 0, (via, rows)  # it was told "not ready"
        assert "the application's polls are seen" not in res.stderr, (via, res.stderr)


def value_of_word(rows: List[List[str]], op: str) -> str:
    return [r for r in rows if r[0] == op][0][1]


def test_hami_sm_limit_alias_and_per_device_cap(shim: Shim, tmp_path: Path) -> None:
    s = shim.with_env(GPUSLICE_CORE_LIMIT=None, CUDA_DEVICE_SM_LIMIT="30",
                      GPUSLICE_CORE_LIMIT_1="70", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    rows = results(s.run("gpa", "init", "pctx", "0", "launchfrom", "launch", "kernel", "3"))
    assert value_of_word(rows, "launchfrom") == "shim"
    devs = s.region().devices
    assert (devs[0].core_limit, devs[1].core_limit) == (30, 70)
    assert devs[0].compute_launches == 3


@pytest.mark.parametrize("value", ["abc", "101", "-1", "50%"])
def test_malformed_core_limit_is_named(shim: Shim, value: str) -> None:
    s = shim.with_env(GPUSLICE_CORE_LIMIT=value)
    res = s.run("direct", "init", "pctx", "0", "alloc", "1")
    errors = [line for line in res.stderr.splitlines() if "gpuslice" in line]
    assert len(errors) == 1, res.stderr
    assert f'GPUSLICE_CORE_LIMIT="{value}"' in errors[0]
    assert "an integer percentage 0-100" in errors[0]
    assert rc_of(results(res), "pctx") == OOM  # failing closed, as for memory


def test_capped_process_says_so_in_the_card_file(shim: Shim, tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(GPUSLICE_CORE_LIMIT="40", FAKECUDA_KERNEL_NS="1000000",
                      GPUSLICE_CARD_DIR=str(cards))
    before = time.monotonic_ns()
    s.run("gpa", "init", "pctx", "0", "launch", "kernel", "20")
    card = region.read_card(str(card_path(s, cards)))
    assert before <= card.managed_ns <= time.monotonic_ns()
    # 1 ms kernels queue up behind the GPU: the process competed, and said so.
    assert len(card.backlog_ns) == 1 and card.backlog_ns[0][1] >= before
    assert os.stat(card.path).st_mode & 0o777 == 0o666


def write_card(path: Path, managed_ns: int, turn_owner: int = 0, turn_until_ns: int = 0) -> None:
    ffi = cheader.ffi()
    lib = ffi.dlopen(None)
    c = ffi.new("struct gpuslice_cardfile *")
    c.magic, c.version = lib.GPUSLICE_CARDFILE_MAGIC, lib.GPUSLICE_CARDFILE_VERSION
    c.size = ffi.sizeof("struct gpuslice_cardfile")
    c.managed_ns = managed_ns
    c.turn_owner, c.turn_until_ns = turn_owner, turn_until_ns
    path.write_bytes(bytes(ffi.buffer(c)))


def test_uncapped_neighbour_of_a_capped_tenant_is_watched(shim: Shim, tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(GPUSLICE_CORE_LIMIT=None, FAKECUDA_KERNEL_NS="1000000",
                      GPUSLICE_CARD_DIR=str(cards))
    s.run("gpa", "init", "pctx", "0")  # learns the UUID
    path = card_path(s, cards)
    write_card(path, time.monotonic_ns())
    rows = results(s.run("gpa", "init", "pctx", "0", "launchfrom", "launch", "kernel", "20"))
    # Uncapped, but a capped tenant is on the card: the launches are followed
    # (never throttled) and their backlog is published for the capped one.
    assert value_of_word(rows, "launchfrom") == "shim"
    d = s.region().devices[0]
    assert d.compute_launches == 20 and d.compute_throttled_ns == 0
    assert len(region.read_card(str(path)).backlog_ns) == 1


@pytest.mark.parametrize("managed", [{"GPUSLICE_CORE_LIMIT": "40"},
                                     {"GPUSLICE_PRIORITY": "high"}], ids=["capped", "high"])
def test_a_managed_process_stays_on_the_card_while_it_idles(
        shim: Shim, fake_env, tmp_path: Path, managed: Dict[str, str]) -> None:
    # Idle past the second after which a stamp is stale, a capped or high
    # process still says it is here (presence.c): an uncapped neighbour stays
    # paced, its queue short, instead of queueing as deep as the driver lets it
    # in front of the next request or turn.
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(**{"GPUSLICE_CORE_LIMIT": None, "FAKECUDA_KERNEL_NS": "100000",
                         "GPUSLICE_CARD_DIR": str(cards), **managed})
    p = s.start("gpa", "init", "pctx", "0", "launch", "kernel", "5", "hold")
    try:
        wait_held(p)
        path = card_path(s, cards)
        time.sleep(1.5)
        assert time.monotonic_ns() - region.read_card(str(path)).managed_ns < 750_000_000
        other = Shim(shim.variant, fake_env(2), tmp_path / "other").with_env(
            GPUSLICE_CORE_LIMIT=None, FAKECUDA_KERNEL_NS="100000", GPUSLICE_CARD_DIR=str(cards))
        other.run("gpa", "init", "pctx", "0", "launch", "kernel", "20")
        assert other.region().devices[0].compute_launches == 20  # every one followed
    finally:
        release(p)
    # Gone: nobody says it any more, and the neighbours go back to the free path.
    gone = region.read_card(str(path)).managed_ns
    time.sleep(0.6)
    assert region.read_card(str(path)).managed_ns == gone


def test_stale_capped_mark_is_cleared(shim: Shim, tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(GPUSLICE_CORE_LIMIT=None, FAKECUDA_KERNEL_NS="100000",
                      GPUSLICE_CARD_DIR=str(cards))
    s.run("gpa", "init", "pctx", "0")
    path = card_path(s, cards)
    write_card(path, max(1, time.monotonic_ns() - 5_000_000_000))
    s.run("gpa", "init", "pctx", "0", "launch", "kernel", "20")
    assert region.read_card(str(path)).managed_ns == 0
    # Cleared at the first fence point: the rest went straight to the driver.
    assert s.region().devices[0].compute_launches < 20


CARD_SIZE = cheader.ffi().sizeof("struct gpuslice_cardfile")


@pytest.mark.parametrize("content", [b"", b"x" * 100, b"\xff" * CARD_SIZE],
                         ids=["empty", "short", "garbage"])
def test_hostile_card_file_leaves_the_cap_in_force(shim: Shim, tmp_path: Path,
                                                   content: bytes) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(cards))
    s.run("gpa", "init", "pctx", "0")
    path = card_path(s, cards)
    if content:
        path.write_bytes(content)
    res = s.run("gpa", "init", "pctx", "0", "launch", "kernel", "80")
    d = s.region().devices[0]
    assert d.compute_launches == 80 and d.compute_throttled_ns > 0
    if content:
        assert "card file" in res.stderr or "expected" in res.stderr, res.stderr


def card_dir(tmp_path: Path, cards: bool) -> str:
    """A folder of card files (a gpuslice node: turns, every launch asks the
    card), or none (launches between fence points skip the pacer's lock)."""
    path = tmp_path / ("cards" if cards else "no-cards")
    if cards:
        path.mkdir(exist_ok=True)
    return str(path)


@pytest.mark.parametrize("held", ["first", "at-a-fence"])
@pytest.mark.parametrize("cards", [False, True], ids=["no-cards", "cards"])
def test_a_launch_held_in_the_driver_holds_up_no_other_thread(shim: Shim, tmp_path: Path,
                                                              cards: bool, held: str) -> None:
    # One thread's launch stays inside the (fake) driver, as a launch into a
    # full queue does; another thread's launches must still return. With the
    # pacer's lock held across the driver's launch call they waited for it.
    # The held launch is the process's first (a busy period's, which comes
    # through the pacer), or one after 300 launches and a millisecond's
    # pause, whose end is a fence point: the other thread's launches within
    # a fence's time of its start go on tickets from that fence on
    # (gs_pace_room_ahead; here some runs' first one), handed over at its
    # end, the rest through the pacer; every launch is counted either way,
    # and the sanitizer builds find no race.
    block = tmp_path / "release"
    before = ["launch", "kernel", "300", "usleep", "1000"] if held == "at-a-fence" else []
    s = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS="1000",
                      FAKECUDA_LAUNCH_BLOCK=str(block),
                      FAKECUDA_LAUNCH_BLOCK_AT="301" if before else "1",
                      GPUSLICE_CARD_DIR=card_dir(tmp_path, cards))
    rows = results(s.run("gpa", "init", "pctx", "0", *before, "blocked", "50", timeout=120))
    held_rc, others_rc, returned = value_of(rows, "blocked")
    assert (held_rc, others_rc) == (0, 0), rows
    assert returned == 1, "the other thread's launches waited for the held one"
    assert s.region().devices[0].compute_launches == 51 + (300 if before else 0)


@pytest.mark.parametrize("cards", [False, True], ids=["no-cards", "cards"])
@pytest.mark.parametrize("threads", [8, 16])
def test_capped_launches_from_many_threads_are_all_counted(shim: Shim, tmp_path: Path,
                                                           threads: int, cards: bool) -> None:
    # Each thread launches into a stream of its own; the sanitizer builds
    # check the lock-free path (tickets, counts handed over) for races, and
    # the region must count every launch, whichever path it took.
    each = 300
    s = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS="20000",
                      GPUSLICE_CARD_DIR=card_dir(tmp_path, cards))
    rows = results(s.run("gpa", "init", "pctx", "0", "tlaunch", str(threads), str(each),
                         timeout=120))
    assert rc_of(rows, "tlaunch") == 0, rows
    d = s.region().devices[0]
    assert d.compute_launches == threads * each
    assert d.compute_charged_ns > 0, d


@pytest.mark.parametrize("via", ["direct", "gpa"])
def test_launches_into_a_captured_stream_leave_the_capture_intact(shim: Shim, via: str,
                                                                   tmp_path: Path) -> None:
    # The fake driver, like PyTorch's global capture mode, invalidates a
    # capture when anything queries an event meanwhile; the pacer must not.
    s = shim.with_env(GPUSLICE_CORE_LIMIT="50", FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    rows = results(s.run(via, "init", "pctx", "0", "launch", "kernel", "20", "capture", "300",
                         "launch", "kernel", "20"))
    assert value_of(rows, "capture") == [0, 300], rows
    assert rc_of(rows, "launch", 1) == 0


def test_core_limit_zero_is_no_cap(shim: Shim, tmp_path: Path) -> None:
    s = shim.with_env(GPUSLICE_CORE_LIMIT="0", GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))
    rows = results(s.run("gpa", "init", "pctx", "0", "launchfrom", "launch", "kernel", "5"))
    assert value_of_word(rows, "launchfrom") == "driver"
    assert s.region().devices[0].core_limit == 0


def test_malformed_card_dir_is_named(shim: Shim) -> None:
    res = shim.with_env(GPUSLICE_CARD_DIR="cards").run("direct", "init", "pctx", "0")
    errors = [line for line in res.stderr.splitlines() if "gpuslice" in line]
    assert len(errors) == 1 and 'GPUSLICE_CARD_DIR="cards"' in errors[0], res.stderr
    assert "an absolute path" in errors[0]


def tenant_of_a_card(shim: Shim, tmp_path: Path, cap: Optional[str],
                     priority: Optional[str] = None) -> Tuple[Shim, Path]:
    """The shim with a card dir of its own (and `cap`, `priority`), its card
    file and its region (with them), made."""
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(GPUSLICE_CORE_LIMIT=cap, FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(cards), GPUSLICE_PRIORITY=priority)
    s.run("gpa", "init", "pctx", "0")
    return s, card_path(s, cards)


@pytest.mark.parametrize("cap", [None, "50"])
def test_turns_a_lease_from_far_ahead_is_ignored(shim: Shim, tmp_path: Path,
                                                 cap: Optional[str]) -> None:
    # A card file claiming the card for another process for 10 s must not
    # hold anyone up: leases last 5 ms.
    s, path = tenant_of_a_card(shim, tmp_path, cap)
    now = time.monotonic_ns()
    write_card(path, now, turn_owner=12345, turn_until_ns=now + 10_000_000_000)
    res = s.run("gpa", "init", "pctx", "0", "launch", "kernel", "80", timeout=8)
    assert rc_of(results(res), "launch") == 0
    if cap:
        # It took the card, ran, and gave the turn back when it slept.
        card = region.read_card(str(path))
        assert s.region().devices[0].compute_throttled_ns > 0
        assert card.managed_ns >= now
        assert card.turn_owner == 0


class CardForger:
    """A hostile tenant writing words of a card file in its own mapping, from
    a thread, as long as it runs (`with`): subclasses say which words
    (word(), before the thread starts) and what they write (forge(), until
    stopped). One 8-byte store each, as the shim's own: struct.pack_into
    zeroes its target before it writes, and a reader could catch the zero."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "r+b")
        self.m = mmap.mmap(self.f.fileno(), 0)
        self.words: List[ctypes._SimpleCData] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.forge, daemon=True)

    def word(self, offset: int, kind: type = ctypes.c_uint64) -> ctypes._SimpleCData:
        w = kind.from_buffer(self.m, offset)
        self.words.append(w)
        return w

    def forge(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "CardForger":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        # The words hold the mapping: every reference to them goes first.
        for name in [k for k, v in vars(self).items() if any(v is w for w in self.words)]:
            delattr(self, name)
        self.words.clear()
        self.m.close()
        self.f.close()


class LeaseForger(CardForger):
    """Renews a turn for a process that does not exist, and says a managed
    tenant is here, every 0.5 ms (the bound on what it costs others is
    tests/test_pace_sim.py's: the simulator's forge program)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        ffi = cheader.ffi()
        self.capped, self.owner, self.until = (
            self.word(ffi.offsetof("struct gpuslice_cardfile", name))
            for name in ("managed_ns", "turn_owner", "turn_until_ns"))
        self.renewals = 0

    def forge(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic_ns()
            self.capped.value = now
            self.owner.value = 12345
            self.until.value = now + 4_000_000
            self.renewals += 1
            time.sleep(0.0005)


@pytest.mark.parametrize("cap", [None, "50"])
def test_turns_a_lease_renewed_forever_cannot_stall_a_process(shim: Shim, tmp_path: Path,
                                                              cap: Optional[str]) -> None:
    # Anyone can write the card file: a tenant that holds the turn for ever
    # (renewing a 4 ms lease every 0.5 ms) makes others wait at most 90 % of
    # their time (their patience), so they still finish their work.
    s, path = tenant_of_a_card(shim, tmp_path, cap)
    write_card(path, time.monotonic_ns())
    with LeaseForger(path) as forger:
        res = s.run("gpa", "init", "pctx", "0", "launch", "kernel", "80", timeout=30)
        renewals = forger.renewals
    assert rc_of(results(res), "launch") == 0
    assert s.region().devices[0].compute_launches == 80
    assert renewals > 0  # it ran: how long others wait is tests/test_pace_sim.py's to bound
    assert region.read_card(str(path)).turn_owner == 12345


def test_malformed_turns_setting_is_named_and_turns_stay_on(shim: Shim,
                                                             tmp_path: Path) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    s = shim.with_env(GPUSLICE_CORE_LIMIT="50", GPUSLICE_COMPUTE_TURNS="yes",
                      FAKECUDA_KERNEL_NS=str(KERNEL_NS), GPUSLICE_CARD_DIR=str(cards))
    res = s.run("gpa", "init", "pctx", "0", "launch", "kernel", "40", "alloc", "1")
    warned = [line for line in res.stderr.splitlines() if "GPUSLICE_COMPUTE_TURNS" in line]
    assert len(warned) == 1 and 'GPUSLICE_COMPUTE_TURNS="yes"' in warned[0], res.stderr
    assert "expected 1 or 0" in warned[0]
    rows = results(res)
    assert rc_of(rows, "launch") == 0 and rc_of(rows, "alloc") == 0  # nothing fails closed


# Ops after "init pctx 0", and the launches they make, of 1 ms each: more
# than the half second of first service a new process starts with (a guest
# never waits, gated or not).
GATED_LAUNCHES = {
    "default-stream": (["launch", "kernel", "650"], 650),
    "per-thread-stream": (["launch", "kernel", "650"], 650),  # gpa-pt: the _ptsz entry points
    "4-threads": (["tlaunch", "4", "400"], 1600),
}


@pytest.mark.parametrize("gates", ["1", None], ids=["gates", "no-gates"])
@pytest.mark.parametrize("shape", list(GATED_LAUNCHES))
def test_a_gated_tenant_goes_on_launching_while_another_holds_the_turn(
        shim: Shim, tmp_path: Path, shape: str, gates: Optional[str]) -> None:
    # An uncapped process whose turn it is not closes its gate: its launches
    # return, its work waits on the GPU (cuStreamWaitValue32 on every stream
    # it launches into), and its watcher thread opens the gate. A turn held
    # for ever (the forger) is let go of after the grace and then the
    # patience, as for a wait on the host; a sync behind the gate returns.
    s, path = tenant_of_a_card(shim, tmp_path, None)
    s = s.with_env(GPUSLICE_COMPUTE_GATES=gates, FAKECUDA_KERNEL_NS="1000000")
    write_card(path, time.monotonic_ns())
    ops, n = GATED_LAUNCHES[shape]
    via = "gpa-pt" if shape == "per-thread-stream" else "gpa"
    with LeaseForger(path):
        res = s.run(via, "init", "pctx", "0", *ops, "sync", "waits", timeout=60)
    rows = results(res)
    assert rc_of(rows, ops[0]) == 0 and rc_of(rows, "sync") == 0, rows
    assert s.region().devices[0].compute_launches == n
    waits = value_of(rows, "waits")[1]
    if gates:
        assert waits > 0, rows
    else:
        assert waits == 0, rows  # off unless asked for: it waits on the host


def test_a_gated_tenant_gates_again_in_a_new_context(shim: Shim, tmp_path: Path) -> None:
    # A new context (the first one gone) opens the old gate and forgets its
    # streams; the word is registered again there (or found registered) and
    # gates go on.
    s, path = tenant_of_a_card(shim, tmp_path, None)
    s = s.with_env(GPUSLICE_COMPUTE_GATES="1", FAKECUDA_KERNEL_NS="1000000")
    write_card(path, time.monotonic_ns())
    ops, n = GATED_LAUNCHES["default-stream"]
    with LeaseForger(path):
        res = s.run("direct", "init", "pctx", "0", *ops, "sync", "waits", "pctxrel", "0", "ctx", "0",
                    *ops, "sync", "waits", timeout=60)
    rows = results(res)
    assert rc_of(rows, "ctx") == 0 and rc_of(rows, "sync", 1) == 0, rows
    first, then = value_of(rows, "waits", 0)[1], value_of(rows, "waits", 1)[1]
    assert 0 < first < then, rows
    assert s.region().devices[0].compute_launches == 2 * n


def test_a_gated_tenant_and_a_capped_one_share_a_card(shim: Shim, tmp_path: Path) -> None:
    # Two real tenants of one card: a capped one taking turns, and an uncapped
    # one with gates that closes its gate while the other holds the card
    # (once its first service, half a second, is spent). Both finish, every
    # launch counted; the watcher and the launching thread share the pacer's
    # gate (the sanitizer builds look for races there).
    cards = tmp_path / "cards"
    cards.mkdir()
    base = shim.with_env(FAKECUDA_KERNEL_NS="1000000", GPUSLICE_CARD_DIR=str(cards))
    capped = base.with_env(GPUSLICE_CORE_LIMIT="50")
    # Another container: a state folder of its own.
    gated = base.with_env(GPUSLICE_CORE_LIMIT=None, GPUSLICE_COMPUTE_GATES="1",
                          GPUSLICE_STATE_DIR=str(tmp_path / "gated-state"))
    gated.state = tmp_path / "gated-state"
    procs = [capped.start("gpa", "init", "pctx", "0", "launch", "kernel", "700", "sync")]
    # The uncapped one is paced once the card says a capped tenant is on it.
    deadline = time.monotonic() + 30
    while True:
        try:
            if region.read_card(str(card_path(capped, cards))).managed_ns:
                break
        except (OSError, AssertionError, region.RegionError):
            pass  # neither the region nor the card made yet
        assert time.monotonic() < deadline and procs[0].poll() is None, "no capped tenant"
        time.sleep(0.002)
    procs.append(gated.start("gpa", "init", "pctx", "0", "launch", "kernel", "1200", "sync",
                             "waits"))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        clean(err)
        assert p.returncode == 0, err
        outs.append(results(out))
    assert rc_of(outs[0], "launch") == 0 and rc_of(outs[1], "launch") == 0, outs
    assert capped.region().devices[0].compute_launches == 700
    assert gated.region().devices[0].compute_launches == 1200
    assert value_of(outs[1], "waits")[1] > 0, outs[1]


def test_without_pinned_memory_a_gated_tenant_waits_on_the_host(shim: Shim,
                                                                tmp_path: Path) -> None:
    # A driver that cannot pin the gate's word: gates are off for the device,
    # said once at info, and the process waits for turns on the host.
    s, path = tenant_of_a_card(shim, tmp_path, None)
    s = s.with_env(GPUSLICE_COMPUTE_GATES="1", FAKECUDA_NO_HOST_REGISTER="1",
                   GPUSLICE_LOG="info", FAKECUDA_KERNEL_NS="1000000")
    write_card(path, time.monotonic_ns())
    ops, n = GATED_LAUNCHES["default-stream"]
    with LeaseForger(path):
        res = s.run("gpa", "init", "pctx", "0", *ops, "sync", "waits", timeout=60)
    rows = results(res)
    assert rc_of(rows, "launch") == 0 and value_of(rows, "waits")[1] == 0, rows
    refused = [line for line in res.stderr.splitlines() if "for a gate refused" in line]
    assert len(refused) == 1, res.stderr
    assert s.region().devices[0].compute_launches == n


def bench_module(name: str):
    """bench/NAME.py, imported (bench/ is no package): how a bench reads the shim's log."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def beside_a_forged_holder(shim: Shim, tmp_path: Path, ops: List[str],
                           **env: str) -> Tuple[subprocess.CompletedProcess, Path]:
    """An uncapped tenant of a card of its own, with `env`, running `ops` while
    a LeaseForger holds the card's turn; its result and the card file."""
    s, path = tenant_of_a_card(shim, tmp_path, None)
    s = s.with_env(**env)
    write_card(path, time.monotonic_ns())
    with LeaseForger(path):
        res = s.run("gpa", "init", "pctx", "0", *ops, timeout=60)
    return res, path


@pytest.mark.parametrize("value", ["yes", "2", "on"])
def test_malformed_gates_setting_is_named_and_gates_stay_off(shim: Shim, tmp_path: Path,
                                                            value: str) -> None:
    ops, _ = GATED_LAUNCHES["default-stream"]
    res, _ = beside_a_forged_holder(shim, tmp_path, [*ops, "waits"], GPUSLICE_COMPUTE_GATES=value,
                                    FAKECUDA_KERNEL_NS="1000000")
    warned = [line for line in res.stderr.splitlines() if "GPUSLICE_COMPUTE_GATES" in line]
    assert len(warned) == 1 and f'GPUSLICE_COMPUTE_GATES="{value}"' in warned[0], res.stderr
    assert "expected 1 or 0" in warned[0]
    rows = results(res)
    assert rc_of(rows, "launch") == 0 and value_of(rows, "waits")[1] == 0, rows


@pytest.mark.parametrize("value", ["1", "0", "unset"])
def test_side_by_side_a_host_bound_tenant_says_so_in_its_seat(shim: Shim, tmp_path: Path,
                                                               value: str) -> None:
    # Side by side (the default; GPUSLICE_COMPUTE_SIDE=0 turns it off): an
    # uncapped process whose own waits take little of its time (short
    # kernels, the host idle between launches) launches through a holder's
    # turns after its first epochs and says so in its seat
    # (docs/compute-limit.md, Side by side); off, it never does.
    env = {} if value == "unset" else {"GPUSLICE_COMPUTE_SIDE": value}
    res, path = beside_a_forged_holder(shim, tmp_path, ["launch", "kernel", "5", "usleep", "300"] * 1000,
                                       FAKECUDA_KERNEL_NS="20000", GPUSLICE_LOG="debug", **env)
    launches = [r for r in results(res) if r[0] == "launch"]
    assert len(launches) == 1000 and all(r[1] == "0" for r in launches), res.stderr
    ffi, lib = cheader.ffi(), cheader.ffi().dlopen(None)
    c = ffi.cast("struct gpuslice_cardfile *", ffi.from_buffer(path.read_bytes()))
    modes = [c.seats[i].mode for i in range(lib.GPUSLICE_CARDFILE_SEATS) if c.seats[i].owner]
    assert modes, "no seat taken"
    side = any(m & lib.GPUSLICE_CARDFILE_SIDE for m in modes)
    assert side == (value != "0"), (value, modes)
    # Its account at exit says how many of its epochs it went side by side
    # in (bench/compute_share prints it); off, it reckons none.
    account = bench_module("shimbench").pacer_side(res.stderr)
    if value != "0":
        assert account is not None and 0 < account["side"] <= account["epochs"], res.stderr
        assert account["waiting_pm"] < 400 and account["learning"] == account["owed"] == 0
    else:
        assert account is None, res.stderr


class SideSeatForger(CardForger):
    """A neighbour that says it goes side by side: the last seat of the card
    file, its work ended 10 ms ago, renewed every millisecond (so the
    capped tenant's intervals are its own, and the seat is recent)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        ffi, lib = cheader.ffi(), cheader.ffi().dlopen(None)
        seat = ffi.offsetof("struct gpuslice_cardfile", "seats") + (
            (lib.GPUSLICE_CARDFILE_SEATS - 1) * ffi.sizeof("struct gpuslice_cardfile_seat"))
        at = {name: seat + ffi.offsetof("struct gpuslice_cardfile_seat", name)
              for name in ("owner", "backlog_ns", "mode")}
        self.owner, self.backlog = self.word(at["owner"]), self.word(at["backlog_ns"])
        self.mode = self.word(at["mode"], ctypes.c_uint32)
        self.side = lib.GPUSLICE_CARDFILE_SIDE

    def forge(self) -> None:
        self.owner.value = 777
        self.mode.value = self.side
        while not self.stop.is_set():
            self.backlog.value = time.monotonic_ns() - 10_000_000
            time.sleep(0.001)


def test_a_capped_tenant_short_beside_a_side_by_side_seat_holds_it_and_says_when(
        shim: Shim, tmp_path: Path) -> None:
    # A capped 50 whose launches keep the card a fraction of its time (bursts of
    # 100 launches of 20 us, then 4 ms idle: a busy period each, its gaps not
    # charged) beside a seat that says it goes side by side: after its first
    # second it runs short of its cap (as far as its account can tell, one
    # that wants no more is short too),
    # says so (a hold: its neighbour takes turns again), and at exit says
    # when each hold began, after its first epoch, which it dates on the
    # monotonic clock (bench/compute_run puts the holds in its run's
    # seconds with it; docs/compute-limit.md, Side by side).
    s, path = tenant_of_a_card(shim, tmp_path, "50")
    s = s.with_env(FAKECUDA_KERNEL_NS="20000", GPUSLICE_LOG="debug")
    write_card(path, time.monotonic_ns())
    t0 = time.monotonic()
    with SideSeatForger(path):
        res = s.run("gpa", "init", "pctx", "0", *(["launch", "kernel", "100", "usleep", "4000"] * 400),
                    timeout=120)
    t1 = time.monotonic()
    holds = bench_module("shimbench").pacer_holds(res.stderr)
    assert holds is not None and holds["holds"] >= 1, res.stderr
    assert t0 <= holds["first_s"] <= t1, (t0, holds, t1)
    ms, owed_pm = holds["at"][0]
    assert ms >= 1000 and owed_pm > 25, holds  # not in its first second; short by 2.5 %+
    assert holds["first_s"] + ms / 1000 <= t1, (holds, t1)


@pytest.mark.parametrize("value", ["yes", "2"])
def test_malformed_side_setting_is_named_and_the_tenant_goes_side_by_side(
        shim: Shim, tmp_path: Path, value: str) -> None:
    res, path = beside_a_forged_holder(shim, tmp_path,
                                       ["launch", "kernel", "5", "usleep", "300"] * 1000,
                                       GPUSLICE_COMPUTE_SIDE=value, FAKECUDA_KERNEL_NS="20000")
    warned = [line for line in res.stderr.splitlines() if "GPUSLICE_COMPUTE_SIDE" in line]
    assert len(warned) == 1 and f'GPUSLICE_COMPUTE_SIDE="{value}"' in warned[0], res.stderr
    assert "expected 1 or 0" in warned[0] and "launches through capped turns" in warned[0]
    ffi, lib = cheader.ffi(), cheader.ffi().dlopen(None)
    c = ffi.cast("struct gpuslice_cardfile *", ffi.from_buffer(path.read_bytes()))
    assert any(c.seats[i].mode & lib.GPUSLICE_CARDFILE_SIDE
               for i in range(lib.GPUSLICE_CARDFILE_SEATS) if c.seats[i].owner)
    assert rc_of(results(res), "launch") == 0


def test_placed_card_is_the_only_one_cuda_sees(shim: Shim) -> None:
    from fakehost import fake_gpu

    shim.state.mkdir(parents=True, exist_ok=True)
    placed = fake_gpu(1)["uuid"]
    (shim.state / "placement").write_text(f"1 {placed}\n")
    s = shim.with_env(CUDA_VISIBLE_DEVICES="0", GPUSLICE_LOG="info")
    res = s.run("direct", "init", "pctx", "0", "alloc", "1")
    # The accountant's placement wins over the image's CUDA_VISIBLE_DEVICES.
    assert f"CUDA_VISIBLE_DEVICES=0 replaced by the placed card(s) {placed}" in res.stderr
    devs = s.region().devices
    assert devs[0].uuid == placed and len(devs) == 1
    # Garbage in the file is not put in the environment.
    (shim.state / "placement").write_text("1 GPU-$(reboot)\nnonsense\n0 GPU-\n")
    (shim.state / "region").unlink()
    res = s.run("direct", "init", "pctx", "0")
    assert "replaced" not in res.stderr
    assert s.region().devices[0].uuid == fake_gpu(0)["uuid"]


PLACED_NVML_SCRIPT = textwrap.dedent("""
    import pynvml, json, sys
    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]
    uuids = [u.decode() if isinstance(u, bytes) else u for u in uuids]
    codes = []
    for call in (lambda: pynvml.nvmlDeviceGetHandleByIndex(n),
                 lambda: pynvml.nvmlDeviceGetHandleByUUID(sys.argv[1])):
        try:
            call()
            codes.append(0)
        except pynvml.NVMLError as e:
            codes.append(e.value)
    print(json.dumps([n, uuids, codes]))
""")


def test_placed_card_is_the_only_one_nvml_shows(variant: Variant, shim: Shim) -> None:
    from fakehost import fake_gpu

    shim.state.mkdir(parents=True, exist_ok=True)
    (shim.state / "placement").write_text(f"1 {fake_gpu(1)['uuid']}\n")
    env = shim.with_env(LD_PRELOAD=variant.preload(instrumented=False)).env
    env.update(variant.sanitizer_env(instrumented=False))
    res = subprocess.run([sys.executable, "-c", PLACED_NVML_SCRIPT, fake_gpu(0)["uuid"]],
                         env=env, capture_output=True, text=True, timeout=120)
    clean(res.stderr)
    assert res.returncode == 0, res.stderr
    n, uuids, codes = json.loads(res.stdout.strip().splitlines()[-1])
    assert n == 1 and uuids == [fake_gpu(1)["uuid"]]
    assert codes == [2, 6]  # INVALID_ARGUMENT past the end; NOT_FOUND: not this container's


def card_field(path: Path, name: str) -> int:
    ffi = cheader.ffi()
    c = ffi.cast("struct gpuslice_cardfile *", ffi.from_buffer(path.read_bytes()))
    return getattr(c, name)


@pytest.mark.parametrize("priority,word", [("high", "high"), ("low", "low"),
                                           ("normal", "normal"), (None, "normal")])
def test_priority_is_recorded_in_the_region(shim: Shim, tmp_path: Path, priority: Optional[str],
                                            word: str) -> None:
    (tmp_path / "cards").mkdir()
    s = shim.with_env(GPUSLICE_PRIORITY=priority, FAKECUDA_KERNEL_NS=str(KERNEL_NS),
                      GPUSLICE_CARD_DIR=str(tmp_path / "cards"))
    s.run("gpa", "init", "pctx", "0", "launch", "kernel", "5")
    assert [d.priority for d in s.region().devices[:2]] == [word, word]


def test_high_priority_says_so_on_the_card(shim: Shim, tmp_path: Path) -> None:
    # Uncapped but high: its launches are paced (it must say, at each, until
    # when its work is queued, so that others stand aside) and never wait.
    s, path = tenant_of_a_card(shim, tmp_path, None, "high")
    before = time.monotonic_ns()
    rows = results(s.run("gpa", "init", "pctx", "0", "launchfrom", "launch", "kernel", "20"))
    assert value_of_word(rows, "launchfrom") == "shim"
    d = s.region().devices[0]
    assert d.compute_launches == 20 and d.compute_throttled_ns == 0
    assert card_field(path, "high_until_ns") > before
    assert card_field(path, "managed_ns") >= before
    assert card_field(path, "guest_until_ns") == 0  # high needs no guest stretch


def test_an_answered_request_lets_the_card_go(shim: Shim, tmp_path: Path) -> None:
    # Others stand aside half a millisecond past high work's (or a guest's)
    # last launch; its wait's return says its work is done, and a process
    # whose waits there end its launching lets its stamp go and wakes them
    # (the card's seq; nothing else changes it for a lone high tenant).
    # A new process takes each wait for one followed at once until its
    # requests show otherwise: 64ths of 64, a quarter off for each wait
    # not followed, and it lets go below 32, from the fourth request on
    # (each 3 ms after the last: a new stretch, its wait the first again).
    # Of ten requests the last seven may let go; one whose wait returned
    # after its stamp ran out (half a millisecond late: a loaded host, under
    # TSan) has nothing left to let go.
    s, path = tenant_of_a_card(shim, tmp_path, None, "high")
    s.run("gpa", "init", "pctx", "0", "launch", "kernel", "1")  # makes the card file
    seq = card_field(path, "seq")
    request = ["launch", "kernel", "8", "ssync", "usleep", "3000"]
    before = time.monotonic_ns()
    rows = results(s.run("gpa", "init", "pctx", "0", *(request * 10)[:-2]))
    assert rc_of(rows, "ssync", 9) == 0
    assert seq + 4 <= card_field(path, "seq") <= seq + 7
    assert region.read_card(str(path)).seq == card_field(path, "seq")  # the host tools' reader
    assert before < card_field(path, "high_until_ns") <= time.monotonic_ns()
    # A decode loop's tokens: each wait followed at once by the next
    # token's launches; it keeps its stamp over all of them.
    seq = card_field(path, "seq")
    s.run("gpa", "init", "pctx", "0", *(["launch", "kernel", "2", "ssync"] * 12))
    assert card_field(path, "seq") == seq


def test_the_pacer_tells_a_host_bound_process_from_a_gpu_bound_one(shim: Shim,
                                                                     tmp_path: Path) -> None:
    # A host-bound process keeps a deeper queue beside others: what it has in
    # flight is mostly done, however deep its estimate (docs/compute-limit.md).
    # Told by its fence points: most found the one before done. A loop whose
    # launches outrun its 100 us kernels is GPU-bound; one that rests 300 us
    # between launches of 5 us kernels is host-bound. At exit, with
    # GPUSLICE_LOG=debug, the shim says which it took each for.
    s = shim.with_env(GPUSLICE_CORE_LIMIT="100", GPUSLICE_LOG="debug",
                      GPUSLICE_CARD_DIR=str(tmp_path / "no-cards"))

    def verdict(kernel_ns: int, *ops: str) -> str:
        res = s.with_env(FAKECUDA_KERNEL_NS=str(kernel_ns)).run("gpa", "init", "pctx", "0", *ops)
        said = [line for line in res.stderr.splitlines() if "device 0: at exit" in line]
        assert len(said) == 1, res.stderr
        return said[0].split("at exit ")[1].split(":")[0]

    assert verdict(100_000, "launch", "kernel", "300") == "GPU-bound"
    assert verdict(5_000, *(["launch", "kernel", "1", "usleep", "300"] * 60)) == "host-bound"


def test_the_pacer_accounts_for_what_it_cost_the_host_at_exit(shim: Shim, tmp_path: Path) -> None:
    # With GPUSLICE_LOG=debug a capped process says at exit what pacing cost
    # its host, in parts that do not overlap: launches (those on tickets),
    # fences, time at fence points of their own, waiting for its queue,
    # asleep for its cap, at the card before launches; and what it was
    # charged, in parts that add up to its container's charge: busy
    # periods' first intervals, later ones, launches at the estimate, less
    # others' work in drains before standing aside.
    # bench/shim_training and the suite's benches read them (bench/shimbench.py,
    # pacer_spent, pacer_charged and pacer_bound).
    shimbench = bench_module("shimbench")

    charges: Dict[str, int] = {}
    bounds: List[Dict[str, object]] = []
    cuts: List[Dict[str, int]] = []

    def spent(cap: str, kernel_ns: int, *ops: str, cards: bool = False,
              fresh: str = "") -> Dict[str, int]:
        # A state of its own: the region's maker sets the cap (fresh: a new
        # container, whose bucket no earlier process filled).
        env = dict(GPUSLICE_CORE_LIMIT=cap, GPUSLICE_LOG="debug",
                   GPUSLICE_STATE_DIR=str(tmp_path / f"state-{cap}-{int(cards)}{fresh}"),
                   FAKECUDA_KERNEL_NS=str(kernel_ns),
                   GPUSLICE_CARD_DIR=str(tmp_path / ("cards" if cards else "no-cards")))
        path = Path(env["GPUSLICE_STATE_DIR"]) / "region"

        def charged_us() -> float:  # the container's, over every process in it so far
            return region.read(str(path)).devices[0].compute_charged_ns / 1000 if path.exists() else 0

        before_us = charged_us()
        t0 = time.monotonic()
        res = shim.with_env(**env).run("gpa", "init", "pctx", "0", *ops)
        wall_us = (time.monotonic() - t0) * 1e6
        account = shimbench.pacer_spent(res.stderr)
        assert account is not None, res.stderr
        parts = ("fence_us", "queue_us", "sleep_us", "card_us")
        assert sum(account[k] for k in parts) <= wall_us, (account, wall_us)
        c = shimbench.pacer_charged(res.stderr)
        assert c is not None, res.stderr
        parts_us = c["first_us"] + c["later_us"] + c["estimated_us"] - c["others_us"]
        # Each part rounded down to 1 us.
        assert abs(parts_us - (charged_us() - before_us)) <= 4, (c, charged_us(), before_us)
        assert c["first_launches"] + c["later_launches"] <= account["launches"], (c, account)
        charges.update(c)
        bound = shimbench.pacer_bound(res.stderr)  # what its queue's bound rested on
        assert bound is not None and bound["of"] == 64, res.stderr
        bounds.append(bound)
        cut = shimbench.pacer_cut(res.stderr)  # credit its bucket did not keep
        assert cut is not None, res.stderr
        cuts.append(cut)
        return account

    # GPU-bound: 300 launches of 100 us kernels queued at once wait for
    # their queue (30 ms of work, a 1 ms bound), far longer than the fence
    # points' own event calls take.
    a = spent("100", 100_000, "launch", "kernel", "300")
    assert a["launches"] == 300 and a["fences"] >= 300 * 100_000 // 250_000
    assert bounds[-1]["bound"] == "GPU", bounds  # 30 ms queued at once
    assert a["queue_waits"] > 0 and a["queue_us"] >= 20_000 > a["fence_us"]
    assert a["sleep_us"] == 0 and a["card_us"] == 0  # no card, no turns
    # Host-bound (kernels of no length): each fence point finds the entries
    # before it done (the poll asks the GPU's time from the last done entry,
    # whose NOT_READY says not done), so it never waits for its queue; a
    # poll that never saw one done would fill the ring and wait.
    a = spent("100", 0, "launch", "kernel", "20000")
    assert a["fences"] >= 4 and a["queue_waits"] == 0, a
    assert bounds[-1]["bound"] == "host", bounds  # its fences found the GPU behind it seldom
    # Capped at 50, 60 ms of work past a 12 ms start credit sleeps for its cap.
    a = spent("50", 100_000, "launch", "kernel", "600")
    assert a["sleep_us"] > 20_000, a
    assert charges["firsts"] >= 2, charges  # a busy period after each sleep
    # Launches after the last fence, then a gap: charged at the estimate
    # (10 us kernels: a fence every 25 launches, 10 left unfenced). The
    # fences follow the learned time a launch, which the host's load moves
    # (a clean clone's run once left none unfenced): one of three runs.
    for _ in range(3):
        spent("100", 10_000, "launch", "kernel", "310", "usleep", "20000", "launch", "kernel", "1")
        if charges["estimated_us"] > 0:
            break
    assert charges["estimated_us"] > 0, charges
    # GPU-bound, never idle: every credit it earned it kept (and spent). A
    # host that takes the CPU from it idles it (a loaded one cut 0.4-11 ms):
    # one of three runs.
    kept = [cuts[0]]
    while kept[-1] != {"cut_us": 0, "cuts": 0} and len(kept) < 3:
        spent("100", 100_000, "launch", "kernel", "300", fresh=f"-again{len(kept)}")
        kept.append(cuts[-1])
    assert kept[-1] == {"cut_us": 0, "cuts": 0}, kept
    # The same, then idle for 80 ms: it earned 80 ms and keeps the burst, 20;
    # the rest is not kept, and the account says so (with what its start and
    # its exit earned past the burst on a loaded host).
    spent("100", 100_000, "launch", "kernel", "300", "usleep", "80000", "launch", "kernel", "300")
    assert 40_000 <= cuts[-1]["cut_us"] <= 140_000 and cuts[-1]["cuts"] >= 1, cuts
    # Idle for more than a second (a bench tenant between its setup and its
    # start): the 1080 ms it did not keep are not counted (what the turns
    # cost is what the figure is for), only what its launching did not use
    # (tens of ms under a sanitizer on a loaded host).
    spent("100", 100_000, "launch", "kernel", "300", "usleep", "1100000", "launch", "kernel", "300")
    assert cuts[-1]["cut_us"] < 500_000, cuts
    # On a card with turns a capped process alone, past its first service
    # (half a second of launching), holds the turn and nobody waits for it:
    # between fence points it launches on tickets (a guest never does), and
    # the other launches look at the card first.
    (tmp_path / "cards").mkdir()
    a = spent("100", 1_000, "launchfor", "700", "launch", "kernel", "20000", cards=True)
    assert a["ticketed"] > 10_000 and a["card_us"] > 0, a


def test_the_regions_priority_holds_over_the_environments(shim: Shim, tmp_path: Path) -> None:
    # The region's maker (the hook, from the accountant) set normal: a process
    # whose environment says high neither runs high nor changes the region.
    s, path = tenant_of_a_card(shim, tmp_path, None, "normal")
    before = time.monotonic_ns()
    s.with_env(GPUSLICE_PRIORITY="high").run("gpa", "init", "pctx", "0", "launch", "kernel", "20")
    assert card_field(path, "high_until_ns") < before
    assert s.region().devices[0].priority == "normal"


def test_an_uncapped_neighbour_of_high_work_still_finishes(shim: Shim, tmp_path: Path) -> None:
    # A card that says high-priority work is queued 10 s ahead is garbage past
    # the 100 ms a stamp may reach; one that keeps saying it (a forger) costs
    # a neighbour half its time at most (the simulator bounds it).
    s, path = tenant_of_a_card(shim, tmp_path, None)
    now = time.monotonic_ns()
    ffi = cheader.ffi()
    lib = ffi.dlopen(None)
    c = ffi.new("struct gpuslice_cardfile *")
    c.magic, c.version = lib.GPUSLICE_CARDFILE_MAGIC, lib.GPUSLICE_CARDFILE_VERSION
    c.size = ffi.sizeof("struct gpuslice_cardfile")
    c.managed_ns, c.high_until_ns = now, now + 10_000_000_000
    path.write_bytes(bytes(ffi.buffer(c)))
    res = s.run("gpa", "init", "pctx", "0", "launch", "kernel", "40", timeout=20)
    assert rc_of(results(res), "launch") == 0
    assert s.region().devices[0].compute_launches == 40


@pytest.mark.parametrize("value", ["urgent", "HIGH", " high"])  # empty is unset, as for every variable
def test_malformed_priority_is_named_and_normal_is_kept(shim: Shim, tmp_path: Path,
                                                       value: str) -> None:
    s, _ = tenant_of_a_card(shim, tmp_path, "50")
    s = s.with_env(GPUSLICE_PRIORITY=value)
    res = s.run("gpa", "init", "pctx", "0", "launch", "kernel", "10", "alloc", "1")
    warned = [line for line in res.stderr.splitlines() if "GPUSLICE_PRIORITY" in line]
    assert len(warned) == 1 and f'GPUSLICE_PRIORITY="{value}"' in warned[0], res.stderr
    assert "expected high, normal or low" in warned[0]
    rows = results(res)
    assert rc_of(rows, "launch") == 0 and rc_of(rows, "alloc") == 0  # nothing fails closed
    assert s.region().devices[0].priority == "normal"


# ------------------------------------------ a region the shim did not make


def region_bytes(limits: Tuple[int, int] = (0, 0), lock: bool = False) -> bytes:
    """A region with a valid header: limits per device, the rest zero (lock
    True: the lock bytes of a region a shim made, copied in)."""
    ffi = cheader.ffi()
    r = ffi.new("struct gpuslice_region *")
    r.magic = cheader.constant("GPUSLICE_REGION_MAGIC")
    r.version = cheader.constant("GPUSLICE_REGION_VERSION")
    r.size = ffi.sizeof("struct gpuslice_region")
    r.devices[0].limit_bytes, r.devices[1].limit_bytes = limits
    return bytes(ffi.buffer(r))


def test_a_zero_body_region_caps_by_the_environment(shim: Shim) -> None:
    """A header and nothing behind it (zeroed, or forged): the process's own
    caps hold, and the region is made anew for the others."""
    shim.state.mkdir(parents=True)
    (shim.state / "region").write_bytes(region_bytes())
    res = shim.run("direct", "init", "pctx", "0", "info", "fill", "64M", "alloc", "1")
    rows = results(res)
    assert value_of(rows, "info") == [0, GIB, GIB]
    assert value_of(rows, "fill") == [OOM, GIB] and rc_of(rows, "alloc") == OOM
    assert "has a header but no region behind it; made anew" in res.stderr
    assert [d.limit_bytes for d in shim.region().devices[:2]] == [GIB, 2 * GIB]


def test_a_regions_caps_hold_over_the_environments(shim: Shim) -> None:
    """The region holds the caps (the hook writes the accountant's there at the
    container's create): a process whose environment says others, as every
    process of a resized container has the spec's, neither changes them nor is
    capped by its own; a process with no limit in its environment (a clean one
    under ld.so.preload) is capped by them too."""
    first = shim.with_env(GPUSLICE_MEMORY_LIMIT_0="5GiB", GPUSLICE_CORE_LIMIT_0="70")
    p = first.start("direct", "init", "pctx", "0", "alloc", "512M", "hold")
    wait_held(p)
    d = shim.region().devices[0]
    assert (d.limit_bytes, d.core_limit) == (5 * GIB, 70)  # it made the region: its env's
    res = shim.run("direct", "init", "pctx", "0", "info", "alloc", "2G", "freeall")
    rows = results(res)
    assert value_of(rows, "info") == [0, 5 * GIB - 512 * MIB, 5 * GIB]  # not its own 1 GiB
    assert rc_of(rows, "alloc") == 0
    d = shim.region().devices[0]
    assert (d.limit_bytes, d.core_limit) == (5 * GIB, 70)
    release(p)
    bare = shim.with_env(GPUSLICE_MEMORY_LIMIT_0=None, GPUSLICE_MEMORY_LIMIT_1=None)
    rows = results(bare.run("direct", "init", "pctx", "0", "info"))
    assert value_of(rows, "info")[2] == 5 * GIB


def host_resize(shim: Shim, limit_bytes: int) -> None:
    """Device 0's cap to limit_bytes, written into the region file in place as
    gpuslice-hook resize writes it."""
    ffi = cheader.ffi()
    path = shim.state / "region"
    fd = os.open(path, os.O_RDWR)
    try:
        dev0 = ffi.offsetof("struct gpuslice_region", "devices")
        os.pwrite(fd, limit_bytes.to_bytes(8, sys.byteorder),
                  dev0 + ffi.offsetof("struct gpuslice_device", "limit_bytes"))
    finally:
        os.close(fd)


def test_a_host_resize_holds_for_new_and_running_processes(shim: Shim) -> None:
    """A resize written into the region holds for a process started after it
    (whose environment still says the spec's 1 GiB) and for a running one, at
    its next call."""
    p = shim.start("direct", "init", "pctx", "0", "alloc", "512M", "hold", "info")
    wait_held(p)
    assert shim.region().devices[0].limit_bytes == GIB  # it made the region: its env's
    host_resize(shim, 3 * GIB)
    res = shim.run("direct", "init", "pctx", "0", "info", "alloc", "2G", "alloc", "1G",
                   "freeall")
    rows = results(res)
    assert value_of(rows, "info") == [0, 3 * GIB - 512 * MIB, 3 * GIB]
    assert (rc_of(rows, "alloc"), rc_of(rows, "alloc", 1)) == (0, OOM)  # 2 GiB fits, 1 more not
    assert shim.region().devices[0].limit_bytes == 3 * GIB
    out, err = p.communicate(input="", timeout=60)
    clean(err)
    assert value_of(results(out), "info") == [0, 3 * GIB - 512 * MIB, 3 * GIB]  # its next one

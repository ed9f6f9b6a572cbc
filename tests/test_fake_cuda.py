"""The fake libcuda.so.1 (tests/fakedriver) as programs see it.

Each check runs in a fresh process (the driver reads the JSON and
CUDA_VISIBLE_DEVICES once, at cuInit, and keeps its state per process):
Python with ctypes for most, and small C programs that load the library the
three ways the real one is loaded: linked with -lcuda, dlopen + dlsym, and
cuGetProcAddress.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from conftest import FAKEDRIVER_DIR, REPO
from fakehost import fake_gpu

MIB = 1 << 20
CTX = 300 * MIB  # the default context_mib
GPU_MIB = 1024
INCLUDE = REPO / "native" / "shim" / "include"

# CUresult values.
OK, INVALID_VALUE, OOM, NOT_INITIALIZED = 0, 1, 2, 3
NO_DEVICE, INVALID_DEVICE, INVALID_CONTEXT = 100, 101, 201
INVALID_HANDLE, NOT_FOUND, NOT_READY, NOT_SUPPORTED = 400, 500, 600, 801
ALREADY_REGISTERED, NOT_REGISTERED, CAPTURE_UNSUPPORTED = 712, 713, 900

PRELUDE = r"""
import ctypes, json, sys
from ctypes import byref, c_int, c_uint, c_size_t, c_ulonglong, c_void_p, c_char_p
cu = ctypes.CDLL("libcuda.so.1")
MiB = 1 << 20
out = {}

def used(dev=0):
    v = c_ulonglong(7)
    r = cu.fakecuda_used_bytes(dev, byref(v))
    return v.value if r == 0 else None

def init():
    r = cu.cuInit(0)
    assert r == 0, r

def primary(dev=0):
    c = c_void_p()
    r = cu.cuDevicePrimaryCtxRetain(byref(c), dev)
    assert r == 0, r
    assert cu.cuCtxSetCurrent(c) == 0
    return c

def alloc(n, fn="cuMemAlloc_v2"):
    p = c_ulonglong()
    r = getattr(cu, fn)(byref(p), c_size_t(n))
    return r, p.value

def meminfo():
    f, t = c_size_t(), c_size_t()
    r = cu.cuMemGetInfo_v2(byref(f), byref(t))
    return [r, f.value, t.value]

def pool_attr(pool, attr):
    v = c_ulonglong()
    r = cu.cuMemPoolGetAttribute(pool, attr, byref(v))
    assert r == 0, r
    return v.value

class Prop(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", c_int), ("handleTypes", c_int), ("loc_type", c_int), ("loc_id", c_int),
                ("win32", c_void_p), ("flags", ctypes.c_ubyte * 8)]

class PoolProps(ctypes.Structure):  # CUmemPoolProps
    _fields_ = [("allocType", c_int), ("handleTypes", c_int), ("loc_type", c_int),
                ("loc_id", c_int), ("win32", c_void_p), ("maxSize", c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]

class Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("loc_type", c_int), ("loc_id", c_int), ("flags", c_int)]

class Desc2D(ctypes.Structure):  # CUDA_ARRAY_DESCRIPTOR
    _fields_ = [("Width", c_size_t), ("Height", c_size_t), ("Format", c_int),
                ("NumChannels", c_uint)]

class Desc3D(ctypes.Structure):  # CUDA_ARRAY3D_DESCRIPTOR
    _fields_ = [("Width", c_size_t), ("Height", c_size_t), ("Depth", c_size_t),
                ("Format", c_int), ("NumChannels", c_uint), ("Flags", c_uint)]
"""


def run_py(env: Dict[str, str], body: str) -> Dict[str, Any]:
    """Run PRELUDE + body in a fresh interpreter; return its `out` dict."""
    script = PRELUDE + body + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def small_gpus(count: int, **overrides: Any) -> List[Dict[str, Any]]:
    return [fake_gpu(i, memory_mib=GPU_MIB * (i + 1), name="Fake GPU %d" % i, **overrides)
            for i in range(count)]


def uuid_hex(uuid: str) -> str:
    return uuid[len("GPU-"):].replace("-", "")


# ------------------------------------------------------------------ library


def test_library_exports(fakedriver: Path) -> None:
    lib = fakedriver / "libcuda.so.1"
    assert os.readlink(fakedriver / "libcuda.so") == "libcuda.so.1"
    dyn = subprocess.run(["readelf", "-dW", "--dyn-syms", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    assert "Library soname: [libcuda.so.1]" in dyn
    exported = {line.split()[-1] for line in dyn.splitlines()
                if " FUNC " in line and " GLOBAL " in line and " UND " not in line}
    assert exported == set(EXPORTS)


def test_before_init(fake_env) -> None:
    env = fake_env(count=1)
    out = run_py(env, r"""
v = c_int()
out["version"] = [cu.cuDriverGetVersion(byref(v)), v.value]
n = c_int(5)
out["count"] = cu.cuDeviceGetCount(byref(n))
out["alloc"] = alloc(MiB)[0]
c = c_void_p()
out["ctx"] = cu.cuCtxCreate_v2(byref(c), 0, 0)
out["retain"] = cu.cuDevicePrimaryCtxRetain(byref(c), 0)
out["free"] = cu.cuMemFree_v2(c_ulonglong(0x7f0000000000))
out["used"] = used(0)
s = c_char_p()
out["name"] = [cu.cuGetErrorName(3, byref(s)), s.value.decode()]
out["bad_flags"] = cu.cuInit(1)
out["init"] = cu.cuInit(0)
out["count_after"] = [cu.cuDeviceGetCount(byref(n)), n.value]
""")
    assert out["version"] == [OK, 13000]
    for key in ("count", "alloc", "ctx", "retain", "free"):
        assert out[key] == NOT_INITIALIZED, key
    assert out["used"] is None
    assert out["name"] == [OK, "CUDA_ERROR_NOT_INITIALIZED"]
    assert out["bad_flags"] == INVALID_VALUE
    assert out["init"] == OK
    assert out["count_after"] == [OK, 1]


def test_devices(fake_env) -> None:
    gpus = small_gpus(3)
    gpus[1]["compute_capability"] = "8.0"
    gpus[2]["mig"] = True  # a MIG card still shows, whole
    gpus[2]["memory_mib"] = 8192 * 1024  # 8 TiB: the legacy 32-bit query saturates
    env = fake_env(gpus=gpus)
    out = run_py(env, r"""
init()
n = c_int()
assert cu.cuDeviceGetCount(byref(n)) == 0
out["count"] = n.value
out["devs"] = []
for i in range(n.value):
    d = c_int(-1)
    assert cu.cuDeviceGet(byref(d), i) == 0
    name = ctypes.create_string_buffer(64)
    assert cu.cuDeviceGetName(name, 64, d) == 0
    u1, u2 = (ctypes.c_ubyte * 16)(), (ctypes.c_ubyte * 16)()
    assert cu.cuDeviceGetUuid(u1, d) == 0 and cu.cuDeviceGetUuid_v2(u2, d) == 0
    t, t32 = c_size_t(), c_uint()
    assert cu.cuDeviceTotalMem_v2(byref(t), d) == 0
    assert cu.cuDeviceTotalMem(byref(t32), d) == 0
    attrs = []
    for a in (16, 75, 76):
        v = c_int(-1)
        assert cu.cuDeviceGetAttribute(byref(v), a, d) == 0
        attrs.append(v.value)
    out["devs"].append({"dev": d.value, "name": name.value.decode(), "uuid": bytes(u1).hex(),
                        "uuid2": bytes(u2).hex(), "total": t.value, "total32": t32.value,
                        "attrs": attrs})
d, name, v = c_int(), ctypes.create_string_buffer(4), c_int()
out["bad"] = [cu.cuDeviceGet(byref(d), 3), cu.cuDeviceGet(byref(d), -1), cu.cuDeviceGet(None, 0),
              cu.cuDeviceGetName(None, 4, 0), cu.cuDeviceGetName(name, 4, 9),
              cu.cuDeviceTotalMem_v2(None, 0), cu.cuDeviceGetAttribute(byref(v), 16, 3),
              cu.cuDeviceGetAttribute(byref(v), 100000, 0), cu.cuDeviceGetUuid(None, 0)]
assert cu.cuDeviceGetName(name, 4, 0) == 0
out["short_name"] = name.value.decode()
""")
    assert out["count"] == 3
    for i, dev in enumerate(out["devs"]):
        assert dev["dev"] == i
        assert dev["name"] == gpus[i]["name"]
        assert dev["uuid"] == dev["uuid2"] == uuid_hex(gpus[i]["uuid"])
        assert dev["total"] == gpus[i]["memory_mib"] * MIB
    assert out["devs"][0]["total32"] == GPU_MIB * MIB
    assert out["devs"][2]["total32"] == 2**32 - 1
    assert out["devs"][0]["attrs"] == [132, 9, 0]
    assert out["devs"][1]["attrs"] == [132, 8, 0]
    assert out["bad"] == [INVALID_DEVICE, INVALID_DEVICE, INVALID_VALUE, INVALID_VALUE,
                          INVALID_DEVICE, INVALID_VALUE, INVALID_DEVICE, INVALID_VALUE,
                          INVALID_VALUE]
    assert out["short_name"] == "Fak"


VISIBLE_CASES = [
    ("1", [1]),
    ("2,0", [2, 0]),
    (" 1 , 2 ", [1, 2]),
    ("0,7,1", [0]),           # an invalid entry hides itself and what follows
    ("1,x,0", [1]),
    ("0,0,1", [0]),           # a repeat is invalid too
    ("{uuid2},0", [2, 0]),
    ("{uuid1prefix}", [1]),   # a unique prefix of a UUID is enough
    ("GPU-ffffffff,1", None),
    ("", None),               # empty: no devices
    ("-1", None),
]


@pytest.mark.parametrize("value,expected", VISIBLE_CASES)
def test_cuda_visible_devices(fake_env, value: str, expected: Optional[List[int]]) -> None:
    gpus = small_gpus(3)
    gpus[1]["uuid"] = "GPU-12345678-aaaa-bbbb-cccc-000000000001"
    env = fake_env(gpus=gpus)
    env["CUDA_VISIBLE_DEVICES"] = value.format(uuid2=gpus[2]["uuid"],
                                               uuid1prefix=gpus[1]["uuid"][:12])
    out = run_py(env, r"""
out["init"] = cu.cuInit(0)
n = c_int(-1)
out["count"] = [cu.cuDeviceGetCount(byref(n)), n.value]
out["totals"] = []
for i in range(max(n.value, 0)):
    t = c_size_t()
    assert cu.cuDeviceTotalMem_v2(byref(t), i) == 0
    out["totals"].append(t.value)
""")
    if expected is None:
        assert out["init"] == NO_DEVICE
        assert out["count"] == [NOT_INITIALIZED, -1]
    else:
        assert out["init"] == OK
        assert out["count"] == [OK, len(expected)]
        assert out["totals"] == [gpus[i]["memory_mib"] * MIB for i in expected]


def test_missing_json(fake_env, tmp_path: Path) -> None:
    env = fake_env(count=1)
    env["GPUSLICE_FAKE_GPUS"] = str(tmp_path / "absent.json")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + "print(cu.cuInit(0), cu.cuInit(0))"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(NO_DEVICE)] * 2
    assert "gpuslice fake libcuda.so.1: " in proc.stderr and "absent.json" in proc.stderr


# ---------------------------------------------------------- memory, contexts


def test_alloc_free_oom(fake_env) -> None:
    env = fake_env(gpus=small_gpus(2))
    out = run_py(env, r"""
init()
out["no_ctx"] = [alloc(MiB)[0], meminfo()[0]]
out["used0"] = used(0)
primary(0)
out["after_ctx"] = used(0)
out["info0"] = meminfo()
r1, p1 = alloc(100 * MiB)
r2, p2 = alloc(1)
r3, p3 = alloc(3 * MiB + 5)
out["rcs"] = [r1, r2, r3]
out["ptrs"] = [p1, p2, p3]
out["used_allocs"] = used(0)
b, s = c_ulonglong(), c_size_t()
out["range"] = [cu.cuMemGetAddressRange_v2(byref(b), byref(s), c_ulonglong(p3 + 4096)),
                b.value, s.value]
out["range_miss"] = cu.cuMemGetAddressRange_v2(byref(b), byref(s), c_ulonglong(p2 + MiB))
out["frees"] = [cu.cuMemFree_v2(c_ulonglong(p)) for p in (p1, p2, p3)]
out["used_freed"] = used(0)
out["double_free"] = cu.cuMemFree_v2(c_ulonglong(p1))
out["bad_free"] = [cu.cuMemFree_v2(c_ulonglong(0)), cu.cuMemFree_v2(c_ulonglong(p3 + 4096))]
room = 1024 * MiB - 300 * MiB
out["too_big"] = alloc(room + 1)[0]
r, p = alloc(room)
out["exact"] = [r, used(0), meminfo()]
out["one_more"] = alloc(1)[0]
out["legacy"] = cu.cuMemAlloc(byref(c_uint()), 16)
out["bad_args"] = [alloc(0)[0], cu.cuMemAlloc_v2(None, c_size_t(16)),
                   cu.cuMemGetInfo_v2(None, None)]
assert cu.cuMemFree_v2(c_ulonglong(p)) == 0
primary(1)
r, q = alloc(MiB)
out["dev1"] = [r, q, used(0), used(1)]
""")
    assert out["no_ctx"] == [INVALID_CONTEXT, INVALID_CONTEXT]
    assert out["used0"] == 0
    assert out["after_ctx"] == CTX
    assert out["info0"] == [OK, GPU_MIB * MIB - CTX, GPU_MIB * MIB]
    assert out["rcs"] == [OK, OK, OK]
    ptrs = out["ptrs"]
    spans = [100 * MIB, 2 * MIB, 4 * MIB]
    for p, span in zip(ptrs, spans):
        assert p % (2 * MIB) == 0 and 0x7F0000000000 <= p < 0x7F0000000000 + (1 << 40)
    ranges = sorted(zip(ptrs, spans))
    for (a, sa), (b, _) in zip(ranges, ranges[1:]):
        assert a + sa <= b  # distinct and non-overlapping
    assert out["used_allocs"] == CTX + 100 * MIB + 1 + 3 * MIB + 5
    assert out["range"] == [OK, ptrs[2], 3 * MIB + 5]
    assert out["range_miss"] == NOT_FOUND
    assert out["frees"] == [OK, OK, OK]
    assert out["used_freed"] == CTX
    assert out["double_free"] == INVALID_VALUE
    assert out["bad_free"] == [INVALID_VALUE, INVALID_VALUE]
    assert out["too_big"] == OOM
    assert out["exact"] == [OK, GPU_MIB * MIB, [OK, 0, GPU_MIB * MIB]]
    assert out["one_more"] == OOM
    assert out["legacy"] == NOT_SUPPORTED
    assert out["bad_args"] == [INVALID_VALUE, INVALID_VALUE, INVALID_VALUE]
    r, q, used0, used1 = out["dev1"]
    assert r == OK and 0x7F0000000000 + (1 << 40) <= q < 0x7F0000000000 + (2 << 40)
    assert (used0, used1) == (CTX, CTX + MIB)


def test_pitch_and_managed(fake_env) -> None:
    env = fake_env(gpus=small_gpus(1))
    out = run_py(env, r"""
init()
primary()
p, pitch = c_ulonglong(), c_size_t()
out["pitch"] = [cu.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(1000), c_size_t(10), 4),
                pitch.value, used() - 300 * MiB]
out["pitch_bad"] = [cu.cuMemAllocPitch_v2(byref(p), byref(pitch), c_size_t(1000), c_size_t(10), 3),
                    cu.cuMemAllocPitch_v2(byref(p), None, c_size_t(1000), c_size_t(10), 4)]
assert cu.cuMemFree_v2(p) == 0
m = c_ulonglong()
out["managed"] = [cu.cuMemAllocManaged(byref(m), c_size_t(5 * MiB), 1), used() - 300 * MiB]
out["managed_bad"] = cu.cuMemAllocManaged(byref(m), c_size_t(MiB), 0)
out["managed_free"] = [cu.cuMemFree_v2(m), used() - 300 * MiB]
""")
    assert out["pitch"] == [OK, 1024, 1024 * 10]
    assert out["pitch_bad"] == [INVALID_VALUE, INVALID_VALUE]
    assert out["managed"] == [OK, 5 * MIB]
    assert out["managed_bad"] == INVALID_VALUE
    assert out["managed_free"] == [OK, 0]


def test_context_memory(fake_env) -> None:
    gpus = small_gpus(2)
    gpus[0]["context_mib"] = 100
    gpus[1]["context_mib"] = 0
    env = fake_env(gpus=gpus)
    out = run_py(env, r"""
init()
a, b, c = c_void_p(), c_void_p(), c_void_p()
out["create"] = [cu.cuCtxCreate_v2(byref(a), 0, 0), cu.cuCtxCreate_v2(byref(b), 0, 0), used(0)]
cur = c_void_p()
cu.cuCtxGetCurrent(byref(cur))
out["current_is_new"] = cur.value == b.value
d = c_int(-1)
out["ctx_dev"] = [cu.cuCtxGetDevice(byref(d)), d.value]
r, p = alloc(10 * MiB)
out["alloc_in_b"] = [r, used(0)]
out["destroy_b"] = [cu.cuCtxDestroy_v2(b), used(0)]  # its allocation goes with it
cu.cuCtxGetCurrent(byref(cur))
out["current_after"] = cur.value
out["freed_with_ctx"] = cu.cuMemFree_v2(c_ulonglong(p))
out["destroy_again"] = cu.cuCtxDestroy_v2(b)
out["no_current"] = [alloc(MiB)[0], cu.cuCtxGetDevice(byref(d)), cu.cuCtxSynchronize()]
out["set_dead"] = cu.cuCtxSetCurrent(b)
out["destroy_a"] = [cu.cuCtxDestroy_v2(a), used(0)]
p1, p2 = c_void_p(), c_void_p()
out["retain"] = [cu.cuDevicePrimaryCtxRetain(byref(p1), 0), used(0),
                 cu.cuDevicePrimaryCtxRetain(byref(p2), 0), used(0), p1.value == p2.value]
out["destroy_primary"] = cu.cuCtxDestroy_v2(p1)
cu.cuCtxSetCurrent(p1)
alloc(MiB)
out["release"] = [cu.cuDevicePrimaryCtxRelease_v2(0), used(0),
                  cu.cuDevicePrimaryCtxRelease(0), used(0),
                  cu.cuDevicePrimaryCtxRelease_v2(0), cu.cuDevicePrimaryCtxRelease_v2(5)]
out["stale_current"] = alloc(MiB)[0]
out["zero_cost"] = [cu.cuDevicePrimaryCtxRetain(byref(c), 1), used(1)]
out["v3"] = [cu.cuCtxCreate_v3(byref(a), None, 0, 0, 0), used(0), cu.cuCtxDestroy_v2(a)]
out["v4"] = [cu.cuCtxCreate_v4(byref(a), None, 0, 0), used(0), cu.cuCtxDestroy(a)]
out["bad"] = [cu.cuCtxCreate_v2(None, 0, 0), cu.cuCtxCreate_v2(byref(a), 0, 2),
              cu.cuCtxSetCurrent(c_void_p(0x1234)), cu.cuCtxDestroy_v2(c_void_p(0x1234)),
              cu.cuDevicePrimaryCtxRetain(None, 0), cu.cuCtxGetCurrent(None)]
""")
    assert out["create"] == [OK, OK, 200 * MIB]
    assert out["current_is_new"]
    assert out["ctx_dev"] == [OK, 0]
    assert out["alloc_in_b"] == [OK, 210 * MIB]
    assert out["destroy_b"] == [OK, 100 * MIB]
    assert out["current_after"] is None
    assert out["freed_with_ctx"] == INVALID_VALUE
    assert out["destroy_again"] == INVALID_CONTEXT
    assert out["no_current"] == [INVALID_CONTEXT] * 3
    assert out["set_dead"] == INVALID_CONTEXT
    assert out["destroy_a"] == [OK, 0]
    assert out["retain"] == [OK, 100 * MIB, OK, 100 * MIB, True]
    assert out["destroy_primary"] == INVALID_CONTEXT
    assert out["release"] == [OK, 101 * MIB, OK, 0, INVALID_CONTEXT, INVALID_DEVICE]
    assert out["stale_current"] == INVALID_CONTEXT
    assert out["zero_cost"] == [OK, 0]
    assert out["v3"] == [OK, 100 * MIB, OK]
    assert out["v4"] == [OK, 100 * MIB, OK]
    assert out["bad"] == [INVALID_VALUE, INVALID_DEVICE, INVALID_CONTEXT, INVALID_CONTEXT,
                          INVALID_VALUE, INVALID_VALUE]


def test_context_oom_and_bad_context_mib(fake_env) -> None:
    gpus = small_gpus(1)
    gpus[0]["context_mib"] = GPU_MIB
    env = fake_env(gpus=gpus)
    out = run_py(env, r"""
init()
a, b = c_void_p(), c_void_p()
out["rcs"] = [cu.cuCtxCreate_v2(byref(a), 0, 0), cu.cuCtxCreate_v2(byref(b), 0, 0),
              cu.cuDevicePrimaryCtxRetain(byref(b), 0), used(0)]
""")
    assert out["rcs"] == [OK, OOM, OOM, GPU_MIB * MIB]
    for bad in (-1, GPU_MIB + 1, 1.5, "100"):
        gpus[0]["context_mib"] = bad
        env = fake_env(gpus=gpus)
        proc = subprocess.run([sys.executable, "-c", PRELUDE + "print(cu.cuInit(0))"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.strip() == str(NO_DEVICE), bad
        assert "gpus[0].context_mib" in proc.stderr, bad


# ------------------------------------------------------------------- VMM


def test_vmm(fake_env) -> None:
    env = fake_env(gpus=small_gpus(2))
    out = run_py(env, r"""
init()
prop = Prop(type=1, loc_type=1, loc_id=1)
g = c_size_t()
out["gran"] = [cu.cuMemGetAllocationGranularity(byref(g), byref(prop), 0), g.value,
               cu.cuMemGetAllocationGranularity(byref(g), byref(prop), 1), g.value]
h = c_ulonglong()
out["create"] = [cu.cuMemCreate(byref(h), c_size_t(8 * MiB), byref(prop), c_ulonglong(0)),
                 used(0), used(1)]
va = c_ulonglong()
out["reserve"] = cu.cuMemAddressReserve(byref(va), c_size_t(16 * MiB), c_size_t(0),
                                        c_ulonglong(0), c_ulonglong(0))
out["va"] = va.value
out["map"] = cu.cuMemMap(va, c_size_t(8 * MiB), c_size_t(0), h, c_ulonglong(0))
out["map_twice"] = cu.cuMemMap(va, c_size_t(8 * MiB), c_size_t(0), h, c_ulonglong(0))
acc = Access(loc_type=1, loc_id=1, flags=3)
out["access"] = [cu.cuMemSetAccess(va, c_size_t(8 * MiB), byref(acc), c_size_t(1)),
                 cu.cuMemSetAccess(va, c_size_t(16 * MiB), byref(acc), c_size_t(1))]
b, s = c_ulonglong(), c_size_t()
out["range"] = [cu.cuMemGetAddressRange_v2(byref(b), byref(s), c_ulonglong(va.value + 5)),
                b.value - va.value, s.value]
out["release_mapped"] = [cu.cuMemRelease(h), used(1)]  # still mapped: still held
out["release_twice"] = cu.cuMemRelease(h)
out["addr_free_mapped"] = cu.cuMemAddressFree(va, c_size_t(16 * MiB))
out["unmap"] = [cu.cuMemUnmap(va, c_size_t(8 * MiB)), used(1)]
out["unmap_again"] = cu.cuMemUnmap(va, c_size_t(8 * MiB))
out["addr_free"] = [cu.cuMemAddressFree(va, c_size_t(8 * MiB)),
                    cu.cuMemAddressFree(va, c_size_t(16 * MiB)),
                    cu.cuMemAddressFree(va, c_size_t(16 * MiB))]
out["plain"] = [cu.cuMemCreate(byref(h), c_size_t(2 * MiB), byref(prop), c_ulonglong(0)),
                used(1), cu.cuMemRelease(h), used(1)]
bad_dev = Prop(type=1, loc_type=1, loc_id=2)
bad_type = Prop(type=0, loc_type=1, loc_id=0)
out["bad"] = [cu.cuMemCreate(byref(h), c_size_t(MiB), byref(prop), c_ulonglong(0)),
              cu.cuMemCreate(byref(h), c_size_t(2 * MiB), byref(bad_dev), c_ulonglong(0)),
              cu.cuMemCreate(byref(h), c_size_t(2 * MiB), byref(bad_type), c_ulonglong(0)),
              cu.cuMemCreate(None, c_size_t(2 * MiB), byref(prop), c_ulonglong(0)),
              cu.cuMemCreate(byref(h), c_size_t(2 * MiB), None, c_ulonglong(0)),
              cu.cuMemRelease(c_ulonglong(12345)),
              cu.cuMemGetAllocationGranularity(byref(g), byref(bad_dev), 0),
              cu.cuMemMap(c_ulonglong(0x1000), c_size_t(2 * MiB), c_size_t(0), c_ulonglong(1),
                          c_ulonglong(0)),
              cu.cuMemUnmap(c_ulonglong(0x1000), c_size_t(2 * MiB)),
              cu.cuMemAddressReserve(byref(va), c_size_t(MiB), c_size_t(0), c_ulonglong(0),
                                     c_ulonglong(0))]
out["oom"] = [cu.cuMemCreate(byref(h), c_size_t(2048 * MiB), byref(prop), c_ulonglong(0)),
              cu.cuMemCreate(byref(h), c_size_t(2050 * MiB), byref(prop), c_ulonglong(0))]
""")
    assert out["gran"] == [OK, 2 * MIB, OK, 2 * MIB]
    assert out["create"] == [OK, 0, 8 * MIB]
    assert out["reserve"] == OK and out["va"] % (2 * MIB) == 0
    assert out["map"] == OK
    assert out["map_twice"] == INVALID_VALUE
    assert out["access"] == [OK, INVALID_VALUE]
    assert out["range"] == [OK, 0, 8 * MIB]
    assert out["release_mapped"] == [OK, 8 * MIB]
    assert out["release_twice"] == INVALID_VALUE
    assert out["addr_free_mapped"] == INVALID_VALUE
    assert out["unmap"] == [OK, 0]
    assert out["unmap_again"] == INVALID_VALUE
    assert out["addr_free"] == [INVALID_VALUE, OK, INVALID_VALUE]
    assert out["plain"] == [OK, 2 * MIB, OK, 0]
    assert out["bad"] == [INVALID_VALUE, INVALID_DEVICE, INVALID_VALUE, INVALID_VALUE,
                          INVALID_VALUE, INVALID_VALUE, INVALID_DEVICE, INVALID_VALUE,
                          INVALID_VALUE, INVALID_VALUE]
    assert out["oom"] == [OK, OOM]


# ------------------------------------------------------------------ pools

RESERVED, USED, THRESHOLD = 5, 7, 4


def test_pools(fake_env) -> None:
    env = fake_env(gpus=small_gpus(2))
    out = run_py(env, r"""
RESERVED, USED, THRESHOLD = 5, 7, 4
init()
primary(0)
base = used(0)
pool = c_void_p()
assert cu.cuDeviceGetDefaultMemPool(byref(pool), 0) == 0
def state(p=None):
    p = p or pool
    return [pool_attr(p, RESERVED), pool_attr(p, USED), used(0) - base]
pa = c_ulonglong()
out["alloc"] = [cu.cuMemAllocAsync(byref(pa), c_size_t(3 * MiB), None)] + state()
out["free"] = [cu.cuMemFreeAsync(pa, None)] + state()  # kept reserved
out["reuse"] = [cu.cuMemAllocAsync_ptsz(byref(pa), c_size_t(MiB), c_void_p(2))] + state()
out["free_ptsz"] = [cu.cuMemFreeAsync_ptsz(pa, c_void_p(2))] + state()
out["sync"] = [cu.cuStreamSynchronize(None)] + state()  # threshold 0: given back
big = c_ulonglong(2**64 - 1)
assert cu.cuMemPoolSetAttribute(pool, THRESHOLD, byref(big)) == 0
out["threshold"] = pool_attr(pool, THRESHOLD)
cu.cuMemAllocAsync(byref(pa), c_size_t(5 * MiB), None)
cu.cuMemFreeAsync(pa, None)
out["sync_kept"] = [cu.cuCtxSynchronize()] + state()
out["trim_keep"] = [cu.cuMemPoolTrimTo(pool, c_size_t(2 * MiB))] + state()
out["trim_zero"] = [cu.cuMemPoolTrimTo(pool, c_size_t(0))] + state()
# A pool of our own, on a stream of our own.
props = PoolProps(allocType=1, loc_type=1, loc_id=0)
mine, s = c_void_p(), c_void_p()
out["create"] = [cu.cuMemPoolCreate(byref(mine), byref(props)), cu.cuStreamCreate(byref(s), 0)]
out["from_pool"] = [cu.cuMemAllocFromPoolAsync(byref(pa), c_size_t(MiB + 1), mine, s)] + state(mine)
out["high"] = [pool_attr(mine, 6), pool_attr(mine, 8)]
out["destroy_busy"] = [cu.cuMemPoolDestroy(mine), used(0) - base]
out["free_after_destroy"] = [cu.cuMemFreeAsync(pa, s), used(0) - base]
out["pool_oom"] = cu.cuMemAllocAsync(byref(pa), c_size_t(1024 * MiB), None)
# Freeing with cuMemFree returns memory to the pool as well.
cu.cuMemAllocAsync(byref(pa), c_size_t(MiB), None)
out["memfree"] = [cu.cuMemFree_v2(pa)] + state()
cu.cuMemPoolTrimTo(pool, c_size_t(0))
other = c_void_p()
cu.cuDeviceGetDefaultMemPool(byref(other), 1)
v = c_ulonglong(1)
out["bad"] = [cu.cuMemPoolDestroy(pool), cu.cuMemPoolDestroy(mine),
              cu.cuMemPoolSetAttribute(pool, RESERVED, byref(v)),
              cu.cuMemPoolGetAttribute(pool, 99, byref(v)),
              cu.cuMemPoolGetAttribute(c_void_p(0x1234), USED, byref(v)),
              cu.cuMemAllocFromPoolAsync(byref(pa), c_size_t(MiB), mine, None),
              cu.cuMemAllocAsync(byref(pa), c_size_t(0), None),
              cu.cuMemAllocAsync(None, c_size_t(MiB), None),
              cu.cuMemAllocAsync(byref(pa), c_size_t(MiB), c_void_p(0x1234)),
              cu.cuDeviceGetDefaultMemPool(byref(pool), 2),
              cu.cuMemPoolCreate(byref(mine), None),
              other.value != pool.value]
cu.cuCtxSetCurrent(None)
out["no_ctx"] = cu.cuMemAllocAsync(byref(pa), c_size_t(MiB), None)
""")
    M = MIB
    assert out["alloc"] == [OK, 4 * M, 3 * M, 4 * M]  # reservations grow by 2 MiB steps
    assert out["free"] == [OK, 4 * M, 0, 4 * M]
    assert out["reuse"] == [OK, 4 * M, M, 4 * M]
    assert out["free_ptsz"] == [OK, 4 * M, 0, 4 * M]
    assert out["sync"] == [OK, 0, 0, 0]
    assert out["threshold"] == 2**64 - 1
    assert out["sync_kept"] == [OK, 6 * M, 0, 6 * M]
    assert out["trim_keep"] == [OK, 2 * M, 0, 2 * M]
    assert out["trim_zero"] == [OK, 0, 0, 0]
    assert out["create"] == [OK, OK]
    assert out["from_pool"] == [OK, 2 * M, M + 1, 2 * M]
    assert out["high"] == [2 * M, M + 1]
    assert out["destroy_busy"] == [OK, 2 * M]
    assert out["free_after_destroy"] == [OK, 0]
    assert out["pool_oom"] == OOM
    assert out["memfree"] == [OK, 2 * M, 0, 2 * M]
    assert out["bad"] == [INVALID_VALUE, INVALID_VALUE, INVALID_VALUE, INVALID_VALUE,
                          INVALID_VALUE, INVALID_VALUE, INVALID_VALUE, INVALID_VALUE,
                          INVALID_HANDLE, INVALID_DEVICE, INVALID_VALUE, True]
    assert out["no_ctx"] == INVALID_CONTEXT


# ----------------------------------------------------------------- arrays

U8, U16, FLOAT = 0x01, 0x02, 0x20


def test_arrays(fake_env) -> None:
    env = fake_env(gpus=small_gpus(1))
    out = run_py(env, r"""
init()
primary()
base = used()
def made(fn, desc, *extra):
    h = c_void_p()
    r = getattr(cu, fn)(byref(h), byref(desc), *extra)
    return r, h, used() - base
out["sizes"] = []
handles = []
for fn, desc, extra in [
        ("cuArrayCreate_v2", Desc2D(100, 10, 0x20, 4), ()),      # float4 100x10
        ("cuArrayCreate_v2", Desc2D(1000, 0, 0x01, 1), ()),      # 1D bytes
        ("cuArray3DCreate_v2", Desc3D(16, 8, 4, 0x02, 2, 0), ()),
        ("cuArray3DCreate_v2", Desc3D(16, 0, 0, 0x20, 1, 0), ()),
        ("cuMipmappedArrayCreate", Desc3D(64, 64, 0, 0x01, 1, 0), (3,)),
        ("cuMipmappedArrayCreate", Desc3D(8, 2, 0, 0x20, 1, 0), (4,))]:
    before = used()
    r, h, _ = made(fn, desc, *extra)
    out["sizes"].append([r, used() - before])
    handles.append(h)
out["total"] = used() - base
out["destroy"] = [cu.cuArrayDestroy(handles[0]), cu.cuArrayDestroy(handles[0]),
                  cu.cuArrayDestroy(handles[4]), cu.cuMipmappedArrayDestroy(handles[4]),
                  cu.cuMipmappedArrayDestroy(handles[1])]
for h in handles[1:4]:
    assert cu.cuArrayDestroy(h) == 0
assert cu.cuMipmappedArrayDestroy(handles[5]) == 0
out["after"] = used() - base
h = c_void_p()
out["bad"] = [cu.cuArrayCreate_v2(byref(h), byref(Desc2D(100, 10, 0x77, 1))),
              cu.cuArrayCreate_v2(byref(h), byref(Desc2D(100, 10, 0x20, 3))),
              cu.cuArrayCreate_v2(byref(h), byref(Desc2D(0, 10, 0x20, 1))),
              cu.cuArrayCreate_v2(byref(h), None),
              cu.cuArrayCreate_v2(None, byref(Desc2D(1, 1, 0x20, 1))),
              cu.cuMipmappedArrayCreate(byref(h), byref(Desc3D(64, 64, 0, 1, 1, 0)), 8),
              cu.cuMipmappedArrayCreate(byref(h), byref(Desc3D(64, 64, 0, 1, 1, 0)), 0),
              cu.cuArrayCreate_v2(byref(h), byref(Desc2D(1 << 20, 1 << 20, 0x20, 4)))]
cu.cuCtxSetCurrent(None)
out["no_ctx"] = cu.cuArrayCreate_v2(byref(h), byref(Desc2D(1, 1, 0x20, 1)))
""")
    assert out["sizes"] == [[OK, 100 * 10 * 4 * 4], [OK, 1000], [OK, 16 * 8 * 4 * 2 * 2],
                            [OK, 16 * 4], [OK, 64 * 64 + 32 * 32 + 16 * 16],
                            [OK, (8 * 2 + 4 * 1 + 2 * 1 + 1 * 1) * 4]]
    assert out["total"] == sum(s for _, s in out["sizes"])
    assert out["destroy"] == [OK, INVALID_HANDLE, INVALID_HANDLE, OK, INVALID_HANDLE]
    assert out["after"] == 0
    assert out["bad"] == [INVALID_VALUE] * 7 + [OOM]
    assert out["no_ctx"] == INVALID_CONTEXT


# -------------------------------------------------------- streams, launches


def test_streams_and_launches(fake_env) -> None:
    env = fake_env(gpus=small_gpus(1))
    out = run_py(env, r"""
init()
cu.fakecuda_launch_count.restype = c_ulonglong
null = c_void_p()
def launch(stream):
    return cu.cuLaunchKernel(c_void_p(1), 1, 1, 1, 32, 1, 1, 0, stream, None, None)
out["no_ctx"] = [launch(None), cu.fakecuda_launch_count(), cu.cuStreamSynchronize(None)]
primary()
s = c_void_p()
out["create"] = [cu.cuStreamCreate(byref(s), 0), cu.cuStreamCreate(None, 0),
                 cu.cuStreamCreate(byref(c_void_p()), 7)]
class Config(ctypes.Structure):
    _fields_ = [("dims", c_uint * 7), ("hStream", c_void_p), ("attrs", c_void_p),
                ("numAttrs", c_uint)]
cfg = Config(hStream=s)
rcs = [launch(None), launch(s), launch(c_void_p(1)), launch(c_void_p(2)),
       cu.cuLaunchKernel_ptsz(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, None, None, None),
       cu.cuLaunchKernelEx(byref(cfg), c_void_p(1), None, None),
       cu.cuLaunchKernelEx_ptsz(byref(cfg), c_void_p(1), None, None),
       cu.cuLaunchCooperativeKernel(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, s, None),
       cu.cuLaunchCooperativeKernel_ptsz(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, s, None),
       cu.cuGraphLaunch(c_void_p(1), s), cu.cuGraphLaunch_ptsz(c_void_p(1), None)]
out["launches"] = [rcs, cu.fakecuda_launch_count()]
out["bad"] = [launch(c_void_p(0x1234)), cu.cuLaunchKernelEx(None, c_void_p(1), None, None),
              cu.fakecuda_launch_count()]
out["sync"] = [cu.cuStreamSynchronize(s), cu.cuStreamSynchronize_ptsz(None),
               cu.cuCtxSynchronize()]
out["destroy"] = [cu.cuStreamDestroy_v2(s), cu.cuStreamDestroy_v2(s), launch(s),
                  cu.cuStreamDestroy_v2(None)]
""")
    assert out["no_ctx"] == [INVALID_CONTEXT, 0, INVALID_CONTEXT]
    assert out["create"] == [OK, INVALID_VALUE, INVALID_VALUE]
    assert out["launches"] == [[OK] * 11, 11]
    assert out["bad"] == [INVALID_HANDLE, INVALID_VALUE, 11]
    assert out["sync"] == [OK, OK, OK]
    assert out["destroy"] == [OK, INVALID_HANDLE, INVALID_HANDLE, INVALID_HANDLE]


# ------------------------------------------------------- events, timeline

KERNEL_MS = 50  # long enough that the checks below run well within one launch


def test_events_and_timeline(fake_env) -> None:
    env = fake_env(gpus=small_gpus(1))
    env["FAKECUDA_KERNEL_NS"] = str(KERNEL_MS * 1000 * 1000)
    out = run_py(env, r"""
from ctypes import c_float
init()
cu.fakecuda_launch_count.restype = c_ulonglong
def launch(stream=None):
    r = cu.cuLaunchKernel(c_void_p(1), 1, 1, 1, 32, 1, 1, 0, stream, None, None)
    assert r == 0, r
def event(flags=0):
    e = c_void_p()
    r = cu.cuEventCreate(byref(e), flags)
    assert r == 0, r
    return e
def elapsed(a, b, fn="cuEventElapsedTime"):
    ms = c_float(-1)
    r = getattr(cu, fn)(byref(ms), a, b)
    return [r, round(ms.value, 3)]
e = c_void_p()
out["no_ctx"] = cu.cuEventCreate(byref(e), 0)
p0 = primary()
a, b, never, notime = event(), event(), event(), event(2)
# a is stamped when the first launch completes, b three launches later.
launch()
out["record"] = [cu.cuEventRecord(a, None), cu.cuEventRecord(notime, None)]
launch(); launch(); launch()
out["record_b"] = cu.cuEventRecord_ptsz(b, None)
out["pending"] = [cu.cuEventQuery(b), elapsed(a, b)[0], cu.cuEventQuery(never)]
out["sync"] = [cu.cuEventSynchronize(b), cu.cuEventQuery(b), cu.cuEventQuery(a)]
out["elapsed"] = [elapsed(a, b), elapsed(b, a), elapsed(a, b, "cuEventElapsedTime_v2"),
                  elapsed(a, a)]
out["elapsed_bad"] = [elapsed(a, never)[0], elapsed(never, b)[0], elapsed(notime, b)[0],
                      elapsed(a, notime)[0], elapsed(a, c_void_p(0x1234))[0],
                      cu.cuEventElapsedTime(None, a, b)]
out["never"] = [cu.cuEventSynchronize(never), cu.cuEventQuery(never)]
# Streams run independently; handles 0, 1 and 2 share the default timeline.
s = c_void_p()
assert cu.cuStreamCreate(byref(s), 0) == 0
on_s, on_default, on_legacy = event(), event(), event()
launch(s)
out["streams"] = [cu.cuEventRecord(on_s, s), cu.cuEventRecord(on_default, None),
                  cu.cuEventQuery(on_s), cu.cuEventQuery(on_default)]
out["stream_sync"] = [cu.cuStreamSynchronize(s), cu.cuEventQuery(on_s)]
launch(c_void_p(2))
out["shared"] = [cu.cuEventRecordWithFlags(on_legacy, c_void_p(1), 0),
                 cu.cuEventQuery(on_legacy), cu.cuStreamSynchronize(None),
                 cu.cuEventQuery(on_legacy)]
# cuCtxSynchronize waits for a destroyed stream's work too.
launch(s)
out["ctx_sync"] = [cu.cuEventRecordWithFlags_ptsz(on_s, s, 1), cu.cuStreamDestroy_v2(s),
                   cu.cuEventQuery(on_s), cu.cuCtxSynchronize(), cu.cuEventQuery(on_s)]
# Every launch entry point keeps its stream busy: each on an idle stream of
# its own, then an event recorded after it is not yet complete.
class Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("dims", c_uint * 7), ("hStream", c_void_p), ("attrs", c_void_p),
                ("numAttrs", c_uint)]
kernel = lambda fn: lambda st: getattr(cu, fn)(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, st, None, None)
coop = lambda fn: lambda st: getattr(cu, fn)(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, st, None)
ex = lambda fn: lambda st: getattr(cu, fn)(byref(Config(hStream=st)), c_void_p(1), None, None)
graph = lambda fn: lambda st: getattr(cu, fn)(c_void_p(1), st)
out["entry_points"] = []
for go in (kernel("cuLaunchKernel"), kernel("cuLaunchKernel_ptsz"), ex("cuLaunchKernelEx"),
           ex("cuLaunchKernelEx_ptsz"), coop("cuLaunchCooperativeKernel"),
           coop("cuLaunchCooperativeKernel_ptsz"), graph("cuGraphLaunch"),
           graph("cuGraphLaunch_ptsz")):
    st, ev = c_void_p(), event()
    assert cu.cuStreamCreate(byref(st), 0) == 0
    out["entry_points"].append([go(st), cu.cuEventRecord(ev, st), cu.cuEventQuery(ev)])
out["launches"] = cu.fakecuda_launch_count()
# Bad input.
other = c_void_p()
assert cu.cuCtxCreate_v2(byref(other), 0, 0) == 0  # now current
mine = event()
cu.cuCtxSetCurrent(p0)
out["bad"] = [cu.cuEventCreate(None, 0), cu.cuEventCreate(byref(e), 8),
              cu.cuEventCreate(byref(e), 4),  # interprocess needs timing disabled
              cu.cuEventRecord(c_void_p(0x1234), None), cu.cuEventRecord(a, c_void_p(0x1234)),
              cu.cuEventRecord(mine, None),  # another context's event
              cu.cuEventRecordWithFlags(a, None, 2), cu.cuEventQuery(c_void_p(0x1234)),
              cu.cuEventSynchronize(None), cu.cuEventDestroy_v2(c_void_p(0x1234))]
out["ipc"] = cu.cuEventCreate(byref(e), 6)
out["destroy"] = [cu.cuEventDestroy_v2(a), cu.cuEventDestroy_v2(a), cu.cuEventQuery(a),
                  cu.cuEventDestroy(b), elapsed(a, b)[0]]
out["ctx_gone"] = [cu.cuEventQuery(mine), cu.cuCtxDestroy_v2(other), cu.cuEventQuery(mine),
                   cu.cuEventDestroy_v2(mine)]
cu.cuCtxSetCurrent(None)
out["no_ctx_record"] = cu.cuEventRecord(never, None)
sp = c_char_p()
out["name"] = [cu.cuGetErrorName(600, byref(sp)), sp.value.decode()]
""")
    span = 3 * KERNEL_MS
    assert out["no_ctx"] == INVALID_CONTEXT
    assert out["record"] == [OK, OK]
    assert out["record_b"] == OK
    assert out["pending"] == [NOT_READY, NOT_READY, OK]
    assert out["sync"] == [OK, OK, OK]
    (r1, ms1), (r2, ms2), (r3, ms3), (r4, ms4) = out["elapsed"]
    assert [r1, r2, r3, r4] == [OK] * 4
    # From the stamps, not from a clock read at the calls: exact but for
    # float rounding (and a launch that found its stream idle, on a host that
    # stalled for longer than a whole launch).
    assert abs(ms1 - span) <= 0.2 and abs(ms3 - span) <= 0.2
    assert ms2 == -ms1 and ms4 == 0
    assert out["elapsed_bad"] == [INVALID_HANDLE] * 5 + [INVALID_VALUE]
    assert out["never"] == [OK, OK]
    assert out["streams"] == [OK, OK, NOT_READY, OK]
    assert out["stream_sync"] == [OK, OK]
    assert out["shared"] == [OK, NOT_READY, OK, OK]
    assert out["ctx_sync"] == [OK, OK, NOT_READY, OK, OK]
    assert out["entry_points"] == [[OK, OK, NOT_READY]] * 8
    assert out["launches"] == 7 + 8
    assert out["bad"] == [INVALID_VALUE, INVALID_VALUE, INVALID_VALUE, INVALID_HANDLE,
                          INVALID_HANDLE, INVALID_HANDLE, INVALID_VALUE, INVALID_HANDLE,
                          INVALID_HANDLE, INVALID_HANDLE]
    assert out["ipc"] == OK
    assert out["destroy"] == [OK, INVALID_HANDLE, INVALID_HANDLE, OK, INVALID_HANDLE]
    assert out["ctx_gone"] == [OK, OK, INVALID_HANDLE, INVALID_HANDLE]
    assert out["no_ctx_record"] == INVALID_CONTEXT
    assert out["name"] == [OK, "CUDA_ERROR_NOT_READY"]


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", "12ms", " 7", "99999999999999999999999"])
def test_kernel_ns_malformed(fake_env, value: str) -> None:
    """A bad FAKECUDA_KERNEL_NS is named on stderr and launches take no time."""
    env = fake_env(count=1)
    env["FAKECUDA_KERNEL_NS"] = value
    body = r"""
init()
primary()
e = c_void_p()
assert cu.cuEventCreate(byref(e), 0) == 0
assert cu.cuLaunchKernel(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
assert cu.cuEventRecord(e, None) == 0
print(cu.cuEventQuery(e))
"""
    proc = subprocess.run([sys.executable, "-c", PRELUDE + body], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(OK)
    assert "gpuslice fake libcuda.so.1: FAKECUDA_KERNEL_NS=%s:" % value in proc.stderr


def test_kernel_ns_unset_or_empty_is_quiet(fake_env) -> None:
    for value in (None, ""):
        env = fake_env(count=1)
        env.pop("FAKECUDA_KERNEL_NS", None)
        if value is not None:
            env["FAKECUDA_KERNEL_NS"] = value
        proc = subprocess.run([sys.executable, "-c", PRELUDE + "print(cu.cuInit(0))"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.stdout.strip() == str(OK)
        assert "FAKECUDA_KERNEL_NS" not in proc.stderr


def test_error_strings(fake_env) -> None:
    env = fake_env(count=1)
    out = run_py(env, r"""
s = c_char_p()
out["ok"] = [[cu.cuGetErrorName(c, byref(s)), s.value.decode(),
              cu.cuGetErrorString(c, byref(s)), s.value.decode()] for c in (0, 2, 101, 500)]
out["bad"] = [cu.cuGetErrorName(12345, byref(s)), s.value, cu.cuGetErrorString(0, None)]
""")
    assert out["ok"] == [[OK, "CUDA_SUCCESS", OK, "no error"],
                         [OK, "CUDA_ERROR_OUT_OF_MEMORY", OK, "out of memory"],
                         [OK, "CUDA_ERROR_INVALID_DEVICE", OK, "invalid device ordinal"],
                         [OK, "CUDA_ERROR_NOT_FOUND", OK, "named symbol not found"]]
    assert out["bad"] == [INVALID_VALUE, None, INVALID_VALUE]


# ----------------------------------------------------- C programs: dlopen

# Loads the driver as the CUDA runtime does: dlopen, dlsym of cuGetProcAddress,
# then every entry point through it. Prints one line per query:
#   symbol version flags rc status variant
# where variant is the exported name whose address came back ("-" for NULL).
GPA_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gpuslice/cuda_api.h>

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_t)(const char *, void **, int, cuuint64_t);
static const char *variants[] = {
    "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuDeviceTotalMem",
    "cuDeviceTotalMem_v2", "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4",
    "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
    "cuStreamQuery_ptsz", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpy_ptds",
    "cuGetProcAddress", "cuGetProcAddress_v2", "cuInit", "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2", "cuDeviceGetUuid", "cuDeviceGetUuid_v2", "cuGraphLaunch_ptsz",
    "cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz",
    "cuEventDestroy", "cuEventDestroy_v2", "cuEventElapsedTime", "cuEventElapsedTime_v2",
    "cuEventCreate", "cuEventQuery", "cuEventSynchronize", "cuMemHostRegister",
    "cuMemHostRegister_v2", "cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2",
    "cuStreamWaitValue32", "cuStreamWaitValue32_ptsz", "cuStreamWaitValue32_v2",
    "cuStreamWaitValue32_v2_ptsz", NULL};

int main(int argc, char **argv)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    gpa2_t gpa2 = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
    for (int i = 1; i + 2 < argc; i += 3) {
        void *fn = (void *)0x1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
        long long flags;
        sscanf(argv[i + 2], "%lld", &flags);
        CUresult rc = gpa2(argv[i], &fn, atoi(argv[i + 1]), (cuuint64_t)flags, &st);
        const char *name = fn ? "?" : "-";
        for (int k = 0; fn && variants[k]; k++)
            if (dlsym(h, variants[k]) == fn)
                name = variants[k];
        printf("%s %s %s %d %d %s\n", argv[i], argv[i + 1], argv[i + 2], rc, (int)st, name);
    }
    /* The v1 entry, found through v2, and a call through what it returns. */
    gpa1_t gpa1 = NULL;
    if (gpa2("cuGetProcAddress", (void **)&gpa1, 11030, 0, NULL) || !gpa1) return 3;
    CUresult (*init)(unsigned) = NULL;
    CUresult (*retain)(CUcontext *, CUdevice) = NULL;
    CUresult (*setcur)(CUcontext) = NULL;
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    if (gpa1("cuInit", (void **)&init, 12000, 0) || gpa1("cuMemAlloc", (void **)&alloc, 12000, 0) ||
        gpa1("cuDevicePrimaryCtxRetain", (void **)&retain, 12000, 0) ||
        gpa1("cuCtxSetCurrent", (void **)&setcur, 12000, 0))
        return 4;
    void *nothing = (void *)1;
    if (gpa1("cuNoSuchThing", &nothing, 12000, 0) != CUDA_ERROR_NOT_FOUND || nothing) return 5;
    if (gpa1(NULL, &nothing, 12000, 0) != CUDA_ERROR_INVALID_VALUE) return 6;
    if (gpa1("cuInit", NULL, 12000, 0) != CUDA_ERROR_INVALID_VALUE) return 7;
    CUcontext ctx;
    CUdeviceptr p;
    if (init(0) || retain(&ctx, 0) || setcur(ctx) || alloc(&p, 64 << 20)) return 8;
    int (*usedf)(int, unsigned long long *) = (int (*)(int, unsigned long long *))dlsym(h, "fakecuda_used_bytes");
    unsigned long long used = 0;
    if (!usedf || usedf(0, &used)) return 9;
    printf("used %llu\n", used);
    return 0;
}
"""

PER_THREAD = 2
GPA_CASES = [
    # symbol, cudaVersion, flags -> rc, status, variant
    ("cuMemAlloc", 12000, 0, OK, 0, "cuMemAlloc_v2"),
    ("cuMemAlloc", 3020, 0, OK, 0, "cuMemAlloc_v2"),
    ("cuMemAlloc", 3010, 0, OK, 0, "cuMemAlloc"),
    ("cuMemAlloc", 1000, 0, NOT_FOUND, 2, "-"),
    ("cuMemAlloc", 12000, PER_THREAD, OK, 0, "cuMemAlloc_v2"),
    ("cuMemFree", 13000, 0, OK, 0, "cuMemFree_v2"),
    ("cuMemGetInfo", 12000, 0, OK, 0, "cuMemGetInfo_v2"),
    ("cuDeviceTotalMem", 12000, 0, OK, 0, "cuDeviceTotalMem_v2"),
    ("cuDeviceTotalMem", 2000, 0, OK, 0, "cuDeviceTotalMem"),
    ("cuCtxCreate", 3020, 0, OK, 0, "cuCtxCreate_v2"),
    ("cuCtxCreate", 11040, 0, OK, 0, "cuCtxCreate_v3"),
    ("cuCtxCreate", 12040, 0, OK, 0, "cuCtxCreate_v3"),
    ("cuCtxCreate", 13000, 0, OK, 0, "cuCtxCreate_v4"),
    ("cuMemAllocAsync", 12000, 0, OK, 0, "cuMemAllocAsync"),
    ("cuMemAllocAsync", 12000, 1, OK, 0, "cuMemAllocAsync"),
    ("cuMemAllocAsync", 12000, PER_THREAD, OK, 0, "cuMemAllocAsync_ptsz"),
    ("cuMemAllocAsync", 11010, PER_THREAD, NOT_FOUND, 2, "-"),
    ("cuMemFreeAsync", 11020, PER_THREAD, OK, 0, "cuMemFreeAsync_ptsz"),
    ("cuLaunchKernel", 12000, PER_THREAD, OK, 0, "cuLaunchKernel_ptsz"),
    ("cuLaunchKernel", 12000, 0, OK, 0, "cuLaunchKernel"),
    ("cuStreamSynchronize", 6050, PER_THREAD, OK, 0, "cuStreamSynchronize"),
    ("cuStreamSynchronize", 7000, PER_THREAD, OK, 0, "cuStreamSynchronize_ptsz"),
    ("cuStreamQuery", 7000, PER_THREAD, OK, 0, "cuStreamQuery_ptsz"),
    ("cuMemcpyDtoH", 12000, 0, OK, 0, "cuMemcpyDtoH_v2"),
    ("cuMemcpyDtoH", 12000, PER_THREAD, OK, 0, "cuMemcpyDtoH_v2_ptds"),
    ("cuMemcpy", 12000, PER_THREAD, OK, 0, "cuMemcpy_ptds"),
    ("cuGraphLaunch", 12000, PER_THREAD, OK, 0, "cuGraphLaunch_ptsz"),
    ("cuGetProcAddress", 12000, 0, OK, 0, "cuGetProcAddress_v2"),
    ("cuGetProcAddress", 11080, 0, OK, 0, "cuGetProcAddress"),
    ("cuDevicePrimaryCtxRelease", 12000, 0, OK, 0, "cuDevicePrimaryCtxRelease_v2"),
    ("cuDeviceGetUuid", 11040, 0, OK, 0, "cuDeviceGetUuid_v2"),
    ("cuDeviceGetUuid", 11030, 0, OK, 0, "cuDeviceGetUuid"),
    ("cuInit", 12000, 0, OK, 0, "cuInit"),
    ("cuEventCreate", 12000, 0, OK, 0, "cuEventCreate"),
    ("cuEventQuery", 12000, PER_THREAD, OK, 0, "cuEventQuery"),
    ("cuEventSynchronize", 2000, 0, OK, 0, "cuEventSynchronize"),
    ("cuEventRecord", 12000, 0, OK, 0, "cuEventRecord"),
    ("cuEventRecord", 12000, PER_THREAD, OK, 0, "cuEventRecord_ptsz"),
    ("cuEventRecord", 6050, PER_THREAD, OK, 0, "cuEventRecord"),
    ("cuEventRecordWithFlags", 12000, PER_THREAD, OK, 0, "cuEventRecordWithFlags_ptsz"),
    ("cuEventRecordWithFlags", 11000, 0, NOT_FOUND, 2, "-"),
    ("cuEventDestroy", 3020, 0, OK, 0, "cuEventDestroy"),
    ("cuEventDestroy", 4000, 0, OK, 0, "cuEventDestroy_v2"),
    ("cuEventElapsedTime", 12060, 0, OK, 0, "cuEventElapsedTime"),
    ("cuEventElapsedTime", 12080, 0, OK, 0, "cuEventElapsedTime_v2"),
    ("cuEventElapsedTime_v2", 13000, 0, NOT_FOUND, 1, "-"),
    ("cuMemHostRegister", 12000, 0, OK, 0, "cuMemHostRegister_v2"),
    ("cuMemHostRegister", 6000, 0, OK, 0, "cuMemHostRegister"),
    ("cuMemHostGetDevicePointer", 12000, 0, OK, 0, "cuMemHostGetDevicePointer_v2"),
    ("cuStreamWaitValue32", 12000, 0, OK, 0, "cuStreamWaitValue32_v2"),
    ("cuStreamWaitValue32", 12000, PER_THREAD, OK, 0, "cuStreamWaitValue32_v2_ptsz"),
    ("cuStreamWaitValue32", 11060, PER_THREAD, OK, 0, "cuStreamWaitValue32_ptsz"),
    ("cuStreamWaitValue32", 11060, 0, OK, 0, "cuStreamWaitValue32"),
    ("cuNoSuchThing", 12000, 0, NOT_FOUND, 1, "-"),
    ("cuMemAlloc_v2", 12000, 0, NOT_FOUND, 1, "-"),  # base names only
    ("cuMemAlloc", 12000, 4, INVALID_VALUE, 77, "?"),  # bad flags: nothing touched
]


def compile_c(tmp_path: Path, name: str, source: str, args: List[str]) -> Path:
    src = tmp_path / (name + ".c")
    src.write_text(source)
    exe = tmp_path / name
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-I", str(INCLUDE),
                    "-o", str(exe), str(src), *args], check=True)
    return exe


def test_get_proc_address(fake_env, tmp_path: Path) -> None:
    env = fake_env(gpus=small_gpus(1))
    exe = compile_c(tmp_path, "gpa", GPA_C, ["-ldl"])
    argv = [str(exe)]
    for sym, ver, flags, *_ in GPA_CASES:
        argv += [sym, str(ver), str(flags)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    got = [tuple(line.split()) for line in lines[:-1]]
    want = [(s, str(v), str(f), str(rc), str(st), var) for s, v, f, rc, st, var in GPA_CASES]
    assert got == want
    assert lines[-1] == "used %d" % (CTX + 64 * MIB)


# ------------------------------------------- C programs: linked, threads, ASan

# Linked with -lcuda; prototypes written here as an application's cuda.h would
# give them. Threads allocate and free on both devices; bad input on the way.
THREADS_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <gpuslice/cuda_api.h>

CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuStreamSynchronize(CUstream);
typedef struct CUevent_st *CUevent;
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventQuery(CUevent);
CUresult cuEventElapsedTime_v2(float *, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr);
CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t,
                             CUdriverProcAddressQueryResult *);
int fakecuda_used_bytes(int, unsigned long long *);

#define THREADS 8
#define ROUNDS 300
static int failures;

static void *worker(void *arg)
{
    int dev = (int)(long)arg % 2;
    CUcontext ctx;
    if (cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    CUmemAllocationProp prop = {.type = 1, .location = {.type = 1, .id = dev}};
    for (int i = 0; i < ROUNDS; i++) {
        CUdeviceptr a, b;
        CUmemGenericAllocationHandle h;
        CUevent e0, e1;
        float ms;
        if (cuMemAlloc_v2(&a, (size_t)(i % 7 + 1) << 20) || cuMemAllocAsync(&b, 4096, NULL) ||
            cuMemCreate(&h, 2 << 20, &prop, 0) || cuMemFree_v2(a) || cuMemFreeAsync(b, NULL) ||
            cuMemRelease(h) || cuStreamSynchronize(NULL))
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        if (cuEventCreate(&e0, 0) || cuEventCreate(&e1, 0) || cuEventRecord(e0, NULL) ||
            cuEventRecord(e1, NULL) || cuEventSynchronize(e1) || cuEventQuery(e0) ||
            cuEventElapsedTime_v2(&ms, e0, e1) || ms < 0 || cuEventDestroy_v2(e0) ||
            cuEventDestroy_v2(e1))
            __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(void)
{
    if (cuInit(0))
        return 2;
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    /* Bad input: errors, never a crash. */
    int junk = 0;
    CUresult bad = cuMemFree_v2(0) + cuMemFree_v2(~0ull) + cuMemRelease(0) +
                   cuMemCreate(NULL, 0, NULL, 0) + cuMemGetAddressRange_v2(NULL, NULL, 0) +
                   cuArrayCreate_v2(NULL, NULL) + cuCtxSetCurrent((CUcontext)&junk) +
                   cuGetProcAddress_v2("", NULL, 0, 0, NULL) +
                   cuDevicePrimaryCtxRetain(NULL, 0);
    unsigned long long u0 = 0, u1 = 0;
    fakecuda_used_bytes(0, &u0);
    fakecuda_used_bytes(1, &u1);
    printf("%d %d %llu %llu\n", failures, (int)bad, u0 >> 20, u1 >> 20);
    return 0;
}
"""
# The codes the bad calls of THREADS_C return, summed.
THREADS_BAD_SUM = (INVALID_VALUE + INVALID_VALUE + INVALID_VALUE + INVALID_VALUE + INVALID_VALUE
                   + INVALID_VALUE + INVALID_CONTEXT + INVALID_VALUE + INVALID_VALUE)


def check_threads_output(stdout: str) -> None:
    # Both primary contexts are still retained; everything else came back.
    assert stdout.split() == ["0", str(THREADS_BAD_SUM), "300", "300"]


def test_linked_program_threads(fake_env, fakedriver: Path, tmp_path: Path) -> None:
    env = fake_env(gpus=small_gpus(2))
    exe = compile_c(tmp_path, "threads", THREADS_C, ["-pthread", "-L", str(fakedriver), "-lcuda"])
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True,
                            check=True).stdout
    assert "[libcuda.so.1]" in needed
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    check_threads_output(proc.stdout)


def test_sanitizer_build(fake_env, tmp_path: Path) -> None:
    """The fake built with ASan + UBSan, and a program run against it."""
    build = tmp_path / "build-asan"
    flags = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
    subprocess.run(["make", "-s", "-C", str(FAKEDRIVER_DIR), "BUILD=%s" % build,
                    "EXTRA_CFLAGS=%s" % flags, str(build / "libcuda.so.1"),
                    str(build / "libcuda.so")], check=True)
    exe = compile_c(tmp_path, "threads_asan", THREADS_C,
                    ["-pthread", *flags.split(), "-L", str(build), "-lcuda"])
    env = fake_env(gpus=small_gpus(2))
    env["LD_LIBRARY_PATH"] = str(build)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr
    check_threads_output(proc.stdout)


def test_clean_build_copy(tmp_path: Path) -> None:
    """make in a copy laid out like the repository builds both libraries."""
    copy = tmp_path / "tests" / "fakedriver"
    copy.mkdir(parents=True)
    for src in FAKEDRIVER_DIR.iterdir():
        if src.is_file():
            shutil.copy2(src, copy / src.name)
    shutil.copytree(INCLUDE, tmp_path / "native" / "shim" / "include")
    shutil.copytree(FAKEDRIVER_DIR.parent.parent / "native" / "hook" / "common",
                    tmp_path / "native" / "hook" / "common")  # the JSON parser it links
    shutil.copytree(FAKEDRIVER_DIR.parent.parent / "native" / "include",
                    tmp_path / "native" / "include")  # the shared headers common/ includes
    build = subprocess.run(["make", "-C", str(copy)], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "-Werror" in build.stdout
    assert os.readlink(copy / "build" / "libcuda.so") == "libcuda.so.1"
    assert (copy / "build" / "libnvidia-ml.so.1").is_file()
    assert subprocess.run(["make", "-q", "-C", str(copy)]).returncode == 0
    header = tmp_path / "native" / "shim" / "include" / "gpuslice" / "cuda_api.h"
    lib = copy / "build" / "libcuda.so.1"
    os.utime(header, (lib.stat().st_mtime + 5,) * 2)
    assert subprocess.run(["make", "-q", "-C", str(copy)]).returncode == 1


EXPORTS = [
    "cuDeviceGetMemPool",
    "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
    "cuDeviceGetUuid", "cuDeviceGetUuid_v2", "cuDeviceTotalMem", "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2", "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3",
    "cuCtxCreate_v4", "cuCtxDestroy", "cuCtxDestroy_v2", "cuCtxSetCurrent", "cuCtxGetCurrent",
    "cuCtxGetDevice", "cuCtxSynchronize", "cuMemGetInfo_v2", "cuMemAlloc", "cuMemAlloc_v2",
    "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemFree_v2", "cuMemGetAddressRange_v2",
    "cuMemCreate", "cuMemRelease", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap",
    "cuMemUnmap", "cuMemSetAccess", "cuMemGetAllocationGranularity", "cuDeviceGetDefaultMemPool",
    "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolTrimTo", "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute", "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
    "cuMemAllocFromPoolAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuStreamCreate",
    "cuStreamDestroy", "cuStreamDestroy_v2", "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
    "cuStreamQuery", "cuStreamQuery_ptsz", "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds", "cuMemcpy",
    "cuMemcpy_ptds", "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuStreamIsCapturing",
    "cuStreamIsCapturing_ptsz", "cuEventCreate", "cuEventDestroy", "cuEventDestroy_v2", "cuEventRecord", "cuEventRecord_ptsz",
    "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz", "cuEventQuery", "cuEventSynchronize",
    "cuEventElapsedTime", "cuEventElapsedTime_v2",
    "cuArrayCreate_v2", "cuArray3DCreate_v2", "cuArrayDestroy", "cuMipmappedArrayCreate",
    "cuMipmappedArrayDestroy", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
    "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGetErrorString", "cuGetErrorName",
    "cuGetProcAddress", "cuGetProcAddress_v2", "fakecuda_used_bytes", "fakecuda_launch_count",
    "fakecuda_captured_count",
    "cuGraphCreate", "cuGraphDestroy", "cuGraphAddMemAllocNode", "cuGraphAddMemFreeNode",
    "cuGraphAddEmptyNode", "cuGraphAddChildGraphNode", "cuGraphChildGraphNodeGetGraph",
    "cuGraphGetNodes", "cuGraphNodeGetType", "cuGraphMemAllocNodeGetParams",
    "cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz", "cuGraphExecDestroy",
    "cuGraphUpload", "cuGraphUpload_ptsz", "cuGraphExecUpdate", "cuGraphExecUpdate_v2",
    "cuDeviceGraphMemTrim", "cuDeviceGetGraphMemAttribute", "cuDeviceSetGraphMemAttribute",
    "cuGreenCtxCreate", "cuGreenCtxDestroy", "cuCtxSetLimit", "cuCtxGetLimit",
    "cuArrayCreate", "cuArray3DCreate", "cuMemAllocPitch", "cuGLCtxCreate_v2",
    "cuVDPAUCtxCreate_v2", "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary", "cuModuleUnload", "cuLibraryLoadData", "cuLibraryLoadFromFile",
    "cuLibraryUnload", "cuMemHostRegister", "cuMemHostRegister_v2", "cuMemHostUnregister",
    "cuMemHostGetDevicePointer", "cuMemHostGetDevicePointer_v2", "cuStreamWaitValue32",
    "cuStreamWaitValue32_v2", "cuStreamWaitValue32_ptsz", "cuStreamWaitValue32_v2_ptsz",
    "fakecuda_wait_count",
]


def test_stream_capture(fake_env) -> None:
    """Captured launches run nothing; a query during a capture invalidates it."""
    body = r"""
init(); primary()
cu.fakecuda_captured_count.restype = c_ulonglong
cu.fakecuda_launch_count.restype = c_ulonglong
def launch(s):
    return cu.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, s, None, None)
s, g, st = c_void_p(), c_void_p(), c_int(7)
assert cu.cuStreamCreate(byref(s), 0) == 0
out["default"] = cu.cuStreamBeginCapture_v2(None, 0)
out["begin"] = [cu.cuStreamBeginCapture_v2(s, 0), cu.cuStreamBeginCapture_v2(s, 0)]
out["status"] = [cu.cuStreamIsCapturing(s, byref(st)), st.value]
before = cu.fakecuda_launch_count()
out["launch"] = [launch(s), launch(s), cu.fakecuda_captured_count(),
                 cu.fakecuda_launch_count() - before]
out["end"] = [cu.cuStreamEndCapture(s, byref(g)), cu.cuStreamEndCapture(s, byref(g))]
cu.cuStreamIsCapturing(s, byref(st)); out["after"] = st.value
e = c_void_p(); cu.cuEventCreate(byref(e), 0); cu.cuEventRecord(e, None)
cu.cuStreamBeginCapture_v2(s, 0)
cu.cuEventQuery(e)  # unsafe while capturing
out["invalidated"] = cu.cuStreamEndCapture(s, byref(g))
cu.cuStreamBeginCapture_v2(s, 0)
out["fresh"] = cu.cuStreamEndCapture(s, byref(g))
"""
    out = run_py(fake_env(1), body)
    assert out["default"] == 900  # the default stream cannot be captured
    assert out["begin"] == [0, 401]
    assert out["status"] == [0, 1]
    assert out["launch"] == [0, 0, 2, 0]  # counted apart: nothing ran
    assert out["end"] == [0, 401] and out["after"] == 0
    assert out["invalidated"] == 901 and out["fresh"] == 0


def test_graph_memory_nodes(fake_env) -> None:
    """Alloc nodes hold an address; an executable graph gets memory at upload
    or launch, from the device's graph pool, which keeps it after the graph
    is destroyed until a trim; a trim unmaps live graphs too (they map again)."""
    body = r"""
init(); primary()
base = used(0)
class AllocParams(ctypes.Structure):  # CUDA_MEM_ALLOC_NODE_PARAMS
    _fields_ = [("poolProps", PoolProps), ("accessDescs", c_void_p),
                ("accessDescCount", c_size_t), ("bytesize", c_size_t), ("dptr", c_ulonglong)]
class InstParams(ctypes.Structure):  # CUDA_GRAPH_INSTANTIATE_PARAMS
    _fields_ = [("flags", c_ulonglong), ("hUploadStream", c_void_p), ("hErrNode_out", c_void_p),
                ("result_out", c_int)]
RESERVED_CUR, RESERVED_HIGH, USED_CUR = 2, 3, 0
def gattr(attr):
    v = c_ulonglong(7)
    assert cu.cuDeviceGetGraphMemAttribute(0, attr, byref(v)) == 0
    return v.value
def state():
    return [used(0) - base, gattr(RESERVED_CUR), gattr(USED_CUR)]
g, n, child, parent = c_void_p(), c_void_p(), c_void_p(), c_void_p()
assert cu.cuGraphCreate(byref(g), 0) == 0
p = AllocParams(poolProps=PoolProps(allocType=1, loc_type=1, loc_id=0), bytesize=3 * MiB)
out["node"] = [cu.cuGraphAddMemAllocNode(byref(n), g, None, 0, byref(p)), p.dptr != 0] + state()
count, ty, back = c_size_t(0), c_int(-1), AllocParams()
cu.cuGraphGetNodes(g, None, byref(count))
nodes = (c_void_p * 4)()
count4 = c_size_t(4)
out["nodes"] = [count.value, cu.cuGraphGetNodes(g, nodes, byref(count4)), count4.value,
                nodes[1] is None, cu.cuGraphNodeGetType(c_void_p(nodes[0]), byref(ty)), ty.value,
                cu.cuGraphMemAllocNodeGetParams(c_void_p(nodes[0]), byref(back)), back.bytesize,
                back.poolProps.loc_id, back.dptr == p.dptr]
e, e2, s = c_void_p(), c_void_p(), c_void_p()
cu.cuStreamCreate(byref(s), 0)
out["inst"] = [cu.cuGraphInstantiateWithFlags(byref(e), g, c_ulonglong(0))] + state()
out["launch"] = [cu.cuGraphLaunch(e, None)] + state()  # 2 MiB steps
out["relaunch"] = [cu.cuGraphLaunch(e, s)] + state()
ip = InstParams(flags=2, hUploadStream=s)  # upload at instantiation
out["upload_inst"] = [cu.cuGraphInstantiateWithParams(byref(e2), g, byref(ip)),
                      ip.result_out] + state()
out["destroy"] = [cu.cuGraphExecDestroy(e2)] + state()  # kept, idle
e3 = c_void_p()
cu.cuGraphInstantiate_v2(byref(e3), g, None, None, c_size_t(0))
out["reuse"] = [cu.cuGraphUpload(e3, s)] + state()  # the idle memory serves it
cu.cuGraphExecDestroy(e3)
out["trim"] = [cu.cuDeviceGraphMemTrim(0)] + state()  # e unmapped too
out["high"] = [gattr(RESERVED_HIGH), cu.cuDeviceSetGraphMemAttribute(0, RESERVED_HIGH,
               byref(c_ulonglong(0))), gattr(RESERVED_HIGH)]
out["remap"] = [cu.cuGraphLaunch(e, None)] + state()
# A child graph's alloc nodes count; an update takes the new graph's.
cu.cuGraphCreate(byref(parent), 0)
out["child"] = [cu.cuGraphAddChildGraphNode(byref(n), parent, None, 0, g),
                cu.cuGraphNodeGetType(n, byref(ty)), ty.value,
                cu.cuGraphChildGraphNodeGetGraph(n, byref(child)), child.value != g.value]
p2 = AllocParams(poolProps=PoolProps(allocType=1, loc_type=1, loc_id=0), bytesize=5 * MiB)
cu.cuGraphAddMemAllocNode(byref(n), parent, None, 0, byref(p2))
out["update"] = [cu.cuGraphExecUpdate_v2(e, parent, None)] + state()  # mapped: grows now
big = AllocParams(poolProps=PoolProps(allocType=1, loc_type=1, loc_id=0), bytesize=2048 * MiB)
g2, e4 = c_void_p(), c_void_p()
cu.cuGraphCreate(byref(g2), 0)
cu.cuGraphAddMemAllocNode(byref(n), g2, None, 0, byref(big))
out["oom"] = [cu.cuGraphInstantiateWithFlags(byref(e4), g2, c_ulonglong(0)),
              cu.cuGraphLaunch(e4, None)] + state()
# Capture: async alloc and free become nodes; nothing is allocated.
cs, cg = c_void_p(), c_void_p()
pa = c_ulonglong()
cu.cuStreamCreate(byref(cs), 0)
cu.cuStreamBeginCapture_v2(cs, 0)
out["capture"] = [cu.cuMemAllocAsync(byref(pa), c_size_t(7 * MiB), cs),
                  cu.cuMemFreeAsync(pa, cs), cu.cuStreamEndCapture(cs, byref(cg))] + state()
cnodes = (c_void_p * 2)()
c2 = c_size_t(2)
cu.cuGraphGetNodes(cg, cnodes, byref(c2))
t0, t1 = c_int(), c_int()
cu.cuGraphNodeGetType(c_void_p(cnodes[0]), byref(t0))
cu.cuGraphNodeGetType(c_void_p(cnodes[1]), byref(t1))
out["captured"] = [c2.value, t0.value, t1.value]
out["bad"] = [cu.cuGraphLaunch(c_void_p(0x1234), None), cu.cuGraphExecDestroy(c_void_p(0x1234)),
              cu.cuGraphUpload(c_void_p(0x1234), None), cu.cuDeviceGraphMemTrim(9),
              cu.cuGraphNodeGetType(c_void_p(0x1234), byref(ty))]
"""
    out = run_py(fake_env(gpus=small_gpus(1)), body)
    m = MIB
    assert out["node"] == [0, True, 0, 0, 0]
    assert out["nodes"] == [1, 0, 1, True, 0, 10, 0, 3 * m, 0, True]
    assert out["inst"] == [0, 0, 0, 0]  # instantiation maps nothing
    assert out["launch"] == [0, 4 * m, 4 * m, 4 * m]
    assert out["relaunch"] == [0, 4 * m, 4 * m, 4 * m]  # mapped once
    assert out["upload_inst"] == [0, 0, 8 * m, 8 * m, 8 * m]
    assert out["destroy"] == [0, 8 * m, 8 * m, 4 * m]
    assert out["reuse"] == [0, 8 * m, 8 * m, 8 * m]
    assert out["trim"] == [0, 0, 0, 0]
    assert out["high"] == [8 * m, 0, 0]
    assert out["remap"] == [0, 4 * m, 4 * m, 4 * m]
    assert out["child"] == [0, 0, 4, 0, True]  # CU_GRAPH_NODE_TYPE_GRAPH, as cuda.h
    assert out["update"] == [0, 10 * m, 10 * m, 10 * m]  # 4 (child) + 6
    assert out["oom"] == [0, OOM, 10 * m, 10 * m, 10 * m]  # the 1 GiB card
    assert out["capture"] == [0, 0, 0, 10 * m, 10 * m, 10 * m]
    assert out["captured"] == [2, 10, 11]
    # A graph handle the fake did not make launches as a plain kernel (the
    # pacer's tests launch NULL); the rest are refused.
    assert out["bad"] == [0, INVALID_VALUE, INVALID_VALUE, INVALID_DEVICE, INVALID_VALUE]


def test_green_contexts_and_limits(fake_env) -> None:
    """A green context costs a context; raised limits hold memory at once, the
    malloc heap from the next launch on (as the H200's driver)."""
    body = r"""
init(); c = primary()
base = used(0)
g = c_void_p()
out["green"] = [cu.cuGreenCtxCreate(byref(g), None, 0, 1), used(0) - base]
cur = c_void_p(); cu.cuCtxGetCurrent(byref(cur)); out["current_kept"] = cur.value == c.value
out["green_destroy"] = [cu.cuGreenCtxDestroy(g), used(0) - base]
v = c_size_t()
out["defaults"] = [cu.cuCtxGetLimit(byref(v), 2), v.value]
out["heap"] = [cu.cuCtxSetLimit(2, c_size_t(264 * MiB)), used(0) - base]
out["heap_launch"] = [cu.cuLaunchKernel(c_void_p(1), 1, 1, 1, 1, 1, 1, 0, None, None, None),
                      used(0) - base]
out["stack"] = [cu.cuCtxSetLimit(0, c_size_t(1024 + 512)), used(0) - base]
out["too_big"] = [cu.cuCtxSetLimit(2, c_size_t(4096 * MiB)), used(0) - base]
out["back"] = [cu.cuCtxSetLimit(2, c_size_t(8 * MiB)), cu.cuCtxSetLimit(0, c_size_t(1024)),
               used(0) - base]
out["other"] = cu.cuCtxSetLimit(6, c_size_t(1))
"""
    out = run_py(fake_env(gpus=small_gpus(1)), body)
    assert out["green"] == [0, CTX] and out["current_kept"]
    assert out["green_destroy"] == [0, 0]
    assert out["defaults"] == [0, 8 * MIB]
    assert out["heap"] == [0, 0]
    assert out["heap_launch"] == [0, 256 * MIB]
    assert out["stack"] == [0, 256 * MIB + 512 * 132 * 2048]
    assert out["too_big"] == [OOM, 256 * MIB + 512 * 132 * 2048]
    assert out["back"] == [0, 0, 0]
    assert out["other"] == INVALID_VALUE


def test_modules_hold_their_globals(fake_env, tmp_path: Path) -> None:
    """A fake image "globals=N" holds N bytes from its load to its unload."""
    path = tmp_path / "mod"
    path.write_text("globals=%d" % (5 * MIB))
    body = r"""
init(); primary()
base = used(0)
m, l, f = c_void_p(), c_void_p(), c_void_p()
out["data"] = [cu.cuModuleLoadData(byref(m), b"globals=3145728"), used(0) - base]
out["lib"] = [cu.cuLibraryLoadData(byref(l), b"globals=1048576", None, None, 0, None, None, 0),
              used(0) - base]
out["file"] = [cu.cuModuleLoad(byref(f), PATH.encode()), used(0) - base]
out["big"] = cu.cuModuleLoadData(byref(c_void_p()), b"globals=4294967296")
out["bad"] = cu.cuModuleLoadData(byref(c_void_p()), b"\x7fELF")
out["unload"] = [cu.cuModuleUnload(m), cu.cuLibraryUnload(l), cu.cuModuleUnload(f),
                 used(0) - base, cu.cuModuleUnload(m)]
""".replace("PATH", repr(str(path)))
    out = run_py(fake_env(gpus=small_gpus(1)), body)
    assert out["data"] == [0, 3 * MIB]
    assert out["lib"] == [0, 4 * MIB]
    assert out["file"] == [0, 9 * MIB]
    assert out["big"] == OOM and out["bad"] == INVALID_VALUE
    assert out["unload"] == [0, 0, 0, 0, INVALID_HANDLE]


# ------------------------------------------------- pinned host memory, gates

# Helpers for the gate tests, in the child: a page of host memory whose
# words streams wait on, registered as the shim registers its own.
GATES = r"""
import mmap, os, threading, time
from ctypes import c_float, c_uint32
PORTABLE, DEVICEMAP = 0x1, 0x2
GEQ, EQ, AND, NOR, FLUSH = 0, 1, 2, 3, 1 << 30
cu.fakecuda_wait_count.restype = c_ulonglong
cu.fakecuda_launch_count.restype = c_ulonglong
K = int(os.environ.get("FAKECUDA_KERNEL_NS", "0")) / 1e9  # one launch, in seconds
def pages(n):
    m = mmap.mmap(-1, 4096 * n)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))
page, base = pages(1)
def word(i):
    return c_uint32.from_buffer(page, 4 * i)
def addr(i):
    return c_ulonglong(base + 4 * i)
def register():
    r = cu.cuMemHostRegister_v2(c_void_p(base), c_size_t(4096), PORTABLE | DEVICEMAP)
    assert r == 0, r
def wait(stream, i, value, flags=GEQ, fn="cuStreamWaitValue32_v2"):
    return getattr(cu, fn)(stream, addr(i), c_uint32(value), flags)
def stream():
    s = c_void_p()
    r = cu.cuStreamCreate(byref(s), 0)
    assert r == 0, r
    return s
def launch(s=None):
    r = cu.cuLaunchKernel(c_void_p(1), 1, 1, 1, 32, 1, 1, 0, s, None, None)
    assert r == 0, r
def event():
    e = c_void_p()
    r = cu.cuEventCreate(byref(e), 0)
    assert r == 0, r
    return e
def record(e, s):
    r = cu.cuEventRecord(e, s)
    assert r == 0, r
def elapsed(a, b):
    ms = c_float(-1)
    r = cu.cuEventElapsedTime(byref(ms), a, b)
    return [r, ms.value]
def store_later(i, value, after_s):
    def go():
        time.sleep(after_s)
        word(i).value = value
    t = threading.Thread(target=go)
    t.start()
    return t
def timed(fn, *args):
    t0 = time.monotonic()
    r = fn(*args)
    return [r, time.monotonic() - t0]
"""


def test_host_register(fake_env) -> None:
    """Registered ranges: no device memory, the host address as device
    pointer, overlaps refused, unregistering by the base; without PORTABLE a
    range serves its context only, and goes with it."""
    body = GATES + r"""
init()
area, p = pages(4)  # A, B, C, D: one page each
A, B, C, D = (c_void_p(p + 4096 * i) for i in range(4))
def reg(ptr, size, flags, fn="cuMemHostRegister_v2"):
    return getattr(cu, fn)(ptr, c_size_t(size), flags)
def dptr(ptr, flags=0, fn="cuMemHostGetDevicePointer_v2"):
    d = c_ulonglong(7)
    r = getattr(cu, fn)(byref(d), ptr, flags)
    return [r, d.value - p if r == 0 else None]
out["no_ctx"] = [reg(A, 4096, 3), dptr(A)[0], cu.cuMemHostUnregister(A)]
c0 = primary()
before = used()
out["register"] = [reg(A, 4096, PORTABLE | DEVICEMAP), used() - before]
out["dptr"] = [dptr(c_void_p(p + 100)), dptr(c_void_p(p + 4095))]
out["overlap"] = [reg(c_void_p(p + 1000), 100, 3), reg(A, 4096, 3), reg(A, 8192, 3),
                  reg(c_void_p(p + 4095), 2, 3)]
out["no_devicemap"] = [reg(B, 4096, PORTABLE), dptr(B)[0],
                       cu.cuStreamWaitValue32_v2(None, c_ulonglong(p + 4096), c_uint32(1), 0)]
out["legacy"] = [reg(C, 4096, DEVICEMAP, "cuMemHostRegister"), dptr(C),
                 dptr(C, 0, "cuMemHostGetDevicePointer")[0]]
out["bad"] = [reg(None, 4096, 3), reg(D, 0, 3), reg(D, 4096, 0x100), dptr(A, 1)[0],
              cu.cuMemHostGetDevicePointer_v2(None, A, 0), dptr(None)[0], dptr(D)[0]]
# Without PORTABLE: C is the primary context's only; D another's.
other = c_void_p()
assert cu.cuCtxCreate_v2(byref(other), 0, 0) == 0  # now current
out["other_ctx"] = [dptr(C)[0], dptr(A)[0], reg(D, 4096, DEVICEMAP), dptr(D)[0],
                    reg(C, 4096, 3)]
cu.cuCtxSetCurrent(c0)
out["not_portable"] = [dptr(D)[0], cu.cuCtxDestroy_v2(other), reg(D, 4096, 3)]
out["unregister"] = [cu.cuMemHostUnregister(c_void_p(p + 8)), cu.cuMemHostUnregister(A),
                     cu.cuMemHostUnregister(A), dptr(A)[0], reg(A, 4096, 3),
                     cu.cuMemHostUnregister(None)]
s = c_char_p()
out["names"] = [[cu.cuGetErrorName(c, byref(s)), s.value.decode()] for c in (712, 713)]
"""
    out = run_py(fake_env(gpus=small_gpus(1)), body)
    assert out["no_ctx"] == [INVALID_CONTEXT] * 3
    assert out["register"] == [OK, 0]  # pinned host memory is no device memory
    assert out["dptr"] == [[OK, 100], [OK, 4095]]  # the host address itself
    assert out["overlap"] == [ALREADY_REGISTERED] * 4
    assert out["no_devicemap"] == [OK, INVALID_VALUE, INVALID_VALUE]
    # The legacy cuMemHostGetDevicePointer writes a 32-bit pointer: no host address fits.
    assert out["legacy"] == [OK, [OK, 2 * 4096], NOT_SUPPORTED]
    assert out["bad"] == [INVALID_VALUE] * 7
    assert out["other_ctx"] == [INVALID_VALUE, OK, OK, OK, ALREADY_REGISTERED]
    assert out["not_portable"] == [INVALID_VALUE, OK, OK]  # D went with its context
    assert out["unregister"] == [NOT_REGISTERED, OK, NOT_REGISTERED, INVALID_VALUE, OK,
                                 INVALID_VALUE]
    assert out["names"] == [[OK, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"],
                            [OK, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"]]


def test_gate_holds_stream_work(fake_env) -> None:
    """Work and events behind a closed gate wait, however long, until the
    word is stored; then the work runs from the moment it is seen."""
    env = fake_env(gpus=small_gpus(1))
    env["FAKECUDA_KERNEL_NS"] = str(KERNEL_MS * 1000 * 1000)
    body = GATES + r"""
init(); primary(); register()
s = stream()
a, b = event(), event()
launches, waits = cu.fakecuda_launch_count(), cu.fakecuda_wait_count()
launch(s)
record(a, s)  # before the gate: stamped when that launch ends
out["wait"] = wait(s, 0, 1)
launch(s)
record(b, s)  # behind it
out["closed"] = [cu.cuEventQuery(b), elapsed(a, b)[0]]
time.sleep(3 * K)  # longer than both launches take
out["still"] = [cu.cuEventQuery(b), elapsed(a, b)[0], cu.cuEventQuery(a),
                cu.fakecuda_launch_count() - launches, cu.fakecuda_wait_count() - waits]
word(0).value = 1
out["opened"] = cu.cuEventQuery(b)  # the launch behind it runs from now on
out["sync"] = timed(cu.cuEventSynchronize, b)
out["elapsed"] = elapsed(a, b)
"""
    out = run_py(env, body)
    k = KERNEL_MS / 1000
    assert out["wait"] == OK
    assert out["closed"] == [NOT_READY, NOT_READY]
    assert out["still"] == [NOT_READY, NOT_READY, OK, 2, 1]
    assert out["opened"] == NOT_READY
    rc, took = out["sync"]
    assert rc == OK and k - 0.002 <= took < 1.0  # one launch after the store, not before
    # a ends one launch in; b one launch after the store, which came at least
    # 3 launches' time after a's launch: at least 3 launches apart (1 without
    # the gate).
    rc, ms = out["elapsed"]
    assert rc == OK and ms >= 3 * KERNEL_MS - 0.5


def test_stream_query_and_blocking_copies(fake_env) -> None:
    """cuStreamQuery says whether a stream's work is done; a blocking copy to
    the host (cuMemcpyDtoH_v2, cuMemcpy and their _ptds) returns once the
    work queued before it is, then the host holds zeros (the fake's device
    addresses hold nothing); behind a closed gate the copy waits for it."""
    env = fake_env(gpus=small_gpus(1))
    env["FAKECUDA_KERNEL_NS"] = str(KERNEL_MS * 1000 * 1000)
    body = GATES + r"""
init(); primary(); register()
buf = (ctypes.c_ubyte * 64)(*([0xff] * 64))
launch(); launch()
t0 = time.monotonic()
out["query"] = [cu.cuStreamQuery(None), cu.cuStreamQuery_ptsz(None)]
out["copy"] = [cu.cuMemcpyDtoH_v2(buf, c_ulonglong(0), c_size_t(64)), time.monotonic() - t0,
               sum(buf), cu.cuStreamQuery(None)]
out["bad"] = cu.cuMemcpyDtoH_v2(None, c_ulonglong(0), c_size_t(64))
launch()
t0 = time.monotonic()
out["others"] = [cu.cuMemcpyDtoH_v2_ptds(buf, c_ulonglong(0), c_size_t(64)),
                 cu.cuMemcpy(c_ulonglong(ctypes.addressof(buf)), c_ulonglong(0), c_size_t(64)),
                 cu.cuMemcpy_ptds(c_ulonglong(ctypes.addressof(buf)), c_ulonglong(0), c_size_t(64)),
                 time.monotonic() - t0]
s = stream()
out["gated"] = [wait(s, 0, 1)]
launch(s)
t0 = time.monotonic()
th = store_later(0, 1, K)
out["gated"] += [cu.cuStreamQuery(s), cu.cuMemcpyDtoH_v2(buf, c_ulonglong(0), c_size_t(8)),
                 time.monotonic() - t0, word(0).value, cu.cuStreamQuery(s)]
th.join()
"""
    out = run_py(env, body)
    k = KERNEL_MS / 1000
    assert out["query"] == [NOT_READY, NOT_READY]
    rc, took, total, after = out["copy"]
    assert rc == OK and took >= 2 * k - 0.001 and total == 0 and after == OK
    assert out["bad"] == INVALID_VALUE
    rc1, rc2, rc3, took = out["others"]
    assert (rc1, rc2, rc3) == (OK, OK, OK) and took >= k - 0.001
    ok, pending, rc, took, value, done = out["gated"]
    assert (ok, pending, rc, value, done) == (OK, NOT_READY, OK, 1, OK)
    assert took >= 2 * k - 0.001  # the store after k, then the launch behind the gate


def test_gate_synchronize(fake_env) -> None:
    """cuStreamSynchronize, cuCtxSynchronize and cuEventSynchronize return
    only once another thread has stored the word, then the work behind it is
    done; the default stream (handles 0, 1, 2) and a stream destroyed while
    it waits are gated as well."""
    env = fake_env(gpus=small_gpus(1))
    env["FAKECUDA_KERNEL_NS"] = str(KERNEL_MS * 1000 * 1000)
    body = GATES + r"""
init(); primary(); register()
s = stream()
out["wait"] = wait(s, 0, 1)
launch(s)
t0 = time.monotonic()
th = store_later(0, 1, K)
out["stream"] = [cu.cuStreamSynchronize(s), time.monotonic() - t0, word(0).value]
th.join()
# A larger value on the same word, once the gate opened: it closes again,
# with nothing behind it but an event.
out["again"] = wait(s, 0, 2, GEQ, "cuStreamWaitValue32_v2_ptsz")
e = event()
record(e, s)
t0 = time.monotonic()
th = store_later(0, 2, K)
out["stream_event"] = [cu.cuEventQuery(e), cu.cuEventSynchronize(e), time.monotonic() - t0]
th.join()
# The default stream, through the per-thread handle; a launch on handle 0
# and an event on the legacy handle wait behind it. A stream destroyed
# while it waits (another word) still holds cuCtxSynchronize.
d, gone = event(), stream()
out["default"] = [wait(c_void_p(2), 1, 1, GEQ, "cuStreamWaitValue32")]
launch(None)
record(d, c_void_p(1))
out["default"] += [wait(gone, 2, 1, GEQ, "cuStreamWaitValue32_ptsz"), cu.cuEventQuery(d)]
launch(gone)
out["destroy"] = cu.cuStreamDestroy_v2(gone)
t0 = time.monotonic()
threads = [store_later(1, 1, 0.6 * K), store_later(2, 1, 1.6 * K)]
out["ctx"] = [cu.cuCtxSynchronize(), time.monotonic() - t0, cu.cuEventQuery(d)]
for th in threads:
    th.join()
out["per_thread_sync"] = cu.cuStreamSynchronize_ptsz(None)
"""
    out = run_py(env, body)
    k = KERNEL_MS / 1000
    assert out["wait"] == OK
    rc, took, value = out["stream"]
    assert rc == OK and value == 1
    assert took >= 2 * k - 0.001  # the store after k, then the launch behind the gate
    assert out["again"] == OK
    q, rc, took = out["stream_event"]
    assert q == NOT_READY and rc == OK and took >= k - 0.001
    assert out["default"] == [OK, OK, NOT_READY]
    assert out["destroy"] == OK
    rc, took, q = out["ctx"]
    # The destroyed stream's word comes last (1.6 k), then its launch (k);
    # the default stream alone would have let it go at 1.6 k.
    assert rc == OK and q == OK and took >= 2.6 * k - 0.001
    assert out["per_thread_sync"] == OK


def test_gate_conditions(fake_env) -> None:
    """GEQ (cyclic), EQ, AND and NOR; a wait already met changes nothing; a
    second wait while closed replaces a smaller GEQ value on the same word,
    anything else is refused; bad input, a capturing stream, the counter."""
    body = GATES + r"""
init(); primary(); register()
waits = cu.fakecuda_wait_count()
def gated(i, flags, value, start, wrong, right):
    # [wait, query at start, after a value that must not open it, after one that must]
    s, e = stream(), event()
    word(i).value = start
    got = [wait(s, i, value, flags)]
    record(e, s)
    got.append(cu.cuEventQuery(e))
    word(i).value = wrong
    got.append(cu.cuEventQuery(e))
    word(i).value = right
    return got + [cu.cuEventQuery(e)]
out["geq"] = gated(0, GEQ, 5, 3, 4, 9)
out["geq_cyclic"] = gated(1, GEQ, 1, 0xFFFFFFFE, 0xFFFFFFFF, 1)  # -2 and -1 are behind 1
out["eq"] = gated(2, EQ, 5, 4, 6, 5)  # 6 would meet GEQ
out["and"] = gated(3, AND, 0b100, 0b011, 0b1011, 0b110)
out["nor"] = gated(4, NOR | FLUSH, 0xFFFFFFF0, 0x0F, 0xFF, 0x07)
# Already met: no gate, even once the word no longer meets it.
s, e = stream(), event()
word(5).value = 7
out["met"] = [wait(s, 5, 7)]
word(5).value = 6
record(e, s)
out["met"].append(cu.cuEventQuery(e))
# A second wait while the gate is closed.
s, e, e2 = stream(), event(), event()
word(6).value = 0
# The same again; a larger value (replaces); a smaller one, another word,
# another condition (refused).
out["second"] = [wait(s, 6, 10), wait(s, 6, 10), wait(s, 6, 12),
                 wait(s, 6, 11), wait(s, 7, 12), wait(s, 6, 12, EQ)]
record(e, s)
word(6).value = 10
out["replaced"] = [cu.cuEventQuery(e)]
word(6).value = 12
out["replaced"] += [cu.cuEventQuery(e), wait(s, 6, 13)]  # open: a new gate
record(e2, s)
out["replaced"] += [cu.cuEventQuery(e2), wait(s, 7, 1)]  # closed: another word is refused
# Unregistering freezes a closed gate's word: a later store is not seen.
other, other_base = pages(1)
assert cu.cuMemHostRegister_v2(c_void_p(other_base), c_size_t(4096), 3) == 0
s, e = stream(), event()
out["frozen"] = [cu.cuStreamWaitValue32_v2(s, c_ulonglong(other_base), c_uint32(1), 0)]
record(e, s)
out["frozen"] += [cu.cuMemHostUnregister(c_void_p(other_base)), cu.cuEventQuery(e)]
c_uint32.from_buffer(other).value = 1
out["frozen"].append(cu.cuEventQuery(e))
# Refused: nothing counted.
accepted = cu.fakecuda_wait_count() - waits
cs, g = stream(), c_void_p()
assert cu.cuStreamBeginCapture_v2(cs, 0) == 0
out["capture"] = [wait(cs, 8, 1), cu.cuStreamEndCapture(cs, byref(g))]
dev = c_ulonglong()
assert cu.cuMemAlloc_v2(byref(dev), c_size_t(4096)) == 0
s = stream()
def raw(a, flags=0, st=None):
    return cu.cuStreamWaitValue32_v2(st or s, c_ulonglong(a), c_uint32(1), flags)
out["bad"] = [raw(base, 1 << 5), raw(base, 4), raw(base + 2), raw(base + 4096), raw(base - 4),
              raw(dev.value), raw(base, 0, c_void_p(0x1234)), raw(0)]
cu.cuCtxSetCurrent(None)
out["no_ctx"] = wait(None, 9, 1)
out["waits"] = [accepted, cu.fakecuda_wait_count() - waits]
"""
    out = run_py(fake_env(gpus=small_gpus(1)), body)
    held = [OK, NOT_READY, NOT_READY, OK]
    for key in ("geq", "geq_cyclic", "eq", "and", "nor"):
        assert out[key] == held, key
    assert out["met"] == [OK, OK]
    assert out["second"] == [OK, OK, OK, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED]
    assert out["replaced"] == [NOT_READY, OK, OK, NOT_READY, NOT_SUPPORTED]
    assert out["frozen"] == [OK, OK, NOT_READY, NOT_READY]
    assert out["capture"] == [CAPTURE_UNSUPPORTED, OK]  # refused, the capture intact
    assert out["bad"] == [INVALID_VALUE] * 6 + [INVALID_HANDLE, INVALID_VALUE]
    assert out["no_ctx"] == INVALID_CONTEXT
    # 5 gated, 1 met, 3 + 1 on one stream, 1 frozen; none refused.
    assert out["waits"] == [11, 11]


# Threads, each on a stream of its own, wait at gates that an opener thread
# opens with atomic stores, as the shim's watcher does; run against the
# sanitizer builds too (ThreadSanitizer: the word is read without our lock).
GATE_C = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>
#include <gpuslice/cuda_api.h>

CUresult cuInit(unsigned int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuStreamCreate(CUstream *, unsigned int);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned int);
CUresult cuMemHostUnregister(void *);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *, void *, unsigned int);
CUresult cuStreamWaitValue32_v2(CUstream, CUdeviceptr, uint32_t, unsigned int);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuEventCreate(CUevent *, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventQuery(CUevent);
CUresult cuEventDestroy_v2(CUevent);
unsigned long long fakecuda_wait_count(void);

#define THREADS 4
#define ROUNDS 100
static uint32_t *words;        /* the registered page: one word per thread */
static unsigned wanted[THREADS]; /* the value each thread waits for */
static int done, failures;
static CUcontext ctx;
static CUdeviceptr dptr;

static void fail(void) { __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); }

static void *worker(void *arg)
{
    int i = (int)(long)arg;
    CUstream s;
    CUevent e;
    if (cuCtxSetCurrent(ctx) || cuStreamCreate(&s, 0) || cuEventCreate(&e, 0))
        fail();
    for (unsigned r = 1; r <= ROUNDS; r++) {
        if (cuStreamWaitValue32_v2(s, dptr + 4 * (unsigned)i, r, 0) ||
            cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) || cuEventRecord(e, s) ||
            cuEventQuery(e) != CUDA_ERROR_NOT_READY)
            fail();
        __atomic_store_n(&wanted[i], r, __ATOMIC_RELEASE);
        if (cuStreamSynchronize(s) || __atomic_load_n(&words[i], __ATOMIC_ACQUIRE) != r ||
            cuEventQuery(e))
            fail();
    }
    if (cuEventDestroy_v2(e) || cuStreamDestroy_v2(s))
        fail();
    return NULL;
}

/* Opens each gate a little after it is asked to. */
static void *opener(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < THREADS; i++) {
            unsigned w = __atomic_load_n(&wanted[i], __ATOMIC_ACQUIRE);
            if (w != __atomic_load_n(&words[i], __ATOMIC_RELAXED)) {
                struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
                __atomic_store_n(&words[i], w, __ATOMIC_RELEASE);
            }
        }
    }
    return NULL;
}

int main(void)
{
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED || cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
        cuCtxSetCurrent(ctx) || cuMemHostRegister_v2(page, 4096, 0x1 | 0x2) ||
        cuMemHostGetDevicePointer_v2(&dptr, page, 0) || dptr != (CUdeviceptr)(uintptr_t)page)
        return 2;
    words = page;
    pthread_t t[THREADS], o;
    pthread_create(&o, NULL, opener, NULL);
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    pthread_join(o, NULL);
    if (cuCtxSynchronize() || cuMemHostUnregister(page))
        fail();
    printf("%d %llu\n", failures, fakecuda_wait_count());
    return 0;
}
"""


@pytest.mark.parametrize("sanitizer", ["", "address,undefined", "thread"])
def test_gate_threads(fake_env, fakedriver: Path, tmp_path: Path, sanitizer: str) -> None:
    """GATE_C against the fake as built, and built with the sanitizers."""
    build = fakedriver
    args = ["-pthread"]
    env = fake_env(gpus=small_gpus(1))
    if sanitizer:
        flags = "-fsanitize=%s -fno-sanitize-recover=all -fno-omit-frame-pointer" % sanitizer
        if sanitizer == "thread":
            probe = compile_c(tmp_path, "tsan_probe", "int main(void) { return 0; }\n",
                              flags.split())
            if subprocess.run([str(probe)], capture_output=True).returncode != 0:
                pytest.skip("ThreadSanitizer cannot run here (the address space layout)")
        build = tmp_path / "build-san"
        subprocess.run(["make", "-s", "-C", str(FAKEDRIVER_DIR), "BUILD=%s" % build,
                        "EXTRA_CFLAGS=%s" % flags, str(build / "libcuda.so.1"),
                        str(build / "libcuda.so")], check=True)
        args += flags.split()
        env["LD_LIBRARY_PATH"] = str(build)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
        env["TSAN_OPTIONS"] = "halt_on_error=1:exitcode=66"
    exe = compile_c(tmp_path, "gates", GATE_C, args + ["-L", str(build), "-lcuda"])
    proc = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    assert proc.stdout.split() == ["0", "400"]

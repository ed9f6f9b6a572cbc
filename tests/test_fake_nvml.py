"""The fake libnvidia-ml.so.1 (tests/fakedriver) as unmodified pynvml sees it.

Every check runs pynvml in a fresh interpreter: the library is loaded once
per process, and the JSON is read from the environment at nvmlInit.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from conftest import FAKEDRIVER_DIR
from fakehost import fake_gpu, fake_gpus_doc

LIB_PREFIX = "gpuslice fake libnvidia-ml.so.1: "
DEFAULT_DIR = Path("/run/gpuslice-fake")

# NVML's topology levels, as the fake maps the JSON's names.
LEVELS = {"internal": 0, "single": 10, "multiple": 20, "hostbridge": 30, "node": 40, "system": 50}

# Prints, as JSON, everything pynvml reports about the cards; a failing call
# is recorded as the name of the exception class that pynvml raised.
REPORT = r"""
import ctypes, json, pynvml as n

def q(fn):
    try:
        return fn()
    except n.NVMLError as e:
        return "error:" + type(e).__name__

def addr(h):
    return ctypes.cast(h, ctypes.c_void_p).value

def mem(h):
    m = n.nvmlDeviceGetMemoryInfo(h)
    return [m.total, m.free, m.used]

def mem2(h):
    m = n.nvmlDeviceGetMemoryInfo(h, n.nvmlMemory_v2)
    return [m.version, m.total, m.reserved, m.free, m.used]

def pci(h):
    p = n.nvmlDeviceGetPciInfo(h)
    return [p.busId, p.busIdLegacy, p.domain, p.bus, p.device, p.pciDeviceId]

n.nvmlInit()
count = n.nvmlDeviceGetCount()
out = {"driver": n.nvmlSystemGetDriverVersion(), "nvml": n.nvmlSystemGetNVMLVersion(),
       "cuda": n.nvmlSystemGetCudaDriverVersion(), "cuda_v2": n.nvmlSystemGetCudaDriverVersion_v2(),
       "count": count, "gpus": [], "topology": {}, "nvlink": {}}
handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
for i, h in enumerate(handles):
    uuid = json_uuids[i]
    bus = json_buses[i]
    out["gpus"].append({
        "index": q(lambda: n.nvmlDeviceGetIndex(h)),
        "name": q(lambda: n.nvmlDeviceGetName(h)),
        "uuid": q(lambda: n.nvmlDeviceGetUUID(h)),
        "serial": q(lambda: n.nvmlDeviceGetSerial(h)),
        "minor": q(lambda: n.nvmlDeviceGetMinorNumber(h)),
        "pci": q(lambda: pci(h)),
        "memory": q(lambda: mem(h)),
        "memory_v2": q(lambda: mem2(h)),
        "mig": q(lambda: n.nvmlDeviceGetMigMode(h)),
        "util": q(lambda: n.nvmlDeviceGetUtilizationRates(h).gpu),
        "cc": q(lambda: list(n.nvmlDeviceGetCudaComputeCapability(h))),
        "numa": q(lambda: n.nvmlDeviceGetNumaNodeId(h)),
        "brand": q(lambda: n.nvmlDeviceGetBrand(h)),
        "arch": q(lambda: n.nvmlDeviceGetArchitecture(h)),
        "procs": q(lambda: len(n.nvmlDeviceGetComputeRunningProcesses(h))),
        "procs_v2": q(lambda: len(n.nvmlDeviceGetComputeRunningProcesses_v2(h))),
        "by_uuid": q(lambda: addr(n.nvmlDeviceGetHandleByUUID(uuid)) == addr(h)),
        "by_bus": q(lambda: addr(n.nvmlDeviceGetHandleByPciBusId(bus)) == addr(h)),
    })
for i, a in enumerate(handles):
    for j, b in enumerate(handles):
        key = "%d,%d" % (i, j)
        out["topology"][key] = q(lambda: n.nvmlDeviceGetTopologyCommonAncestor(a, b))
        out["nvlink"][key] = q(lambda: n.nvmlDeviceGetP2PStatus(a, b, n.NVML_P2P_CAPS_INDEX_NVLINK))
n.nvmlShutdown()
print(json.dumps(out))
"""


def run_py(env: Dict[str, str], script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # errors="replace": messages may quote bytes of a deliberately broken file.
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, errors="replace", timeout=timeout)


def write_doc(env: Dict[str, str], doc: Dict[str, Any]) -> Path:
    """Replace the JSON that a fake_env env points at (fake_env knows no topology)."""
    path = Path(env["GPUSLICE_FAKE_GPUS"])
    path.write_text(json.dumps(doc))
    return path


def report(env: Dict[str, str], doc: Dict[str, Any]) -> Dict[str, Any]:
    # The script looks cards up by the JSON's own UUIDs and bus ids.
    prelude = "json_uuids = %r\njson_buses = %r\n" % (
        [g["uuid"] for g in doc["gpus"]], [g["pci_bus_id"] for g in doc["gpus"]])
    proc = run_py(env, prelude + REPORT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


ARCH_BY_CC = {"9.0": 9, "8.0": 7, "8.9": 8, "7.0": 5, "7.5": 6, "10.0": 10}


def expected_gpu(index: int, gpu: Dict[str, Any]) -> Dict[str, Any]:
    if gpu.get("health") == "lost":
        lost = "error:NVMLError_GpuIsLost"
        keys = ["index", "name", "uuid", "serial", "minor", "pci", "memory", "memory_v2", "mig",
                "util", "cc", "numa", "brand", "arch", "procs", "procs_v2"]
        # Looking a lost card up still works, as on the real driver.
        return dict({k: lost for k in keys}, by_uuid=True, by_bus=True)
    total = gpu["memory_mib"] << 20
    used = gpu.get("memory_used_mib", 0) << 20
    dom, bus, dev_fn = gpu["pci_bus_id"].split(":")
    dev = dev_fn.split(".")[0]
    cc = gpu.get("compute_capability", "9.0")
    mig = 1 if gpu["mig"] else 0
    numa = gpu.get("numa_node", -1)
    return {
        "index": index,
        "name": gpu["name"],
        "uuid": gpu["uuid"],
        "serial": gpu.get("serial", "1654000000%03d" % index),
        "minor": gpu["minor"],
        "pci": [gpu["pci_bus_id"].upper(), ("%04X:%s:%s" % (int(dom, 16), bus, dev_fn)).upper(),
                int(dom, 16), int(bus, 16), int(dev, 16), gpu.get("pci_device_id", 0x233510DE)],
        "memory": [total, total - used, used],
        "memory_v2": [0x02000028, total, 0, total - used, used],
        "mig": [mig, mig],
        "util": gpu.get("utilization_pct", 0),
        "cc": [int(x) for x in cc.split(".")],
        "numa": numa if numa >= 0 else "error:NVMLError_NotSupported",
        "brand": {None: 14, "tesla": 2, "nvidia": 14}[gpu.get("brand")],
        "arch": ARCH_BY_CC[cc],
        "procs": 0,
        "procs_v2": 0,
        "by_uuid": True,
        "by_bus": True,
    }


def expected_links(doc: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    gpus: List[Dict[str, Any]] = doc["gpus"]
    named = {}
    for entry in doc.get("topology", []):
        a, b = entry["gpus"]
        named[(a, b)] = named[(b, a)] = entry["level"]
    topo: Dict[str, Any] = {}
    nvlink: Dict[str, Any] = {}
    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            key = "%d,%d" % (i, j)
            if "lost" in (a.get("health"), b.get("health")):
                topo[key] = nvlink[key] = "error:NVMLError_GpuIsLost"
                continue
            level = "internal" if i == j else named.get((i, j), "system")
            if level == "nvlink":
                # PCIe answer for NVLink pairs: NODE, SYSTEM across known NUMA nodes.
                na, nb = a.get("numa_node", -1), b.get("numa_node", -1)
                topo[key] = 50 if na >= 0 and nb >= 0 and na != nb else 40
                nvlink[key] = 0  # NVML_P2P_STATUS_OK
            else:
                topo[key] = LEVELS[level]
                nvlink[key] = 5  # NVML_P2P_STATUS_NOT_SUPPORTED
    return {"topology": topo, "nvlink": nvlink}


def check_report(got: Dict[str, Any], doc: Dict[str, Any]) -> None:
    major, minor = (int(x) for x in doc["cuda_version"].split("."))
    assert got["driver"] == doc["driver_version"]
    assert got["nvml"] == "%d.%s" % (major, doc["driver_version"])
    assert got["cuda"] == got["cuda_v2"] == major * 1000 + minor * 10
    assert got["count"] == len(doc["gpus"])
    for i, gpu in enumerate(doc["gpus"]):
        assert got["gpus"][i] == expected_gpu(i, gpu), "gpu %d" % i
    links = expected_links(doc)
    assert got["topology"] == links["topology"]
    assert got["nvlink"] == links["nvlink"]


@pytest.mark.parametrize("count", [1, 2, 8])
def test_cards_match_json(fake_env, count: int) -> None:
    env = fake_env(count=count)
    doc = fake_gpus_doc(count)
    got = report(env, doc)
    assert got["cuda"] == 13000
    check_report(got, doc)


def mixed_doc() -> Dict[str, Any]:
    gpus = [
        fake_gpu(0, numa_node=0),
        fake_gpu(1, mig=True, numa_node=0, serial="1320000000001"),
        fake_gpu(2, health="lost", numa_node=1),
        fake_gpu(3, name="NVIDIA A100-SXM4-80GB", memory_mib=81920, memory_used_mib=1024,
                 utilization_pct=37, compute_capability="8.0", numa_node=1, brand="tesla",
                 pci_bus_id="00000000:af:00.0", pci_device_id=0x20B210DE),
        fake_gpu(4, numa_node=0, compute_capability="8.9"),
    ]
    doc = fake_gpus_doc(len(gpus), gpus)
    doc["topology"] = [
        {"gpus": [0, 1], "level": "nvlink"},
        {"gpus": [0, 3], "level": "nvlink"},
        {"gpus": [1, 3], "level": "node"},
        {"gpus": [0, 2], "level": "single"},
        {"gpus": [4, 1], "level": "hostbridge"},
        {"gpus": [4, 3], "level": "multiple"},
        {"gpus": [0, 4], "level": "internal"},
    ]
    return doc


def test_mixed_cards(fake_env) -> None:
    env = fake_env(count=5)
    doc = mixed_doc()
    write_doc(env, doc)
    got = report(env, doc)
    check_report(got, doc)
    # Spot checks, so that a mistake shared by the fake and expected_gpu shows.
    assert got["gpus"][1]["mig"] == [1, 1]
    assert got["gpus"][2]["name"] == "error:NVMLError_GpuIsLost"
    assert got["gpus"][3]["pci"][0] == "00000000:AF:00.0"
    assert got["gpus"][3]["memory"] == [81920 << 20, 80896 << 20, 1024 << 20]
    assert got["gpus"][3]["util"] == 37
    assert got["gpus"][3]["arch"] == 7 and got["gpus"][3]["cc"] == [8, 0]
    assert got["topology"]["0,1"] == 40 and got["topology"]["3,0"] == 50
    assert got["topology"]["1,4"] == 30 and got["topology"]["2,4"] == "error:NVMLError_GpuIsLost"


ERRORS = r"""
import ctypes, os, pynvml as n

def err(fn):
    try:
        fn()
    except n.NVMLError as e:
        return type(e).__name__
    return "no error"

# The library is loaded but not initialised: its own answer, not pynvml's.
n._LoadNvmlLibrary()
lib = ctypes.CDLL("libnvidia-ml.so.1")
c = ctypes.c_uint(77)
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(c)) == 1 and c.value == 77
assert err(n.nvmlDeviceGetCount) == "NVMLError_Uninitialized"
assert err(n.nvmlSystemGetDriverVersion) == "NVMLError_Uninitialized"
assert err(n.nvmlShutdown) == "NVMLError_Uninitialized"
lib.nvmlErrorString.restype = ctypes.c_char_p
assert lib.nvmlErrorString(15) == b"GPU is lost"
assert lib.nvmlErrorString(12345) == b"Unknown Error"

# Shutdown is reference counted like the real one.
n.nvmlInit()
n.nvmlShutdown()
assert err(n.nvmlShutdown) == "NVMLError_Uninitialized"
assert err(n.nvmlDeviceGetCount) == "NVMLError_Uninitialized"
assert lib.nvmlInit() == 0 and lib.nvmlInit_v2() == 0 and lib.nvmlInitWithFlags(0) == 0
assert lib.nvmlShutdown() == 0 and lib.nvmlShutdown() == 0
assert n.nvmlDeviceGetCount() == 2
assert lib.nvmlShutdown() == 0
assert err(n.nvmlDeviceGetCount) == "NVMLError_Uninitialized"

n.nvmlInit()
h0 = n.nvmlDeviceGetHandleByIndex(0)
h1 = n.nvmlDeviceGetHandleByIndex(1)
assert err(lambda: n.nvmlDeviceGetHandleByUUID("GPU-no-such-card")) == "NVMLError_NotFound"
assert err(lambda: n.nvmlDeviceGetHandleByPciBusId("00000000:77:00.0")) == "NVMLError_NotFound"
assert err(lambda: n.nvmlDeviceGetHandleByPciBusId("not a bus id")) == "NVMLError_NotFound"
assert err(lambda: n.nvmlDeviceGetHandleByIndex(2)) == "NVMLError_InvalidArgument"
assert err(lambda: n.nvmlDeviceGetHandleByIndex(2**32 - 1)) == "NVMLError_InvalidArgument"
# NVML's other spellings of a bus id find the same card.
addr = lambda h: ctypes.cast(h, ctypes.c_void_p).value
for text in ("0000:19:00.0", "19:00.0", "0:19:0", "00000000:19:00.0"):
    assert addr(n.nvmlDeviceGetHandleByPciBusId(text)) == addr(h1), text

# NULL and foreign handles are refused without being dereferenced.
null = n.c_nvmlDevice_t()
foreign = ctypes.cast(ctypes.c_void_p(0x1000), n.c_nvmlDevice_t)
inside = ctypes.cast(ctypes.c_void_p(addr(h0) + 1), n.c_nvmlDevice_t)
for bad in (null, foreign, inside):
    assert err(lambda: n.nvmlDeviceGetName(bad)) == "NVMLError_InvalidArgument"
    topo = lambda: n.nvmlDeviceGetTopologyCommonAncestor(h0, bad)
    assert err(topo) == "NVMLError_InvalidArgument"

# Buffers: too small, NULL; output pointers: NULL.
buf = ctypes.create_string_buffer(64)
assert lib.nvmlDeviceGetName(h0, buf, 11) == 7          # "NVIDIA H200" needs 12
assert lib.nvmlDeviceGetName(h0, buf, 12) == 0 and buf.value == b"NVIDIA H200"
assert lib.nvmlDeviceGetName(h0, None, 64) == 2
assert lib.nvmlSystemGetDriverVersion(buf, 9) == 7
assert lib.nvmlDeviceGetUUID(h0, buf, 8) == 7
assert lib.nvmlDeviceGetMinorNumber(h0, None) == 2
assert lib.nvmlDeviceGetHandleByIndex_v2(0, None) == 2
assert lib.nvmlDeviceGetHandleByUUID(None, ctypes.byref(null)) == 2

# Struct versions are checked as NVML does.
assert err(lambda: n.nvmlDeviceGetMemoryInfo(h0, 0x01000028)) == "NVMLError_ArgumentVersionMismatch"
assert err(lambda: n.nvmlDeviceGetP2PStatus(h0, h1, 99)) == "NVMLError_InvalidArgument"

# Unversioned and older entry points that pynvml no longer calls.
c = ctypes.c_uint()
assert lib.nvmlDeviceGetCount(ctypes.byref(c)) == 0 and c.value == 2
hv1 = n.c_nvmlDevice_t()
assert lib.nvmlDeviceGetHandleByIndex(1, ctypes.byref(hv1)) == 0 and addr(hv1) == addr(h1)
assert lib.nvmlDeviceGetHandleByPciBusId(b"0000:18:00.0", ctypes.byref(hv1)) == 0
assert addr(hv1) == addr(h0)
# The v1/v2 PCI info is the 52-byte legacy layout; the guard must survive.
for name in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"):
    raw = (ctypes.c_ubyte * 68)(*([0xAB] * 68))
    assert getattr(lib, name)(h1, raw) == 0
    legacy = n.nvmlPciInfo_v2_t.from_buffer(raw)
    assert legacy.busId == "0000:19:00.0" and legacy.bus == 0x19, legacy.busId
    assert bytes(raw[52:]) == b"\xab" * 16
for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"):
    c = ctypes.c_uint(5)
    assert getattr(lib, name)(h0, ctypes.byref(c), None) == 0 and c.value == 0
assert lib.nvmlDeviceGetComputeRunningProcesses_v3(h0, None, None) == 2

# A handle that outlives its card: shut down, re-read a one-card file.
n.nvmlShutdown()
os.environ["GPUSLICE_FAKE_GPUS"] = one_card
n.nvmlInit()
assert n.nvmlDeviceGetCount() == 1
assert n.nvmlDeviceGetName(h0) == "NVIDIA H200"
assert err(lambda: n.nvmlDeviceGetName(h1)) == "NVMLError_InvalidArgument"
n.nvmlShutdown()
print("ok")
"""


def test_error_codes(fake_env, tmp_path: Path) -> None:
    env = fake_env(count=2)
    one = tmp_path / "one.json"
    one.write_text(json.dumps(fake_gpus_doc(1)))
    proc = run_py(env, "one_card = %r\n" % str(one) + ERRORS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert proc.stderr == ""


INIT_ONLY = r"""
import pynvml as n
try:
    n.nvmlInit()
    print("initialised")
except n.NVMLError as e:
    print(type(e).__name__)
"""


def _without(doc: Dict[str, Any], *path: Any) -> Dict[str, Any]:
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return doc


def _with(doc: Dict[str, Any], value: Any, *path: Any) -> Dict[str, Any]:
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


GOOD = json.dumps(fake_gpus_doc(2))

# (id, file text, words the one stderr line must hold besides the path)
BAD_FILES = [
    ("truncated", GOOD[:-7], ["invalid JSON", "line 1"]),
    ("trailing-comma", GOOD[:-1] + ",}", ["invalid JSON"]),
    ("bad-escape", '{"driver_version": "5\\x"}', ["invalid JSON", "escape"]),
    ("not-json", "gpus: []\n", ["invalid JSON"]),
    ("empty", "", ["invalid JSON: expected a value at line 1, column 1 (byte offset 0)"]),
    ("two-values", GOOD + " {}", ["invalid JSON", "expected nothing after the value"]),
    ("deep", "[" * 5000 + "]" * 5000,
     ["invalid JSON: expected at most 64 levels of nesting at line 1, column 65 (byte offset 64)"]),
    ("top-array", "[]", ["top level"]),
    ("nul-in-uuid", json.dumps(_with(fake_gpus_doc(1), "GPU-\u0000x", "gpus", 0, "uuid")),
     ["gpus[0].uuid: must not hold \\u0000 (a C string ends there)"]),
    ("missing-uuid", json.dumps(_without(fake_gpus_doc(2), "gpus", 1, "uuid")),
     ["gpus[1].uuid", "missing"]),
    ("missing-mig", json.dumps(_without(fake_gpus_doc(1), "gpus", 0, "mig")), ["gpus[0].mig"]),
    ("missing-driver", json.dumps(_without(fake_gpus_doc(1), "driver_version")),
     ["driver_version", "missing"]),
    ("missing-gpus", json.dumps(_without(fake_gpus_doc(1), "gpus")), ["gpus", "missing"]),
    ("memory-string", json.dumps(_with(fake_gpus_doc(1), "80", "gpus", 0, "memory_mib")),
     ["gpus[0].memory_mib", "integer"]),
    ("memory-float", json.dumps(_with(fake_gpus_doc(1), 1.5, "gpus", 0, "memory_mib")),
     ["gpus[0].memory_mib"]),
    ("mig-string", json.dumps(_with(fake_gpus_doc(1), "no", "gpus", 0, "mig")),
     ["gpus[0].mig", "true or false"]),
    ("bad-bus-id", json.dumps(_with(fake_gpus_doc(1), "18:00", "gpus", 0, "pci_bus_id")),
     ["gpus[0].pci_bus_id"]),
    ("bad-cuda", json.dumps(_with(fake_gpus_doc(1), "thirteen", "cuda_version")),
     ["cuda_version"]),
    ("bad-health", json.dumps(_with(fake_gpus_doc(1), "sick", "gpus", 0, "health")),
     ["gpus[0].health"]),
    ("used-over-total", json.dumps(_with(fake_gpus_doc(1), 200000, "gpus", 0, "memory_used_mib")),
     ["gpus[0].memory_used_mib"]),
    ("duplicate-uuid",
     json.dumps(fake_gpus_doc(2, [fake_gpu(0), fake_gpu(1, uuid=fake_gpu(0)["uuid"])])),
     ["gpus[1].uuid", "same as gpus[0]"]),
    ("topology-range",
     json.dumps(_with(fake_gpus_doc(2), [{"gpus": [0, 2], "level": "node"}], "topology")),
     ["topology[0].gpus"]),
    ("topology-level",
     json.dumps(_with(fake_gpus_doc(2), [{"gpus": [0, 1], "level": "pcie"}], "topology")),
     ["topology[0].level", "pcie"]),
]


@pytest.mark.parametrize("text,words", [(t, w) for _, t, w in BAD_FILES],
                         ids=[i for i, _, _ in BAD_FILES])
def test_bad_json_refused(fake_env, text: str, words: List[str]) -> None:
    env = fake_env(count=1)
    path = Path(env["GPUSLICE_FAKE_GPUS"])
    path.write_text(text)
    proc = run_py(env, INIT_ONLY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NVMLError_DriverNotLoaded"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(LIB_PREFIX + str(path) + ": "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]


def test_missing_file_refused(fake_env, tmp_path: Path) -> None:
    env = fake_env(count=1)
    env["GPUSLICE_FAKE_GPUS"] = str(tmp_path / "nowhere.json")
    proc = run_py(env, INIT_ONLY)
    assert proc.stdout.strip() == "NVMLError_DriverNotLoaded"
    assert proc.stderr.strip() == LIB_PREFIX + "%s: cannot open: No such file or directory" % (
        tmp_path / "nowhere.json")


def test_json_syntax_accepted(fake_env) -> None:
    """Escapes, unicode, nulls, unknown keys and odd spacing all parse."""
    env = fake_env(count=1)
    path = Path(env["GPUSLICE_FAKE_GPUS"])
    path.write_text(
        '\n{ "driver_version" : "580.95.05", "extra": [null, true, false, -1.5e3, {"a": []}],\r\n'
        '\t"cuda_version": "12.8", "gpus": [ {"uuid": "GPU-\\u00e9\\ud83d\\ude00\\"\\\\\\/",'
        ' "name": "NVIDIA\\tH200", "memory_mib": 1024, "minor": 7, "mig": false,'
        ' "pci_bus_id": "0001:3b:1f.7", "numa_node": 0 } ] }')
    script = (
        "import pynvml as n\nn.nvmlInit()\nh = n.nvmlDeviceGetHandleByIndex(0)\n"
        "print(repr(n.nvmlDeviceGetUUID(h)), repr(n.nvmlDeviceGetName(h)), "
        "n.nvmlDeviceGetPciInfo(h).busId, n.nvmlDeviceGetMinorNumber(h), "
        "n.nvmlSystemGetCudaDriverVersion())\n")
    proc = run_py(env, script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [repr("GPU-é\U0001F600\"\\/"), repr("NVIDIA\tH200"),
                                   "00000001:3B:1F.7", "7", "12080"]


def test_empty_card_list(fake_env) -> None:
    env = fake_env(count=0, gpus=[])
    proc = run_py(env, "import pynvml as n\nn.nvmlInit()\nprint(n.nvmlDeviceGetCount())\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"


def test_default_path(fake_env, tmp_path: Path) -> None:
    """With GPUSLICE_FAKE_GPUS unset or empty, /run/gpuslice-fake/gpus.json is read.

    The file is put on a tmpfs in a private mount namespace, so the host's
    /run is not touched (beyond creating the empty mount point if missing).
    """
    env = fake_env(count=1)
    doc = fake_gpus_doc(3, [fake_gpu(i, name="Default Path Card %d" % i) for i in range(3)])
    src = tmp_path / "default.json"
    src.write_text(json.dumps(doc))
    script = ("import pynvml as n\nn.nvmlInit()\n"
              "print([n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(i))"
              " for i in range(n.nvmlDeviceGetCount())])\n")
    created = not DEFAULT_DIR.exists()
    if created:
        DEFAULT_DIR.mkdir(parents=True)
    try:
        for value in (None, ""):
            run_env = dict(env)
            run_env.pop("GPUSLICE_FAKE_GPUS")
            if value is not None:
                run_env["GPUSLICE_FAKE_GPUS"] = value
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-ec",
                   'mount -t tmpfs none "$1"; cp "$2" "$1/gpus.json"; exec "$3" -c "$4"',
                   "sh", str(DEFAULT_DIR), str(src), sys.executable, script]
            proc = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.strip() == repr(["Default Path Card %d" % i for i in range(3)])
        # And outside the namespace nothing is there: the message names the default.
        if created:
            run_env = dict(env)
            run_env.pop("GPUSLICE_FAKE_GPUS")
            proc = run_py(run_env, INIT_ONLY)
            assert proc.stdout.strip() == "NVMLError_DriverNotLoaded"
            assert LIB_PREFIX + str(DEFAULT_DIR / "gpus.json") + ": cannot open" in proc.stderr
    finally:
        if created:
            DEFAULT_DIR.rmdir()


THREADS = r"""
import threading, pynvml as n
n.nvmlInit()          # loads the library once, before the threads race
n.nvmlShutdown()
errors = []
def work():
    try:
        for _ in range(300):
            n.nvmlInit()
            for i in range(n.nvmlDeviceGetCount()):
                h = n.nvmlDeviceGetHandleByIndex(i)
                n.nvmlDeviceGetName(h); n.nvmlDeviceGetMemoryInfo(h)
            n.nvmlShutdown()
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
try:
    n.nvmlDeviceGetCount()
    print("still initialised")
except n.NVMLError_Uninitialized:
    print(errors or "ok")
"""


def test_threads(fake_env) -> None:
    """Init/query/shutdown from many threads at once: counts balance, no crash."""
    proc = run_py(fake_env(count=4), THREADS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


FUZZ = r"""
import ctypes, os, random
lib = ctypes.CDLL("libnvidia-ml.so.1")
good = open(src, "rb").read()
rng = random.Random(1234)
cases = [good[:k] for k in range(len(good))]
for _ in range(3000):
    b = bytearray(good)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.choice(b'{}[]",:\\u0123456789.eE+-tfnl \x00\xff')
    cases.append(bytes(b))
cases += [b'"\\ud800"', b'"\\udc00x"', b'"\\u12', b'-', b'1e', b'01', b'"\x01"', b'\xef\xbb\xbf{}']
outcomes = set()
for k, text in enumerate(cases):
    with open(path, "wb") as f:
        f.write(text)
    rc = lib.nvmlInit_v2()
    assert rc in (0, 9), (k, rc)
    if rc == 0:
        c = ctypes.c_uint()
        assert lib.nvmlDeviceGetCount_v2(ctypes.byref(c)) == 0
        assert lib.nvmlShutdown() == 0
    outcomes.add(rc)
print(sorted(outcomes))
"""


def test_never_crashes_on_bad_input(fake_env, tmp_path: Path) -> None:
    """Every truncation and thousands of random corruptions: 0 or 9, never a crash."""
    env = fake_env(count=3)
    doc = mixed_doc()
    src = tmp_path / "src.json"
    src.write_text(json.dumps(doc, indent=1))
    prelude = "src = %r\npath = %r\n" % (str(src), env["GPUSLICE_FAKE_GPUS"])
    proc = run_py(env, prelude + FUZZ, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[0, 9]"


def test_clean_build(tmp_path: Path) -> None:
    """make from a clean copy with -Werror, then incremental, exports and clean."""
    copy = tmp_path / "fakedriver"
    copy.mkdir()
    for src in FAKEDRIVER_DIR.iterdir():
        if src.is_file():
            shutil.copy2(src, copy / src.name)
    include = FAKEDRIVER_DIR.parent.parent / "native" / "shim" / "include"
    json_src = FAKEDRIVER_DIR.parent.parent / "native" / "hook" / "common"
    make = ["make", "-C", str(copy), f"CUDA_API_INCLUDE={include}", f"JSON_SRC={json_src}"]
    build = subprocess.run(make, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "-Werror" in build.stdout
    lib = copy / "build" / "libnvidia-ml.so.1"
    assert os.readlink(copy / "build" / "libnvidia-ml.so") == "libnvidia-ml.so.1"
    # Up to date: make -q says so; touching the shared header makes it stale.
    assert subprocess.run(make + ["-q"]).returncode == 0
    (copy / "fakegpus.h").touch()
    os.utime(copy / "fakegpus.h", (lib.stat().st_mtime + 5,) * 2)
    assert subprocess.run(make + ["-q"]).returncode == 1
    assert subprocess.run(make + ["-s"]).returncode == 0

    dyn = subprocess.run(["readelf", "-dW", "--dyn-syms", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dyn
    exported = {line.split()[-1] for line in dyn.splitlines()
                if " FUNC " in line and " GLOBAL " in line and " UND " not in line}
    assert exported == set(EXPORTS)
    # The hook's JSON parser is inside, hidden: no gs_* (nor fakegpus_*) of any
    # kind leaks into a process that also loads libgpuslice.so or a fake libcuda.
    assert [line for line in dyn.splitlines() if " gs_" in line or "fakegpus" in line] == []
    assert subprocess.run(make + ["clean"], capture_output=True).returncode == 0
    assert not (copy / "build").exists()


EXPORTS = [
    "nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString",
    "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetIndex",
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial", "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetBAR1MemoryInfo",
    "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetBrand",
    "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetArchitecture", "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceGetSupportedEventTypes",
    "nvmlDeviceRegisterEvents", "nvmlEventSetWait", "nvmlEventSetWait_v2",
]


# Registers both cards for XIDs and ECC errors, then reports each wait as
# [eventType, eventData, card index, gpuInstanceId] or the error's class name;
# the events are injected by the script itself, after registration.
EVENTS = r"""
import json, os, pynvml as n
n.nvmlInit()
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
out = {"supported": [n.nvmlDeviceGetSupportedEventTypes(x) for x in h], "waits": []}
es = n.nvmlEventSetCreate()
mask = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError
for x in h:
    n.nvmlDeviceRegisterEvents(x, mask, es)
try:
    n.nvmlDeviceRegisterEvents(h[0], 1 << 40, es)
except n.NVMLError as e:
    out["unsupported"] = type(e).__name__
with open(os.environ["GPUSLICE_FAKE_NVML_EVENTS"], "a") as f:
    f.write(INJECT)
for _ in range(WAITS):
    try:
        d = n.nvmlEventSetWait_v2(es, 200)
        out["waits"].append([d.eventType, d.eventData,
                             [i for i, x in enumerate(h) if ctypes_addr(x) == ctypes_addr(d.device)][0],
                             d.gpuInstanceId])
    except n.NVMLError as e:
        out["waits"].append(type(e).__name__)
out["lost_query"] = [type(e).__name__ if e else None for e in [try_uuid(x) for x in h]]
n.nvmlEventSetFree(es)
try:
    n.nvmlEventSetWait_v2(es, 0)
except n.NVMLError as e:
    out["freed"] = type(e).__name__
n.nvmlShutdown()
print(json.dumps(out))
"""

EVENTS_PRELUDE = r"""
import ctypes, pynvml as n
def ctypes_addr(x):
    return ctypes.cast(x, ctypes.c_void_p).value
def try_uuid(x):
    try:
        n.nvmlDeviceGetUUID(x)
    except n.NVMLError as e:
        return e
"""


def run_events(env: Dict[str, str], tmp_path: Path, inject: str, waits: int) -> Dict[str, Any]:
    env = dict(env, GPUSLICE_FAKE_NVML_EVENTS=str(tmp_path / "events"))
    (tmp_path / "events").write_text("xid 0 79\n")  # before the set: never delivered
    script = EVENTS_PRELUDE + "INJECT = %r\nWAITS = %d\n" % (inject, waits) + EVENTS
    proc = run_py(env, script)
    assert proc.returncode == 0, proc.stderr
    return {"out": json.loads(proc.stdout), "stderr": proc.stderr}


def test_events_as_pynvml_sees_them(fake_env, tmp_path: Path) -> None:
    env = fake_env(count=2)
    got = run_events(env, tmp_path, "xid 1 48\nsbe 0\ndbe 0\nxid 9 1\nbogus\nxid 0 13\n", 4)
    out = got["out"]
    assert out["supported"] == [0x1F, 0x1F]
    assert out["unsupported"] == "NVMLError_NotSupported"
    # The single-bit error was not registered for; an unknown card or word is one line.
    assert out["waits"] == [[8, 48, 1, 0xFFFFFFFF], [2, 0, 0, 0xFFFFFFFF],
                            [8, 13, 0, 0xFFFFFFFF], "NVMLError_Timeout"]
    assert out["lost_query"] == [None, None]
    assert out["freed"] == "NVMLError_InvalidArgument"
    assert got["stderr"].count("ignored line") == 2, got["stderr"]
    assert '"xid 9 1"' in got["stderr"] and '"bogus"' in got["stderr"]


def test_a_lost_card_fails_the_wait_and_every_query(fake_env, tmp_path: Path) -> None:
    env = fake_env(count=2)
    out = run_events(env, tmp_path, "xid 1 79\nlost 1\n", 3)["out"]
    # The XID that came first is delivered; then the set holds a lost card.
    assert out["waits"] == [[8, 79, 1, 0xFFFFFFFF], "NVMLError_GpuIsLost",
                            "NVMLError_GpuIsLost"]
    assert out["lost_query"] == [None, "NVMLError_GpuIsLost"]

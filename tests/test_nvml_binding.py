"""cdi/nvml.py's own ctypes binding of NVML.

Against the fake driver (tests/fakedriver) it must read what pynvml reads;
against a stub built here, whose every entry point can be told to fail with
any code, it must turn each failure into the error discover() promises. The
stub also checks what it is handed (handles, buffer sizes), logs every call,
and fills every field of the structures, so a wrong layout shows.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from cdi import nvml, topology
from fakehost import fake_gpu, fake_gpus_doc

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ layouts

def test_struct_layouts_are_nvml_h():
    # nvml.h: nvmlPciInfo_t (NVML >= 9.0) and nvmlMemory_t.
    pci = nvml.NvmlPciInfo
    assert ctypes.sizeof(pci) == 68
    assert [(name, getattr(pci, name).offset, getattr(pci, name).size) for name, _ in pci._fields_] == [
        ("busIdLegacy", 0, 16), ("domain", 16, 4), ("bus", 20, 4), ("device", 24, 4),
        ("pciDeviceId", 28, 4), ("pciSubSystemId", 32, 4), ("busId", 36, 32)]
    mem = nvml.NvmlMemory
    assert ctypes.sizeof(mem) == 24
    assert [(name, getattr(mem, name).offset) for name, _ in mem._fields_] == [
        ("total", 0), ("free", 8), ("used", 16)]


def test_no_python_nvml_package_in_the_packages():
    for folder in ("cdi", "ocihook"):
        for path in (REPO / folder).rglob("*.py"):
            assert "pynvml" not in path.read_text(), path


# ------------------------------------------------------ against the fake NVML

def run_py(env: Dict[str, str], script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(env, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                          capture_output=True, text=True, timeout=60)


DISCOVER = """
    import json, sys
    sys.modules["pynvml"] = None  # importing it would fail: the binding must not need it
    from cdi.nvml import discover
    inv = discover(sys.argv[1] if len(sys.argv) > 1 else None)
    print(json.dumps({"driver": inv.driver_version, "cuda": inv.cuda_version,
                      "gpus": [g._asdict() for g in inv.gpus], "lost": inv.lost}))
"""

PYNVML = """
    import json, sys, pynvml as n
    n.nvmlInit()
    gpus, lost = [], []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        try:
            gpus.append({"index": i, "uuid": n.nvmlDeviceGetUUID(h), "name": n.nvmlDeviceGetName(h),
                         "minor": n.nvmlDeviceGetMinorNumber(h),
                         "memory_mib": n.nvmlDeviceGetMemoryInfo(h).total // 2**20,
                         "pci_bus_id": n.nvmlDeviceGetPciInfo(h).busId,
                         "mig": bool(n.nvmlDeviceGetMigMode(h)[0])})
        except n.NVMLError_GpuIsLost:
            lost.append(f"GPU {i}")
    cuda = n.nvmlSystemGetCudaDriverVersion()
    print(json.dumps({"driver": n.nvmlSystemGetDriverVersion(),
                      "cuda": f"{cuda // 1000}.{(cuda % 1000) // 10}", "gpus": gpus, "lost": lost}))
    n.nvmlShutdown()
"""

CARDS = [fake_gpu(0, minor=3, memory_mib=81920, name="NVIDIA A100-SXM4-80GB"),
         fake_gpu(1, mig=True), fake_gpu(2, health="lost"),
         fake_gpu(3, minor=9, pci_bus_id="0000ABCD:FF:1F.7")]


def test_same_inventory_as_pynvml(fake_env):
    pytest.importorskip("pynvml")
    env = fake_env(gpus=CARDS)
    ours, theirs = run_py(env, DISCOVER), run_py(env, PYNVML)
    assert ours.returncode == 0, ours.stderr
    assert theirs.returncode == 0, theirs.stderr
    got = json.loads(ours.stdout)
    assert got == json.loads(theirs.stdout)
    assert got["lost"] == ["GPU 2"]
    assert [g["index"] for g in got["gpus"]] == [0, 1, 3]
    assert got["gpus"][2]["pci_bus_id"] == "0000ABCD:FF:1F.7"
    assert got["gpus"][1]["mig"] is True and got["gpus"][0]["mig"] is False
    assert got["gpus"][0]["memory_mib"] == 81920 and got["gpus"][0]["minor"] == 3


def test_default_library_is_the_soname(fake_env):
    env = fake_env(count=2)  # LD_LIBRARY_PATH names the fake's build folder
    proc = run_py(env, DISCOVER)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["gpus"]) == 2


def test_default_library_missing(fake_env):
    env = fake_env(count=1)
    env.pop("LD_LIBRARY_PATH")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this host has a libnvidia-ml.so.1 of its own")
    proc = run_py(env, DISCOVER)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "cdi.nvml.DiscoveryError: NVML (libnvidia-ml.so.1) did not start: NVML Shared Library "
        "Not Found; is the NVIDIA driver installed and loaded?")


def test_two_libraries_in_one_process(fake_env, fakedriver: Path, tmp_path: Path):
    """Each call loads the library it names and leaves NVML shut down."""
    env = fake_env(count=1)
    one = env["GPUSLICE_FAKE_GPUS"]
    three = tmp_path / "three.json"
    three.write_text(json.dumps(fake_gpus_doc(3)))
    libs = []
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        libs.append(str(shutil.copy(fakedriver / "libnvidia-ml.so.1", tmp_path / d)))
    env.pop("LD_LIBRARY_PATH")
    script = """
        import os, sys
        sys.modules["pynvml"] = None
        from cdi.nvml import discover, DiscoveryError
        a, b, one, three = sys.argv[1:]
        counts = [len(discover(a).gpus)]
        os.environ["GPUSLICE_FAKE_GPUS"] = three
        counts.append(len(discover(b).gpus))
        # The fake reads its JSON again only when NVML is shut down between calls.
        counts.append(len(discover(a).gpus))
        try:
            discover(a + ".missing")
        except DiscoveryError as e:
            counts.append(str(e).split(":")[0])
        os.environ["GPUSLICE_FAKE_GPUS"] = one
        counts += [len(discover(b).gpus), len(discover(a).gpus)]
        print(counts)
    """
    proc = run_py(env, script, libs[0], libs[1], one, str(three))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([1, 3, 3, f"cannot load NVML from {libs[0]}.missing", 1, 1])


# --------------------------------------------------------- against a stub

STUB_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_t;
typedef struct { unsigned long long total, free, used; } mem_t;
struct card { int index; };
static struct card cards[2] = {{0}, {1}};

/* Log the call; STUB_FAIL="nvmlX=code,nvmlY=code" makes those entry points
 * return that code. */
static int answer(const char *fn)
{
    const char *log = getenv("STUB_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%s\n", fn);
        fclose(f);
    }
    const char *s = getenv("STUB_FAIL");
    size_t n = strlen(fn);
    while (s && *s) {
        if (strncmp(s, fn, n) == 0 && s[n] == '=')
            return atoi(s + n + 1);
        s = strchr(s, ',');
        if (s)
            s++;
    }
    return 0;
}

/* The prologue of a per-card call: a forced failure, or 2 (INVALID_ARGUMENT)
 * for a handle this library did not hand out. */
#define CARD(fn, d)                                          \
    int rc_ = answer(fn);                                    \
    if (rc_)                                                 \
        return rc_;                                          \
    if ((d) != &cards[0] && (d) != &cards[1])                \
        return 2;                                            \
    int i = ((struct card *)(d))->index

#ifndef NO_ERRSTR
const char *nvmlErrorString(int rc)
{
    static char text[32];
    snprintf(text, sizeof text, "stub error %d", rc);
    return text;
}
#endif

int nvmlInit_v2(void) { return answer("nvmlInit_v2"); }
int nvmlShutdown(void) { return answer("nvmlShutdown"); }

int nvmlSystemGetDriverVersion(char *v, unsigned len)
{
    int rc = answer("nvmlSystemGetDriverVersion");
    if (rc || len != 80)
        return rc ? rc : 2;
    strcpy(v, "999.88.77");
    return 0;
}

int nvmlSystemGetCudaDriverVersion(int *v)
{
    int rc = answer("nvmlSystemGetCudaDriverVersion");
    if (rc)
        return rc;
    *v = 12040;
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
    int rc = answer("nvmlDeviceGetCount_v2");
    if (rc)
        return rc;
    *n = 2;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **d)
{
    int rc = answer("nvmlDeviceGetHandleByIndex_v2");
    if (rc || index > 1)
        return rc ? rc : 2;
    *d = &cards[index];
    return 0;
}

int nvmlDeviceGetUUID(void *d, char *s, unsigned len)
{
    CARD("nvmlDeviceGetUUID", d);
    if (len != 96)
        return 2;
    sprintf(s, "GPU-stub-%d", i);
    return 0;
}

int nvmlDeviceGetName(void *d, char *s, unsigned len)
{
    CARD("nvmlDeviceGetName", d);
    if (len != 96)
        return 2;
    sprintf(s, "Stub Card %d", i);
    return 0;
}

int nvmlDeviceGetMinorNumber(void *d, unsigned *m)
{
    CARD("nvmlDeviceGetMinorNumber", d);
    *m = 10 + i;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *d, mem_t *m)
{
    CARD("nvmlDeviceGetMemoryInfo", d);
    m->total = (3ull << 30) + 12345 + (unsigned)i; /* 3072 MiB and change */
    m->free = 1;
    m->used = 2;
    return 0;
}

int nvmlDeviceGetPciInfo_v3(void *d, pci_t *p)
{
    CARD("nvmlDeviceGetPciInfo_v3", d);
    memset(p, 0x7f, sizeof *p); /* every byte written: a misplaced field reads junk */
    strcpy(p->busIdLegacy, "0000:00:00.0");
    p->domain = 1;
    p->bus = 0x40 + i;
    p->device = 0;
    p->pciDeviceId = 0x233510de;
    p->pciSubSystemId = 5;
    snprintf(p->busId, sizeof p->busId, "00000001:%02X:00.0", 0x40 + i);
    return 0;
}

#ifndef NO_MIG
int nvmlDeviceGetMigMode(void *d, unsigned *current, unsigned *pending)
{
    CARD("nvmlDeviceGetMigMode", d);
    *current = i; /* card 1 is in MIG mode */
    *pending = 0;
    return 0;
}
#endif
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Dict[str, str]:
    """The stub NVML built three ways: whole, without MIG, without nvmlErrorString too."""
    d = tmp_path_factory.mktemp("stubnvml")
    src = d / "stub.c"
    src.write_text(STUB_C)
    out = {}
    for name, flags in (("full", []), ("nomig", ["-DNO_MIG"]),
                        ("bare", ["-DNO_MIG", "-DNO_ERRSTR"])):
        lib = d / name / "libnvidia-ml.so.1"
        lib.parent.mkdir()
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                        "-Wl,-soname,libnvidia-ml.so.1", *flags, "-o", str(lib), str(src)],
                       check=True)
        out[name] = str(lib)
    return out


@pytest.fixture
def stub_env(monkeypatch, tmp_path):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("STUB_LOG", str(log))

    def set_fail(fail: str = "") -> Path:
        monkeypatch.setenv("STUB_FAIL", fail)
        if log.exists():
            log.unlink()
        return log
    return set_fail


def calls(log: Path) -> List[str]:
    return log.read_text().split()


def test_stub_inventory(stubs, stub_env, tmp_path):
    log = stub_env()
    # An empty sysfs: what the host's own says (its NUMA nodes) is not the stub's.
    inv = nvml.discover(stubs["full"], str(tmp_path / "no-sys"))
    assert inv._replace(topology=None) == nvml.Inventory("999.88.77", "12.4", [
        nvml.Gpu(0, "GPU-stub-0", "Stub Card 0", 10, 3072, "00000001:40:00.0", False),
        nvml.Gpu(1, "GPU-stub-1", "Stub Card 1", 11, 3072, "00000001:41:00.0", True),
    ], [])
    # The stub has none of the topology's calls: nothing known, and no failure.
    assert inv.topology is not None
    assert [tuple(p) for p in inv.topology.places.values()] == [(None, ""), (None, "")]
    assert inv.topology.links == [topology.Link(0, 1, "system", 0)]
    got = calls(log)
    assert got[0] == "nvmlInit_v2" and got[-1] == "nvmlShutdown"
    assert got.count("nvmlInit_v2") == 1 and got.count("nvmlShutdown") == 1


def test_mig_not_supported_is_no_mig(stubs, stub_env):
    stub_env("nvmlDeviceGetMigMode=3")
    assert [g.mig for g in nvml.discover(stubs["full"]).gpus] == [False, False]


def test_lost_cards(stubs, stub_env):
    stub_env("nvmlDeviceGetPciInfo_v3=15")
    inv = nvml.discover(stubs["full"])
    assert inv.gpus == [] and inv.lost == ["GPU 0", "GPU 1"]


@pytest.mark.parametrize("fail,message", [
    ("nvmlInit_v2=9", "NVML ({lib}) did not start: stub error 9; is the NVIDIA driver "
                      "installed and loaded?"),
    ("nvmlSystemGetDriverVersion=999", "NVML query failed: stub error 999"),
    ("nvmlSystemGetCudaDriverVersion=1", "NVML query failed: stub error 1"),
    ("nvmlDeviceGetCount_v2=2", "NVML query failed: stub error 2"),
    ("nvmlDeviceGetHandleByIndex_v2=15", "NVML query failed: stub error 15"),
    ("nvmlDeviceGetUUID=2", "NVML cannot describe GPU 0: stub error 2"),
    ("nvmlDeviceGetName=7", "NVML cannot describe GPU 0: stub error 7"),
    ("nvmlDeviceGetMinorNumber=999", "NVML cannot describe GPU 0: stub error 999"),
    ("nvmlDeviceGetMemoryInfo=17", "NVML cannot describe GPU 0: stub error 17"),
    ("nvmlDeviceGetMigMode=4", "NVML cannot describe GPU 0: stub error 4"),
    ("nvmlShutdown=1", "NVML query failed: stub error 1"),
    # The first error is the one reported, not the shutdown's after it.
    ("nvmlDeviceGetMemoryInfo=17,nvmlShutdown=1", "NVML cannot describe GPU 0: stub error 17"),
])
def test_errors_use_nvml_wording(stubs, stub_env, fail, message):
    log = stub_env(fail)
    with pytest.raises(nvml.DiscoveryError) as e:
        nvml.discover(stubs["full"])
    assert str(e.value) == message.format(lib=stubs["full"])
    got = calls(log)
    if fail.startswith("nvmlInit_v2"):
        assert "nvmlShutdown" not in got  # NVML never started
    else:
        assert got[-1] == "nvmlShutdown"


def test_missing_entry_point(stubs, stub_env):
    stub_env()
    with pytest.raises(nvml.DiscoveryError) as e:
        nvml.discover(stubs["nomig"])
    assert str(e.value) == "NVML cannot describe GPU 0: stub error 13"  # FUNCTION_NOT_FOUND


def test_library_without_error_strings(stubs, stub_env):
    stub_env()
    with pytest.raises(nvml.DiscoveryError) as e:
        nvml.discover(stubs["bare"])
    assert str(e.value) == "NVML cannot describe GPU 0: Function Not Found"
    stub_env("nvmlDeviceGetCount_v2=999")
    with pytest.raises(nvml.DiscoveryError) as e:
        nvml.discover(stubs["bare"])
    assert str(e.value) == "NVML query failed: NVML Error with code 999"


def test_unloadable_library(tmp_path):
    junk = tmp_path / "libnvidia-ml.so.1"
    junk.write_text("not an ELF file\n")
    with pytest.raises(nvml.DiscoveryError) as e:
        nvml.discover(str(junk))
    assert str(e.value).startswith(f"cannot load NVML from {junk}: ")
    assert os.path.exists(junk)

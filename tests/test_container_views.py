"""End to end: what a program in a container sees of the card's processes, on the fake driver.

Two containers real Podman (runc) runs share one fake card; the fake libcuda
publishes each process's usage (tests/fakedriver/fakeprocs.h) into a folder
both see, so the fake NVML lists every process on the card, as the real
driver lets NVML do. Inside container A, a program asking NVML for the
card's processes through the shim gets A's own process only, at what A is
charged (far from the cap its context keeps the 768 MiB reserve). From the
host, the fake NVML lists both, at what the fake driver holds for each.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

from fakehost import Host
from test_resize import Container, node, podman  # noqa: F401  (fixtures)

MIB = 1 << 20


HOST_VIEW = """
import ctypes, json, sys
class Info(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
n = ctypes.c_uint(16)
infos = (Info * 16)()
assert nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(n), infos) == 0
print(json.dumps(sorted([infos[i].pid, infos[i].used] for i in range(n.value))))
"""


def host_view(node: Host, procs: Path) -> List[Tuple[int, int]]:
    """The fake NVML's process list of card 0, from the host, without the shim
    (in a process of its own: a fake loaded here would keep this card for the
    tests that follow)."""
    env = dict(os.environ, GPUSLICE_FAKE_GPUS=str(node.gpus_json),
               GPUSLICE_FAKE_PROCS=str(procs))
    env.pop("LD_PRELOAD", None)
    res = subprocess.run([sys.executable, "-c", HOST_VIEW,
                          str(node.fakedriver / "libnvidia-ml.so.1")],  # type: ignore[attr-defined]
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return [tuple(p) for p in json.loads(res.stdout)]


def test_a_container_sees_only_its_own_processes(podman, node: Host, tmp_path: Path) -> None:
    procs = tmp_path / "fake-procs"
    procs.mkdir()
    share = ["-v", f"{procs}:/procs", "--env", "GPUSLICE_FAKE_PROCS=/procs",
             "--env", "GPUSLICE_CONTEXT_RESERVE=768MiB"]
    b = Container(podman, node, "neighbour", "0-6g", ["alloc", "2G"], [], share)
    assert b.wait_for(3)[2] == ["alloc", "0"]
    a = Container(podman, node, "tenant", "0-6g", ["alloc", "1G", "nvprocs", "0"], [], share)
    out = a.wait_for(4)
    assert out[2] == ["alloc", "0"]
    rc, count, *entries = out[3][1:]
    # One process: A's own, at what it is charged.
    assert (rc, count) == ("0", "1"), out[3]
    _, used = entries[0].split(":")
    assert int(used) == 1024 * MIB + 768 * MIB  # far from the cap the reserve stays
    seen = host_view(node, procs)
    assert len(seen) == 2, seen  # the driver itself shows both tenants
    assert sorted(u for _, u in seen) == [300 * MIB + 1024 * MIB, 300 * MIB + 2048 * MIB]
    a.finish()
    b.finish()

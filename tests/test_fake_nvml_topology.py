"""The fake NVML's NVLink section (tests/fakedriver/fake_nvml.c): NVLink state
and far ends per link, NVSwitches, CPU affinity by NUMA node, as unmodified
pynvml sees them, and its JSON keys refused one line each when bad."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from fakehost import fake_gpu, fake_gpus_doc
from test_fake_nvml import INIT_ONLY, LIB_PREFIX, run_py, write_doc

LINKS = r"""
import json, pynvml as n

def q(fn):
    try:
        return fn()
    except n.NVMLError as e:
        return "error:" + type(e).__name__

def link(h, k):
    state = n.nvmlDeviceGetNvLinkState(h, k)
    far = q(lambda: n.nvmlDeviceGetNvLinkRemotePciInfo(h, k).busId)
    return [state, far.decode() if isinstance(far, bytes) else far]

n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    out.append({"links": [q(lambda: link(h, k)) for k in range(19)],
                "affinity": list(n.nvmlDeviceGetCpuAffinity(h, 2)),
                "p2p": [n.nvmlDeviceGetP2PStatus(h, n.nvmlDeviceGetHandleByIndex(j),
                                                 n.NVML_P2P_CAPS_INDEX_NVLINK)
                        for j in range(n.nvmlDeviceGetCount())]})
n.nvmlShutdown()
print(json.dumps(out))
"""


def doc() -> Dict[str, Any]:
    d = fake_gpus_doc(0, [fake_gpu(0, numa_node=0), fake_gpu(1, numa_node=0),
                          fake_gpu(2, numa_node=1), fake_gpu(3)])
    d["topology"] = [{"gpus": [0, 1], "level": "node", "nvlinks": 2},
                     {"gpus": [1, 2], "level": "nvlink"}]
    d["nvswitch"] = {"gpus": [2], "links": 3}
    d["cpus_per_numa_node"] = 16
    return d


def links(env: Dict[str, str], d: Dict[str, Any]) -> List[Dict[str, Any]]:
    write_doc(env, d)
    proc = run_py(env, LINKS)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_links_far_ends_switches_and_affinity(fake_env) -> None:
    env = fake_env(count=4)
    d = doc()
    bus = [g["pci_bus_id"].upper() for g in d["gpus"]]
    got = links(env, d)
    off = [0, "error:NVMLError_NotSupported"]  # an inactive link has no far end
    # Card 0: two links to card 1, the rest inactive; past NVML's last: invalid.
    assert got[0]["links"][:3] == [[1, bus[1]], [1, bus[1]], off]
    assert got[0]["links"][17] == off
    assert got[0]["links"][18] == "error:NVMLError_InvalidArgument"
    # Card 1: to card 0 twice, then card 2 once (by the other card's index).
    assert got[1]["links"][:4] == [[1, bus[0]], [1, bus[0]], [1, bus[2]], off]
    # Card 2: card 1, then three switch links over the switches' addresses.
    assert got[2]["links"][:5] == [[1, bus[1]], [1, "00000000:E0:00.0"],
                                   [1, "00000000:E1:00.0"], [1, "00000000:E2:00.0"], off]
    # Card 3 has no NVLink at all.
    assert got[3]["links"][0] == "error:NVMLError_NotSupported"
    # NUMA node n: CPUs 16n..16n+15; unknown: every CPU of the nodes named.
    assert [g["affinity"] for g in got] == [[0xFFFF, 0], [0xFFFF, 0], [0xFFFF0000, 0],
                                            [0xFFFFFFFF, 0]]
    ok, no = 0, 5  # NVML_P2P_STATUS_OK, NOT_SUPPORTED
    assert got[0]["p2p"] == [no, ok, no, no] and got[1]["p2p"] == [ok, no, ok, no]


BAD = [
    ("nvlinks-range", {"topology": [{"gpus": [0, 1], "level": "node", "nvlinks": 19}]},
     ["topology[0].nvlinks"]),
    ("nvlinks-string", {"topology": [{"gpus": [0, 1], "level": "node", "nvlinks": "4"}]},
     ["topology[0].nvlinks", "integer"]),
    ("nvlink-level-none", {"topology": [{"gpus": [0, 1], "level": "nvlink", "nvlinks": 0}]},
     ["topology[0].nvlinks", 'level "nvlink" needs at least one link']),
    ("too-many", {"topology": [{"gpus": [0, 1], "level": "node", "nvlinks": 12}],
                  "nvswitch": {"gpus": [0], "links": 7}},
     ["gpus[0]", "has 19 NVLinks in all, more than 18"]),
    ("switch-range", {"nvswitch": {"gpus": [0, 5], "links": 4}}, ["nvswitch.gpus", "below 2"]),
    ("switch-links", {"nvswitch": {"gpus": [0], "links": 0}}, ["nvswitch.links"]),
    ("switch-missing-gpus", {"nvswitch": {"links": 2}}, ["nvswitch.gpus", "missing"]),
    ("switch-not-object", {"nvswitch": [0, 1]}, ["nvswitch", "expected an object"]),
    ("cpus-range", {"cpus_per_numa_node": 0}, ["cpus_per_numa_node"]),
]


@pytest.mark.parametrize("extra,words", [(e, w) for _, e, w in BAD], ids=[i for i, _, _ in BAD])
def test_bad_nvlink_keys_refused(fake_env, extra: Dict[str, Any], words: List[str]) -> None:
    env = fake_env(count=2)
    path = write_doc(env, dict(fake_gpus_doc(2), **extra))
    proc = run_py(env, INIT_ONLY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NVMLError_DriverNotLoaded"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(LIB_PREFIX + str(Path(path)) + ": "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]

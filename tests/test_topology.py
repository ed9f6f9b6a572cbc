"""cdi/topology.py: where NVML says the cards sit and how they are joined, read
from the fake NVML (its JSON's topology, NVLinks, NVSwitches, NUMA nodes)."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import FAKEDRIVER_DIR
from fakehost import fake_gpu, fake_gpus_doc
from cdi import nvml, topology


def test_cpulist() -> None:
    assert topology.cpulist([0b1011, 1], 64) == "0-1,3,64"
    assert topology.cpulist([0xFFFF0000, 0], 32) == "16-31"
    assert topology.cpulist([0, 0], 64) == ""
    assert topology.cpulist([0b10101], 8) == "0,2,4"


def discover(tmp_path: Path, doc: dict, monkeypatch, sys_root: str = "/sys") -> topology.Topology:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv("GPUSLICE_FAKE_GPUS", str(path))
    inv = nvml.discover(str(FAKEDRIVER_DIR / "build" / "libnvidia-ml.so.1"), sys_root)
    assert inv.topology is not None
    return inv.topology


def test_links_direct_and_through_switches(tmp_path: Path, monkeypatch, fakedriver) -> None:
    doc = fake_gpus_doc(0, [fake_gpu(i, numa_node=i // 2) for i in range(4)])
    doc["topology"] = [{"gpus": [0, 1], "level": "single", "nvlinks": 4},
                       {"gpus": [2, 3], "level": "hostbridge"}]
    doc["nvswitch"] = {"gpus": [1, 2, 3], "links": 6}
    doc["cpus_per_numa_node"] = 4
    topo = discover(tmp_path, doc, monkeypatch)
    assert topo.places == {0: topology.Place(0, "0-3"), 1: topology.Place(0, "0-3"),
                           2: topology.Place(1, "4-7"), 3: topology.Place(1, "4-7")}
    links = {(k.a, k.b): (k.pcie, k.nvlinks) for k in topo.links}
    # 0-1: 4 direct; 1-2, 1-3, 2-3: 6 each through the switches; 0 has none there.
    assert links == {(0, 1): ("single", 4), (0, 2): ("system", 0), (0, 3): ("system", 0),
                     (1, 2): ("system", 6), (1, 3): ("system", 6), (2, 3): ("hostbridge", 6)}


def test_numa_from_sysfs_when_nvml_cannot_say(tmp_path: Path, monkeypatch, fakedriver) -> None:
    doc = fake_gpus_doc(0, [fake_gpu(0), fake_gpu(1), fake_gpu(2)])  # no numa_node: unknown
    sys_root = tmp_path / "sys"
    for i, node in ((0, "1"), (1, "-1")):
        dev = sys_root / "bus" / "pci" / "devices" / ("0000:%02x:00.0" % (0x18 + i))
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(node + "\n")
    topo = discover(tmp_path, doc, monkeypatch, str(sys_root))
    assert [topo.places[i].numa_node for i in range(3)] == [1, None, None]
    assert {k.nvlinks for k in topo.links} == {0}  # no NVLink: not supported, none recorded
    # A host with one NUMA node (a VM's usual case, the H200 one here): every
    # card whose node nobody says is on it, as nvidia-smi topo -m shows.
    (sys_root / "devices" / "system" / "node" / "node0").mkdir(parents=True)
    topo = discover(tmp_path, doc, monkeypatch, str(sys_root))
    assert [topo.places[i].numa_node for i in range(3)] == [1, 0, 0]
    # With two, it stays unknown.
    (sys_root / "devices" / "system" / "node" / "node1").mkdir()
    topo = discover(tmp_path, doc, monkeypatch, str(sys_root))
    assert [topo.places[i].numa_node for i in range(3)] == [1, None, None]

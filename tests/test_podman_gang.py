"""End to end: real Podman with runc asks for gang devices (`2x24g`, `3x8g`):
the real gpuslice-hook admits each on several cards at once, or refuses it
whole, against a real SQLite file; the spec and the topology come from
`gpuslice cdi generate` on the fake NVML."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict, List

import pytest

from fakehost import fake_gpu
from podman_harness import podman_fixture
from test_gang import TOPOLOGIES, GangHost
from test_podman_admission import start

podman = podman_fixture()


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path, podman) -> GangHost:
    return GangHost(tmp_path, driver_root, TOPOLOGIES["4 pairs"], spec_dir=podman.cdi_dir)


def gangs(node: GangHost) -> Dict[str, List[int]]:
    """Each container and the cards it holds, by slot, as `gpuslice status` says."""
    res = node.host.run("status", "--json")
    assert res.returncode == 0, res.stderr
    out: Dict[str, List[int]] = {}
    for card in json.loads(res.stdout)["cards"]:
        for k in card["containers"]:
            g = k["gang"]
            assert g is None or g["cards"][g["slot"]] == card["index"]
            out[k["id"]] = g["cards"] if g else [card["index"]]
    return out


def test_gangs_in_podman_all_or_none(podman, node: GangHost) -> None:
    first, second = start(podman, "2x24g"), start(podman, "2x24g")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    a, b = first.stdout.strip(), second.stdout.strip()
    assert gangs(node) == {a: [0, 1], b: [2, 3]}  # each an NVLink pair
    third = start(podman, "3x8g")
    assert third.returncode == 0, third.stderr
    c = third.stdout.strip()
    assert gangs(node)[c] == [0, 1, 2]
    uuids = [fake_gpu(i)["uuid"] for i in range(4)]
    placement = node.state_dir / "containers" / c / "placement"
    assert placement.read_text() == "".join(f"{i} {uuids[i]}\n" for i in (0, 1, 2))
    # Only card 3 has 8 GiB left: a gang of two is refused whole.
    fourth = start(podman, "2x8g")
    assert fourth.returncode != 0
    assert ("2x8g: a gang of 2 slices of 8192 MiB needs 2 cards with room for one each, and "
            "1 has room now (card 3); the likeliest: card 0") in fourth.stderr
    assert sorted(gangs(node)) == sorted([a, b, c])  # nothing of it on the books
    # Inside, the container sees the placement the shim will read.
    look = podman.run(["cat", "/run/gpuslice/placement"], devices=["gpuslice.io/gpu=2x8g"])
    assert look.returncode != 0  # still no room for it
    rm = podman.podman(["rm", "--force", "--time", "0", c], timeout=120)
    assert rm.returncode == 0, rm.stderr
    for _ in range(200):
        if c not in gangs(node):
            break
        time.sleep(0.1)
    look = podman.run(["cat", "/run/gpuslice/placement"], devices=["gpuslice.io/gpu=2x8g"])
    assert look.returncode == 0, look.stderr
    assert look.stdout == f"0 {uuids[0]}\n1 {uuids[1]}\n"
    rm = podman.podman(["rm", "--force", "--time", "0", a, b], timeout=120)
    assert rm.returncode == 0, rm.stderr
    for _ in range(200):
        if not gangs(node):
            break
        time.sleep(0.1)
    assert gangs(node) == {}

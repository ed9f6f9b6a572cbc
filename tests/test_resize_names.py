"""`gpuslice resize NAME`: which container a name reaches (issue 27, G4).

A container's recorded name comes from an annotation its starter sets, so it
may equal another container's short id: the operator's resize must then
reach neither, with one line that lists both, exit 2; a full id always
reaches its own container. The containers are admitted by this tree's real
gpuslice-hook create, their names read from config.json as the hook reads
them."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_hook import Node, rows

VICTIM = "abcdef123456" + "0" * 52
TENANT = "1234" * 16


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    return Node(tmp_path, driver_root, fakedriver)


def start(node: Node, cid: str, name: str = "") -> None:
    config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
              "process": {"user": {"uid": 0, "gid": 0}}}
    if name:
        config["annotations"] = {"nerdctl/name": name}
    res = node.create(cid, "0-4g", bundle=node.bundle(f"b-{cid[:8]}", config))
    assert res.returncode == 0, res.stderr


def memory(node: Node, cid: str) -> int:
    [(mib,)] = rows(node.db, "SELECT memory_mib FROM reservations WHERE container_id=?", cid)
    return mib


def test_a_name_equal_to_another_short_id_reaches_neither(node: Node) -> None:
    start(node, VICTIM)
    start(node, TENANT, name=VICTIM[:12])
    res = node.host.run("resize", VICTIM[:12], "--memory", "8GiB")
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr == (f"gpuslice: error: container {VICTIM[:12]!r} matches 2 containers "
                          f"({TENANT[:12]} (name), {VICTIM[:12]} (id prefix)); name one by "
                          "its full id (`gpuslice status` lists them)\n")
    assert (memory(node, VICTIM), memory(node, TENANT)) == (4096, 4096)
    # The full id is the victim's alone; a name no one shares is its container's.
    res = node.host.run("resize", VICTIM, "--memory", "8GiB")
    assert res.returncode == 0, res.stderr
    assert (memory(node, VICTIM), memory(node, TENANT)) == (8192, 4096)


def test_a_name_equal_to_another_full_id_reaches_that_id(node: Node) -> None:
    start(node, VICTIM)
    start(node, TENANT, name=VICTIM)
    res = node.host.run("resize", VICTIM, "--memory", "6GiB")
    assert res.returncode == 0, res.stderr
    assert (memory(node, VICTIM), memory(node, TENANT)) == (6144, 4096)


def test_a_unique_name_and_a_unique_prefix_still_resolve(node: Node) -> None:
    start(node, VICTIM)
    start(node, TENANT, name="trainer")
    assert node.host.run("resize", "trainer", "--memory", "6GiB").returncode == 0
    assert node.host.run("resize", VICTIM[:6], "--memory", "8GiB").returncode == 0
    assert (memory(node, VICTIM), memory(node, TENANT)) == (8192, 6144)

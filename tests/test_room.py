"""gpuslice-hook room: the admission rule's answer to "what fits", which
`gpuslice status` and the Nomad plugin ask instead of deriving it again
(ocihook/room.py). What it says fits is what the hook then admits, one more
is refused; it writes nothing; bad input is one line, exit 2.
"""
from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
from pathlib import Path
from typing import List

import pytest

from cdi.profiles import Profile
from fakehost import build_hook, fake_gpu
from ocihook import room
from ocihook.config import load
from test_hook import GIB_MIB, Node, err, node  # noqa: F401 (node: the fixture)


def ask(node: Node, *profiles: str, asan: bool = False) -> subprocess.CompletedProcess:
    hook = build_hook(asan=True) if asan else node.hook_path
    args: List[str] = []
    for p in profiles:
        args += ["--profile", p]
    return subprocess.run([str(hook), "room", "--database", str(node.db), "--state-dir",
                           str(node.state_dir), *args], capture_output=True, timeout=60)


def cards(node: Node, *profiles: Profile) -> "dict[str, room.CardRoom]":
    return room.read(load(str(node.config)), profiles)


SIX = Profile("6g", 6 * GIB_MIB)
FOUR_30 = Profile("4g-30", 4 * GIB_MIB, 30)


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_what_room_says_fits_is_what_the_hook_admits(node: Node, asan: bool) -> None:
    if asan:
        node.hook_path = build_hook(asan=True)
    uuid0, uuid1 = fake_gpu(0)["uuid"], fake_gpu(1)["uuid"]
    got = cards(node, SIX, FOUR_30)
    assert got[uuid0] == room.CardRoom(uuid0, 0, 16 * GIB_MIB, 0, 0, False, 16 * GIB_MIB, (2, 3))
    # As many 6g as it says, then the next is refused for memory.
    for cid in ("a", "b"):
        assert node.create(cid, "0-6g").returncode == 0
    res = node.create("c", "0-6g")
    assert res.returncode == 1 and "4096 MiB free of 16384 MiB" in err(res)
    assert cards(node, SIX, FOUR_30)[uuid0].fits == (0, 1)
    # Compute caps: 30% three times on card 1, the fourth is refused for compute.
    assert cards(node, FOUR_30)[uuid1].fits == (3,)
    for cid in ("p1", "p2", "p3"):
        assert node.create(cid, "1-4g-30").returncode == 0
    assert cards(node, FOUR_30)[uuid1].fits == (0,)
    res = node.create("p4", "1-4g-30")
    assert res.returncode == 1 and "has 10% of its compute left, 30% asked" in err(res)
    # Beside a whole card nothing fits, and a whole card has nothing free.
    for cid in ("a", "b", "p1", "p2", "p3"):
        assert node.release(cid).returncode == 0
    assert node.create("w", "0").returncode == 0
    whole = cards(node, SIX)[uuid0]
    assert (whole.exclusive, whole.free_mib, whole.fits) == (True, 0, (0,))


def test_room_follows_the_recorded_policy(node: Node) -> None:
    uuid0 = fake_gpu(0)["uuid"]
    node.config.write_text(node.config.read_text() + "memory_overcommit: 1.5\ncores_limit: 60\n")
    assert node.host.run("config", "apply").returncode == 0
    got = cards(node, SIX, FOUR_30)[uuid0]
    assert (got.capacity_mib, got.free_mib, got.fits) == (24 * GIB_MIB, 24 * GIB_MIB, (4, 2))
    for cid in ("a", "b", "c", "d"):
        assert node.create(cid, "0-6g").returncode == 0
    assert node.create("e", "0-6g").returncode == 1


def test_room_without_a_policy_answers_by_the_defaults(node: Node) -> None:
    conn = sqlite3.connect(node.db)
    conn.execute("DELETE FROM policy")
    conn.commit()
    conn.close()
    res = ask(node, "6144:0")
    assert res.returncode == 0, res.stderr
    assert b'"policy_recorded": false' in res.stdout and b'"fits": [2]' in res.stdout


@pytest.mark.parametrize("value, said", [
    ("4096", '--profile "4096" is not MIB:CORES'),
    ("0:0", '--profile "0" is not a whole number from 1 to 16777216'),
    ("4096:101", '--profile "101" is not a whole number from 0 to 100'),
    ("4096:", '--profile "" is not a whole number from 0 to 100'),
])
def test_a_bad_profile_is_one_line_and_nothing_read(node: Node, value: str, said: str) -> None:
    before = node.db.read_bytes()
    res = ask(node, value)
    assert res.returncode == 2 and err(res) == f"gpuslice-hook: error: {said}" + (
        " (a slice's --memory-mib and --cores, such as 4096:30)" if ":" not in value else "")
    assert node.db.read_bytes() == before


def test_a_hook_that_cannot_answer_is_one_line(node: Node, tmp_path: Path) -> None:
    cfg = load(str(node.config))
    broken = tmp_path / "hook"
    broken.write_text("#!/bin/sh\necho 'gpuslice-hook: error: it broke' >&2\nexit 2\n")
    broken.chmod(0o755)
    with pytest.raises(room.RoomError, match="^gpuslice-hook: error: it broke$"):
        room.read(dataclasses.replace(cfg, hook_path=str(broken)))
    with pytest.raises(room.RoomError, match="cannot run"):
        room.read(dataclasses.replace(cfg, hook_path=str(tmp_path / "none")))

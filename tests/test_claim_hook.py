"""A claim taken over by the container's create hook (native/hook/hook/claim.h):
the slice gpuslice-nomad-device reserved for a task before its container
existed becomes the container's, in one transaction, instead of a second
admission; the token comes from config.json's env (GPUSLICE_CLAIM).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from fakehost import build_hook
from test_hook import Node, err, rows


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    return Node(tmp_path, driver_root, fakedriver)


def claim_row(token: str) -> str:
    """The id a claim's row is held under: the token's SHA-256, as gpuslice/claim.h
    says (computed here by hashlib, apart from the hook's own SHA-256)."""
    return "claim-" + hashlib.sha256(token.encode()).hexdigest()


def card_uuid(node: Node, index: int) -> str:
    [(uuid,)] = rows(node.db, "SELECT uuid FROM cards WHERE idx=?", index)
    return uuid


def admit(node: Node, cid: str, device: str, card: str, memory_mib: int,
          cores: int = 0) -> subprocess.CompletedProcess:
    """What the plugin's Reserve runs: `gpuslice-hook admit` for a claim."""
    return subprocess.run([str(node.hook_path), "admit", "--id", cid, "--device", device,
                           "--card", card, "--memory-mib", str(memory_mib), "--cores", str(cores),
                           "--priority", "normal", "--pid", str(os.getpid()),
                           "--database", str(node.db), "--state-dir", str(node.state_dir)],
                          capture_output=True, text=True, timeout=60)


def claimed_bundle(node: Node, name: str, token: str) -> Path:
    return node.bundle(name, {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                              "process": {"user": {"uid": 1000, "gid": 1000},
                                          # The last entry is the process's
                                          # (runc), so the hook's: the first goes.
                                          "env": ["PATH=/bin", "GPUSLICE_CLAIM=ignored-first",
                                                  f"GPUSLICE_CLAIM={token}"]}})


def claim_events(node: Node) -> List[Dict]:
    return [dict(json.loads(d), container=c) for c, d in
            rows(node.db, "SELECT container_id, detail FROM events WHERE kind='claim' ORDER BY id")]


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_a_claim_is_taken_over_not_admitted_twice(node: Node, asan: bool) -> None:
    if asan:  # the takeover's statements and strings: no overflow, no leak
        node.hook_path = build_hook(asan=True)
    uuid = card_uuid(node, 0)
    token = secrets.token_hex(16)
    assert admit(node, claim_row(token), "0-6g", uuid, 6144).returncode == 0
    assert admit(node, "by-hand", "0-6g", uuid, 6144).returncode == 0  # the card is full now
    # The container's process: the row is its from now on (gc reclaims it with it).
    proc = subprocess.Popen(["sleep", "600"])
    try:
        res = node.create("c1", "0-6g", claimed_bundle(node, "c1", token), pid=proc.pid)
        assert res.returncode == 0, res.stderr
        assert rows(node.db, "SELECT container_id, device, memory_mib, pid FROM reservations "
                    "WHERE card_uuid=? ORDER BY container_id", uuid) == \
            [("by-hand", "0-6g", 6144, os.getpid()), ("c1", "0-6g", 6144, proc.pid)]
        assert rows(node.db, "SELECT count(*) FROM events WHERE kind='admit' AND "
                    "container_id='c1'") == [(0,)]
        assert claim_events(node) == [{"claim": claim_row(token), "device": "0-6g",
                                       "taken": True, "container": "c1"}]
        assert (node.state_dir / "containers" / "c1").is_dir()
        # Spent: a second container with the same token is admitted as any
        # other, and the card has no room for it.
        again = node.create("c2", "0-6g", claimed_bundle(node, "c2", token), pid=os.getpid())
        assert again.returncode == 1
        assert "has 4096 MiB free of 16384 MiB, 6144 MiB asked" in err(again)
    finally:
        proc.kill()
        proc.wait()
    # After the first is gone, the task's next container (a restart) is
    # admitted anew, and the plugin is told which container serves the claim.
    assert node.release("c1").returncode == 0
    assert node.create("c3", "0-6g", claimed_bundle(node, "c3", token)).returncode == 0
    assert claim_events(node)[-1] == {"claim": claim_row(token), "device": "0-6g",
                                      "taken": False, "container": "c3"}


def test_a_claim_for_another_request_or_card_is_left_alone(node: Node) -> None:
    uuid0, uuid1 = card_uuid(node, 0), card_uuid(node, 1)
    token = secrets.token_hex(16)
    assert admit(node, claim_row(token), "0-6g", uuid0, 6144).returncode == 0
    for cid, device in (("other-profile", "0-4g-30"), ("other-card", "1-6g")):
        res = node.create(cid, device, claimed_bundle(node, cid, token))
        assert res.returncode == 0, res.stderr
    assert rows(node.db, "SELECT container_id, card_uuid FROM reservations ORDER BY 1") == \
        [(claim_row(token), uuid0), ("other-card", uuid1), ("other-profile", uuid0)]


def test_a_claim_on_a_card_out_of_service_is_not_taken(node: Node) -> None:
    uuid = card_uuid(node, 0)
    token = secrets.token_hex(16)
    assert admit(node, claim_row(token), "0-6g", uuid, 6144).returncode == 0
    off = node.host.run("card", "disable", "0", "--reason", "fan noise")
    assert off.returncode == 0, off.stderr
    res = node.create("c1", "0-6g", claimed_bundle(node, "c1", token))
    assert res.returncode == 1
    assert "card 0 (" in err(res) and "is out of service (fan noise" in err(res)
    assert rows(node.db, "SELECT container_id FROM reservations") == [(claim_row(token),)]


@pytest.mark.parametrize("value", ["", "abc", "A" * 32, "0" * 31, "0" * 33, "g" * 32,
                                   "0" * 31 + "\u00e9"])
def test_a_claim_that_is_not_a_token_is_one_line_and_changes_nothing(node: Node,
                                                                     value: str) -> None:
    node.hook_path = build_hook(asan=True)  # hostile input: any overflow or leak aborts
    res = node.create("c1", "0-6g", claimed_bundle(node, "c1", value))
    assert res.returncode == 2
    line = err(res)
    assert line.startswith("gpuslice-hook: error: process.env GPUSLICE_CLAIM ")
    assert "is not a claim (32 lowercase hex digits" in line
    assert rows(node.db, "SELECT count(*) FROM reservations") == [(0,)]
    assert not (node.state_dir / "containers" / "c1").exists()


def test_a_starter_chosen_claim_id_is_refused_by_the_hook(node: Node) -> None:
    for cid in ("claim-mine", claim_row("0" * 32)):
        res = node.create(cid, "0-6g", pid=os.getpid())
        assert res.returncode == 2, res.stderr
        assert err(res) == (f"gpuslice-hook: error: container id \"{cid}\" in the OCI state "
                            "starts with \"claim-\", which gpuslice keeps for "
                            "gpuslice-nomad-device's reservations; start the container under "
                            "another id")
    assert rows(node.db, "SELECT count(*) FROM reservations") == [(0,)]
    # An id that only contains the word is any container's.
    assert node.create("my-claim-1", "0-6g", pid=os.getpid()).returncode == 0

"""What a tenant's text may hold when it reaches a terminal or a label
(issue 27, G5; the rule: native/include/gpuslice/text.h). A container's name
comes from an annotation its starter sets: the hook cleans it as it enters
(checked with the real hook, plain and under ASan), and every reader cleans
what it prints again, so a row an older hook wrote shows nothing the rule
bars either: `gpuslice status` (text and --json), `gpuslice top --once`,
`gpuslice top` in a real terminal (tmux), the exporter's labels, and the
events it counts.
"""
from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
from pathlib import Path
from typing import List

import pytest

from exporter_node import Exporter, Node, samples
from fakehost import build_hook, fake_gpu
from test_hook import Node as HookNode
from test_top import Tmux

# What the issue names and must never pass (this test's own list, apart from
# the header's): C0 (NUL ends a name instead), DEL, C1 with the CSI, bidi
# overrides, embeddings and isolates, marks, zero-width and BOM, the soft
# hyphen, line and paragraph separators, a tag.
BARRED = ["\x01", "\x1b", "\x1f", "\x7f", "\x80", "\x9b", "\x9f", "\u00ad", "\u061c",
          "\u200b", "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c",
          "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff",
          "\U000e0041"]
KEPT = ["a", "~", " ", "\u00a0", "\u00e9", "\u4e2d", "\U0001f600", "\u05d0"]
NASTY = "ev\x9b2Jil\u202eexe.txt\u2066x\u2069\x1b[31m"
CLEAN = "ev 2Jil exe.txt x  [31m"


def barred_in(text: str) -> List[str]:
    return sorted({ch for ch in text if ch in BARRED})


@pytest.mark.parametrize("asan", [False, True], ids=["plain", "asan"])
def test_the_hook_cleans_a_name_as_it_enters(tmp_path: Path, driver_root: Path,
                                             fakedriver: Path, asan: bool) -> None:
    node = HookNode(tmp_path, driver_root, fakedriver)
    if asan:
        node.hook_path = build_hook(asan=True)
    name = "".join(f"{ch}|" for ch in BARRED + KEPT)
    want = "".join(f"{' ' if ch in BARRED else ch}|" for ch in BARRED + KEPT)
    cases = {"each": (name, want), "issue": (NASTY, CLEAN),
             # A lone surrogate escape: the JSON reader decodes it as U+FFFD,
             # never as the bytes of a surrogate.
             "surrogate": ("a\ud800b", "a\ufffdb")}
    for cid, (text, expected) in cases.items():
        config = {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                  "annotations": {"nerdctl/name": text}}
        bundle = node.bundle(cid, config)
        (bundle / "config.json").write_text(json.dumps(config))  # \ud800 as an escape
        res = node.create(cid, "6g", bundle)
        assert res.returncode == 0, (cid, res.stderr)
        raw = sqlite3.connect(str(node.db)).execute(
            "SELECT CAST(name AS BLOB) FROM reservations WHERE container_id=?",
            (cid,)).fetchone()[0]
        stored = raw.decode("utf-8")  # UTF-8, always
        assert not barred_in(stored), (cid, stored)
        assert stored == expected, cid
        assert node.release(cid).returncode == 0


@pytest.fixture
def node(tmp_path: Path, driver_root: Path, fakedriver: Path) -> Node:
    """A container whose name an older hook stored raw, a card out of service
    for a reason that holds the same, and a refusal whose reason does."""
    from ocihook import accountant

    n = Node(tmp_path, driver_root, [fake_gpu(0, memory_mib=16384), fake_gpu(1)])
    cid = "f" * 64
    n.admit(cid, "4g", 0, memory_mib=4096)
    db = sqlite3.connect(str(n.db))
    db.execute("UPDATE reservations SET name=? WHERE container_id=?", (NASTY, cid))
    db.execute("INSERT INTO events(at, kind, container_id, card_uuid, detail) VALUES "
               "(0, 'refuse', 'x', '', ?)", (json.dumps({"reason": NASTY}),))
    db.commit()
    db.close()
    acct = accountant.Accountant(str(n.db))
    try:
        acct.mark_unhealthy(n.gpus[1]["uuid"], "operator", NASTY)
    finally:
        acct.close()
    return n


def test_status_shows_no_barred_text(node: Node) -> None:
    text = node.host.run("status")
    assert text.returncode == 0, text.stderr
    assert not barred_in(text.stdout) and CLEAN in text.stdout
    doc = node.host.run("status", "--json")
    assert doc.returncode == 0, doc.stderr
    found = json.loads(doc.stdout)
    [k] = [k for c in found["cards"] for k in c["containers"]]
    assert k["name"] == CLEAN
    assert found["cards"][1]["health_reason"] == CLEAN


def test_top_once_shows_no_barred_text(node: Node) -> None:
    res = subprocess.run(["gpuslice", "top", "--once"], env=node.env(), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not barred_in(res.stdout), res.stdout
    assert CLEAN[:9] + "~" in res.stdout and CLEAN in res.stdout


def test_top_in_a_terminal_shows_no_barred_text(node: Node, tmp_path: Path) -> None:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in node.env().items()
                   if k in ("GPUSLICE_CONFIG", "GPUSLICE_FAKE_GPUS", "PATH", "PYTHONPATH"))
    term = Tmux(f"gstext-{tmp_path.name}", f"env {env} gpuslice top; sleep 60")
    try:
        screen = term.wait_for("ffffffffffff")
        assert CLEAN[:9] + "~" in screen, screen
        assert CLEAN in screen, screen
        assert not barred_in(screen), screen
        term.cmd("send-keys", "q")
    finally:
        term.stop()


def test_exporter_labels_show_no_barred_text(node: Node) -> None:
    exp = Exporter(node)
    try:
        text = exp.scrape()
    finally:
        exp.stop()
    assert not barred_in(text)
    m = samples(text)
    assert [lab["name"] for lab, _ in m["gpuslice_container_info"]] == [CLEAN]
    assert CLEAN in [lab["reason"] for lab, _ in m["gpuslice_admissions_total"]]
    assert CLEAN in [lab["reason"] for lab, _ in m["gpuslice_card_health_info"]]

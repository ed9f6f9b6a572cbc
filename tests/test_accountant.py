"""The node accountant on a real SQLite file: the schema and the cards
(ocihook/accountant.py) and the admissions (gpuslice-hook, native/hook, the
one writer of reservations, run as `gpuslice-hook admit|release|gc`).

Admission rules, placement, release, reclaiming what dead containers held,
the recorded policy, the schema's guard rails, and many processes admitting
at the same moment.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional

import pytest

from fakehost import build_hook

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ocihook import accountant as acct, cheader  # noqa: E402

GIB = 1024


def card(i: int, mib: int = 16 * GIB, **kw) -> acct.Card:
    return acct.Card(i, f"GPU-{i:08x}-0000-0000-0000-000000000000", mib, f"Fake {i}", **kw)


def start_time(pid: int) -> int:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return int(data[data.rfind(b")") + 2:].split()[19])  # field 22


class Books:
    """A database whose cards and policy Python records (as `gpuslice cdi
    generate` does) and whose reservations gpuslice-hook writes."""

    def __init__(self, tmp: Path, cards: List[acct.Card],
                 policy: acct.Policy = acct.Policy()) -> None:
        self.path = tmp / "state.db"
        self.state_dir = tmp / "run"
        self.hook = build_hook()
        a = acct.Accountant(str(self.path))
        a.sync_cards(cards)
        a.set_policy(policy)
        a.close()

    def set_policy(self, policy: acct.Policy) -> bool:
        a = acct.Accountant(str(self.path))
        try:
            return a.set_policy(policy)
        finally:
            a.close()

    def run(self, verb: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.hook), verb, *args, "--database", str(self.path),
                               "--state-dir", str(self.state_dir)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=120)

    def admit(self, cid: str, mib: int = 6 * GIB, on: Optional[int] = None,
              device: Optional[str] = None, cores: int = 0, whole: bool = False,
              pid: Optional[int] = None, pid_start: Optional[int] = None,
              cards: Optional[List[int]] = None,
              priority: Optional[str] = None) -> subprocess.CompletedProcess:
        on_cards = cards if cards is not None else ([] if on is None else [on])
        device = device or (str(on) if whole else f"{'' if on is None else f'{on}-'}{mib // GIB}g")
        args = ["--id", cid, "--device", device]
        for i in on_cards:
            args += ["--card", card(i).uuid]
        args += ["--exclusive"] if whole else ["--memory-mib", str(mib), "--cores", str(cores)]
        if priority is not None:
            args += ["--priority", priority]
        if pid is not None:
            args += ["--pid", str(pid)]
            if pid_start is not None:
                args += ["--pid-start", str(pid_start)]
        return self.run("admit", *args)

    def placed(self, cid: str, **kw) -> str:
        """The card uuid the admission got; fails the test on a refusal."""
        res = self.admit(cid, **kw)
        assert res.returncode == 0, res.stderr
        return res.stdout.split()[0]

    def refusal(self, cid: str, **kw) -> str:
        """The one line of a refusal (exit 1)."""
        res = self.admit(cid, **kw)
        assert res.returncode == 1, (res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        return lines[0]

    def usage(self) -> List[acct.CardUsage]:
        a = acct.Accountant(str(self.path))
        try:
            return a.usage()
        finally:
            a.close()

    def events(self) -> List[sqlite3.Row]:
        a = acct.Accountant(str(self.path))
        try:
            return list(a.events(1000))
        finally:
            a.close()

    def holders(self, index: int = 0) -> List[str]:
        return sorted(r.container_id for r in self.usage()[index].reservations)


def test_three_6g_on_a_16g_card_two_fit_then_the_third(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)])
    b.placed("c1", on=0)
    b.placed("c2", on=0)
    msg = b.refusal("c3", on=0)
    assert msg == ("gpuslice-hook: container c3: 0-6g: card 0 (GPU-00000000-0000-0000-0000-"
                   "000000000000) has 4096 MiB free of 16384 MiB, 6144 MiB asked; stop a "
                   "container on it or ask for less")
    res = b.run("release", "--id", "c1")
    assert res.returncode == 0 and res.stdout == f"released c1 0-6g: 6144 MiB on {card(0).uuid}\n"
    assert b.placed("c3", on=0) == card(0).uuid
    assert [u.reserved_mib for u in b.usage()] == [12 * GIB]
    kinds = [e["kind"] for e in reversed(b.events())]
    assert kinds == ["policy", "admit", "admit", "refuse", "operator-release", "admit"]
    # The refusal is counted by its class, on the card its line named.
    [refused] = [e for e in b.events() if e["kind"] == "refuse"]
    assert (refused["container_id"], refused["card_uuid"], json.loads(refused["detail"])) == \
        ("c3", card(0).uuid, {"device": "0-6g", "reason": "full"})
    assert b.run("release", "--id", "c1").returncode == 1  # holds nothing now


def test_refusal_writes_nothing(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0, 4 * GIB)])
    b.refusal("big", mib=8 * GIB, on=0)
    assert b.usage()[0].reservations == []
    # Books recorded the policy; the refusal is an event, nothing more.
    assert [e["kind"] for e in b.events()] == ["refuse", "policy"]


def test_same_device_twice_is_the_same_reservation(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)])
    first = b.admit("c1", on=0).stdout
    assert b.admit("c1", on=0).stdout == first == f"{card(0).uuid} 6144\n"
    assert b.usage()[0].reserved_mib == 6 * GIB


def test_whole_card_excludes_slices_and_the_reverse(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0), card(1)])
    b.placed("whole", on=0, whole=True)
    assert b.usage()[0].reserved_mib == 16 * GIB and b.usage()[0].exclusive
    assert "held whole by whole; stop it, or ask for another card" in \
        b.refusal("s", mib=1 * GIB, on=0)
    b.placed("s", mib=1 * GIB, on=1)
    assert "cannot be held whole: 1 slice(s) hold 1024 MiB (s); stop them first" in \
        b.refusal("w2", on=1, whole=True)


def test_all_is_every_card_whole_or_none(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0), card(1)])
    b.placed("s", mib=1 * GIB, on=1)
    assert "card 1" in b.refusal("all", cards=[0, 1], whole=True, device="all")
    assert b.holders(0) == []  # card 0 was not taken either
    assert b.run("release", "--id", "s").returncode == 0
    res = b.admit("all", cards=[0, 1], whole=True, device="all")
    assert res.stdout.split() == [card(0).uuid, "16384", card(1).uuid, "16384"]


def test_compute_caps_add_up_to_100(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)])
    b.placed("a", mib=1 * GIB, on=0, cores=60)
    b.placed("b", mib=1 * GIB, on=0, cores=40)
    b.placed("uncapped", mib=1 * GIB, on=0)  # no cap: takes no share
    assert "has 0% of its compute left, 10% asked" in b.refusal("c", mib=1 * GIB, on=0, cores=10)


def test_priority_is_recorded_and_bends_no_rule(tmp_path: Path) -> None:
    """A high-priority slice is served first by the shim; the books treat it as any other."""
    b = Books(tmp_path, [card(0)])
    b.placed("hi", mib=8 * GIB, on=0, cores=60, priority="high")
    b.placed("lo", mib=4 * GIB, on=0, cores=40, priority="low")
    assert "has 0% of its compute left, 10% asked" in \
        b.refusal("hi2", mib=1 * GIB, on=0, cores=10, priority="high")
    assert "has 4096 MiB free of 16384 MiB, 6144 MiB asked" in \
        b.refusal("hi3", on=0, priority="high")
    b.placed("plain", mib=1 * GIB, on=0)
    got = {r.container_id: r.priority for r in b.usage()[0].reservations}
    assert got == {"hi": "high", "lo": "low", "plain": "normal"}
    # The column refuses what is not a priority, whoever writes it.
    db = sqlite3.connect(b.path)
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        db.execute("UPDATE reservations SET priority='urgent' WHERE container_id='hi'")
    db.close()


def test_cores_limit_policy(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)], acct.Policy(cores_limit=50))
    b.placed("a", mib=1 * GIB, on=0, cores=40)
    assert "has 10% of its compute left, 20% asked" in b.refusal("b", mib=1 * GIB, on=0, cores=20)


def test_mig_card_takes_no_slice_but_can_be_held_whole(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0, mig=True)])
    assert "is in MIG mode; it is offered whole only" in b.refusal("s", mib=1 * GIB, on=0)
    b.placed("w", on=0, whole=True)


def test_unhealthy_or_vanished_card_takes_nothing_new(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0), card(1, healthy=False)])
    assert b.refusal("s", mib=1 * GIB, on=1) == (
        f"gpuslice-hook: container s: 1-1g: card 1 ({card(1).uuid}) is out of service (no "
        "reason recorded); `gpuslice card enable 1` returns it")
    b.placed("kept", mib=1 * GIB, on=0)
    a = acct.Accountant(str(b.path))
    a.sync_cards([card(1)])  # card 0 is gone from the host; card 1 is back
    assert [(c.healthy, c.health_reason.rsplit(" at ", 1)[0]) for c in a.cards()] == \
        [(False, acct.GONE_REASON), (True, "")]
    a.close()
    assert re.search(r"card 0 \(.*\) is out of service \(gone: not listed by NVML at "
                     r"`gpuslice cdi generate` at 20\d\d-\d\d-\d\dT[\d:]+Z\); `gpuslice "
                     "card enable 0` returns it", b.refusal("t", mib=1 * GIB, on=0))
    # What it held stays on the books until released.
    assert b.usage()[0].reserved_mib == 1 * GIB
    [gone] = [e for e in b.events() if e["kind"] == "unhealthy"]
    assert json.loads(gone["detail"])["cause"] == "gone"
    [back] = [e for e in b.events() if e["kind"] == "healthy"]
    assert (back["card_uuid"], json.loads(back["detail"])) == \
        (card(1).uuid, {"by": "generate", "was": ""})


def test_a_watchers_or_operators_mark_outlasts_generate(tmp_path: Path) -> None:
    """Only the mark generate made itself clears when generate sees the card;
    an XID's or an operator's stays until `gpuslice card enable`."""
    b = Books(tmp_path, [card(0), card(1)])
    a = acct.Accountant(str(b.path))
    a.mark_unhealthy(card(0).uuid, "xid", "XID 79 (GPU has fallen off the bus) at X", xid=79)
    a.mark_unhealthy(card(1).uuid, "operator", "maintenance (gpuslice card disable at Y)")
    # A second mark keeps the first reason and writes no event.
    a.mark_unhealthy(card(0).uuid, "xid", "XID 48 (double-bit ECC error) at Z", xid=48)
    a.sync_cards([card(0), card(1)])
    assert [(c.healthy, c.health_reason) for c in a.cards()] == [
        (False, "XID 79 (GPU has fallen off the bus) at X"),
        (False, "maintenance (gpuslice card disable at Y)")]
    assert all(c.health_since is not None for c in a.cards())
    assert a.mark_healthy(card(0).uuid, "operator").health_reason.startswith("XID 79")
    assert [(c.healthy, c.health_reason, c.health_since) for c in a.cards()][0] == \
        (True, "", None)
    assert a.mark_unhealthy("GPU-not-known", "xid", "x") is None
    kinds = [(e["kind"], json.loads(e["detail"]).get("cause") or json.loads(e["detail"])["by"])
             for e in reversed(list(a.events())) if e["kind"] in ("unhealthy", "healthy")]
    assert kinds == [("unhealthy", "xid"), ("unhealthy", "operator"), ("healthy", "operator")]
    a.close()
    b.placed("s", mib=1 * GIB, on=0)


def test_overcommit(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)], acct.Policy(memory_overcommit=1.5))
    for i in range(4):
        b.placed(f"c{i}", on=0)  # 24 GiB on a 16 GiB card
    assert "0 MiB free of 24576 MiB" in b.refusal("c5", mib=1 * GIB, on=0)


@pytest.mark.parametrize("placement,expected", [("binpack", [0, 0, 1, 1]),
                                                ("spread", [0, 1, 0, 1])])
def test_placement(tmp_path: Path, placement: str, expected: List[int]) -> None:
    b = Books(tmp_path, [card(0), card(1)], acct.Policy(placement=placement))
    uuids = [card(0).uuid, card(1).uuid]
    assert [uuids.index(b.placed(f"c{i}")) for i in range(4)] == expected
    assert "no card has room; the likeliest: 6g: card 0" in b.refusal("c5")


def test_dead_containers_are_reclaimed_at_the_next_admission(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    b = Books(tmp_path, [card(0)])
    b.placed("live", mib=8 * GIB, on=0, pid=os.getpid())  # start time read by the hook
    b.placed("victim", mib=8 * GIB, on=0, pid=child.pid)
    b.refusal("next", mib=8 * GIB, on=0)
    child.kill()  # kill -9: no poststop will ever come
    child.wait()
    b.placed("next", mib=8 * GIB, on=0)
    assert b.holders() == ["live", "next"]
    assert any(e["kind"] == "reclaim" and e["container_id"] == "victim" and
               f'"pid": {child.pid}' in e["detail"] for e in b.events())


def test_reused_pid_is_not_the_same_container(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)])
    me, started = os.getpid(), start_time(os.getpid())
    (b.state_dir / "containers" / "old").mkdir(parents=True)
    b.placed("old", mib=1 * GIB, on=0, pid=me, pid_start=started - 1)  # another process's
    res = b.run("gc")
    assert res.returncode == 0
    assert res.stdout == f"reclaimed old 0-1g: 1024 MiB on {card(0).uuid} (pid {me} is gone)\n"
    assert not (b.state_dir / "containers" / "old").exists()  # its state dir went too
    b.placed("mine", mib=1 * GIB, on=0, pid=me, pid_start=started)
    b.placed("unknown", mib=1 * GIB, on=0)  # no pid recorded: kept
    assert b.run("gc").stdout == \
        "nothing to reclaim: every holder whose process is recorded is alive\n"
    assert b.holders() == ["mine", "unknown"]


def test_the_policy_is_read_at_each_admission(tmp_path: Path) -> None:
    """A policy recorded between two admissions rules the second: no spec is regenerated."""
    b = Books(tmp_path, [card(0), card(1)])
    assert b.placed("a", mib=1 * GIB) == card(0).uuid
    assert b.placed("b", mib=1 * GIB) == card(0).uuid  # binpack
    assert b.set_policy(acct.Policy(placement="spread", memory_overcommit=2.0, cores_limit=30))
    assert not b.set_policy(acct.Policy(placement="spread", memory_overcommit=2.0,
                                        cores_limit=30))  # the same: nothing written
    assert b.placed("c", mib=1 * GIB) == card(1).uuid  # spread now
    assert "has 30% of its compute left, 40% asked" in b.refusal("d", mib=1 * GIB, on=0,
                                                                 cores=40)
    b.placed("e", mib=24 * GIB, on=1)  # 25 of 32 GiB on a 16 GiB card
    events = [e for e in b.events() if e["kind"] == "policy"]
    assert len(events) == 2 and '"was": {"cores_limit": 100' in events[0]["detail"]


def test_no_policy_recorded_admits_nothing(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)])
    db = sqlite3.connect(b.path)
    db.execute("DELETE FROM policy")
    db.commit()
    db.close()
    res = b.admit("c", on=0)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr == (f"gpuslice-hook: error: {b.path}: no admission policy recorded; run "
                          "`gpuslice cdi generate` or `gpuslice config apply` (they record "
                          "the configuration's)\n")
    assert b.usage()[0].reservations == []


def test_a_policy_row_that_breaks_the_rules_is_refused(tmp_path: Path) -> None:
    """The CHECKs hold whoever writes; the hook checks again where they were switched off."""
    b = Books(tmp_path, [card(0)])
    db = sqlite3.connect(b.path)
    for bad in ("placement='random'", "memory_overcommit=0.5", "memory_overcommit=1e999",
                "cores_limit=0", "cores_limit=50.5"):
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            db.execute(f"UPDATE policy SET {bad}")
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        db.execute("UPDATE policy SET memory_overcommit=?", (float("nan"),))
    db.execute("PRAGMA ignore_check_constraints=ON")
    for bad, named in (("placement='ran\ndom'", 'policy placement "ran\\ndom" is not binpack'),
                       ("memory_overcommit=20.0", "policy memory_overcommit 20 is not a number "
                                                  "from 1.0 to 16.0"),
                       ("cores_limit=101", "policy cores_limit 101 is not a whole number")):
        db.execute("UPDATE policy SET placement='binpack', memory_overcommit=1.0, "
                   "cores_limit=100")
        db.execute(f"UPDATE policy SET {bad}")
        db.commit()
        res = b.admit("c", on=0)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert named in res.stderr and "run `gpuslice config apply`" in res.stderr
    db.close()
    assert b.usage()[0].reservations == []
    with pytest.raises(acct.AccountantError, match="breaks a rule of the policy table"):
        b.set_policy(acct.Policy(memory_overcommit=float("inf")))


def test_the_schema_version_has_one_owner(tmp_path: Path) -> None:
    assert acct.SCHEMA_VERSION == cheader.constant("GPUSLICE_DB_SCHEMA_VERSION")
    assert acct.APPLICATION_ID == cheader.constant("GPUSLICE_DB_APPLICATION_ID")
    assert len(acct._MIGRATIONS) == acct.SCHEMA_VERSION  # the list ends at that version


def test_the_hook_knows_this_schema(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0)])
    known = acct.SCHEMA_VERSION
    for version, said in ((99, f"schema version 99 is newer than this gpuslice knows ({known}); "
                               "upgrade gpuslice"),
                          (2, f"schema version 2 is older than this gpuslice knows ({known}); run "
                              "`gpuslice cdi generate` with this gpuslice")):
        db = sqlite3.connect(b.path)
        db.execute(f"PRAGMA user_version={version}")
        db.commit()
        db.close()
        res = b.admit("c", on=0)
        assert res.returncode == 2 and res.stderr == f"gpuslice-hook: error: {b.path}: {said}\n"
    missing = subprocess.run([str(b.hook), "gc", "--database", str(tmp_path / "none.db"),
                              "--state-dir", str(tmp_path)], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "no gpuslice database; run `gpuslice cdi generate`" in missing.stderr
    assert not (tmp_path / "none.db").exists()  # never made by the hook
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    res = subprocess.run([str(b.hook), "gc", "--database", str(empty), "--state-dir",
                          str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "is empty, not a gpuslice database yet" in res.stderr
    assert empty.read_bytes() == b""


def sqlite_file(path: Path, *statements: str) -> bytes:
    db = sqlite3.connect(path)
    for s in statements:
        db.execute(s)
    db.commit()
    db.close()
    return path.read_bytes()


def test_another_programs_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    hook = build_hook()
    cases = [("another application_id", ["PRAGMA application_id=1234567",
                                         "CREATE TABLE cards (x)"],
              "application_id 0x0012d687 is not gpuslice's (0x47505344): another program's "
              "SQLite file; refusing to touch it (check the configuration key database)"),
             ("tables, no id", ["CREATE TABLE customers (id INTEGER)"],
              "holds tables that are not gpuslice's; refusing to touch it (check the "
              "configuration key database)"),
             ("a user_version of its own", ["PRAGMA user_version=7", "CREATE TABLE meta (k)"],
              "holds tables that are not gpuslice's")]
    for name, statements, said in cases:
        path = tmp_path / f"{len(name)}.db"
        before = sqlite_file(path, *statements)
        with pytest.raises(acct.AccountantError) as e:
            acct.Accountant(str(path))
        assert str(e.value).startswith(f"{path}: {said}"), name
        res = subprocess.run([str(hook), "gc", "--database", str(path), "--state-dir",
                              str(tmp_path)], capture_output=True, text=True)
        assert res.returncode == 2 and res.stderr.startswith(
            f"gpuslice-hook: error: {path}: {said}") and res.stderr.count("\n") == 1, name
        assert path.read_bytes() == before, name
        assert sorted(p.name for p in tmp_path.glob(f"{path.name}*")) == [path.name], name
    # gpuslice's own commands say the same in one line, exit 2.
    path = tmp_path / "another.db"
    sqlite_file(path, "PRAGMA application_id=1234567", "CREATE TABLE t (x)")
    config = tmp_path / "config.yaml"
    config.write_text(f"database: {path}\n")
    for args in (["status"], ["config", "apply"]):
        res = subprocess.run(["gpuslice", "--config", str(config), *args],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, (args, res.stderr)
        assert "application_id 0x0012d687 is not gpuslice's" in res.stderr


def test_schema_guard_rails(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    acct.Accountant(str(path)).close()
    sqlite_file(path, "PRAGMA user_version=99")
    with pytest.raises(acct.AccountantError, match="schema version 99 is newer than this"):
        acct.Accountant(str(path))
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(acct.AccountantError, match="not a usable gpuslice database"):
        acct.Accountant(str(garbage))
    assert garbage.read_bytes() == b"not a database at all" * 100


def test_wal_and_version_recorded(tmp_path: Path) -> None:
    a = acct.Accountant(str(tmp_path / "state.db"))
    a.sync_cards([card(0)])
    assert a.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert a.db.execute("PRAGMA user_version").fetchone()[0] == acct.SCHEMA_VERSION == 6
    assert a.db.execute("PRAGMA application_id").fetchone()[0] == 0x47505344
    tables = {r[0] for r in a.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "meta" not in tables and "policy" in tables  # the version is no longer text
    assert a.policy() is None  # until the configuration's is recorded
    a.close()


def test_thirty_at_once_where_twenty_fit(tmp_path: Path) -> None:
    b = Books(tmp_path, [card(0, 12 * GIB), card(1, 8 * GIB)])  # 20 slices of 1 GiB
    for round_ in range(3):
        with ThreadPoolExecutor(30) as pool:  # 30 hook processes at once
            got = list(pool.map(lambda i: (f"r{round_}-{i}", b.admit(f"r{round_}-{i}", mib=GIB)),
                                range(30)))
        admitted = [cid for cid, res in got if res.returncode == 0]
        refused = [res for cid, res in got if res.returncode != 0]
        assert len(admitted) == 20, [r.stderr for r in refused]
        assert all(r.returncode == 1 and "no card has room" in r.stderr for r in refused)
        usage = b.usage()
        assert [u.reserved_mib for u in usage] == [12 * GIB, 8 * GIB]
        assert sorted(r.container_id for u in usage for r in u.reservations) == sorted(admitted)
        # The events say the same: 20 admissions this round.
        kinds = [e["kind"] for e in b.events() if e["container_id"].startswith(f"r{round_}-")]
        assert kinds.count("admit") == 20
        for cid in admitted:
            assert b.run("release", "--id", cid).returncode == 0
        assert [u.reserved_mib for u in b.usage()] == [0, 0]

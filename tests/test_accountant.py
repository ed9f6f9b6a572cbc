"""The node accountant (ocihook/accountant.py) on a real SQLite file.

Admission rules, placement, release, reclaiming what dead containers held,
the schema's guard rails, and many processes admitting at the same moment.
"""
from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from ocihook import accountant as acct  # noqa: E402
from ocihook import procs  # noqa: E402

GIB = 1024


def card(i: int, mib: int = 16 * GIB, **kw) -> acct.Card:
    return acct.Card(i, f"GPU-{i:08x}-0000-0000-0000-000000000000", mib, f"Fake {i}", **kw)


def open_db(tmp_path: Path, cards: List[acct.Card], **kw) -> acct.Accountant:
    a = acct.Accountant(str(tmp_path / "state.db"), alive=kw.pop("alive", lambda p, s: True),
                        **kw)
    a.sync_cards(cards)
    return a


def req(cid: str, mib: int = 6 * GIB, on: Optional[int] = None, **kw) -> acct.Request:
    uuids = None if on is None else [card(on).uuid]
    device = kw.pop("device", f"{'' if on is None else f'{on}-'}{mib // GIB}g")
    return acct.Request(cid, device, mib, card_uuids=uuids, **kw)


def test_three_6g_on_a_16g_card_two_fit_then_the_third(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0)])
    a.admit(req("c1", on=0))
    a.admit(req("c2", on=0))
    with pytest.raises(acct.Refused) as e:
        a.admit(req("c3", on=0))
    msg = str(e.value)
    assert "\n" not in msg
    assert "card 0 (GPU-00000000" in msg and "4096 MiB free of 16384 MiB" in msg
    assert "6144 MiB asked" in msg and "stop a container" in msg
    assert [r.container_id for r in a.release("c1")] == ["c1"]
    assert a.admit(req("c3", on=0)).card_uuid == card(0).uuid
    assert [u.reserved_mib for u in a.usage()] == [12 * GIB]


def test_refusal_writes_nothing(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0, 4 * GIB)])
    with pytest.raises(acct.Refused):
        a.admit(req("big", 8 * GIB, on=0))
    assert a.usage()[0].reservations == []
    assert [e["kind"] for e in a.events()] == []


def test_same_device_twice_is_the_same_reservation(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0)])
    first = a.admit(req("c1", on=0))
    assert a.admit(req("c1", on=0)) == first
    assert a.usage()[0].reserved_mib == 6 * GIB


def test_whole_card_excludes_slices_and_the_reverse(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0), card(1)])
    a.admit(acct.Request("whole", "0", 0, exclusive=True, card_uuids=[card(0).uuid]))
    assert a.usage()[0].reserved_mib == 16 * GIB
    with pytest.raises(acct.Refused, match="held whole by whole"):
        a.admit(req("s", 1 * GIB, on=0))
    a.admit(req("s", 1 * GIB, on=1))
    with pytest.raises(acct.Refused, match=r"cannot be held whole: 1 slice\(s\) hold 1024 MiB"):
        a.admit(acct.Request("w2", "1", 0, exclusive=True, card_uuids=[card(1).uuid]))


def test_compute_caps_add_up_to_100(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0)])
    a.admit(req("a", 1 * GIB, on=0, cores=60))
    a.admit(req("b", 1 * GIB, on=0, cores=40))
    a.admit(req("uncapped", 1 * GIB, on=0))  # no cap: takes no share
    with pytest.raises(acct.Refused, match="has 0% of its compute left, 10% asked"):
        a.admit(req("c", 1 * GIB, on=0, cores=10))


def test_mig_card_takes_no_slice_but_can_be_held_whole(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0, mig=True)])
    with pytest.raises(acct.Refused, match="MIG mode"):
        a.admit(req("s", 1 * GIB, on=0))
    a.admit(acct.Request("w", "0", 0, exclusive=True, card_uuids=[card(0).uuid]))


def test_unhealthy_or_vanished_card_takes_nothing_new(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0), card(1, healthy=False)])
    with pytest.raises(acct.Refused, match="card 1 .* unhealthy"):
        a.admit(req("s", 1 * GIB, on=1))
    a.admit(req("kept", 1 * GIB, on=0))
    a.sync_cards([card(1)])  # card 0 is gone from the host
    assert [c.healthy for c in a.cards()] == [False, True]
    with pytest.raises(acct.Refused, match="card 0 .* unhealthy or gone"):
        a.admit(req("t", 1 * GIB, on=0))
    # What it held stays on the books until released.
    assert a.usage()[0].reserved_mib == 1 * GIB
    assert "card-gone" in [e["kind"] for e in a.events()]


def test_overcommit(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0)], memory_overcommit=1.5)
    for i in range(4):
        a.admit(req(f"c{i}", 6 * GIB, on=0))  # 24 GiB on a 16 GiB card
    with pytest.raises(acct.Refused, match="0 MiB free of 24576 MiB"):
        a.admit(req("c5", 1 * GIB, on=0))
    with pytest.raises(acct.AccountantError, match="memory_overcommit 0.5"):
        acct.Accountant(str(tmp_path / "x.db"), memory_overcommit=0.5)


@pytest.mark.parametrize("placement,expected", [("binpack", [0, 0, 1, 1]),
                                                ("spread", [0, 1, 0, 1])])
def test_placement(tmp_path: Path, placement: str, expected: List[int]) -> None:
    a = open_db(tmp_path, [card(0), card(1)], placement=placement)
    got = [a.cards().index(next(c for c in a.cards() if c.uuid == a.admit(req(f"c{i}")).card_uuid))
           for i in range(4)]
    assert got == expected
    with pytest.raises(acct.Refused, match="no card has room; the likeliest: 6g: card 0"):
        a.admit(req("c5"))


def test_dead_containers_are_reclaimed_at_the_next_admission(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    started = procs.start_time(child.pid)
    a = acct.Accountant(str(tmp_path / "state.db"))  # the real liveness check
    a.sync_cards([card(0)])
    a.admit(req("live", 8 * GIB, on=0, pid=os.getpid(), pid_start=procs.start_time(os.getpid())))
    a.admit(req("victim", 8 * GIB, on=0, pid=child.pid, pid_start=started))
    with pytest.raises(acct.Refused):
        a.admit(req("next", 8 * GIB, on=0))
    child.kill()  # kill -9: no poststop will ever come
    child.wait()
    assert a.admit(req("next", 8 * GIB, on=0)).container_id == "next"
    holders = sorted(r.container_id for r in a.usage()[0].reservations)
    assert holders == ["live", "next"]
    assert any(e["kind"] == "reclaim" and e["container_id"] == "victim" for e in a.events())


def test_reused_pid_is_not_the_same_container(tmp_path: Path) -> None:
    a = acct.Accountant(str(tmp_path / "state.db"))
    a.sync_cards([card(0)])
    me, started = os.getpid(), procs.start_time(os.getpid())
    a.admit(req("old", 1 * GIB, on=0, pid=me, pid_start=started - 1))  # another process's
    assert [r.container_id for r in a.gc()] == ["old"]
    a.admit(req("mine", 1 * GIB, on=0, pid=me, pid_start=started))
    a.admit(req("unknown", 1 * GIB, on=0))  # no pid recorded: kept
    assert a.gc() == []
    assert sorted(r.container_id for r in a.usage()[0].reservations) == ["mine", "unknown"]


def test_procs_start_time(tmp_path: Path) -> None:
    assert procs.start_time(os.getpid()) is not None
    assert procs.start_time(0) is None and procs.start_time(2 ** 22 + 12345) is None
    fake = tmp_path / "77"
    fake.mkdir()
    (fake / "stat").write_bytes(b"77 (we) ird (name)) S " + b" ".join(b"%d" % i for i in
                                                                    range(4, 30)))
    assert procs.start_time(77, str(tmp_path)) == 22
    assert procs.alive(77, 22, str(tmp_path)) and not procs.alive(77, 21, str(tmp_path))
    assert procs.alive(None, None)


def test_schema_guard_rails(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    acct.Accountant(str(path)).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(acct.AccountantError, match="schema version 99 is newer than this"):
        acct.Accountant(str(path))
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE customers (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(acct.AccountantError, match="not gpuslice's; refusing to touch it"):
        acct.Accountant(str(other))
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(acct.AccountantError, match="not a usable gpuslice database"):
        acct.Accountant(str(garbage))
    assert garbage.read_bytes() == b"not a database at all" * 100
    with pytest.raises(acct.AccountantError, match="placement 'random'"):
        acct.Accountant(str(tmp_path / "p.db"), placement="random")


def test_wal_and_version_recorded(tmp_path: Path) -> None:
    a = open_db(tmp_path, [card(0)])
    assert a.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert a.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == \
        str(acct.SCHEMA_VERSION)


def _admit_one(args) -> str:
    path, cid, barrier = args
    a = acct.Accountant(path, alive=lambda p, s: True)
    barrier.wait()
    try:
        return a.admit(req(cid, 1 * GIB)).card_uuid
    except acct.Refused:
        return "refused"
    finally:
        a.close()


def _admit_worker(path: str, cid: str, barrier, out) -> None:
    out.put((cid, _admit_one((path, cid, barrier))))


def test_thirty_at_once_where_twenty_fit(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    a = acct.Accountant(path, alive=lambda p, s: True)
    a.sync_cards([card(0, 12 * GIB), card(1, 8 * GIB)])  # 20 slices of 1 GiB
    ctx = multiprocessing.get_context("fork")
    for round_ in range(3):
        barrier, out = ctx.Barrier(30), ctx.Queue()
        workers = [ctx.Process(target=_admit_worker, args=(path, f"r{round_}-{i}", barrier, out))
                   for i in range(30)]
        for w in workers:
            w.start()
        got = [out.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(timeout=60)
            assert w.exitcode == 0
        admitted = [cid for cid, where in got if where != "refused"]
        assert len(admitted) == 20, got
        usage = a.usage()
        assert [u.reserved_mib for u in usage] == [12 * GIB, 8 * GIB]
        assert sorted(r.container_id for u in usage for r in u.reservations) == sorted(admitted)
        # The events say the same: 20 admissions this round.
        kinds = [e["kind"] for e in a.events(1000) if e["container_id"].startswith(f"r{round_}-")]
        assert kinds.count("admit") == 20
        for cid in admitted:
            a.release(cid)
        assert [u.reserved_mib for u in a.usage()] == [0, 0]

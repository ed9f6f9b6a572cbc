"""The node accountant: what every container holds on every card, in SQLite.

One database file per host (configuration key ``database``, default
/var/lib/gpuslice/state.db) in WAL mode. Every admission is one
``BEGIN IMMEDIATE`` transaction that reads the card's reservations, checks the
rules and inserts, so hooks that start at the same moment serialise on the
database's write lock and can never double-book a card.

Rules, per card:
- memory reserved never exceeds total x ``memory_overcommit`` (default 1.0);
- a whole-card reservation excludes every other one, and the reverse;
- the compute caps of the slices add up to at most ``cores_limit`` (100);
- a card in MIG mode takes no slice; an unhealthy card takes nothing new.

A reservation whose process is gone (or whose pid now names another process:
the start time differs) is reclaimed at the next admission and by ``gc``, so
a poststop that never comes loses nothing. Every change is written to the
``events`` table.

Imported on the hook's path: the standard library only.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from ocihook import procs

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30000
PLACEMENTS = ("binpack", "spread")

# Each entry takes the schema from version i to i + 1.
_MIGRATIONS: Tuple[str, ...] = (
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE cards (
        uuid TEXT PRIMARY KEY,
        idx INTEGER NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        total_mib INTEGER NOT NULL CHECK (total_mib > 0),
        mig INTEGER NOT NULL DEFAULT 0,
        healthy INTEGER NOT NULL DEFAULT 1,
        seen REAL NOT NULL
    );
    CREATE TABLE reservations (
        container_id TEXT NOT NULL,
        device TEXT NOT NULL,
        card_uuid TEXT NOT NULL REFERENCES cards(uuid),
        memory_mib INTEGER NOT NULL CHECK (memory_mib >= 0),
        cores INTEGER NOT NULL CHECK (cores BETWEEN 0 AND 100),
        exclusive INTEGER NOT NULL,
        pid INTEGER,
        pid_start INTEGER,
        runtime TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL,
        PRIMARY KEY (container_id, device, card_uuid)
    );
    CREATE INDEX reservations_card ON reservations(card_uuid);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        container_id TEXT NOT NULL DEFAULT '',
        card_uuid TEXT NOT NULL DEFAULT '',
        detail TEXT NOT NULL DEFAULT ''
    );
    """,
)


class AccountantError(RuntimeError):
    """The database cannot be used (unreadable, another program's, a newer schema)."""


class Refused(Exception):
    """An admission that does not fit; the message is one line for the user."""


@dataclass(frozen=True)
class Card:
    index: int
    uuid: str
    total_mib: int
    name: str = ""
    mig: bool = False
    healthy: bool = True


@dataclass(frozen=True)
class Request:
    """What one device of a container asks for."""
    container_id: str
    device: str                 # the CDI device name, for messages and status
    memory_mib: int             # ignored for an exclusive request (the whole card)
    cores: int = 0              # 0: no compute cap
    exclusive: bool = False     # a whole card
    card_uuids: Optional[Sequence[str]] = None  # None: any card (placement picks)
    pid: Optional[int] = None
    pid_start: Optional[int] = None
    runtime: str = ""


@dataclass(frozen=True)
class Reservation:
    container_id: str
    device: str
    card_uuid: str
    memory_mib: int
    cores: int
    exclusive: bool
    pid: Optional[int]
    pid_start: Optional[int]
    runtime: str
    created: float


@dataclass(frozen=True)
class CardUsage:
    card: Card
    reserved_mib: int
    cores: int
    exclusive: bool
    reservations: List[Reservation]


def _row_reservation(row: sqlite3.Row) -> Reservation:
    return Reservation(row["container_id"], row["device"], row["card_uuid"], row["memory_mib"],
                       row["cores"], bool(row["exclusive"]), row["pid"], row["pid_start"],
                       row["runtime"], row["created"])


def _row_card(row: sqlite3.Row) -> Card:
    return Card(row["idx"], row["uuid"], row["total_mib"], row["name"], bool(row["mig"]),
                bool(row["healthy"]))


class Accountant:
    """One open database. Not thread-safe: one per thread or process."""

    def __init__(self, path: str, memory_overcommit: float = 1.0, placement: str = "binpack",
                 cores_limit: int = 100,
                 alive: Callable[[Optional[int], Optional[int]], bool] = procs.alive) -> None:
        if placement not in PLACEMENTS:
            raise AccountantError(f"placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        if not 1.0 <= memory_overcommit <= 16.0:
            raise AccountantError(f"memory_overcommit {memory_overcommit} is not within 1.0-16.0")
        self.path = path
        self.overcommit = memory_overcommit
        self.placement = placement
        self.cores_limit = cores_limit
        self.alive = alive
        self.db = self._open(path)

    # ------------------------------------------------------------ database

    @staticmethod
    def _open(path: str) -> sqlite3.Connection:
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, mode=0o700, exist_ok=True)
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise AccountantError(f"{path}: cannot open the accountant's database: {e}") from None
        db.row_factory = sqlite3.Row
        try:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
            Accountant._migrate(db, path)
        except sqlite3.DatabaseError as e:
            db.close()
            raise AccountantError(f"{path}: not a usable gpuslice database: {e}") from None
        return db

    @staticmethod
    def _migrate(db: sqlite3.Connection, path: str) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            has_meta = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
            if has_meta:
                row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                version = int(row["value"]) if row else 0
            else:
                others = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if others:
                    raise AccountantError(f"{path}: holds tables that are not gpuslice's; "
                                          "refusing to touch it")
                version = 0
            if version > SCHEMA_VERSION:
                raise AccountantError(f"{path}: schema version {version} is newer than this "
                                      f"gpuslice knows ({SCHEMA_VERSION}); upgrade gpuslice")
            for v in range(version, SCHEMA_VERSION):
                for statement in _statements(_MIGRATIONS[v]):
                    db.execute(statement)
                db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', ?)",
                           (str(v + 1),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.db.close()

    def _tx(self) -> "_Transaction":
        return _Transaction(self.db)

    def _event(self, kind: str, container_id: str = "", card_uuid: str = "",
               **detail: object) -> None:
        self.db.execute("INSERT INTO events(at, kind, container_id, card_uuid, detail) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (time.time(), kind, container_id, card_uuid,
                         json.dumps(detail, sort_keys=True) if detail else ""))

    # ---------------------------------------------------------------- cards

    def sync_cards(self, cards: Sequence[Card]) -> None:
        """Record what NVML sees now. A card gone from the host stays, marked unhealthy."""
        now = time.time()
        with self._tx():
            seen = set()
            for c in cards:
                seen.add(c.uuid)
                self.db.execute(
                    "INSERT INTO cards(uuid, idx, name, total_mib, mig, healthy, seen) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(uuid) DO UPDATE SET "
                    "idx=excluded.idx, name=excluded.name, total_mib=excluded.total_mib, "
                    "mig=excluded.mig, healthy=excluded.healthy, seen=excluded.seen",
                    (c.uuid, c.index, c.name, c.total_mib, int(c.mig), int(c.healthy), now))
            for row in self.db.execute("SELECT uuid FROM cards WHERE healthy=1").fetchall():
                if row["uuid"] not in seen:
                    self.db.execute("UPDATE cards SET healthy=0 WHERE uuid=?", (row["uuid"],))
                    self._event("card-gone", card_uuid=row["uuid"])

    def cards(self) -> List[Card]:
        return [_row_card(r) for r in self.db.execute("SELECT * FROM cards ORDER BY idx")]

    # ----------------------------------------------------------- admission

    def admit(self, req: Request) -> Reservation:
        """Reserve what req asks on a card that fits, or raise Refused (nothing written)."""
        with self._tx():
            self._reclaim_dead()
            return self._admit_locked(req)

    def admit_all(self, reqs: Sequence[Request]) -> List[Reservation]:
        """Every request or none (the `all` device: each card whole)."""
        with self._tx():
            self._reclaim_dead()
            return [self._admit_locked(r) for r in reqs]

    def _admit_locked(self, req: Request) -> Reservation:
        if not req.container_id:
            raise Refused("a container id is needed")
        query = "SELECT * FROM reservations WHERE container_id=? AND device=?"
        params: Tuple[str, ...] = (req.container_id, req.device)
        if req.card_uuids is not None and len(req.card_uuids) == 1:
            query += " AND card_uuid=?"
            params += (req.card_uuids[0],)
        existing = self.db.execute(query, params).fetchone()
        if existing:
            return _row_reservation(existing)  # the hook ran twice: same answer
        candidates = self._candidates(req)
        if not candidates:
            raise Refused(self._no_card_message(req))
        usage = {c.uuid: self._usage(c) for c in candidates}
        fitting = [c for c in candidates if self._why_not(req, usage[c.uuid]) is None]
        if not fitting:
            best = max(candidates, key=lambda c: (self._free_mib(usage[c.uuid]), -c.index))
            why = self._why_not(req, usage[best.uuid]) or "does not fit"
            if len(candidates) > 1:
                why = f"no card has room; the likeliest: {why}"
            raise Refused(why)
        card = self._place(fitting, usage)
        memory = card.total_mib if req.exclusive else req.memory_mib
        now = time.time()
        self.db.execute(
            "INSERT INTO reservations(container_id, device, card_uuid, memory_mib, cores, "
            "exclusive, pid, pid_start, runtime, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (req.container_id, req.device, card.uuid, memory, req.cores, int(req.exclusive),
             req.pid, req.pid_start, req.runtime, now))
        self._event("admit", req.container_id, card.uuid, device=req.device,
                    memory_mib=memory, cores=req.cores, exclusive=req.exclusive)
        return Reservation(req.container_id, req.device, card.uuid, memory, req.cores,
                           req.exclusive, req.pid, req.pid_start, req.runtime, now)

    def _candidates(self, req: Request) -> List[Card]:
        cards = self.cards()
        if req.card_uuids is not None:
            wanted = set(req.card_uuids)
            cards = [c for c in cards if c.uuid in wanted]
        return cards

    def _no_card_message(self, req: Request) -> str:
        if req.card_uuids:
            return (f"{req.device}: card {', '.join(req.card_uuids)} is not known to the "
                    "accountant; run `gpuslice cdi generate` after a driver or card change")
        return f"{req.device}: the accountant knows no card; run `gpuslice cdi generate`"

    def _usage(self, card: Card) -> CardUsage:
        rows = [_row_reservation(r) for r in self.db.execute(
            "SELECT * FROM reservations WHERE card_uuid=? ORDER BY created", (card.uuid,))]
        return CardUsage(card, sum(r.memory_mib for r in rows), sum(r.cores for r in rows),
                         any(r.exclusive for r in rows), rows)

    def _capacity_mib(self, card: Card) -> int:
        return int(card.total_mib * self.overcommit)

    def _free_mib(self, u: CardUsage) -> int:
        return 0 if u.exclusive else max(0, self._capacity_mib(u.card) - u.reserved_mib)

    def _why_not(self, req: Request, u: CardUsage) -> Optional[str]:
        """None if req fits on u's card, else the one-line reason, naming what to do."""
        c = u.card
        label = f"card {c.index} ({c.uuid})"
        holders = ", ".join(sorted({r.container_id[:12] for r in u.reservations}))
        if not c.healthy:
            return f"{req.device}: {label} is unhealthy or gone; it takes no new container"
        if u.exclusive:
            return (f"{req.device}: {label} is held whole by {holders}; stop it, or ask for "
                    "another card")
        if req.exclusive:
            if u.reservations:
                return (f"{req.device}: {label} cannot be held whole: {len(u.reservations)} "
                        f"slice(s) hold {u.reserved_mib} MiB ({holders}); stop them first")
            return None
        if c.mig:
            return (f"{req.device}: {label} is in MIG mode; it is offered whole only, ask for "
                    f"the whole card")
        free = self._free_mib(u)
        if req.memory_mib > free:
            return (f"{req.device}: {label} has {free} MiB free of "
                    f"{self._capacity_mib(c)} MiB, {req.memory_mib} MiB asked; stop a "
                    "container on it or ask for less")
        if req.cores and u.cores + req.cores > self.cores_limit:
            return (f"{req.device}: {label} has {self.cores_limit - u.cores}% of its compute "
                    f"left, {req.cores}% asked; stop a capped container on it or ask for less")
        return None

    def _place(self, fitting: List[Card], usage: Dict[str, CardUsage]) -> Card:
        # binpack: the fullest card that fits; spread: the emptiest. Ties: lowest index.
        if self.placement == "spread":
            return max(fitting, key=lambda c: (self._free_mib(usage[c.uuid]), -c.index))
        return min(fitting, key=lambda c: (self._free_mib(usage[c.uuid]), c.index))

    # -------------------------------------------------------------- release

    def release(self, container_id: str, why: str = "release") -> List[Reservation]:
        """Drop everything container_id holds; returns what was held."""
        with self._tx():
            rows = [_row_reservation(r) for r in self.db.execute(
                "SELECT * FROM reservations WHERE container_id=?", (container_id,))]
            self.db.execute("DELETE FROM reservations WHERE container_id=?", (container_id,))
            for r in rows:
                self._event(why, r.container_id, r.card_uuid, device=r.device,
                            memory_mib=r.memory_mib)
            return rows

    def _reclaim_dead(self) -> List[Reservation]:
        dead = [_row_reservation(r) for r in self.db.execute("SELECT * FROM reservations")
                if not self.alive(r["pid"], r["pid_start"])]
        for r in dead:
            self.db.execute("DELETE FROM reservations WHERE container_id=? AND device=? AND "
                            "card_uuid=?", (r.container_id, r.device, r.card_uuid))
            self._event("reclaim", r.container_id, r.card_uuid, device=r.device, pid=r.pid,
                        memory_mib=r.memory_mib)
        return dead

    def gc(self) -> List[Reservation]:
        """Reclaim the reservations of containers whose process is gone."""
        with self._tx():
            return self._reclaim_dead()

    # --------------------------------------------------------------- status

    def usage(self) -> List[CardUsage]:
        """Per card (by index): what is reserved and by whom."""
        with self._tx():
            return [self._usage(c) for c in self.cards()]

    def events(self, limit: int = 100) -> Iterator[sqlite3.Row]:
        return iter(self.db.execute("SELECT * FROM events ORDER BY id DESC LIMIT ?", (limit,))
                    .fetchall())


def _statements(script: str) -> List[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (Refused included)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, value, tb) -> None:  # type: ignore[no-untyped-def]
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")

"""The node accountant's database: what every container holds on every card.

One SQLite file per host (configuration key ``database``, default
/var/lib/gpuslice/state.db) in WAL mode. Two programs share it:

- this module owns the schema (created and migrated here) and the cards
  (``sync_cards``, from NVML, at ``gpuslice cdi generate``), and reads the
  reservations for ``gpuslice status``;
- ``gpuslice-hook`` (native/hook, C: it runs on every container start) is the
  one writer of reservations: admission, release, reclaiming what dead
  containers held (``gpuslice release`` and ``gpuslice gc`` run it too). Its
  rules are in docs/architecture.md; it refuses a schema version other than
  its GS_SCHEMA_VERSION, which must equal SCHEMA_VERSION here.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 30000

# Each entry takes the schema from version i to i + 1. Entries are never
# edited once released: a database made by an older gpuslice is upgraded in
# place by the ones after its version.
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
    # 2: the compute priority of a slice (cdi.profiles.PRIORITIES); the rows
    # a version-1 database holds were admitted before there was one: normal.
    """
    ALTER TABLE reservations ADD COLUMN priority TEXT NOT NULL DEFAULT 'normal'
        CHECK (priority IN ('high', 'normal', 'low'));
    """,
)


class AccountantError(RuntimeError):
    """The database cannot be used (unreadable, another program's, a newer schema)."""


@dataclass(frozen=True)
class Card:
    index: int
    uuid: str
    total_mib: int
    name: str = ""
    mig: bool = False
    healthy: bool = True


@dataclass(frozen=True)
class Reservation:
    container_id: str
    device: str
    card_uuid: str
    memory_mib: int
    cores: int
    priority: str  # high, normal or low; normal for a whole card
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
                       row["cores"], row["priority"], bool(row["exclusive"]), row["pid"],
                       row["pid_start"], row["runtime"], row["created"])


def _row_card(row: sqlite3.Row) -> Card:
    return Card(row["idx"], row["uuid"], row["total_mib"], row["name"], bool(row["mig"]),
                bool(row["healthy"]))


class Accountant:
    """One open database. Not thread-safe: one per thread or process."""

    def __init__(self, path: str) -> None:
        self.path = path
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

    # --------------------------------------------------------------- status

    def usage(self) -> List[CardUsage]:
        """Per card (by index): what is reserved and by whom, as of one moment."""
        with _Transaction(self.db, "BEGIN"):  # a read snapshot; takes no write lock
            return [self._usage(c) for c in self.cards()]

    def _usage(self, card: Card) -> CardUsage:
        rows = [_row_reservation(r) for r in self.db.execute(
            "SELECT * FROM reservations WHERE card_uuid=? ORDER BY created", (card.uuid,))]
        return CardUsage(card, sum(r.memory_mib for r in rows), sum(r.cores for r in rows),
                         any(r.exclusive for r in rows), rows)

    def events(self, limit: int = 100) -> Iterator[sqlite3.Row]:
        return iter(self.db.execute("SELECT * FROM events ORDER BY id DESC LIMIT ?", (limit,))
                    .fetchall())


def _statements(script: str) -> List[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


class _Transaction:
    """BEGIN IMMEDIATE (or `begin`) ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self.db = db
        self.begin = begin

    def __enter__(self) -> None:
        self.db.execute(self.begin)

    def __exit__(self, kind, value, tb) -> None:  # type: ignore[no-untyped-def]
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")

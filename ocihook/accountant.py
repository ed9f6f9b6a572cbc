"""The node accountant's database: what every container holds on every card.

One SQLite file per host (configuration key ``database``, default
/var/lib/gpuslice/state.db) in WAL mode. Two programs share it:

- this module owns the schema (created and migrated here), the cards
  (``sync_cards``, from NVML, at ``gpuslice cdi generate``; their health,
  ``mark_unhealthy`` and ``mark_healthy``, from the health watcher and
  ``gpuslice card disable|enable``) and the node's
  admission policy (``set_policy``, from the configuration file, at
  ``gpuslice cdi generate`` and ``gpuslice config apply``), and reads the
  reservations for ``gpuslice status``;
- ``gpuslice-hook`` (native/hook, C: it runs on every container start) is the
  one writer of reservations: admission (by the policy recorded here, read in
  its own transaction), release, reclaiming what dead containers held
  (``gpuslice release`` and ``gpuslice gc`` run it too). Its rules are in
  docs/architecture.md.

The file names itself as native/include/gpuslice/statedb.h says: ``PRAGMA
application_id`` is GPUSLICE_DB_APPLICATION_ID and ``PRAGMA user_version``
the schema version, GPUSLICE_DB_SCHEMA_VERSION, which the hook checks too.
Versions 1 and 2 kept their version as text in a ``meta`` table instead;
they are recognised by it and upgraded in place.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from cdi.limits import MODE_TIME
from ocihook import cheader
from ocihook.policy import Policy

APPLICATION_ID = cheader.constant("GPUSLICE_DB_APPLICATION_ID")
SCHEMA_VERSION = cheader.constant("GPUSLICE_DB_SCHEMA_VERSION")
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
    # 3: the node's admission policy, one row, written from the configuration
    # (set_policy) and read by the hook inside each admission; no row until
    # then (the hook refuses to admit without one). The configuration has no
    # node-level priority rule (priority is each profile's), so none is kept.
    # The version moves to PRAGMA user_version: meta goes.
    """
    CREATE TABLE policy (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        placement TEXT NOT NULL CHECK (placement IN ('binpack', 'spread')),
        memory_overcommit REAL NOT NULL CHECK (memory_overcommit BETWEEN 1.0 AND 16.0),
        cores_limit INTEGER NOT NULL
            CHECK (typeof(cores_limit) = 'integer' AND cores_limit BETWEEN 1 AND 100),
        updated REAL NOT NULL
    );
    DROP TABLE meta;
    """,
    # 4: why a card is out of service and since when (the health watcher or
    # an operator set it; '' and NULL while healthy), and the name the
    # container's engine gave it ('' when it recorded none), for operators.
    """
    ALTER TABLE cards ADD COLUMN health_reason TEXT NOT NULL DEFAULT '';
    ALTER TABLE cards ADD COLUMN health_since REAL;
    ALTER TABLE reservations ADD COLUMN name TEXT NOT NULL DEFAULT '';
    """,
    # 5: where the cards sit (gpuslice cdi generate, from NVML: cdi/topology.py),
    # for placing a gang of slices (one device, several cards): each card's
    # PCI address, NUMA node (NULL: unknown) and CPU affinity (a cpulist, ''
    # unknown); per pair of cards their PCIe common ancestor and how many
    # NVLinks join them; and a reservation's place in its gang (0 for a
    # single slice or card), the order its cards reach CUDA in.
    """
    ALTER TABLE cards ADD COLUMN pci_bus_id TEXT NOT NULL DEFAULT '';
    ALTER TABLE cards ADD COLUMN numa_node INTEGER CHECK (numa_node >= 0);
    ALTER TABLE cards ADD COLUMN cpu_affinity TEXT NOT NULL DEFAULT '';
    CREATE TABLE card_links (
        card_a TEXT NOT NULL REFERENCES cards(uuid),
        card_b TEXT NOT NULL REFERENCES cards(uuid),
        pcie TEXT NOT NULL
            CHECK (pcie IN ('internal', 'single', 'multiple', 'hostbridge', 'node', 'system')),
        nvlinks INTEGER NOT NULL CHECK (nvlinks >= 0),
        PRIMARY KEY (card_a, card_b),
        CHECK (card_a < card_b)
    );
    ALTER TABLE reservations ADD COLUMN slot INTEGER NOT NULL DEFAULT 0 CHECK (slot >= 0);
    """,
    # 6: a card's sharing mode (configuration card_modes, written by `gpuslice
    # cdi generate`): time slicing with card-time caps, or NVIDIA MPS with SM
    # shares; the hook admits a slice of an MPS card only while its control
    # daemon is up (docs/compute-limit.md, Two modes).
    """
    ALTER TABLE cards ADD COLUMN mode TEXT NOT NULL DEFAULT 'time' CHECK (mode IN ('time', 'mps'));
    """,
)


# Why a card is out of service when `gpuslice cdi generate` did not see it
# (sync_cards): the one mark that clears itself, when a later generate sees
# the card again. Every other mark (the watcher's, an operator's) stays until
# `gpuslice card enable` (docs/architecture.md, Health).
GONE_REASON = "gone: not listed by NVML at `gpuslice cdi generate`"

# The `unhealthy` event's causes (detail "cause") and who returns a card to
# service (the `healthy` event's "by").
CAUSES = ("xid", "ecc", "lost", "operator", "gone")
RETURNED_BY = ("operator", "generate")


def utc_stamp(at: float) -> str:
    """2026-12-01T14:03:05Z: the time in a health reason."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def clears_itself(card: "Card") -> bool:
    """A mark sync_cards made (or one from before reasons were kept, which only
    sync_cards could make), which the next generate that sees the card lifts."""
    return not card.healthy and (card.health_reason == "" or
                                 card.health_reason.startswith(GONE_REASON))


class AccountantError(RuntimeError):
    """The database cannot be used (unreadable, another program's, a newer schema)."""


class ModeChangeRefused(AccountantError):
    """A card's mode would change while containers hold it (sync_cards)."""


@dataclass(frozen=True)
class Card:
    index: int
    uuid: str
    total_mib: int
    name: str = ""
    mig: bool = False
    healthy: bool = True
    health_reason: str = ""  # why it is out of service; "" while healthy
    health_since: Optional[float] = None
    pci_bus_id: str = ""  # NVML's form, 00000000:18:00.0; "" unknown
    numa_node: Optional[int] = None
    cpu_affinity: str = ""  # the CPUs nearest the card, a cpulist ("0-15,32-47"); "" unknown
    mode: str = MODE_TIME  # one of cdi.limits.MODES: how its slices share it


@dataclass(frozen=True)
class CardLink:
    """How two cards are joined (cdi/topology.py): their PCIe common ancestor
    (one of cdi.topology.PCIE_LEVELS) and the NVLinks between them."""
    card_a: str  # UUIDs, card_a < card_b
    card_b: str
    pcie: str
    nvlinks: int


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
    name: str = ""  # the engine's name for the container, if it recorded one
    slot: int = 0  # its place in its gang (0 for one slice or card): the order cards reach CUDA


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
                       row["pid_start"], row["runtime"], row["created"], row["name"],
                       row["slot"])


def _row_card(row: sqlite3.Row) -> Card:
    return Card(row["idx"], row["uuid"], row["total_mib"], row["name"], bool(row["mig"]),
                bool(row["healthy"]), row["health_reason"], row["health_since"],
                row["pci_bus_id"], row["numa_node"], row["cpu_affinity"], row["mode"])


class Accountant:
    """One open database. Not thread-safe: one per thread or process."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.db = self._open(path)

    # ------------------------------------------------------------ database

    @classmethod
    def read_only(cls, path: str) -> "Accountant":
        """The database opened for reading only (URI mode=ro), for the exporter and
        `gpuslice top`: no migration, no write, no write lock; in WAL mode a reader
        never holds up the hook's writes. AccountantError if it is missing, another
        program's, or of a schema version other than this gpuslice's (an older one
        is upgraded by the next command that opens it to write, e.g. `gpuslice
        status`)."""
        from urllib.parse import quote

        try:
            db = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True,
                                 timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            db.row_factory = sqlite3.Row
            version = cls._version(db, path)
        except sqlite3.Error as e:
            raise AccountantError(f"{path}: cannot open the accountant's database to read: "
                                  f"{e}") from None
        if version != SCHEMA_VERSION:
            db.close()
            raise AccountantError(f"{path}: schema version {version}, this gpuslice reads "
                                  f"{SCHEMA_VERSION}; run `gpuslice status` once to upgrade it")
        acct = cls.__new__(cls)
        acct.path, acct.db = path, db
        return acct

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
            # Whose file it is before anything writes to it (journal_mode=WAL
            # does): another program's file is left as it was.
            Accountant._version(db, path)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
            Accountant._migrate(db, path)
        except sqlite3.DatabaseError as e:
            db.close()
            raise AccountantError(f"{path}: not a usable gpuslice database: {e}") from None
        except AccountantError:
            db.close()
            raise
        return db

    @staticmethod
    def _version(db: sqlite3.Connection, path: str) -> int:
        """The schema version of the file: 0 for an empty one, 1 or 2 for what
        gpuslice made before application_id (its meta table says), else
        user_version. AccountantError for another program's file or a newer
        schema."""
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if app_id == APPLICATION_ID:
            if version > SCHEMA_VERSION:
                raise AccountantError(f"{path}: schema version {version} is newer than this "
                                      f"gpuslice knows ({SCHEMA_VERSION}); upgrade gpuslice")
            return int(version)
        if app_id != 0:
            raise AccountantError(f"{path}: application_id {app_id:#010x} is not gpuslice's "
                                  f"({APPLICATION_ID:#010x}): another program's SQLite file; "
                                  "refusing to touch it (check the configuration key database)")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if version == 0 and not tables:
            return 0
        if version == 0 and "meta" in tables:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is not None and str(row[0]) in ("1", "2"):
                return int(row[0])
        raise AccountantError(f"{path}: holds tables that are not gpuslice's; refusing to "
                              "touch it (check the configuration key database)")

    @staticmethod
    def _migrate(db: sqlite3.Connection, path: str) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            version = Accountant._version(db, path)  # again: another may have migrated it
            for v in range(version, SCHEMA_VERSION):
                for statement in _statements(_MIGRATIONS[v]):
                    db.execute(statement)
            if version < SCHEMA_VERSION:
                # Both are in the file's header page, written with the transaction.
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
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

    def sync_cards(self, cards: Sequence[Card], links: Sequence[CardLink] = ()) -> None:
        """Record what NVML sees now: the cards, where they sit and how they are
        joined (links: every pair of the cards that NVML described; the links
        recorded between cards seen now are replaced by these). A card gone from
        the host stays, out of service (GONE_REASON); one seen again comes back
        only if that was all that was wrong: a mark of the health watcher or an
        operator stays (clears_itself). A card's mode changes only while
        nothing holds it: else ModeChangeRefused, and nothing is written."""
        now = time.time()
        with self._tx():
            known = {c.uuid: c for c in self.cards()}
            self._refuse_mode_change(known, cards)
            seen = set()
            for c in cards:
                seen.add(c.uuid)
                self.db.execute(
                    "INSERT INTO cards(uuid, idx, name, total_mib, mig, healthy, seen, "
                    "pci_bus_id, numa_node, cpu_affinity, mode) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(uuid) DO UPDATE SET idx=excluded.idx, name=excluded.name, "
                    "total_mib=excluded.total_mib, mig=excluded.mig, seen=excluded.seen, "
                    "pci_bus_id=excluded.pci_bus_id, numa_node=excluded.numa_node, "
                    "cpu_affinity=excluded.cpu_affinity, mode=excluded.mode",
                    (c.uuid, c.index, c.name, c.total_mib, int(c.mig), int(c.healthy), now,
                     c.pci_bus_id, c.numa_node, c.cpu_affinity, c.mode))
                was = known.get(c.uuid)
                if was is not None and clears_itself(was):
                    self._set_health(was.uuid, True, "", None)
                    self._event("healthy", card_uuid=was.uuid, by="generate",
                                was=was.health_reason)
            for c in known.values():
                if c.uuid not in seen and c.healthy:
                    reason = f"{GONE_REASON} at {utc_stamp(now)}"
                    self._set_health(c.uuid, False, reason, now)
                    self._event("unhealthy", card_uuid=c.uuid, cause="gone", reason=reason)
            self._replace_links(seen, links)

    def _refuse_mode_change(self, known: Dict[str, Card], cards: Sequence[Card]) -> None:
        """A mode changed under running containers would leave them with the
        other mode's env and caps: the first such card, one line, its holders."""
        for c in cards:
            was = known.get(c.uuid)
            if was is None or was.mode == c.mode:
                continue
            held = self.holders(c.uuid)
            if held:
                raise ModeChangeRefused(
                    f"card {c.index} ({c.uuid}) cannot change from mode {was.mode} to "
                    f"{c.mode}: containers run on it ({', '.join(held)}); stop them first, "
                    "or keep its card_modes entry as it was")

    def holders(self, card_uuid: str) -> List[str]:
        """The containers holding the card, their ids cut to 12, sorted."""
        return sorted({r.container_id[:12] for r in self.reservations(card_uuid)})

    def _replace_links(self, seen: "set[str]", links: Sequence[CardLink]) -> None:
        for row in self.db.execute("SELECT card_a, card_b FROM card_links").fetchall():
            if row["card_a"] in seen and row["card_b"] in seen:
                self.db.execute("DELETE FROM card_links WHERE card_a=? AND card_b=?",
                                (row["card_a"], row["card_b"]))
        for link in links:
            a, b = sorted((link.card_a, link.card_b))
            self.db.execute("INSERT INTO card_links(card_a, card_b, pcie, nvlinks) "
                            "VALUES (?, ?, ?, ?)", (a, b, link.pcie, link.nvlinks))

    def links(self) -> List[CardLink]:
        """How the cards are joined, as the last `gpuslice cdi generate` recorded it."""
        return [CardLink(r["card_a"], r["card_b"], r["pcie"], r["nvlinks"]) for r in
                self.db.execute("SELECT * FROM card_links ORDER BY card_a, card_b")]

    def _set_health(self, uuid: str, healthy: bool, reason: str, since: Optional[float]) -> None:
        self.db.execute("UPDATE cards SET healthy=?, health_reason=?, health_since=? "
                        "WHERE uuid=?", (int(healthy), reason, since, uuid))

    def card(self, uuid: str) -> Optional[Card]:
        row = self.db.execute("SELECT * FROM cards WHERE uuid=?", (uuid,)).fetchone()
        return _row_card(row) if row is not None else None

    def mark_unhealthy(self, uuid: str, cause: str, reason: str,
                       **detail: object) -> Optional[Card]:
        """Take a card out of service: no new container there (the hook refuses with
        the reason), what runs there is left alone. The card as it was, or None if
        the accountant does not know it. A card already out keeps its first reason
        (what followed is likelier a consequence) and no event is written; else an
        `unhealthy` event: {"cause": one of CAUSES, "reason": reason, **detail}."""
        assert cause in CAUSES, cause
        with self._tx():
            card = self.card(uuid)
            if card is not None and card.healthy:
                self._set_health(uuid, False, reason, time.time())
                self._event("unhealthy", card_uuid=uuid, cause=cause, reason=reason, **detail)
            return card

    def mark_healthy(self, uuid: str, by: str) -> Optional[Card]:
        """Return a card to service; the card as it was (None if unknown). A
        `healthy` event {"by": by, "was": the reason} if it was out."""
        assert by in RETURNED_BY, by
        with self._tx():
            card = self.card(uuid)
            if card is not None and not card.healthy:
                self._set_health(uuid, True, "", None)
                self._event("healthy", card_uuid=uuid, by=by, was=card.health_reason)
            return card

    def reservations(self, card_uuid: str) -> List[Reservation]:
        """What is held on one card now, oldest first."""
        return [_row_reservation(r) for r in self.db.execute(
            "SELECT * FROM reservations WHERE card_uuid=? ORDER BY created", (card_uuid,))]

    def cards(self) -> List[Card]:
        return [_row_card(r) for r in self.db.execute("SELECT * FROM cards ORDER BY idx")]

    # --------------------------------------------------------------- policy

    def policy(self) -> Optional[Policy]:
        """The node's admission policy as recorded; None before the first set_policy."""
        row = self.db.execute("SELECT placement, memory_overcommit, cores_limit FROM policy "
                              "WHERE id=1").fetchone()
        if row is None:
            return None
        return Policy(row["placement"], float(row["memory_overcommit"]), int(row["cores_limit"]))

    def set_policy(self, policy: Policy) -> bool:
        """Record the node's admission policy (from the configuration); every admission
        from the next one on follows it. True if it changed (an event says from what)."""
        with self._tx():
            old = self.policy()
            if old == policy:
                return False
            try:
                self._write_policy(policy)
            except sqlite3.IntegrityError as e:  # the table's CHECKs: config.py checks first
                raise AccountantError(f"{self.path}: policy {policy.to_dict()} breaks a rule "
                                      f"of the policy table ({e}); fix the configuration "
                                      "file") from None
            self._event("policy", **policy.to_dict(), **({"was": old.to_dict()} if old else {}))
            return True

    def _write_policy(self, policy: Policy) -> None:
        self.db.execute(
            "INSERT INTO policy(id, placement, memory_overcommit, cores_limit, updated) "
            "VALUES (1, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
            "placement=excluded.placement, memory_overcommit=excluded.memory_overcommit, "
            "cores_limit=excluded.cores_limit, updated=excluded.updated",
            (policy.placement, float(policy.memory_overcommit), int(policy.cores_limit),
             time.time()))

    # --------------------------------------------------------------- status

    def usage(self) -> List[CardUsage]:
        """Per card (by index): what is reserved and by whom, as of one moment."""
        with _Transaction(self.db, "BEGIN"):  # a read snapshot; takes no write lock
            return [self._usage(c) for c in self.cards()]

    def _usage(self, card: Card) -> CardUsage:
        rows = self.reservations(card.uuid)
        return CardUsage(card, sum(r.memory_mib for r in rows), sum(r.cores for r in rows),
                         any(r.exclusive for r in rows), rows)

    def event_tally(self, after_id: int = 0
                    ) -> Tuple[int, Dict[Tuple[str, str, str, str], int]]:
        """How many events of each (kind, card_uuid, reason, cause) have id > after_id,
        and the newest id: counters for the exporter, which asks only for what is
        new since its last scrape. reason and cause are the detail's "reason" (a
        refusal's class) and "cause" (why a card went out of service: xid, ecc...)
        where the detail is a JSON object that has them, else ""."""
        obj = "json_valid(detail) AND json_type(detail) = 'object'"
        rows = self.db.execute(
            f"SELECT kind, card_uuid, CASE WHEN {obj} THEN coalesce(json_extract(detail, "
            f"'$.reason'), '') ELSE '' END AS reason, CASE WHEN {obj} THEN coalesce("
            "json_extract(detail, '$.cause'), '') ELSE '' END AS cause, count(*) AS n, "
            "max(id) AS last FROM events WHERE id > ? GROUP BY 1, 2, 3, 4",
            (after_id,)).fetchall()
        tally = {(r["kind"], r["card_uuid"], str(r["reason"]), str(r["cause"])): int(r["n"])
                 for r in rows}
        return max([after_id] + [int(r["last"]) for r in rows]), tally

    def claim_events(self, after_id: int = 0) -> Tuple[int, List[Tuple[str, str]]]:
        """The `claim` events with id > after_id, oldest first, as (claim id,
        container id): which container serves a reservation made for it before
        it existed (gpuslice-nomad-device's; native/include/gpuslice/claim.h),
        and the newest id."""
        rows = self.db.execute(
            "SELECT id, container_id, json_extract(detail, '$.claim') AS claim FROM events "
            "WHERE id > ? AND kind = 'claim' AND json_valid(detail) ORDER BY id",
            (after_id,)).fetchall()
        last = max([after_id] + [int(r["id"]) for r in rows])
        return last, [(str(r["claim"]), r["container_id"]) for r in rows
                      if isinstance(r["claim"], str)]

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

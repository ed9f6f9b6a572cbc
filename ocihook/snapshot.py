"""One look at the node: cards, the containers on them, their processes, and the
accountant's counters, gathered once per scrape or frame for the exporter
(ocihook/exporter.py), `gpuslice top` (ocihook/top.py) and `gpuslice status`.

Three sources, each read once: the accountant (reservations, cards, their
health, the events), every container's shared region (what its processes
hold, what the compute limiter charged), and NVML (what the card itself says).
A region is the tenant's claim, so it is judged as `gpuslice status` judges
it (region_claim): a figure that cannot be true is shown as such, never used.

Card time: the shim measures it only where it paces launches, that is for a
container with a compute cap (native/shim/src/launch.c: without a cap nothing
sits on the launch path). An uncapped container has no card-time figure
(card_seconds None); the card's NVML utilization covers it.
"""
from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ocihook import accountant, engine_names, region, statedir
from ocihook.nvml_sample import CardSample, Sampler

MIB = 1024 * 1024
NS = 1e9
# The events that end a reservation, by the kind the hook records.
RELEASE_KINDS = ("release", "operator-release", "undo")


@dataclass(frozen=True)
class RegionClaim:
    """What a container's region says about one card, and how far it is believed:
    state "ok", "absent" (no region: none made, as for a row admitted alone, or
    its tenant removed it; nothing used), "unreadable" or
    "implausible" (used_bytes None, problem says why)."""
    state: str
    used_bytes: Optional[int]
    problem: Optional[str] = None
    devices: Tuple[region.DeviceUsage, ...] = ()
    processes: Tuple["ProcessView", ...] = ()


@dataclass(frozen=True)
class ProcessView:
    pid: int  # in the container's pid namespace, as the shim records it
    used_bytes: int
    by_kind: Dict[str, int]


def read_region(state_dir: str, container_id: str) -> "region.Region | region.RegionError":
    """The container's region, or the error that says why there is none to read."""
    try:
        return region.read(statedir.region_path(state_dir, container_id))
    except region.RegionError as e:
        return e


def region_claim(found: "region.Region | region.RegionError",
                 card: accountant.Card) -> RegionClaim:
    """Judge what the region says the container holds on `card`: summed over the
    region's entries for the card before it is judged (a region may name it
    more than once), and refused when it is more than the card holds."""
    if isinstance(found, region.NoRegion):
        return RegionClaim("absent", 0)
    if isinstance(found, region.RegionError):
        return RegionClaim("unreadable", None, str(found))
    mine = tuple(d for d in found.devices if d.uuid == card.uuid)
    claimed = sum(d.used_bytes for d in mine)
    if claimed > card.total_mib * MIB:
        return RegionClaim("implausible", None,
                           f"{found.path} claims {claimed // MIB} MiB used on card {card.index}, "
                           f"which holds {card.total_mib} MiB", mine)
    indexes = {d.index for d in mine}
    procs = []
    for p in found.procs:
        by_kind = {k: sum(p.used[d][i] for d in indexes) for i, k in enumerate(region.KIND_NAMES)}
        procs.append(ProcessView(p.pid, sum(by_kind.values()), by_kind))
    return RegionClaim("ok", claimed, None, mine, tuple(procs))


def gangs(usage: List[accountant.CardUsage]) -> Dict[Tuple[str, str], List[int]]:
    """(container, device) -> its cards' indexes by slot, for each gang: the
    slices of one device on several cards (a whole card's `all` is none)."""
    rows: Dict[Tuple[str, str], List[Tuple[int, int]]] = {}
    for u in usage:
        for r in u.reservations:
            if not r.exclusive:
                rows.setdefault((r.container_id, r.device), []).append((r.slot, u.card.index))
    return {k: [idx for _, idx in sorted(v)] for k, v in rows.items() if len(v) > 1}


def profile_of(r: accountant.Reservation) -> str:
    """The profile a reservation was made by: its device name without the card
    or the gang's count (`0-4g-30`, `4g-30` and `2x4g-30` are all 4g-30);
    "whole" for a whole card."""
    if r.exclusive:
        return "whole"
    head, sep, rest = r.device.partition("-")
    if sep and head.isdigit():
        return rest
    count, x, profile = r.device.partition("x")
    return profile if x and count.isdigit() and profile else r.device


@dataclass(frozen=True)
class ContainerView:
    reservation: accountant.Reservation
    profile: str
    claim: RegionClaim
    limit_bytes: int           # the slice; the card's memory for a whole card
    core_limit: int            # percent, 0: no cap (the accountant's record)
    card_seconds: Optional[float]       # card time charged; None: not measured (no cap)
    throttled_seconds: Optional[float]  # time slept for the cap; None likewise
    gang: Optional[List[int]] = None    # a gang's slice: the gang's card indexes by slot
    name: str = ""  # engine_names.names_of's: the tenant's text, shown by shown()

    @property
    def used_bytes(self) -> Optional[int]:
        return self.claim.used_bytes


@dataclass(frozen=True)
class CardView:
    card: accountant.Card
    reserved_mib: int
    cores: int
    exclusive: bool
    nvml: Optional[CardSample]
    containers: List[ContainerView]

    @property
    def total_bytes(self) -> int:
        return self.nvml.total_bytes if self.nvml else self.card.total_mib * MIB

    @property
    def claimed_bytes(self) -> int:
        """What the containers' believed regions add up to on this card."""
        return sum(c.used_bytes or 0 for c in self.containers)


class EventCounters:
    """Running totals of the accountant's events by (kind, card, reason): the
    first look counts every event there is, later ones only those added since
    (events are appended, never changed), so a scrape stays cheap on a node
    with a long history."""

    def __init__(self) -> None:
        self.last_id = 0
        self.totals: Dict[Tuple[str, str, str, str], int] = {}  # (kind, card, reason, cause)

    def update(self, acct: accountant.Accountant) -> None:
        self.last_id, new = acct.event_tally(self.last_id)
        for key, n in new.items():
            self.totals[key] = self.totals.get(key, 0) + n

    def count(self, kind: str, card_uuid: Optional[str] = None, cause: Optional[str] = None
              ) -> int:
        return sum(n for (k, c, _r, why), n in self.totals.items()
                   if k == kind and (card_uuid is None or c == card_uuid)
                   and (cause is None or why == cause))

    def by_reason(self, kind: str) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for (k, _c, r, _why), n in self.totals.items():
            if k == kind:
                out[r] = out.get(r, 0) + n
        return out


@dataclass
class Snapshot:
    taken: float                        # CLOCK_MONOTONIC, seconds: for rates between two
    cards: List[CardView] = field(default_factory=list)
    events: EventCounters = field(default_factory=EventCounters)
    problems: Dict[str, str] = field(default_factory=dict)  # source -> why it was not read


def _container(cfg_state_dir: str, r: accountant.Reservation, card: accountant.Card,
               regions: Dict[str, "region.Region | region.RegionError"],
               gang: Optional[List[int]] = None, name: str = "") -> ContainerView:
    if r.container_id not in regions:
        regions[r.container_id] = read_region(cfg_state_dir, r.container_id)
    claim = region_claim(regions[r.container_id], card)
    # The shim measures card time where its region says the cap is in force.
    measured = any(d.core_limit for d in claim.devices)
    charged = sum(d.compute_charged_ns for d in claim.devices)
    slept = sum(d.compute_throttled_ns for d in claim.devices)
    return ContainerView(r, profile_of(r), claim,
                         card.total_mib * MIB if r.exclusive else r.memory_mib * MIB, r.cores,
                         charged / NS if measured else None, slept / NS if measured else None,
                         gang, name)


def take(state_dir: str, acct: Optional[accountant.Accountant], sampler: Optional[Sampler],
         events: Optional[EventCounters] = None,
         names: Optional[engine_names.Lookup] = None) -> Snapshot:
    """Everything, once. acct None (no database to read yet) or a sampler without
    NVML leave those parts out and say why in `problems`; names, where given,
    names the containers whose engine recorded no name for the hook."""
    snap = Snapshot(time.monotonic(), events=events or EventCounters())
    samples = sampler.sample() if sampler else {}
    if sampler and sampler.problem:
        snap.problems["nvml"] = sampler.problem
    if acct is None:
        snap.problems.setdefault("accountant", "no accountant database to read")
        return snap
    try:
        usage = acct.usage()
        snap.events.update(acct)
    except (accountant.AccountantError, sqlite3.Error) as e:
        snap.problems["accountant"] = f"{acct.path}: cannot read: {e}"
        return snap
    regions: Dict[str, "region.Region | region.RegionError"] = {}
    gang_cards = gangs(usage)
    named = engine_names.names_of((r for u in usage for r in u.reservations), names)
    for u in usage:
        snap.cards.append(CardView(
            u.card, u.reserved_mib, u.cores, u.exclusive, samples.get(u.card.uuid),
            [_container(state_dir, r, u.card, regions, gang_cards.get((r.container_id, r.device)),
                        named[r.container_id])
             for r in u.reservations]))
    return snap


def open_accountant(path: str) -> "Tuple[Optional[accountant.Accountant], Optional[str]]":
    """The accountant, read-only, or None and why (missing, unreadable, other schema)."""
    if not os.path.exists(path):
        return None, f"{path}: no accountant database yet (`gpuslice cdi generate` makes it)"
    try:
        return accountant.Accountant.read_only(path), None
    except accountant.AccountantError as e:
        return None, str(e)

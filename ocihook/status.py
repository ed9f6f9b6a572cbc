"""What `gpuslice status` shows: per card, what is reserved (the accountant)
and what is in use now (each container's shared region).

The reservations are the operator's record; a region is written by the
container's own processes, so what it says is the tenant's claim. A claim is
shown only when it could be true (no more used on a card than the card
holds); one that cannot be, or a region that cannot be read, is shown as
such and left out of the card's sum (docs/architecture.md, `gpuslice
status`).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from cdi.profiles import DEFAULT_PRIORITY
from ocihook import accountant, region
from ocihook.config import Config

MIB = 1024 * 1024


def _region_usage(cfg: Config, container_id: str,
                  card: accountant.Card) -> Tuple[Optional[int], str, Optional[str]]:
    """What the container's processes say they hold on that card now, in MiB,
    and how far that is believed: (used_mib, region, problem) where region is
    "ok", "absent" (no region yet: 0 used), "unreadable" or "implausible"
    (used_mib None, problem says why)."""
    path = os.path.join(cfg.state_dir, "containers", container_id, "region")
    try:
        r = region.read(path)
    except region.NoRegion:
        return 0, "absent", None
    except region.RegionError as e:
        return None, "unreadable", str(e)
    # Summed before it is judged: a region may name the card in several entries.
    claimed = sum(d.used_bytes for d in r.devices if d.uuid == card.uuid)
    if claimed > card.total_mib * MIB:
        return None, "implausible", (f"{path} claims {claimed // MIB} MiB used on card "
                                     f"{card.index}, which holds {card.total_mib} MiB")
    return claimed // MIB, "ok", None


def _container(cfg: Config, r: accountant.Reservation, card: accountant.Card) -> Dict[str, Any]:
    used, state, problem = _region_usage(cfg, r.container_id, card)
    return {"id": r.container_id, "device": r.device, "memory_mib": r.memory_mib,
            "cores": r.cores, "priority": r.priority, "exclusive": r.exclusive,
            "used_mib": used, "region": state, "region_problem": problem, "pid": r.pid,
            "runtime": r.runtime}


def collect(cfg: Config, acct: accountant.Accountant) -> Dict[str, Any]:
    """The --json document: {"cards": [{index, uuid, total_mib, reserved_mib, used_mib,
    used_uncounted, used_plausible, free_mib, healthy, containers: [{id, device,
    memory_mib, cores, priority, used_mib, region, region_problem, pid}]}]}; a card's
    used_mib sums the containers' believed figures, used_uncounted says how many
    were not (used_mib null), used_plausible is false when the sum is more than
    the card holds (tenants' claims that are each possible but not together)."""
    cards: List[Dict[str, Any]] = []
    for u in acct.usage():
        containers = [_container(cfg, r, u.card) for r in u.reservations]
        used = sum(c["used_mib"] for c in containers if c["used_mib"] is not None)
        capacity = int(u.card.total_mib * cfg.memory_overcommit)
        cards.append({"index": u.card.index, "uuid": u.card.uuid, "name": u.card.name,
                      "healthy": u.card.healthy, "mig": u.card.mig,
                      "total_mib": u.card.total_mib, "reserved_mib": u.reserved_mib,
                      "used_mib": used,
                      "used_uncounted": sum(c["used_mib"] is None for c in containers),
                      "used_plausible": used <= u.card.total_mib,
                      "free_mib": 0 if u.exclusive else max(0, capacity - u.reserved_mib),
                      "cores": u.cores, "containers": containers})
    return {"cards": cards}


def _held(k: Dict[str, Any]) -> str:
    """What a container holds, in words; the usual (no cap, normal priority)
    goes unsaid to keep the line short."""
    if k["exclusive"]:
        return "whole card"
    return (f"{k['memory_mib']} MiB" + (f", {k['cores']}%" if k["cores"] else "")
            + (f", priority {k['priority']}" if k["priority"] != DEFAULT_PRIORITY else ""))


def _card_used(c: Dict[str, Any]) -> str:
    """The card's used memory, with what it leaves out and whether it can be true."""
    notes = []
    if c["used_uncounted"]:
        n = c["used_uncounted"]
        notes.append(f"{n} region{'s' if n > 1 else ''} not counted")
    if not c["used_plausible"]:
        notes.append("IMPLAUSIBLE: more than the card holds, a region lies")
    return f"{c['used_mib']} MiB used" + (f" ({'; '.join(notes)})" if notes else "")


def _container_used(k: Dict[str, Any]) -> str:
    if k["used_mib"] is not None:
        return f"{k['used_mib']} MiB used"
    return f"? MiB used (region {k['region'].upper()}: {k['region_problem']})"


def render(doc: Dict[str, Any]) -> str:
    """The human table: one line per card, one indented line per container."""
    lines = []
    for c in doc["cards"]:
        state = "" if c["healthy"] else "  UNHEALTHY"
        lines.append(f"card {c['index']} {c['uuid']} {c['name']}: {c['reserved_mib']} of "
                     f"{c['total_mib']} MiB reserved, {_card_used(c)}, "
                     f"{c['free_mib']} MiB free, {c['cores']}% compute reserved{state}")
        for k in c["containers"]:
            lines.append(f"  {k['id'][:12]}  {k['device']:<10} {_held(k)}; {_container_used(k)}")
    return "\n".join(lines) if lines else "no cards known yet: run `gpuslice cdi generate`"

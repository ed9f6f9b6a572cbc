"""What `gpuslice status` shows: per card, what is reserved (the accountant)
and what is in use now (each container's shared region)."""
from __future__ import annotations

from typing import Any, Dict, List

from cdi.profiles import DEFAULT_PRIORITY
from ocihook import accountant, region, statedir
from ocihook.config import Config

MIB = 1024 * 1024


def _used_mib(cfg: Config, container_id: str, card_uuid: str) -> int:
    """What the container's processes hold on that card now; 0 if no region (yet)."""
    path = statedir.region_path(cfg.state_dir, container_id)
    try:
        r = region.read(path)
    except region.RegionError:
        return 0
    return sum(d.used_bytes for d in r.devices if d.uuid == card_uuid) // MIB


def collect(cfg: Config, acct: accountant.Accountant) -> Dict[str, Any]:
    """The --json document: {"cards": [{index, uuid, total_mib, reserved_mib, used_mib,
    free_mib, healthy, containers: [{id, device, memory_mib, cores, priority, used_mib,
    pid}]}]}."""
    cards: List[Dict[str, Any]] = []
    for u in acct.usage():
        containers = [{"id": r.container_id, "device": r.device, "memory_mib": r.memory_mib,
                       "cores": r.cores, "priority": r.priority, "exclusive": r.exclusive,
                       "used_mib": _used_mib(cfg, r.container_id, u.card.uuid), "pid": r.pid,
                       "runtime": r.runtime}
                      for r in u.reservations]
        capacity = int(u.card.total_mib * cfg.memory_overcommit)
        cards.append({"index": u.card.index, "uuid": u.card.uuid, "name": u.card.name,
                      "healthy": u.card.healthy, "mig": u.card.mig,
                      "total_mib": u.card.total_mib, "reserved_mib": u.reserved_mib,
                      "used_mib": sum(c["used_mib"] for c in containers),
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


def render(doc: Dict[str, Any]) -> str:
    """The human table: one line per card, one indented line per container."""
    lines = []
    for c in doc["cards"]:
        state = "" if c["healthy"] else "  UNHEALTHY"
        lines.append(f"card {c['index']} {c['uuid']} {c['name']}: {c['reserved_mib']} of "
                     f"{c['total_mib']} MiB reserved, {c['used_mib']} MiB used, "
                     f"{c['free_mib']} MiB free, {c['cores']}% compute reserved{state}")
        for k in c["containers"]:
            lines.append(f"  {k['id'][:12]}  {k['device']:<10} {_held(k)}; "
                         f"{k['used_mib']} MiB used")
    return "\n".join(lines) if lines else "no cards known yet: run `gpuslice cdi generate`"

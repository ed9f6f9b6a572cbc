"""What `gpuslice status` shows: per card, what is reserved (the accountant)
and what is in use now (each container's shared region), and the admission
policy the accountant records (the hook's, which may differ from the
configuration file's until `gpuslice config apply`).

What is free on a card is the admission rule's answer (ocihook/room.py asks
gpuslice-hook, its one owner), by the recorded policy.

The reservations and the policy are the operator's record; a region is
written by the container's own processes, so what it says is the tenant's
claim. A claim is shown only when it could be true (no more used on a card
than the card holds); one that cannot be, or a region that cannot be read,
is shown as such and left out of the card's sum (docs/architecture.md,
`gpuslice status`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from cdi.limits import DEFAULT_PRIORITY, MODE_MPS
from ocihook import accountant, engine_names, room, snapshot
from ocihook.config import Config
from ocihook.policy import Policy
from ocihook.tenant_text import shown

MIB = 1024 * 1024


def _container(cfg: Config, r: accountant.Reservation, card: accountant.Card,
               gangs: Dict[Tuple[str, str], List[int]], name: str) -> Dict[str, Any]:
    claim = snapshot.region_claim(snapshot.read_region(cfg.state_dir, r.container_id), card)
    used = claim.used_bytes // MIB if claim.used_bytes is not None else None
    cards = gangs.get((r.container_id, r.device))
    # The name is the tenant's (an annotation, or its engine's --name): shown
    # by text.h's rule.
    return {"id": r.container_id, "name": shown(name), "device": shown(r.device),
            "resized": _resized(cfg, r),
            "gang": {"slices": len(cards), "slot": r.slot, "cards": cards} if cards else None,
            "memory_mib": r.memory_mib, "cores": r.cores, "priority": r.priority,
            "exclusive": r.exclusive, "used_mib": used, "region": claim.state,
            "region_problem": claim.problem, "pid": r.pid, "runtime": r.runtime,
            "processes": [{"pid": p.pid, "used_bytes": p.used_bytes, "by_kind": p.by_kind}
                          for p in claim.processes]}


def _resized(cfg: Config, r: accountant.Reservation) -> bool:
    """Whether the slice differs from its profile's: `gpuslice resize` changed it
    (as far as the configuration still has the profile)."""
    profile = next((p for p in cfg.profiles if p.name == snapshot.profile_of(r)), None)
    return profile is not None and not r.exclusive and \
        (profile.memory_mib, profile.cores) != (r.memory_mib, r.cores)


def policy_words(policy: Policy) -> str:
    return (f"placement {policy.placement}, memory_overcommit {policy.memory_overcommit:g}, "
            f"cores_limit {policy.cores_limit}")


def collect(cfg: Config, acct: accountant.Accountant) -> Dict[str, Any]:
    """The --json document: {"policy": {placement, memory_overcommit, cores_limit} or
    null (none recorded yet), "policy_file_differs": {key: {"recorded", "file"}},
    "cards": [{index, uuid, total_mib, reserved_mib, used_mib, used_uncounted,
    used_plausible, unreserved_mib (what the accountant can still promise), healthy,
    health_reason ("" while healthy), mode (time: card-time caps; mps: a cap's compute
    is an MPS SM share), health_since (seconds since the epoch, null
    while healthy), pci_bus_id, numa_node (null: unknown), cpu_affinity (a cpulist,
    "" unknown), containers: [{id, name, device, resized (the slice differs from its
    profile's: `gpuslice resize` changed it), memory_mib, cores, priority, gang ({slices, slot, cards: the gang's card indexes by slot} for
    a slice of a gang, else null), used_mib, region, region_problem, pid, runtime,
    processes: [{pid, used_bytes, by_kind: {context, alloc, vmm, pool, array}}]}]}]}: a
    process's pid is the one in its container, its bytes those on this card. Free
    memory is the hook's answer (room.read), by the recorded policy it admits by;
    room.RoomError when the hook cannot give it. A card's used_mib sums the
    containers' believed figures, used_uncounted says how many were not (used_mib
    null), used_plausible is false when the sum is more than the card holds
    (tenants' claims that are each possible but not together)."""
    recorded: Optional[Policy] = acct.policy()
    differs = {k: {"recorded": mine, "file": theirs}
               for k, (mine, theirs) in recorded.differences(cfg.policy()).items()} \
        if recorded else {}
    cards: List[Dict[str, Any]] = []
    usage = acct.usage()
    rooms = room.read(cfg)
    gangs = snapshot.gangs(usage)
    named = engine_names.names_of((r for u in usage for r in u.reservations),
                                  engine_names.lookup(cfg))
    for u in usage:
        containers = [_container(cfg, r, u.card, gangs, named[r.container_id])
                      for r in u.reservations]
        used = sum(c["used_mib"] for c in containers if c["used_mib"] is not None)
        # A card `gpuslice cdi generate` added between the two reads has nothing free yet.
        free = rooms[u.card.uuid].free_mib if u.card.uuid in rooms else 0
        cards.append({"index": u.card.index, "uuid": u.card.uuid, "name": u.card.name,
                      "healthy": u.card.healthy, "health_reason": shown(u.card.health_reason),
                      "health_since": u.card.health_since, "mig": u.card.mig,
                      "pci_bus_id": u.card.pci_bus_id, "numa_node": u.card.numa_node,
                      "cpu_affinity": u.card.cpu_affinity, "mode": u.card.mode,
                      "total_mib": u.card.total_mib, "reserved_mib": u.reserved_mib,
                      "used_mib": used,
                      "used_uncounted": sum(c["used_mib"] is None for c in containers),
                      "used_plausible": used <= u.card.total_mib,
                      "unreserved_mib": free,
                      "cores": u.cores, "containers": containers})
    return {"policy": recorded.to_dict() if recorded else None,
            "policy_file_differs": differs, "cards": cards}


def _held(k: Dict[str, Any]) -> str:
    """What a container holds, in words; the usual (no cap, normal priority)
    goes unsaid to keep the line short."""
    if k["exclusive"]:
        return "whole card"
    return (("resized to " if k["resized"] else "") + f"{k['memory_mib']} MiB"
            + (f", {k['cores']}%" if k["cores"] else "")
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


def _gang(k: Dict[str, Any]) -> str:
    g = k["gang"]
    if not g:
        return ""
    cards = ", ".join(str(c) for c in g["cards"])
    return f"; gang {g['slot'] + 1} of {g['slices']} on cards {cards}"


def _mode_words(mode: str) -> str:
    """What a compute cap is on a card in MPS mode (docs/compute-limit.md, Two
    modes); nothing for the default, time."""
    return " (mode mps: SM shares)" if mode == MODE_MPS else ""


def render(doc: Dict[str, Any]) -> str:
    """The policy line, then one line per card, one indented line per container."""
    lines = []
    if doc["policy"] is None:
        lines.append("policy: none recorded; the hook admits nothing until `gpuslice cdi "
                     "generate` or `gpuslice config apply` records it")
    else:
        lines.append("policy: " + policy_words(Policy(**doc["policy"])))
    for key, both in doc["policy_file_differs"].items():
        lines.append(f"policy: the configuration file says {key} {both['file']}, the accountant "
                     f"admits by {both['recorded']}: `gpuslice config apply` records the file's")
    for c in doc["cards"]:
        state = "" if c["healthy"] else \
            f"; OUT OF SERVICE: {c['health_reason'] or 'no reason recorded'}"
        lines.append(f"card {c['index']} {c['uuid']} {c['name']}: {c['reserved_mib']} of "
                     f"{c['total_mib']} MiB reserved, {_card_used(c)}, "
                     f"{c['unreserved_mib']} MiB unreserved, {c['cores']}% compute reserved"
                     f"{_mode_words(c['mode'])}{state}")
        for k in c["containers"]:
            named = f" ({k['name']})" if k["name"] else ""
            lines.append(f"  {k['id'][:12]}{named}  {k['device']:<10} {_held(k)}; "
                         f"{_container_used(k)}{_gang(k)}")
    if not doc["cards"]:
        lines.append("no cards known yet: run `gpuslice cdi generate`")
    return "\n".join(lines)

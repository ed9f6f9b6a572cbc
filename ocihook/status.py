"""What `gpuslice status` shows: per card, what is reserved (the accountant)
and what is in use now (each container's shared region), and the admission
policy the accountant records (the hook's, which may differ from the
configuration file's until `gpuslice config apply`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

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


def policy_words(policy: accountant.Policy) -> str:
    return (f"placement {policy.placement}, memory_overcommit {policy.memory_overcommit:g}, "
            f"cores_limit {policy.cores_limit}")


def collect(cfg: Config, acct: accountant.Accountant) -> Dict[str, Any]:
    """The --json document: {"policy": {placement, memory_overcommit, cores_limit} or
    null (none recorded yet), "policy_file_differs": {key: {"recorded", "file"}},
    "cards": [{index, uuid, total_mib, reserved_mib, used_mib, free_mib, healthy,
    containers: [{id, device, memory_mib, cores, priority, used_mib, pid}]}]}.
    Free memory is by the recorded policy, the one the hook admits by."""
    recorded: Optional[accountant.Policy] = acct.policy()
    # Without a recorded policy the hook admits nothing; the defaults say what it would be.
    policy = recorded or accountant.Policy()
    differs = {k: {"recorded": mine, "file": theirs}
               for k, (mine, theirs) in policy.differences(cfg.policy()).items()} \
        if recorded else {}
    cards: List[Dict[str, Any]] = []
    for u in acct.usage():
        containers = [{"id": r.container_id, "device": r.device, "memory_mib": r.memory_mib,
                       "cores": r.cores, "priority": r.priority, "exclusive": r.exclusive,
                       "used_mib": _used_mib(cfg, r.container_id, u.card.uuid), "pid": r.pid,
                       "runtime": r.runtime}
                      for r in u.reservations]
        capacity = policy.capacity_mib(u.card.total_mib)
        cards.append({"index": u.card.index, "uuid": u.card.uuid, "name": u.card.name,
                      "healthy": u.card.healthy, "mig": u.card.mig,
                      "total_mib": u.card.total_mib, "reserved_mib": u.reserved_mib,
                      "used_mib": sum(c["used_mib"] for c in containers),
                      "free_mib": 0 if u.exclusive else max(0, capacity - u.reserved_mib),
                      "cores": u.cores, "containers": containers})
    return {"policy": recorded.to_dict() if recorded else None,
            "policy_file_differs": differs, "cards": cards}


def _held(k: Dict[str, Any]) -> str:
    """What a container holds, in words; the usual (no cap, normal priority)
    goes unsaid to keep the line short."""
    if k["exclusive"]:
        return "whole card"
    return (f"{k['memory_mib']} MiB" + (f", {k['cores']}%" if k["cores"] else "")
            + (f", priority {k['priority']}" if k["priority"] != DEFAULT_PRIORITY else ""))


def render(doc: Dict[str, Any]) -> str:
    """The policy line, then one line per card, one indented line per container."""
    lines = []
    if doc["policy"] is None:
        lines.append("policy: none recorded; the hook admits nothing until `gpuslice cdi "
                     "generate` or `gpuslice config apply` records it")
    else:
        lines.append("policy: " + policy_words(accountant.Policy(**doc["policy"])))
    for key, both in doc["policy_file_differs"].items():
        lines.append(f"policy: the configuration file says {key} {both['file']}, the accountant "
                     f"admits by {both['recorded']}: `gpuslice config apply` records the file's")
    for c in doc["cards"]:
        state = "" if c["healthy"] else "  UNHEALTHY"
        lines.append(f"card {c['index']} {c['uuid']} {c['name']}: {c['reserved_mib']} of "
                     f"{c['total_mib']} MiB reserved, {c['used_mib']} MiB used, "
                     f"{c['free_mib']} MiB free, {c['cores']}% compute reserved{state}")
        for k in c["containers"]:
            lines.append(f"  {k['id'][:12]}  {k['device']:<10} {_held(k)}; "
                         f"{k['used_mib']} MiB used")
    if not doc["cards"]:
        lines.append("no cards known yet: run `gpuslice cdi generate`")
    return "\n".join(lines)

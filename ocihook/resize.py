"""What `gpuslice resize CONTAINER` resizes: the container the operator names,
found in the accountant's books, and the hook's arguments for it.

CONTAINER is a full container id, its name (the one the hook recorded from
config.json's annotations, reservations.name, or else the name Podman or
Docker gave it: ocihook/engine_names.py), or a prefix of an id of at least
MIN_PREFIX characters. A full id wins; otherwise names and id prefixes are
matched together and must find exactly one container: a name is chosen by
the tenant (an annotation, --name) and may equal another container's short
id, so two matches are refused with the candidates listed, never resolved by
an order. The check itself (the card, the container's use) is gpuslice-hook
resize's, the one writer of reservations.
"""
from __future__ import annotations

from typing import List, Optional

from ocihook import accountant, engine_names, units

MIN_PREFIX = 4


class ResizeError(ValueError):
    """A request that names no container, or a bad figure; one line."""


def find(acct: accountant.Accountant, container: str,
         names: Optional[engine_names.Lookup] = None) -> List[accountant.Reservation]:
    """The rows of the one container `container` names (see the module's
    docstring); names gives the engines' names of containers that recorded
    none."""
    rows = [r for u in acct.usage() for r in u.reservations]
    by_id = [r for r in rows if r.container_id == container]
    if by_id:
        return by_id  # a full id is the engine's, never the tenant's choice of name
    # A name is the tenant's own (an annotation it sets, or --name): it may
    # equal another container's id prefix, so a name and a prefix are weighed
    # together and anything they match twice is refused, never guessed.
    named = {cid for cid, name in engine_names.names_of(rows, names).items()
             if name and name == container}
    long_enough = len(container) >= MIN_PREFIX
    prefixed = {r.container_id for r in rows
                if long_enough and r.container_id.startswith(container)}
    found = named | prefixed
    if len(found) == 1:
        return [r for r in rows if r.container_id in found]
    if found:
        how = ", ".join(f"{cid[:12]} ({'name' if cid in named else 'id prefix'}"
                        f"{' and id prefix' if cid in named and cid in prefixed else ''})"
                        for cid in sorted(found))
        raise ResizeError(f"container {container!r} matches {len(found)} containers ({how}); "
                          "name one by its full id (`gpuslice status` lists them)")
    if any(r.container_id.startswith(container) for r in rows):
        raise ResizeError(f"container {container!r} is under {MIN_PREFIX} characters; give "
                          f"at least {MIN_PREFIX} of its id, or its full id or name")
    raise ResizeError(f"container {container!r} holds nothing: no id, id prefix or recorded "
                      "name matches; `gpuslice status` lists what is held")


def hook_args(rows: List[accountant.Reservation], memory: Optional[str],
              cores: Optional[str]) -> List[str]:
    """gpuslice-hook resize's arguments (the verb's own, without the common ones)."""
    if memory is None and cores is None:
        raise ResizeError("resize needs --memory SIZE, --cores N or both")
    args = ["--id", rows[0].container_id, "--device", rows[0].device]
    if memory is not None:
        try:
            args += ["--memory-mib", str(units.parse_memory_mib(memory))]
        except units.LimitError as e:
            raise ResizeError(f"--memory: {e}") from None
    if cores is not None:
        try:
            args += ["--cores", str(units.parse_cores(cores))]
        except units.LimitError as e:
            raise ResizeError(f"--cores: {e}") from None
    return args

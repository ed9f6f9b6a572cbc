"""What `gpuslice resize CONTAINER` resizes: the container the operator names,
found in the accountant's books, and the hook's arguments for it.

CONTAINER is a full container id, the name the engine recorded for it
(reservations.name), or a prefix of an id of at least MIN_PREFIX characters
that only one container has. The check itself (the card, the container's
use) is gpuslice-hook resize's, the one writer of reservations.
"""
from __future__ import annotations

from typing import List, Optional

from ocihook import accountant, units

MIN_PREFIX = 4


class ResizeError(ValueError):
    """A request that names no container, or a bad figure; one line."""


def _short(ids: List[str]) -> str:
    return ", ".join(sorted({i[:12] for i in ids}))


def find(acct: accountant.Accountant, container: str) -> List[accountant.Reservation]:
    """The rows of the one container `container` names (see the module's docstring)."""
    rows = [r for u in acct.usage() for r in u.reservations]
    by_id = [r for r in rows if r.container_id == container]
    if by_id:
        return by_id
    named = {r.container_id for r in rows if r.name and r.name == container}
    if len(named) > 1:
        raise ResizeError(f"container name {container!r} is recorded for {len(named)} "
                          f"containers ({_short(list(named))}); name one by its id")
    if named:
        return [r for r in rows if r.container_id in named]
    prefixed = {r.container_id for r in rows if r.container_id.startswith(container)}
    if len(container) >= MIN_PREFIX and len(prefixed) == 1:
        return [r for r in rows if r.container_id in prefixed]
    if len(container) >= MIN_PREFIX and prefixed:
        raise ResizeError(f"container {container!r} is the start of {len(prefixed)} ids "
                          f"({_short(list(prefixed))}); give more of the id")
    if prefixed:
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

"""What fits each card now, by the admission rule: `gpuslice-hook room`.

The rule (a card's capacity by the recorded memory_overcommit, what its
reservations leave free, nothing beside a whole card, compute caps adding up
to cores_limit, how many more slices of a profile fit) has one owner, the
hook's native/hook/hook/admission.c, which admits by it. The readers that
need it (`gpuslice status`'s free memory, the Nomad plugin's offers) ask the
hook here instead of deriving it a second time. It costs one exec of the
hook (a read transaction, no write): `gpuslice status` runs it once, the
plugin once a fingerprint, neither on a container's start.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

from cdi.profiles import Profile
from ocihook import hookcall
from ocihook.config import Config


class RoomError(RuntimeError):
    """The hook could not answer; the message is one line."""


@dataclass(frozen=True)
class CardRoom:
    """One card as the admission rule sees it now."""
    uuid: str
    index: int
    capacity_mib: int  # total x memory_overcommit
    reserved_mib: int
    cores: int  # the compute caps reserved, in percent
    exclusive: bool  # held whole
    free_mib: int
    fits: Tuple[int, ...]  # per profile asked for: how many more slices fit, health aside


def read(cfg: Config, profiles: Sequence[Profile] = ()) -> Dict[str, CardRoom]:
    """Every card the accountant knows, by uuid; fits follows profiles' order."""
    args = ["room"]
    for p in profiles:
        args += ["--profile", f"{p.memory_mib}:{p.cores or 0}"]
    res = hookcall.run(cfg, args, RoomError)
    if res.returncode != 0:
        raise RoomError(hookcall.last_line(res.stderr) if res.stderr.strip() else
                        f"{cfg.hook_path} room failed (exit status {res.returncode})")
    try:
        doc = json.loads(res.stdout)
        return {c["uuid"]: CardRoom(c["uuid"], c["index"], c["capacity_mib"],
                                    c["reserved_mib"], c["cores"], c["exclusive"],
                                    c["free_mib"], tuple(c["fits"])) for c in doc["cards"]}
    except (ValueError, KeyError, TypeError) as e:
        raise RoomError(f"{cfg.hook_path} room answered what this gpuslice cannot read "
                        f"({e}); is it another version of gpuslice-hook?") from None

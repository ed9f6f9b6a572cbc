"""Which instances each device group offers Nomad's scheduler, from the accountant.

A group is a profile (``gpuslice/gpu/4g-30``); its instances are the slices of
that profile that still fit on each card, as the admission rule's one owner
answers (``gpuslice-hook room``, ocihook/room.py) from the accountant's
reservations and policy, as containers come and go (whoever started them).
Nomad counts an instance its allocations hold as used only while the plugin
lists it as healthy, so an instance that was reserved leaves the list for good
(its slice is in the accountant's books now), and the free ones keep their IDs
from one fingerprint to the next: ``<card>-<profile>-<8 hex>``, fresh random
ones as room appears, the newest withdrawn first as it goes. A card out of
service lists what would fit there, unhealthy, with its reason.

Slices of different profiles share a card's room, which Nomad does not know:
after an 8g slice is reserved a card offers two 4g fewer at the next
fingerprint, and a placement made in between is refused by Reserve (the
accountant's answer), so the scheduler places the task again.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from cdi.profiles import Profile
from ocihook import accountant
from ocihook.room import CardRoom

Key = Tuple[str, str]  # (card uuid, profile name)


def offered_on(card: accountant.Card, profile: Profile) -> bool:
    """A profile is offered on a card as `gpuslice cdi generate` offers its
    device: not on a MIG card, not larger than the card."""
    return not card.mig and profile.memory_mib <= card.total_mib


@dataclass(frozen=True)
class Instance:
    id: str
    card: accountant.Card
    profile: Profile

    @property
    def healthy(self) -> bool:
        return self.card.healthy

    @property
    def device(self) -> str:
        """The CDI device (and the hook's --device) of this slice: `0-4g-30`."""
        return f"{self.card.index}-{self.profile.name}"


class Offers:
    """The instances offered now, by group. Not thread-safe: the plugin locks."""

    def __init__(self, mint: Callable[[], str] = lambda: secrets.token_hex(4)) -> None:
        self._mint = mint
        self._ids: Dict[Key, List[str]] = {}
        self._now: Dict[str, Instance] = {}

    def update(self, usage: Sequence[accountant.CardUsage], rooms: Dict[str, CardRoom],
               profiles: Sequence[Profile]) -> Dict[str, List[Instance]]:
        """Recompute from a reading of the accountant (its cards) and the hook's
        room (room.read with these profiles); the instances by profile name,
        every configured profile present (an empty group says it exists)."""
        groups: Dict[str, List[Instance]] = {p.name: [] for p in profiles}
        now: Dict[str, Instance] = {}
        seen = set()
        for use in usage:
            fits = rooms[use.card.uuid].fits if use.card.uuid in rooms else ()
            for k, p in enumerate(profiles):
                if not offered_on(use.card, p):
                    continue
                key = (use.card.uuid, p.name)
                seen.add(key)
                ids = self._ids.setdefault(key, [])
                # A card the room did not see yet (added in between) offers nothing.
                n = fits[k] if k < len(fits) else 0
                del ids[n:]
                while len(ids) < n:
                    ids.append(f"{use.card.index}-{p.name}-{self._mint()}")
                for i in ids:
                    now[i] = Instance(i, use.card, p)
                    groups[p.name].append(now[i])
        for key in [k for k in self._ids if k not in seen]:
            del self._ids[key]
        self._now = now
        return groups

    def find(self, instance_id: str) -> Optional[Instance]:
        return self._now.get(instance_id)

    def retire(self, instance_id: str) -> None:
        """A reserved instance: never offered again."""
        inst = self._now.pop(instance_id, None)
        if inst is not None:
            ids = self._ids.get((inst.card.uuid, inst.profile.name), [])
            if instance_id in ids:
                ids.remove(instance_id)

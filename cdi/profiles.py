"""Slice profiles and the device names built from them.

A profile is a named pair of limits (memory in MiB, compute in percent) and a
compute priority (``high``, ``normal``, ``low``: who of a card's tenants is
served first while several have work queued; docs/compute-limit.md). It is
offered per card as ``<card>-<profile>`` (``0-4g-30``), card-less as
``<profile>`` (``4g-30``), where the node accountant picks the card, and as a
gang ``<count>x<profile>`` (``2x4g-30``): that many slices of the profile, each
on its own card, placed together by the cards' topology. The name rule keeps
those forms apart from whole cards (``0``, ``all``, ``GPU-<uuid>``): a profile
name's first dash-separated part holds a letter, so ``0-4g`` can only mean card
0, profile ``4g``; and it does not start with digits and an ``x``, so ``2x4g``
can only mean two slices of ``4g``.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from cdi.limits import DEFAULT_PRIORITY, PRIORITIES


_PROFILE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_RESERVED = ("all",)
_GANG_RE = re.compile(r"^[0-9]+x")
# The most slices a gang may have: the devices of a container's shared
# region (GPUSLICE_MAX_DEVICES in native/include/gpuslice/region.h, which
# tests/test_gang.py compares; cdi/ reads no header).
MAX_GANG = 16


class ProfileError(ValueError):
    """A profile that breaks a rule; the message names the value and the rule."""


class Profile(NamedTuple):
    name: str
    memory_mib: int
    cores: int = 0  # percent of one card; 0 = no compute cap
    priority: str = DEFAULT_PRIORITY  # one of PRIORITIES

    def validate(self) -> None:
        validate_profile_name(self.name)
        validate_priority(self.priority)


def validate_profile_name(name: str) -> None:
    if not _PROFILE_RE.match(name):
        raise ProfileError(f"profile name {name!r} may hold only lowercase letters, digits and "
                           "single '-' between them")
    first = name.split("-", 1)[0]
    if not any(c.isalpha() for c in first):
        raise ProfileError(f"profile name {name!r} must have a letter before its first '-' "
                           "(e.g. 4g or 4g-30), so that it cannot be read as a card index")
    if name in _RESERVED or name.startswith("gpu-"):
        raise ProfileError(f"profile name {name!r} is reserved for whole-card devices")
    if _GANG_RE.match(name):
        raise ProfileError(f"profile name {name!r} starts with a number and 'x', the form of "
                           "a gang's device (2x4g: two slices of 4g); name it otherwise, "
                           "e.g. 4g")


def validate_priority(value: object) -> None:
    # isinstance first: YAML gives `priority: 3` as an int and `priority: yes` as a bool.
    if not isinstance(value, str) or value not in PRIORITIES:
        raise ProfileError(f"priority {value!r} is not {', '.join(PRIORITIES[:-1])} or "
                           f"{PRIORITIES[-1]}; use one of those, or leave priority out for "
                           f"{DEFAULT_PRIORITY}")


def slice_device_name(card_index: int, profile: Profile) -> str:
    return f"{card_index}-{profile.name}"


def gang_device_name(count: int, profile: Profile) -> str:
    return f"{count}x{profile.name}"

"""Slice profiles and the device names built from them.

A profile is a named pair of limits (memory in MiB, compute in percent). It is
offered per card as ``<card>-<profile>`` (``0-4g-30``) and card-less as
``<profile>`` (``4g-30``), where the node accountant picks the card. The name
rule keeps those forms apart from whole cards (``0``, ``all``, ``GPU-<uuid>``):
a profile name's first dash-separated part holds a letter, so ``0-4g`` can only
mean card 0, profile ``4g``.
"""
from __future__ import annotations

import re
from typing import NamedTuple


_PROFILE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_RESERVED = ("all",)


class ProfileError(ValueError):
    """A profile that breaks a rule; the message names the value and the rule."""


class Profile(NamedTuple):
    name: str
    memory_mib: int
    cores: int = 0  # percent of one card; 0 = no compute cap

    def validate(self) -> None:
        validate_profile_name(self.name)


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


def slice_device_name(card_index: int, profile: Profile) -> str:
    return f"{card_index}-{profile.name}"

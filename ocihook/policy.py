"""The node's admission policy and its rules: what the configuration file
says (ocihook/config.py parses it by these rules), what the accountant
records in its policy table (ocihook/accountant.py; the table's CHECKs and
gpuslice-hook's check of the row it reads say the same ranges) and what
`gpuslice status` shows. What a policy lets fit a card is the hook's rule
alone (ocihook/room.py asks it). The ranges are native/include/gpuslice/statedb.h's,
which the hook checks the recorded row against too. Imports nothing heavy
(every `gpuslice` command loads the configuration): cheader reads #defines
without cffi."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

from ocihook import cheader

PLACEMENTS = ("binpack", "spread")
OVERCOMMIT_MIN = float(cheader.constant("GPUSLICE_POLICY_OVERCOMMIT_MIN"))
OVERCOMMIT_MAX = float(cheader.constant("GPUSLICE_POLICY_OVERCOMMIT_MAX"))
CORES_LIMIT_MIN = cheader.constant("GPUSLICE_POLICY_CORES_LIMIT_MIN")
CORES_LIMIT_MAX = cheader.constant("GPUSLICE_POLICY_CORES_LIMIT_MAX")


@dataclass(frozen=True)
class Policy:
    """How the node admits: the one row of the policy table.

    placement: binpack (the fullest card that fits) or spread (the emptiest),
    for card-less devices; memory_overcommit: memory reservable on a card, as
    a multiple of its total (OVERCOMMIT_MIN-OVERCOMMIT_MAX); cores_limit: the
    sum of compute caps one card may carry (CORES_LIMIT_MIN-CORES_LIMIT_MAX)."""

    placement: str = "binpack"
    memory_overcommit: float = 1.0
    cores_limit: int = 100

    def differences(self, other: "Policy") -> Dict[str, Tuple[object, object]]:
        """{key: (self's, other's)} for each rule the two disagree on."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}

    def to_dict(self) -> Dict[str, object]:
        return {"placement": self.placement, "memory_overcommit": self.memory_overcommit,
                "cores_limit": self.cores_limit}

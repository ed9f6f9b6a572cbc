"""The rule that turns a job's shards into a slice: k of a card's N shards is
k/N of its memory, rounded down to the 128 MiB grain, and, when the
configuration asks for it (slurm_cores), k/N of its compute."""
from __future__ import annotations

from dataclasses import dataclass

from ocihook import units


class ShardError(ValueError):
    """A request that cannot be sliced; one line naming the value and the rule."""


@dataclass(frozen=True)
class Slice:
    shards: int
    of: int
    memory_mib: int
    cores: int  # 0: no compute cap


def slice_of(shards: int, per_card: int, total_mib: int, cap_cores: bool) -> Slice:
    """k = shards of per_card on a card of total_mib."""
    if not 1 <= shards <= per_card:
        raise ShardError(f"the job has {shards} shards of a card that gpuslice cuts in "
                         f"{per_card} (configuration key slurm_shards): the node's gres.conf "
                         "and gpuslice disagree; run `gpuslice slurm gres --check`")
    step = units.MEMORY_STEP_MIB
    memory = total_mib * shards // per_card // step * step
    if memory < units.MEMORY_MIN_MIB:
        raise ShardError(f"{shards} of {per_card} shards of a {total_mib} MiB card is under "
                         f"{units.MEMORY_MIN_MIB} MiB; ask for more shards or lower "
                         "slurm_shards")
    cores = max(1, 100 * shards // per_card) if cap_cores else 0
    return Slice(shards, per_card, memory, cores)

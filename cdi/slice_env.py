"""A slice's environment: what its processes are told of their limits.

One function for every place that gives a slice to a container: the CDI
spec's device edits (cdi/generate.py) and the Nomad plugin's reservation
(ocihook/nomad/reserve.py). Inside a container admitted by gpuslice-hook
these caps only say that the shim is to cap; the figures that hold are the
region's, which the hook writes from the accountant's row (docs/architecture.md,
Where a cap lives). A process that finds no region takes them as its own.
"""
from __future__ import annotations

from typing import Dict, Optional

from cdi.limits import (CORE_LIMIT_ENV, MEMORY_LIMIT_ENV, MPS_MEMORY_ENV, MPS_PIPE_ENV,
                        MPS_THREADS_ENV, PRIORITY_ENV)
from cdi.profiles import Profile


def slice_env(profile: Profile, mps_pipe: Optional[str] = None) -> Dict[str, str]:
    """The limit variables of a slice of profile, in the order a spec lists
    them. On a card in MPS mode (mps_pipe: where the container sees its
    control daemon's pipes) the compute share is MPS's SM share, not the
    pacer's card time, and MPS caps the device memory too, behind the shim:
    the container's one card is its CUDA device 0."""
    env = {MEMORY_LIMIT_ENV: f"{profile.memory_mib}MiB"}
    if mps_pipe is not None:
        env[MPS_PIPE_ENV] = mps_pipe
        if profile.cores:
            env[MPS_THREADS_ENV] = str(profile.cores)
        env[MPS_MEMORY_ENV] = f"0={profile.memory_mib}M"
    elif profile.cores:
        env[CORE_LIMIT_ENV] = str(profile.cores)
    # Always, normal too: a spec's env replaces a variable of the same name
    # that the container set itself, so the operator's priority is the one it
    # starts with (the accountant records the same).
    env[PRIORITY_ENV] = profile.priority
    return env

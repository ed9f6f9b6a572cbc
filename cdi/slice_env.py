"""A slice's environment: what its processes are told of their limits.

One function for every place that gives a slice to a container: the CDI
spec's device edits (cdi/generate.py) and the Nomad plugin's reservation
(ocihook/nomad/reserve.py). Inside a container admitted by gpuslice-hook
these caps only say that the shim is to cap; the figures that hold are the
region's, which the hook writes from the accountant's row (docs/architecture.md,
Where a cap lives). A process that finds no region takes them as its own.
"""
from __future__ import annotations

from typing import Dict

from cdi.limits import CORE_LIMIT_ENV, MEMORY_LIMIT_ENV, PRIORITY_ENV
from cdi.profiles import Profile


def slice_env(profile: Profile) -> Dict[str, str]:
    """The limit variables of a slice of profile, in the order a spec lists them."""
    env = {MEMORY_LIMIT_ENV: f"{profile.memory_mib}MiB"}
    if profile.cores:
        env[CORE_LIMIT_ENV] = str(profile.cores)
    # Always, normal too: a spec's env replaces a variable of the same name
    # that the container set itself, so the operator's priority is the one it
    # starts with (the accountant records the same).
    env[PRIORITY_ENV] = profile.priority
    return env

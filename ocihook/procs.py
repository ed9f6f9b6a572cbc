"""Whether a process recorded earlier is still the same process.

A pid alone is not enough: pids are reused. A process is identified by its
pid and its start time (field 22 of /proc/<pid>/stat, in clock ticks since
boot), the same pair the shim records in the shared region.
"""
from __future__ import annotations

from typing import Optional


def start_time(pid: int, proc: str = "/proc") -> Optional[int]:
    """The start time of pid, or None if there is no such process."""
    if pid <= 0:
        return None
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after
    # its last ')'.
    rest = data[data.rfind(b")") + 2:].split()
    try:
        return int(rest[19])  # field 22; rest starts at field 3
    except (IndexError, ValueError):
        return None


def alive(pid: Optional[int], started: Optional[int], proc: str = "/proc") -> bool:
    """True while pid runs and is the process that started at `started`.

    A record without a pid (the hook could not learn it) counts as alive:
    only an operator's `gpuslice release` or a poststop removes it.
    """
    if not pid:
        return True
    now = start_time(pid, proc)
    return now is not None and (started is None or now == started)

"""Read-only view of a container's shared region (the file libgpuslice.so maps).

The layout comes from the shim's own header, native/include/gpuslice/
region.h (and cardfile.h), parsed by cffi through ocihook.cheader: one
definition for C and Python. A file with another
magic, version or size is refused rather than misread.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple

from ocihook import cheader

KIND_NAMES = ("context", "alloc", "vmm", "pool", "array")


class RegionError(ValueError):
    """A region file that cannot be read as ours; the message names the file and why."""


@dataclass(frozen=True)
class ProcUsage:
    pid: int
    start_time: int
    used: List[List[int]]  # [device][kind] in bytes


@dataclass(frozen=True)
class DeviceUsage:
    index: int
    uuid: str
    limit_bytes: int
    total_bytes: int
    used_bytes: int
    core_limit: int
    priority: str              # what the container's env claims: high, normal or low
    compute_charged_ns: int    # card time charged to the container's compute budget
    compute_throttled_ns: int  # time its processes slept for the cap
    compute_launches: int      # launches the limiter saw


@dataclass(frozen=True)
class Region:
    path: str
    devices: List[DeviceUsage]
    procs: List[ProcUsage]


def read(path: str) -> Region:
    """A consistent-enough snapshot: counters are read as they are, without the lock."""
    ffi = cheader.ffi()
    size = ffi.sizeof("struct gpuslice_region")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise RegionError(f"{path}: cannot open: {e.strerror}") from None
    try:
        if os.fstat(fd).st_size < size:
            raise RegionError(f"{path}: {os.fstat(fd).st_size} bytes, a region has {size}")
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            buf = bytes(m)
    finally:
        os.close(fd)
    r = ffi.cast("struct gpuslice_region *", ffi.from_buffer(buf))
    lib = ffi.dlopen(None)
    want: Tuple[int, int, int] = (lib.GPUSLICE_REGION_MAGIC, lib.GPUSLICE_REGION_VERSION, size)
    got = (r.magic, r.version, r.size)
    if got != want:
        raise RegionError(f"{path}: magic/version/size {got} is not a gpuslice region {want}; "
                          "refusing to guess its layout")
    n = min(r.device_count, lib.GPUSLICE_MAX_DEVICES)
    priorities = {lib.GPUSLICE_PRIORITY_HIGH: "high", lib.GPUSLICE_PRIORITY_LOW: "low"}
    devices = [DeviceUsage(i, ffi.string(d.uuid).decode(errors="replace"), d.limit_bytes,
                           d.total_bytes, d.used_bytes, d.core_limit,
                           priorities.get(d.priority, "normal"), d.compute.charged_ns,
                           d.compute.throttled_ns, d.compute.launches)
               for i, d in ((i, r.devices[i]) for i in range(n))]
    procs = []
    for i in range(lib.GPUSLICE_MAX_PROCS):
        p = r.procs[i]
        if p.state == lib.GPUSLICE_SLOT_LIVE:
            procs.append(ProcUsage(p.pid, p.start_time,
                                   [[p.used[d][k] for k in range(lib.GPUSLICE_KINDS)]
                                    for d in range(n)]))
    return Region(path, devices, procs)


@dataclass(frozen=True)
class Card:
    path: str
    managed_ns: int                  # CLOCK_MONOTONIC when a capped or prioritised tenant last ran; 0: none
    backlog_ns: List[Tuple[int, int]]  # (owner token, backlog until) of every taken slot
    turn_owner: int                  # token of the process whose turn it is; 0: nobody's


def read_card(path: str) -> Card:
    """A card file (<card dir>/<GPU UUID>): who competes for the card."""
    ffi = cheader.ffi()
    size = ffi.sizeof("struct gpuslice_cardfile")
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise RegionError(f"{path}: cannot read: {e.strerror}") from None
    lib = ffi.dlopen(None)
    if len(data) != size:
        raise RegionError(f"{path}: {len(data)} bytes, a card file has {size}")
    c = ffi.cast("struct gpuslice_cardfile *", ffi.from_buffer(data))
    if (c.magic, c.version) != (lib.GPUSLICE_CARDFILE_MAGIC, lib.GPUSLICE_CARDFILE_VERSION):
        raise RegionError(f"{path}: magic/version {(c.magic, c.version)} is not a gpuslice "
                          "card file of this version")
    slots = [(c.slots[i].owner, c.slots[i].backlog_ns) for i in range(lib.GPUSLICE_CARDFILE_SLOTS)
             if c.slots[i].owner]
    return Card(path, c.managed_ns, slots, c.turn_owner)

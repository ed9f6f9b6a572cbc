"""Read-only view of a container's shared region (the file libgpuslice.so maps).

The layout comes from the shim's own header, native/include/gpuslice/
region.h (and cardfile.h), parsed by cffi through ocihook.cheader: one
definition for C and Python. A file with another
magic, version or size is refused rather than misread.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Tuple

from cdi import regularfile
from ocihook import cheader

KIND_NAMES = ("context", "alloc", "vmm", "pool", "array")


class RegionError(ValueError):
    """A region file that cannot be read as ours; the message names the file and why."""


class NoRegion(RegionError):
    """No region yet: no file, or one the shim has not sized yet (no CUDA
    process of the container has run)."""


@dataclass(frozen=True)
class ProcUsage:
    pid: int
    start_time: int
    used: List[List[int]]  # [device][kind] in bytes
    host_pid: int = 0      # the pid the driver knows it by, as the process learnt it; 0: not yet


@dataclass(frozen=True)
class DeviceUsage:
    index: int
    uuid: str
    limit_bytes: int
    total_bytes: int
    used_bytes: int
    core_limit: int
    priority: str              # a word of limits.h: the accountant's (the hook wrote it)
    compute_charged_ns: int    # card time charged to the container's compute budget
    compute_throttled_ns: int  # time its processes slept for the cap
    compute_launches: int      # launches the limiter saw


@dataclass(frozen=True)
class Region:
    path: str
    devices: List[DeviceUsage]
    procs: List[ProcUsage]


def _read_exactly(path: str, size: int, what: str) -> bytes:
    """The bytes of a file the shim makes in a folder tenants write: a regular
    file, not through a symbolic link, of exactly `size` bytes; read, not
    mapped, so that a file cut short meanwhile cannot fault the reader."""
    try:
        fd, st = regularfile.open_regular(path, follow_links=False)
    except FileNotFoundError as e:
        raise NoRegion(f"{path}: cannot open: {e.strerror}") from None
    except OSError as e:
        raise RegionError(f"{path}: cannot open: {e.strerror}") from None
    except regularfile.NotRegular as e:
        raise RegionError(f"{e}; {what} is a regular file that libgpuslice.so makes, so this "
                          "one is not read") from None
    try:
        if st.st_size == 0:  # made, not yet sized by the shim (it does so under its lock)
            raise NoRegion(f"{path}: empty: the shim has not made it yet")
        if st.st_size != size:
            raise RegionError(f"{path}: {st.st_size} bytes, {what} has {size}; refusing to "
                              "guess its layout")
        data = regularfile.read_at_most(fd, size)
    finally:
        os.close(fd)
    if len(data) != size:
        raise RegionError(f"{path}: changed size while read ({len(data)} bytes, {what} has "
                          f"{size})")
    return data


class _ConstantsOf:
    """region.h's integer #defines as attributes, from cheader's parse of it."""

    def __getattr__(self, name: str) -> int:
        value = cheader.constant(name)
        setattr(self, name, value)
        return value


_Constants = _ConstantsOf()


@lru_cache(maxsize=None)
def _priority_words() -> Dict[int, str]:
    codes = ("GPUSLICE_PRIORITY_NORMAL", "GPUSLICE_PRIORITY_HIGH", "GPUSLICE_PRIORITY_LOW")
    return {cheader.constant(c): cheader.string(c + "_WORD") for c in codes}


def priority_word(code: int) -> str:
    """The word of a region's priority number (limits.h); a number it does not
    define is the tenant's lie, shown as the default."""
    words = _priority_words()
    return words.get(code, words[cheader.constant("GPUSLICE_PRIORITY_NORMAL")])


@lru_cache(maxsize=None)
def _state_bytes() -> Tuple[int, int]:
    """Where the low byte of procs[0].state lies in a region, and the entries' stride."""
    ffi = cheader.ffi()
    first = ffi.offsetof("struct gpuslice_region", "procs") + \
        ffi.offsetof("struct gpuslice_proc", "state") + \
        (0 if sys.byteorder == "little" else ffi.sizeof("unsigned int") - 1)
    return first, ffi.sizeof("struct gpuslice_proc")


def read(path: str) -> Region:
    """A consistent-enough snapshot: counters are read as they are, without the lock.

    The file is in a folder the container writes (mounted at /run/gpuslice
    inside), so it is opened as a tenant may have made it (_read_exactly).
    NoRegion: none yet. Every figure in it is the tenant's claim: callers
    bound what they show (ocihook/status.py).
    """
    ffi = cheader.ffi()
    size = ffi.sizeof("struct gpuslice_region")
    buf = _read_exactly(path, size, "a region")
    r = ffi.cast("struct gpuslice_region *", ffi.from_buffer(buf))
    lib = _Constants  # region.h's #defines, looked up once (a scrape reads every region)
    want: Tuple[int, int, int] = (lib.GPUSLICE_REGION_MAGIC, lib.GPUSLICE_REGION_VERSION, size)
    got = (r.magic, r.version, r.size)
    if got == (0, 0, 0):  # sized, not yet filled in by the process that made it
        raise NoRegion(f"{path}: not filled in yet: the shim is making the region")
    if got != want:
        raise RegionError(f"{path}: magic/version/size {got} is not a gpuslice region {want}; "
                          "refusing to guess its layout")
    n = min(r.device_count, lib.GPUSLICE_MAX_DEVICES)
    devices = [DeviceUsage(i, ffi.string(d.uuid).decode(errors="replace"), d.limit_bytes,
                           d.total_bytes, d.used_bytes, d.core_limit,
                           priority_word(d.priority), d.compute.charged_ns,
                           d.compute.throttled_ns, d.compute.launches)
               for i, d in ((i, r.devices[i]) for i in range(n))]
    procs = []
    # The low byte of every entry's state, sliced out in one step: only entries where
    # it could say LIVE are looked at through cffi (a scrape reads every region).
    first, stride = _state_bytes()
    low = buf[first::stride][:lib.GPUSLICE_MAX_PROCS]
    live = bytes([lib.GPUSLICE_PROC_LIVE & 0xff])
    i = low.find(live)
    while i >= 0:
        p = r.procs[i]
        i = low.find(live, i + 1)
        if p.state == lib.GPUSLICE_PROC_LIVE:
            procs.append(ProcUsage(p.pid, p.start_time,
                                   [[p.used[d][k] for k in range(lib.GPUSLICE_KINDS)]
                                    for d in range(n)], p.host_pid))
    return Region(path, devices, procs)


@dataclass(frozen=True)
class Card:
    path: str
    managed_ns: int                  # CLOCK_MONOTONIC when a capped or prioritised tenant last ran; 0: none
    backlog_ns: List[Tuple[int, int]]  # (owner token, backlog until) of every taken seat
    turn_owner: int                  # token of the process whose turn it is; 0: nobody's
    seq: int                         # bumped when the turn changes hands or a stamp is let go early


def read_card(path: str) -> Card:
    """A card file (<card dir>/<GPU UUID>): who competes for the card."""
    ffi = cheader.ffi()
    size = ffi.sizeof("struct gpuslice_cardfile")
    data = _read_exactly(path, size, "a card file")
    lib = ffi.dlopen(None)
    c = ffi.cast("struct gpuslice_cardfile *", ffi.from_buffer(data))
    if (c.magic, c.version) != (lib.GPUSLICE_CARDFILE_MAGIC, lib.GPUSLICE_CARDFILE_VERSION):
        raise RegionError(f"{path}: magic/version {(c.magic, c.version)} is not a gpuslice "
                          "card file of this version")
    seats = [(c.seats[i].owner, c.seats[i].backlog_ns) for i in range(lib.GPUSLICE_CARDFILE_SEATS)
             if c.seats[i].owner]
    return Card(path, c.managed_ns, seats, c.turn_owner, c.seq)
